/* sft_data.c - JSONL chat files to tokenized examples, epoch packing, micro-batches (see sft_data.h). */
#include "sft_data.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "json.h"
#include "rng.h"

/* ---------------------------------------------------------------- examples */

void sft_dataset_init(struct sft_dataset *ds, int max_seq_len) {
    memset(ds, 0, sizeof *ds);
    ds->max_seq_len = max_seq_len;
}

void sft_dataset_add(struct sft_dataset *ds, const int32_t *ids, const uint8_t *mask, int n) {
    if (n > ds->max_seq_len) {
        ds->n_truncated++;
        ds->n_truncated_tokens += n - ds->max_seq_len;
        n = ds->max_seq_len;
    }
    int trained = 0;
    for (int i = 1; i < n; i++) trained += mask[i] != 0; /* token 0 has nothing to be predicted from */
    if (!trained) {
        ds->n_untrained++;
        return;
    }
    ds->n_tokens += n;
    ds->n_trained_tokens += trained;
    if (ds->count_only) {
        ds->n_examples++;
        return;
    }
    if (ds->n_examples == ds->cap) {
        ds->cap = ds->cap ? 2 * ds->cap : 64;
        ds->examples = xrealloc(ds->examples, (size_t)ds->cap * sizeof *ds->examples);
    }
    struct sft_example *ex = &ds->examples[ds->n_examples++];
    ex->n = n;
    ex->ids = xmalloc((size_t)n * sizeof *ex->ids);
    ex->mask = xmalloc((size_t)n);
    memcpy(ex->ids, ids, (size_t)n * sizeof *ids);
    memcpy(ex->mask, mask, (size_t)n);
    ex->mask[0] = 0;
    ex->n_trained = trained;
}

void sft_dataset_free(struct sft_dataset *ds) {
    for (int i = 0; ds->examples && i < ds->n_examples; i++) { /* a count_only set keeps none */
        free(ds->examples[i].ids);
        free(ds->examples[i].mask);
    }
    free(ds->examples);
    memset(ds, 0, sizeof *ds);
}

/* ---------------------------------------------------------------- parsing lines */

const char *sft_content_text(json_t *content, const char *field, char **joined, struct whet_err *err) {
    *joined = NULL;
    if (json_is_string(content)) return json_string_value(content);
    if (!json_is_array(content)) return whet_errf(err, "%s.content: must be a string or an array of text parts", field), NULL;
    size_t len = 0, k;
    json_t *part;
    json_array_foreach(content, k, part) {
        json_t *text = json_object_get(part, "text");
        if (!json_is_string(text))
            return whet_errf(err, "%s.content[%zu]: only {\"type\": \"text\", \"text\": …} parts are supported", field, k),
                   NULL;
        len += json_string_length(text);
    }
    char *buf = xmalloc(len + 1), *p = buf;
    json_array_foreach(content, k, part) {
        json_t *text = json_object_get(part, "text");
        memcpy(p, json_string_value(text), json_string_length(text));
        p += json_string_length(text);
    }
    *p = 0;
    *joined = buf;
    return buf;
}

int sft_parse_messages(struct chat_message **msgs_out, int *n_out, void **json_root, const char *line, size_t len,
                       struct whet_err *err) {
    json_error_t jerr;
    json_t *root = json_loadb(line, len, 0, &jerr);
    if (!root) return whet_json_errf(err, NULL, &jerr);
    json_t *messages = json_object_get(root, "messages");
    if (!json_is_object(root) || !messages) {
        json_decref(root);
        return whet_errf(err, "missing \"messages\" (each line must be {\"messages\": [{\"role\": …, \"content\": …}, …]})");
    }
    if (!json_is_array(messages) || json_array_size(messages) == 0) {
        json_decref(root);
        return whet_errf(err, "\"messages\" must be a non-empty array");
    }
    int n = (int)json_array_size(messages);
    struct sft_parsed_line *pl = xcalloc(1, sizeof *pl);
    pl->root = root;
    pl->joined = xcalloc((size_t)n, sizeof *pl->joined);
    struct chat_message *msgs = xcalloc((size_t)n, sizeof *msgs);
    int trained = 0;
    for (int i = 0; i < n; i++) {
        json_t *m = json_array_get(messages, (size_t)i);
        json_t *role = json_object_get(m, "role");
        if (!json_is_string(role)) {
            whet_errf(err, "messages[%d].role: must be \"system\", \"user\" or \"assistant\"", i);
            goto fail;
        }
        msgs[i].role = json_string_value(role);
        if (!strcmp(msgs[i].role, "developer")) msgs[i].role = "system"; /* OpenAI's newer name */
        json_t *tool_calls = json_object_get(m, "tool_calls");
        if ((tool_calls && !json_is_null(tool_calls)) || !strcmp(msgs[i].role, "tool")) {
            whet_errf(err, "messages[%d]: tool calls are not supported for fine-tuning yet", i);
            goto fail;
        }
        json_t *content = json_object_get(m, "content");
        if (!content) {
            whet_errf(err, "messages[%d].content: missing", i);
            goto fail;
        }
        char field[32];
        snprintf(field, sizeof field, "messages[%d]", i);
        msgs[i].content = sft_content_text(content, field, &pl->joined[i], err);
        if (!msgs[i].content) goto fail;
        msgs[i].weight = 1;
        json_t *weight = json_object_get(m, "weight");
        if (weight) {
            if (!json_is_integer(weight) || (json_integer_value(weight) != 0 && json_integer_value(weight) != 1)) {
                whet_errf(err, "messages[%d].weight: must be 0 or 1", i);
                goto fail;
            }
            if (strcmp(msgs[i].role, "assistant")) {
                whet_errf(err, "messages[%d].weight: only assistant messages take a weight", i);
                goto fail;
            }
            msgs[i].weight = (int)json_integer_value(weight);
        }
        if (!strcmp(msgs[i].role, "assistant") && msgs[i].weight) trained++;
    }
    if (!trained) {
        whet_errf(err, "no assistant message to train on (add one, or give one \"weight\": 1)");
        goto fail;
    }
    pl->n_joined = n;
    *msgs_out = msgs;
    *n_out = n;
    *json_root = pl;
    return 0;
fail:
    for (int i = 0; i < n; i++) free(pl->joined[i]);
    free(pl->joined);
    free(pl);
    free(msgs);
    json_decref(root);
    return -1;
}

void sft_messages_free(struct chat_message *msgs, void *json_root) {
    struct sft_parsed_line *pl = json_root;
    if (pl) {
        for (int i = 0; i < pl->n_joined; i++) free(pl->joined[i]);
        free(pl->joined);
        json_decref(pl->root);
        free(pl);
    }
    free(msgs);
}

struct sft_load {
    struct sft_dataset *ds;
    const struct chat_template *tpl;
    const struct tokenizer *tok;
};

int sft_dataset_add_line(struct sft_dataset *ds, const char *line, size_t len, const struct chat_template *tpl,
                         const struct tokenizer *tok, struct whet_err *err) {
    struct chat_message *msgs;
    int n_msgs;
    void *root;
    if (sft_parse_messages(&msgs, &n_msgs, &root, line, len, err)) return -1;
    int32_t *ids;
    uint8_t *mask;
    int n;
    int rc = chat_tokenize(&ids, &mask, &n, tpl, tok, msgs, n_msgs, 0, err);
    sft_messages_free(msgs, root);
    if (rc) return -1;
    sft_dataset_add(ds, ids, mask, n);
    free(ids);
    free(mask);
    return 0;
}

static int sft_load_line(void *ctx, const char *line, size_t len, int lineno, struct whet_err *err) {
    const struct sft_load *l = ctx;
    return sft_dataset_add_line(l->ds, line, len, l->tpl, l->tok, err);
}

int sft_dataset_load(struct sft_dataset *ds, const char *path, const struct chat_template *tpl,
                     const struct tokenizer *tok, struct whet_err *err) {
    struct sft_load l = {ds, tpl, tok};
    int n_lines;
    if (whet_jsonl_each(path, sft_load_line, &l, &n_lines, err)) return -1;
    if (ds->n_examples == 0)
        return whet_errf(err, "%s: no usable examples (%d lines, %d without a trained token within max_seq_len)",
                         path, n_lines, ds->n_untrained);
    return 0;
}

/* ---------------------------------------------------------------- packing */

/* Packs the examples order[0..n) (one step's) first-fit into rows appended to ep, from row ep->n_rows
 * and item slot `slot` on; row_used and row_of are scratch of n entries. */
static void pack_step(struct sft_epoch *ep, const struct sft_dataset *ds, const int *order, int n, int slot,
                      int *row_used, int *row_of) {
    int n_rows = 0;
    for (int i = 0; i < n; i++) {
        int len = ds->examples[order[i]].n, r = 0;
        while (r < n_rows && row_used[r] + len > ds->max_seq_len) r++;
        if (r == n_rows) row_used[n_rows++] = 0;
        row_used[r] += len;
        row_of[i] = r;
    }
    /* Rows in the order they were opened, examples in the step's order within each. */
    int first_row = ep->n_rows;
    for (int r = 0; r < n_rows; r++) ep->row_start[first_row + r + 1] = 0;
    for (int i = 0; i < n; i++) ep->row_start[first_row + row_of[i] + 1]++;
    ep->row_start[first_row] = slot;
    for (int r = 0; r < n_rows; r++) {
        ep->row_start[first_row + r + 1] += ep->row_start[first_row + r];
        row_used[r] = ep->row_start[first_row + r]; /* reuse: the row's next free slot */
    }
    for (int i = 0; i < n; i++) ep->items[row_used[row_of[i]]++] = order[i];
    ep->n_rows += n_rows;
}

void sft_epoch_pack(struct sft_epoch *ep, const struct sft_dataset *ds, uint64_t seed, int epoch, int shuffle,
                    int batch_size) {
    int n = ds->n_examples;
    size_t cap = (size_t)(n ? n : 1);
    ep->epoch = epoch;
    int *order = xmalloc(cap * sizeof *order);
    for (int i = 0; i < n; i++) order[i] = i;
    if (shuffle) {
        /* splitmix64 over (seed, epoch): each epoch's order is a pure function of the two, which is
         * what lets a checkpoint store only the cursor. */
        uint64_t state = seed ^ (0xd1b54a32d192ed03ull * (uint64_t)(epoch + 1));
        for (int i = n - 1; i > 0; i--) { /* Fisher-Yates; the modulo bias of 2^64 % (i+1) is negligible */
            int j = (int)(rng_splitmix64(&state) % (uint64_t)(i + 1));
            int t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    }
    ep->n_steps = sft_steps_in_epoch(n, batch_size);
    ep->n_rows = 0;
    ep->step_row = xmalloc(((size_t)ep->n_steps + 1) * sizeof *ep->step_row);
    ep->row_start = xmalloc((cap + 1) * sizeof *ep->row_start); /* a row holds at least one example */
    ep->row_start[0] = 0;
    ep->items = xmalloc(cap * sizeof *ep->items);
    int *row_used = xmalloc(cap * sizeof *row_used), *row_of = xmalloc(cap * sizeof *row_of);
    for (int s = 0; s < ep->n_steps; s++) {
        int first = s * batch_size, count = n - first < batch_size ? n - first : batch_size;
        ep->step_row[s] = ep->n_rows;
        pack_step(ep, ds, order + first, count, first, row_used, row_of);
    }
    ep->step_row[ep->n_steps] = ep->n_rows;
    free(row_of);
    free(row_used);
    free(order);
}

void sft_epoch_free(struct sft_epoch *ep) {
    free(ep->items);
    free(ep->row_start);
    free(ep->step_row);
    memset(ep, 0, sizeof *ep);
}

int sft_steps_in_epoch(int n_examples, int batch_size) {
    return (n_examples + batch_size - 1) / batch_size;
}

int sft_rows_per_micro_batch(int n_rows, int grad_accum) {
    int per = (n_rows + grad_accum - 1) / grad_accum;
    return per > 0 ? per : 1;
}

int sft_take_step(struct sft_epoch *ep, struct sft_cursor *c, const struct sft_dataset *ds, uint64_t seed,
                  int batch_size, int *first_row, int *n_rows) {
    if (c->position >= ds->n_examples) { /* this epoch is used up (or was, at the checkpoint) */
        c->epoch++;
        c->position = 0;
    }
    if (!ep->step_row || ep->epoch != c->epoch) {
        sft_epoch_free(ep);
        sft_epoch_pack(ep, ds, seed, c->epoch, 1, batch_size);
    }
    int step = c->position / batch_size;
    *first_row = ep->step_row[step];
    *n_rows = ep->step_row[step + 1] - *first_row;
    c->position = (step + 1) * batch_size < ds->n_examples ? (step + 1) * batch_size : ds->n_examples;
    return c->epoch;
}

int sft_batch_width(const struct sft_dataset *ds, const struct sft_epoch *ep, int row, int *n_rows) {
    if (row + *n_rows > ep->n_rows) *n_rows = ep->n_rows - row;
    int T = 1;
    for (int r = row; r < row + *n_rows; r++) {
        int len = 0;
        for (int k = ep->row_start[r]; k < ep->row_start[r + 1]; k++) len += ds->examples[ep->items[k]].n;
        if (len > T) T = len;
    }
    return T;
}

void sft_batch_fill(struct sft_batch *b, const struct sft_dataset *ds, const struct sft_epoch *ep, int row,
                    int n_rows) {
    int T = sft_batch_width(ds, ep, row, &n_rows);
    int N = n_rows * T;
    if (N > b->cap) {
        b->cap = N;
        b->ids = xrealloc(b->ids, (size_t)N * sizeof *b->ids);
        b->positions = xrealloc(b->positions, (size_t)N * sizeof *b->positions);
        b->seq_ids = xrealloc(b->seq_ids, (size_t)N * sizeof *b->seq_ids);
        b->targets = xrealloc(b->targets, (size_t)N * sizeof *b->targets);
    }
    b->B = n_rows;
    b->T = T;
    b->n_tokens = 0;
    b->n_targets = 0;
    for (int r = 0; r < n_rows; r++) {
        int t = 0, seq = 0;
        int *ids = b->ids + (size_t)r * T, *pos = b->positions + (size_t)r * T;
        int *sid = b->seq_ids + (size_t)r * T, *tgt = b->targets + (size_t)r * T;
        for (int k = ep->row_start[row + r]; k < ep->row_start[row + r + 1]; k++, seq++) {
            const struct sft_example *ex = &ds->examples[ep->items[k]];
            for (int i = 0; i < ex->n; i++, t++) {
                ids[t] = ex->ids[i];
                pos[t] = i;
                sid[t] = seq;
                /* Token i predicts token i+1 of the same example, when that one is trained. */
                tgt[t] = i + 1 < ex->n && ex->mask[i + 1] ? ex->ids[i + 1] : -1;
                b->n_targets += tgt[t] >= 0;
            }
        }
        b->n_tokens += t;
        for (int p = 0; t < T; t++, p++) { /* padding: its own sequence, nothing to predict */
            ids[t] = 0;
            pos[t] = p;
            sid[t] = seq;
            tgt[t] = -1;
        }
    }
}

int sft_rows_targets(const struct sft_dataset *ds, const struct sft_epoch *ep, int row, int n_rows) {
    if (row + n_rows > ep->n_rows) n_rows = ep->n_rows - row;
    int n = 0;
    for (int k = ep->row_start[row]; k < ep->row_start[row + n_rows]; k++) n += ds->examples[ep->items[k]].n_trained;
    return n;
}

void sft_batch_free(struct sft_batch *b) {
    free(b->ids);
    free(b->positions);
    free(b->seq_ids);
    free(b->targets);
    memset(b, 0, sizeof *b);
}
