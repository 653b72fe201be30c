/* schedule.c - one scheduling cycle: queue sort, filter, score, pick, preemption, reservation and
 * backfill, elastic growth. The stages are small functions over the structs of internal.h, in the
 * order of the Kubernetes scheduling framework:
 *
 *   queue sort     cmp_fifo, cmp_las / next_fair   FIFO, LAS levels, or weighted dominant share
 *   filter         pool_filter, node_filter        static pool checks, then per node; explain()
 *                                                  records which filter rejected which pool
 *                                                  (a failed shape is remembered for the cycle)
 *   score          node_score                      first-fit, best-fit or FGD (pluggable)
 *   pick           place_one_node / place_gang     one node if the gang fits, else fewest nodes of
 *                                                  one pool (one data center, one GPU type)
 *   post-filter    fits_after_stopping, preempt    wait for victims already stopping, else the
 *                                                  cheapest victims (least work since checkpoint),
 *                                                  elastic shrinks first; nodes held through grace
 *   reserve        reserve_for_head                nodes held for the first blocked job; later jobs
 *                                                  run only elsewhere (backfill)
 *   elastic        grow_elastic                    idle GPUs to elastic jobs when nobody waits */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_PREEMPT_TRIES 8 /* preemption searches per cycle: bounds the cost of a blocked queue */

/* ---------------------------------------------------------------------------------------------- */
/* Policies                                                                                        */

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
    } else {
        return -1;
    }
    return 0;
}

static int32_t las_level(const struct pl_cluster *c, const struct pl_job *j) {
    int32_t level = 0;
    while (level < PL_LAS_LEVELS - 1 && j->attained_gpu_s >= c->cfg.las_thresholds_gpu_s[level]) level++;
    return level;
}

/* ---------------------------------------------------------------------------------------------- */
/* Decisions                                                                                       */

static struct pl_decision *decision_add(struct pl_cluster *c, enum pl_action action, struct pl_job *job) {
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
/* Filters                                                                                         */

/* How far a filter got: a reason names the pool that came closest to fitting. */
static int filter_rank(enum pl_filter f) { return f == PL_F_UNSCHEDULABLE ? 1 : (int)f; }

static void reason_note(struct pl_reason *r, const struct pl_pool *p, enum pl_filter f) {
    if (r->n_pools < PL_MAX_REASON_POOLS) {
        r->pools[r->n_pools].dc = p->dc;
        r->pools[r->n_pools].gpu_type = p->gpu_type;
        r->pools[r->n_pools].filter = f;
    }
    r->n_pools++;
    if (r->main == PL_OK || filter_rank(f) > filter_rank(r->main)) r->main = f;
}

static int64_t job_gpu_milli(const struct pl_job *j) { return (int64_t)(j->gpus > 0 ? j->gpus : 0) * pl_job_milli(j); }

/* Checks that do not depend on which node: data center, type, size, quota. */
static enum pl_filter pool_filter(const struct pl_cluster *c, const struct pl_pool *p, const struct pl_job *j) {
    if (j->allowed_dcs && !(j->allowed_dcs & (1ull << p->dc))) return PL_F_DC;
    if (j->gpus > 0) {
        if (p->gpu_type < 0) return PL_F_TYPE;
        if (j->allowed_types && !(j->allowed_types & (1ull << p->gpu_type))) return PL_F_TYPE;
        if (j->min_gpu_mem_mib > p->max_gpu_mem_mib) return PL_F_GPU_MEM;
        if (j->gpus > p->total_gpus || (pl_job_milli(j) < PL_MILLI && p->max_node_gpus < 1)) return PL_F_NODE_SIZE;
        if (j->tenant >= 0 && j->tenant < c->n_tenants) {
            const struct pl_tenant *t = &c->tenants[j->tenant];
            const struct pl_usage *u = &c->usage[j->tenant];
            int64_t need = job_gpu_milli(j);
            if (!t->may_borrow && u->gpu_milli[p->gpu_type] + need > (int64_t)t->quota_gpus[p->gpu_type] * PL_MILLI)
                return PL_F_QUOTA;
            if (t->limit_gpus > 0 && u->gpu_milli_total + need > (int64_t)t->limit_gpus * PL_MILLI) return PL_F_LIMIT;
        }
    }
    if (p->n_schedulable == 0) return PL_F_UNSCHEDULABLE;
    return PL_OK;
}

/* The pool summaries rule out a pool without visiting its nodes when no node has room. */
static int pool_may_fit(const struct pl_pool *p, int32_t gpus, int32_t milli, int one_node) {
    if (gpus <= 0) return 1;
    if (milli >= PL_MILLI) {
        if (p->free_whole < gpus) return 0;
        if (!one_node) return 1;
        for (int k = gpus; k <= PL_MAX_GPUS_PER_NODE; k++)
            if (p->whole_hist[k]) return 1;
        return 0;
    }
    for (int b = milli / PL_SHARE_BUCKET; b < PL_SHARE_BUCKETS; b++)
        if (p->share_hist[b]) return 1;
    return 0;
}

static int node_held_for_other(const struct pl_cluster *c, int32_t ni, const struct pl_job *j, double now) {
    if (c->nominee[ni] && c->nominee[ni] != j->id && c->nominee_until[ni] > now) return 1;
    if (c->mark[ni] == c->stamp && c->mark_job != j->id) return 1;
    return 0;
}

/* Whether `k` GPUs of share `milli` with cpu and mem fit on node ni now; PL_OK or the filter. */
static enum pl_filter node_filter(const struct pl_cluster *c, int32_t ni, const struct pl_job *j, int32_t k,
                                  int32_t milli, int64_t cpu, int64_t mem, double now) {
    const struct pl_node *n = &c->nodes[ni];
    if (!n->schedulable) return PL_F_UNSCHEDULABLE;
    if (k > 0 && n->gpu_mem_mib < j->min_gpu_mem_mib) return PL_F_GPU_MEM;
    if (k > n->gpus) return PL_F_NODE_SIZE;
    int32_t ok = 0;
    for (int g = 0; g < n->gpus && ok < k; g++) ok += n->gpu_free_milli[g] >= milli;
    if (ok < k) return PL_F_GPUS;
    if (n->cpu_free_milli < cpu) return PL_F_CPU;
    if (n->mem_free_mib < mem) return PL_F_MEM;
    if (node_held_for_other(c, ni, j, now)) return PL_F_RESERVED;
    return PL_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Scores (higher is better)                                                                       */

/* The ATC'23 artifact's BestFit: 1 - mean of (CPU left, GPU left) over the largest node's. */
static double best_fit_score(const struct pl_cluster *c, int64_t cpu_left, int64_t gpu_left) {
    double s = 0;
    if (c->max_node_cpu) s += 0.5 * (double)cpu_left / (double)c->max_node_cpu;
    if (c->max_node_gpu_milli) s += 0.5 * (double)gpu_left / (double)c->max_node_gpu_milli;
    return 1.0 - s;
}

/* Scores node ni for k GPUs of share milli and chooses the GPUs (*mask). */
static double node_score(const struct pl_cluster *c, int32_t ni, int32_t k, int32_t milli, int64_t cpu, int64_t mem,
                         uint32_t *mask) {
    const struct pl_node *n = &c->nodes[ni];
    int64_t gpu_free = 0;
    for (int g = 0; g < n->gpus; g++) gpu_free += n->gpu_free_milli[g];
    *mask = 0;
    if (k > 0 && milli >= PL_MILLI) {
        int32_t taken = 0;
        for (int g = 0; g < n->gpus && taken < k; g++)
            if (n->gpu_free_milli[g] == PL_MILLI) {
                *mask |= 1u << g;
                taken++;
            }
    } else if (k > 0) {
        /* A share of one GPU: which GPU matters as much as which node. */
        double best = -INFINITY;
        for (int g = 0; g < n->gpus; g++) {
            if (n->gpu_free_milli[g] < milli) continue;
            double s;
            if (c->cfg.scorer == PL_SCORE_FIRST_FIT) s = -g;
            else if (c->cfg.scorer == PL_SCORE_BEST_FIT) s = -n->gpu_free_milli[g];
            else {
                int32_t after[PL_MAX_GPUS_PER_NODE];
                memcpy(after, n->gpu_free_milli, sizeof after);
                after[g] -= milli;
                s = -pl_frag(c, n, after, n->cpu_free_milli - cpu, n->mem_free_mib - mem) * 1e3 -
                    n->gpu_free_milli[g];
            }
            if (s > best) {
                best = s;
                *mask = 1u << g;
            }
        }
    }
    int64_t gpu_used = (int64_t)k * milli;
    switch (c->cfg.scorer) {
    case PL_SCORE_FIRST_FIT:
        return -(double)ni;
    case PL_SCORE_BEST_FIT:
        return best_fit_score(c, n->cpu_free_milli - cpu, gpu_free - gpu_used);
    case PL_SCORE_FGD: {
        int32_t after[PL_MAX_GPUS_PER_NODE];
        memcpy(after, n->gpu_free_milli, sizeof after);
        for (int g = 0; g < n->gpus; g++)
            if (*mask & (1u << g)) after[g] -= milli;
        double grow = pl_frag(c, n, after, n->cpu_free_milli - cpu, n->mem_free_mib - mem) - c->frag[ni];
        /* Fragmentation growth is in milli-GPU; best-fit in [0, 1] weighs like fgd_pack_milli
         * milli-GPU of it: near-ties go to the fuller node, so whole nodes stay free for gangs. */
        return -grow + c->cfg.fgd_pack_milli * best_fit_score(c, n->cpu_free_milli - cpu, gpu_free - gpu_used);
    }
    }
    return 0;
}

/* Same pool and same free resources: the same score and the same GPU choice. */
static int same_state(const struct pl_cluster *c, int32_t a, int32_t b) {
    const struct pl_node *x = &c->nodes[a], *y = &c->nodes[b];
    return c->node_pool[a] == c->node_pool[b] && x->gpus == y->gpus && x->gpu_mem_mib == y->gpu_mem_mib &&
           x->cpu_free_milli == y->cpu_free_milli && x->mem_free_mib == y->mem_free_mib &&
           !memcmp(x->gpu_free_milli, y->gpu_free_milli, sizeof x->gpu_free_milli);
}

static double node_score_memo(struct pl_cluster *c, int32_t ni, int32_t k, int32_t milli, int64_t cpu, int64_t mem,
                              uint32_t *mask) {
    const struct pl_node *n = &c->nodes[ni];
    uint64_t h = (uint64_t)c->node_pool[ni] * 0x9e3779b97f4a7c15ull ^ (uint64_t)n->cpu_free_milli * 0xff51afd7ed558ccdull ^
                 (uint64_t)n->mem_free_mib;
    for (int g = 0; g < n->gpus; g++) h = (h ^ (uint64_t)n->gpu_free_milli[g]) * 0x100000001b3ull;
    h ^= h >> 32;
    for (uint32_t probe = 0;; probe++) {
        uint32_t slot = (uint32_t)(h + probe) & c->memo_mask_bits;
        if (c->memo_stamp[slot] != c->memo_gen) {
            double s = node_score(c, ni, k, milli, cpu, mem, mask);
            c->memo_stamp[slot] = c->memo_gen;
            c->memo_node[slot] = ni;
            c->memo_score[slot] = s;
            c->memo_gpus[slot] = *mask;
            return s;
        }
        if (same_state(c, c->memo_node[slot], ni)) {
            *mask = c->memo_gpus[slot];
            return c->memo_score[slot];
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Pick                                                                                            */

static int32_t nodes_to_score(const struct pl_cluster *c) {
    int32_t n = c->n_nodes, want = c->cfg.nodes_to_score;
    if (want > 0) return want;
    if (want == 0 || n <= 100) return n;
    int32_t pct = 50 - n / 125;
    if (pct < 5) pct = 5;
    int32_t k = (int32_t)((int64_t)n * pct / 100);
    return k < 100 ? 100 : k;
}

/* The whole job on one node. Returns 1 and fills out, or 0 and notes each pool's filter. */
static int place_one_node(struct pl_cluster *c, const struct pl_job *j, double now, struct pl_alloc *out,
                          const enum pl_filter *pool_ok) {
    int32_t k = j->gpus > 0 ? j->gpus : 0, milli = pl_job_milli(j);
    int64_t cpu = j->cpu_milli, mem = j->mem_mib;
    int32_t budget = nodes_to_score(c), seen = 0;
    int32_t best_node = -1;
    uint32_t best_mask = 0;
    double best_score = -INFINITY;
    c->memo_gen++;
    for (int32_t pi = 0; pi < c->n_pools && seen < budget; pi++) {
        if (pool_ok[pi] != PL_OK) continue;
        const struct pl_pool *p = &c->pools[pi];
        if (k > p->max_node_gpus || !pool_may_fit(p, k, milli, 1)) continue;
        int32_t start = budget < c->n_nodes ? (int32_t)(c->rotate % (uint32_t)p->n_nodes) : 0;
        if (c->cfg.scorer == PL_SCORE_FIRST_FIT) {
            /* First fit scans from the lowest node; skip the prefix known to be full. */
            struct pl_pool *wp = &c->pools[pi];
            while (k > 0 && wp->first_free < wp->n_nodes) {
                const struct pl_node *n = &c->nodes[wp->nodes[wp->first_free]];
                int full = n->schedulable;
                for (int g = 0; g < n->gpus && full; g++) full = n->gpu_free_milli[g] == 0;
                if (!full) break;
                wp->first_free++;
            }
            start = k > 0 ? (wp->first_free < wp->n_nodes ? wp->first_free : 0) : 0;
        }
        for (int32_t q = 0; q < p->n_nodes && seen < budget; q++) {
            int32_t ni = p->nodes[(start + q) % p->n_nodes];
            if (node_filter(c, ni, j, k, milli, cpu, mem, now) != PL_OK) continue;
            seen++;
            uint32_t mask;
            double s = c->cfg.scorer == PL_SCORE_FIRST_FIT ? node_score(c, ni, k, milli, cpu, mem, &mask)
                                                           : node_score_memo(c, ni, k, milli, cpu, mem, &mask);
            if (s > best_score || (s == best_score && ni < best_node)) {
                best_score = s;
                best_node = ni;
                best_mask = mask;
            }
            if (c->cfg.scorer == PL_SCORE_FIRST_FIT) break;
        }
    }
    if (best_node < 0) return 0;
    out->n_slots = 1;
    out->slots[0].node = best_node;
    out->slots[0].gpu_mask = (uint16_t)best_mask;
    out->slots[0].gpu_count = (uint16_t)k;
    return 1;
}

/* How many whole GPUs of the job node ni could hold now (GPU, CPU and memory limits together). */
static int32_t node_gang_room(const struct pl_cluster *c, int32_t ni, const struct pl_job *j, double now) {
    const struct pl_node *n = &c->nodes[ni];
    if (!n->schedulable || n->gpu_mem_mib < j->min_gpu_mem_mib || node_held_for_other(c, ni, j, now)) return 0;
    int32_t k = 0;
    for (int g = 0; g < n->gpus; g++) k += n->gpu_free_milli[g] == PL_MILLI;
    while (k > 0 && (n->cpu_free_milli < pl_share_cpu(j, k) || n->mem_free_mib < pl_share_mem(j, k))) k--;
    return k;
}

/* Chooses the fewest nodes of one pool that hold `gpus` given each node's room (room[] indexed like
 * p->nodes). Returns the node count (0: does not fit) and writes the chosen (position, count)
 * pairs; the largest rooms first, and the last node the tightest one that still holds the rest. */
static int32_t gang_pick(const struct pl_pool *p, const int32_t *room, int32_t gpus, int32_t *pos, int32_t *take) {
    int32_t by_room[PL_MAX_GPUS_PER_NODE + 1] = {0};
    int64_t total = 0;
    for (int32_t q = 0; q < p->n_nodes; q++) {
        by_room[room[q]]++;
        total += room[q];
    }
    if (total < gpus) return 0;
    /* Greedy by room: after taking the largest rooms, finish with the smallest room >= the rest. */
    int32_t need = gpus, n = 0;
    int32_t used_from[PL_MAX_GPUS_PER_NODE + 1] = {0};
    for (int32_t r = PL_MAX_GPUS_PER_NODE; r >= 1 && need > 0; r--) {
        while (by_room[r] - used_from[r] > 0 && need > 0) {
            if (need <= r) {
                /* Finish on the tightest room that holds the rest. */
                int32_t fit = need;
                while (fit < r && by_room[fit] - used_from[fit] == 0) fit++;
                used_from[fit]++;
                take[n] = need;
                pos[n++] = -fit; /* resolved to a position below */
                need = 0;
                break;
            }
            used_from[r]++;
            take[n] = r;
            pos[n++] = -r;
            need -= r;
            if (n > PL_MAX_NODES_PER_JOB) return 0;
        }
    }
    if (need > 0 || n > PL_MAX_NODES_PER_JOB) return 0;
    /* Resolve rooms to node positions: lowest positions first for determinism. */
    int32_t next_from[PL_MAX_GPUS_PER_NODE + 1] = {0};
    for (int32_t i = 0; i < n; i++) {
        int32_t r = -pos[i];
        int32_t skip = next_from[r]++, q = 0;
        for (; q < p->n_nodes; q++)
            if (room[q] == r && skip-- == 0) break;
        pos[i] = q;
    }
    return n;
}

/* A gang too big for any one node: the fewest nodes of one pool (never across data centers). */
static int place_gang(struct pl_cluster *c, const struct pl_job *j, double now, struct pl_alloc *out,
                      const enum pl_filter *pool_ok) {
    int32_t best_pool = -1, best_n = 0;
    int32_t pos[PL_MAX_NODES_PER_JOB + 1], take[PL_MAX_NODES_PER_JOB + 1];
    for (int32_t pi = 0; pi < c->n_pools; pi++) {
        if (pool_ok[pi] != PL_OK) continue;
        const struct pl_pool *p = &c->pools[pi];
        if (!pool_may_fit(p, j->gpus, PL_MILLI, 0)) continue;
        int32_t *room = c->scratch;
        for (int32_t q = 0; q < p->n_nodes; q++) room[q] = node_gang_room(c, p->nodes[q], j, now);
        int32_t n = gang_pick(p, room, j->gpus, pos, take);
        if (n == 0) continue;
        if (best_pool < 0 || n < best_n) {
            best_pool = pi;
            best_n = n;
        }
    }
    if (best_pool < 0) return 0;
    const struct pl_pool *p = &c->pools[best_pool];
    int32_t *room = c->scratch;
    for (int32_t q = 0; q < p->n_nodes; q++) room[q] = node_gang_room(c, p->nodes[q], j, now);
    int32_t n = gang_pick(p, room, j->gpus, pos, take);
    out->n_slots = n;
    for (int32_t i = 0; i < n; i++) {
        int32_t ni = p->nodes[pos[i]];
        const struct pl_node *nd = &c->nodes[ni];
        uint32_t mask = 0;
        int32_t got = 0;
        for (int g = 0; g < nd->gpus && got < take[i]; g++)
            if (nd->gpu_free_milli[g] == PL_MILLI) {
                mask |= 1u << g;
                got++;
            }
        out->slots[i].node = ni;
        out->slots[i].gpu_mask = (uint16_t)mask;
        out->slots[i].gpu_count = (uint16_t)take[i];
    }
    return 1;
}

/* Why j fits nowhere: for each pool, its static filter, or the filter that stopped the node that
 * came closest (one-node jobs), or a lack of room across the pool (gangs). */
static void explain(const struct pl_cluster *c, const struct pl_job *j, double now, struct pl_reason *why,
                    const enum pl_filter *pool_ok) {
    int32_t k = j->gpus > 0 ? j->gpus : 0, milli = pl_job_milli(j);
    for (int32_t pi = 0; pi < c->n_pools; pi++) {
        const struct pl_pool *p = &c->pools[pi];
        if (pool_ok[pi] != PL_OK) {
            reason_note(why, p, pool_ok[pi]);
            continue;
        }
        if (k > p->max_node_gpus || !pool_may_fit(p, k, milli, 1)) {
            reason_note(why, p, k > p->max_node_gpus && milli < PL_MILLI ? PL_F_NODE_SIZE : PL_F_GPUS);
            continue;
        }
        enum pl_filter best = PL_F_GPUS;
        for (int32_t q = 0; q < p->n_nodes; q++) {
            enum pl_filter f = node_filter(c, p->nodes[q], j, k, milli, j->cpu_milli, j->mem_mib, now);
            if (f != PL_OK && filter_rank(f) > filter_rank(best)) best = f;
        }
        reason_note(why, p, best);
    }
}

/* Filter, score, pick for one job. */
static int try_place(struct pl_cluster *c, const struct pl_job *j, double now, struct pl_alloc *out,
                     struct pl_reason *why, enum pl_filter *pool_ok) {
    int any = 0;
    for (int32_t pi = 0; pi < c->n_pools; pi++) {
        pool_ok[pi] = pool_filter(c, &c->pools[pi], j);
        if (pool_ok[pi] == PL_OK) any = 1;
    }
    if (any && place_one_node(c, j, now, out, pool_ok)) return 1;
    if (any && j->gpus > 1 && j->max_nodes != 1 && pl_job_milli(j) == PL_MILLI && place_gang(c, j, now, out, pool_ok))
        return 1;
    explain(c, j, now, why, pool_ok);
    return 0;
}

static void commit_place(struct pl_cluster *c, struct pl_job *j, const struct pl_alloc *a, double now) {
    j->alloc = *a;
    int32_t type = c->nodes[a->slots[0].node].gpu_type;
    if (j->gpus > 0 && type >= 0 && j->tenant >= 0 && j->tenant < c->n_tenants) {
        const struct pl_usage *u = &c->usage[j->tenant];
        j->borrowed = u->gpu_milli[type] + job_gpu_milli(j) > (int64_t)c->tenants[j->tenant].quota_gpus[type] * PL_MILLI;
    } else {
        j->borrowed = 0;
    }
    pl_alloc_take(c, j, +1);
    j->state = PL_JOB_RUNNING;
    j->start_time = now;
    pl_running_add(c, j);
    /* A nomination served its purpose: free the nodes it held. */
    for (int32_t k = 0; k < c->n_noms; k++)
        if (c->noms[k].job == j->id) {
            c->noms[k] = c->noms[--c->n_noms];
            for (int32_t ni = 0; ni < c->n_nodes; ni++)
                if (c->nominee[ni] == j->id) c->nominee[ni] = 0;
            break;
        }
}

/* ---------------------------------------------------------------------------------------------- */
/* Preemption                                                                                      */

static int has_nomination(const struct pl_cluster *c, const struct pl_job *j, double now) {
    for (int32_t k = 0; k < c->n_noms; k++)
        if (c->noms[k].job == j->id) return c->noms[k].until > now;
    return 0;
}

/* Holds node ni for job j until `until` (its victims' grace plus the reservation's lifetime). */
static void nominate(struct pl_cluster *c, int32_t ni, const struct pl_job *j, double until) {
    c->nominee[ni] = j->id;
    c->nominee_until[ni] = until;
    for (int32_t k = 0; k < c->n_noms; k++)
        if (c->noms[k].job == j->id) {
            if (until > c->noms[k].until) c->noms[k].until = until;
            return;
        }
    c->noms = pl_grow(c->noms, &c->cap_noms, c->n_noms + 1, sizeof *c->noms);
    c->noms[c->n_noms].job = j->id;
    c->noms[c->n_noms].until = until;
    c->n_noms++;
}

/* What victim_ok asks of the preemptor, computed once per search. */
struct preemptor {
    const struct pl_job *job;
    int32_t level;
    double share_after;                           /* its tenant's weighted share once placed */
    int known;                                    /* its tenant is in the snapshot */
};

/* Whether v may be stopped (or shrunk) to make room for p->job on a pool of gpu_type. Cheap tests
 * first: this runs for every running job of every candidate pool. */
static int victim_ok(const struct pl_cluster *c, const struct pl_job *v, const struct preemptor *p, int32_t gpu_type,
                     double now, int *shrink) {
    const struct pl_job *j = p->job;
    *shrink = 0;
    /* A job placed in this very cycle is not a victim: the cycle would contradict itself. */
    if (v == j || v->state != PL_JOB_RUNNING || v->priority > j->priority || v->start_time >= now) return 0;
    if (c->cfg.elastic && v->max_gpus > 0 && v->gpus > v->min_gpus && pl_job_milli(v) == PL_MILLI) {
        *shrink = 1;
        return 1;
    }
    if (!v->preemptible || now - v->start_time < c->cfg.min_run_s) return 0;
    if (c->cfg.preempt && v->priority < j->priority) return 1;
    int las_ok = c->cfg.preempt_las && las_level(c, v) > p->level;
    if (v->tenant == j->tenant || !p->known || v->tenant < 0 || v->tenant >= c->n_tenants)
        return las_ok; /* no fairness question inside one tenant */
    if (!c->cfg.preempt) return las_ok;
    if (v->borrowed && gpu_type >= 0) {
        /* Reclaim: j is within its tenant's guarantee, v runs on borrowed capacity. */
        const struct pl_tenant *t = &c->tenants[j->tenant];
        if (c->usage[j->tenant].gpu_milli[gpu_type] + job_gpu_milli(j) <= (int64_t)t->quota_gpus[gpu_type] * PL_MILLI)
            return 1;
    }
    if (!v->borrowed && !las_ok) return 0;
    double v_after = pl_tenant_share_with(c, v->tenant, -job_gpu_milli(v), -v->cpu_milli, -v->mem_mib);
    /* Fair share: j's tenant stays within its entitlement and v's stays at or above it, so the
     * reverse swap can never qualify (no ping-pong). */
    if (v->borrowed && p->share_after <= c->fair_share && v_after >= c->fair_share) return 1;
    /* Least attained service (Tiresias) across tenants: when v's tenant keeps its entitlement or
     * stays above j's. */
    return las_ok && (v_after >= p->share_after || v_after >= c->fair_share);
}

static double victim_cost(const struct pl_job *v, double now) {
    double since = now - v->last_checkpoint_time;
    if (since < 0) since = 0;
    return since * (v->gpus > 0 ? v->gpus : 1);
}

static int victim_cmp(const void *a, const void *b) {
    const struct pl_victim *x = a, *y = b;
    if (x->shrink != y->shrink) return y->shrink - x->shrink; /* shrinking loses no work: first */
    if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
    return x->job->id < y->job->id ? -1 : x->job->id > y->job->id;
}

/* Hypothetical free state of a node for the preemption search: what is free now plus what jobs
 * already stopping there will give back. */
static void hyp_touch(struct pl_cluster *c, int32_t ni) {
    if (c->hyp_stamp[ni] == c->hyp_gen) return;
    c->hyp_stamp[ni] = c->hyp_gen;
    memcpy(c->hyp_free[ni], c->nodes[ni].gpu_free_milli, sizeof c->hyp_free[ni]);
    c->hyp_cpu[ni] = c->nodes[ni].cpu_free_milli;
    c->hyp_mem[ni] = c->nodes[ni].mem_free_mib;
    if (!c->n_stopping) return;
    for (int32_t e = 0; e < c->node_jobs[ni].n; e++) {
        const struct pl_job *v = c->node_jobs[ni].jobs[e];
        if (v->state != PL_JOB_STOPPING) continue;
        for (int32_t s = 0; s < v->alloc.n_slots; s++) {
            const struct pl_slot *sl = &v->alloc.slots[s];
            if (sl->node != ni) continue;
            for (int g = 0; g < PL_MAX_GPUS_PER_NODE; g++)
                if (sl->gpu_mask & (1u << g)) c->hyp_free[ni][g] += pl_job_milli(v);
            c->hyp_cpu[ni] += pl_slot_cpu(v, s);
            c->hyp_mem[ni] += pl_slot_mem(v, s);
        }
    }
}

/* Releases victim v in the hypothetical state: all of it (shrink_gpus 0), or shrink_gpus of its
 * GPUs on node `only` (an elastic shrink). Returns the mask of the GPUs freed on `only`. */
static uint32_t hyp_release(struct pl_cluster *c, const struct pl_job *v, int32_t shrink_gpus, int32_t only) {
    int32_t milli = pl_job_milli(v);
    uint32_t freed_mask = 0;
    for (int32_t s = 0; s < v->alloc.n_slots; s++) {
        const struct pl_slot *sl = &v->alloc.slots[s];
        if (shrink_gpus && sl->node != only) continue;
        hyp_touch(c, sl->node);
        int32_t freed = 0;
        for (int g = PL_MAX_GPUS_PER_NODE - 1; g >= 0; g--)
            if ((sl->gpu_mask & (1u << g)) && (!shrink_gpus || freed < shrink_gpus)) {
                c->hyp_free[sl->node][g] += milli;
                if (sl->node == only) freed_mask |= 1u << g;
                freed++;
            }
        if (!shrink_gpus) {
            c->hyp_cpu[sl->node] += pl_slot_cpu(v, s);
            c->hyp_mem[sl->node] += pl_slot_mem(v, s);
        } else if (freed > 0) {
            c->hyp_cpu[sl->node] += pl_share_cpu(v, freed);
            c->hyp_mem[sl->node] += pl_share_mem(v, freed);
        }
    }
    return freed_mask;
}

/* GPUs an elastic victim gives up on node ni: what j still lacks there, at most its spare GPUs. */
static int32_t shrink_amount(const struct pl_cluster *c, const struct pl_job *v, const struct pl_job *j, int32_t ni,
                             int32_t milli) {
    int32_t have = 0, want = j->gpus > 0 ? j->gpus : 0;
    for (int g = 0; g < c->nodes[ni].gpus; g++) have += c->hyp_free[ni][g] >= milli;
    int32_t on_node = 0;
    for (int32_t s = 0; s < v->alloc.n_slots; s++)
        if (v->alloc.slots[s].node == ni) on_node = v->alloc.slots[s].gpu_count;
    int32_t k = want - have;
    if (k < 1) k = 1;
    if (k > v->gpus - v->min_gpus) k = v->gpus - v->min_gpus;
    if (k > on_node) k = on_node;
    return k;
}

static int32_t hyp_room(const struct pl_cluster *c, int32_t ni, const struct pl_job *j, int32_t milli) {
    int32_t k = 0;
    for (int g = 0; g < c->nodes[ni].gpus; g++) k += c->hyp_free[ni][g] >= milli;
    int32_t want = j->gpus > 0 ? j->gpus : 0;
    if (k > want) k = want;
    while (k > 0 && (c->hyp_cpu[ni] < pl_share_cpu(j, k) || c->hyp_mem[ni] < pl_share_mem(j, k))) k--;
    if (want == 0 && (c->hyp_cpu[ni] < j->cpu_milli || c->hyp_mem[ni] < j->mem_mib)) return -1;
    return k;
}

/* The first node of a pool's sample: a large pool is searched from a rotating start, at most
 * nodes_to_score of its nodes (like kube-scheduler), so every cycle looks at another part of it. */
static int32_t sample_start(const struct pl_cluster *c, const struct pl_pool *p, int32_t budget) {
    return budget < p->n_nodes ? (int32_t)(c->rotate % (uint32_t)p->n_nodes) : 0;
}

/* The one victim collector: the running jobs that may make room for pre->job, cheapest first, into
 * c->victims; returns how many. On one node (ni >= 0) elastic jobs may offer a shrink; over a pool
 * (ni < 0, a multi-node gang) the jobs on a sample of its nodes, each once, are stopped whole. */
static int32_t collect_victims(struct pl_cluster *c, const struct preemptor *pre, int32_t pi, int32_t ni, double now) {
    const struct pl_pool *p = &c->pools[pi];
    int32_t n_scan = 1, start = 0, nv = 0;
    if (ni < 0) {
        int32_t budget = nodes_to_score(c);
        start = sample_start(c, p, budget);
        n_scan = p->n_nodes < budget ? p->n_nodes : budget;
        c->run_mark = pl_grow(c->run_mark, &c->cap_run_mark, c->n_running, sizeof *c->run_mark);
        if (++c->run_gen == 0) {
            memset(c->run_mark, 0, (size_t)c->cap_run_mark * sizeof *c->run_mark);
            c->run_gen = 1;
        }
    }
    for (int32_t q = 0; q < n_scan; q++) {
        int32_t node = ni >= 0 ? ni : p->nodes[(start + q) % p->n_nodes];
        for (int32_t e = 0; e < c->node_jobs[node].n; e++) {
            struct pl_job *v = c->node_jobs[node].jobs[e];
            int shrink;
            if (ni < 0) {
                if (c->run_mark[v->run_index] == c->run_gen) continue;
                c->run_mark[v->run_index] = c->run_gen;
            }
            if (!victim_ok(c, v, pre, p->gpu_type, now, &shrink) || (shrink && ni < 0)) continue;
            c->victims[nv].job = v;
            c->victims[nv].shrink = shrink;
            c->victims[nv].cost = shrink ? 0 : victim_cost(v, now);
            nv++;
        }
    }
    if (nv) qsort(c->victims, (size_t)nv, sizeof *c->victims, victim_cmp);
    return nv;
}

static int32_t gang_hyp_room(const struct pl_cluster *c, int32_t ni, const struct pl_job *j, int32_t milli, double now) {
    if (!c->nodes[ni].schedulable || node_held_for_other(c, ni, j, now)) return 0;
    int32_t k = hyp_room(c, ni, j, milli);
    return k > 0 ? k : 0;
}

/* Whether j would fit once the jobs already stopping have stopped: then it waits for them rather
 * than stopping more (what keeps a caller that rebuilds the cluster every cycle, and so loses the
 * nominations, from preempting again and again). */
static int fits_after_stopping(struct pl_cluster *c, const struct pl_job *j, double now, const enum pl_filter *pool_ok) {
    if (!c->n_stopping) return 0;
    int32_t milli = pl_job_milli(j), want = j->gpus > 0 ? j->gpus : 0;
    c->hyp_gen++;
    int32_t pos[PL_MAX_NODES_PER_JOB + 1], take[PL_MAX_NODES_PER_JOB + 1];
    for (int32_t pi = 0; pi < c->n_pools; pi++) {
        if (pool_ok[pi] != PL_OK) continue;
        const struct pl_pool *p = &c->pools[pi];
        int32_t *room = c->scratch;
        for (int32_t q = 0; q < p->n_nodes; q++) {
            int32_t ni = p->nodes[q];
            hyp_touch(c, ni);
            room[q] = gang_hyp_room(c, ni, j, milli, now);
            if (want <= p->max_node_gpus && room[q] >= want && hyp_room(c, ni, j, milli) >= 0) return 1;
        }
        if (want > p->max_node_gpus && milli == PL_MILLI && gang_pick(p, room, want, pos, take)) return 1;
    }
    return 0;
}

/* The cheapest way found so far to make room: the first `nv` victims of a scope's list. */
struct preempt_pick {
    double cost;                                  /* GPU-seconds of work lost */
    int32_t nv;
    int32_t pool;                                 /* -1: none yet */
    int32_t node;                                 /* one node, or -1: a gang over the pool */
};

static void offer(struct preempt_pick *best, double cost, int32_t nv, int32_t pool, int32_t node) {
    if (cost < best->cost || (cost == best->cost && nv < best->nv))
        *best = (struct preempt_pick){cost, nv, pool, node};
}

/* One node of pool pi: for each node of a sample, its own victims cheapest first until j fits. */
static void search_one_node(struct pl_cluster *c, const struct preemptor *pre, int32_t pi, double now,
                            struct preempt_pick *best) {
    const struct pl_job *j = pre->job;
    const struct pl_pool *p = &c->pools[pi];
    int32_t milli = pl_job_milli(j), want = j->gpus > 0 ? j->gpus : 0;
    int32_t budget = nodes_to_score(c), start = sample_start(c, p, budget);
    for (int32_t q = 0; q < p->n_nodes && q < budget; q++) {
        int32_t ni = p->nodes[(start + q) % p->n_nodes];
        const struct pl_node *n = &c->nodes[ni];
        if (!n->schedulable || n->gpus < want || (want && n->gpu_mem_mib < j->min_gpu_mem_mib) ||
            node_held_for_other(c, ni, j, now))
            continue;
        int32_t nv = collect_victims(c, pre, pi, ni, now);
        if (!nv) continue;
        c->hyp_gen++;
        hyp_touch(c, ni);
        double cost = 0;
        int32_t used = 0;
        while (used < nv && hyp_room(c, ni, j, milli) < want) {
            const struct pl_job *v = c->victims[used].job;
            hyp_release(c, v, c->victims[used].shrink ? shrink_amount(c, v, j, ni, milli) : 0, ni);
            cost += c->victims[used].cost;
            used++;
        }
        int32_t room = hyp_room(c, ni, j, milli);
        if (room < want || room < 0) continue;
        offer(best, cost, used, pi, ni);
    }
}

/* A multi-node gang in pool pi: victims over the pool's sample, cheapest first, until a pick of its
 * nodes holds the gang. */
static void search_gang(struct pl_cluster *c, const struct preemptor *pre, int32_t pi, double now,
                        struct preempt_pick *best) {
    const struct pl_job *j = pre->job;
    const struct pl_pool *p = &c->pools[pi];
    int32_t milli = pl_job_milli(j), want = j->gpus;
    int32_t nv = collect_victims(c, pre, pi, -1, now);
    if (!nv) return;
    c->hyp_gen++;
    for (int32_t q = 0; q < p->n_nodes; q++) hyp_touch(c, p->nodes[q]);
    double cost = 0;
    int32_t used = 0, pos[PL_MAX_NODES_PER_JOB + 1], take[PL_MAX_NODES_PER_JOB + 1];
    int32_t *room = c->scratch;
    int64_t total = 0;
    for (int32_t q = 0; q < p->n_nodes; q++) {
        room[q] = gang_hyp_room(c, p->nodes[q], j, milli, now);
        total += room[q];
    }
    /* Add victims until the rooms add up and a pick exists; only the victims' nodes change. */
    for (;;) {
        if (total >= want && gang_pick(p, room, want, pos, take)) break;
        if (used == nv) return;
        const struct pl_job *v = c->victims[used].job;
        hyp_release(c, v, 0, -1);
        for (int32_t s = 0; s < v->alloc.n_slots; s++) {
            int32_t ni = v->alloc.slots[s].node;
            if (c->node_pool[ni] != pi) continue;
            int32_t q = c->node_pos[ni];
            total -= room[q];
            room[q] = gang_hyp_room(c, ni, j, milli, now);
            total += room[q];
        }
        cost += c->victims[used].cost;
        used++;
    }
    offer(best, cost, used, pi, -1);
}

/* Acts on the chosen victims (c->victims, rebuilt for the winning scope): PREEMPT or SHRINK
 * decisions, and the freed nodes held for j through the victims' grace period. */
static void preempt_act(struct pl_cluster *c, struct pl_job *j, const struct preempt_pick *best, double now) {
    int32_t milli = pl_job_milli(j), ni = best->node;
    double hold_until = now;
    c->hyp_gen++;
    for (int32_t i = 0; i < best->nv; i++) {
        struct pl_job *v = c->victims[i].job;
        if (c->victims[i].shrink) {
            /* Replay the search's releases to give back exactly what it counted on. */
            hyp_touch(c, ni);
            int32_t k = shrink_amount(c, v, j, ni, milli);
            uint32_t mask = hyp_release(c, v, k, ni);
            struct pl_decision *d = decision_add(c, PL_SHRINK, v);
            d->for_job = j;
            d->alloc.n_slots = 1;
            d->alloc.slots[0].node = ni;
            d->alloc.slots[0].gpu_mask = (uint16_t)mask;
            d->alloc.slots[0].gpu_count = (uint16_t)pl_popcount16(mask);
            d->gpus = v->gpus - d->alloc.slots[0].gpu_count;
        } else {
            if (ni >= 0) hyp_release(c, v, 0, ni);
            struct pl_decision *d = decision_add(c, PL_PREEMPT, v);
            d->for_job = j;
            d->not_before = now + v->grace_s;
            d->alloc = v->alloc;
            v->state = PL_JOB_STOPPING;
            c->n_stopping++;
            if (d->not_before > hold_until) hold_until = d->not_before;
            c->result.preempted++;
        }
    }
    hold_until += c->cfg.reservation_ttl_s;
    for (int32_t i = 0; i < best->nv; i++) {
        const struct pl_job *v = c->victims[i].job;
        for (int32_t s = 0; s < v->alloc.n_slots; s++) {
            int32_t vn = v->alloc.slots[s].node;
            if (c->node_pool[vn] == best->pool && (ni < 0 || vn == ni)) nominate(c, vn, j, hold_until);
        }
    }
    if (ni >= 0) nominate(c, ni, j, hold_until);
}

/* Looks for the cheapest set of victims that makes room for j (on one node when it fits one,
 * else as a gang over one pool); emits PREEMPT/SHRINK decisions and holds the nodes for j.
 * Returns 1 when victims were chosen. */
static int preempt(struct pl_cluster *c, struct pl_job *j, double now, const enum pl_filter *pool_ok) {
    int32_t want = j->gpus > 0 ? j->gpus : 0;
    struct preemptor pre = {j, las_level(c, j), 0, j->tenant >= 0 && j->tenant < c->n_tenants};
    if (pre.known) pre.share_after = pl_tenant_share_with(c, j->tenant, job_gpu_milli(j), j->cpu_milli, j->mem_mib);
    struct preempt_pick best = {INFINITY, 0, -1, -1};
    c->victims = pl_grow(c->victims, &c->cap_victims, c->n_running + 1, sizeof *c->victims);
    for (int32_t pi = 0; pi < c->n_pools; pi++) {
        if (pool_ok[pi] != PL_OK) continue;
        if (want <= c->pools[pi].max_node_gpus) search_one_node(c, &pre, pi, now, &best);
        else if (pl_job_milli(j) == PL_MILLI) search_gang(c, &pre, pi, now, &best);
    }
    if (best.pool < 0 || best.nv == 0) return 0;
    collect_victims(c, &pre, best.pool, best.node, now); /* the searches reused the array */
    preempt_act(c, j, &best, now);
    return 1;
}

/* ---------------------------------------------------------------------------------------------- */
/* Reservation for the first blocked job (backfill never delays it)                                */

/* Marks the nodes the head will start on: for a one-node job the node with the most room of the
 * right kind, for a gang the nodes with the most free GPUs of the best pool. Later jobs in the
 * cycle are filtered off marked nodes, so anything they take could not have started the head
 * sooner: the head's start depends only on jobs already on its nodes. */
static void reserve_for_head(struct pl_cluster *c, const struct pl_job *j, double now, const enum pl_filter *pool_ok) {
    int32_t want = j->gpus > 0 ? j->gpus : 0, milli = pl_job_milli(j);
    c->mark_job = j->id;
    int32_t best = -1, best_room = -1;
    for (int32_t pi = 0; pi < c->n_pools; pi++) {
        if (pool_ok[pi] != PL_OK) continue;
        const struct pl_pool *p = &c->pools[pi];
        if (want <= p->max_node_gpus) {
            for (int32_t q = 0; q < p->n_nodes; q++) {
                int32_t ni = p->nodes[q];
                const struct pl_node *n = &c->nodes[ni];
                if (!n->schedulable || n->gpus < want || node_held_for_other(c, ni, j, now)) continue;
                int32_t room = 0;
                for (int g = 0; g < n->gpus; g++) room += n->gpu_free_milli[g] >= milli ? PL_MILLI : n->gpu_free_milli[g];
                if (room > best_room) {
                    best_room = room;
                    best = ni;
                }
            }
        }
    }
    if (best >= 0) {
        c->mark[best] = c->stamp;
        return;
    }
    /* A gang: the pool with most free GPUs; its nodes by free GPUs until they could hold it. */
    int32_t best_pool = -1;
    int64_t most = -1;
    for (int32_t pi = 0; pi < c->n_pools; pi++)
        if (pool_ok[pi] == PL_OK && c->pools[pi].free_whole > most && c->pools[pi].total_gpus >= want) {
            most = c->pools[pi].free_whole;
            best_pool = pi;
        }
    if (best_pool < 0) return;
    const struct pl_pool *p = &c->pools[best_pool];
    int32_t held = 0;
    for (int32_t r = PL_MAX_GPUS_PER_NODE; r >= 0 && held < want; r--)
        for (int32_t q = 0; q < p->n_nodes && held < want; q++) {
            int32_t ni = p->nodes[q];
            const struct pl_node *n = &c->nodes[ni];
            if (!n->schedulable || node_held_for_other(c, ni, j, now)) continue;
            int32_t k = 0;
            for (int g = 0; g < n->gpus; g++) k += n->gpu_free_milli[g] == PL_MILLI;
            if (k != r) continue;
            c->mark[ni] = c->stamp;
            held += n->gpus;
        }
}

/* ---------------------------------------------------------------------------------------------- */
/* Elastic growth                                                                                  */

/* Adds one GPU on node ni to a running elastic job if the node has a free GPU and room for the
 * job's new CPU and memory split. */
static int grow_one(struct pl_cluster *c, struct pl_job *v, int32_t ni, double now, struct pl_alloc *added) {
    const struct pl_node *n = &c->nodes[ni];
    if (!n->schedulable || node_held_for_other(c, ni, v, now) || n->gpu_mem_mib < v->min_gpu_mem_mib) return 0;
    int g = 0;
    while (g < n->gpus && n->gpu_free_milli[g] != PL_MILLI) g++;
    if (g == n->gpus) return 0;
    struct pl_job grown = *v;
    int64_t cpu_per = v->cpu_milli / v->gpus, mem_per = v->mem_mib / v->gpus;
    grown.gpus = v->gpus + 1;
    grown.cpu_milli = cpu_per * grown.gpus;
    grown.mem_mib = mem_per * grown.gpus;
    int32_t s = 0;
    while (s < grown.alloc.n_slots && grown.alloc.slots[s].node != ni) s++;
    if (s == grown.alloc.n_slots) {
        if (s == PL_MAX_NODES_PER_JOB) return 0;
        grown.alloc.slots[s].node = ni;
        grown.alloc.slots[s].gpu_mask = 0;
        grown.alloc.n_slots++;
    }
    grown.alloc.slots[s].gpu_mask |= (uint16_t)(1u << g);
    grown.alloc.slots[s].gpu_count = (uint16_t)pl_popcount16(grown.alloc.slots[s].gpu_mask);
    /* Every slot's new CPU and memory share must fit next to what it already holds. */
    for (int32_t k = 0; k < grown.alloc.n_slots; k++) {
        int32_t node = grown.alloc.slots[k].node;
        int64_t old_cpu = 0, old_mem = 0;
        for (int32_t o = 0; o < v->alloc.n_slots; o++)
            if (v->alloc.slots[o].node == node) {
                old_cpu = pl_slot_cpu(v, o);
                old_mem = pl_slot_mem(v, o);
            }
        if (c->nodes[node].cpu_free_milli + old_cpu < pl_slot_cpu(&grown, k) ||
            c->nodes[node].mem_free_mib + old_mem < pl_slot_mem(&grown, k))
            return 0;
    }
    pl_alloc_take(c, v, -1);
    v->gpus = grown.gpus;
    v->cpu_milli = grown.cpu_milli;
    v->mem_mib = grown.mem_mib;
    v->alloc = grown.alloc;
    pl_alloc_take(c, v, +1);
    int32_t a = 0;
    while (a < added->n_slots && added->slots[a].node != ni) a++;
    if (a == added->n_slots) {
        added->slots[a].node = ni;
        added->slots[a].gpu_mask = 0;
        added->n_slots++;
    }
    added->slots[a].gpu_mask |= (uint16_t)(1u << g);
    added->slots[a].gpu_count = (uint16_t)pl_popcount16(added->slots[a].gpu_mask);
    return 1;
}

/* Nobody waits: elastic jobs take idle GPUs, first on their own nodes, then on their first
 * node's pool. */
static void grow_elastic(struct pl_cluster *c, double now) {
    for (int32_t r = 0; r < c->n_running; r++) {
        struct pl_job *v = c->running[r];
        if (v->state != PL_JOB_RUNNING || v->max_gpus <= v->gpus || v->gpus <= 0 || pl_job_milli(v) != PL_MILLI)
            continue;
        struct pl_alloc added = {0};
        for (int32_t s = 0; s < v->alloc.n_slots && v->gpus < v->max_gpus; s++)
            while (v->gpus < v->max_gpus && grow_one(c, v, v->alloc.slots[s].node, now, &added)) {}
        const struct pl_pool *p = &c->pools[c->node_pool[v->alloc.slots[0].node]];
        for (int32_t q = 0; q < p->n_nodes && v->gpus < v->max_gpus; q++)
            while (v->gpus < v->max_gpus && added.n_slots < PL_MAX_NODES_PER_JOB &&
                   grow_one(c, v, p->nodes[q], now, &added)) {}
        if (added.n_slots) {
            struct pl_decision *d = decision_add(c, PL_GROW, v);
            d->alloc = added;
            d->gpus = v->gpus;
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Queue sort                                                                                      */

static int cmp_arrival(const struct pl_job *a, const struct pl_job *b) {
    if (a->submit_time != b->submit_time) return a->submit_time < b->submit_time ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int cmp_fifo(const void *x, const void *y) {
    return cmp_arrival(((const struct pl_entry *)x)->job, ((const struct pl_entry *)y)->job);
}

static int cmp_las(const void *x, const void *y) {
    const struct pl_entry *a = x, *b = y;
    if (a->level != b->level) return a->level - b->level;
    return cmp_arrival(a->job, b->job);
}

/* Within a tenant: priority, then LAS level (short jobs first without knowing durations), then
 * arrival. */
static int cmp_in_tenant(const struct pl_entry *a, const struct pl_entry *b) {
    if (a->job->priority != b->job->priority) return a->job->priority > b->job->priority ? -1 : 1;
    return cmp_las(a, b);
}

static int cmp_fair(const void *x, const void *y) {
    const struct pl_entry *a = x, *b = y;
    if (a->job->tenant != b->job->tenant) return a->job->tenant < b->job->tenant ? -1 : 1;
    return cmp_in_tenant(a, b);
}

/* The next job in weighted dominant-share order. Among the tenants' heads: the highest priority;
 * then the lowest LAS level (three coarse classes of attained service: new and short jobs first,
 * without knowing durations); within a level, tenants within their entitlement (share over weight
 * at most the fair share) before those above it, then the least share over weight; then arrival.
 * Measured on Philly (tests/bench/sim): putting the level before the share cut the worst tenant's
 * mean slowdown from 28.8 to 2.4 and the mean queueing from 2,453 s to 659 s. Returns -1 when
 * every tenant's queue is exhausted. */
static int32_t next_fair(struct pl_cluster *c, int32_t n_groups) {
    int32_t best = -1;
    double best_share = 0;
    for (int32_t t = 0; t < n_groups; t++) {
        if (c->tenant_head[t] >= c->tenant_end[t]) continue;
        const struct pl_entry *e = &c->order[c->tenant_head[t]];
        double share = e->job->tenant >= 0 && e->job->tenant < c->n_tenants
                           ? pl_tenant_share_with(c, e->job->tenant, 0, 0, 0)
                           : 0;
        if (best >= 0) {
            const struct pl_entry *b = &c->order[c->tenant_head[best]];
            int over = share > c->fair_share, best_over = best_share > c->fair_share;
            if (e->job->priority != b->job->priority) {
                if (e->job->priority < b->job->priority) continue;
            } else if (e->level != b->level) {
                if (e->level > b->level) continue;
            } else if (over != best_over) {
                if (over) continue;
            } else if (share != best_share) {
                if (share > best_share) continue;
            } else if (cmp_arrival(e->job, b->job) >= 0) {
                continue;
            }
        }
        best = t;
        best_share = share;
    }
    return best;
}

/* The entitlement of every tenant: 1 / the weights of the tenants that run or wait. */
static void update_fair_share(struct pl_cluster *c, int32_t n) {
    double active = 0;
    for (int32_t t = 0; t < c->n_tenants; t++) c->tenants_active[t] = c->usage[t].gpu_milli_total > 0 || c->usage[t].cpu_milli > 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t t = c->order[i].job->tenant;
        if (t >= 0 && t < c->n_tenants) c->tenants_active[t] = 1;
    }
    for (int32_t t = 0; t < c->n_tenants; t++)
        if (c->tenants_active[t]) active += c->tenants[t].weight;
    c->fair_share = active > 0 ? 1.0 / active : 1.0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Failed-shape cache                                                                              */

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
/* The cycle                                                                                       */

static void handle_job(struct pl_cluster *c, struct pl_job *j, double now, int32_t *preempt_tries) {
    enum pl_filter *pool_ok = c->pool_ok;
    struct pl_alloc a;
    int pending = has_nomination(c, j, now);
    uint64_t key = shape_key(j);
    struct pl_fail *cached = pending ? NULL : fail_find(c, key, 0);
    struct pl_reason why;
    memset(&why, 0, sizeof why);
    if (cached) {
        why = cached->reason;
    } else if (try_place(c, j, now, &a, &why, pool_ok)) {
        commit_place(c, j, &a, now);
        struct pl_decision *d = decision_add(c, PL_PLACE, j);
        d->alloc = a;
        c->result.placed++;
        return;
    } else if (!pending) {
        struct pl_fail *f = fail_find(c, key, 1);
        if (f) f->reason = why;
    }
    if (pending) {
        why.preemption_pending = 1;
    } else if ((c->cfg.preempt || c->cfg.preempt_las || c->cfg.elastic) && *preempt_tries < MAX_PREEMPT_TRIES &&
               why.main >= PL_F_GPUS) {
        (*preempt_tries)++;
        if (cached) for (int32_t pi = 0; pi < c->n_pools; pi++) pool_ok[pi] = pool_filter(c, &c->pools[pi], j);
        if (fits_after_stopping(c, j, now, pool_ok) || preempt(c, j, now, pool_ok)) why.preemption_pending = 1;
    }
    if (!why.preemption_pending && c->cfg.backfill && c->mark_job == 0) {
        if (cached) for (int32_t pi = 0; pi < c->n_pools; pi++) pool_ok[pi] = pool_filter(c, &c->pools[pi], j);
        reserve_for_head(c, j, now, pool_ok);
    }
    struct pl_decision *d = decision_add(c, PL_WAIT, j);
    d->reason = why;
    c->result.waiting++;
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
            c->order[n].level = las_level(c, queue[i]);
            n++;
        }
    int32_t preempt_tries = 0, placed_cap = c->cfg.max_decisions;
    update_fair_share(c, n);

    if (c->cfg.order == PL_ORDER_FAIR) {
        qsort(c->order, (size_t)n, sizeof *c->order, cmp_fair);
        /* Group the sorted queue by tenant: [head, end) per group. */
        int32_t groups = 0;
        c->tenant_head = pl_grow(c->tenant_head, &c->cap_tenant_head, n + 1, sizeof *c->tenant_head);
        c->tenant_end = pl_grow(c->tenant_end, &c->cap_tenant_end, n + 1, sizeof *c->tenant_end);
        for (int32_t i = 0; i < n; i++) {
            if (i == 0 || c->order[i].job->tenant != c->order[i - 1].job->tenant) {
                c->tenant_head[groups] = i;
                if (groups) c->tenant_end[groups - 1] = i;
                groups++;
            }
        }
        if (groups) c->tenant_end[groups - 1] = n;
        int32_t t;
        while ((t = next_fair(c, groups)) >= 0) {
            if (placed_cap && c->result.placed >= placed_cap) break;
            handle_job(c, c->order[c->tenant_head[t]++].job, now, &preempt_tries);
        }
    } else {
        qsort(c->order, (size_t)n, sizeof *c->order, c->cfg.order == PL_ORDER_LAS ? cmp_las : cmp_fifo);
        for (int32_t i = 0; i < n; i++) {
            if (placed_cap && c->result.placed >= placed_cap) break;
            handle_job(c, c->order[i].job, now, &preempt_tries);
        }
    }
    if (c->cfg.elastic && c->n_elastic && c->result.waiting == 0) grow_elastic(c, now);
    c->result.n = c->n_decisions;
    c->result.decisions = c->decisions;
    return &c->result;
}
