/* pick.c - the pick stage: the whole job on the best-scoring feasible node (place_one_node), else a
 * gang on the fewest nodes of one pool (place_gang: one data center, one GPU type); then commit,
 * which takes the resources. pl_try_place runs filter, score and pick for one job. */
#include <math.h>
#include <string.h>

#include "internal.h"

int32_t pl_nodes_to_score(const struct pl_cluster *c) {
    int32_t n = c->n_nodes, want = c->cfg.nodes_to_score;
    if (want > 0) return want;
    if (want == 0 || n <= 100) return n;
    int32_t pct = 50 - n / 125;
    if (pct < 5) pct = 5;
    int32_t k = (int32_t)((int64_t)n * pct / 100);
    return k < 100 ? 100 : k;
}

/* Where a lowest-index scan (first fit) starts in pool pi: after the prefix known to be full. */
static int32_t first_fit_start(struct pl_cluster *c, int32_t pi, int32_t k) {
    struct pl_pool *p = &c->pools[pi];
    if (k <= 0) return 0;
    while (p->first_free < p->n_nodes) {
        const struct pl_node *n = &c->nodes[p->nodes[p->first_free]];
        int full = n->schedulable;
        for (int g = 0; g < n->gpus && full; g++) full = n->gpu_free_milli[g] == 0;
        if (!full) break;
        p->first_free++;
    }
    return p->first_free < p->n_nodes ? p->first_free : 0;
}

/* Where a pool cannot hold a one-node job of k GPUs of `milli` each at all. */
static int pool_too_small(const struct pl_cluster *c, int32_t pi, const struct pl_node_ask *a) {
    const struct pl_pool *p = &c->pools[pi];
    return a->k > p->max_node_gpus || !pl_pool_may_fit(p, a->k, a->milli, 1);
}

/* Every feasible node scored: the best-scoring node state, its lowest-index node not held for another
 * job, ties to the lower index, as a scan of every node would pick, in time of the states rather than
 * the nodes (a fill of 10k nodes x 8 scanned all 10k for each of 10k jobs: 1-2 s a cycle). The pools
 * are sorted out first: on a full fleet no state is looked at. Returns the node, or -1. */
static int32_t best_of_states(struct pl_cluster *c, const struct pl_job *j, double now, const struct pl_node_ask *a,
                              const enum pl_filter *pool_ok, uint32_t *mask) {
    int32_t best_node = -1, usable = 0;
    double best_score = -INFINITY;
    for (int32_t pi = 0; pi < c->n_pools; pi++)
        usable += c->pool_usable[pi] = pool_ok[pi] == PL_OK && !pool_too_small(c, pi, a);
    for (int32_t l = 0; usable && l < c->n_live; l++) {
        int32_t id = c->live[l];
        const struct pl_class *k = &c->classes[id];
        if (!c->pool_usable[k->pool] || pl_node_filter_state(c, k->lowest, a) != PL_OK) continue;
        uint32_t gpus;
        double score = pl_node_score(c, k->lowest, a->k, a->milli, a->cpu, a->mem, &gpus);
        if (score < best_score) continue;
        int32_t ni = k->lowest;
        while (ni >= 0 && pl_node_held_for_other(c, ni, j, now)) ni = pl_class_next_member(c, id, ni + 1);
        if (ni >= 0 && (score > best_score || ni < best_node)) {
            best_score = score;
            best_node = ni;
            *mask = gpus;
        }
    }
    return best_node;
}

/* A sample of `budget` feasible nodes from a rotating start, each state filtered and scored once per attempt
 * (state.c: one id read per node), or with lowest_index the first feasible node of each pool (the score
 * falls with the index). The best, ties to the lower index; -1 when none. */
static int32_t best_of_scan(struct pl_cluster *c, const struct pl_job *j, double now, const struct pl_node_ask *a,
                            const enum pl_filter *pool_ok, int32_t budget, int lowest_index, uint32_t *best_mask) {
    int32_t best_node = -1, seen = 0;
    double best_score = -INFINITY;
    c->class_gen++;
    for (int32_t pi = 0; pi < c->n_pools && seen < budget; pi++) {
        if (pool_ok[pi] != PL_OK || pool_too_small(c, pi, a)) continue;
        const struct pl_pool *p = &c->pools[pi];
        int32_t start = lowest_index ? first_fit_start(c, pi, a->k) : (int32_t)(c->rotate % (uint32_t)p->n_nodes);
        for (int32_t q = 0; q < p->n_nodes && seen < budget; q++) {
            int32_t ni = p->nodes[(start + q) % p->n_nodes];
            uint32_t mask;
            double s;
            if (lowest_index) {
                if (pl_node_filter(c, ni, a) != PL_OK) continue;
                s = pl_node_score(c, ni, a->k, a->milli, a->cpu, a->mem, &mask);
            } else {
                struct pl_class *k = &c->classes[c->node_class[ni]];
                if (k->stamp != c->class_gen) {
                    k->stamp = c->class_gen;
                    k->filter = pl_node_filter_state(c, ni, a);
                    if (k->filter == PL_OK) k->score = pl_node_score(c, ni, a->k, a->milli, a->cpu, a->mem, &k->gpus);
                }
                if (k->filter != PL_OK || pl_node_held_for_other(c, ni, j, now)) continue;
                s = k->score;
                mask = k->gpus;
            }
            seen++;
            if (s > best_score || (s == best_score && ni < best_node)) {
                best_score = s;
                best_node = ni;
                *best_mask = mask;
            }
            if (lowest_index) break;
        }
    }
    return best_node;
}

/* The whole job on one node: the best-scoring feasible node, over every state when every node is scored,
 * else over a sample or the first fit. Returns 1 and fills out. */
static int place_one_node(struct pl_cluster *c, const struct pl_job *j, double now, struct pl_alloc *out,
                          const enum pl_filter *pool_ok) {
    struct pl_node_ask a = pl_node_ask_of(j, now);
    int32_t budget = pl_nodes_to_score(c), lowest_index = c->scores.lowest_index;
    uint32_t mask = 0;
    int32_t node = !lowest_index && budget >= c->n_nodes
                       ? best_of_states(c, j, now, &a, pool_ok, &mask)
                       : best_of_scan(c, j, now, &a, pool_ok, budget, lowest_index, &mask);
    if (node < 0) return 0;
    out->n_slots = 1;
    out->slots[0].node = node;
    out->slots[0].gpu_mask = (uint16_t)mask;
    out->slots[0].gpu_count = (uint16_t)a.k;
    return 1;
}

/* How many whole GPUs of the job node ni could hold now (GPU, CPU and memory limits together). */
static int32_t node_gang_room(const struct pl_cluster *c, int32_t ni, const struct pl_job *j, double now) {
    const struct pl_node *n = &c->nodes[ni];
    if (!n->schedulable || n->gpu_mem_mib < j->min_gpu_mem_mib || pl_node_held_for_other(c, ni, j, now)) return 0;
    int32_t k = 0;
    for (int g = 0; g < n->gpus; g++) k += n->gpu_free_milli[g] == PL_MILLI;
    while (k > 0 && (n->cpu_free_milli < pl_share_cpu(j, k) || n->mem_free_mib < pl_share_mem(j, k))) k--;
    return k;
}

/* Chooses the fewest nodes of one pool that hold `gpus` given each node's room (room[] indexed like
 * p->nodes). Returns the node count (0: does not fit) and writes the chosen (position, count)
 * pairs; the largest rooms first, and the last node the tightest one that still holds the rest. */
int32_t pl_gang_pick(const struct pl_pool *p, const int32_t *room, int32_t gpus, int32_t *pos, int32_t *take) {
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
        if (!pl_pool_may_fit(p, j->gpus, PL_MILLI, 0)) continue;
        int32_t *room = c->scratch;
        for (int32_t q = 0; q < p->n_nodes; q++) room[q] = node_gang_room(c, p->nodes[q], j, now);
        int32_t n = pl_gang_pick(p, room, j->gpus, pos, take);
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
    int32_t n = pl_gang_pick(p, room, j->gpus, pos, take);
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

/* Filter, score, pick for one job. */
int pl_try_place(struct pl_cluster *c, const struct pl_job *j, double now, struct pl_alloc *out, struct pl_reason *why,
                 enum pl_filter *pool_ok) {
    int any = pl_filter_pools(c, j, pool_ok);
    if (any && place_one_node(c, j, now, out, pool_ok)) return 1;
    if (any && j->gpus > 1 && j->max_nodes != 1 && pl_job_milli(j) == PL_MILLI && place_gang(c, j, now, out, pool_ok))
        return 1;
    pl_explain(c, j, now, why, pool_ok);
    return 0;
}

void pl_commit_place(struct pl_cluster *c, struct pl_job *j, const struct pl_alloc *a, double now) {
    j->alloc = *a;
    int32_t type = c->nodes[a->slots[0].node].gpu_type;
    if (j->gpus > 0 && type >= 0 && j->tenant >= 0 && j->tenant < c->n_tenants) {
        const struct pl_usage *u = &c->usage[j->tenant];
        j->borrowed = u->gpu_milli[type] + pl_job_gpu_milli(j) > (int64_t)c->tenants[j->tenant].quota_gpus[type] * PL_MILLI;
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
