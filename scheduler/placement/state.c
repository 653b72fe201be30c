/* state.c - node states interned as classes (struct pl_class in internal.h): a node's class is set when
 * the cluster is built and each time pl_node_apply changes the node. Classes are never removed while the
 * cluster lives: a fleet moves between a few states, and a state left is often taken again. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static uint64_t state_hash(int32_t pool, const struct pl_node *n) {
    uint64_t h = (uint64_t)pool * 0x9e3779b97f4a7c15ull ^ (uint64_t)n->cpu_free_milli * 0xff51afd7ed558ccdull ^
                 (uint64_t)n->mem_free_mib ^ (uint64_t)n->gpu_mem_mib << 20 ^ (uint64_t) !!n->schedulable << 63;
    for (int g = 0; g < n->gpus; g++) h = (h ^ (uint64_t)n->gpu_free_milli[g]) * 0x100000001b3ull;
    return h ^ h >> 32;
}

static int same_state(const struct pl_class *k, int32_t pool, const struct pl_node *n) {
    const struct pl_node *x = &k->state;
    return k->pool == pool && x->gpus == n->gpus && x->gpu_mem_mib == n->gpu_mem_mib &&
           !x->schedulable == !n->schedulable && x->cpu_free_milli == n->cpu_free_milli &&
           x->mem_free_mib == n->mem_free_mib &&
           !memcmp(x->gpu_free_milli, n->gpu_free_milli, sizeof x->gpu_free_milli);
}

/* Doubles the table of class ids (at least 64 slots, at most half full) and puts every class back. */
static void slots_grow(struct pl_cluster *c) {
    uint32_t slots = c->class_slots ? 2 * (c->class_mask + 1) : 64;
    free(c->class_slots);
    c->class_slots = malloc(slots * sizeof *c->class_slots);
    if (!c->class_slots) abort();
    memset(c->class_slots, 0xff, slots * sizeof *c->class_slots);
    c->class_mask = slots - 1;
    for (int32_t id = 0; id < c->n_classes; id++) {
        uint32_t slot = (uint32_t)c->classes[id].hash & c->class_mask;
        while (c->class_slots[slot] >= 0) slot = (slot + 1) & c->class_mask;
        c->class_slots[slot] = id;
    }
}

void pl_node_class_update(struct pl_cluster *c, int32_t ni) {
    const struct pl_node *n = &c->nodes[ni];
    int32_t pool = c->node_pool[ni];
    uint64_t h = state_hash(pool, n);
    if (!c->class_slots || 2 * ((uint32_t)c->n_classes + 1) > c->class_mask + 1) slots_grow(c);
    uint32_t slot = (uint32_t)h & c->class_mask;
    for (;; slot = (slot + 1) & c->class_mask) {
        int32_t id = c->class_slots[slot];
        if (id < 0) break;
        if (c->classes[id].hash == h && same_state(&c->classes[id], pool, n)) {
            c->node_class[ni] = id;
            return;
        }
    }
    c->classes = pl_grow(c->classes, &c->cap_classes, c->n_classes + 1, sizeof *c->classes);
    c->classes[c->n_classes] = (struct pl_class){.state = *n, .pool = pool, .hash = h};
    c->class_slots[slot] = c->n_classes;
    c->node_class[ni] = c->n_classes++;
}
