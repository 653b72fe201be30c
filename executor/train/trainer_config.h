/* trainer_config.h - the trainer config of `whet train --config FILE.json` (DESIGN.md, "Trainer config").
 *
 * One JSON object that the executor writes for each job (and a person may write by hand). Parsing is
 * strict: an unknown field, a value of the wrong type or one outside its range is an error that names
 * the field and the allowed range, so a typo never trains with a silent default. `dpo` takes
 * hyperparameters.beta (or `beta` at the top level). `grpo` needs a `grader` (an OpenAI grader object,
 * validated here with grader_parse), takes `rollout` {n, max_tokens, temperature, top_p, top_k, stop},
 * the GRPO hyperparameters (kl_coef, clip_ratio_low, clip_ratio_high, ppo_epochs, loss_agg,
 * norm_adv_by_std, dynamic_sampling, max_gen_batches) and `eval_samples`; those fields are refused
 * for other methods.
 * batch_size is OpenAI's: the examples of one optimizer step (dpo: preference pairs, grpo: prompts, each
 * with rollout.n responses); gradient_accumulation_steps the micro-batches a step's packed rows (grpo:
 * responses) are split into, which bounds memory and leaves the step's gradient as it is.
 * The range, default and methods of each setting are the job specification's (common/job_spec.c), which
 * the service's validation and mapping read too. */
#ifndef WHET_TRAINER_CONFIG_H
#define WHET_TRAINER_CONFIG_H

#include <stdint.h>

#include "grpo.h"
#include "util.h"

struct grader;
struct json_t;

enum trainer_method { TRAINER_SFT, TRAINER_DPO, TRAINER_GRPO };
enum lr_scheduler { LR_LINEAR, LR_COSINE, LR_CONSTANT };

#define TRAINER_MAX_TARGET_MODULES 16
#define TRAINER_MAX_STOP 16

/* LoRA settings; `enabled` is 0 when the config says `"lora": null` (full fine-tuning). */
struct trainer_lora {
    int enabled;
    int r;                 /* rank */
    float alpha;           /* scale numerator: W + (alpha/r)·B·A, or alpha/sqrt(r) with rsLoRA */
    int use_rslora;
    int n_target_modules;  /* 0 means every linear layer of the decoder */
    char *target_modules[TRAINER_MAX_TARGET_MODULES]; /* owned, e.g. "q_proj" */
};

struct trainer_hparams {
    int n_epochs;
    int batch_size;                  /* examples per optimizer step (dpo: pairs, grpo: prompts) */
    double learning_rate;
    enum lr_scheduler lr_scheduler;
    int warmup_steps;
    double max_grad_norm;            /* 0 turns clipping off */
    double weight_decay;             /* AdamW, decoupled */
    int max_seq_len;                 /* tokens per packed row */
    int gradient_accumulation_steps; /* micro-batches a step's rows are split into */
    double adam_beta1, adam_beta2, adam_eps;
    double beta;                     /* dpo: strength of the pull towards the reference */
    /* grpo (grpo.h for the formulas; names as veRL's): */
    double kl_coef;                  /* weight of the k3 KL to the reference in the loss; 0: no
                                      * reference pass (nor a frozen copy), the KL is not measured */
    double clip_ratio_low;           /* ratio clipped below at 1 - clip_ratio_low */
    double clip_ratio_high;          /* and above at 1 + clip_ratio_high (DAPO: 0.28) */
    int ppo_epochs;                  /* optimizer updates per rollout batch */
    enum grpo_loss_agg loss_agg;
    int norm_adv_by_std;             /* 1: (r - mean)/(std + 1e-6); 0: r - mean (Dr. GRPO) */
    int dynamic_sampling;            /* 1: groups whose rewards are all equal are dropped (DAPO) */
    int max_gen_batches;             /* with dynamic_sampling: rollout batches (batch_size prompts each)
                                      * a step may sample to keep batch_size groups (by default the
                                      * 3 × batch_size prompts DAPO's recipe samples a step; veRL's
                                      * max_num_gen_batches is 0, unbounded, by default) */
};

/* grpo: how the responses of each prompt are sampled (rollout.h). */
struct trainer_rollout {
    int n;             /* responses per prompt (group size) */
    int max_tokens;    /* per response */
    double temperature; /* 0 is greedy */
    double top_p;
    int top_k;         /* 0 is off */
    int n_stop;
    char *stop[TRAINER_MAX_STOP]; /* stop strings, owned */
};

/* This process's place in a distributed run (the config's "distributed"; world_size 1 when absent):
 * one process per device, the gang found through rank 0's rendezvous (comm.h). The global batch is
 * batch_size as always, its rows split over the ranks; every rank reads the same data, model and
 * resume_from, and only rank 0 writes checkpoints, the final model and metrics. */
struct trainer_distributed {
    int world_size, rank;
    char *rendezvous;    /* HOST:PORT: rank 0 listens (port 0: any, reported in a "rendezvous" event) */
    char *host;          /* the address peers reach this rank at; NULL: 127.0.0.1 */
    unsigned generation; /* the gang's start count: a rank of another generation is refused */
    int timeout_s;       /* rendezvous and collectives */
    int zero;            /* 1: ZeRO-1, the optimizer state sharded over the ranks; 3: ZeRO-3,
                          * the base parameters too */
};

struct trainer_config {
    enum trainer_method method;
    char *model;           /* base model dir (HF layout); required */
    char *init_adapter;    /* PEFT adapter dir to start from, or NULL */
    char *training_file;   /* JSONL; required */
    char *validation_file; /* JSONL or NULL */
    char *output_dir;      /* required */
    char *resume_from;     /* a checkpoint dir written by an earlier run, or NULL */
    char *device;          /* "cpu" (NULL means it), "cuda", "cuda:N" (backend.h) */
    struct trainer_lora lora;
    struct trainer_hparams hp;
    uint64_t seed;
    int checkpoint_every_steps; /* 0: only final/ (and on SIGTERM) */
    int eval_every_steps;       /* 0: validation loss only at the end */
    int max_steps;              /* 0: n_epochs decides */
    /* grpo only: */
    struct grader *grader;      /* parsed from "grader"; owned */
    struct trainer_rollout rollout;
    int eval_samples;           /* validation prompts per evaluation; 0 (or "auto"): all of them */
    struct json_t *judge_models; /* {"model name": "/dir"}: score_model/label_model judges (judge.h); owned */
    struct trainer_distributed dist;
};

/* Parses `json` (`len` bytes; `source` names it in errors). On success fills `cfg` (free it with
 * trainer_config_free); on failure returns -1 with "SOURCE: FIELD: what is wrong (allowed: …)". */
int trainer_config_parse(struct trainer_config *cfg, const char *json, size_t len, const char *source,
                         struct whet_err *err);
int trainer_config_load(struct trainer_config *cfg, const char *path, struct whet_err *err);
void trainer_config_free(struct trainer_config *cfg);

const char *trainer_method_name(enum trainer_method m);
const char *lr_scheduler_name(enum lr_scheduler s);

#endif
