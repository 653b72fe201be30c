/* schedule.c - one scheduling cycle. The stages follow the Kubernetes scheduling framework, one file
 * each, over the structs of internal.h:
 *
 *   queue sort     queue.c       FIFO, LAS levels, or weighted dominant share (pl_queue_sort)
 *   filter         filter.c      lists of pool and node checks; pl_explain records which check
 *                                rejected which pool (a failed shape is remembered for the cycle)
 *   score          score.c       a list of weighted score plugins, one file each: score_first_fit.c,
 *                                score_best_fit.c, score_fgd.c
 *   pick           pick.c        one node if the job fits one, else the fewest nodes of one pool
 *                                (one data center, one GPU type)
 *   post-filter    preempt.c     wait for victims already stopping, else the cheapest victims
 *                                (least work since checkpoint), elastic shrinks first; the nodes are
 *                                held through the victims' grace
 *   reserve        reserve.c     nodes held for the first blocked job; later jobs run only
 *                                elsewhere (backfill)
 *   elastic        elastic.c     idle GPUs to elastic jobs when nobody waits
 *   co-training    cotrain.c     a co-trainable job that fits nowhere alone joins a group of its base;
 *                                when nobody waits, members of running groups move out to free devices
 *
 * This file holds the policies, the decision list, the failed-shape cache and the cycle itself. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_PREEMPT_TRIES 8 /* preemption searches per cycle: bounds the cost of a blocked queue */

/* ---------------------------------------------------------------------------------------------- */
/* Policies                                                                                       */

int pl_config_for_policy(struct pl_config *cfg, const char *policy) {
    memset(cfg, 0, sizeof *cfg);
    cfg->las_thresholds_gpu_s[0] = 3600;       /* one GPU-hour */
    cfg->las_thresholds_gpu_s[1] = 10 * 3600;  /* ten GPU-hours */
    cfg->reservation_ttl_s = 300;
    cfg->fgd_pack_milli = 50; /* measured on the Alibaba 2023 pod lists: 0 -> 94.6%, 50 -> 95.5% (default) */
    if (!strcmp(policy, "fifo")) {
        cfg->order = PL_ORDER_FIFO;
        cfg->scorer = PL_SCORE_FIRST_FIT;
    } else if (!strcmp(policy, "bestfit")) {
        cfg->order = PL_ORDER_FIFO;
        cfg->scorer = PL_SCORE_BEST_FIT;
    } else if (!strcmp(policy, "las")) {
        cfg->order = PL_ORDER_LAS;
        cfg->scorer = PL_SCORE_FIRST_FIT;
        cfg->preempt_las = 1;
    } else if (!strcmp(policy, "whet")) {
        cfg->order = PL_ORDER_FAIR;
        cfg->scorer = PL_SCORE_FGD;
        cfg->backfill = 1;
        cfg->preempt = 1;
        cfg->preempt_las = 1;
        cfg->elastic = 1;
        cfg->min_run_s = 300; /* a restart costs a restore: let a job run a while before stopping it */
        cfg->cotrain_max = 8;  /* the "eight tenants tuning the same Qwen on one GPU" */
        cfg->cotrain_move_min_left_s = 60; /* a GPU process loads a base of many GB in tens of seconds */
    } else {
        return -1;
    }
    return 0;
}

int32_t pl_las_level(const struct pl_cluster *c, const struct pl_job *j) {
    int32_t level = 0;
    while (level < PL_LAS_LEVELS - 1 && j->attained_gpu_s >= c->cfg.las_thresholds_gpu_s[level]) level++;
    return level;
}

/* ---------------------------------------------------------------------------------------------- */
/* Decisions                                                                                      */

struct pl_decision *pl_decision_add(struct pl_cluster *c, enum pl_action action, struct pl_job *job) {
    c->decisions = pl_grow(c->decisions, &c->cap_decisions, c->n_decisions + 1, sizeof *c->decisions);
    struct pl_decision *d = &c->decisions[c->n_decisions++];
    d->action = action;
    d->job = job;
    d->for_job = NULL;
    d->gpus = job->gpus;
    d->not_before = 0;
    d->alloc.n_slots = 0;
    memset(&d->reason, 0, sizeof d->reason);
    return d;
}

/* ---------------------------------------------------------------------------------------------- */
/* Failed-shape cache                                                                             */

static uint64_t shape_key(const struct pl_job *j) {
    uint64_t h = 1469598103934665603ull;
    uint64_t parts[8] = {(uint64_t)j->gpus,          (uint64_t)pl_job_milli(j), (uint64_t)j->cpu_milli,
                         (uint64_t)j->mem_mib,       (uint64_t)j->min_gpu_mem_mib, j->allowed_types,
                         j->allowed_dcs,             (uint64_t)(uint32_t)j->tenant};
    for (int i = 0; i < 8; i++) {
        h ^= parts[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h | 1;
}

static struct pl_fail *fail_find(struct pl_cluster *c, uint64_t key, int create) {
    for (int probe = 0; probe < 8; probe++) {
        struct pl_fail *f = &c->fails[(key + (uint64_t)probe) % PL_FAIL_CACHE];
        if (f->used == (int32_t)c->stamp && f->key == key) return f;
        if (f->used != (int32_t)c->stamp) {
            if (!create) return NULL;
            f->used = (int32_t)c->stamp;
            f->key = key;
            return f;
        }
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* The cycle                                                                                      */

/* Places the job, or says why it waits (and stops what it may take). Returns PL_PLACE or PL_WAIT. */
static enum pl_action handle_job(struct pl_cluster *c, struct pl_job *j, double now, int32_t *preempt_tries) {
    enum pl_filter *pool_ok = c->pool_ok;
    struct pl_alloc a;
    int pending = pl_has_nomination(c, j, now);
    uint64_t key = shape_key(j);
    struct pl_fail *cached = pending ? NULL : fail_find(c, key, 0);
    struct pl_reason why;
    memset(&why, 0, sizeof why);
    if (cached) {
        why = cached->reason;
    } else if (pl_try_place(c, j, now, &a, &why, pool_ok)) {
        pl_commit_place(c, j, &a, now);
        pl_cotrain_open(c, j);
        struct pl_decision *d = pl_decision_add(c, PL_PLACE, j);
        d->alloc = a;
        c->result.placed++;
        return PL_PLACE;
    } else if (!pending) {
        struct pl_fail *f = fail_find(c, key, 1);
        if (f) f->reason = why;
    }
    /* Fits nowhere alone: a co-training group of its base takes it rather than a wait (cotrain.c). */
    if (pl_cotrain_join(c, j, now, &a)) {
        struct pl_decision *d = pl_decision_add(c, PL_PLACE, j);
        d->alloc = a;
        c->result.placed++;
        return PL_PLACE;
    }
    if (pending) {
        why.preemption_pending = 1;
    } else if ((c->cfg.preempt || c->cfg.preempt_las || c->cfg.elastic) && *preempt_tries < MAX_PREEMPT_TRIES &&
               why.main >= PL_F_GPUS) {
        (*preempt_tries)++;
        if (cached) pl_filter_pools(c, j, pool_ok);
        if (pl_fits_after_stopping(c, j, now, pool_ok) || pl_preempt(c, j, now, pool_ok)) why.preemption_pending = 1;
    }
    if (!why.preemption_pending && c->cfg.backfill && c->mark_job == 0) {
        if (cached) pl_filter_pools(c, j, pool_ok);
        pl_reserve_for_head(c, j, now, pool_ok);
    }
    struct pl_decision *d = pl_decision_add(c, PL_WAIT, j);
    d->reason = why;
    c->result.waiting++;
    return PL_WAIT;
}

const struct pl_result *pl_schedule(struct pl_cluster *c, struct pl_job *const *queue, int32_t n_queue, double now) {
    c->stamp++;
    c->mark_job = 0;
    c->rotate++;
    c->n_decisions = 0;
    memset(&c->result, 0, sizeof c->result);
    /* Nominations whose preemptor never came back expire. */
    int expired = 0;
    for (int32_t k = 0; k < c->n_noms;)
        if (c->noms[k].until <= now) {
            c->noms[k] = c->noms[--c->n_noms];
            expired = 1;
        } else {
            k++;
        }
    if (expired)
        for (int32_t ni = 0; ni < c->n_nodes; ni++)
            if (c->nominee[ni] && c->nominee_until[ni] <= now) c->nominee[ni] = 0;

    c->order = pl_grow(c->order, &c->cap_order, n_queue, sizeof *c->order);
    int32_t n = 0;
    for (int32_t i = 0; i < n_queue; i++)
        if (queue[i]->state == PL_JOB_QUEUED) {
            c->order[n].job = queue[i];
            c->order[n].level = pl_las_level(c, queue[i]);
            n++;
        }
    int32_t preempt_tries = 0, placed_cap = c->cfg.max_decisions;
    pl_update_fair_share(c, n);

    int32_t groups = pl_queue_sort(c, n);
    if (c->cfg.order == PL_ORDER_FAIR) {
        int32_t g;
        pl_fair_begin(c, groups);
        while ((g = pl_next_fair(c)) >= 0) {
            if (placed_cap && c->result.placed >= placed_cap) break;
            struct pl_job *j = c->order[c->tenant_head[g]++].job;
            pl_fair_taken(c, g, j, handle_job(c, j, now, &preempt_tries) == PL_WAIT);
        }
    } else {
        for (int32_t i = 0; i < n; i++) {
            if (placed_cap && c->result.placed >= placed_cap) break;
            handle_job(c, c->order[i].job, now, &preempt_tries);
        }
    }
    pl_cotrain_end_cycle(c);
    if (c->cfg.elastic && c->n_elastic && c->result.waiting == 0) pl_grow_elastic(c, now);
    if (c->n_groups && c->result.waiting == 0) pl_cotrain_move_out(c, now);
    c->result.n = c->n_decisions;
    c->result.decisions = c->decisions;
    return &c->result;
}
