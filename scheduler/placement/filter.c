/* filter.c - the filter stage as two lists of checks, each named by the code a waiting job is told:
 * pool checks (what does not depend on the node: data center, GPU type and memory, size, quota) and
 * node checks (free GPUs, CPU, memory, reservations). A list stops at its first failing check, so
 * the order of a list is the order in which the reasons are reported. A new filter is a function
 * and a line in one of the lists. pl_explain records, per pool, the filter that came closest to
 * passing, which is what a tenant reads when a job waits. */
#include "internal.h"

/* ---------------------------------------------------------------------------------------------- */
/* Pool checks                                                                                     */

static int pool_dc(const struct pl_cluster *c, const struct pl_pool *p, const struct pl_job *j) {
    (void)c;
    return !j->allowed_dcs || (j->allowed_dcs & (1ull << p->dc));
}

static int pool_type(const struct pl_cluster *c, const struct pl_pool *p, const struct pl_job *j) {
    (void)c;
    if (j->gpus <= 0) return 1;
    return p->gpu_type >= 0 && (!j->allowed_types || (j->allowed_types & (1ull << p->gpu_type)));
}

static int pool_gpu_mem(const struct pl_cluster *c, const struct pl_pool *p, const struct pl_job *j) {
    (void)c;
    return j->gpus <= 0 || j->min_gpu_mem_mib <= p->max_gpu_mem_mib;
}

static int pool_node_size(const struct pl_cluster *c, const struct pl_pool *p, const struct pl_job *j) {
    (void)c;
    return j->gpus <= 0 || (j->gpus <= p->total_gpus && (pl_job_milli(j) >= PL_MILLI || p->max_node_gpus >= 1));
}

static int known_tenant(const struct pl_cluster *c, const struct pl_job *j) {
    return j->gpus > 0 && j->tenant >= 0 && j->tenant < c->n_tenants;
}

static int pool_quota(const struct pl_cluster *c, const struct pl_pool *p, const struct pl_job *j) {
    if (!known_tenant(c, j)) return 1;
    const struct pl_tenant *t = &c->tenants[j->tenant];
    return t->may_borrow ||
           c->usage[j->tenant].gpu_milli[p->gpu_type] + pl_job_gpu_milli(j) <=
               (int64_t)t->quota_gpus[p->gpu_type] * PL_MILLI;
}

static int pool_limit(const struct pl_cluster *c, const struct pl_pool *p, const struct pl_job *j) {
    (void)p;
    if (!known_tenant(c, j)) return 1;
    const struct pl_tenant *t = &c->tenants[j->tenant];
    return t->limit_gpus <= 0 ||
           c->usage[j->tenant].gpu_milli_total + pl_job_gpu_milli(j) <= (int64_t)t->limit_gpus * PL_MILLI;
}

static int pool_schedulable(const struct pl_cluster *c, const struct pl_pool *p, const struct pl_job *j) {
    (void)c, (void)j;
    return p->n_schedulable > 0;
}

static const struct {
    enum pl_filter code;
    int (*pass)(const struct pl_cluster *c, const struct pl_pool *p, const struct pl_job *j);
} pool_checks[] = {
    {PL_F_DC, pool_dc},
    {PL_F_TYPE, pool_type},
    {PL_F_GPU_MEM, pool_gpu_mem},
    {PL_F_NODE_SIZE, pool_node_size},
    {PL_F_QUOTA, pool_quota},
    {PL_F_LIMIT, pool_limit},
    {PL_F_UNSCHEDULABLE, pool_schedulable},
};

static enum pl_filter pool_filter(const struct pl_cluster *c, const struct pl_pool *p, const struct pl_job *j) {
    for (size_t i = 0; i < sizeof pool_checks / sizeof pool_checks[0]; i++)
        if (!pool_checks[i].pass(c, p, j)) return pool_checks[i].code;
    return PL_OK;
}

int pl_filter_pools(const struct pl_cluster *c, const struct pl_job *j, enum pl_filter *pool_ok) {
    int any = 0;
    for (int32_t pi = 0; pi < c->n_pools; pi++) {
        pool_ok[pi] = pool_filter(c, &c->pools[pi], j);
        if (pool_ok[pi] == PL_OK) any = 1;
    }
    return any;
}

/* The pool summaries rule out a pool without visiting its nodes when no node has room. */
int pl_pool_may_fit(const struct pl_pool *p, int32_t gpus, int32_t milli, int one_node) {
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

/* ---------------------------------------------------------------------------------------------- */
/* Node checks                                                                                     */

int pl_node_held_for_other(const struct pl_cluster *c, int32_t ni, const struct pl_job *j, double now) {
    if (c->nominee[ni] && c->nominee[ni] != j->id && c->nominee_until[ni] > now) return 1;
    if (c->mark[ni] == c->stamp && c->mark_job != j->id) return 1;
    return 0;
}

static int node_schedulable(const struct pl_cluster *c, const struct pl_node *n, const struct pl_node_ask *a) {
    (void)c, (void)a;
    return n->schedulable;
}

static int node_gpu_mem(const struct pl_cluster *c, const struct pl_node *n, const struct pl_node_ask *a) {
    (void)c;
    return a->k <= 0 || n->gpu_mem_mib >= a->job->min_gpu_mem_mib;
}

static int node_size(const struct pl_cluster *c, const struct pl_node *n, const struct pl_node_ask *a) {
    (void)c;
    return a->k <= n->gpus;
}

static int node_gpus(const struct pl_cluster *c, const struct pl_node *n, const struct pl_node_ask *a) {
    (void)c;
    int32_t ok = 0;
    for (int g = 0; g < n->gpus && ok < a->k; g++) ok += n->gpu_free_milli[g] >= a->milli;
    return ok >= a->k;
}

static int node_cpu(const struct pl_cluster *c, const struct pl_node *n, const struct pl_node_ask *a) {
    (void)c;
    return n->cpu_free_milli >= a->cpu;
}

static int node_mem(const struct pl_cluster *c, const struct pl_node *n, const struct pl_node_ask *a) {
    (void)c;
    return n->mem_free_mib >= a->mem;
}

static const struct {
    enum pl_filter code;
    int (*pass)(const struct pl_cluster *c, const struct pl_node *n, const struct pl_node_ask *a);
} node_checks[] = {
    {PL_F_UNSCHEDULABLE, node_schedulable},
    {PL_F_GPU_MEM, node_gpu_mem},
    {PL_F_NODE_SIZE, node_size},
    {PL_F_GPUS, node_gpus},
    {PL_F_CPU, node_cpu},
    {PL_F_MEM, node_mem},
};

enum pl_filter pl_node_filter_state(const struct pl_cluster *c, int32_t ni, const struct pl_node_ask *a) {
    const struct pl_node *n = &c->nodes[ni];
    for (size_t i = 0; i < sizeof node_checks / sizeof node_checks[0]; i++)
        if (!node_checks[i].pass(c, n, a)) return node_checks[i].code;
    return PL_OK;
}

enum pl_filter pl_node_filter(const struct pl_cluster *c, int32_t ni, const struct pl_node_ask *a) {
    enum pl_filter f = pl_node_filter_state(c, ni, a);
    if (f == PL_OK && pl_node_held_for_other(c, ni, a->job, a->now)) f = PL_F_RESERVED;
    return f;
}

/* ---------------------------------------------------------------------------------------------- */
/* Reasons                                                                                         */

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

/* Why j fits nowhere: for each pool, its static filter, or the filter that stopped the node that
 * came closest (one-node jobs), or a lack of room across the pool (gangs). */
void pl_explain(const struct pl_cluster *c, const struct pl_job *j, double now, struct pl_reason *why,
                const enum pl_filter *pool_ok) {
    struct pl_node_ask a = pl_node_ask_of(j, now);
    for (int32_t pi = 0; pi < c->n_pools; pi++) {
        const struct pl_pool *p = &c->pools[pi];
        if (pool_ok[pi] != PL_OK) {
            reason_note(why, p, pool_ok[pi]);
            continue;
        }
        if (a.k > p->max_node_gpus || !pl_pool_may_fit(p, a.k, a.milli, 1)) {
            reason_note(why, p, a.k > p->max_node_gpus && a.milli < PL_MILLI ? PL_F_NODE_SIZE : PL_F_GPUS);
            continue;
        }
        enum pl_filter best = PL_F_GPUS;
        for (int32_t q = 0; q < p->n_nodes; q++) {
            enum pl_filter f = pl_node_filter(c, p->nodes[q], &a);
            if (f != PL_OK && filter_rank(f) > filter_rank(best)) best = f;
        }
        reason_note(why, p, best);
    }
}
