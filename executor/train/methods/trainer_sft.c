/* trainer_sft.c - supervised fine-tuning in `whet train` (the method table's "sft", trainer_internal.h).
 *
 * The data is OpenAI's chat JSONL, tokenized and packed as sft_data.h says: a step takes the next
 * batch_size examples of the epoch's shuffled order, packed into rows, and runs them through the model
 * in gradient_accumulation_steps micro-batches; the step's loss is the mean over all its trained
 * tokens, whichever the split. Validation is the same loss over the validation file, unshuffled. */
#include <stdio.h>
#include <stdlib.h>

#include "model.h"
#include "sft_data.h"
#include "trainer_internal.h"

struct sft_state {
    struct sft_dataset train, valid;
    struct sft_epoch epoch; /* packing of the cursor's epoch */
    struct sft_batch batch;
    double accuracy; /* of the last step: trained targets the model predicted right */
};

static int sft_load_data(struct run *r, struct whet_err *err) {
    const struct trainer_config *cfg = r->cfg;
    struct sft_state *s = r->state = xcalloc(1, sizeof *s);
    sft_dataset_init(&s->train, cfg->hp.max_seq_len);
    sft_dataset_init(&s->valid, cfg->hp.max_seq_len);
    if (sft_dataset_load(&s->train, cfg->training_file, &r->tpl, r->tok, err)) return -1;
    r->has_valid = cfg->validation_file != NULL;
    if (r->has_valid && sft_dataset_load(&s->valid, cfg->validation_file, &r->tpl, r->tok, err)) return -1;
    const struct sft_dataset *sets[2] = {&s->train, &s->valid};
    const char *names[2] = {cfg->training_file, cfg->validation_file};
    for (int i = 0; i < 1 + r->has_valid; i++) {
        const struct sft_dataset *d = sets[i];
        trainer_progress(r, "%s: %d examples, %lld tokens (%lld trained); %d truncated to max_seq_len %d (%lld tokens cut); "
                            "%d skipped with nothing left to train",
                         names[i], d->n_examples, d->n_tokens, d->n_trained_tokens, d->n_truncated, cfg->hp.max_seq_len,
                         d->n_truncated_tokens, d->n_untrained);
        trainer_file_event(r, names[i], d, d->n_truncated, d->n_truncated_tokens, d->n_untrained);
    }
    return 0;
}

static int sft_steps_per_epoch(const struct run *r) {
    const struct sft_state *s = r->state;
    return sft_steps_in_epoch(s->train.n_examples, r->cfg->hp.batch_size);
}

/* The model's view of a batch of rows. */
static struct model_batch batch_of(const struct sft_batch *b) {
    return (struct model_batch){b->B, b->T, b->ids, b->positions, b->seq_ids, b->targets, NULL};
}

/* Forward pass of the micro-batch in s->batch; its statistics stay on the device, summed until the
 * step (or the validation) takes them. */
static int sft_forward(struct run *r, struct sft_state *s, struct whet_err *err) {
    struct model_batch mb = batch_of(&s->batch);
    return model_forward(r->model, &mb, NULL, err);
}

static int sft_step(struct run *r, struct step_figures *f, struct whet_err *err) {
    const struct trainer_hparams *hp = &r->cfg->hp;
    struct sft_state *s = r->state;
    int first, rows;
    f->epoch = sft_take_step(&s->epoch, &r->cursor, &s->train, r->cfg->seed, hp->batch_size, &first, &rows);
    model_zero_grad(r->model);
    /* The loss of the step is the mean over all its trained tokens, so every micro-batch's gradient
     * is scaled by one over the step's total, which the packing already knows. */
    int total_targets = sft_rows_targets(&s->train, &s->epoch, first, rows);
    float loss_scale = 1.0f / (float)(total_targets > 0 ? total_targets : 1);
    /* In a gang this rank trains its share of the rows, with the whole step's scale. */
    trainer_rank_rows(r, first, rows, &first, &rows);
    int per = sft_rows_per_micro_batch(rows, hp->gradient_accumulation_steps), passes = trainer_passes(rows, per), most;
    if (trainer_most_passes(r, passes, &most, err)) return -1;
    model_reset_stats(r->model);
    for (int row = first; row < first + rows; row += per) {
        sft_batch_fill(&s->batch, &s->train, &s->epoch, row, per < first + rows - row ? per : first + rows - row);
        if (row + per >= first + rows) trainer_overlap_begin(r); /* the step's last backward pass */
        if (sft_forward(r, s, err) || model_backward(r->model, loss_scale, err)) return -1;
        f->tokens += s->batch.n_tokens;
    }
    if (trainer_idle_passes(r, most - passes, 1, err)) return -1;
    trainer_overlap_end(r);
    f->lr = trainer_lr_at(hp, r->step, r->total_steps);
    struct model_stats st;
    if (trainer_optimizer_step(r, f->lr, &f->grad_norm, err) || trainer_take_stats(r, &st, err)) return -1;
    f->loss = st.weight_sum > 0 ? st.loss_sum / st.weight_sum : 0;
    s->accuracy = st.n_targets ? (double)st.n_correct / (double)st.n_targets : 0;
    return 0;
}

static void sft_cotrain_rows(struct run *r, struct step_figures *f, struct model_batch *rows) {
    struct sft_state *s = r->state;
    int first, n;
    f->epoch = sft_take_step(&s->epoch, &r->cursor, &s->train, r->cfg->seed, r->cfg->hp.batch_size, &first, &n);
    model_zero_grad(r->model);
    sft_batch_fill(&s->batch, &s->train, &s->epoch, first, n); /* the whole step: the shared pass splits it */
    f->tokens = s->batch.n_tokens;
    *rows = batch_of(&s->batch);
}

/* The step's loss is the mean over its trained targets, as alone: each weighs 1 / their count. */
static void sft_cotrain_weights(struct run *r, struct step_figures *f, const float *nll, const int *correct,
                                float *weights) {
    struct sft_state *s = r->state;
    const struct sft_batch *b = &s->batch;
    float scale = 1.0f / (float)(b->n_targets > 0 ? b->n_targets : 1);
    double loss_sum = 0;
    int right = 0;
    for (size_t t = 0; t < (size_t)b->B * b->T; t++) {
        weights[t] = b->targets[t] >= 0 ? scale : 0.0f;
        loss_sum += nll[t];
        right += correct[t];
    }
    f->loss = b->n_targets > 0 ? loss_sum / b->n_targets : 0;
    s->accuracy = b->n_targets > 0 ? (double)right / b->n_targets : 0;
}

static int sft_validate(struct run *r, struct method_text *t, struct whet_err *err) {
    const struct trainer_hparams *hp = &r->cfg->hp;
    struct sft_state *s = r->state;
    struct sft_epoch ep;
    sft_epoch_pack(&ep, &s->valid, 0, 0, 0, hp->batch_size);
    int per = sft_rows_per_micro_batch(hp->batch_size, hp->gradient_accumulation_steps); /* as training's at most */
    int first, rows, most;
    trainer_rank_rows(r, 0, ep.n_rows, &first, &rows);
    int passes = trainer_passes(rows, per), rc = trainer_most_passes(r, passes, &most, err);
    model_reset_stats(r->model);
    for (int row = first; row < first + rows && !rc; row += per) {
        sft_batch_fill(&s->batch, &s->valid, &ep, row, per < first + rows - row ? per : first + rows - row);
        rc = sft_forward(r, s, err);
    }
    if (!rc) rc = trainer_idle_passes(r, most - passes, 0, err);
    sft_epoch_free(&ep);
    struct model_stats st;
    if (rc || trainer_take_stats(r, &st, err)) return -1;
    double loss = st.weight_sum > 0 ? st.loss_sum / st.weight_sum : 0;
    snprintf(t->json, sizeof t->json, ",\"valid_loss\":%.9g", loss);
    snprintf(t->progress, sizeof t->progress, " valid_loss %.4f", loss);
    return rc;
}

static void sft_metrics(const struct run *r, struct method_text *t) {
    const struct sft_state *s = r->state;
    snprintf(t->json, sizeof t->json, ",\"train_mean_token_accuracy\":%.6f", s->accuracy);
    snprintf(t->progress, sizeof t->progress, " acc %.3f", s->accuracy);
}

static void sft_free(struct run *r) {
    struct sft_state *s = r->state;
    if (!s) return;
    sft_dataset_free(&s->train);
    sft_dataset_free(&s->valid);
    sft_epoch_free(&s->epoch);
    sft_batch_free(&s->batch);
    free(s);
    r->state = NULL;
}

const struct trainer_method_ops trainer_sft_method = {
    .load_data = sft_load_data,
    .steps_per_epoch = sft_steps_per_epoch,
    .step = sft_step,
    .validate = sft_validate,
    .metrics = sft_metrics,
    .cotrain_rows = sft_cotrain_rows,
    .cotrain_weights = sft_cotrain_weights,
    .free = sft_free,
};
