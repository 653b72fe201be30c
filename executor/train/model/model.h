/* model.h - the decoder-only transformer whet fine-tunes (Llama, Mistral, Qwen2, Qwen3), its LoRA
 * adapters, its optimiser, and its files.
 *
 * What this is: an fp32 implementation in llm.c's style, on the device model_opts names (backend.h). All base parameters live in one
 * allocation with named pointers into it; gradients and AdamW moments mirror the trainable buffer
 * (the base parameters for full fine-tuning, the LoRA parameters otherwise), so zeroing, the
 * gradient norm, clipping and the optimiser step are single loops. Activations are kept per layer
 * (or, with `recompute`, only each layer's input, the rest recomputed during the backward pass);
 * attention keeps no T×T matrix (only a log-sum-exp per row and head), so activation memory grows
 * linearly with the tokens. Three files implement this header around one private layout
 * (model_internal.h): model.c the model and its math, model_io.c its files, model_generate.c
 * generation. All their math goes through backend.h; they are the same for the CPU and a GPU.
 * LoRA follows PEFT: W + scale·B·A, A Kaiming-uniform (a=√5), B zero, no dropout.
 * What this is not: a mixed-precision engine (not yet), a multi-device one (it is one rank's share of a
 * distributed run: the trainer does the collectives, model_set_shard_ops), an implementation of
 * sliding-window attention (a batch that would need it is refused), or an inference server.
 *
 * A training step:
 *
 *     struct model *m = NULL;
 *     struct model_opts o = model_opts_default();      // then o.lora_r = 16, … or o.lora_r = 0 (full)
 *     if (model_load(&m, "models/qwen3-0.6b", &o, &err)) …
 *     model_zero_grad(m);
 *     for each micro-batch:
 *         model_forward(m, &batch, NULL, &err);         // NULL: no wait for the device's loss
 *         model_backward(m, 1.0f / total_weight_of_all_micro_batches, &err);
 *     float norm = model_clip_grad_norm(m, 1.0f);       // <= 0 max_norm: just measures
 *     model_adamw_step(m, lr, 0.9f, 0.999f, 1e-8f, 0.0f);
 *     struct model_stats st = model_take_stats(m);     // the step's loss sums, one download
 *
 * The statistics and the gradient norm are reduced on the device: a step waits for the device only
 * where it asks for a number (a non-NULL loss, model_last_stats, model_take_stats, the norm).
 *
 * Batches are B rows of T tokens (packed examples); attention never crosses a change of seq_id
 * within a row, nor a row boundary (so the tokens of one example must be contiguous). Positions (for
 * RoPE) are given per token, normally restarting at 0 for each packed example. Activation buffers
 * grow to the largest B*T seen and are kept. All pointers in the API are host memory.
 *
 * Names: base parameters use Hugging Face names ("model.layers.0.self_attn.q_proj.weight"), LoRA
 * parameters PEFT names ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"). */
#ifndef WHET_MODEL_H
#define WHET_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "model_config.h"
#include "sample_row.h"
#include "util.h"

/* LoRA target modules, by their Hugging Face names. */
enum lora_target {
    LORA_Q = 1 << 0,    /* q_proj */
    LORA_K = 1 << 1,    /* k_proj */
    LORA_V = 1 << 2,    /* v_proj */
    LORA_O = 1 << 3,    /* o_proj */
    LORA_GATE = 1 << 4, /* gate_proj */
    LORA_UP = 1 << 5,   /* up_proj */
    LORA_DOWN = 1 << 6, /* down_proj */
    LORA_ALL = (1 << 7) - 1,
};
/* "q_proj" -> LORA_Q …; "all-linear" -> LORA_ALL; 0 for an unknown name. */
unsigned lora_target_from_name(const char *name);
const char *lora_target_name(unsigned one_target);

struct model_opts {
    int train;            /* 0: inference only (no gradients, moments or training activations) */
    int lora_r;           /* 0: full fine-tuning (every parameter trainable) when train != 0 */
    float lora_alpha;     /* scale = alpha / r, or alpha / sqrt(r) with use_rslora */
    int use_rslora;
    unsigned lora_targets; /* LORA_* bits */
    const char *adapter_dir; /* load this PEFT adapter (its r, alpha, targets win over the above) */
    uint64_t seed;        /* LoRA A initialisation */
    int recompute;        /* keep only layer inputs; recompute activations in the backward pass */
    int logit_rows;       /* rows of logits computed at once (0: as many as fit in 256 MB); when the
                           * weighted targets of a batch exceed it, the backward pass recomputes them */
    int max_batch_rows;   /* optional: preallocate activations for B rows of max_seq_len tokens */
    int max_seq_len;      /* (buffers grow on demand anyway) */
    const char *device;   /* "cpu" (NULL means it), "cuda", "cuda:N": see backend_open */
    int optimizer_shards; /* ZeRO-1 with train: the optimizer state split over this many ranks (0, 1: not) */
    int optimizer_shard;  /* this rank's shard: model_set_sumsq_reducer, model_download_moments */
    int shard_params;     /* ZeRO-3, with optimizer_shards > 1 (the ranks; optimizer_shard this one): the base
                           * parameters are sharded, unit by unit (model_set_shard_ops), and a full fine-tune's
                           * gradients with them. Without train: a frozen model sharded the same way (the
                           * reference of a sharded DPO or GRPO run) */
    int frozen_base;      /* with train (lora_r is then ignored; no adapter_dir): every weight frozen, only the
                           * activations a backward pass needs: the base of co-trained adapter views
                           * (model_set_lora_runs) */
};
struct model_opts model_opts_default(void); /* inference, LoRA r=16 alpha=32 all-linear when train */

struct model;

/* One micro-batch: N = B*T tokens, row-major. */
struct model_batch {
    int B, T;
    const int *ids;         /* [N] input token ids */
    const int *positions;   /* [N] RoPE positions (NULL: 0, 1, … from the start of each example) */
    const int *seq_ids;     /* [N] example id per token (NULL: one example per row) */
    const int *targets;     /* [N] next-token targets, -1 = none (NULL: inference; all logits kept) */
    const float *loss_mask; /* [N] weight of each target, typically 0/1 (NULL: 1 wherever target >= 0) */
};

/* Loads config.json and the safetensors weights of a Hugging Face model dir (any float dtype, kept
 * as f32), sets up LoRA or full fine-tuning as `opts` says. On success *out owns everything. */
int model_load(struct model **out, const char *dir, const struct model_opts *opts, struct whet_err *err);
void model_free(struct model *m);
/* The base tensors a config implies, in file order (Hugging Face names and shapes). */
void model_config_tensors(const struct model_config *cfg,
                          void (*fn)(void *ctx, const char *name, int ndim, const int64_t *shape), void *ctx);

const struct model_config *model_get_config(const struct model *m);
size_t model_num_params(const struct model *m);    /* base parameters */
size_t model_num_trainable(const struct model *m); /* LoRA parameters, or base for full FT */
int model_is_lora(const struct model *m);

/* Forward pass. With targets: *loss = sum(w*nll)/sum(w) over weighted targets (0 when none; loss
 * may be NULL, sparing a wait for the device), and the statistics below are set; logits are kept only
 * for weighted rows. Without targets (inference, tests): all N×V logits are kept for
 * model_get_logits and model_sample_logits, *loss = 0. */
int model_forward(struct model *m, const struct model_batch *batch, float *loss, struct whet_err *err);
/* Statistics of the last forward with targets. */
struct model_stats {
    double loss_sum;   /* sum over targets of weight * nll */
    double weight_sum; /* sum of weights */
    int n_targets;     /* targets with weight > 0 */
    int n_correct;     /* of those, how many the argmax predicted */
};
struct model_stats model_last_stats(const struct model *m);
/* The sums of the statistics of every forward with targets since the last model_take_stats or
 * model_reset_stats (which zeroes them): a step's figures with one download however many
 * micro-batches it ran. */
struct model_stats model_take_stats(struct model *m);
void model_reset_stats(struct model *m);
/* Per-token nll of the last forward with targets: out[N], 0 where the weight is 0 (a download). */
void model_get_token_losses(const struct model *m, float *out);
/* Per token of the last forward with targets, 1 where the argmax predicted the target: out[N], 0 where the
 * weight is 0 (a download; the accuracy of some of a pass's rows, as co-training's runs). */
void model_get_token_correct(const struct model *m, int *out);
/* Logits of the last forward without targets: out[N, V] (that forward keeps all N×V of them). */
void model_get_logits(const struct model *m, float *out);

/* Backward pass of the last forward (which must have had targets): ACCUMULATES into the gradients
 * the gradient of loss_scale * sum(w * nll). For the mean loss of a single batch pass
 * 1/stats.weight_sum; with gradient accumulation, 1/(sum of weight_sum over the micro-batches). */
int model_backward(struct model *m, float loss_scale, struct whet_err *err);
/* Replaces the per-token weights the next model_backward applies: weights[N] in the last forward's
 * batch layout, read only where that forward had a weighted target (a token it left out stays out).
 * For losses whose weights depend on the forward's own results (DPO weighs each response's tokens by
 * its pair's β·(1 − σ(z))): one forward pass instead of two. stats keep the forward's weights. */
int model_set_loss_weights(struct model *m, const float *weights, struct whet_err *err);
/* Switches the LoRA adapter off (0) or on (1) for the passes that follow: off, every LoRA term is
 * skipped, so the outputs are the base model's bit for bit (DPO's and GRPO's reference without a
 * second copy of the weights). A forward pass with the adapter off has no backward pass. No effect
 * on a model without LoRA. */
void model_set_adapter_enabled(struct model *m, int enabled);
/* The temperature t of the loss (1 until set): the forward passes with targets that follow take the
 * nll of softmax(logits / t), and their backward passes go through the 1/t scale, so the token losses
 * are −log-probs under the distribution a sampler at temperature t draws from (GRPO's log-probs, as
 * veRL's). At t = 1 the results are bit for bit those of a model that never set it; t <= 0 (greedy
 * sampling, no distribution to match) means 1. Forwards without targets (model_get_logits) and
 * generation (model_prefill, model_decode_step) keep the plain logits. */
void model_set_logit_temperature(struct model *m, float temperature);
void model_zero_grad(struct model *m);
/* Global L2 norm of the trainable gradients. */
float model_grad_norm(struct model *m);
/* Returns the norm before clipping; scales gradients down to max_norm when above it (> 0). */
float model_clip_grad_norm(struct model *m, float max_norm);
/* One AdamW step (PyTorch semantics) on the trainable parameters; weight decay applies to matrices
 * only (not to norms and biases), as Hugging Face's Trainer does. Increments the step count. */
void model_adamw_step(struct model *m, float lr, float beta1, float beta2, float eps, float weight_decay);
int model_adam_step_count(const struct model *m);

/* Named parameter access (tests, tools): trainable and frozen alike. Shapes as in the files. */
int model_num_tensors(const struct model *m);
const char *model_tensor_name(const struct model *m, int i);
/* Element count of a tensor, or -1 when there is none of that name. */
long long model_tensor_numel(const struct model *m, const char *name);
int model_get_param(const struct model *m, const char *name, float *out, struct whet_err *err);
int model_set_param(struct model *m, const char *name, const float *in, struct whet_err *err);
/* The gradient (zeros for a frozen tensor); fails when the model is not training. */
int model_get_grad(const struct model *m, const char *name, float *out, struct whet_err *err);

/* ---- distributed training: the buffers a trainer's collectives (comm.h) move; the model does no I/O ---- */
/* The trainable parameters and their gradients, n floats each in the device's memory: a data-parallel
 * step sums the gradients over the ranks, a ZeRO step gathers the parameters each rank updated. */
float *model_trainable_params(struct model *m, size_t *n);
float *model_trainable_grads(struct model *m, size_t *n);
/* ZeRO-1 (model_opts.optimizer_shards > 1): the optimizer holds and steps only its shard of the
 * trainable buffer (mp_shard's; ZeRO-3: its shard of each unit — model_optimizer_spans): its AdamW
 * moments are that long, and the gradient norm, clipping and the AdamW step read only those spans of the
 * gradients (after a reduce-scatter the rest is not summed). The norm is then of the shard's gradients:
 * set a reducer that sums the shards' squares over the ranks. */
/* Called by model_clip_grad_norm (and model_grad_norm) with the squared sum of the gradients it
 * measured, a device double, before the norm is taken and the gradients clipped; non-zero fails the
 * norm (NaN). */
void model_set_sumsq_reducer(struct model *m, int (*reduce)(void *ctx, double *device_sumsq), void *ctx);
/* Calls ready(ctx, lo, hi) during the model_backward calls that follow as the pass finishes the gradient
 * of the trainable buffer's range [lo, hi): the head (final norm, lm_head), each layer from the last,
 * then the embedding (with tied embeddings the head comes with it) — disjoint ranges covering the
 * buffer, always in this order. A data-parallel trainer starts each range's all-reduce while the pass
 * goes on through the layers below. The CPU backend's work is done when its ops return, so a range
 * reported is final; a device backend would need an event per range (not yet). NULL turns it off.
 * model_grad_ranges makes the same calls in the same order without a pass: a rank with no rows of its
 * own starts the same collectives as the others. */
void model_set_grad_ready(struct model *m, void (*ready)(void *ctx, size_t lo, size_t hi), void *ctx);
void model_grad_ranges(struct model *m);
/* A range [lo, hi) of the trainable buffer. */
struct model_span {
    size_t lo, hi;
};
/* The optimizer state this model holds — all of the trainable buffer, ZeRO-1's shard of it, or under ZeRO-3
 * its shard of every unit — copied from the device into host arrays of model_trainable_params' n values,
 * each value at its place in the buffer; the values of other ranks' shards are left as they are. */
void model_download_moments(const struct model *m, float *exp_avg, float *exp_avg_sq);

/* ZeRO-3 (model_opts.shard_params): the base parameters are cut into units — the embedding, each layer,
 * the head (the final norm and an untied lm_head) — and each rank keeps only its comm_shard of each unit.
 * A pass gathers a unit just before it uses it and releases the rest of it after (backend `release`):
 * forward gathers the embedding, each layer, the head; backward the head, each layer from the last. The
 * next unit's all-gather starts before the current one computes, so the two overlap (two units in flight,
 * as the memory plan counts). For a full fine-tune the base is the trainable buffer: as the backward pass
 * finishes a unit's gradient it reduce-scatters it, keeps its shard and releases the rest, and the
 * optimizer holds and steps the shards; LoRA's frozen base is only gathered, its adapter sharded as under
 * ZeRO-1. So every pass is collectives, and every rank must run as many passes as the others
 * (model_idle_pass), which start them in the same order. The model does no I/O: the trainer gives it the
 * collectives, each of a whole unit of n values in place: an all-gather started (its handle) and waited
 * for, and a reduce-scatter. */
struct model_shard_ops {
    void *(*gather_start)(void *ctx, float *unit, size_t n);                       /* an all-gather */
    int (*gather_wait)(void *ctx, void *started, struct whet_err *err);            /* its end */
    int (*reduce_scatter)(void *ctx, float *unit, size_t n, struct whet_err *err); /* a reduce-scatter */
    void *ctx;
};
void model_set_shard_ops(struct model *m, const struct model_shard_ops *ops);
/* The collectives of one pass (forward, or forward and backward) without a pass: a rank with fewer
 * micro-batches than another runs these for the difference. A no-op unless the parameters are sharded. */
int model_idle_pass(struct model *m, int backward, struct whet_err *err);
/* Gathers every unit and keeps them until model_release_params: for what needs the whole model between
 * passes (writing it, generation, named access). Every rank must call both. No-ops unless sharded. */
int model_gather_params(struct model *m, struct whet_err *err);
void model_release_params(struct model *m);

/* ---- files (model_io.c) ---- */
/* A Hugging Face model dir: config.json, model.safetensors (F32, or BF16 when bf16 != 0), and the
 * tokenizer files copied from the dir the model was loaded from. With LoRA, the adapter is merged
 * into the saved weights. */
int model_save_hf(const struct model *m, const char *dir, int bf16, struct whet_err *err);
/* A PEFT adapter dir: adapter_config.json + adapter_model.safetensors (F32). */
int model_save_adapter(const struct model *m, const char *dir, struct whet_err *err);
/* Overwrites the LoRA weights from a PEFT adapter dir with the same r and targets. */
int model_load_adapter_weights(struct model *m, const char *dir, struct whet_err *err);
/* Optimiser state (AdamW moments of the trainable buffer and the step count) as one safetensors
 * file, for exact resume. Loading checks the sizes match; a model whose optimizer is sharded keeps its
 * spans of what it loads. Saving needs the whole moments: model_save_optimizer_moments writes those
 * given in host memory (the gathered shards of a ZeRO run). */
int model_save_optimizer(const struct model *m, const char *path, struct whet_err *err);
int model_save_optimizer_moments(const struct model *m, const char *path, const float *exp_avg,
                                 const float *exp_avg_sq, struct whet_err *err);
int model_load_optimizer(struct model *m, const char *path, struct whet_err *err);

/* ---- generation with a KV cache (model_generate.c) ---- */
/* Generation reuses the model's activation buffers: call it between training steps, never between
 * a model_forward and its model_backward. */
/* Keys and values of up to n_slots sequences of up to max_len tokens each; NULL (err set) when they
 * do not fit on the device. */
struct kv_cache;
struct kv_cache *kv_cache_new(const struct model *m, int n_slots, int max_len, struct whet_err *err);
void kv_cache_free(struct kv_cache *c);
void kv_cache_clear(struct kv_cache *c, int slot); /* forget a slot's tokens */
int kv_cache_len(const struct kv_cache *c, int slot);
/* Makes slot `dst` a copy of slot `src` (its keys, values and length), so a prompt prefilled once can
 * start several sequences: n responses to one prompt cost one prefill. */
int kv_cache_copy_slot(struct kv_cache *c, int dst, int src, struct whet_err *err);
/* Appends tokens ids[0..n) to slot `slot` (positions continue from its length) and writes the
 * logits of the last one to logits[V] (host). */
int model_prefill(struct model *m, struct kv_cache *c, int slot, const int *ids, int n, float *logits,
                  struct whet_err *err);
/* One token for each of n slots (slots[i] distinct): logits[n, V] (host). */
int model_decode_step(struct model *m, struct kv_cache *c, const int *slots, const int *ids, int n,
                      float *logits, struct whet_err *err);
/* The same two passes with the next token drawn on the device instead of logits downloaded: draw i
 * as rows[i] says into out's arrays (sample_row.h: the token, and what else out asks for: entropy,
 * its log-prob, the top log-probs). A prefill draws n_draws tokens from its last position (the first
 * tokens of n_draws responses to one prompt); a decode step one per slot. */
int model_prefill_sample(struct model *m, struct kv_cache *c, int slot, const int *ids, int n, int n_draws,
                         const struct sample_row *rows, const struct sample_out *out, struct whet_err *err);
int model_decode_sample(struct model *m, struct kv_cache *c, const int *slots, const int *ids, int n,
                        const struct sample_row *rows, const struct sample_out *out, struct whet_err *err);
/* Draws from rows[0..n) (token indices) of the logits of the last forward without targets, as
 * params[i] says: generation without a KV cache (the benchmark's baseline). */
int model_sample_logits(struct model *m, const int *rows, int n, const struct sample_row *params,
                        const struct sample_out *out, struct whet_err *err);

/* ---- many adapters on one base (serving, co-training) ---- */
/* A model that borrows base's weights and device and adds a LoRA adapter: the PEFT adapter in
 * o->adapter_dir (its own r, alpha and target modules), or a new one as o->lora_r, lora_alpha,
 * lora_targets, use_rslora and seed say. One entry of a serving cache, a few MB where a copy of the
 * base would be GBs; it generates on its own like any model with that adapter, and it is what
 * model_set_lora_runs names. With o->train it has its own gradients and AdamW moments: co-trained on a
 * frozen base (model_opts.frozen_base), it takes model_zero_grad, model_clip_grad_norm and
 * model_adamw_step like a model of its own. base must have no adapter and outlive its views. */
int model_load_adapter_view(struct model **out, struct model *base, const struct model_opts *o, struct whet_err *err);
/* Rows of a batch that share an adapter: n_tokens consecutive tokens of a pass, adapter a view of
 * the model (or NULL: the base alone). */
struct lora_run {
    const struct model *adapter;
    int n_tokens;
};
/* The passes that follow (forward, prefill, decode) apply adapters by rows, each run its adapter's LoRA
 * on its tokens (Punica's segmented LoRA: one pair of products per run, not per adapter loaded);
 * the runs must cover each pass exactly. n_runs 0 goes back to the plain base. On a frozen base
 * (model_opts.frozen_base) a forward with runs has a backward pass: each run's gradients go to its
 * view (loaded with train), so one pass trains many adapters (co-training). */
int model_set_lora_runs(struct model *m, const struct lora_run *runs, int n_runs, struct whet_err *err);

#endif
