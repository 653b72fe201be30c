/* reserve.c - the reserve stage: nodes held for the first blocked job of a cycle, so that backfill
 * (later jobs running only elsewhere) never delays it. */

#include "internal.h"

/* Marks the nodes the head will start on: for a one-node job the node with the most room of the
 * right kind, for a gang the nodes with the most free GPUs of the best pool. Later jobs in the
 * cycle are filtered off marked nodes, so anything they take could not have started the head
 * sooner: the head's start depends only on jobs already on its nodes. */
void pl_reserve_for_head(struct pl_cluster *c, const struct pl_job *j, double now, const enum pl_filter *pool_ok) {
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
                if (!n->schedulable || n->gpus < want || pl_node_held_for_other(c, ni, j, now)) continue;
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
            if (!n->schedulable || pl_node_held_for_other(c, ni, j, now)) continue;
            int32_t k = 0;
            for (int g = 0; g < n->gpus; g++) k += n->gpu_free_milli[g] == PL_MILLI;
            if (k != r) continue;
            c->mark[ni] = c->stamp;
            held += n->gpus;
        }
}
