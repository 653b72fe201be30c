/* dpo_data.c - DPO preference pairs: parsing, tokenizing, truncation, micro-batches (see dpo_data.h). */
#include "dpo_data.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "json.h"

/* ---------------------------------------------------------------- pairs */

void dpo_dataset_init(struct dpo_dataset *ds, int max_seq_len) {
    memset(ds, 0, sizeof *ds);
    sft_dataset_init(&ds->pairs, max_seq_len);
    ds->max_seq_len = max_seq_len;
}

void dpo_dataset_free(struct dpo_dataset *ds) {
    sft_dataset_free(&ds->pairs);
    free(ds->split);
    memset(ds, 0, sizeof *ds);
}

static int scored(const uint8_t *mask, int n) {
    int k = 0;
    for (int i = 1; i < n; i++) k += mask[i] != 0; /* token 0 has nothing to be predicted from */
    return k;
}

void dpo_dataset_add(struct dpo_dataset *ds, const int32_t *chosen, const uint8_t *chosen_mask, int nc,
                     const int32_t *rejected, const uint8_t *rejected_mask, int nr) {
    int L = ds->max_seq_len, half = L / 2;
    if (nc + nr > L) {
        int keep_c = nc <= half ? nc : nr <= half ? L - nr : half;
        int keep_r = L - keep_c < nr ? L - keep_c : nr;
        ds->n_truncated++;
        ds->n_truncated_tokens += (nc - keep_c) + (nr - keep_r);
        nc = keep_c, nr = keep_r;
    }
    if (!scored(chosen_mask, nc) || !scored(rejected_mask, nr)) {
        ds->n_unscored++;
        return;
    }
    int n = nc + nr;
    int32_t *ids = xmalloc((size_t)n * sizeof *ids);
    uint8_t *mask = xmalloc((size_t)n);
    memcpy(ids, chosen, (size_t)nc * sizeof *ids);
    memcpy(ids + nc, rejected, (size_t)nr * sizeof *ids);
    memcpy(mask, chosen_mask, (size_t)nc);
    memcpy(mask + nc, rejected_mask, (size_t)nr);
    mask[nc] = 0; /* the rejected sequence's first token starts a segment: nothing predicts it */
    int before = ds->pairs.n_examples;
    sft_dataset_add(&ds->pairs, ids, mask, n); /* n <= max_seq_len, so no second cut */
    if (ds->pairs.n_examples > before && !ds->pairs.count_only) {
        ds->split = xrealloc(ds->split, (size_t)ds->pairs.cap * sizeof *ds->split);
        ds->split[before] = nc;
    }
    free(ids);
    free(mask);
}

/* ---------------------------------------------------------------- parsing lines */

static const char *content_text(struct sft_parsed_line *pp, json_t *content, const char *field,
                                struct whet_err *err) {
    char *joined;
    const char *text = sft_content_text(content, field, &joined, err);
    if (joined) {
        pp->joined = xrealloc(pp->joined, (size_t)(pp->n_joined + 1) * sizeof *pp->joined);
        pp->joined[pp->n_joined++] = joined;
    }
    return text;
}

/* One message object into *out; `field` names it in errors ("input.messages[2]"). */
static int parse_message(struct chat_message *out, struct sft_parsed_line *pp, json_t *m, const char *field,
                         struct whet_err *err) {
    if (!json_is_object(m)) return whet_errf(err, "%s: must be a message object", field);
    json_t *role = json_object_get(m, "role");
    if (!json_is_string(role)) return whet_errf(err, "%s.role: must be \"system\", \"user\" or \"assistant\"", field);
    out->role = json_string_value(role);
    if (!strcmp(out->role, "developer")) out->role = "system"; /* OpenAI's newer name */
    json_t *tool_calls = json_object_get(m, "tool_calls");
    if ((tool_calls && !json_is_null(tool_calls)) || !strcmp(out->role, "tool"))
        return whet_errf(err, "%s: tool calls are not supported for fine-tuning yet", field);
    json_t *content = json_object_get(m, "content");
    if (!content) return whet_errf(err, "%s.content: missing", field);
    out->content = content_text(pp, content, field, err);
    if (!out->content) return -1;
    out->weight = 0; /* the prompt is context; the caller marks the scored turn */
    return 0;
}

/* The chosen or rejected answer: an array of one or more assistant messages (the current name), or,
 * for the older *_completion names, also a single message object or a plain string. The messages
 * are appended to msgs[*n] on, each a scored assistant turn. */
static int parse_output(struct chat_message *msgs, int *n, struct sft_parsed_line *pp, json_t *v, const char *name,
                        int legacy, struct whet_err *err) {
    if (legacy && json_is_string(v)) {
        msgs[(*n)++] = (struct chat_message){"assistant", json_string_value(v), 1};
        return 0;
    }
    int single = legacy && json_is_object(v);
    if (!single && (!json_is_array(v) || json_array_size(v) == 0))
        return whet_errf(err, "%s: must be a non-empty array of assistant messages", name);
    size_t count = single ? 1 : json_array_size(v);
    for (size_t i = 0; i < count; i++) {
        char field[64];
        if (single) snprintf(field, sizeof field, "%s", name);
        else snprintf(field, sizeof field, "%s[%zu]", name, i);
        struct chat_message *m = &msgs[*n];
        if (parse_message(m, pp, single ? v : json_array_get(v, i), field, err)) return -1;
        if (strcmp(m->role, "assistant")) return whet_errf(err, "%s.role: must be \"assistant\"", field);
        m->weight = 1;
        (*n)++;
    }
    return 0;
}

/* Messages an answer adds (its array's length; 1 for a string or an object). */
static int output_count(json_t *v) { return json_is_array(v) ? (int)json_array_size(v) : 1; }

void dpo_pair_free(struct chat_message *chosen, struct chat_message *rejected, void *json_root) {
    sft_messages_free(chosen, json_root);
    free(rejected);
}

int dpo_parse_pair(struct chat_message **chosen_out, int *n_chosen, struct chat_message **rejected_out,
                   int *n_rejected, void **json_root, const char *line, size_t len, struct whet_err *err) {
    json_error_t jerr;
    json_t *root = json_loadb(line, len, 0, &jerr);
    if (!root) return whet_json_errf(err, NULL, &jerr);
    struct sft_parsed_line *pp = xcalloc(1, sizeof *pp);
    pp->root = root;
    struct chat_message *sides[2] = {NULL, NULL};
    int counts[2] = {0, 0};
    if (!json_is_object(root)) {
        whet_errf(err, "each line must be {\"input\": {\"messages\": […]}, \"preferred_output\": […], "
                       "\"non_preferred_output\": […]}");
        goto fail;
    }
    json_t *input = json_object_get(root, "input");
    json_t *messages = json_object_get(input, "messages");
    if (!json_is_object(input)) {
        whet_errf(err, "input: missing or not an object (expected {\"messages\": […]})");
        goto fail;
    }
    if (!json_is_array(messages) || json_array_size(messages) == 0) {
        whet_errf(err, "input.messages: must be a non-empty array of messages");
        goto fail;
    }
    json_t *tools = json_object_get(input, "tools");
    if (json_is_array(tools) && json_array_size(tools) > 0) {
        whet_errf(err, "input.tools: tool definitions are not supported for fine-tuning yet");
        goto fail;
    }
    const char *names[2][2] = {{"preferred_output", "preferred_completion"},
                               {"non_preferred_output", "non_preferred_completion"}};
    json_t *answers[2];
    for (int s = 0; s < 2; s++) {
        json_t *current = json_object_get(root, names[s][0]), *older = json_object_get(root, names[s][1]);
        if (current && older) {
            whet_errf(err, "%s: give either %s or %s, not both", names[s][1], names[s][0], names[s][1]);
            goto fail;
        }
        if (!current && !older) {
            whet_errf(err, "%s: missing (also looked for %s)", names[s][0], names[s][1]);
            goto fail;
        }
        answers[s] = current ? current : older;
    }
    int n_prompt = (int)json_array_size(messages);
    for (int s = 0; s < 2; s++) sides[s] = xcalloc((size_t)(n_prompt + output_count(answers[s])), sizeof *sides[s]);
    for (int i = 0; i < n_prompt; i++) {
        char field[48];
        snprintf(field, sizeof field, "input.messages[%d]", i);
        if (parse_message(&sides[0][i], pp, json_array_get(messages, (size_t)i), field, err)) goto fail;
        sides[1][i] = sides[0][i];
    }
    if (!strcmp(sides[0][n_prompt - 1].role, "assistant")) {
        whet_errf(err, "input.messages[%d]: the prompt must not end with an assistant turn (the outputs answer it)",
                  n_prompt - 1);
        goto fail;
    }
    for (int s = 0; s < 2; s++) {
        counts[s] = n_prompt;
        int legacy = !json_object_get(root, names[s][0]);
        if (parse_output(sides[s], &counts[s], pp, answers[s], names[s][legacy], legacy, err)) goto fail;
    }
    *chosen_out = sides[0], *n_chosen = counts[0];
    *rejected_out = sides[1], *n_rejected = counts[1];
    *json_root = pp;
    return 0;
fail:
    dpo_pair_free(sides[0], sides[1], pp);
    return -1;
}

int dpo_dataset_add_line(struct dpo_dataset *ds, const char *line, size_t len, const struct chat_template *tpl,
                         const struct tokenizer *tok, struct whet_err *err) {
    struct chat_message *chosen, *rejected;
    int n_chosen, n_rejected;
    void *root;
    if (dpo_parse_pair(&chosen, &n_chosen, &rejected, &n_rejected, &root, line, len, err)) return -1;
    int32_t *ids[2] = {NULL, NULL};
    uint8_t *mask[2] = {NULL, NULL};
    int n[2] = {0, 0};
    int rc = chat_tokenize(&ids[0], &mask[0], &n[0], tpl, tok, chosen, n_chosen, 0, err);
    if (rc) whet_err_prefix(err, "preferred_output");
    if (!rc && (rc = chat_tokenize(&ids[1], &mask[1], &n[1], tpl, tok, rejected, n_rejected, 0, err)))
        whet_err_prefix(err, "non_preferred_output");
    dpo_pair_free(chosen, rejected, root);
    if (!rc) dpo_dataset_add(ds, ids[0], mask[0], n[0], ids[1], mask[1], n[1]);
    for (int s = 0; s < 2; s++) free(ids[s]), free(mask[s]);
    return rc;
}

struct dpo_load {
    struct dpo_dataset *ds;
    const struct chat_template *tpl;
    const struct tokenizer *tok;
};

static int dpo_load_line(void *ctx, const char *line, size_t len, int lineno, struct whet_err *err) {
    const struct dpo_load *l = ctx;
    return dpo_dataset_add_line(l->ds, line, len, l->tpl, l->tok, err);
}

int dpo_dataset_load(struct dpo_dataset *ds, const char *path, const struct chat_template *tpl,
                     const struct tokenizer *tok, struct whet_err *err) {
    struct dpo_load l = {ds, tpl, tok};
    int n_lines;
    if (whet_jsonl_each(path, dpo_load_line, &l, &n_lines, err)) return -1;
    if (dpo_num_pairs(ds) == 0)
        return whet_errf(err, "%s: no usable preference pairs (%d lines, %d without a scored token within "
                              "max_seq_len)", path, n_lines, ds->n_unscored);
    return 0;
}

/* ---------------------------------------------------------------- micro-batches */

void dpo_batch_fill(struct dpo_batch *b, const struct dpo_dataset *ds, const struct sft_epoch *ep, int row,
                    int n_rows) {
    const struct sft_dataset *pairs = &ds->pairs;
    int T = sft_batch_width(pairs, ep, row, &n_rows);
    int N = n_rows * T;
    if (N > b->cap) {
        b->cap = N;
        b->ids = xrealloc(b->ids, (size_t)N * sizeof *b->ids);
        b->positions = xrealloc(b->positions, (size_t)N * sizeof *b->positions);
        b->seq_ids = xrealloc(b->seq_ids, (size_t)N * sizeof *b->seq_ids);
        b->targets = xrealloc(b->targets, (size_t)N * sizeof *b->targets);
        b->side = xrealloc(b->side, (size_t)N * sizeof *b->side);
        b->pairs = xrealloc(b->pairs, (size_t)N * sizeof *b->pairs); /* a pair has >= 2 tokens */
    }
    b->B = n_rows;
    b->T = T;
    b->n_tokens = 0;
    b->n_targets = 0;
    b->n_pairs = 0;
    for (int r = 0; r < n_rows; r++) {
        int t = 0, seq = 0;
        size_t off = (size_t)r * T;
        for (int k = ep->row_start[row + r]; k < ep->row_start[row + r + 1]; k++) {
            int item = ep->items[k];
            const struct sft_example *ex = &pairs->examples[item];
            int split = ds->split[item], p = b->n_pairs++;
            b->pairs[p] = item;
            for (int i = 0; i < ex->n; i++, t++) {
                int rejected = i >= split, start = rejected ? split : 0, end = rejected ? ex->n : split;
                b->ids[off + t] = ex->ids[i];
                b->positions[off + t] = i - start;
                b->seq_ids[off + t] = seq + rejected;
                /* Token i predicts token i+1 of the same sequence, when that one is scored. */
                int scored_next = i + 1 < end && ex->mask[i + 1];
                b->targets[off + t] = scored_next ? ex->ids[i + 1] : -1;
                b->side[off + t] = scored_next ? 2 * p + rejected : -1;
                b->n_targets += scored_next;
            }
            seq += 2;
        }
        b->n_tokens += t;
        for (int p = 0; t < T; t++, p++) { /* padding: its own sequence, nothing to predict */
            b->ids[off + t] = 0;
            b->positions[off + t] = p;
            b->seq_ids[off + t] = seq;
            b->targets[off + t] = -1;
            b->side[off + t] = -1;
        }
    }
}

void dpo_batch_free(struct dpo_batch *b) {
    free(b->ids);
    free(b->positions);
    free(b->seq_ids);
    free(b->targets);
    free(b->side);
    free(b->pairs);
    memset(b, 0, sizeof *b);
}

int dpo_rows_pairs(const struct sft_epoch *ep, int row, int n_rows) {
    if (row + n_rows > ep->n_rows) n_rows = ep->n_rows - row;
    return ep->row_start[row + n_rows] - ep->row_start[row];
}
