/* model_generate.c - generation: a KV cache and the prefill and decode passes that fill and read it.
 *
 * A KV cache holds, per layer, the keys and values of up to n_slots sequences of max_len tokens
 * (slot s owns rows s*max_len .. s*max_len+max_len-1). A pass (`infer`) takes n new tokens, each
 * appended to a slot, runs them through the same layer halves as model.c's forward pass
 * (model_attn_inputs, then backend attention_cached against the slot's rows instead of causal
 * attention within the batch, then model_attn_outputs_and_mlp) and projects only the rows whose
 * logits are wanted: the last prompt token for model_prefill, every token for model_decode_step.
 * It reuses the model's activation buffers (the first layer set for every layer), so it runs between
 * training steps, never between a model_forward and its model_backward. */
#include <stdlib.h>

#include "model_internal.h"

struct kv_cache {
    const struct backend *be;
    int n_layers, n_slots, max_len, kv_dim, *len;
    float **k, **v; /* per layer [n_slots * max_len, NKV*hd] */
};

struct kv_cache *kv_cache_new(const struct model *m, int n_slots, int max_len) {
    struct kv_cache *c = xcalloc(1, sizeof *c);
    c->be = m->be;
    c->n_slots = n_slots, c->max_len = max_len, c->kv_dim = m->NKV * m->hd;
    c->len = xcalloc((size_t)n_slots, sizeof(int));
    c->k = xcalloc((size_t)m->L, sizeof(float *));
    c->v = xcalloc((size_t)m->L, sizeof(float *));
    size_t per = (size_t)n_slots * max_len * m->NKV * m->hd;
    for (int l = 0; l < m->L; l++) {
        c->k[l] = m->be->alloc(sizeof(float) * per);
        c->v[l] = m->be->alloc(sizeof(float) * per);
    }
    c->n_layers = m->L;
    return c;
}

void kv_cache_free(struct kv_cache *c) {
    if (!c) return;
    for (int l = 0; l < c->n_layers; l++) {
        c->be->free(c->k[l]);
        c->be->free(c->v[l]);
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
    size_t n = (size_t)c->len[src] * c->kv_dim;
    for (int l = 0; l < c->n_layers; l++) {
        c->be->copy(c->k[l] + row0_dst, c->k[l] + row0_src, n);
        c->be->copy(c->v[l] + row0_dst, c->v[l] + row0_src, n);
    }
    c->len[dst] = c->len[src];
    return 0;
}

/* n tokens, token i appended to slot slots[i]; logits of the tokens listed in out_rows (n_out of
 * them) go to logits[n_out, V] on the host. */
static int infer(struct model *m, struct kv_cache *c, const int *ids, const int *slots, int n, const int *out_rows,
                 int n_out, float *logits, struct whet_err *err) {
    const struct backend *be = m->be;
    int C = m->C, kvd = m->NKV * m->hd;
    int *pos = xmalloc(sizeof(int) * (size_t)n), *first = xmalloc(sizeof(int) * (size_t)n),
        *nctx = xmalloc(sizeof(int) * (size_t)n), *rows = xmalloc(sizeof(int) * (size_t)n);
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
        pos[i] = c->len[s] + added[s]++;
        first[i] = s * c->max_len;
        nctx[i] = pos[i] + 1;
        rows[i] = first[i] + pos[i];
        max_pos = pos[i] > max_pos ? pos[i] : max_pos;
    }
    if (rc) goto out;
    model_ensure_acts(m, n);
    model_ensure_rope(m, max_pos + 1);
    int *d_first = m->rows, *d_nctx = m->targets_c, *d_rows = m->correct;
    be->upload(m->ids, ids, sizeof(int) * (size_t)n);
    be->upload(m->pos, pos, sizeof(int) * (size_t)n);
    be->upload(d_first, first, sizeof(int) * (size_t)n);
    be->upload(d_nctx, nctx, sizeof(int) * (size_t)n);
    be->upload(d_rows, rows, sizeof(int) * (size_t)n);
    float *x = m->resid, *y = m->resid + (size_t)n * C;
    be->embedding_forward(x, m->ids, m->embed, n, C);
    struct layer_acts *a = &m->acts[0];
    for (int l = 0; l < m->L; l++) {
        model_attn_inputs(m, l, a, x, n, m->pos);
        const float *q, *k, *v;
        int ldq, ldk;
        model_qkv_views(m, a, &q, &ldq, &k, &ldk, &v);
        be->set_rows(c->k[l], d_rows, k, ldk, n, kvd);
        be->set_rows(c->v[l], d_rows, v, m->QKV, n, kvd);
        be->attention_cached(a->att, q, ldq, c->k[l], c->v[l], d_first, d_nctx, n, m->NH, m->NKV, m->hd);
        model_attn_outputs_and_mlp(m, l, a, x, y, n);
        float *tmp = x;
        x = y, y = tmp;
    }
    be->rmsnorm_forward(m->lnf, C, m->rstdf, x, C, m->norm, n, 1, C, m->cfg.rms_norm_eps);
    be->upload(m->rows, out_rows, sizeof(int) * (size_t)n_out);
    be->gather_rows(m->lnf_c, m->lnf, m->rows, n_out, C);
    for (int c0 = 0; c0 < n_out; c0 += m->logit_rows) {
        int R = n_out - c0 < m->logit_rows ? n_out - c0 : m->logit_rows;
        be->matmul_forward(m->logits, m->V, m->lnf_c + (size_t)c0 * C, C, m->lm_head, NULL, R, C, m->V, 0.0f);
        be->download(logits + (size_t)c0 * m->V, m->logits, sizeof(float) * (size_t)R * m->V);
    }
    for (int s = 0; s < c->n_slots; s++) c->len[s] += added[s];
out:
    free(pos);
    free(first);
    free(nctx);
    free(rows);
    free(added);
    return rc;
}

int model_prefill(struct model *m, struct kv_cache *c, int slot, const int *ids, int n, float *logits,
                  struct whet_err *err) {
    if (n < 1) return whet_errf(err, "generation: empty prompt");
    int *slots = xmalloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) slots[i] = slot;
    int last = n - 1;
    int rc = infer(m, c, ids, slots, n, &last, 1, logits, err);
    free(slots);
    return rc;
}

int model_decode_step(struct model *m, struct kv_cache *c, const int *slots, const int *ids, int n, float *logits,
                      struct whet_err *err) {
    if (n < 1) return 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (slots[i] == slots[j]) return whet_errf(err, "generation: slot %d given twice in one step", slots[i]);
    int *rows = xmalloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) rows[i] = i;
    int rc = infer(m, c, ids, slots, n, rows, n, logits, err);
    free(rows);
    return rc;
}