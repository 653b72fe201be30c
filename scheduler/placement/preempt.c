/* preempt.c - the post-filter stage: when a job fits nowhere, whether it only has to wait for jobs
 * already stopping (pl_fits_after_stopping), else the cheapest victims that make room for it
 * (pl_preempt): jobs of lower priority, over their quota or fair share, or of a higher LAS level,
 * cheapest first (least work since their last checkpoint), elastic shrinks before stops. A search
 * runs on a hypothetical copy of the nodes' free resources; the chosen nodes are then held for the
 * preemptor (nominated) through the victims' grace period. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Whether j holds nodes that an earlier preemption nominated for it and that have not expired. */
int pl_has_nomination(const struct pl_cluster *c, const struct pl_job *j, double now) {
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
    if (v->cotrain_group && pl_cotrain_members(c, v) > 1) return 0; /* stopping one member frees no device */
    if (c->cfg.elastic && v->max_gpus > 0 && v->gpus > v->min_gpus && pl_job_milli(v) == PL_MILLI) {
        *shrink = 1;
        return 1;
    }
    if (!v->preemptible || now - v->start_time < c->cfg.min_run_s) return 0;
    if (c->cfg.preempt && v->priority < j->priority) return 1;
    int las_ok = c->cfg.preempt_las && pl_las_level(c, v) > p->level;
    if (v->tenant == j->tenant || !p->known || v->tenant < 0 || v->tenant >= c->n_tenants)
        return las_ok; /* no fairness question inside one tenant */
    if (!c->cfg.preempt) return las_ok;
    if (v->borrowed && gpu_type >= 0) {
        /* Reclaim: j is within its tenant's guarantee, v runs on borrowed capacity. */
        const struct pl_tenant *t = &c->tenants[j->tenant];
        if (c->usage[j->tenant].gpu_milli[gpu_type] + pl_job_gpu_milli(j) <= (int64_t)t->quota_gpus[gpu_type] * PL_MILLI)
            return 1;
    }
    if (!v->borrowed && !las_ok) return 0;
    double v_after = pl_tenant_share_with(c, v->tenant, -pl_job_gpu_milli(v), -v->cpu_milli, -v->mem_mib);
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
        /* a co-training member stopping beside others gives back no device */
        if (v->state != PL_JOB_STOPPING || (v->cotrain_group && pl_cotrain_members(c, v) > 1)) continue;
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
        int32_t budget = pl_nodes_to_score(c);
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
    if (!c->nodes[ni].schedulable || pl_node_held_for_other(c, ni, j, now)) return 0;
    int32_t k = hyp_room(c, ni, j, milli);
    return k > 0 ? k : 0;
}

/* Whether j would fit once the jobs already stopping have stopped: then it waits for them rather
 * than stopping more (what keeps a caller that rebuilds the cluster every cycle, and so loses the
 * nominations, from preempting again and again). */
int pl_fits_after_stopping(struct pl_cluster *c, const struct pl_job *j, double now, const enum pl_filter *pool_ok) {
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
        if (want > p->max_node_gpus && milli == PL_MILLI && pl_gang_pick(p, room, want, pos, take)) return 1;
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
    int32_t budget = pl_nodes_to_score(c), start = sample_start(c, p, budget);
    for (int32_t q = 0; q < p->n_nodes && q < budget; q++) {
        int32_t ni = p->nodes[(start + q) % p->n_nodes];
        const struct pl_node *n = &c->nodes[ni];
        if (!n->schedulable || n->gpus < want || (want && n->gpu_mem_mib < j->min_gpu_mem_mib) ||
            pl_node_held_for_other(c, ni, j, now))
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
        if (total >= want && pl_gang_pick(p, room, want, pos, take)) break;
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
            struct pl_decision *d = pl_decision_add(c, PL_SHRINK, v);
            d->for_job = j;
            d->alloc.n_slots = 1;
            d->alloc.slots[0].node = ni;
            d->alloc.slots[0].gpu_mask = (uint16_t)mask;
            d->alloc.slots[0].gpu_count = (uint16_t)pl_popcount16(mask);
            d->gpus = v->gpus - d->alloc.slots[0].gpu_count;
        } else {
            if (ni >= 0) hyp_release(c, v, 0, ni);
            struct pl_decision *d = pl_decision_add(c, PL_PREEMPT, v);
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
int pl_preempt(struct pl_cluster *c, struct pl_job *j, double now, const enum pl_filter *pool_ok) {
    int32_t want = j->gpus > 0 ? j->gpus : 0;
    struct preemptor pre = {j, pl_las_level(c, j), 0, j->tenant >= 0 && j->tenant < c->n_tenants};
    if (pre.known) pre.share_after = pl_tenant_share_with(c, j->tenant, pl_job_gpu_milli(j), j->cpu_milli, j->mem_mib);
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
