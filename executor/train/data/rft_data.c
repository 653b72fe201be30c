/* rft_data.c - RFT JSONL lines to chat-templated prompt ids, each with its item (see rft_data.h). */
#include "rft_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "json.h"
#include "sft_data.h"

/* The messages of one line object; texts of array contents joined into *joined[i] (the caller frees
 * them), the rest point into `root`. */
static int parse_messages(struct chat_message **out, int *n_out, char ***joined_out, json_t *root,
                          struct whet_err *err) {
    json_t *messages = json_object_get(root, "messages");
    if (!messages)
        return whet_errf(err, "messages: missing (each line must be {\"messages\": [{\"role\": \"user\", \"content\": "
                              "…}], and any fields the grader reads})");
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return whet_errf(err, "messages: must be a non-empty array");
    int n = (int)json_array_size(messages);
    struct chat_message *msgs = xcalloc((size_t)n, sizeof *msgs);
    char **joined = xcalloc((size_t)n, sizeof *joined);
    *out = msgs;
    *joined_out = joined;
    *n_out = n;
    for (int i = 0; i < n; i++) {
        json_t *m = json_array_get(messages, (size_t)i), *role = json_object_get(m, "role");
        const char *r = json_string_value(role);
        if (!r || (strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "user") && strcmp(r, "assistant")))
            return whet_errf(err, "messages[%d].role: must be \"system\", \"developer\", \"user\" or \"assistant\"", i);
        msgs[i].role = strcmp(r, "developer") ? r : "system"; /* OpenAI's newer name */
        json_t *tool_calls = json_object_get(m, "tool_calls");
        if (tool_calls && !json_is_null(tool_calls))
            return whet_errf(err, "messages[%d].tool_calls: tool calls are not supported for fine-tuning yet", i);
        json_t *content = json_object_get(m, "content");
        if (!content) return whet_errf(err, "messages[%d].content: missing", i);
        char field[32];
        snprintf(field, sizeof field, "messages[%d]", i);
        msgs[i].content = sft_content_text(content, field, &joined[i], err);
        if (!msgs[i].content) return -1;
        msgs[i].weight = 0;
    }
    if (!strcmp(msgs[n - 1].role, "assistant"))
        return whet_errf(err, "messages[%d].role: the prompt ends with an assistant turn; the model writes that turn, so "
                              "end with a user message", n - 1);
    return 0;
}

int rft_dataset_add_line(struct rft_dataset *ds, const char *line, size_t len, int lineno,
                         const struct chat_template *tpl, const struct tokenizer *tok, int max_prompt_len,
                         struct whet_err *err) {
    ds->n_lines++;
    json_error_t jerr;
    json_t *root = json_loadb(line, len, 0, &jerr);
    if (!root) return whet_json_errf(err, NULL, &jerr);
    if (!json_is_object(root)) {
        json_decref(root);
        return whet_errf(err, "must be a JSON object {\"messages\": […], …}");
    }
    struct chat_message *msgs = NULL;
    char **joined = NULL;
    int n_msgs = 0;
    int32_t *ids = NULL;
    uint8_t *mask = NULL;
    int n = 0;
    int rc = parse_messages(&msgs, &n_msgs, &joined, root, err);
    if (!rc) rc = chat_tokenize(&ids, &mask, &n, tpl, tok, msgs, n_msgs, 1, err);
    for (int i = 0; i < n_msgs; i++) free(joined[i]);
    free(joined);
    free(msgs);
    free(mask);
    int keep = !rc && n <= max_prompt_len;
    if (!rc && !keep) ds->n_too_long++;
    if (keep) ds->n_tokens += n;
    if (!keep || ds->count_only) {
        ds->n_prompts += keep; /* counted only */
        free(ids);
        json_decref(root);
        return rc;
    }
    if (ds->n_prompts == ds->cap) {
        ds->cap = ds->cap ? 2 * ds->cap : 64;
        ds->prompts = xrealloc(ds->prompts, (size_t)ds->cap * sizeof *ds->prompts);
    }
    ds->prompts[ds->n_prompts++] = (struct rft_prompt){ids, n, root, lineno};
    return 0;
}

struct rft_load {
    struct rft_dataset *ds;
    const struct chat_template *tpl;
    const struct tokenizer *tok;
    int max_prompt_len;
};

static int rft_load_line(void *ctx, const char *line, size_t len, int lineno, struct whet_err *err) {
    const struct rft_load *l = ctx;
    return rft_dataset_add_line(l->ds, line, len, lineno, l->tpl, l->tok, l->max_prompt_len, err);
}

int rft_dataset_load(struct rft_dataset *ds, const char *path, const struct chat_template *tpl,
                     const struct tokenizer *tok, int max_prompt_len, struct whet_err *err) {
    memset(ds, 0, sizeof *ds);
    struct rft_load l = {ds, tpl, tok, max_prompt_len};
    if (whet_jsonl_each(path, rft_load_line, &l, NULL, err)) return -1;
    if (ds->n_prompts == 0)
        return whet_errf(err, "%s: no usable prompts (%d lines, %d longer than %d tokens, which leaves no room for a "
                              "response within max_seq_len)", path, ds->n_lines, ds->n_too_long, max_prompt_len);
    return 0;
}

void rft_dataset_free(struct rft_dataset *ds) {
    for (int i = 0; ds->prompts && i < ds->n_prompts; i++) { /* a count_only set keeps no prompts */
        free(ds->prompts[i].ids);
        json_decref(ds->prompts[i].item);
    }
    free(ds->prompts);
    memset(ds, 0, sizeof *ds);
}
