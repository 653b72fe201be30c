/* sampler.c - generation with a KV cache and sequence scoring (see sampler.h). */
#include "sampler.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "json.h"
#include "model.h"
#include "rng.h"
#include "tokenizer.h"

/* ---------------------------------------------------------------- picking a token */

static int by_prob_desc(const void *a, const void *b, void *probs_arg) {
    const float *probs = probs_arg;
    float x = probs[*(const int *)a], y = probs[*(const int *)b];
    if (x != y) return x < y ? 1 : -1;
    return *(const int *)a - *(const int *)b; /* ties: lower id first, so the order is total */
}

/* Sorts into order[0..) the tokens whose probability is at least a threshold t, most likely first,
 * with t the largest of 1e-1, 1e-2, 1e-3, 1e-4, 1e-6, 1e-9, 0 for which that prefix of the full sorted
 * order is long enough: `need_count` tokens, or (need_count 0) a mass of need_mass. Sorting only that
 * prefix instead of all V tokens gives the same order for it (every token below t sorts after every
 * token at or above t). Returns the prefix length. */
static int sorted_prefix(int *order, const float *probs, int V, int need_count, double need_mass) {
    static const float thresholds[] = {1e-1f, 1e-2f, 1e-3f, 1e-4f, 1e-6f, 1e-9f, 0.0f};
    int n = 0;
    for (size_t k = 0; k < WHET_ARRAY_LEN(thresholds); k++) {
        double mass = 0;
        n = 0;
        for (int i = 0; i < V; i++)
            if (probs[i] >= thresholds[k]) {
                order[n++] = i;
                mass += probs[i];
            }
        if (need_count ? n >= need_count : mass >= need_mass) break;
    }
    qsort_r(order, (size_t)n, sizeof *order, by_prob_desc, (void *)probs);
    return n;
}

int sample_pick_k(float *logits, int *order, int V, float temperature, float top_p, int top_k, struct rng *rng) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0 || top_k == 1) return best;
    /* softmax(logits / T), stable */
    double sum = 0;
    float max = logits[best];
    for (int i = 0; i < V; i++) {
        logits[i] = expf((logits[i] - max) / temperature);
        sum += logits[i];
    }
    for (int i = 0; i < V; i++) logits[i] = (float)(logits[i] / sum);
    if (top_k > 0 && top_k < V) {
        /* the k most likely tokens; top-p then applies to their renormalised distribution (the order
         * of Hugging Face's TopK and TopP warpers), that is to a share top_p of their mass */
        sorted_prefix(order, logits, V, top_k, 0);
        double kept = 0;
        for (int k = 0; k < top_k; k++) kept += logits[order[k]];
        double mass = 0;
        int n = 0;
        while (n < top_k && (n == 0 || mass < top_p * kept)) mass += logits[order[n++]];
        double u = rng_uniform(rng) * mass, acc = 0;
        for (int k = 0; k < n; k++) {
            acc += logits[order[k]];
            if (u < acc) return order[k];
        }
        return order[n - 1];
    }
    if (top_p < 1) {
        int n_sorted = sorted_prefix(order, logits, V, 0, top_p);
        double mass = 0;
        int n = 0;
        while (n < n_sorted && mass < top_p) mass += logits[order[n++]];
        double u = rng_uniform(rng) * mass, acc = 0;
        for (int k = 0; k < n; k++) {
            acc += logits[order[k]];
            if (u < acc) return order[k];
        }
        return order[n - 1];
    }
    double u = rng_uniform(rng), acc = 0;
    for (int i = 0; i < V; i++) {
        acc += logits[i];
        if (u < acc) return i;
    }
    return best; /* rounding left u above the total: the likeliest token */
}

int sample_pick(float *logits, int *order, int V, float temperature, float top_p, struct rng *rng) {
    return sample_pick_k(logits, order, V, temperature, top_p, 0, rng);
}

/* ---------------------------------------------------------------- sampling */

int sample_is_end_token(const struct tokenizer *tok, const struct model_config *mc, int id) {
    static const char *const names[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"};
    if (id == mc->eos_token_id) return 1;
    for (size_t i = 0; i < WHET_ARRAY_LEN(names); i++)
        if (tokenizer_token_id(tok, names[i]) == id) return 1;
    return 0;
}

int sample_run(const struct sample_opts *opts, char **text, int *n_tokens, struct whet_err *err) {
    struct tokenizer *tok = NULL;
    struct chat_template tpl = {0};
    struct model *m = NULL;
    struct kv_cache *cache = NULL;
    int32_t *prompt = NULL;
    uint8_t *mask = NULL;
    int *out = NULL, *order = NULL;
    float *logits = NULL;
    int n_prompt = 0, n_out = 0, rc = -1;
    char *tok_path = xasprintf("%s/tokenizer.json", opts->model_dir);
    if (tokenizer_load(tok_path, &tok, err) || chat_template_load(&tpl, opts->model_dir, err)) goto out;
    struct chat_message user = {"user", opts->prompt, 1};
    if (chat_tokenize(&prompt, &mask, &n_prompt, &tpl, tok, &user, 1, 1, err)) goto out;

    struct model_opts mo = model_opts_default();
    mo.adapter_dir = opts->adapter_dir;
    if (model_load(&m, opts->model_dir, &mo, err)) goto out;
    const struct model_config *mc = model_get_config(m);
    if (n_prompt + opts->max_tokens > mc->max_position_embeddings) {
        whet_errf(err, "the prompt (%d tokens) and --max-tokens %d exceed the model's %d positions", n_prompt,
                  opts->max_tokens, mc->max_position_embeddings);
        goto out;
    }
    int V = mc->vocab_size;
    cache = kv_cache_new(m, 1, n_prompt + opts->max_tokens);
    logits = xmalloc((size_t)V * sizeof *logits);
    order = xmalloc((size_t)V * sizeof *order);
    out = xmalloc((size_t)opts->max_tokens * sizeof *out);
    struct rng rng;
    rng_seed(&rng, opts->seed);
    int *ids = xmalloc((size_t)n_prompt * sizeof *ids);
    for (int i = 0; i < n_prompt; i++) ids[i] = prompt[i];
    rc = model_prefill(m, cache, 0, ids, n_prompt, logits, err);
    free(ids);
    if (rc) goto out;
    rc = -1;
    int slot = 0;
    while (n_out < opts->max_tokens) {
        int next = sample_pick_k(logits, order, V, opts->temperature, opts->top_p, opts->top_k, &rng);
        if (sample_is_end_token(tok, mc, next)) break;
        out[n_out++] = next;
        if (n_out == opts->max_tokens) break;
        if (model_decode_step(m, cache, &slot, &next, 1, logits, err)) goto out;
    }
    int32_t *ids32 = xmalloc((size_t)(n_out ? n_out : 1) * sizeof *ids32);
    for (int i = 0; i < n_out; i++) ids32[i] = out[i];
    size_t len;
    rc = tokenizer_decode(tok, ids32, (size_t)n_out, text, &len, err);
    free(ids32);
    *n_tokens = n_out;
out:
    if (cache) kv_cache_free(cache);
    if (m) model_free(m);
    if (tok) tokenizer_free(tok);
    chat_template_free(&tpl);
    free(prompt);
    free(mask);
    free(out);
    free(order);
    free(logits);
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

int score_run(const char *model_dir, const char *adapter_dir, const char *data_path, FILE *out,
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
        float loss;
        if ((rc = model_forward(m, &b, &loss, err))) goto out;
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
