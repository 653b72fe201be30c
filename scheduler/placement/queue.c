/* queue.c - the queue sort stage: arrival order (FIFO), discretised least attained service (LAS),
 * or whet's fair order (priority, LAS level, weighted dominant share, arrival) taken one tenant head
 * at a time. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

/* The fair order of the tenants' heads. Among them: the highest priority; then the lowest LAS level
 * (three coarse classes of attained service: new and short jobs first, without knowing durations);
 * within a level, tenants within their entitlement (share over weight at most the fair share) before
 * those above it, then the least share over weight; then arrival. Measured on Philly
 * (tests/bench/sim): putting the level before the share cut the worst tenant's mean slowdown from 28.8
 * to 2.4 and the mean queueing from 2,453 s to 659 s.
 *
 * A tenant's share counts what it holds and, besides, what its jobs already taken this cycle and left
 * waiting ask for (pl_fair_taken), as if they had started: the order is then the one in which the
 * waiting jobs would start as capacity comes free, one tenant's job after another's (progressive
 * filling), and a job's place moves little when a few jobs start or finish. Counting only what a
 * tenant holds put the whole queue of the tenant with the least share ahead of every other tenant's
 * head, and each start or finish moved that tenant's whole queue past the tenants of equal share
 * (thousands of queue positions rewritten per cycle in tests/bench/scale). */
static int fair_before(const struct pl_fair_key *a, const struct pl_fair_key *b) {
    const struct pl_entry *e = a->head, *f = b->head;
    if (e->job->priority != f->job->priority) return e->job->priority > f->job->priority;
    if (e->level != f->level) return e->level < f->level;
    if (a->over != b->over) return !a->over;
    if (a->share != b->share) return a->share < b->share;
    return cmp_arrival(e->job, f->job) < 0;
}

static void fair_key(struct pl_cluster *c, int32_t g) {
    struct pl_fair_key *k = &c->fair_key[g];
    k->head = &c->order[c->tenant_head[g]];
    int32_t t = k->head->job->tenant;
    const struct pl_usage *p = t >= 0 && t < c->n_tenants ? &c->passed[t] : NULL;
    k->share = p ? pl_tenant_share_with(c, t, p->gpu_milli_total, p->cpu_milli, p->mem_mib) : 0;
    k->over = k->share > c->fair_share;
}

static void fair_sift_down(struct pl_cluster *c, int32_t i) {
    int32_t *h = c->fair_heap, n = c->n_fair_heap;
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && fair_before(&c->fair_key[h[l]], &c->fair_key[h[m]])) m = l;
        if (r < n && fair_before(&c->fair_key[h[r]], &c->fair_key[h[m]])) m = r;
        if (m == i) return;
        int32_t tmp = h[i];
        h[i] = h[m];
        h[m] = tmp;
        i = m;
    }
}

static void fair_heapify(struct pl_cluster *c) {
    for (int32_t i = 0; i < c->n_fair_heap; i++) fair_key(c, c->fair_heap[i]);
    for (int32_t i = c->n_fair_heap / 2 - 1; i >= 0; i--) fair_sift_down(c, i);
    c->fair_stale = 0;
}

/* The tenant groups' heads in a heap by the fair order: taking a job changes only its own tenant's
 * key, so the next head costs O(log tenants) instead of a look at every tenant (90% of a cycle's
 * placement time with 1000 tenants and 10000 queued, ~0.5 s). A change to another tenant's usage
 * (a victim stopped for the job just handled) rebuilds the heap. */
void pl_fair_begin(struct pl_cluster *c, int32_t n_groups) {
    c->fair_key = pl_grow(c->fair_key, &c->cap_fair_key, n_groups + 1, sizeof *c->fair_key);
    c->fair_heap = pl_grow(c->fair_heap, &c->cap_fair_heap, n_groups + 1, sizeof *c->fair_heap);
    c->n_fair_heap = n_groups;
    for (int32_t g = 0; g < n_groups; g++) c->fair_heap[g] = g;
    fair_heapify(c);
}

/* The group whose head is next in the fair order, or -1 when every tenant's queue is exhausted. */
int32_t pl_next_fair(struct pl_cluster *c) {
    if (c->fair_stale) fair_heapify(c);
    if (c->n_fair_heap == 0) return -1;
    int32_t g = c->fair_heap[0];
    c->fair_tenant = c->order[c->tenant_head[g]].job->tenant;
    return g;
}

/* Group g's head j (pl_next_fair's, taken) was handled: waited says it waits, and then its demand
 * counts in its tenant's share for the rest of the cycle's order. */
void pl_fair_taken(struct pl_cluster *c, int32_t g, const struct pl_job *j, int waited) {
    if (waited && j->tenant >= 0 && j->tenant < c->n_tenants) {
        struct pl_usage *p = &c->passed[j->tenant];
        p->gpu_milli_total += pl_job_gpu_milli(j);
        p->cpu_milli += j->cpu_milli;
        p->mem_mib += j->mem_mib;
    }
    if (c->tenant_head[g] >= c->tenant_end[g])
        c->fair_heap[0] = c->fair_heap[--c->n_fair_heap];
    else
        fair_key(c, g); /* the top still: its key only moved */
    fair_sift_down(c, 0);
}

/* The entitlement of every tenant: 1 / the weights of the tenants that run or wait; nothing passed yet. */
void pl_update_fair_share(struct pl_cluster *c, int32_t n) {
    double active = 0;
    memset(c->passed, 0, (size_t)(c->n_tenants ? c->n_tenants : 1) * sizeof *c->passed);
    for (int32_t t = 0; t < c->n_tenants; t++) c->tenants_active[t] = c->usage[t].gpu_milli_total > 0 || c->usage[t].cpu_milli > 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t t = c->order[i].job->tenant;
        if (t >= 0 && t < c->n_tenants) c->tenants_active[t] = 1;
    }
    for (int32_t t = 0; t < c->n_tenants; t++)
        if (c->tenants_active[t]) active += c->tenants[t].weight;
    c->fair_share = active > 0 ? 1.0 / active : 1.0;
}

/* Sorts c->order[0..n) in the configured order. The fair order is taken a tenant head at a time
 * (pl_next_fair): the queue is grouped by tenant, [tenant_head, tenant_end) per group, and the
 * number of groups returned (0 for the other orders). */
int32_t pl_queue_sort(struct pl_cluster *c, int32_t n) {
    if (n == 0) return 0; /* c->order may not be allocated yet */
    if (c->cfg.order != PL_ORDER_FAIR) {
        qsort(c->order, (size_t)n, sizeof *c->order, c->cfg.order == PL_ORDER_LAS ? cmp_las : cmp_fifo);
        return 0;
    }
    qsort(c->order, (size_t)n, sizeof *c->order, cmp_fair);
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
    return groups;
}
