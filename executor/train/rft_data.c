/* rft_data.c - RFT JSONL lines to chat-templated prompt ids, each with its item (see rft_data.h). */
#include "rft_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
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

/* Parses one line and adds its prompt (or counts it as too long). */
static int add_line(struct rft_dataset *ds, const char *line, size_t len, int lineno, const struct chat_template *tpl,
                    const struct tokenizer *tok, int max_prompt_len, struct whet_err *err) {
    json_error_t jerr;
    json_t *root = json_loadb(line, len, 0, &jerr);
    if (!root) return whet_errf(err, "not valid JSON: %s (column %d)", jerr.text, jerr.column);
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
    if (rc || n > max_prompt_len) {
        if (!rc) ds->n_too_long++;
        free(ids);
        json_decref(root);
        return rc;
    }
    if (ds->n_prompts == ds->cap) {
        ds->cap = ds->cap ? 2 * ds->cap : 64;
        ds->prompts = xrealloc(ds->prompts, (size_t)ds->cap * sizeof *ds->prompts);
    }
    ds->prompts[ds->n_prompts++] = (struct rft_prompt){ids, n, root, lineno};
    ds->n_tokens += n;
    return 0;
}

int rft_dataset_load(struct rft_dataset *ds, const char *path, const struct chat_template *tpl,
                     const struct tokenizer *tok, int max_prompt_len, struct whet_err *err) {
    memset(ds, 0, sizeof *ds);
    FILE *f = fopen(path, "rb");
    if (!f) return whet_errf(err, "%s: cannot open: %m", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, rc = 0;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t k = 0;
        while (k < (size_t)len && strchr(" \t\r\n", line[k])) k++;
        if (k == (size_t)len) continue;
        ds->n_lines++;
        if (add_line(ds, line, (size_t)len, lineno, tpl, tok, max_prompt_len, err))
            rc = whet_err_prefix(err, "%s: line %d", path, lineno);
    }
    free(line);
    fclose(f);
    if (!rc && ds->n_prompts == 0)
        rc = whet_errf(err, "%s: no usable prompts (%d lines, %d longer than %d tokens, which leaves no room for a "
                            "response within max_seq_len)", path, ds->n_lines, ds->n_too_long, max_prompt_len);
    return rc;
}

void rft_dataset_free(struct rft_dataset *ds) {
    for (int i = 0; i < ds->n_prompts; i++) {
        free(ds->prompts[i].ids);
        json_decref(ds->prompts[i].item);
    }
    free(ds->prompts);
    memset(ds, 0, sizeof *ds);
}
