/* model_internal.h - the model's private layout, shared by the three files that implement model.h.
 *
 * model.c owns the model: the tensor layout, loading and freeing, activations, the forward and
 * backward passes and the optimiser. model_io.c reads and writes its files (safetensors weights,
 * Hugging Face model dirs, PEFT adapters, optimiser state); model_generate.c runs generation with a
 * KV cache through the same layer code the forward pass uses. Only those three include this header:
 * everything else goes through model.h. Functions declared here are named after the file that
 * defines them (model_… in model.c, model_io_… in model_io.c). */
#ifndef WHET_MODEL_INTERNAL_H
#define WHET_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "model.h"

/* The LoRA-targetable modules of a layer, in enum lora_target's bit order; their Hugging Face names
 * and the parent module that holds each ("self_attn" or "mlp"). */
enum { MOD_Q, MOD_K, MOD_V, MOD_O, MOD_GATE, MOD_UP, MOD_DOWN, N_MODS };
extern const char *const model_mod_names[N_MODS];
extern const char *const model_mod_parents[N_MODS];

/* A named tensor: a base parameter or a LoRA matrix. */
struct tensor {
    char name[128];
    int ndim;
    int64_t shape[2];
    size_t numel;
    float *ptr;  /* device */
    float *grad; /* device; NULL when frozen */
    int decay;   /* weight decay applies (matrices) */
};

struct layer_params {
    float *ln1, *wqkv, *bqkv, *q_norm, *k_norm, *wo, *ln2, *wgu, *wdown;
};

struct lora_mod {
    float *A, *B;   /* [r, in], [out, r]; NULL when not targeted */
    float *dA, *dB;
};

struct layer_acts {
    float *ln1, *rstd1, *qkv, *q_rstd, *k_rstd, *qkr, *lse, *att, *mid, *ln2, *rstd2, *gu, *h;
    float *xa[N_MODS]; /* LoRA x @ A^T, [N, r] */
};


struct model {
    struct backend *be; /* owned: opened on the device model_opts names */
    struct model_config cfg;
    char *dir;
    int C, F, NH, NKV, hd, QKV, QK, L, V;
    int train, full_ft, recompute;
    int frozen_base; /* trains nothing of its own: the base of co-trained views (model_opts.frozen_base) */

    float *params;
    size_t n_params;
    float *embed, *norm, *lm_head;
    struct layer_params *layers;

    int lora_r, rslora;
    float lora_alpha, lora_scale;
    int adapter_off; /* model_set_adapter_enabled(m, 0): the LoRA terms are skipped (the reference) */
    /* model_set_logit_temperature: the loss is the nll of softmax(logits / t). loss_inv_t is the 1/t
     * the last forward with targets used, so its backward goes through the same scale. */
    float logit_temperature, loss_inv_t;
    unsigned targets;
    float *lora;
    size_t n_lora;
    struct lora_mod (*lmods)[N_MODS];

    struct tensor *tensors;
    int n_tensors, n_base_tensors;

    float *tp, *grads, *adam_m, *adam_v; /* trainable buffer and its mirrors */
    /* Device scalars (doubles): [0, 4) the last forward's statistics (backend loss_stats), [4, 8) their
     * sum since model_take_stats, [8] the squared gradient norm. */
    double *scalars;
    size_t n_train;
    int adam_t;
    /* The spans of the trainable buffer the optimizer steps (model_optimizer_spans): [0, n_train) alone,
     * ZeRO-1's shard, or ZeRO-3's shard of each unit; the moments hold them back to back. */
    struct model_span *spans;
    int n_spans;
    size_t n_span_values;
    /* ZeRO-3 (model_opts.shard_params): units[u] of the base buffer — [0] the embedding, [1 + l] layer l,
     * [L + 1] the head — and unit_own[u] this rank's shard of it (a full fine-tune's spans too); resident[u]
     * when gathered (all_resident: model_gather_params keeps them so), in_flight[u] the all-gather started
     * ahead of its use (unit_use). A collective that failed fails every pass after it, with shard_err. */
    int sharded, all_resident, shard_failed;
    struct model_span *units, *unit_own;
    unsigned char *resident;
    void **in_flight;
    struct model_shard_ops shard_ops;
    struct whet_err shard_err;
    int (*reduce_sumsq)(void *ctx, double *device_sumsq);
    void *reduce_sumsq_ctx;
    void (*grad_ready)(void *ctx, size_t lo, size_t hi); /* model_set_grad_ready */
    void *grad_ready_ctx;

    /* Activations, sized for cap_N tokens. */
    int cap_N;
    void **allocs;
    int n_allocs;
    struct layer_acts *acts; /* L of them, or 1 with recompute / inference */
    float *resid;            /* [(L+1), N, C] */
    float *lnf, *rstdf, *lnf_c, *lse, *losses, *weights_c;
    /* Logits are computed logit_rows rows at a time into `logits`, so a large vocabulary never
     * needs N×V floats; a forward without targets fills all_logits (N×V) for model_get_logits. */
    float *logits, *all_logits;
    int logit_rows, logits_kept;
    int *correct, *rows, *targets_c, *ids, *pos;
    struct attn_segment *d_segs; /* the last forward's segments, on the device */
    void *gen;   /* generation's device scratch for gen_cap rows (model_generate.c) */
    int gen_cap;
    /* Serving: a view (model_load_adapter_view) borrows its base's weights and device; a base runs
     * the adapters of model_set_lora_runs on its rows, with run_xa as their x·Aᵀ (model_prepare_runs lays
     * it out for passes of runs_N tokens) and run_dxa as its gradient's scratch. */
    struct model *view_of;
    struct lora_run *runs;
    int n_runs, runs_max_r, runs_N;
    float *run_xa, *run_dxa;
    size_t run_xa_cap; /* floats */
    float *dresid, *dln, *dqkv, *dqkr, *datt, *dgu, *dh, *dxa, *dlnf_c;

    float *cos_sin; /* [rope_cap, hd] */
    int rope_cap;

    /* The last forward. */
    int N, M, has_targets, backward_ready; /* tokens, weighted target rows */
    int longest; /* the longest segment */
    struct attn_segment *segs; /* host copy of d_segs */
    int n_segs;
    int *h_rows; /* the token of each weighted target row */
    float *h_losses;
};

/* ---- model.c ---- */
/* The tensor of that name (base or LoRA), or NULL. */
struct tensor *model_find_tensor(const struct model *m, const char *name);
/* Input and output features of LoRA-targetable module `mod` (MOD_*). */
void model_mod_dims(const struct model *m, int mod, int *in, int *out);
/* Activation buffers for N tokens (grown, never shrunk), and RoPE tables for positions < need; -1
 * when the device is out of memory (err says how much was needed and what to lower). */
int model_ensure_acts(struct model *m, int N, struct whet_err *err);
/* With serving runs set: checks they cover the N tokens of the coming pass and sizes run_xa. */
int model_prepare_runs(struct model *m, int N, struct whet_err *err);
int model_ensure_rope(struct model *m, int need, struct whet_err *err);
/* The two halves of a layer around its attention, shared by the forward pass and generation:
 * model_attn_inputs computes ln1, qkv (+LoRA), q/k norm and RoPE of layer l into a from x[N, C];
 * model_qkv_views says where q, k (after RoPE) and v live in a; model_attn_outputs_and_mlp takes a->att
 * to the layer output out[N, C]. */
void model_attn_inputs(struct model *m, int l, struct layer_acts *a, const float *x, int N, const int *pos);
void model_qkv_views(const struct model *m, const struct layer_acts *a, const float **q, int *ldq, const float **k,
                     int *ldk, const float **v);
void model_attn_outputs_and_mlp(struct model *m, int l, struct layer_acts *a, const float *x, float *out, int N);

/* ---- model_io.c ---- */
/* Uploads the base weights of the safetensors files in dir into m's laid-out base tensors. */
int model_io_read_base(struct model *m, const char *dir, struct whet_err *err);
/* Reads dir/adapter_config.json into m's LoRA settings (lora_r, lora_alpha, rslora, targets). */
int model_io_read_adapter_config(struct model *m, const char *dir, struct whet_err *err);
/* Uploads dir/adapter_model.safetensors into m's laid-out LoRA tensors; every file tensor must fit. */
int model_io_read_lora(struct model *m, const char *dir, struct whet_err *err);

#endif
