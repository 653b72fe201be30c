/* trainer_internal.h - what trainer.c (the loop, checkpoints, resume) shares with the method that
 * lives in its own file, trainer_grpo.c: the state of a run and the hooks GRPO plugs in. Not a
 * public header: only the trainer's own files include it. */
#ifndef WHET_TRAINER_INTERNAL_H
#define WHET_TRAINER_INTERNAL_H

#include <jansson.h>
#include <stdio.h>

#include "chat_template.h"
#include "dpo_data.h"
#include "sft_data.h"
#include "trainer.h"

struct grpo_run;

struct run {
    const struct trainer_config *cfg;
    const struct trainer_io *io;
    struct tokenizer *tok;
    struct chat_template tpl;
    struct sft_dataset train, valid;
    int has_valid;
    /* method dpo: preference pairs instead (packed as SFT packs examples), and the reference of a
     * full fine-tune (a frozen copy of the base; DPO keeps it only until the reference tables are
     * made, GRPO for the whole run; with LoRA the policy with its adapter off is the reference). */
    struct dpo_dataset dpo_train, dpo_valid;
    struct dpo_batch dpo_batch;
    struct model *ref_model;
    double *ref_train, *ref_valid; /* reference log-probs of every pair, computed once (dpo.h) */
    struct grpo_run *grpo;         /* method grpo: prompts, epoch order, scratch (trainer_grpo.c) */
    struct model *model;
    struct sft_epoch epoch; /* packing of cursor.epoch */
    struct sft_batch batch;
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
};

/* A progress line for people ("whet train: …" on io->progress) and a JSON event line (io->events). */
void trainer_progress(const struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void trainer_event_line(const struct run *r, const char *json_object_text);
/* Keeps a file's "data" event (taking the reference) until the run's steps are planned: the training
 * file's (the first) then also carries steps_per_epoch and total_steps. */
void trainer_data_event(struct run *r, json_t *event);
/* One step's metrics object (JSON text "{…}") to metrics.jsonl and, as a "metrics" event, to the
 * executor's pipe. */
void trainer_metrics_line(const struct run *r, const char *json_object_text);

/* ---- method grpo (trainer_grpo.c) ---- */
/* Reads the RFT training (and validation) prompts and reports them ("data" events). */
int trainer_grpo_load_data(struct run *r, struct whet_err *err);
/* Optimizer steps in one epoch: the prompts in batches of batch_size (the last one may be smaller). */
int trainer_grpo_steps_per_epoch(const struct run *r);
/* One step: rollouts, grading, advantages, reference and update passes, the metrics line, and the
 * validation rewards when due. Advances r->step and r->cursor. */
int trainer_grpo_step(struct run *r, struct whet_err *err);
void trainer_grpo_free(struct run *r);

#endif
