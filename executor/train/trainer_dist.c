/* trainer_dist.c - what a rank of a distributed run does differently (trainer_internal.h): joining the
 * gang, its share of a step's rows, the sums over the ranks, and the optimizer step of data
 * parallelism and ZeRO-1. Alone (world_size 1) every function here is the single-process path.
 *
 * Data parallel: every rank holds the whole model and optimizer; a step's rows are split over the
 * ranks, each runs forward and backward on its share with the step's global loss scale, the gradients
 * are summed over the ranks (all-reduce), and every rank takes the same clipped AdamW step, so the
 * weights stay identical without ever being sent.
 * ZeRO-1 (distributed.zero): each rank's optimizer holds the moments of its shard of the trainable
 * buffer only (model_opts.optimizer_shards); the gradients are reduce-scattered (each rank gets the
 * sum of its shard), the norm is the sum of the shards' squares, each rank steps its shard and the
 * parameters are all-gathered. The same bytes move as with all-reduce (a reduce-scatter and an
 * all-gather) and the moments take 1/N of the memory.
 * ZeRO-3 (distributed.zero 3): the base parameters are sharded as well, unit by unit (the embedding, each
 * layer, the head: model.h); each pass all-gathers a unit just before it uses it and drops it after. A
 * full fine-tune's backward pass reduce-scatters each unit's gradient as it finishes it, and the optimizer
 * steps each rank's shards where they lie — nothing moves at the step but the norm: 1.5× the bytes of
 * data parallelism (the backward pass gathers the units again), for a rank that holds 1/N of the model,
 * its gradients and its moments, plus the units in flight. LoRA shards its frozen base so (a base too big
 * for one device) and its adapter as under ZeRO-1.
 * Checkpoints are consolidated (one writer, rank 0, whatever the world size): under ZeRO the moments
 * are gathered to every rank for it (and under ZeRO-3 the parameters, for the writing), so a checkpoint
 * resumes at any world size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"
#include "model.h"
#include "model_plan.h"
#include "trainer_internal.h"

static void on_listen(void *ctx, const char *address) {
    const struct run *r = ctx;
    char line[512];
    snprintf(line, sizeof line, "{\"type\":\"rendezvous\",\"address\":\"%s\",\"generation\":%u,\"world_size\":%d}", address,
             r->cfg->dist.generation, r->cfg->dist.world_size);
    trainer_event_line(r, line);
    trainer_progress(r, "rank 0 of %d: rendezvous at %s (generation %u); waiting for the other ranks", r->cfg->dist.world_size,
                     address, r->cfg->dist.generation);
}

int trainer_dist_open(struct run *r, struct whet_err *err) {
    const struct trainer_distributed *d = &r->cfg->dist;
    r->rank = d->rank;
    r->world = d->world_size;
    /* Alone, unless a rendezvous was given: a gang of one runs every collective of the gang's code path
     * (what a GPU machine with one device checks NCCL with, tests/gpu/run.sh). */
    if (d->world_size == 1 && !d->rendezvous) return 0;
    double t0 = whet_now_mono();
    struct comm_opts o = {.world_size = d->world_size, .rank = d->rank, .rendezvous = d->rendezvous, .host = d->host,
                          .generation = d->generation, .timeout_s = d->timeout_s, .device = r->cfg->device,
                          .on_listen = on_listen, .ctx = r};
    if (comm_open(&r->comm, &o, err)) return -1;
    trainer_progress(r, "rank %d of %d joined the gang in %.2fs (%s)%s", d->rank, d->world_size, whet_now_mono() - t0,
                     comm_library(r->comm),
                     d->zero == 3   ? " (ZeRO-3: parameters, gradients and optimizer state sharded)"
                     : d->zero == 1 ? " (ZeRO-1: optimizer state sharded)"
                                    : " (data parallel)");
    return 0;
}

void trainer_dist_close(struct run *r) {
    /* (buckets started by a step that failed are waited for: the comm's thread may not outlive them) */
    for (int i = 0; i < r->n_bucket_ops; i++) comm_wait(r->bucket_ops[i], &r->dist_err);
    free(r->bucket_ops);
    comm_close(r->comm);
    r->comm = NULL;
}

static int params_sharded(const struct run *r) { return r->comm && r->cfg->dist.zero == 3; }
/* ZeRO-3 of a full fine-tune: the backward passes reduce-scatter the gradient unit by unit, and the
 * optimizer steps the parameters where they lie (LoRA's adapter is sharded as under ZeRO-1). */
static int grads_in_units(const struct run *r) { return params_sharded(r) && !r->cfg->lora.enabled; }

void trainer_rank_rows(const struct run *r, int first, int rows, int *my_first, int *my_rows) {
    int64_t lo, hi;
    mp_shard(rows, r->world, r->rank, &lo, &hi);
    *my_first = first + (int)lo;
    *my_rows = (int)(hi - lo);
}

int trainer_passes(int n, int per) { return n > 0 && per > 0 ? (n + per - 1) / per : 0; }

int trainer_most_passes(struct run *r, int mine, int *most, struct whet_err *err) {
    *most = mine;
    if (!params_sharded(r)) return 0;
    /* every rank's count at its index, summed: every rank learns every count */
    double *counts = xcalloc((size_t)r->world, sizeof *counts);
    counts[r->rank] = mine;
    int rc = trainer_sum(r, counts, r->world, err);
    for (int k = 0; k < r->world && !rc; k++) *most = (int)counts[k] > *most ? (int)counts[k] : *most;
    free(counts);
    return rc;
}

static int idle_passes(struct model *m, int n, int backward, struct whet_err *err) {
    for (int i = 0; i < n; i++)
        if (model_idle_pass(m, backward, err)) return -1;
    return 0;
}

int trainer_idle_passes(struct run *r, int n, int backward, struct whet_err *err) {
    return idle_passes(r->model, n, backward, err);
}

struct model *trainer_reference(struct run *r) { return r->ref_model ? r->ref_model : r->model; }

int trainer_idle_reference_passes(struct run *r, int n, struct whet_err *err) {
    return idle_passes(trainer_reference(r), n, 0, err);
}

int trainer_sum(struct run *r, double *values, int n, struct whet_err *err) {
    return r->comm ? comm_allreduce_f64(r->comm, values, (size_t)n, err) : 0;
}

int trainer_take_stats(struct run *r, struct model_stats *st, struct whet_err *err) {
    *st = model_take_stats(r->model);
    double v[4] = {st->loss_sum, st->weight_sum, st->n_targets, st->n_correct};
    if (trainer_sum(r, v, 4, err)) return -1;
    *st = (struct model_stats){v[0], v[1], (int)v[2], (int)v[3]};
    return 0;
}

/* model_clip_grad_norm's reducer under ZeRO: the shards' squared sums, summed over the ranks. */
static int sum_sumsq(void *ctx, double *device_sumsq) {
    struct run *r = ctx;
    return comm_allreduce_f64(r->comm, device_sumsq, 1, &r->dist_err);
}

/* ZeRO-3's collectives: the seconds waited for one count with the rest of the run's communication (an
 * all-gather that ran while the previous unit computed costs nothing). */
static int timed_wait(struct run *r, struct comm_op *started, struct whet_err *err) {
    double t0 = whet_now_mono();
    int rc = comm_wait(started, err);
    r->comm_seconds += whet_now_mono() - t0;
    return rc;
}

static void *gather_unit_start(void *ctx, float *unit, size_t n) {
    struct run *r = ctx;
    return comm_allgather_start(r->comm, unit, n);
}

static int gather_unit_wait(void *ctx, void *started, struct whet_err *err) { return timed_wait(ctx, started, err); }

static int reduce_scatter_unit(void *ctx, float *unit, size_t n, struct whet_err *err) {
    struct run *r = ctx;
    return timed_wait(r, comm_reduce_scatter_start(r->comm, unit, n), err);
}

void trainer_dist_model_opts(const struct run *r, struct model_opts *o) {
    if (r->world > 1 && r->cfg->dist.zero) o->optimizer_shards = r->world, o->optimizer_shard = r->rank;
    o->shard_params = r->world > 1 && r->cfg->dist.zero == 3;
}

void trainer_dist_attach(struct run *r, struct model *m) {
    if (r->comm && r->cfg->dist.zero) model_set_sumsq_reducer(m, sum_sumsq, r);
    if (params_sharded(r)) model_set_shard_ops(m, &(struct model_shard_ops){gather_unit_start, gather_unit_wait, reduce_scatter_unit, r});
}

/* ---------------------------------------------------------------- gradient buckets */

/* Floats per bucket: big enough that a collective's fixed cost (a ring of N-1 steps) is small beside
 * its bytes, small enough that the first bucket starts early in the backward pass. */
#define BUCKET_FLOATS ((size_t)4 << 20)

static void start_bucket(struct run *r) {
    if (r->bucket_hi <= r->bucket_lo) return;
    size_t n;
    float *grads = model_trainable_grads(r->model, &n);
    if (r->n_bucket_ops == r->bucket_ops_cap) {
        r->bucket_ops_cap = r->bucket_ops_cap ? 2 * r->bucket_ops_cap : 16;
        r->bucket_ops = xrealloc(r->bucket_ops, sizeof *r->bucket_ops * (size_t)r->bucket_ops_cap);
    }
    r->bucket_ops[r->n_bucket_ops++] = comm_allreduce_start(r->comm, grads + r->bucket_lo, r->bucket_hi - r->bucket_lo);
    r->bucket_started += r->bucket_hi - r->bucket_lo;
    r->bucket_lo = r->bucket_hi = 0;
}

/* model_set_grad_ready's hook: ranges come from the buffer's end towards its start, so a bucket grows
 * downwards while they touch. */
static void grads_ready(void *ctx, size_t lo, size_t hi) {
    struct run *r = ctx;
    if (r->bucket_hi > r->bucket_lo && hi != r->bucket_lo) start_bucket(r);
    if (r->bucket_hi <= r->bucket_lo) r->bucket_hi = hi;
    r->bucket_lo = lo;
    if (r->bucket_hi - r->bucket_lo >= BUCKET_FLOATS) start_bucket(r);
}

static int overlapping(const struct run *r) { return r->comm && !r->cfg->dist.zero; }

void trainer_overlap_begin(struct run *r) {
    if (!overlapping(r)) return;
    model_set_grad_ready(r->model, grads_ready, r);
    r->overlap_armed = 1;
}

void trainer_overlap_end(struct run *r) {
    if (!overlapping(r)) return;
    model_set_grad_ready(r->model, grads_ready, r);
    if (!r->overlap_armed) model_grad_ranges(r->model); /* no backward pass here: the others' buckets */
    model_set_grad_ready(r->model, NULL, NULL);
    start_bucket(r);
    r->overlap_armed = 0;
}

/* Waits for the step's buckets (started by trainer_overlap_end, or here when a method did not use it). */
static int wait_buckets(struct run *r, size_t n, struct whet_err *err) {
    if (!r->n_bucket_ops) trainer_overlap_end(r);
    int rc = 0;
    for (int i = 0; i < r->n_bucket_ops; i++)
        if (comm_wait(r->bucket_ops[i], rc ? &r->dist_err : err)) rc = -1;
    r->n_bucket_ops = 0;
    size_t started = r->bucket_started;
    r->bucket_started = 0;
    if (!rc && started != n)
        return whet_errf(err, "internal error: the gradient's buckets covered %zu of its %zu values", started, n);
    return rc;
}

int trainer_optimizer_step(struct run *r, double lr, double *norm, struct whet_err *err) {
    const struct trainer_hparams *hp = &r->cfg->hp;
    size_t n;
    float *grads = model_trainable_grads(r->model, &n);
    double t0 = whet_now_mono();
    /* (ZeRO-3's backward passes have reduce-scattered the gradients unit by unit already) */
    if (r->comm && !grads_in_units(r) &&
        (r->cfg->dist.zero ? comm_reduce_scatter(r->comm, grads, n, err) : wait_buckets(r, n, err)))
        return -1;
    r->comm_seconds += whet_now_mono() - t0;
    *norm = model_clip_grad_norm(r->model, (float)hp->max_grad_norm);
    if (isnan(*norm) && r->dist_err.msg[0]) {
        *err = r->dist_err;
        return -1;
    }
    model_adamw_step(r->model, (float)lr, (float)hp->adam_beta1, (float)hp->adam_beta2, (float)hp->adam_eps,
                     (float)hp->weight_decay);
    if (r->comm && r->cfg->dist.zero && !grads_in_units(r)) {
        float *params = model_trainable_params(r->model, &n);
        t0 = whet_now_mono();
        if (comm_allgather(r->comm, params, n, err)) return -1;
        r->comm_seconds += whet_now_mono() - t0;
    }
    return 0;
}

int trainer_gather_optimizer(struct run *r, const char *path, struct whet_err *err) {
    if (!(r->comm && r->cfg->dist.zero)) return path ? model_save_optimizer(r->model, path, err) : 0;
    /* Every rank's moments into whole-buffer arrays, zero outside its spans, summed over the ranks: each
     * value is some rank's and the others' zeros add nothing, so the sum is exact (twice an all-gather's
     * bytes, once a checkpoint, for one path whatever the spans). Rank 0 writes. */
    size_t n;
    model_trainable_params(r->model, &n);
    float *whole = xcalloc(2 * n + 1, sizeof(float));
    model_download_moments(r->model, whole, whole + n);
    int rc = comm_allreduce(r->comm, whole, 2 * n, err);
    if (!rc && path) rc = model_save_optimizer_moments(r->model, path, whole, whole + n, err);
    free(whole);
    return rc;
}

void trainer_dist_figures(const struct run *r, char *json, size_t size) {
    if (!r->comm) {
        json[0] = 0;
        return;
    }
    snprintf(json, size, ",\"comm_bytes\":%llu,\"comm_s\":%.4f", (unsigned long long)comm_bytes_sent(r->comm),
             r->comm_seconds);
}

int trainer_agree_stop(struct run *r, struct step_figures *f, struct whet_err *err) {
    int local = r->io->stop && *r->io->stop;
    if (!r->comm) {
        r->stop_agreed = local;
        return 0;
    }
    /* One sum per step carries both: the tokens of every rank, and whether any rank was asked to stop. */
    double v[2] = {(double)f->tokens, local};
    if (comm_allreduce_f64(r->comm, v, 2, err)) return -1;
    f->tokens = (long long)v[0];
    r->stop_agreed = v[1] > 0;
    return 0;
}
