/* trainer.h - the SFT, DPO and GRPO training loop behind `whet train` (what executors run in the sandbox).
 *
 * A run reads the trainer config (trainer_config.h), loads the base model (model.h) with LoRA or for
 * full fine-tuning, tokenizes the data with the model's chat template and packs it (sft_data.h; DPO
 * pairs as dpo_data.h packs them), then takes optimizer steps of batch_size examples (DPO: pairs, GRPO:
 * prompts; OpenAI's meaning, so an epoch is ceil(examples / batch_size) steps): the step's packed rows
 * in gradient_accumulation_steps micro-batches, clipping by global norm, AdamW with a warmup + linear/cosine/constant schedule,
 * until n_epochs or max_steps. For `dpo` the reference log-probs of every pair are computed once
 * before the first step (the base weights: the LoRA adapter switched off, or a frozen copy for full
 * fine-tuning), then each step takes the DPO loss of dpo.h, the mean over its pairs. For `grpo`
 * (trainer_grpo.c) the training file is OpenAI's RFT JSONL (rft_data.h) and a step takes batch_size
 * prompts of the epoch's shuffled order: rollout.n responses to each (rollout.h), graded by the
 * config's grader, group-normalised advantages, the reference log-probs (adapter off, or a frozen
 * copy), then ppo_epochs optimizer updates of the clipped policy loss with the k3 KL (grpo.h), the
 * responses split into gradient_accumulation_steps micro-batches.
 *
 * Output, under output_dir:
 *   metrics.jsonl            one object per step: step, epoch, loss, lr, grad_norm, tokens,
 *                            tokens_per_s, and valid_loss when measured; SFT adds
 *                            train_mean_token_accuracy, DPO reward_margin, preference_accuracy,
 *                            chosen_logps, rejected_logps (means over the step's pairs) and with
 *                            validation valid_preference_accuracy, valid_reward_margin; GRPO
 *                            reward_mean, reward_std, pass_rate, kl (null when kl_coef is 0: no
 *                            reference pass), entropy, clip_frac, ppo_kl, response_length_mean,
 *                            rollout_tokens, rollout_tokens_per_s, groups_kept, gen_batches
 *                            (rollout batches drawn: more than 1 when dynamic sampling refilled),
 *                            grader_errors, time_rollout_s, time_grading_s,
 *                            time_reference_s, time_update_s (tokens: prompt + response tokens
 *                            through the update passes) and with validation valid_reward_mean,
 *                            valid_pass_rate (greedy answers to eval_samples validation prompts)
 *   checkpoints/step-N/      every checkpoint_every_steps steps and on SIGTERM: the adapter (PEFT
 *                            layout) or the full model (HF layout, F32), optimizer.safetensors.zst
 *                            (the AdamW moments as safetensors, zstd-compressed) and
 *                            trainer_state.json (step, data cursor, seed, RNG)
 *   final/                   the same model files at the end (a full model in the base model's dtype
 *                            when that is bfloat16), with trainer_state.json
 * Every directory is written under a temporary name and renamed into place, so a reader (the
 * executor uploading checkpoints, a resumed run) never sees half of one.
 *
 * stdout carries the same events for the executor's pipe, one JSON object per line with a "type":
 * "data" (dataset figures, truncation included; the training file's also steps_per_epoch and
 * total_steps), "metrics" (as in metrics.jsonl), "checkpoint"
 * ({step, path}) and "final" ({step, path}). Progress for people goes to stderr.
 *
 * A run resumed from checkpoints/step-N (resume_from) continues exactly: the same losses, step for
 * step, as the run that never stopped (same backend and thread count), because every random choice
 * (LoRA init, per-epoch shuffles, GRPO's rollouts, seeded by (seed, step)) is a function of the seed
 * and the checkpoint holds the weights, the optimizer moments and the data cursor bit for bit. */
#ifndef WHET_TRAINER_H
#define WHET_TRAINER_H

#include <signal.h>
#include <stdio.h>

#include "trainer_config.h"
#include "util.h"

/* The optimizer state in a checkpoint dir. */
#define TRAINER_OPTIMIZER_FILE "optimizer.safetensors.zst"

struct trainer_io {
    FILE *events;   /* JSON lines ("type": …); NULL for none */
    FILE *progress; /* human progress lines; NULL for none */
    /* Set (from a signal handler) to ask the run to stop: it finishes the step under way, writes a
     * checkpoint and returns 0 with *stopped = 1. */
    volatile sig_atomic_t *stop;
    /* Co-training only (trainer_cotrain): a file whose appearance asks this run alone to stop, as *stop
     * does; NULL for none. */
    const char *stop_file;
};

/* Runs the config to the end (or to a stop request). Returns 0 on success, -1 with `err` set. */
int trainer_run(const struct trainer_config *cfg, const struct trainer_io *io, int *stopped, struct whet_err *err);

/* Co-training (trainer_cotrain.c): SFT, DPO and GRPO LoRA runs of one base model trained in lock-step on
 * ONE frozen copy of it; for the SFT and DPO runs each step shared forward/backward passes over all their
 * rows (each run's rows through its own adapter; passes of at most pass_tokens tokens, whole rows, <= 0 for
 * model_plan.h's MP_COTRAIN_PASS_TOKENS), then each run's own optimizer step; a GRPO run takes its own
 * step (rollouts, grading, update passes) through its adapter on the shared base, one run after another.
 * Each run writes what it would alone (metrics.jsonl,
 * checkpoints, final/, events on its io) and its figures equal its run alone within the summation order
 * of the shared passes (the step in passes cut by tokens instead of gradient_accumulation_steps micro-batches); a DPO
 * run's reference is the shared base (its adapter off, as alone). A stop request on a run's io stops that
 * run alone (checkpoint, *stopped); a run that fails ends alone, its last events
 * {"type":"error","message"} and the next. Each run's last event is
 * {"type":"cotrain","tokens","device_seconds"}: the tokens it put through the shared passes, and its share
 * of their time, split by those tokens, plus the time of its own optimizer steps, validations and
 * checkpoints. */
struct trainer_cotrain_job {
    const struct trainer_config *cfg; /* SFT, DPO or GRPO, LoRA, not distributed; every cfg->model the same */
    struct trainer_io io;
    /* results */
    int rc, stopped;
    struct whet_err err; /* when rc != 0 */
    long long tokens;
    double device_seconds;
};
/* Runs joining a co-training while it runs: before each lock-step, next(ctx) gives the jobs that join (NULL:
 * none now), each then trained from that step on as the given ones are (its own data order, seed,
 * checkpoints, resume); a job stays the caller's, valid until trainer_cotrain returns, its outcome then in
 * it. None joins once every run has ended. */
struct trainer_cotrain_joins {
    struct trainer_cotrain_job *(*next)(void *ctx);
    void *ctx;
};
/* Co-trains jobs[0..n) and those joining (joins NULL: none). Returns -1 with `err` set only when the base
 * model does not load; each job's outcome is in the job. */
int trainer_cotrain(struct trainer_cotrain_job *jobs, int n, int pass_tokens, const struct trainer_cotrain_joins *joins,
                    struct whet_err *err);

/* Learning rate of optimizer step `step` (0-based) of `total_steps`, as Hugging Face's schedulers
 * compute it: a linear warmup from 0 over warmup_steps, then linear decay to 0, half a cosine to 0,
 * or constant. */
double trainer_lr_at(const struct trainer_hparams *hp, int step, int total_steps);

#endif
