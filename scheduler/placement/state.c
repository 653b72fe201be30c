/* state.c - node states interned as classes (struct pl_class in internal.h): a node's class is set when
 * the cluster is built and each time pl_node_apply changes the node. Classes are never removed while the
 * cluster lives: a fleet moves between a few states, and a state left is often taken again. Each class
 * knows its member nodes (a bitmap, with their count and lowest index), so that the pick can go through
 * the states instead of the nodes: the best node is the lowest-index member of the best-scoring state. */
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

static uint64_t *class_row(const struct pl_cluster *c, int32_t id) {
    return c->class_bits + (size_t)id * (size_t)c->class_words;
}

int32_t pl_class_next_member(const struct pl_cluster *c, int32_t id, int32_t from) {
    const uint64_t *row = class_row(c, id);
    for (int32_t w = from / 64; w < c->class_words; w++) {
        uint64_t bits = row[w] & (w == from / 64 ? ~0ull << (from % 64) : ~0ull);
        if (bits) return w * 64 + __builtin_ctzll(bits);
    }
    return -1;
}

/* Moves node ni into class id (out of its previous one, if any); a class that gains its first member joins
 * the live list, one that loses its last leaves it. */
static void class_move(struct pl_cluster *c, int32_t ni, int32_t id) {
    int32_t old = c->node_class[ni];
    if (old == id) return;
    if (old >= 0) {
        struct pl_class *k = &c->classes[old];
        class_row(c, old)[ni / 64] &= ~(1ull << (ni % 64));
        if (--k->members == 0) {
            int32_t last = c->live[--c->n_live];
            c->live[k->live_at] = last;
            c->classes[last].live_at = k->live_at;
            k->lowest = -1;
        } else if (k->lowest == ni) {
            k->lowest = pl_class_next_member(c, old, ni + 1);
        }
    }
    struct pl_class *k = &c->classes[id];
    class_row(c, id)[ni / 64] |= 1ull << (ni % 64);
    if (k->members++ == 0) {
        c->live = pl_grow(c->live, &c->cap_live, c->n_live + 1, sizeof *c->live);
        k->live_at = c->n_live;
        c->live[c->n_live++] = id;
        k->lowest = ni;
    } else if (ni < k->lowest) {
        k->lowest = ni;
    }
    c->node_class[ni] = id;
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
            class_move(c, ni, id);
            return;
        }
    }
    int32_t id = c->n_classes++;
    c->classes = pl_grow(c->classes, &c->cap_classes, c->n_classes, sizeof *c->classes);
    c->classes[id] = (struct pl_class){.state = *n, .pool = pool, .hash = h, .lowest = -1};
    c->class_bits =
        pl_grow(c->class_bits, &c->cap_class_bits, c->n_classes, (size_t)c->class_words * sizeof *c->class_bits);
    memset(class_row(c, id), 0, (size_t)c->class_words * sizeof *c->class_bits);
    c->class_slots[slot] = id;
    class_move(c, ni, id);
}
