/* trainer_cotrain.c - co-training (see trainer.h): LoRA runs of one base model, SFT, DPO and GRPO, in
 * lock-step on one frozen copy of it. SFT and DPO runs share each step's forward and backward passes over
 * every run's rows (batched LoRA: each run's rows are a LoRA run of its adapter view, model_set_lora_runs),
 * then each run's own optimizer step. The step's rows run in passes of at most pass_tokens tokens (whole
 * rows), so the activations are those of one bounded pass however many runs there are; each run's
 * gradients add up over the passes, as over a run's micro-batches alone.
 *
 * Each run is the trainer's own `struct run` (trainer_open with the shared base), so it keeps what a run
 * alone has: its data order, schedule, seed, checkpoints, metrics lines and events; a DPO run's reference
 * is the shared base (its adapter off, as alone). Only the step is different: the method's cotrain_rows
 * gives the step's rows, this file packs all the runs' sequences end to end (no padding) and cuts them into
 * passes at row ends, and after each forward the method's cotrain_weights turns its rows' token nlls into
 * the backward's token weights (SFT: 1 / the whole step's targets; DPO: its pairs' β·(1 − σ(z)) with their
 * sign, a pair's two sides in one row so in one pass) and, once all its rows are through, its loss, so the
 * backward passes give every run the gradient of its own step's loss; then the run's own AdamW step.
 *
 * A method without those hooks (GRPO) takes its own step, as alone, on its adapter view of the shared
 * base, one run after another: grading, its reference (the view with its adapter off), its ppo_epochs
 * update passes, each with its own sampling temperature (the view's, not the base's), and the further
 * generation batches dynamic sampling may draw. Only its step's first generation batch is shared: with its
 * cotrain_rollout hook each such run gives that batch's rollouts as a request (its prompts, sampling options
 * and the step's RNG), and the lock-step generates every run's at once (rollout_generate_many: each prompt's
 * prefill through its run's adapter, then one batched decode step for all the runs' slots, each run's rows
 * through its adapter view), each response drawn from the seeds it has alone; each run then takes its step
 * with that batch, and meters its share of the generation's time (split by the tokens each generated). A
 * decode step computes a few rows per weight it reads, so one step for all the runs costs much less than one
 * per run. The batched products sum in another order than a run's alone, so a sampled token may flip where
 * two were within rounding; e2e_cotrain states the tolerance. A run that fails (bad figures, a grader or a
 * write that fails) ends alone; the others go on (a shared generation that fails leaves each run to generate
 * alone in its step, so a run whose request is at fault fails alone). Runs may join between steps
 * (trainer_cotrain's joins): a new run opens on the shared base and takes its first step in the next
 * lock-step, as it would alone. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "model_plan.h"
#include "rollout.h"
#include "tokenizer.h"
#include "trainer_internal.h"

/* Why a config cannot be co-trained, or NULL. */
static const char *not_cotrainable(const struct trainer_config *cfg, const char *base_model) {
    if (cfg->method != TRAINER_SFT && cfg->method != TRAINER_DPO && cfg->method != TRAINER_GRPO)
        return "only SFT, DPO and GRPO runs are co-trained";
    if (!cfg->lora.enabled) return "only LoRA runs are co-trained (a full fine-tune changes the shared base)";
    if (cfg->dist.world_size > 1) return "a distributed run is not co-trained";
    if (strcmp(cfg->model, base_model)) return "its model is not the shared base model";
    return NULL;
}

/* A run's last events on its own stream: its error when it failed, then what it put through the passes. */
static void last_events(const struct trainer_cotrain_job *j) {
    FILE *f = j->io.events;
    if (!f) return;
    if (j->rc) {
        json_t *ev = json_pack("{s:s, s:s}", "type", "error", "message", j->err.msg);
        json_dumpf(ev, f, JSON_COMPACT);
        fputc('\n', f);
        json_decref(ev);
    }
    fprintf(f, "{\"type\":\"cotrain\",\"tokens\":%lld,\"device_seconds\":%.6f}\n", j->tokens, j->device_seconds);
    fflush(f);
}

static void end_job(struct trainer_cotrain_job *j, struct run *r, int failed) {
    if (!failed) j->rc = trainer_finish(r, &j->stopped, &j->err);
    else j->rc = -1;
    if (j->rc) trainer_progress(r, "failed: %s", j->err.msg);
    trainer_close(r);
    last_events(j);
}

/* A shared step's tokens: every run's sequences end to end, each its own segment (a new seq id), without
 * the padding of the runs' rows, so a pass computes only real tokens however the runs' widths differ; and
 * per run, its rows' nlls, whether each target was predicted and the weights, in the layout of its rows. */
struct step_rows {
    size_t n;                     /* tokens */
    int *ids, *pos, *seq, *tgt;   /* [n] */
    int *from;                    /* [n]: where token t is in its run's rows */
    float *nll, *w;               /* [n]: the passes' token nlls, the backward's weights */
    int *correct;                 /* [n] */
    int *first;                   /* [runs + 1]: each run's first token */
    size_t *ends;                 /* [rows]: where each row's tokens end (rows are never split) */
    int n_rows;
    size_t longest;               /* row */
    size_t *at;                   /* [runs]: each run's offset in the run_* buffers */
    float *run_nll, *run_w;       /* [Σ B·T] */
    int *run_correct;
};

static void step_rows_pack(struct step_rows *s, const struct model_batch *rows, int n) {
    size_t N = 0, rows_n = 0;
    for (int i = 0; i < n; i++) N += (size_t)rows[i].B * (size_t)rows[i].T, rows_n += (size_t)rows[i].B;
    s->ids = xmalloc(N * sizeof *s->ids), s->pos = xmalloc(N * sizeof *s->pos), s->seq = xmalloc(N * sizeof *s->seq);
    s->tgt = xmalloc(N * sizeof *s->tgt), s->from = xmalloc(N * sizeof *s->from);
    s->nll = xmalloc(N * sizeof *s->nll), s->w = xmalloc(N * sizeof *s->w);
    s->correct = xmalloc(N * sizeof *s->correct);
    s->first = xmalloc(sizeof *s->first * (size_t)(n + 1)), s->at = xmalloc(sizeof *s->at * (size_t)n);
    s->ends = xmalloc(sizeof *s->ends * (rows_n ? rows_n : 1));
    s->run_nll = xcalloc(N, sizeof *s->run_nll), s->run_w = xcalloc(N, sizeof *s->run_w);
    s->run_correct = xcalloc(N, sizeof *s->run_correct);
    size_t at = 0, lay = 0;
    s->n_rows = 0, s->longest = 0;
    for (int i = 0, next_seq = 0; i < n; i++) {
        const struct model_batch *b = &rows[i];
        s->first[i] = (int)at, s->at[i] = lay;
        lay += (size_t)b->B * (size_t)b->T;
        for (int k = 0; k < b->B; k++) {
            size_t row = (size_t)k * (size_t)b->T;
            /* a row's padding: its trailing segment with nothing to predict (an SFT example, a DPO pair's
             * rejected side always has a target) */
            int len = b->T, pad = 1;
            while (len > 1 && b->seq_ids[row + len - 2] == b->seq_ids[row + b->T - 1]) len--;
            for (int t = len - 1; t < b->T && pad; t++) pad = b->targets[row + t] < 0;
            int real = pad ? len - 1 : b->T;
            for (int t = 0; t < real; t++, at++) {
                if (t == 0 || b->seq_ids[row + t] != b->seq_ids[row + t - 1]) next_seq++;
                s->ids[at] = b->ids[row + t], s->pos[at] = b->positions[row + t], s->seq[at] = next_seq;
                s->tgt[at] = b->targets[row + t], s->from[at] = (int)(row + t);
            }
            if ((size_t)real > s->longest) s->longest = (size_t)real;
            s->ends[s->n_rows++] = at;
        }
    }
    s->first[n] = (int)at;
    s->n = at;
}

static void step_rows_free(struct step_rows *s) {
    free(s->ids), free(s->pos), free(s->seq), free(s->tgt), free(s->from), free(s->nll), free(s->w), free(s->correct);
    free(s->first), free(s->ends), free(s->at), free(s->run_nll), free(s->run_w), free(s->run_correct);
}

/* Run i's tokens in [a, b): [*lo, *hi), empty when it has none there. */
static void run_span(const struct step_rows *s, int i, size_t a, size_t b, size_t *lo, size_t *hi) {
    *lo = (size_t)s->first[i] > a ? (size_t)s->first[i] : a;
    *hi = (size_t)s->first[i + 1] < b ? (size_t)s->first[i + 1] : b;
}

/* One pass over the step's tokens [a, b): the forward; each run with tokens in it gets its token weights
 * from its rows passed so far (its method's cotrain_weights: a row's weights depend on that row alone, and
 * the call after its last pass sees all its rows and sets its figures); the backward adds to each run's
 * gradients. `runs` has room for n. */
static int pass(struct model *base, struct run **live, struct step_figures *f, int n, struct step_rows *s, size_t a,
                size_t b, struct lora_run *runs, struct whet_err *err) {
    int k = 0;
    size_t lo, hi;
    for (int i = 0; i < n; i++) {
        run_span(s, i, a, b, &lo, &hi);
        if (lo < hi) runs[k++] = (struct lora_run){live[i]->model, (int)(hi - lo)};
    }
    struct model_batch mb = {1, (int)(b - a), s->ids + a, s->pos + a, s->seq + a, s->tgt + a, NULL};
    if (model_set_lora_runs(base, runs, k, err) || model_forward(base, &mb, NULL, err)) return -1;
    model_get_token_losses(base, s->nll + a);
    model_get_token_correct(base, s->correct + a);
    for (int i = 0; i < n; i++) {
        run_span(s, i, a, b, &lo, &hi);
        if (lo >= hi) continue;
        float *nll = s->run_nll + s->at[i], *w = s->run_w + s->at[i];
        int *correct = s->run_correct + s->at[i];
        for (size_t t = lo; t < hi; t++) nll[s->from[t]] = s->nll[t], correct[s->from[t]] = s->correct[t];
        live[i]->method->cotrain_weights(live[i], &f[i], nll, correct, w);
        for (size_t t = lo; t < hi; t++) s->w[t] = w[s->from[t]];
    }
    return model_set_loss_weights(base, s->w + a, err) || model_backward(base, 1.0f, err) ? -1 : 0;
}

/* One shared step of the runs live[0..n): their rows in passes of at most pass_tokens tokens (whole rows,
 * at least one a pass), each run's gradients summed over the passes, then each run's optimizer step.
 * Returns -1 with err set only when a pass failed (then every run in the step fails). */
static int shared_step(struct model *base, struct run **live, struct trainer_cotrain_job **jobs, int n,
                       int pass_tokens, struct whet_err *err) {
    struct step_figures *f = xcalloc((size_t)n, sizeof *f);
    struct model_batch *rows = xcalloc((size_t)n, sizeof *rows);
    struct lora_run *runs = xcalloc((size_t)n, sizeof *runs);
    double t0 = whet_now_mono();
    long long tokens = 0;
    for (int i = 0; i < n; i++) {
        live[i]->method->cotrain_rows(live[i], &f[i], &rows[i]);
        tokens += f[i].tokens;
    }
    struct step_rows s;
    step_rows_pack(&s, rows, n);
    int rc = 0;
    size_t bound = (size_t)mp_cotrain_pass_tokens((int64_t)s.n, (int64_t)s.longest, pass_tokens);
    for (int row = 0; row < s.n_rows && !rc;) {
        size_t a = row ? s.ends[row - 1] : 0, b = s.ends[row++];
        while (row < s.n_rows && s.ends[row] - a <= bound) b = s.ends[row++];
        if (b > a) rc = pass(base, live, f, n, &s, a, b, runs, err);
    }
    for (int i = 0; i < n && !rc; i++) /* a run with no tokens (no pass called it): its figures */
        if (s.first[i] == s.first[i + 1])
            live[i]->method->cotrain_weights(live[i], &f[i], s.run_nll + s.at[i], s.run_correct + s.at[i],
                                             s.run_w + s.at[i]);
    struct whet_err ignored;
    model_set_lora_runs(base, NULL, 0, &ignored);
    double seconds = whet_now_mono() - t0;
    for (int i = 0; i < n && !rc; i++) {
        struct run *r = live[i];
        /* metering: the passes' time split by the tokens each run put in them */
        double share = tokens > 0 ? seconds * (double)f[i].tokens / (double)tokens : 0;
        jobs[i]->tokens += f[i].tokens;
        jobs[i]->device_seconds += share;
        double t1 = whet_now_mono();
        f[i].lr = trainer_lr_at(&r->cfg->hp, r->step, r->total_steps);
        if (trainer_optimizer_step(r, f[i].lr, &f[i].grad_norm, &jobs[i]->err) ||
            trainer_after_step(r, &f[i], share + whet_now_mono() - t1, &jobs[i]->err))
            jobs[i]->rc = -1; /* this run alone ends */
        jobs[i]->device_seconds += whet_now_mono() - t1; /* its own optimizer step, validation, checkpoint */
    }
    step_rows_free(&s);
    free(f), free(rows), free(runs);
    return rc ? -1 : 0;
}

/* One step of a run whose method has no shared-pass hooks (GRPO), as alone on its adapter view, after
 * `shared` seconds of work done for it with other runs (its share of their rollouts): the rest of its time is
 * all its own. */
static void own_step(struct run *r, struct trainer_cotrain_job *j, double shared) {
    struct step_figures f = {0};
    double t0 = whet_now_mono();
    if (r->method->step(r, &f, &j->err)) {
        j->rc = -1;
    } else {
        j->tokens += f.tokens;
        if (trainer_after_step(r, &f, shared + whet_now_mono() - t0, &j->err)) j->rc = -1;
    }
    j->device_seconds += shared + whet_now_mono() - t0;
}

/* The steps of the runs runs[0..n) whose methods take their own (GRPO): the first rollouts of those with a
 * cotrain_rollout hook generated together on the shared base (when there are two or more), then each run's
 * step. */
static void own_steps(struct model *base, struct run **runs, struct trainer_cotrain_job **jobs, int n) {
    struct rollout_request *q = xcalloc((size_t)n, sizeof *q);
    int k = 0;
    for (int i = 0; i < n; i++) k += runs[i]->method->cotrain_rollout != NULL;
    if (k > 1) {
        k = 0;
        for (int i = 0; i < n; i++)
            if (runs[i]->method->cotrain_rollout) runs[i]->method->cotrain_rollout(runs[i], &q[k++]);
        struct whet_err err;
        if (rollout_generate_many(base, q, k, &err))
            for (int i = 0; i < n; i++)
                trainer_progress(runs[i], "the co-trained runs' rollouts failed (%s): each run generates its own",
                                 err.msg);
    }
    for (int i = 0, at = 0; i < n; i++) {
        int shared = k > 1 && runs[i]->method->cotrain_rollout;
        own_step(runs[i], jobs[i], shared ? q[at++].out->seconds : 0);
    }
    free(q);
}

/* A run of the co-training: its job (the caller's), its run on the shared base, and its own io with its
 * own stop flag (the runs' ios may share one: set from the job's flag or stop file). Each allocated alone:
 * a run keeps pointers to its io, and runs join while others run. */
struct member {
    struct trainer_cotrain_job *job;
    struct run run;
    struct trainer_io io;
    volatile sig_atomic_t stop;
    int open;
};

/* Adds job j to the runs m[0..*n) (growing m): opened on the shared base (and its tokenizer, when read) from
 * the next step on, or ended at once, alone, when it cannot be co-trained or does not open. */
static void add_member(struct member ***m, int *n, int *cap, struct model *base, struct tokenizer *tok,
                       const char *base_dir, struct trainer_cotrain_job *j) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        *m = xrealloc(*m, (size_t)*cap * sizeof **m);
    }
    struct member *r = (*m)[(*n)++] = xcalloc(1, sizeof *r);
    r->job = j;
    j->rc = 0, j->stopped = 0, j->tokens = 0, j->device_seconds = 0;
    const char *why = not_cotrainable(j->cfg, base_dir);
    if (why) {
        j->rc = whet_errf(&j->err, "%s: %s", j->cfg->output_dir, why);
        last_events(j);
        return;
    }
    r->io = j->io;
    r->io.stop = &r->stop;
    if (trainer_open(&r->run, j->cfg, &r->io, base, tok, &j->err)) {
        j->rc = -1;
        trainer_close(&r->run);
        last_events(j);
        return;
    }
    r->open = 1;
}

int trainer_cotrain(struct trainer_cotrain_job *jobs, int n, int pass_tokens, const struct trainer_cotrain_joins *joins,
                    struct whet_err *err) {
    if (n < 1) return whet_errf(err, "co-training: no runs");
    const char *base_dir = jobs[0].cfg->model;
    struct model_opts o = model_opts_default();
    o.train = 1;
    o.frozen_base = 1;
    o.device = jobs[0].cfg->device;
    struct model *base;
    if (model_load(&base, base_dir, &o, err)) return whet_err_prefix(err, "co-training: base model");
    /* The base's tokenizer, read once for all the runs (each read it alone: a tenth of a second apiece, on one
     * thread while the others waited); unreadable, each run reads its own and fails on its own. */
    char *tok_path = xasprintf("%s/tokenizer.json", base_dir);
    struct tokenizer *tok = NULL;
    struct whet_err tok_err;
    if (tokenizer_load(tok_path, &tok, &tok_err)) tok = NULL;
    free(tok_path);
    struct member **m = NULL;
    int n_runs = 0, cap = 0;
    for (int i = 0; i < n; i++) add_member(&m, &n_runs, &cap, base, tok, base_dir, &jobs[i]);
    struct run **live = NULL, **own = NULL;
    struct trainer_cotrain_job **live_jobs = NULL, **own_jobs = NULL;
    for (;;) {
        /* runs joining between steps: in the lock-step from this one */
        for (struct trainer_cotrain_job *j; joins && (j = joins->next(joins->ctx));)
            add_member(&m, &n_runs, &cap, base, tok, base_dir, j);
        live = xrealloc(live, (size_t)n_runs * sizeof *live);
        live_jobs = xrealloc(live_jobs, (size_t)n_runs * sizeof *live_jobs);
        own = xrealloc(own, (size_t)n_runs * sizeof *own);
        own_jobs = xrealloc(own_jobs, (size_t)n_runs * sizeof *own_jobs);
        int n_live = 0, n_own = 0; /* runs in the shared pass; runs taking their own steps */
        for (int i = 0; i < n_runs; i++) {
            struct member *r = m[i];
            if (!r->open) continue;
            const struct trainer_io *io = &r->job->io;
            r->stop = (io->stop && *io->stop) || (io->stop_file && !access(io->stop_file, F_OK));
            if (r->job->rc || !trainer_has_step(&r->run)) {
                end_job(r->job, &r->run, r->job->rc != 0);
                r->open = 0;
                continue;
            }
            if (r->run.method->cotrain_rows) {
                live[n_live] = &r->run;
                live_jobs[n_live++] = r->job;
            } else {
                own[n_own] = &r->run;
                own_jobs[n_own++] = r->job;
            }
        }
        if (!n_live && !n_own) break;
        own_steps(base, own, own_jobs, n_own);
        struct whet_err pass_err;
        if (n_live && shared_step(base, live, live_jobs, n_live, pass_tokens, &pass_err))
            for (int i = 0; i < n_live; i++) live_jobs[i]->rc = -1, live_jobs[i]->err = pass_err;
    }
    for (int i = 0; i < n_runs; i++) free(m[i]);
    free(m), free(live), free(live_jobs), free(own), free(own_jobs);
    if (tok) tokenizer_free(tok);
    model_free(base);
    return 0;
}
