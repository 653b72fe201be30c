/* trainer_internal.h - what trainer.c (the loop, the schedule, checkpoints, resume, signals) shares
 * with the training methods, one file each (trainer_sft.c, trainer_dpo.c, trainer_grpo.c): the state
 * of a run, the method table the loop calls, and the services the methods call back. trainer.c calls a
 * method only through its table, and the methods include only this header, so no file of the trainer
 * depends on another in a cycle. Not a public header: only the trainer's own files include it. */
#ifndef WHET_TRAINER_INTERNAL_H
#define WHET_TRAINER_INTERNAL_H

#include <jansson.h>
#include <stdio.h>

#include "chat_template.h"
#include "sft_data.h"
#include "trainer.h"

struct comm;
struct model;
struct model_batch;
struct model_opts;
struct model_stats;
struct trainer_method_ops;
struct rollout_request;

struct run {
    const struct trainer_config *cfg;
    const struct trainer_io *io;
    const struct trainer_method_ops *method;
    void *state; /* the method's own: its data, packing, scratch and last figures */
    struct tokenizer *tok;
    int tok_borrowed; /* tok is the co-training's, shared by its runs (trainer_open's `tok`) */
    struct chat_template tpl;
    int has_valid; /* a validation file was read */
    struct model *model;
    /* The reference of a full fine-tune for DPO and GRPO (a frozen copy of the base, loaded by the
     * method with trainer_load_reference; with LoRA the policy with its adapter off is the reference). */
    struct model *ref_model;
    /* Where the next step starts: the epoch, and the examples (DPO: pairs, GRPO: prompts) of its
     * shuffled order already trained. */
    struct sft_cursor cursor;
    json_t *data_events; /* the "data" events of the files read, sent once the steps are planned */
    int step, total_steps;
    long long tokens_seen;
    FILE *metrics;
    char *checkpoints_dir;
    int last_checkpoint_step; /* -1: none written by this process */
    double train_seconds;     /* time in training steps so far (this process), for the ETA */
    int steps_timed;
    /* A distributed run (trainer_dist.c): NULL and 0 of 1 alone. Only rank 0 writes checkpoints,
     * metrics and events (besides its rendezvous). */
    struct comm *comm;
    int rank, world;
    int stop_agreed;           /* some rank was asked to stop: all stop after this step */
    double comm_seconds;       /* spent in the gradient's collectives, this step */
    /* Data parallel: the gradient's all-reduces, a bucket at a time, started during the step's last
     * backward pass (trainer_overlap_begin/end) and waited for by trainer_optimizer_step. */
    struct comm_op **bucket_ops;
    int n_bucket_ops, bucket_ops_cap;
    size_t bucket_lo, bucket_hi, bucket_started; /* the range gathering into the next bucket; floats started */
    int overlap_armed;
    struct whet_err dist_err;  /* a collective's error inside a model call (the ZeRO norm) */
    /* Co-trained (trainer_cotrain.c): the frozen base that `model`, an adapter view, borrows; NULL alone. */
    struct model *cotrain_base;
};

/* What every method's step measured, for the common fields of the metrics line. */
struct step_figures {
    int epoch; /* the epoch the step trained in */
    double loss, lr, grad_norm;
    long long tokens; /* through the model in the step */
};

/* A method's fields for a metrics line: JSON members (",\"name\":value…") and the progress text. */
struct method_text {
    char json[1024];
    char progress[256];
};

/* One training method. Every hook gets the run; the method keeps its own state in r->state. */
struct trainer_method_ops {
    /* Reads the training (and validation) file into r->state, sets r->has_valid and reports each file
     * (a progress line and trainer_data_event). */
    int (*load_data)(struct run *r, struct whet_err *err);
    /* Optimizer steps in one epoch: its examples (DPO: pairs, GRPO: prompts) in groups of batch_size. */
    int (*steps_per_epoch)(const struct run *r);
    /* Optional: what the method needs once the model is loaded, before the first step (a reference
     * model or reference tables), so that it is not timed as training. */
    int (*prepare)(struct run *r, struct whet_err *err);
    /* One optimizer step (step r->step, 0-based) from r->cursor, which it moves past the data used;
     * fills `f`. The loop counts the step, checks the figures are finite and writes the metrics line. */
    int (*step)(struct run *r, struct step_figures *f, struct whet_err *err);
    /* The validation figures, measured now (only called when there is a validation file). */
    int (*validate)(struct run *r, struct method_text *t, struct whet_err *err);
    /* The method's own fields of the step just taken. */
    void (*metrics)(const struct run *r, struct method_text *t);
    /* Optional, a step in co-training's shared pass (trainer_cotrain.c); a method without them (GRPO) takes
     * its own steps there, as alone, on its adapter view of the shared base. cotrain_rows takes the next step
     * from r->cursor, all its rows at once, zeroes the gradients and sets *rows (the method's own arrays,
     * until its next step) and f's epoch and tokens.
     * The step's rows run in passes (whole rows); after each forward that held some of them,
     * cotrain_weights gets those rows' token nlls and whether the argmax predicted each target (both 0
     * without a target, and on the rows not passed yet), sets f's loss and the step's own figures (final at
     * the call after the last of its rows), and writes weights[B*T]: each token's weight in the backward
     * pass, which gives the gradient of Σ weight · nll; a row's weights must depend on that row's nlls
     * alone (SFT: the step's 1 / targets; DPO: a pair's sides share a row). Then the loop takes the run's
     * optimizer step. */
    void (*cotrain_rows)(struct run *r, struct step_figures *f, struct model_batch *rows);
    void (*cotrain_weights)(struct run *r, struct step_figures *f, const float *nll, const int *correct,
                            float *weights);
    /* Optional, co-training of a method that takes its own steps (GRPO): the rollouts of the next step's first
     * generation batch as a request (rollout.h; the method's own arrays, until its step), which
     * trainer_cotrain.c generates together with the other runs' (rollout_generate_many); the step then takes
     * q->out as that batch (generating it alone when the generation failed and left it empty). */
    void (*cotrain_rollout)(struct run *r, struct rollout_request *q);
    /* Releases r->state (also after a failed or partial set-up). */
    void (*free)(struct run *r);
};

extern const struct trainer_method_ops trainer_sft_method, trainer_dpo_method, trainer_grpo_method;

/* ---- the loop in parts, for co-training (trainer_cotrain.c), which runs many runs' steps in one pass ---- */
/* Sets up a run as trainer_run does (data, plan, resume, model: with `base`, an adapter view of it; with
 * `tok`, that tokenizer of cfg->model, borrowed, else its own read); r is zeroed first and wants
 * trainer_close even on failure. */
int trainer_open(struct run *r, const struct trainer_config *cfg, const struct trainer_io *io, struct model *base,
                 struct tokenizer *tok, struct whet_err *err);
void trainer_close(struct run *r);
/* Whether the run takes another step (its plan has one left and no stop is asked). */
int trainer_has_step(const struct run *r);
/* After a method's step: checks the figures, counts the step, validates when due, writes the metrics
 * line and, when due, the checkpoint. `seconds` is the step's training time. */
int trainer_after_step(struct run *r, const struct step_figures *f, double seconds, struct whet_err *err);
/* At the end of the steps: the final model, or on a stop request the checkpoint of the last step. */
int trainer_finish(struct run *r, int *stopped, struct whet_err *err);


/* A progress line for people ("whet train: …" on io->progress) and a JSON event line (io->events). */
void trainer_progress(const struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void trainer_event_line(const struct run *r, const char *json_object_text);
/* Keeps a file's "data" event (taking the reference) until the run's steps are planned: the training
 * file's (the first) then also carries steps_per_epoch and total_steps. */
void trainer_data_event(struct run *r, json_t *event);
/* The "data" event of a file of chat examples (DPO: pairs, each one example holding both sides):
 * examples, tokens and trained tokens from `d`, and what truncation cut or left untrained. */
void trainer_file_event(struct run *r, const char *path, const struct sft_dataset *d, int truncated,
                        long long truncated_tokens, int untrained);
/* One step's metrics object (JSON text "{…}") to metrics.jsonl and, as a "metrics" event, to the
 * executor's pipe. */
void trainer_metrics_line(const struct run *r, const char *json_object_text);
/* ---- distributed runs (trainer_dist.c); alone, each is the single-process step ---- */
/* Joins the gang of cfg->dist (rank 0 sends the "rendezvous" event) and leaves it. */
int trainer_dist_open(struct run *r, struct whet_err *err);
void trainer_dist_close(struct run *r);
/* This rank's share of a step's `rows` packed rows from `first` (contiguous, in rank order). */
void trainer_rank_rows(const struct run *r, int first, int rows, int *my_first, int *my_rows);
/* ZeRO-3: every pass is collectives (model_idle_pass), so in a phase of passes (a step's micro-batches, a
 * validation, a reference table) each rank runs as many as the rank with the most. Before the phase every
 * rank says how many it will run (`mine`) and learns the most (one small sum over the ranks; without
 * ZeRO-3 *most = mine and nothing is sent); after its passes it runs most - mine idle ones. */
int trainer_most_passes(struct run *r, int mine, int *most, struct whet_err *err);
int trainer_idle_passes(struct run *r, int n, int backward, struct whet_err *err);
/* The model a reference pass runs on (the frozen copy of a full fine-tune, else the policy, its LoRA adapter
 * off), and its idle forward passes: a sharded copy's passes are collectives like the policy's. */
struct model *trainer_reference(struct run *r);
int trainer_idle_reference_passes(struct run *r, int n, struct whet_err *err);
/* Passes over n rows, per rows at a time. */
int trainer_passes(int n, int per);
/* values[0..n) summed over the ranks, in place. */
int trainer_sum(struct run *r, double *values, int n, struct whet_err *err);
/* model_take_stats summed over the ranks: the step's figures of the whole batch. */
int trainer_take_stats(struct run *r, struct model_stats *st, struct whet_err *err);
/* A model's options (ZeRO's shards) and hooks (the sum of the shards' norms, ZeRO-3's collectives) on this
 * rank: the policy's, and a full fine-tune's frozen reference (sharded with it under ZeRO-3). */
void trainer_dist_model_opts(const struct run *r, struct model_opts *o);
void trainer_dist_attach(struct run *r, struct model *m);
/* Around the step's last backward pass (all ranks, with rows of their own or not): begin before it, end
 * after it. In a data-parallel gang the gradient's all-reduces start bucket by bucket as the pass
 * finishes each layer (model_set_grad_ready), overlapping the layers still to go; a rank without rows
 * starts the same buckets at end. Alone, or under ZeRO-1 (whose reduce-scatter needs the whole
 * gradient), they do nothing. */
void trainer_overlap_begin(struct run *r);
void trainer_overlap_end(struct run *r);
/* Sums the accumulated gradient over the ranks, clips it to max_grad_norm and takes an AdamW step at
 * `lr` (ZeRO: on this rank's shard, then gathers the parameters); *norm is the norm before clipping. */
int trainer_optimizer_step(struct run *r, double lr, double *norm, struct whet_err *err);
/* The optimizer's moments to `path` (rank 0; NULL on the others, which take part in the gather). */
int trainer_gather_optimizer(struct run *r, const char *path, struct whet_err *err);
/* The metrics line's fields of a gang (JSON members, "" alone): comm_bytes, what this rank has sent so
 * far in the collectives, and comm_s, the step's seconds in the gradient's collectives. */
void trainer_dist_figures(const struct run *r, char *json, size_t size);
/* After a step: sums the step's tokens over the ranks and agrees whether to stop (any rank asked). */
int trainer_agree_stop(struct run *r, struct step_figures *f, struct whet_err *err);
/* Loads r->ref_model, a frozen copy of the base model (the reference of a full fine-tune), sharded as the
 * policy is under ZeRO-3. */
int trainer_load_reference(struct run *r, struct whet_err *err);

#endif
