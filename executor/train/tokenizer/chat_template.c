/* chat_template.c - ChatML and Llama 3 rendering with trained spans (see chat_template.h).
 *
 * The formats below are transcriptions of what the published Jinja templates print for
 * system/user/assistant conversations without tools: Qwen's ChatML (with Qwen 2/2.5's default system
 * message when the template has one) and Meta's Llama 3 / 3.1+ (3.1 adds a system header with the
 * knowledge-cutoff and date lines, and trims every content). */
#include "chat_template.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "json.h"
#include "tokenizer.h"

const char *chat_family_name(enum chat_family f) {
    return f == CHAT_CHATML ? "chatml" : "llama3";
}

/* ---------------------------------------------------------------- detection */

/* Qwen 2/2.5 insert this system message when the conversation has none. */
static const char qwen2_default_system[] = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
/* Llama 3.1+ print "Today Date: " + date_string, whose default in the template is this date. */
static const char llama3_default_date[] = "26 Jul 2024";

int chat_template_detect(struct chat_template *tpl, const char *jinja, struct whet_err *err) {
    memset(tpl, 0, sizeof *tpl);
    tpl->always_generation_prompt = !strstr(jinja, "add_generation_prompt");
    if (strstr(jinja, "<|im_start|>")) {
        tpl->family = CHAT_CHATML;
        if (strstr(jinja, qwen2_default_system)) tpl->default_system = xstrdup(qwen2_default_system);
        tpl->chatml_think = strstr(jinja, "reasoning_content") != NULL;
        return 0;
    }
    if (strstr(jinja, "<|start_header_id|>")) {
        tpl->family = CHAT_LLAMA3;
        tpl->llama3_date_header = strstr(jinja, "Cutting Knowledge Date") != NULL;
        return 0;
    }
    return whet_errf(err, "chat_template: not a template whet knows (it recognises ChatML, with "
                          "<|im_start|>, and Llama 3, with <|start_header_id|>)");
}

int chat_template_load(struct chat_template *tpl, const char *model_dir, struct whet_err *err) {
    char *path = xasprintf("%s/tokenizer_config.json", model_dir);
    json_t *root = whet_json_load_file(path, 0, err);
    int rc = root ? chat_template_from_config(tpl, root, path, err) : -1;
    json_decref(root);
    free(path);
    return rc;
}

int chat_template_from_config(struct chat_template *tpl, json_t *root, const char *path, struct whet_err *err) {
    json_t *t = json_object_get(root, "chat_template");
    if (json_is_array(t)) { /* [{name, template}, …]: the "default" one renders conversations */
        size_t i;
        json_t *entry, *chosen = NULL;
        json_array_foreach(t, i, entry) {
            json_t *name = json_object_get(entry, "name");
            if (json_is_string(name) && !strcmp(json_string_value(name), "default"))
                chosen = json_object_get(entry, "template");
        }
        t = chosen;
    }
    const char *jinja = json_is_string(t) ? json_string_value(t) : NULL;
    if (!jinja && !t) {
        /* Base models often ship no template: their special tokens still tell the family, whose
         * plain format is then used. */
        json_t *added = json_object_get(root, "added_tokens_decoder");
        const char *id;
        json_t *entry;
        json_object_foreach(added, id, entry) {
            const char *content = json_string_value(json_object_get(entry, "content"));
            if (content && !strcmp(content, "<|im_start|>")) jinja = "<|im_start|> add_generation_prompt";
            if (content && !strcmp(content, "<|start_header_id|>")) jinja = "<|start_header_id|> add_generation_prompt";
        }
    }
    if (!jinja)
        return whet_errf(err, "%s: chat_template: missing (a string, or a list with a \"default\" entry), and no "
                              "ChatML or Llama 3 special token in added_tokens_decoder to fall back on", path);
    int rc = chat_template_detect(tpl, jinja, err);
    if (rc) whet_err_prefix(err, "%s", path);
    return rc;
}

void chat_template_free(struct chat_template *tpl) {
    free(tpl->default_system);
    memset(tpl, 0, sizeof *tpl);
}

/* ---------------------------------------------------------------- rendering */

struct text_builder {
    struct whet_buf text;
    size_t n_spans, cap_spans;
    size_t (*spans)[2];
};

static void builder_span(struct text_builder *b, size_t begin, size_t end) {
    if (b->n_spans == b->cap_spans) {
        b->cap_spans = b->cap_spans ? 2 * b->cap_spans : 8;
        b->spans = xrealloc(b->spans, b->cap_spans * sizeof *b->spans);
    }
    b->spans[b->n_spans][0] = begin;
    b->spans[b->n_spans][1] = end;
    b->n_spans++;
}

/* Jinja's `| trim`: Python's str.strip() of ASCII whitespace (what Llama 3.1 applies to contents). */
static void builder_trimmed(struct text_builder *b, const char *s) {
    size_t n = strlen(s);
    while (n && strchr(" \t\n\r\f\v", s[n - 1])) n--;
    while (n && strchr(" \t\n\r\f\v", *s)) s++, n--;
    whet_buf_append(&b->text, s, n);
}

static int check_roles(const struct chat_message *msgs, int n, struct whet_err *err) {
    for (int i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!strcmp(r, "system")) {
            if (i) return whet_errf(err, "messages[%d]: a system message may only come first", i);
        } else if (strcmp(r, "user") && strcmp(r, "assistant")) {
            return whet_errf(err, "messages[%d].role: must be \"system\", \"user\" or \"assistant\", got \"%s\"", i, r);
        }
    }
    return 0;
}

/* Qwen 3's assistant turns: the template splits a "<think>…</think>" prefix off the content and, for
 * the turns after the last user message, prints it back (empty on the final turn when there was
 * none); earlier turns lose their reasoning. Python's strip('\n') family, as the template uses. */
static void render_qwen3_assistant(struct text_builder *b, const char *content, int after_last_query, int is_last) {
    const char *first_close = strstr(content, "</think>"), *last_close = first_close;
    for (const char *p = first_close; p; p = strstr(p + 1, "</think>")) last_close = p;
    const char *answer = content, *reasoning = "";
    size_t reasoning_len = 0;
    if (first_close) {
        reasoning = content; /* after the last <think> before the first </think> */
        for (const char *p = strstr(content, "<think>"); p && p < first_close; p = strstr(p + 1, "<think>"))
            reasoning = p + strlen("<think>");
        reasoning_len = (size_t)(first_close - reasoning);
        answer = last_close + strlen("</think>");
        while (*answer == '\n') answer++;
    }
    while (reasoning_len && *reasoning == '\n') reasoning++, reasoning_len--;
    while (reasoning_len && reasoning[reasoning_len - 1] == '\n') reasoning_len--;
    if (after_last_query && (is_last || reasoning_len)) {
        whet_buf_puts(&b->text, "<think>\n");
        whet_buf_append(&b->text, reasoning, reasoning_len);
        whet_buf_puts(&b->text, "\n</think>\n\n");
        while (*answer == '\n') answer++;
    }
    whet_buf_puts(&b->text, answer);
}

static void render_chatml(struct text_builder *b, const struct chat_template *tpl, const struct chat_message *msgs,
                          int n, int add_generation_prompt) {
    if (tpl->default_system && (n == 0 || strcmp(msgs[0].role, "system"))) {
        whet_buf_puts(&b->text, "<|im_start|>system\n");
        whet_buf_puts(&b->text, tpl->default_system);
        whet_buf_puts(&b->text, "<|im_end|>\n");
    }
    int last_query = -1;
    for (int i = 0; i < n; i++)
        if (!strcmp(msgs[i].role, "user")) last_query = i;
    for (int i = 0; i < n; i++) {
        whet_buf_puts(&b->text, "<|im_start|>");
        whet_buf_puts(&b->text, msgs[i].role);
        whet_buf_puts(&b->text, "\n");
        size_t begin = b->text.len;
        if (tpl->chatml_think && !strcmp(msgs[i].role, "assistant"))
            render_qwen3_assistant(b, msgs[i].content, i > last_query, i == n - 1);
        else
            whet_buf_puts(&b->text, msgs[i].content);
        whet_buf_puts(&b->text, "<|im_end|>");
        if (!strcmp(msgs[i].role, "assistant") && msgs[i].weight) builder_span(b, begin, b->text.len);
        whet_buf_puts(&b->text, "\n");
    }
    if (add_generation_prompt) whet_buf_puts(&b->text, "<|im_start|>assistant\n");
}

static void render_llama3(struct text_builder *b, const struct chat_template *tpl, const struct chat_message *msgs,
                          int n, int add_generation_prompt) {
    whet_buf_puts(&b->text, "<|begin_of_text|>");
    int first = 0;
    if (tpl->llama3_date_header) {
        /* 3.1+: the system turn is always there and opens with the date lines. */
        whet_buf_puts(&b->text,
                      "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
        whet_buf_puts(&b->text, llama3_default_date);
        whet_buf_puts(&b->text, "\n\n");
        if (n && !strcmp(msgs[0].role, "system")) {
            builder_trimmed(b, msgs[0].content);
            first = 1;
        }
        whet_buf_puts(&b->text, "<|eot_id|>");
    }
    for (int i = first; i < n; i++) {
        whet_buf_puts(&b->text, "<|start_header_id|>");
        whet_buf_puts(&b->text, msgs[i].role);
        whet_buf_puts(&b->text, "<|end_header_id|>\n\n");
        size_t begin = b->text.len;
        builder_trimmed(b, msgs[i].content);
        whet_buf_puts(&b->text, "<|eot_id|>");
        if (!strcmp(msgs[i].role, "assistant") && msgs[i].weight) builder_span(b, begin, b->text.len);
    }
    if (add_generation_prompt) whet_buf_puts(&b->text, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

int chat_render(struct chat_rendered *out, const struct chat_template *tpl, const struct chat_message *msgs,
                int n_msgs, int add_generation_prompt, struct whet_err *err) {
    memset(out, 0, sizeof *out);
    if (check_roles(msgs, n_msgs, err)) return -1;
    struct text_builder b = {0};
    whet_buf_append(&b.text, "", 0);
    add_generation_prompt |= tpl->always_generation_prompt;
    if (tpl->family == CHAT_CHATML)
        render_chatml(&b, tpl, msgs, n_msgs, add_generation_prompt);
    else
        render_llama3(&b, tpl, msgs, n_msgs, add_generation_prompt);
    out->text = b.text.data;
    out->len = b.text.len;
    out->spans = b.spans;
    out->n_spans = b.n_spans;
    return 0;
}

void chat_rendered_free(struct chat_rendered *r) {
    free(r->text);
    free(r->spans);
    memset(r, 0, sizeof *r);
}

/* ---------------------------------------------------------------- tokenizing */

/* Fallback when the token bytes do not add up to the text (an added token that strips its
 * neighbours' whitespace, say): encode the trained and untrained stretches one by one. Special tokens
 * still split the text the same way, so only a pre-token straddling a span edge could differ. */
static int tokenize_by_pieces(int32_t **ids, uint8_t **mask, int *n, const struct tokenizer *tok,
                              const struct chat_rendered *r, struct whet_err *err) {
    size_t cap = 0, used = 0;
    int32_t *all = NULL;
    uint8_t *m = NULL;
    size_t at = 0;
    for (size_t s = 0; s <= r->n_spans; s++) {
        size_t pieces[2][2] = {{at, s < r->n_spans ? r->spans[s][0] : r->len},
                               {s < r->n_spans ? r->spans[s][0] : r->len, s < r->n_spans ? r->spans[s][1] : r->len}};
        for (int k = 0; k < 2; k++) {
            size_t begin = pieces[k][0], end = pieces[k][1];
            if (end <= begin) continue;
            int32_t *part;
            size_t np;
            if (tokenizer_encode(tok, r->text + begin, end - begin, &part, &np, err)) {
                free(all);
                free(m);
                return -1;
            }
            if (used + np > cap) {
                cap = (used + np) * 2;
                all = xrealloc(all, cap * sizeof *all);
                m = xrealloc(m, cap);
            }
            memcpy(all + used, part, np * sizeof *part);
            memset(m + used, k, np);
            used += np;
            free(part);
        }
        if (s < r->n_spans) at = r->spans[s][1];
    }
    *ids = all ? all : xmalloc(sizeof *all);
    *mask = m ? m : xmalloc(1);
    *n = (int)used;
    return 0;
}

int chat_tokenize(int32_t **ids, uint8_t **mask, int *n, const struct chat_template *tpl,
                  const struct tokenizer *tok, const struct chat_message *msgs, int n_msgs,
                  int add_generation_prompt, struct whet_err *err) {
    struct chat_rendered r;
    if (chat_render(&r, tpl, msgs, n_msgs, add_generation_prompt, err)) return -1;
    int32_t *all;
    size_t n_all;
    if (tokenizer_encode(tok, r.text, r.len, &all, &n_all, err)) {
        chat_rendered_free(&r);
        return -1;
    }
    /* Each token stands for a run of the text's bytes; it is trained when any of them is (as TRL's
     * assistant masks do): a pre-token straddling the start of a turn ("\n" of the header merged with
     * the content's leading "\n\n") is the only way the model can produce those bytes. */
    uint8_t *m = xmalloc(n_all ? n_all : 1);
    size_t offset = 0, span = 0;
    int aligned = 1;
    for (size_t i = 0; i < n_all && aligned; i++) {
        size_t blen;
        const char *bytes = tokenizer_id_bytes(tok, all[i], &blen);
        if (!bytes || offset + blen > r.len || memcmp(bytes, r.text + offset, blen)) {
            aligned = 0;
            break;
        }
        while (span < r.n_spans && r.spans[span][1] <= offset) span++;
        m[i] = span < r.n_spans && r.spans[span][0] < offset + blen;
        offset += blen;
    }
    int rc = 0;
    if (aligned && offset == r.len) {
        *ids = all;
        *mask = m;
        *n = (int)n_all;
    } else {
        free(all);
        free(m);
        rc = tokenize_by_pieces(ids, mask, n, tok, &r, err);
    }
    chat_rendered_free(&r);
    return rc;
}
