/* rft_data.h - reinforcement fine-tuning data (OpenAI's RFT JSONL) for GRPO: prompts and their items.
 *
 * Each non-blank line is one JSON object {"messages": [{"role": "system"|"developer"|"user"|
 * "assistant", "content": …}, …], any other fields}. The messages are the prompt: they are rendered
 * with the model's chat template followed by the assistant header (the turn the model writes), so
 * they must not end with an assistant turn. The whole line object is kept as the grader's `item`
 * ({{item.answer}} reads the line's "answer"). A prompt whose tokens leave no room for a response
 * within max_seq_len (longer than max_prompt_len) is left out and counted, never cut. Any malformed
 * line is an error "PATH: line N: FIELD: what is wrong". */
#ifndef WHET_RFT_DATA_H
#define WHET_RFT_DATA_H

#include <jansson.h>

#include "util.h"

struct chat_template;
struct tokenizer;

struct rft_prompt {
    int *ids;     /* [n] the rendered prompt, ending with the assistant header */
    int n;
    json_t *item; /* the line's object (a reference owned by the dataset) */
    int line;     /* 1-based line number in the file */
};

struct rft_dataset {
    int n_prompts, cap;
    struct rft_prompt *prompts;
    long long n_tokens; /* prompt tokens of the prompts kept */
    int n_too_long;     /* prompts left out: more than max_prompt_len tokens */
    int n_lines;        /* non-blank lines read */
    /* 1: rft_dataset_add_line counts a prompt (n_prompts, n_tokens) without keeping it, for a set that is
     * only measured (the gateway's estimate, gateway/estimate.h); prompts stays NULL. */
    int count_only;
};

/* Reads `path`; prompts of more than max_prompt_len tokens are counted in n_too_long and left out.
 * Fails when a line is malformed or no prompt is left. */
int rft_dataset_load(struct rft_dataset *ds, const char *path, const struct chat_template *tpl,
                     const struct tokenizer *tok, int max_prompt_len, struct whet_err *err);
/* Adds the prompt of one line of such a file, line `lineno` (rft_dataset_load calls it for each non-blank
 * line); an error is "FIELD: what is wrong". */
int rft_dataset_add_line(struct rft_dataset *ds, const char *line, size_t len, int lineno,
                         const struct chat_template *tpl, const struct tokenizer *tok, int max_prompt_len,
                         struct whet_err *err);
void rft_dataset_free(struct rft_dataset *ds);

#endif
