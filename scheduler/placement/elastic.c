/* elastic.c - elastic growth: when nobody waits, running elastic jobs take idle GPUs (first on
 * their own nodes, then in their pool); shrinking them again is a preemption choice (preempt.c). */

#include "internal.h"

/* Adds one GPU on node ni to a running elastic job if the node has a free GPU and room for the
 * job's new CPU and memory split. */
static int grow_one(struct pl_cluster *c, struct pl_job *v, int32_t ni, double now, struct pl_alloc *added) {
    const struct pl_node *n = &c->nodes[ni];
    if (!n->schedulable || pl_node_held_for_other(c, ni, v, now) || n->gpu_mem_mib < v->min_gpu_mem_mib) return 0;
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
void pl_grow_elastic(struct pl_cluster *c, double now) {
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
            struct pl_decision *d = pl_decision_add(c, PL_GROW, v);
            d->alloc = added;
            d->gpus = v->gpus;
        }
    }
}
