/* model_generate.c - generation: a KV cache and the prefill and decode passes that fill and read it.
 *
 * A KV cache holds, per layer, the keys and values of up to n_slots sequences of max_len tokens
 * (slot s owns rows s*max_len .. s*max_len+max_len-1). A pass (`infer`) takes n new tokens, each
 * appended to a slot, runs them through the same layer halves as model.c's forward pass
 * (model_attn_inputs, then backend attention_cached against the slot's rows instead of causal
 * attention within the batch, then model_attn_outputs_and_mlp) and projects only the rows whose
 * logits are wanted: the last prompt token for model_prefill, every token for model_decode_step.
 * Those rows end either downloaded to the host (the logits variants, for scoring and tests) or
 * sampled on the device (the _sample variants), which download only the tokens and their figures:
 * a decode step uploads its index tables in one go, its sampling rows in a second, and downloads
 * 3n numbers (43n with top log-probs). It reuses the model's activation buffers (the first layer set
 * for every layer), so it runs between training steps, never between a model_forward and its
 * model_backward. */
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

struct kv_cache {
    struct backend *be;
    int n_layers, n_slots, max_len, kv_dim, *len;
    float **k, **v; /* per layer [n_slots * max_len, NKV*hd] */
};

struct kv_cache *kv_cache_new(const struct model *m, int n_slots, int max_len, struct whet_err *err) {
    struct kv_cache *c = xcalloc(1, sizeof *c);
    c->be = m->be;
    c->n_slots = n_slots, c->max_len = max_len, c->kv_dim = m->NKV * m->hd;
    c->len = xcalloc((size_t)n_slots, sizeof(int));
    c->k = xcalloc((size_t)m->L, sizeof(float *));
    c->v = xcalloc((size_t)m->L, sizeof(float *));
    size_t per = (size_t)n_slots * max_len * m->NKV * m->hd;
    for (int l = 0; l < m->L; l++, c->n_layers++)
        if (!(c->k[l] = m->be->alloc(m->be, sizeof(float) * per, err)) ||
            !(c->v[l] = m->be->alloc(m->be, sizeof(float) * per, err))) {
            c->n_layers++;
            kv_cache_free(c);
            whet_err_hint(err, "a KV cache of %d sequences of %d tokens does not fit: generate fewer or shorter",
                          n_slots, max_len);
            return NULL;
        }
    return c;
}

void kv_cache_free(struct kv_cache *c) {
    if (!c) return;
    for (int l = 0; l < c->n_layers; l++) {
        c->be->free(c->be, c->k[l]);
        c->be->free(c->be, c->v[l]);
    }
    free(c->k);
    free(c->v);
    free(c->len);
    free(c);
}

void kv_cache_clear(struct kv_cache *c, int slot) {
    if (slot >= 0 && slot < c->n_slots) c->len[slot] = 0;
}

int kv_cache_len(const struct kv_cache *c, int slot) { return slot >= 0 && slot < c->n_slots ? c->len[slot] : -1; }

int kv_cache_copy_slot(struct kv_cache *c, int dst, int src, struct whet_err *err) {
    if (dst < 0 || dst >= c->n_slots || src < 0 || src >= c->n_slots)
        return whet_errf(err, "generation: slot %d or %d is outside [0, %d)", dst, src, c->n_slots);
    if (dst == src) return 0;
    /* a slot is max_len rows of kv_dim floats; only its first len rows hold anything */
    size_t row0_dst = (size_t)dst * c->max_len * c->kv_dim, row0_src = (size_t)src * c->max_len * c->kv_dim;
    size_t bytes = sizeof(float) * (size_t)c->len[src] * c->kv_dim;
    for (int l = 0; l < c->n_layers; l++) {
        c->be->copy(c->be, c->k[l] + row0_dst, c->k[l] + row0_src, bytes);
        c->be->copy(c->be, c->v[l] + row0_dst, c->v[l] + row0_src, bytes);
    }
    c->len[dst] = c->len[src];
    return 0;
}

/* Words (4 bytes) of what `sample` yields per row: the id, entropy and log-prob, and the top tokens
 * with their log-probs. */
#define RESULT_WORDS (3 + 2 * SAMPLE_TOP_MAX)

/* The device scratch of generation for n rows: sample rows [n] (first: they hold 8-byte seeds), then
 * gen_ints [5n] (ids, positions, first cache row, context length, cache row of each token), then the
 * draws' results [RESULT_WORDS n]. Grown on demand, freed with the model; generation's own, outside the training
 * plan, as the all-logits buffer of a forward without targets. */
static int ensure_gen(struct model *m, int n, struct whet_err *err) {
    if (n <= m->gen_cap) return 0;
    m->be->free(m->be, m->gen);
    m->gen_cap = 0;
    size_t bytes = (sizeof(int) * (5 + RESULT_WORDS) + sizeof(struct sample_row)) * (size_t)n;
    if (!(m->gen = m->be->alloc(m->be, bytes, err))) return -1;
    m->gen_cap = n;
    return 0;
}
static struct sample_row *gen_rows(const struct model *m) { return m->gen; }
static int *gen_ints(const struct model *m) { return (int *)(gen_rows(m) + m->gen_cap); }

/* Where the results of n draws go on the device, laid out with stride n so they download in one go;
 * the rows from `first` on. */
static struct sample_out gen_results(const struct model *m, int n, int first) {
    int *base = gen_ints(m) + 5 * (size_t)m->gen_cap;
    return (struct sample_out){.ids = base + first, .entropy = (float *)(base + n) + first,
                               .logprob = (float *)(base + 2 * n) + first,
                               .top_ids = base + 3 * n + (size_t)first * SAMPLE_TOP_MAX,
                               .top_logprobs = (float *)(base + 3 * n + (size_t)n * SAMPLE_TOP_MAX) +
                                               (size_t)first * SAMPLE_TOP_MAX};
}

/* What a pass does with the rows it projects: download their logits[n_out, V] (logits != NULL), or
 * draw from them on the device as rows[n_out] say, into `out` (host arrays, sample_row.h). */
struct gen_out {
    float *logits;
    const struct sample_row *rows;
    const struct sample_out *out;
};

/* Downloads the results of n draws into the host arrays of `out` that are not NULL. */
static void take_results(struct model *m, int n, const struct sample_out *out) {
    int tops = out->top_ids || out->top_logprobs;
    size_t words = (size_t)n * (tops ? RESULT_WORDS : 3);
    int *host = xmalloc(sizeof(int) * words);
    m->be->download(m->be, host, gen_results(m, n, 0).ids, sizeof(int) * words);
    memcpy(out->ids, host, sizeof(int) * (size_t)n);
    if (out->entropy) memcpy(out->entropy, host + n, sizeof(float) * (size_t)n);
    if (out->logprob) memcpy(out->logprob, host + 2 * n, sizeof(float) * (size_t)n);
    if (out->top_ids) memcpy(out->top_ids, host + 3 * n, sizeof(int) * (size_t)n * SAMPLE_TOP_MAX);
    if (out->top_logprobs)
        memcpy(out->top_logprobs, host + 3 * n + n * SAMPLE_TOP_MAX, sizeof(float) * (size_t)n * SAMPLE_TOP_MAX);
    free(host);
}

/* Projects the n_out rows of m->lnf_c a chunk of logits at a time and hands them out as `out` says. */
static void project_rows(struct model *m, int n_out, const struct gen_out *out) {
    struct backend *be = m->be;
    int C = m->C, V = m->V;
    if (!out->logits) be->upload(be, gen_rows(m), out->rows, sizeof *out->rows * (size_t)n_out);
    for (int c0 = 0; c0 < n_out; c0 += m->logit_rows) {
        int R = n_out - c0 < m->logit_rows ? n_out - c0 : m->logit_rows;
        be->matmul_forward(be, m->logits, V, m->lnf_c + (size_t)c0 * C, C, m->lm_head, NULL, R, C, V, 0.0f);
        if (out->logits) {
            be->download(be, out->logits + (size_t)c0 * V, m->logits, sizeof(float) * (size_t)R * V);
        } else {
            struct sample_out dev = gen_results(m, n_out, c0);
            be->sample(be, &dev, m->logits, gen_rows(m) + c0, R, V);
        }
    }
    if (!out->logits) take_results(m, n_out, out->out);
}

/* n tokens, token i appended to slot slots[i]; the final-norm rows of the tokens listed in out_rows
 * (n_out of them, a token listed several times to draw from it several times) are projected and
 * handed out as `out` says. */
static int infer(struct model *m, struct kv_cache *c, const int *ids, const int *slots, int n, const int *out_rows,
                 int n_out, const struct gen_out *out, struct whet_err *err) {
    struct backend *be = m->be;
    int C = m->C, kvd = m->NKV * m->hd;
    /* the host side of gen_ints: ids, positions, first cache row, context length, cache row */
    int *tab = xmalloc(sizeof(int) * 5 * (size_t)n), *pos = tab + n, *first = tab + 2 * n, *nctx = tab + 3 * n,
        *rows = tab + 4 * n;
    int *added = xcalloc((size_t)c->n_slots, sizeof(int));
    int rc = 0, max_pos = 0;
    for (int i = 0; i < n && !rc; i++) {
        int s = slots[i];
        if (s < 0 || s >= c->n_slots) rc = whet_errf(err, "generation: slot %d is outside [0, %d)", s, c->n_slots);
        else if (ids[i] < 0 || ids[i] >= m->V)
            rc = whet_errf(err, "generation: token id %d is outside the vocabulary", ids[i]);
        else if (c->len[s] + added[s] >= c->max_len)
            rc = whet_errf(err, "generation: slot %d is full (%d tokens)", s, c->max_len);
        else if (c->len[s] + added[s] >= m->cfg.max_position_embeddings)
            rc = whet_errf(err, "generation: position beyond max_position_embeddings");
        else if (m->cfg.sliding_window && c->len[s] + added[s] >= m->cfg.sliding_window)
            rc = whet_errf(err, "generation: sequence longer than the model's sliding window (%d), which this "
                                "engine does not implement", m->cfg.sliding_window);
        if (rc) break;
        tab[i] = ids[i];
        pos[i] = c->len[s] + added[s]++;
        first[i] = s * c->max_len;
        nctx[i] = pos[i] + 1;
        rows[i] = first[i] + pos[i];
        max_pos = pos[i] > max_pos ? pos[i] : max_pos;
    }
    int rows_needed = n > n_out ? n : n_out;
    if (rc || (rc = model_ensure_acts(m, rows_needed, err)) || (rc = model_ensure_rope(m, max_pos + 1, err)) ||
        (rc = ensure_gen(m, rows_needed, err)) || (rc = model_prepare_runs(m, n, err)))
        goto out;
    int *d = gen_ints(m);
    be->upload(be, d, tab, sizeof(int) * 5 * (size_t)n);
    const int *d_ids = d, *d_pos = d + n, *d_first = d + 2 * n, *d_nctx = d + 3 * n, *d_rows = d + 4 * n;
    float *x = m->resid, *y = m->resid + (size_t)n * C;
    be->embedding_forward(be, x, d_ids, m->embed, n, C);
    struct layer_acts *a = &m->acts[0];
    for (int l = 0; l < m->L; l++) {
        model_attn_inputs(m, l, a, x, n, d_pos);
        const float *q, *k, *v;
        int ldq, ldk;
        model_qkv_views(m, a, &q, &ldq, &k, &ldk, &v);
        be->set_rows(be, c->k[l], d_rows, k, ldk, n, kvd);
        be->set_rows(be, c->v[l], d_rows, v, m->QKV, n, kvd);
        be->attention_cached(be, a->att, q, ldq, c->k[l], c->v[l], d_first, d_nctx, n, m->NH, m->NKV, m->hd);
        model_attn_outputs_and_mlp(m, l, a, x, y, n);
        float *tmp = x;
        x = y, y = tmp;
    }
    be->rmsnorm_forward(be, m->lnf, C, m->rstdf, x, C, m->norm, n, 1, C, m->cfg.rms_norm_eps);
    be->upload(be, m->rows, out_rows, sizeof(int) * (size_t)n_out);
    be->gather_rows(be, m->lnf_c, m->lnf, m->rows, n_out, C);
    project_rows(m, n_out, out);
    for (int s = 0; s < c->n_slots; s++) c->len[s] += added[s];
out:
    free(tab);
    free(added);
    return rc;
}

/* The prompt's last token is projected n_draws times. */
static int prefill(struct model *m, struct kv_cache *c, int slot, const int *ids, int n, int n_draws,
                   const struct gen_out *out, struct whet_err *err) {
    if (n < 1) return whet_errf(err, "generation: empty prompt");
    if (n_draws < 1) return whet_errf(err, "generation: %d draws from a prompt", n_draws);
    int *slots = xmalloc(sizeof(int) * (size_t)n), *last = xmalloc(sizeof(int) * (size_t)n_draws);
    for (int i = 0; i < n; i++) slots[i] = slot;
    for (int i = 0; i < n_draws; i++) last[i] = n - 1;
    int rc = infer(m, c, ids, slots, n, last, n_draws, out, err);
    free(slots);
    free(last);
    return rc;
}

static int decode_step(struct model *m, struct kv_cache *c, const int *slots, const int *ids, int n,
                       const struct gen_out *out, struct whet_err *err) {
    if (n < 1) return 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (slots[i] == slots[j]) return whet_errf(err, "generation: slot %d given twice in one step", slots[i]);
    int *rows = xmalloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) rows[i] = i;
    int rc = infer(m, c, ids, slots, n, rows, n, out, err);
    free(rows);
    return rc;
}

int model_prefill(struct model *m, struct kv_cache *c, int slot, const int *ids, int n, float *logits,
                  struct whet_err *err) {
    return prefill(m, c, slot, ids, n, 1, &(struct gen_out){.logits = logits}, err);
}

int model_decode_step(struct model *m, struct kv_cache *c, const int *slots, const int *ids, int n, float *logits,
                      struct whet_err *err) {
    return decode_step(m, c, slots, ids, n, &(struct gen_out){.logits = logits}, err);
}

int model_prefill_sample(struct model *m, struct kv_cache *c, int slot, const int *ids, int n, int n_draws,
                         const struct sample_row *rows, const struct sample_out *out, struct whet_err *err) {
    return prefill(m, c, slot, ids, n, n_draws, &(struct gen_out){.rows = rows, .out = out}, err);
}

int model_decode_sample(struct model *m, struct kv_cache *c, const int *slots, const int *ids, int n,
                        const struct sample_row *rows, const struct sample_out *out, struct whet_err *err) {
    return decode_step(m, c, slots, ids, n, &(struct gen_out){.rows = rows, .out = out}, err);
}

int model_sample_logits(struct model *m, const int *rows, int n, const struct sample_row *params,
                        const struct sample_out *out, struct whet_err *err) {
    if (m->has_targets || !m->all_logits) return whet_errf(err, "model_sample_logits: no forward pass without targets");
    for (int i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= m->N)
            return whet_errf(err, "model_sample_logits: row %d is outside [0, %d)", rows[i], m->N);
    if (ensure_gen(m, n, err)) return -1;
    /* the rows' logits are gathered a chunk at a time into m->logits and drawn from there */
    struct backend *be = m->be;
    be->upload(be, gen_rows(m), params, sizeof *params * (size_t)n);
    be->upload(be, gen_ints(m), rows, sizeof(int) * (size_t)n);
    for (int c0 = 0; c0 < n; c0 += m->logit_rows) {
        int R = n - c0 < m->logit_rows ? n - c0 : m->logit_rows;
        be->gather_rows(be, m->logits, m->all_logits, gen_ints(m) + c0, R, m->V);
        struct sample_out dev = gen_results(m, n, c0);
        be->sample(be, &dev, m->logits, gen_rows(m) + c0, R, m->V);
    }
    take_results(m, n, out);
    return 0;
}
