/* sizing.h - serverless job sizing: how many accelerators, with how much memory each, a fine-tuning job
 * needs, from the base model's shape, the method and the batch. Tenants never pick machines; the
 * scheduler asks this library for a gang size and a minimum device memory and hands those to placement.
 *
 * Pure logic (libc and the engine's pure memory plan only: no I/O, no clock), like the rest of
 * scheduler/placement.
 *
 * The estimate (bytes, before splitting over a gang of n devices)
 * -------------------------------------------------------------------------------------------------
 * The engine's memory plan (executor/train/plan/model_plan.h, the numbers model.c allocates by, f32
 * everywhere) gives every term for the model's shape:
 *
 *   weights      the base parameters (P of them, as the model reports: 4·P)
 *   state        what training adds for the trainable values T: gradients and AdamW m and v (12·T),
 *                  full fine-tuning: T = P; LoRA: T = r·Σ(in + out) of each targeted projection per
 *                  layer, plus the adapter itself (16·T in all)
 *   reference    the weights again for full-fine-tuning DPO and GRPO: a frozen copy of the base (DPO
 *                loads it beside the policy to compute its reference table; GRPO's KL term reads it
 *                every step). With LoRA the reference is the base with the adapter switched off: no copy.
 *   activations  the plan's buffers per token (each layer's saved tensors, one set of gradient
 *                buffers, the residual stream) times the tokens of one example: max_seq_len per
 *                sequence, 1 sequence (SFT), 2 (DPO: chosen and rejected) or group_size (GRPO: the
 *                completions of one prompt); plus the logits chunk (at most 64 Mi values) and the
 *                RoPE table
 *   KV cache     GRPO rollouts: the plan's KV cache for the sequences being generated. Rollouts and
 *                the training pass do not overlap, so a device needs the larger of the two.
 *   overhead     SZ_DEVICE_OVERHEAD_MIB per device: CUDA context, cuBLAS workspace, NCCL buffers.
 *
 * A gang of n devices shards the weights, state and reference (ZeRO-3 / FSDP: each device holds 1/n)
 * and splits the batch (data parallel: each device takes ceil(batch / n) examples, at least one). So
 *
 *   per_device(n) = (weights + state + reference) / n + max(activations, KV)(ceil(batch / n))
 *                   + overhead
 *
 * and the job needs the smallest n with per_device(n) <= SZ_USABLE_FRACTION · device memory: 90%,
 * because allocators fragment and a job that fits to the last byte fails on its first long batch.
 * Its minimum device memory is per_device(n) / SZ_USABLE_FRACTION.
 *
 * Co-training (sz_cotrain_mib): a group of LoRA jobs on one device (`whet train --cotrain`) holds the base
 * once, and runs each step's SFT and DPO rows, every member's, in passes of at most a pass bound of tokens
 * (model_plan.h's mp_cotrain_pass_tokens; whole rows, so at least the longest): its training activations
 * are ONE bounded pass's, however many members it has and whatever their batches. So a group holds
 *
 *   group = weights + pass(max(bound, longest row)) + overhead  +  Σ per member: state
 *
 * with pass(t) the activations of t tokens, the logits chunk of t rows and the RoPE table. A GRPO member
 * takes no shared pass: it steps on its own adapter view of the base, as alone (its rollouts, then its
 * update passes, in buffers of its own), so it adds its state and max(activations, KV)(batch) as alone.
 *
 * When config.json lacks the shape (hidden_size, num_hidden_layers, …), it is estimated from P as a
 * Llama-like model: P ≈ 12·L·C² with L ≈ C/128 (Llama 2 7B: C 4096, L 32), F = 8·C/3, no GQA and a
 * 32000 vocabulary. */
#ifndef WHET_SIZING_H
#define WHET_SIZING_H

#include <stdint.h>

#define SZ_DEVICE_OVERHEAD_MIB 2048     /* CUDA context (~0.5 GiB), cuBLAS workspace, NCCL buffers */
#define SZ_USABLE_FRACTION 0.9          /* of a device's memory a job may plan to use */
#define SZ_MAX_GANG 1024                /* the largest gang the estimate searches */

/* LoRA target projections, one bit each; 0 means every linear projection ("all-linear"). */
enum {
    SZ_LORA_Q = 1u << 0, SZ_LORA_K = 1u << 1, SZ_LORA_V = 1u << 2, SZ_LORA_O = 1u << 3,
    SZ_LORA_GATE = 1u << 4, SZ_LORA_UP = 1u << 5, SZ_LORA_DOWN = 1u << 6,
    SZ_LORA_ALL = (1u << 7) - 1,
};

/* The bit for a Hugging Face module name ("q_proj", …), or 0 if unknown. */
uint32_t sz_lora_target(const char *name);

/* The base model. Shape fields left 0 are estimated from n_params (see above). */
struct sz_model {
    int64_t n_params;          /* P, every parameter of the base model */
    int32_t hidden;            /* C, hidden_size */
    int32_t intermediate;      /* F, intermediate_size (SwiGLU width) */
    int32_t layers;            /* L, num_hidden_layers */
    int32_t heads;             /* NH, num_attention_heads */
    int32_t kv_heads;          /* NKV, num_key_value_heads (0: = heads) */
    int32_t head_dim;          /* hd (0: C / NH) */
    int32_t vocab;             /* V, vocab_size */
};

enum sz_method { SZ_SFT, SZ_DPO, SZ_GRPO };

struct sz_job {
    enum sz_method method;
    int32_t full_ft;           /* 1: every weight trains; 0: LoRA */
    /* The settings the trainer will run with (the service fills them from the trainer settings it
     * hands the job, common/job_spec.h's defaults included); values below 1 count as 1. */
    int32_t lora_r;            /* LoRA rank */
    uint32_t lora_targets;     /* SZ_LORA_* bits; 0: all linear projections */
    int32_t batch_size;        /* examples per optimizer step */
    int32_t max_seq_len;       /* tokens per sequence */
    int32_t group_size;        /* GRPO completions per prompt */
};

/* The parts of the estimate, in bytes. */
struct sz_estimate {
    int64_t weights;           /* 4·P */
    int64_t state;             /* trainable copy (LoRA), gradients, AdamW moments */
    int64_t reference;         /* frozen reference copy, or 0 */
    int64_t activations_per_example; /* training pass of one example (all its sequences) */
    int64_t kv_per_example;    /* GRPO rollout KV cache of one example (0 otherwise) */
    int64_t logits_max;        /* the largest logits chunk */
    int64_t rope;              /* the RoPE table for max_seq_len positions */
    int32_t batch;             /* examples per step (at least 1) */
    /* Co-training's shared pass (sz_cotrain_mib): t tokens hold act_per_token·t bytes of activations and
     * min(t, logit_rows) rows of logits of logit_row bytes each. */
    int64_t act_per_token;
    int64_t logit_row;
    int64_t logit_rows;
    int64_t cotrain_row;       /* tokens of its longest row in a shared pass (SFT: a sequence; DPO: a pair,
                                  both sides in one row); 0: it takes none (GRPO steps on its own) */
    int32_t cotrainable;       /* 1: the job may share one co-training process (one copy of the base)
                                  with jobs of the same base (sz_cotrainable) */
};

/* Whether a job may be co-trained: LoRA (the base stays frozen, so one copy serves every member) with a
 * method the co-training trainer runs (`whet train --cotrain`: SFT, DPO and GRPO, mixed; a group's sandbox
 * gives each member what its own would: its judge models, its python graders' nested sandboxes). The one
 * place that names the methods: placement packs only such jobs into a shared device. */
int sz_cotrainable(const struct sz_job *job);

/* Fills the estimate for a job on a model. */
void sz_estimate(struct sz_estimate *out, const struct sz_model *model, const struct sz_job *job);

/* Bytes each device of a gang of n holds (n >= 1). */
int64_t sz_per_device_bytes(const struct sz_estimate *e, int32_t n);

/* The smallest gang whose devices of device_mib each hold it, at most max_devices; 0 if none. */
int32_t sz_devices_needed(const struct sz_estimate *e, int64_t device_mib, int32_t max_devices);

/* A co-trainable job on one device split into what its co-training group holds once and what each
 * member adds (see "Co-training" above), for passes of at most pass_tokens tokens (<= 0: model_plan.h's
 * MP_COTRAIN_PASS_TOKENS, the trainer's default; the scheduler and the executor read the same setting,
 * MP_COTRAIN_PASS_TOKENS_ENV): base_mib, the frozen weights, the device overhead (CUDA context,
 * workspaces) and, for an SFT or DPO job, one bounded pass over its rows and the others'; member_mib, its
 * adapter, gradients and AdamW moments, and for a GRPO job its activations or rollout KV cache as alone.
 * A group holds the largest of its members' base_mib (members of one base differ only in their rows'
 * length and their adapters' rank) plus every member_mib. */
void sz_cotrain_mib(const struct sz_estimate *e, int32_t pass_tokens, int32_t *base_mib, int32_t *member_mib);

/* The least memory (MiB) each device of a gang of n must have. */
int32_t sz_min_device_mib(const struct sz_estimate *e, int32_t n);

/* A pool the job may run on, as sizing sees it: its devices' memory and its largest node. */
struct sz_pool {
    int32_t device_mib;        /* memory of each device; 0: unknown (CPU slots, sim devices without a
                                  size): such pools do not limit memory */
    int32_t max_node_devices;  /* devices of its largest node (a job runs on one node) */
};

/* What the scheduler asks placement for. */
struct sz_choice {
    int32_t fits;              /* 1: some pool holds the job on one node within the cap */
    int32_t gpus;              /* gang size; fits = 0: the gang it would take without max_gpus (capped)
                                  or on the largest device, or 0 when no gang can (one example alone
                                  overflows a device) */
    int32_t min_gpu_mem_mib;   /* each device at least this (0: any, when only unknown-memory pools) */
    int32_t pool;              /* the pool the gang was sized on (index into pools), -1 if none fits */
    int32_t capped;            /* fits = 0 only because of max_gpus: without it a pool would hold it */
};

/* Chooses the gang for a job over the pools it may use (already filtered by its GPU types and
 * regions). Each pool with known memory offers the smallest gang that fits on one of its nodes, within
 * max_gpus (0: no cap); the offer holding the fewest device bytes (gang · device memory) wins, then
 * the smaller gang: a job takes the smallest device that holds it and leaves large devices to jobs
 * that need them. The minimum device memory is that of the gang, so larger devices qualify as well
 * (spill-over). When only unknown-memory pools are allowed the job gets one device of any memory.
 * No pool at all (an empty fleet): sized against one 80 GiB device per gang member, so a job has a
 * shape while it waits for executors. */
void sz_choose(struct sz_choice *out, const struct sz_estimate *e, const struct sz_pool *pools, int32_t n_pools,
               int32_t max_gpus);

#endif
