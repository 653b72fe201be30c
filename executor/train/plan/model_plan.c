/* model_plan.c - the engine's memory plan (see model_plan.h for the buffers and why each is there). */
#include "model_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t nonneg(int64_t v) { return v > 0 ? v : 0; }

/* Base parameters in model.c's layout order: embedding, per layer (input norm, q k v, their biases,
 * q/k norms, o, post-attention norm, gate up down), final norm, untied lm_head. */
static int64_t layer_params(const struct mp_shape *s) {
    int64_t C = s->hidden, F = s->intermediate, Q = s->heads * s->head_dim, KV = s->kv_heads * s->head_dim;
    return C + (Q + 2 * KV) * C + (s->qkv_bias ? Q + 2 * KV : 0) + (s->qk_norm ? 2 * s->head_dim : 0) + C * Q + C +
           2 * F * C + C * F;
}

/* ZeRO-3's units (model.h): the embedding, a layer, the head. */
static int64_t head_params(const struct mp_shape *s) {
    return s->hidden + (s->tie_word_embeddings ? 0 : s->vocab * s->hidden);
}

static int64_t base_params(const struct mp_shape *s) {
    return s->vocab * s->hidden + s->layers * layer_params(s) + head_params(s);
}

static int64_t larger(int64_t a, int64_t b) { return a > b ? a : b; }

/* ZeRO-3: the values a rank keeps (its shard of every unit) and the most a pass holds gathered at once:
 * the unit it computes and the next one, whose all-gather runs meanwhile (embedding then layer, two
 * layers, layer then head); tied, the embedding stays gathered through the forward pass beside them. */
static void sharded_values(const struct mp_shape *s, const struct mp_job *j, int64_t *kept, int64_t *gathered) {
    int64_t units[3] = {s->vocab * s->hidden, layer_params(s), head_params(s)}, count[3] = {1, s->layers, 1};
    *kept = 0;
    for (int u = 0; u < 3; u++) {
        int64_t lo, hi;
        mp_shard(units[u], j->optimizer_shards, j->optimizer_shard, &lo, &hi);
        *kept += count[u] * (hi - lo);
    }
    int64_t after_layer = larger(s->layers > 1 ? 2 * units[1] : 0, units[1] + units[2]);
    *gathered = s->tie_word_embeddings ? units[0] + after_layer : larger(units[0] + units[1], after_layer);
}

/* Inputs and outputs of module i (q k v o gate up down). */
static void module_dims(const struct mp_shape *s, int i, int64_t *in, int64_t *out) {
    int64_t C = s->hidden, F = s->intermediate, Q = s->heads * s->head_dim, KV = s->kv_heads * s->head_dim;
    const int64_t ins[MP_LORA_MODULES] = {C, C, C, Q, C, C, F}, outs[MP_LORA_MODULES] = {Q, KV, KV, C, F, F, C};
    *in = ins[i];
    *out = outs[i];
}

/* Device values per token of the activation and gradient buffers, f32 and int separately. */
static void per_token(const struct mp_shape *s, const struct mp_job *j, int64_t *floats, int64_t *ints) {
    int64_t C = s->hidden, F = s->intermediate, L = s->layers, NH = s->heads, NKV = s->kv_heads;
    int64_t Q = NH * s->head_dim, QKV = Q + 2 * NKV * s->head_dim, QK = (NH + NKV) * s->head_dim;
    int64_t targets = 0;
    for (int i = 0; i < MP_LORA_MODULES; i++) targets += j->lora_r > 0 && (j->lora_targets & (1u << i));
    int64_t set = C + 1 + QKV + (s->qk_norm ? NH + NKV + QK : 0) + NH + Q + C + C + 1 + 2 * F + F + targets * j->lora_r;
    int64_t sets = j->recompute || !j->train ? 1 : L;
    *floats = sets * set + (L + 1) * C + C + 1 + C + 3;
    if (j->train)
        *floats += C + C + QKV + (s->qk_norm ? QK : 0) + Q + 2 * F + F + (j->lora_r > 0 ? j->lora_r : 0) + C;
    *ints = 7; /* ids, positions, target rows, targets, correct, and a segment (start, length) */
}

void mp_plan(struct mp_plan *out, const struct mp_shape *shape, const struct mp_job *job) {
    struct mp_shape s = *shape;
    struct mp_job j = *job;
    int64_t *dims[] = {&s.hidden, &s.intermediate, &s.layers, &s.heads, &s.kv_heads, &s.head_dim, &s.vocab,
                       &j.lora_r, &j.rows, &j.seq_len, &j.logit_rows};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) *dims[i] = nonneg(*dims[i]);
    int64_t narrow = j.dtype == MP_BF16 ? 2 : 4, wide = 4;
    memset(out, 0, sizeof *out);

    out->n_params = base_params(&s);
    for (int i = 0; i < MP_LORA_MODULES && j.lora_r > 0; i++)
        if (j.lora_targets & (1u << i)) {
            int64_t in, o;
            module_dims(&s, i, &in, &o);
            out->n_lora += s.layers * j.lora_r * (in + o);
        }
    out->n_trainable = !j.train ? 0 : j.lora_r > 0 ? out->n_lora : out->n_params;
    out->weights = narrow * out->n_params;
    out->lora = narrow * out->n_lora;
    out->gradients = narrow * out->n_trainable;
    int64_t lo = 0, hi = out->n_trainable;
    if (j.optimizer_shards > 1) mp_shard(out->n_trainable, j.optimizer_shards, j.optimizer_shard, &lo, &hi);
    out->moments = 2 * wide * (hi - lo);
    if (j.optimizer_shards > 1 && j.shard_params) { /* (without train: a sharded frozen reference) */
        int64_t kept, gathered;
        sharded_values(&s, &j, &kept, &gathered);
        out->weights = narrow * (kept + gathered);
        if (j.train && j.lora_r == 0) { /* a full fine-tune's gradients and moments follow its units */
            out->gradients = out->weights;
            out->moments = 2 * wide * kept;
        }
    }
    out->master = narrow < wide ? wide * out->n_trainable : 0;
    if (j.train && j.lora_r == 0 && j.method != MP_SFT) out->reference = out->weights + MP_SCALAR_BYTES; /* a model */

    int64_t floats, ints;
    per_token(&s, &j, &floats, &ints);
    out->act_per_token = narrow * floats + 4 * ints;
    int64_t tokens = j.rows * j.seq_len;
    out->activations = out->act_per_token * tokens;
    int64_t logit_rows = j.logit_rows > 0 ? j.logit_rows : s.vocab > 0 ? MP_LOGIT_CHUNK_VALUES / s.vocab : 1;
    if (logit_rows < 1) logit_rows = 1;
    out->logit_rows = logit_rows;
    out->logits = wide * (tokens < logit_rows ? tokens : logit_rows) * s.vocab;
    int64_t positions = MP_ROPE_MIN_POSITIONS;
    while (positions < j.seq_len) positions *= 2;
    out->rope = wide * positions * s.head_dim;
    out->scalars = MP_SCALAR_BYTES;
    out->total = out->weights + out->lora + out->gradients + out->moments + out->master + out->reference +
                 out->activations + out->logits + out->rope + out->scalars;
}

void mp_shard(int64_t n, int64_t shards, int64_t index, int64_t *lo, int64_t *hi) {
    int64_t base = n / shards, extra = n % shards;
    *lo = index * base + (index < extra ? index : extra);
    *hi = *lo + base + (index < extra ? 1 : 0);
}

int64_t mp_kv_cache_bytes(const struct mp_shape *s, int64_t slots, int64_t max_len, enum mp_dtype dtype) {
    return (dtype == MP_BF16 ? 2 : 4) * 2 * nonneg(s->layers) * nonneg(slots) * nonneg(max_len) * nonneg(s->kv_heads) *
           nonneg(s->head_dim);
}

int64_t mp_cotrain_pass_tokens(int64_t step_tokens, int64_t longest_row, int64_t pass_tokens) {
    int64_t bound = pass_tokens > 0 ? pass_tokens : MP_COTRAIN_PASS_TOKENS;
    if (bound < longest_row) bound = longest_row;
    return nonneg(step_tokens < bound ? step_tokens : bound);
}

int32_t mp_cotrain_pass_tokens_setting(const char *text, char *why, size_t why_len) {
    if (!text || !*text) return MP_COTRAIN_PASS_TOKENS;
    char *end;
    long long n = strtoll(text, &end, 10);
    if (text[0] >= '0' && text[0] <= '9' && !*end && n >= 1 && n <= MP_COTRAIN_PASS_TOKENS_MAX) return (int32_t)n;
    snprintf(why, why_len,
             "%s=\"%s\": expected a whole number of tokens from 1 to %d (a co-training pass's bound; unset: %d); "
             "the scheduler and every executor read it, so set it alike on all of them",
             MP_COTRAIN_PASS_TOKENS_ENV, text, MP_COTRAIN_PASS_TOKENS_MAX, MP_COTRAIN_PASS_TOKENS);
    return 0;
}
