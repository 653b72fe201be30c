/* trainer_dpo.c - DPO in `whet train` (the method table's "dpo", trainer_internal.h).
 *
 * The data is OpenAI's preference JSONL (dpo_data.h), a pair being one packing unit, so a step takes
 * the next batch_size pairs of the epoch's shuffled order. Before this process's first step the
 * reference log-probs of every training and validation pair are computed once (dpo.h): the base
 * weights, i.e. the policy with its LoRA adapter switched off, or for full fine-tuning a frozen copy of
 * the base, freed once the tables are made. A step's loss is the DPO loss, the mean over its pairs;
 * validation reports that loss, the preference accuracy and the reward margin over the validation
 * pairs. */
#include <stdio.h>
#include <stdlib.h>

#include "dpo.h"
#include "dpo_data.h"
#include "model.h"
#include "trainer_internal.h"

struct dpo_state {
    struct dpo_dataset train, valid;
    struct sft_epoch epoch; /* packing of the cursor's epoch */
    struct dpo_batch batch;
    double *ref_train, *ref_valid; /* reference log-probs of every pair, made by prepare (reference_tables) */
    struct dpo_stats last;         /* the last step's figures */
};

/* Pairs, with the same "data" event fields as SFT's (examples are pairs; trained tokens are scored ones). */
static int dpo_load_data(struct run *r, struct whet_err *err) {
    const struct trainer_config *cfg = r->cfg;
    struct dpo_state *s = r->state = xcalloc(1, sizeof *s);
    dpo_dataset_init(&s->train, cfg->hp.max_seq_len);
    dpo_dataset_init(&s->valid, cfg->hp.max_seq_len);
    if (dpo_dataset_load(&s->train, cfg->training_file, &r->tpl, r->tok, err)) return -1;
    r->has_valid = cfg->validation_file != NULL;
    if (r->has_valid && dpo_dataset_load(&s->valid, cfg->validation_file, &r->tpl, r->tok, err)) return -1;
    const struct dpo_dataset *sets[2] = {&s->train, &s->valid};
    const char *names[2] = {cfg->training_file, cfg->validation_file};
    for (int i = 0; i < 1 + r->has_valid; i++) {
        const struct dpo_dataset *d = sets[i];
        trainer_progress(r, "%s: %d preference pairs, %lld tokens (%lld scored); %d pairs cut to fit max_seq_len %d (%lld "
                            "tokens cut); %d skipped with a side left unscored",
                         names[i], dpo_num_pairs(d), d->pairs.n_tokens, d->pairs.n_trained_tokens, d->n_truncated,
                         cfg->hp.max_seq_len, d->n_truncated_tokens, d->n_unscored);
        trainer_file_event(r, names[i], &d->pairs, d->n_truncated, d->n_truncated_tokens, d->n_unscored);
    }
    return 0;
}

static int dpo_steps_per_epoch(const struct run *r) {
    const struct dpo_state *s = r->state;
    return sft_steps_in_epoch(dpo_num_pairs(&s->train), r->cfg->hp.batch_size);
}

/* The reference log-probs of every training and validation pair, in micro-batches of a step's size. */
static int reference_tables(struct run *r, struct whet_err *err) {
    struct dpo_state *s = r->state;
    double t0 = whet_now_mono();
    if (!r->cfg->lora.enabled && trainer_load_reference(r, err)) return -1;
    /* co-trained, the shared frozen base is the reference (the base's passes, without an adapter's) */
    struct model *ref = r->ref_model ? r->ref_model : r->cotrain_base;
    const struct dpo_dataset *sets[2] = {&s->train, &s->valid};
    double **tables[2] = {&s->ref_train, &s->ref_valid};
    int pairs = 0, rows = sft_rows_per_micro_batch(r->cfg->hp.batch_size, r->cfg->hp.gradient_accumulation_steps);
    for (int i = 0; i < 1 + r->has_valid; i++) {
        int n = dpo_num_pairs(sets[i]);
        *tables[i] = xcalloc(2 * (size_t)(n ? n : 1), sizeof(double));
        /* each rank of a gang computes its share, and the shares are summed into every rank's table */
        int passes = dpo_reference_passes(sets[i], rows, r->rank, r->world), most;
        if (trainer_most_passes(r, passes, &most, err) ||
            dpo_reference_table(*tables[i], r->model, ref, sets[i], rows, r->rank, r->world, &s->batch, err) ||
            trainer_idle_reference_passes(r, most - passes, err) ||
            trainer_sum(r, *tables[i], 2 * n, err))
            return whet_err_prefix(err, "dpo reference pass");
        pairs += n;
    }
    trainer_progress(r, "reference log-probs of %d pairs (%s) in %.1fs", pairs,
                     r->ref_model     ? "a frozen copy of the base"
                     : r->cotrain_base ? "the co-trained runs' shared base"
                                       : "the base: LoRA adapter off",
                     whet_now_mono() - t0);
    if (r->ref_model) model_free(r->ref_model); /* the tables are all the run needs of it */
    r->ref_model = NULL;
    return 0;
}

/* A gang's figures: every rank's pairs. */
static int sum_stats(struct run *r, struct dpo_stats *st, struct whet_err *err) {
    double v[6] = {st->n_pairs, st->n_correct, st->loss_sum, st->margin_sum, st->chosen_logps, st->rejected_logps};
    if (trainer_sum(r, v, 6, err)) return -1;
    *st = (struct dpo_stats){(int)v[0], (int)v[1], v[2], v[3], v[4], v[5]};
    return 0;
}

/* Per micro-batch the policy's log-probs against the reference table, loss and backward; the step's
 * loss is the mean over its pairs. */
static int dpo_step(struct run *r, struct step_figures *f, struct whet_err *err) {
    const struct trainer_hparams *hp = &r->cfg->hp;
    struct dpo_state *s = r->state;
    int first, rows;
    f->epoch = sft_take_step(&s->epoch, &r->cursor, &s->train.pairs, r->cfg->seed, hp->batch_size, &first, &rows);
    model_zero_grad(r->model);
    int total_pairs = dpo_rows_pairs(&s->epoch, first, rows);
    double loss_scale = 1.0 / (total_pairs > 0 ? total_pairs : 1);
    trainer_rank_rows(r, first, rows, &first, &rows); /* in a gang: this rank's share, the whole step's scale */
    int per = sft_rows_per_micro_batch(rows, hp->gradient_accumulation_steps), passes = trainer_passes(rows, per), most;
    if (trainer_most_passes(r, passes, &most, err)) return -1;
    struct dpo_stats st = {0};
    for (int row = first; row < first + rows; row += per) {
        dpo_batch_fill(&s->batch, &s->train, &s->epoch, row, per < first + rows - row ? per : first + rows - row);
        double *ref = xmalloc(sizeof(double) * 2 * (size_t)s->batch.n_pairs);
        dpo_batch_reference(ref, s->ref_train, &s->batch);
        if (row + per >= first + rows) trainer_overlap_begin(r); /* the step's last backward pass */
        int rc = dpo_forward_backward(r->model, &s->batch, ref, hp->beta, loss_scale, &st, err);
        free(ref);
        if (rc) return -1;
        f->tokens += s->batch.n_tokens;
    }
    if (trainer_idle_passes(r, most - passes, 1, err)) return -1;
    trainer_overlap_end(r);
    if (sum_stats(r, &st, err)) return -1;
    s->last = st;
    f->loss = st.loss_sum / (st.n_pairs > 0 ? st.n_pairs : 1);
    f->lr = trainer_lr_at(hp, r->step, r->total_steps);
    return trainer_optimizer_step(r, f->lr, &f->grad_norm, err);
}

static void dpo_cotrain_rows(struct run *r, struct step_figures *f, struct model_batch *rows) {
    struct dpo_state *s = r->state;
    int first, n;
    f->epoch = sft_take_step(&s->epoch, &r->cursor, &s->train.pairs, r->cfg->seed, r->cfg->hp.batch_size, &first, &n);
    model_zero_grad(r->model);
    dpo_batch_fill(&s->batch, &s->train, &s->epoch, first, n); /* the whole step: the shared pass splits it */
    f->tokens = s->batch.n_tokens;
    const struct dpo_batch *b = &s->batch;
    *rows = (struct model_batch){b->B, b->T, b->ids, b->positions, b->seq_ids, b->targets, NULL};
}

/* The step's loss is the mean over its pairs, as alone; the pairs' policy log-probs from the pass's nlls. */
static void dpo_cotrain_weights(struct run *r, struct step_figures *f, const float *nll, const int *correct,
                                float *weights) {
    (void)correct;
    struct dpo_state *s = r->state;
    const struct dpo_batch *b = &s->batch;
    double *ref = xmalloc(sizeof(double) * 2 * (size_t)(b->n_pairs ? b->n_pairs : 1));
    dpo_batch_reference(ref, s->ref_train, b);
    s->last = (struct dpo_stats){0};
    dpo_loss_weights(weights, b, nll, ref, r->cfg->hp.beta, 1.0 / (b->n_pairs > 0 ? b->n_pairs : 1), &s->last);
    free(ref);
    f->loss = s->last.loss_sum / (b->n_pairs > 0 ? b->n_pairs : 1);
}

/* The loss, preference accuracy and margin over the validation pairs. */
static int dpo_validate(struct run *r, struct method_text *t, struct whet_err *err) {
    const struct trainer_hparams *hp = &r->cfg->hp;
    struct dpo_state *s = r->state;
    struct sft_epoch ep;
    sft_epoch_pack(&ep, &s->valid.pairs, 0, 0, 0, hp->batch_size);
    int per = sft_rows_per_micro_batch(hp->batch_size, hp->gradient_accumulation_steps); /* as training's at most */
    struct dpo_stats st = {0};
    int first, rows, most;
    trainer_rank_rows(r, 0, ep.n_rows, &first, &rows);
    int passes = trainer_passes(rows, per), rc = trainer_most_passes(r, passes, &most, err);
    for (int row = first; row < first + rows && !rc; row += per) {
        dpo_batch_fill(&s->batch, &s->valid, &ep, row, per < first + rows - row ? per : first + rows - row);
        double *ref = xmalloc(sizeof(double) * 2 * (size_t)s->batch.n_pairs);
        dpo_batch_reference(ref, s->ref_valid, &s->batch);
        rc = dpo_evaluate(r->model, &s->batch, ref, hp->beta, &st, err);
        free(ref);
    }
    if (!rc) rc = trainer_idle_passes(r, most - passes, 0, err);
    sft_epoch_free(&ep);
    if (rc || sum_stats(r, &st, err)) return -1;
    double P = st.n_pairs > 0 ? st.n_pairs : 1;
    snprintf(t->json, sizeof t->json,
             ",\"valid_loss\":%.9g,\"valid_preference_accuracy\":%.6f,\"valid_reward_margin\":%.9g", st.loss_sum / P,
             st.n_correct / P, st.margin_sum / P);
    snprintf(t->progress, sizeof t->progress, " valid_loss %.4f", st.loss_sum / P);
    return rc;
}

static void dpo_metrics(const struct run *r, struct method_text *t) {
    const struct dpo_stats *st = &((const struct dpo_state *)r->state)->last;
    double P = st->n_pairs > 0 ? st->n_pairs : 1;
    snprintf(t->json, sizeof t->json,
             ",\"reward_margin\":%.9g,\"preference_accuracy\":%.6f,\"chosen_logps\":%.9g,\"rejected_logps\":%.9g",
             st->margin_sum / P, st->n_correct / P, st->chosen_logps / P, st->rejected_logps / P);
    snprintf(t->progress, sizeof t->progress, " margin %.4f pref_acc %.3f", st->margin_sum / P, st->n_correct / P);
}

static void dpo_free(struct run *r) {
    struct dpo_state *s = r->state;
    if (!s) return;
    dpo_dataset_free(&s->train);
    dpo_dataset_free(&s->valid);
    sft_epoch_free(&s->epoch);
    dpo_batch_free(&s->batch);
    free(s->ref_train);
    free(s->ref_valid);
    free(s);
    r->state = NULL;
}

const struct trainer_method_ops trainer_dpo_method = {
    .load_data = dpo_load_data,
    .steps_per_epoch = dpo_steps_per_epoch,
    .prepare = reference_tables,
    .step = dpo_step,
    .validate = dpo_validate,
    .metrics = dpo_metrics,
    .cotrain_rows = dpo_cotrain_rows,
    .cotrain_weights = dpo_cotrain_weights,
    .free = dpo_free,
};
