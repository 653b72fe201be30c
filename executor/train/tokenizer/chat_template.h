/* chat_template.h - the chat formats of the model families whet serves, without a Jinja engine.
 *
 * A model's tokenizer_config.json carries a Jinja `chat_template`; whet recognises which family it
 * belongs to (ChatML as used by Qwen, or Llama 3) and renders messages with a hand-written copy of
 * that family's format, byte for byte what the template produces for plain system/user/assistant
 * conversations. Rendering yields the text and the byte spans that are trained (the content of each
 * assistant turn whose weight is not 0, and the end-of-turn token that closes it); tokenizing then
 * turns the spans into a per-token loss mask.
 *
 *   ChatML:  <|im_start|>system\n{content}<|im_end|>\n<|im_start|>user\n…<|im_end|>\n
 *            <|im_start|>assistant\n[{content}<|im_end|>]\n
 *   Llama 3: <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{content}<|eot_id|>
 *            <|start_header_id|>assistant<|end_header_id|>\n\n[{content}<|eot_id|>]
 * (brackets: the trained span). */
#ifndef WHET_CHAT_TEMPLATE_H
#define WHET_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct tokenizer;

enum chat_family { CHAT_CHATML, CHAT_LLAMA3 };

struct chat_template {
    enum chat_family family;
    /* ChatML (Qwen 2/2.5): the system message the template inserts when the conversation has none,
     * or NULL when the template inserts nothing (Qwen 3, plain ChatML). Owned. */
    char *default_system;
    /* ChatML (Qwen 3): assistant turns carry a <think>…</think> block (empty on the final turn). */
    int chatml_think;
    /* Llama 3.1+: the template always opens with a system header carrying these date lines. */
    int llama3_date_header;
    /* The template prints the assistant header at the end whether or not a generation prompt is
     * asked for (the first Llama 3 release's template does: it never reads add_generation_prompt). */
    int always_generation_prompt;
};

struct chat_message {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content;
    int weight;          /* assistant turns: 1 trains on it, 0 does not; ignored for other roles */
};

/* The rendered text and the byte ranges [begin, end) that carry loss. */
struct chat_rendered {
    char *text;
    size_t len;
    size_t n_spans;
    size_t (*spans)[2];
};

/* Recognises the family from the Jinja source of a chat template. */
int chat_template_detect(struct chat_template *tpl, const char *jinja, struct whet_err *err);
/* Reads MODEL_DIR/tokenizer_config.json and detects its chat_template (a string, or the list form
 * [{name, template}] from which "default" is taken). Without a chat_template, the family's plain
 * format is chosen from the special tokens in added_tokens_decoder (<|im_start|>: ChatML,
 * <|start_header_id|>: Llama 3). */
int chat_template_load(struct chat_template *tpl, const char *model_dir, struct whet_err *err);
/* The same from a parsed tokenizer_config.json (the gateway reads it from the object store); `path` names
 * it in errors. */
int chat_template_from_config(struct chat_template *tpl, json_t *config, const char *path, struct whet_err *err);
void chat_template_free(struct chat_template *tpl);
const char *chat_family_name(enum chat_family f);

/* Renders `msgs` (roles checked: system only first, user/assistant otherwise) and, when
 * `add_generation_prompt`, the header of the assistant turn to come. */
int chat_render(struct chat_rendered *out, const struct chat_template *tpl, const struct chat_message *msgs,
                int n_msgs, int add_generation_prompt, struct whet_err *err);
void chat_rendered_free(struct chat_rendered *r);

/* Renders and tokenizes: `*ids` (the tokens of the whole text, exactly as the tokenizer encodes the
 * rendered text) and `*mask` (1 where that token is trained), both of `*n` entries, owned by the
 * caller. A token is trained when any of its bytes lies in a trained span. */
int chat_tokenize(int32_t **ids, uint8_t **mask, int *n, const struct chat_template *tpl,
                  const struct tokenizer *tok, const struct chat_message *msgs, int n_msgs,
                  int add_generation_prompt, struct whet_err *err);

#endif
