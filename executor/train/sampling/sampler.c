/* sampler.c - generation with a KV cache and sequence scoring (see sampler.h). */
#include "sampler.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "buf.h"
#include "json.h"
#include "model.h"
#include "tokenizer.h"

/* ---------------------------------------------------------------- sampling */

int sample_is_end_token(const struct tokenizer *tok, const struct model_config *mc, int id) {
    static const char *const names[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"};
    if (id == mc->eos_token_id) return 1;
    for (size_t i = 0; i < WHET_ARRAY_LEN(names); i++)
        if (tokenizer_token_id(tok, names[i]) == id) return 1;
    return 0;
}

int sample_append_text(struct whet_buf *text, const struct tokenizer *tok, int id, char *const *stops, int n_stops,
                       struct whet_err *err) {
    size_t old_len = text->len, piece_len;
    char *piece;
    int32_t id32 = id;
    if (tokenizer_decode(tok, &id32, 1, &piece, &piece_len, err)) return -1;
    whet_buf_append(text, piece, piece_len);
    free(piece);
    /* the earliest stop string that ends in the new bytes (none had ended before them) */
    long first = -1;
    for (int i = 0; i < n_stops; i++) {
        size_t sl = strlen(stops[i]);
        if (sl == 0 || sl > text->len) continue;
        size_t from = old_len >= sl - 1 ? old_len - (sl - 1) : 0;
        const char *hit = memmem(text->data + from, text->len - from, stops[i], sl);
        if (hit && (first < 0 || hit - text->data < first)) first = hit - text->data;
    }
    if (first < 0) return 0;
    text->len = (size_t)first;
    text->data[first] = '\0';
    return 1;
}

int sample_reply(struct model *m, const struct tokenizer *tok, const int32_t *prompt, int n_prompt, int max_tokens,
                 struct sample_row row, char **text, int *n_tokens, struct whet_err *err) {
    const struct model_config *mc = model_get_config(m);
    *text = NULL;
    *n_tokens = 0;
    if (n_prompt + max_tokens > mc->max_position_embeddings)
        return whet_errf(err, "the prompt (%d tokens) and max tokens %d exceed the model's %d positions", n_prompt,
                         max_tokens, mc->max_position_embeddings);
    struct kv_cache *cache = kv_cache_new(m, 1, n_prompt + max_tokens, err);
    if (!cache) return -1;
    int *ids = xmalloc((size_t)n_prompt * sizeof *ids);
    int32_t *out = xmalloc((size_t)max_tokens * sizeof *out);
    for (int i = 0; i < n_prompt; i++) ids[i] = prompt[i];
    if (row.vocab <= 0) row.vocab = (int)tokenizer_vocab_size(tok);
    int n_out = 0, slot = 0, next;
    struct sample_out drawn = {.ids = &next};
    int rc = model_prefill_sample(m, cache, 0, ids, n_prompt, 1, &row, &drawn, err);
    while (!rc && !sample_is_end_token(tok, mc, next)) {
        out[n_out++] = next;
        if (n_out == max_tokens) break;
        row.counter = (uint32_t)n_out;
        rc = model_decode_sample(m, cache, &slot, &next, 1, &row, &drawn, err);
    }
    size_t len;
    if (!rc) rc = tokenizer_decode(tok, out, (size_t)n_out, text, &len, err);
    if (!rc) *n_tokens = n_out;
    kv_cache_free(cache);
    free(ids);
    free(out);
    return rc;
}

int sample_run(const struct sample_opts *opts, char **text, int *n_tokens, struct whet_err *err) {
    struct tokenizer *tok = NULL;
    struct chat_template tpl = {0};
    struct model *m = NULL;
    int32_t *prompt = NULL;
    uint8_t *mask = NULL;
    int n_prompt = 0, rc = -1;
    char *tok_path = xasprintf("%s/tokenizer.json", opts->model_dir);
    if (tokenizer_load(tok_path, &tok, err) || chat_template_load(&tpl, opts->model_dir, err)) goto out;
    struct chat_message user = {"user", opts->prompt, 1};
    if (chat_tokenize(&prompt, &mask, &n_prompt, &tpl, tok, &user, 1, 1, err)) goto out;
    struct model_opts mo = model_opts_default();
    mo.adapter_dir = opts->adapter_dir;
    mo.device = opts->device;
    if (model_load(&m, opts->model_dir, &mo, err)) goto out;
    struct sample_row row = {.seed = opts->seed, .temperature = opts->temperature, .top_p = opts->top_p,
                             .top_k = opts->top_k};
    rc = sample_reply(m, tok, prompt, n_prompt, opts->max_tokens, row, text, n_tokens, err);
out:
    if (m) model_free(m);
    if (tok) tokenizer_free(tok);
    chat_template_free(&tpl);
    free(prompt);
    free(mask);
    free(tok_path);
    return rc;
}

/* ---------------------------------------------------------------- scoring */

struct score_line {
    int *ids;
    int n;
};

/* The lines of a score file, read by whet_jsonl_each. */
struct score_file {
    int vocab;
    struct score_line *lines;
    int n, cap, max_len;
};

static int score_file_line(void *ctx, const char *line, size_t len, int lineno, struct whet_err *err) {
    struct score_file *f = ctx;
    json_error_t jerr;
    json_t *root = json_loadb(line, len, 0, &jerr);
    if (!root) return whet_json_errf(err, NULL, &jerr);
    json_t *arr = json_object_get(root, "input_ids");
    int rc = 0;
    if (!json_is_array(arr)) {
        rc = whet_errf(err, "\"input_ids\" must be an array of token ids");
    } else {
        if (f->n == f->cap) {
            f->cap = f->cap ? 2 * f->cap : 64;
            f->lines = xrealloc(f->lines, (size_t)f->cap * sizeof *f->lines);
        }
        struct score_line *l = &f->lines[f->n++];
        l->n = (int)json_array_size(arr);
        l->ids = xmalloc((size_t)(l->n ? l->n : 1) * sizeof *l->ids);
        for (int i = 0; i < l->n && !rc; i++) {
            json_t *v = json_array_get(arr, (size_t)i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= f->vocab)
                rc = whet_errf(err, "input_ids[%d]: must be a token id in [0, %d)", i, f->vocab);
            else
                l->ids[i] = (int)json_integer_value(v);
        }
        if (l->n > f->max_len) f->max_len = l->n;
    }
    json_decref(root);
    return rc;
}

static int read_score_file(const char *path, int vocab, struct score_line **lines_out, int *n_out, int *max_len,
                           struct whet_err *err) {
    struct score_file f = {.vocab = vocab, .max_len = 1};
    int rc = whet_jsonl_each(path, score_file_line, &f, NULL, err);
    *lines_out = f.lines;
    *n_out = f.n;
    *max_len = f.max_len;
    return rc;
}

int score_run(const char *model_dir, const char *adapter_dir, const char *device, const char *data_path, FILE *out,
              struct whet_err *err) {
    char *config_path = xasprintf("%s/config.json", model_dir);
    struct model_config mc;
    int rc = model_config_load(&mc, config_path, err);
    free(config_path);
    if (rc) return -1;
    struct score_line *lines = NULL;
    int n_lines = 0, max_len = 1;
    struct model *m = NULL;
    int *targets = NULL;
    rc = read_score_file(data_path, mc.vocab_size, &lines, &n_lines, &max_len, err);
    if (rc) goto out;
    if (max_len > mc.max_position_embeddings) {
        rc = whet_errf(err, "%s: an example has %d tokens, more than the model's %d positions", data_path, max_len,
                       mc.max_position_embeddings);
        goto out;
    }
    struct model_opts mo = model_opts_default();
    mo.adapter_dir = adapter_dir;
    mo.device = device;
    if ((rc = model_load(&m, model_dir, &mo, err))) goto out;
    targets = xmalloc((size_t)max_len * sizeof *targets);
    for (int i = 0; i < n_lines; i++) {
        const struct score_line *l = &lines[i];
        if (l->n < 2) { /* nothing to predict */
            fprintf(out, "{\"index\":%d,\"loss\":null,\"tokens\":0}\n", i);
            continue;
        }
        for (int t = 0; t < l->n; t++) targets[t] = t + 1 < l->n ? l->ids[t + 1] : -1;
        struct model_batch b = {1, l->n, l->ids, NULL, NULL, targets, NULL};
        if ((rc = model_forward(m, &b, NULL, err))) goto out;
        struct model_stats st = model_last_stats(m);
        fprintf(out, "{\"index\":%d,\"loss\":%.9g,\"tokens\":%d}\n", i, st.weight_sum > 0 ? st.loss_sum / st.weight_sum : 0,
                st.n_targets);
    }
    fflush(out);
out:
    if (m) model_free(m);
    for (int i = 0; i < n_lines; i++) free(lines[i].ids);
    free(lines);
    free(targets);
    return rc;
}
