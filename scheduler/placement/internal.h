/* internal.h - what cluster.c and schedule.c share inside the placement library (not public). */
#ifndef WHET_PLACEMENT_INTERNAL_H
#define WHET_PLACEMENT_INTERNAL_H

#include "placement.h"

#define PL_SHARE_BUCKET 50                        /* GPU share histogram bucket width (milli) */
#define PL_SHARE_BUCKETS (PL_MILLI / PL_SHARE_BUCKET + 1)
#define PL_FAIL_CACHE 4096                        /* failed job shapes remembered within a cycle */

/* A (data center, GPU type) group of nodes, with summaries kept exact by node_apply. Only
 * schedulable nodes count in the summaries. */
struct pl_pool {
    int32_t dc, gpu_type;
    int32_t *nodes, n_nodes;                      /* node indices, ascending */
    int32_t n_schedulable;
    int32_t max_node_gpus, max_gpu_mem_mib, total_gpus;
    int32_t whole_hist[PL_MAX_GPUS_PER_NODE + 1]; /* nodes by number of wholly free GPUs */
    int64_t free_whole;                           /* wholly free GPUs */
    int32_t share_hist[PL_SHARE_BUCKETS];         /* GPUs by free share / PL_SHARE_BUCKET */
    int32_t first_free;                           /* no node before this position has a free GPU
                                                     share (a lower bound kept by first-fit scans) */
};

struct pl_usage {
    int64_t gpu_milli[PL_MAX_TYPES];
    int64_t gpu_milli_total, cpu_milli, mem_mib;
};

/* A failed placement attempt this cycle: a job of the same shape fails the same way, because a
 * cycle only ever takes resources. */
struct pl_fail {
    uint64_t key;
    int32_t used;
    struct pl_reason reason;
};

/* A candidate victim for preemption: a whole job, or the shrinkable part of an elastic one. */
struct pl_victim {
    struct pl_job *job;
    double cost;                                  /* GPU-seconds of work lost */
    int32_t shrink;                               /* 1: elastic shrink, not a stop */
};

/* A queued job with its sort keys computed once per cycle. */
struct pl_entry {
    struct pl_job *job;
    int32_t level;                                /* LAS level */
};

struct pl_cluster {
    struct pl_config cfg;
    struct pl_node *nodes;
    int32_t n_nodes;
    int32_t *node_pool;
    int32_t *node_pos;                            /* position of each node in its pool's list */
    double *frag;                                 /* cached pl_frag of each node (FGD only) */
    uint64_t *nominee;                            /* node held for this job's preemption (0: none) */
    double *nominee_until;
    struct pl_nomination {
        uint64_t job;
        double until;
    } *noms;                                      /* jobs holding nominated nodes */
    int32_t n_noms, cap_noms;
    uint32_t *mark;                               /* node reserved this cycle for the blocked head */
    uint32_t stamp;
    uint64_t mark_job;                            /* the head the marks belong to */
    uint32_t *hyp_stamp;                          /* hypothetical free state for preemption */
    uint32_t hyp_gen;
    int32_t (*hyp_free)[PL_MAX_GPUS_PER_NODE];
    int64_t *hyp_cpu, *hyp_mem;
    int32_t *scratch;                             /* n_nodes: node rooms in a pool */
    struct pl_node_jobs {
        struct pl_job **jobs;
        int32_t n, cap;
    } *node_jobs;                                 /* jobs holding resources on each node */
    uint32_t *run_mark, run_gen;                  /* running jobs seen in one victim search */
    int32_t cap_run_mark;

    struct pl_pool *pools;
    int32_t n_pools;
    int32_t *pool_nodes;

    struct pl_tenant *tenants;
    int32_t n_tenants;
    struct pl_usage *usage;
    uint8_t *tenants_active;                      /* per cycle: runs or waits */

    int64_t cap_gpu_milli, cap_cpu, cap_mem, used_gpu_milli;
    double fair_share;                            /* 1 / sum of active tenants' weights: every
                                                     tenant's entitled share over its weight */
    int64_t max_node_cpu, max_node_gpu_milli;

    struct pl_shape *profile;
    int32_t n_profile, cap_profile;

    struct pl_job **running;
    int32_t n_running, cap_running;
    int32_t n_elastic;                            /* running jobs with an elastic range */
    int32_t n_stopping;                           /* preempted jobs still holding resources */

    /* per-cycle scratch */
    struct pl_entry *order;
    int32_t cap_order;
    int32_t *tenant_head, *tenant_end, cap_tenant_head, cap_tenant_end;
    enum pl_filter *pool_ok;                      /* n_pools: the static filter of each pool */
    struct pl_decision *decisions;
    int32_t n_decisions, cap_decisions;
    struct pl_victim *victims;
    int32_t cap_victims;
    struct pl_fail fails[PL_FAIL_CACHE];
    uint32_t rotate;
    struct pl_result result;

    /* Scores of node states seen in this placement attempt: nodes in the same state (same pool,
     * same free resources) score the same, and a fleet has many. Open addressing, 2^k slots. */
    int32_t *memo_node;
    uint32_t *memo_stamp, memo_gen, memo_mask_bits;
    double *memo_score;
    uint32_t *memo_gpus;
};

void *pl_grow(void *p, int32_t *cap, int32_t need, size_t elem);
int32_t pl_popcount16(uint32_t x);
int32_t pl_job_milli(const struct pl_job *job);
int64_t pl_share_cpu(const struct pl_job *job, int32_t count);
int64_t pl_share_mem(const struct pl_job *job, int32_t count);
double pl_frag(const struct pl_cluster *c, const struct pl_node *node, const int32_t *free_milli, int64_t cpu_free,
               int64_t mem_free);
void pl_node_apply(struct pl_cluster *c, int32_t ni, uint32_t mask, int32_t milli, int64_t cpu, int64_t mem,
                   int32_t tenant, int sign);
void pl_alloc_take(struct pl_cluster *c, struct pl_job *job, int sign);
void pl_running_add(struct pl_cluster *c, struct pl_job *job);
double pl_tenant_share_with(const struct pl_cluster *c, int32_t t, int64_t gpu, int64_t cpu, int64_t mem);

#endif
