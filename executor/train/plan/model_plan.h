/* model_plan.h - the training engine's memory plan: the device bytes model.c allocates for a model
 * config and a job, by kind (weights, LoRA, gradients, optimizer moments, master copies, a frozen
 * reference, activation buffers, logits, RoPE table, KV cache).
 *
 * Pure model arithmetic (libc only: no I/O, no allocation), compiled into its own library,
 * whet_model_plan, so two sides use one source: the engine sizes its allocations from it
 * (model.c: parameters, LoRA, gradients and moments come from the plan, and model_load refuses a
 * layout the plan does not match), and the scheduler's sizing (scheduler/placement/sizing.c)
 * estimates a job's memory with it. That the pure placement library depends on a file under
 * executor/ is acceptable because nothing else comes with it: it is the model's math, not the engine
 * (tests/unit/model/test_model_plan.c checks the plan against what the CPU backend allocates).
 *
 * Activations: model.c keeps, per layer (one set with recompute or for inference), ln1, mid, ln2
 * (C each), qkv (QKV), attention output (Q = NH·hd), gate|up (2F), silu(gate)·up (F), the
 * normalisations' reciprocal RMS (1 + 1), a log-sum-exp per head (NH; attention keeps no T×T
 * matrix), Qwen3's q/k norms (NH + NKV rstd values and the normed QK), and r values per LoRA target
 * (x·Aᵀ); besides those the residual stream (L + 1)·C, the final norm (C + 1 + C), five per-token
 * scalars (loss log-sum-exp, loss, weight) and seven int arrays (ids, positions, target rows,
 * targets, correct, and the attention segments at two ints each); when training one set of gradient
 * buffers shared by all layers: 3C + QKV + Q + 3F (+ QK with q/k norms, + r with LoRA). Logits are
 * computed min(tokens, logit_rows) rows at a time. Host-side buffers (per-token copies for the
 * statistics) are not device memory and are not in the plan. */
#ifndef WHET_MODEL_PLAN_H
#define WHET_MODEL_PLAN_H

#include <stddef.h>
#include <stdint.h>

#define MP_LOGIT_CHUNK_VALUES (64 << 20) /* logits computed at once: 64 Mi values (256 MB in f32) */
#define MP_ROPE_MIN_POSITIONS 256       /* the RoPE table starts this long and doubles */
#define MP_SCALAR_BYTES 128           /* the step's statistics and squared norm, kept on the device */
#define MP_LORA_MODULES 7               /* q k v o gate up down, the bits of model.h's LORA_* */

/* How values are stored. F32: what this engine does (everything f32). BF16: the plan of a
 * mixed-precision engine (weights, LoRA, gradients and activations in bf16; an f32 master copy of
 * the trainable values; f32 moments and logits), for sizing ahead of it. */
enum mp_dtype { MP_F32, MP_BF16 };

enum mp_method { MP_SFT, MP_DPO, MP_GRPO };

/* The model config (config.json's shape). */
struct mp_shape {
    int64_t hidden;            /* C */
    int64_t intermediate;      /* F */
    int64_t layers;            /* L */
    int64_t heads;             /* NH */
    int64_t kv_heads;          /* NKV */
    int64_t head_dim;          /* hd */
    int64_t vocab;             /* V */
    int tie_word_embeddings, qkv_bias, qk_norm;
};

struct mp_job {
    int train;                 /* 0: inference (no gradients, moments or gradient buffers) */
    enum mp_method method;     /* DPO and GRPO with full fine-tuning keep a frozen reference copy */
    int64_t lora_r;            /* 0: no LoRA (full fine-tuning when training) */
    unsigned lora_targets;     /* bit i: module i of q k v o gate up down */
    int recompute;             /* one set of layer activations, refilled in the backward pass */
    int64_t rows, seq_len;     /* activations for rows × seq_len tokens */
    int64_t logit_rows;        /* rows of logits at once; 0: MP_LOGIT_CHUNK_VALUES / vocab */
    enum mp_dtype dtype;
    int64_t optimizer_shards;  /* ZeRO-1: the moments split over this many ranks (0 or 1: not split) */
    int64_t optimizer_shard;   /* and this rank's shard of them, mp_shard's */
    int shard_params;          /* ZeRO-3 (with optimizer_shards > 1, the ranks): the base parameters sharded unit
                                * by unit (embedding, each layer, head; model.h), and for a full fine-tune its
                                * gradients and moments with them; without train, a sharded frozen model */
};

struct mp_plan {
    int64_t n_params, n_lora, n_trainable; /* values */
    /* bytes */
    int64_t weights;           /* every base parameter, one buffer; under ZeRO-3 what stays resident: the
                                * shards, and the units a pass holds gathered at once (one, or a layer or the
                                * head beside a tied embedding), and likewise the gradients */
    int64_t lora;              /* LoRA A and B, one buffer */
    int64_t gradients;         /* of the trainable values */
    int64_t moments;           /* AdamW m and v of the trainable values (f32), of its shard under ZeRO-1, of
                                * its shard of each unit under ZeRO-3 */
    int64_t master;            /* f32 copy of the trainable values when they are stored narrower */
    int64_t reference;         /* the frozen base of full-fine-tuning DPO and GRPO (a second model) */
    int64_t act_per_token;     /* activation and gradient buffers per token */
    int64_t activations;       /* act_per_token · rows · seq_len */
    int64_t logits;            /* the logits chunk */
    int64_t logit_rows;        /* rows of logits computed at once at most (the chunk's rows with enough tokens) */
    int64_t rope;              /* cos/sin table for seq_len positions */
    int64_t scalars;           /* MP_SCALAR_BYTES */
    int64_t total;             /* the sum of the above */
};

/* Shard `index` of `shards` of n values: [lo, hi), contiguous, in index order, sizes at most one apart
 * (ZeRO's split of the optimizer state, and the shards a reduce-scatter leaves, comm.h). */
void mp_shard(int64_t n, int64_t shards, int64_t index, int64_t *lo, int64_t *hi);

/* Fills the plan. Fields of shape or job that are out of range (negative) count as 0. */
void mp_plan(struct mp_plan *out, const struct mp_shape *s, const struct mp_job *j);

/* Co-training (`whet train --cotrain`): a step's rows, every member's, run in passes of at most this many
 * tokens by default (whole rows: a pass holds at least one), so a group's activations are those of one
 * bounded pass whatever its members, not of all their batches at once. */
#define MP_COTRAIN_PASS_TOKENS 1024
/* The tokens of a co-trained group's largest pass, the `rows` × `seq_len` of its activations (1 × that):
 * the members' step tokens (summed) up to pass_tokens (<= 0: MP_COTRAIN_PASS_TOKENS), and at least the
 * longest row, which a pass never splits. */
int64_t mp_cotrain_pass_tokens(int64_t step_tokens, int64_t longest_row, int64_t pass_tokens);
/* The bound as a setting: WHET_COTRAIN_PASS_TOKENS, which the executor hands to `whet train --cotrain
 * --pass-tokens` and the scheduler's sizing reads (scheduler/placement/sizing.h: a group's one pass), so a
 * group is sized for the passes it runs. */
#define MP_COTRAIN_PASS_TOKENS_ENV "WHET_COTRAIN_PASS_TOKENS"
#define MP_COTRAIN_PASS_TOKENS_MAX (1 << 24) /* the largest bound a setting may ask for */
/* The bound the setting's text asks for: NULL or empty, MP_COTRAIN_PASS_TOKENS; else a whole number from 1
 * to MP_COTRAIN_PASS_TOKENS_MAX, or 0 when the text is not one, with why (why_len bytes) saying so. */
int32_t mp_cotrain_pass_tokens_setting(const char *text, char *why, size_t why_len);

/* Bytes of a KV cache of `slots` sequences of max_len tokens (kv_cache_new in model_generate.c). */
int64_t mp_kv_cache_bytes(const struct mp_shape *s, int64_t slots, int64_t max_len, enum mp_dtype dtype);

#endif
