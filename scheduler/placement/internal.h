/* internal.h - what the files of the placement library share (not public): the cluster's state, the
 * score plugin interface, and each stage's entry points (schedule.c lists the stages and files). */
#ifndef WHET_PLACEMENT_INTERNAL_H
#define WHET_PLACEMENT_INTERNAL_H

#include "placement.h"

#define PL_SHARE_BUCKET 50                        /* GPU share histogram bucket width (milli) */
#define PL_SHARE_BUCKETS (PL_MILLI / PL_SHARE_BUCKET + 1)
#define PL_FAIL_CACHE 4096                        /* failed job shapes remembered within a cycle */
#define PL_JOIN_MEMO 64                           /* co-training searches remembered within a cycle */
#ifndef PL_JOIN_BEST
#define PL_JOIN_BEST 64                           /* the best groups one search keeps, best first */
#endif

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

/* ---------------------------------------------------------------------------------------------- */
/* Score plugins (score.c)                                                                         */

/* What a score sees: node ni would give the job k GPUs of share milli (the GPUs in mask), cpu and
 * memory. */
struct pl_score_args {
    int32_t ni, k, milli;
    int64_t cpu, mem;
    uint32_t mask;
    int64_t gpu_free;                             /* the node's free GPU share before (milli) */
};

struct pl_cluster;
struct pl_score_plugin {
    const char *name;
    double (*node)(const struct pl_cluster *c, const struct pl_score_args *a); /* higher is better */
    /* The score of giving a share of one GPU on GPU g of node n (higher is better): used when the
     * plugin leads its list. */
    double (*gpu)(const struct pl_cluster *c, const struct pl_node *n, int g, const struct pl_score_args *a);
    int lowest_index;                             /* the score only falls with the node index */
    int frag_cache;                               /* reads c->frag: the cluster keeps it current */
};

extern const struct pl_score_plugin pl_score_first_fit, pl_score_best_fit, pl_score_fgd;

#define PL_MAX_SCORES 4
struct pl_scores {
    int32_t n;
    struct {
        const struct pl_score_plugin *plugin;
        double weight;
    } e[PL_MAX_SCORES];
    int lowest_index;                             /* one plugin whose score falls with the index:
                                                     the first feasible node wins */
    int frag_cache;                               /* some plugin reads c->frag */
};

/* What the node filters ask of a node for one job. */
struct pl_node_ask {
    const struct pl_job *job;
    int32_t k, milli;                             /* GPUs and the share of each */
    int64_t cpu, mem;
    double now;
};

/* A co-training group (cotrain.c): jobs of one key sharing a process on one device. */
struct pl_cotrain_group {
    uint64_t id, key;
    int32_t node;                                 /* the device: node and its bit */
    uint16_t mask;
    int32_t members;
    int64_t base_mib;                             /* the largest base part of its members, held once */
    int64_t members_mib;                          /* the sum of its members' parts */
    int32_t unsized;                              /* running members of unknown memory (the caller sized
                                                     none): counted as a joining job's part, and base_mib
                                                     its base at least */
    int32_t open;                                 /* formed in this cycle: no group if no one joins */
};

/* What decides whether a co-training group takes a job (cotrain.c): jobs alike in it join alike. */
struct pl_join_shape {
    uint64_t key, dcs, types;
    int64_t cpu, mem;
    int32_t base_mib, member_mib;
};

/* A co-training search (cotrain.c): for jobs of one shape, the groups that take it, best first. It holds
 * within its cycle (stamp) while no group is gone and no member or resources are given back (cotrain_gen);
 * a group formed or joined since takes its new rank in it. */
struct pl_join_memo {
    uint32_t stamp, gen;
    struct pl_join_shape shape;
    int32_t n, next;                              /* groups[next..n): those not yet found unable to take one */
    int32_t more;                                 /* 1: other groups took the shape too, all after groups[n-1] */
    int32_t groups[PL_JOIN_BEST];                 /* indexes into the cluster's groups */
};

struct pl_cluster {
    struct pl_config cfg;
    struct pl_scores scores;                      /* the score list cfg.scorer names */
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
    int32_t *scratch;                             /* n_nodes: node rooms in a pool; by pool in move-out */
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
    struct pl_usage *passed;                      /* per cycle: what the tenant's jobs already taken
                                                     in the fair order and left waiting ask for */
    struct pl_fair_key {                          /* per tenant group: its head's place in the fair
                                                     order (queue.c) */
        const struct pl_entry *head;
        int over;
        double share;
    } *fair_key;
    int32_t *fair_heap, n_fair_heap, cap_fair_key, cap_fair_heap;
    int32_t fair_tenant;                          /* the tenant whose job is being handled */
    int fair_stale;                               /* another tenant's usage changed meanwhile */

    int64_t cap_gpu_milli, cap_cpu, cap_mem, used_gpu_milli;
    double fair_share;                            /* 1 / sum of active tenants' weights: every
                                                     tenant's entitled share over its weight */
    int64_t max_node_cpu, max_node_gpu_milli;

    struct pl_shape *profile;
    int32_t n_profile, cap_profile;

    struct pl_job **running;
    int32_t n_running, cap_running;
    struct pl_cotrain_group *groups;              /* co-training groups with running members */
    int32_t n_groups, cap_groups;
    int32_t *group_slots;                         /* groups by id: an open-addressing table of indexes
                                                     into groups (-1: empty), twice as large at least */
    int32_t n_group_slots;                        /* a power of two, or 0 */
    uint64_t next_group_id;                       /* above every group id seen */
    uint32_t cotrain_gen;                         /* changes that may let a join search find more (cotrain.c) */
    struct pl_join_memo join_memo[PL_JOIN_MEMO];
    int32_t n_elastic;                            /* running jobs with an elastic range */
    int32_t n_stopping;                           /* preempted jobs still holding resources */

    /* per-cycle scratch */
    struct pl_entry *order;
    int32_t cap_order;
    int32_t *tenant_head, *tenant_end, cap_tenant_head, cap_tenant_end;
    enum pl_filter *pool_ok;                      /* n_pools: the static filter of each pool */
    uint8_t *pool_usable;                         /* n_pools: scratch of the pick over states (pick.c) */
    struct pl_decision *decisions;
    int32_t n_decisions, cap_decisions;
    struct pl_victim *victims;
    int32_t cap_victims;
    struct pl_fail fails[PL_FAIL_CACHE];
    uint32_t rotate;
    struct pl_result result;

    /* Node states (state.c): each node's class (-1 before its first), the classes, and an open-addressing
     * table of class ids (-1: empty) by state hash. class_gen numbers placement attempts. class_bits: each
     * class's member nodes, a bitmap of class_words words per class; live: the classes with members. */
    int32_t *node_class;
    struct pl_class *classes;
    int32_t n_classes, cap_classes;
    int32_t *class_slots;
    uint32_t class_mask, class_gen;
    uint64_t *class_bits;
    int32_t class_words, cap_class_bits;
    int32_t *live, n_live, cap_live;
};

/* A node state: what the resource filters and the scores read of a node (its pool, size, GPU memory,
 * whether it takes work, its free resources). Nodes in one state pass the same resource filters, score
 * the same and get the same GPUs, and a fleet has few states for many nodes: each node's state is
 * interned as a class, kept as pl_node_apply changes the node, so that a placement attempt evaluates
 * each state once (stamp: the attempt the filter, score and GPUs are for) and reads one id per node. */
struct pl_class {
    struct pl_node state;
    int32_t pool;
    uint64_t hash;
    uint32_t stamp;
    enum pl_filter filter;
    double score;
    uint32_t gpus;
    int32_t members, lowest; /* how many nodes are in this state, the lowest index among them (-1: none) */
    int32_t live_at;         /* its place in the cluster's live classes while it has members */
};

/* Sets node ni's class from its current state (state.c). */
void pl_node_class_update(struct pl_cluster *c, int32_t ni);
/* The lowest-index node in class id at or after node `from`, or -1 (state.c). */
int32_t pl_class_next_member(const struct pl_cluster *c, int32_t id, int32_t from);

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
int64_t pl_job_gpu_milli(const struct pl_job *j);

static inline struct pl_node_ask pl_node_ask_of(const struct pl_job *j, double now) {
    return (struct pl_node_ask){j, j->gpus > 0 ? j->gpus : 0, pl_job_milli(j), j->cpu_milli, j->mem_mib, now};
}

/* schedule.c */
int32_t pl_las_level(const struct pl_cluster *c, const struct pl_job *j);
struct pl_decision *pl_decision_add(struct pl_cluster *c, enum pl_action action, struct pl_job *job);

/* queue.c: queue sort */
void pl_update_fair_share(struct pl_cluster *c, int32_t n);
int32_t pl_queue_sort(struct pl_cluster *c, int32_t n);
void pl_fair_begin(struct pl_cluster *c, int32_t n_groups);
int32_t pl_next_fair(struct pl_cluster *c);
void pl_fair_taken(struct pl_cluster *c, int32_t group, const struct pl_job *j, int waited);

/* filter.c: filter */
int pl_filter_pools(const struct pl_cluster *c, const struct pl_job *j, enum pl_filter *pool_ok); /* 1: any OK */
int pl_pool_may_fit(const struct pl_pool *p, int32_t gpus, int32_t milli, int one_node);
int pl_node_held_for_other(const struct pl_cluster *c, int32_t ni, const struct pl_job *j, double now);
enum pl_filter pl_node_filter(const struct pl_cluster *c, int32_t ni, const struct pl_node_ask *a);
/* pl_node_filter's checks of the node's state alone (not whether it is held for another job). */
enum pl_filter pl_node_filter_state(const struct pl_cluster *c, int32_t ni, const struct pl_node_ask *a);
void pl_explain(const struct pl_cluster *c, const struct pl_job *j, double now, struct pl_reason *why,
                const enum pl_filter *pool_ok);

/* score.c: score (and score_*.c) */
void pl_scores_init(struct pl_scores *s, const struct pl_config *cfg);
double pl_node_score(const struct pl_cluster *c, int32_t ni, int32_t k, int32_t milli, int64_t cpu, int64_t mem,
                     uint32_t *mask);

/* pick.c: pick */
int32_t pl_nodes_to_score(const struct pl_cluster *c);
int32_t pl_gang_pick(const struct pl_pool *p, const int32_t *room, int32_t gpus, int32_t *pos, int32_t *take);
int pl_try_place(struct pl_cluster *c, const struct pl_job *j, double now, struct pl_alloc *out, struct pl_reason *why,
                 enum pl_filter *pool_ok);
void pl_commit_place(struct pl_cluster *c, struct pl_job *j, const struct pl_alloc *a, double now);

/* preempt.c: post-filter */
int pl_has_nomination(const struct pl_cluster *c, const struct pl_job *j, double now);
int pl_fits_after_stopping(struct pl_cluster *c, const struct pl_job *j, double now, const enum pl_filter *pool_ok);
int pl_preempt(struct pl_cluster *c, struct pl_job *j, double now, const enum pl_filter *pool_ok);

/* cotrain.c: co-training groups */
int32_t pl_cotrain_members(const struct pl_cluster *c, const struct pl_job *j); /* 0: in no group */
void pl_cotrain_add_running(struct pl_cluster *c, struct pl_job *j);
void pl_cotrain_open(struct pl_cluster *c, struct pl_job *j);
int pl_cotrain_join(struct pl_cluster *c, struct pl_job *j, double now, struct pl_alloc *out);
void pl_cotrain_release(struct pl_cluster *c, struct pl_job *j);
void pl_cotrain_end_cycle(struct pl_cluster *c);
void pl_cotrain_move_out(struct pl_cluster *c, double now);

/* reserve.c, elastic.c */
void pl_reserve_for_head(struct pl_cluster *c, const struct pl_job *j, double now, const enum pl_filter *pool_ok);
void pl_grow_elastic(struct pl_cluster *c, double now);

#endif
