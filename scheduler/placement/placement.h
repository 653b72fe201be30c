/* placement.h - the scheduler's brain: where each job runs, which jobs wait and why, who is preempted.
 *
 * A pure library (libc, libm and, for sizing, the engine's pure memory plan: no I/O, no clock, no
 * threads). The scheduler service and `whet sim` run exactly this code. The shape of a cycle follows
 * the Kubernetes scheduling framework (schedule.c names the file of each stage):
 *
 *     queue sort -> per job: filter pools and nodes -> score -> pick -> (blocked) preempt / reserve
 *                -> backfill behind the reservation -> grow elastic jobs into what is left idle
 *
 * Co-training (cotrain.c): a co-trainable job that fits nowhere alone joins a group of its key formed
 * in this cycle on a device with memory to spare, instead of waiting or preempting; a PLACE decision
 * then names the group (job->cotrain_group) and the group's device. When nobody waits and devices are
 * free, MOVE_OUT decisions take members out of running groups to run alone.
 *
 * Usage:
 *
 *     struct pl_cluster *c = pl_cluster_new(nodes, n_nodes, tenants, n_tenants, &cfg, err, sizeof err);
 *     pl_cluster_set_profile(c, shapes, n_shapes);        // optional: typical job shapes (FGD score)
 *     pl_cluster_add_running(c, job);                     // jobs already running when loading a snapshot
 *     const struct pl_result *r = pl_schedule(c, queue, n_queue, now);
 *     for (i < r->n) act on r->decisions[i];              // PLACE already holds its resources
 *     pl_cluster_release(c, job);                         // a running job stopped (finished or preempted)
 *     pl_cluster_free(c);
 *
 * The cluster owns its copy of the nodes and keeps their free resources current: a PLACE or GROW
 * decision takes its resources before pl_schedule returns; a PREEMPT or SHRINK decision takes effect
 * when the caller calls pl_cluster_release (the victim stopped, after its grace period) or
 * pl_cluster_shrink. Jobs are owned by the caller; the cluster keeps pointers to running jobs until
 * they are released, so a running job must stay at the same address.
 *
 * Determinism: the same snapshot, profile, queue (same order) and `now` give the same decisions. Ties
 * are broken by indices and job ids, never by addresses or time.
 *
 * Allocation: pl_cluster_new sizes everything that is per node. After that, arrays only grow (by
 * doubling) when a longer queue, more running jobs, more decisions or more jobs on one node arrive
 * than ever before; a cycle in a steady state allocates nothing. Out of memory aborts: it is not an
 * error a scheduler can mend. */
#ifndef WHET_PLACEMENT_H
#define WHET_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#define PL_MILLI 1000               /* one whole GPU in milli-GPU */
#define PL_MAX_GPUS_PER_NODE 16     /* a node's GPUs fit a 16-bit mask */
#define PL_MAX_TYPES 64             /* GPU types are ids 0..63 (sets of them are 64-bit masks) */
#define PL_MAX_DCS 64               /* data centers are ids 0..63 */
#define PL_MAX_NODES_PER_JOB 32     /* the widest gang: 32 nodes (256 GPUs on 8-GPU nodes) */
#define PL_MAX_REASON_POOLS 8       /* pools named in a WAIT reason (the rest are counted) */
#define PL_LAS_LEVELS 3             /* queues of the discretised least-attained-service order */

/* ---------------------------------------------------------------------------------------------- */
/* Fleet                                                                                           */

/* One machine: an executor with its devices. Pools are the (dc, gpu_type) groups of nodes; the
 * library derives them. A node without GPUs belongs to the pool of its dc and gpu_type -1. */
struct pl_node {
    int32_t dc;                /* data center id, 0..PL_MAX_DCS-1 */
    int32_t gpu_type;          /* GPU type id, 0..PL_MAX_TYPES-1, or -1 for a node without GPUs */
    int32_t gpus;              /* number of GPUs, 0..PL_MAX_GPUS_PER_NODE */
    int32_t gpu_mem_mib;       /* memory of each GPU (MiB); jobs may ask for a minimum */
    int64_t cpu_milli;         /* CPU capacity in milli-cores */
    int64_t mem_mib;           /* host memory capacity in MiB */
    int32_t schedulable;       /* 0: cordoned or lease lost, nothing new goes there */
    /* Free resources. pl_cluster_new copies them as given, so a snapshot of a busy fleet can be
     * loaded as it is; pl_node_reset_free sets them to the capacity. */
    int32_t gpu_free_milli[PL_MAX_GPUS_PER_NODE]; /* per GPU, 0..1000 */
    int64_t cpu_free_milli;
    int64_t mem_free_mib;
};

/* Sets a node's free resources to its whole capacity (an idle node). */
void pl_node_reset_free(struct pl_node *node);

/* A tenant: guaranteed quota per GPU type and a weight for sharing what is idle (Kueue's cohorts
 * with borrowing, Volcano's proportion plugin). */
struct pl_tenant {
    double weight;                        /* > 0; the fair share of idle capacity is weight-proportional */
    int32_t quota_gpus[PL_MAX_TYPES];     /* whole GPUs guaranteed per GPU type (0: none) */
    int32_t may_borrow;                   /* 1: may run beyond its quota on idle capacity (reclaimable) */
    int32_t limit_gpus;                   /* hard cap on GPUs held at once over all types; 0: no cap */
};

/* ---------------------------------------------------------------------------------------------- */
/* Jobs                                                                                            */

/* One node's part of a job: which GPUs it holds there. CPU and memory are the job's totals split in
 * proportion to GPUs (pl_slot_cpu / pl_slot_mem). */
struct pl_slot {
    int32_t node;              /* index into the cluster's nodes */
    uint16_t gpu_mask;         /* bit i: GPU i of that node (0 for a CPU-only job) */
    uint16_t gpu_count;        /* popcount(gpu_mask) */
};

struct pl_alloc {
    int32_t n_slots;
    struct pl_slot slots[PL_MAX_NODES_PER_JOB];
};

enum pl_job_state {
    PL_JOB_QUEUED = 0,         /* waiting (set by the caller for a new job) */
    PL_JOB_RUNNING,            /* placed; its alloc holds resources in the cluster */
    PL_JOB_STOPPING,           /* chosen as a preemption victim; holds resources until released */
};

/* A gang: all of its GPUs or none. The caller fills the request fields; the library fills the rest. */
struct pl_job {
    /* request */
    uint64_t id;               /* unique, also the final tie-break of every order */
    int32_t tenant;            /* index into the cluster's tenants */
    int32_t priority;          /* higher runs first and may preempt lower */
    int32_t gpus;              /* GPUs in the gang (the current size of a running elastic job) */
    int32_t gpu_milli;         /* share of each GPU, 1..1000; below 1000 only when gpus == 1 (a
                                  fraction of one device shared with other jobs); ignored if gpus==0 */
    int32_t min_gpus, max_gpus;/* elastic range; both 0: not elastic (the gang is exactly `gpus`) */
    int64_t cpu_milli;         /* CPU for the whole job at its current size */
    int64_t mem_mib;           /* host memory for the whole job at its current size */
    int32_t min_gpu_mem_mib;   /* each GPU must have at least this much memory; 0: any */
    int32_t max_nodes;         /* 1: the whole gang on one node (a trainer that cannot span nodes);
                                  0: any number of nodes */
    uint64_t allowed_types;    /* bit t: GPU type t allowed; 0: any type */
    uint64_t allowed_dcs;      /* bit d: data center d allowed; 0: any */
    int32_t preemptible;       /* 0: never chosen as a victim */
    double grace_s;            /* when preempted, seconds it keeps running to checkpoint and stop */
    double submit_time;        /* seconds, any epoch; arrival order */
    double attained_gpu_s;     /* GPU-seconds of service received so far (the caller keeps it) */
    double last_checkpoint_time; /* running: when its last complete checkpoint was written */
    double remaining_s;          /* running: estimated seconds of work left at its present pace; 0:
                                  unknown (a member of a co-training group with less left than
                                  cfg.cotrain_move_min_left_s does not move out: it ends before a move
                                  would pay) */
    /* Co-training (cotrain.c): LoRA jobs of one base share a process, one copy of the base and one
     * device. Only a one-device job (gpus 1, gpu_milli 1000) is co-trainable. */
    uint64_t cotrain_key;      /* nonzero: co-trainable; jobs of the same key (same base model, a method
                                  the co-training trainer runs) may share a group */
    int32_t cotrain_base_mib;  /* device memory a group holds once: the base copy, the overhead and one
                                  shared pass (sizing.h's sz_cotrain_mib); a group holds its members' largest */
    int32_t cotrain_member_mib;/* device memory each member adds: adapter, optimizer (GRPO: activations) */
    uint64_t cotrain_group;    /* the group the job runs in, 0: none. The caller sets it for running
                                  jobs (any nonzero id, the same for all members of a group); placement
                                  sets it for a job it places into a group formed in this cycle */
    /* state kept by the library */
    enum pl_job_state state;
    double start_time;         /* when the current run was placed */
    int32_t borrowed;          /* 1: runs beyond its tenant's quota, so it may be reclaimed */
    struct pl_alloc alloc;     /* where it runs (valid while RUNNING or STOPPING); a co-training
                                  group's members all name the group's device */
    int32_t cotrain_rider;     /* 1: a group member holding no share of the device: one member of each
                                  group (its holder) holds the whole device for the group */
    int32_t run_index;         /* position in the cluster's running set (internal) */
};

/* A typical job shape with its frequency: the workload the fragmentation score expects next (FGD's
 * "target workload"). */
struct pl_shape {
    int32_t gpus, gpu_milli;   /* as in pl_job */
    int64_t cpu_milli, mem_mib;
    uint64_t allowed_types;    /* 0: any */
    double weight;             /* relative frequency (normalised by pl_cluster_set_profile) */
};

/* ---------------------------------------------------------------------------------------------- */
/* Configuration                                                                                   */

enum pl_order {
    PL_ORDER_FIFO,             /* arrival order */
    PL_ORDER_LAS,              /* Tiresias: discretised least attained service, FIFO within a level */
    PL_ORDER_FAIR,             /* priority, then attained-service level, then tenants within their
                                  entitlement first and by dominant share / weight, then arrival
                                  (whet) */
};

enum pl_scorer {
    PL_SCORE_FIRST_FIT,        /* lowest node index */
    PL_SCORE_BEST_FIT,         /* least CPU and GPU left on the node (the ATC'23 artifact's BestFit) */
    PL_SCORE_FGD,              /* least growth of the node's expected fragmentation (ATC'23 FGD) */
};

struct pl_config {
    enum pl_order order;
    enum pl_scorer scorer;
    int32_t backfill;          /* 1: reserve nodes for the first blocked job and let later jobs run
                                  only elsewhere; 0: later jobs may take anything (no reservation) */
    int32_t preempt;           /* 1: preempt for higher priority, quota reclaim and fair share */
    int32_t preempt_las;       /* 1: a job of a lower LAS level preempts jobs of higher levels */
    int32_t elastic;           /* 1: grow elastic jobs into idle GPUs, shrink them before preempting */
    double las_thresholds_gpu_s[PL_LAS_LEVELS - 1]; /* attained GPU-seconds where levels change */
    double min_run_s;          /* a job is not preempted in its first min_run_s seconds of a run */
    double reservation_ttl_s;  /* how long preemption holds nodes for the preemptor after the
                                  victims' grace (in case it never comes back) */
    int32_t nodes_to_score;    /* feasible nodes examined per job: 0 all, >0 that many, <0 the
                                  kube-scheduler rule (50% - n/125 %, at least 5% and 100 nodes) */
    int32_t max_decisions;     /* stop a cycle after this many PLACE decisions; 0: no limit */
    double fgd_pack_milli;     /* FGD only: weight of best-fit packing next to the fragmentation
                                  growth, in milli-GPU per unit of best-fit score (default 50) */
    int32_t cotrain_max;       /* the most jobs in one co-training group; below 2: no co-training */
    double cotrain_move_min_left_s; /* a member moves out of its group only with more work left than
                                  this (pl_job.remaining_s): a move costs a checkpoint, a new process
                                  and a load of the base model */
};

/* The defaults for a policy name: "fifo", "bestfit", "las" or "whet". Returns -1 if unknown. */
int pl_config_for_policy(struct pl_config *cfg, const char *policy);

/* ---------------------------------------------------------------------------------------------- */
/* Decisions                                                                                       */

enum pl_action {
    PL_PLACE,                  /* job runs on `alloc` (resources already taken) */
    PL_WAIT,                   /* job stays queued; `reason` says why */
    PL_PREEMPT,                /* stop `job` (a victim) to make room for `for_job`; release it with
                                  pl_cluster_release once stopped, at `not_before` at the latest */
    PL_GROW,                   /* elastic `job` grows to `gpus`; `alloc` lists the added GPUs (taken) */
    PL_SHRINK,                 /* elastic `job` shrinks to `gpus` to make room for `for_job`; `alloc`
                                  lists the GPUs to give back: call pl_cluster_shrink when done */
    PL_MOVE_OUT,               /* co-trained `job` would run faster alone on a free device: stop it (it
                                  checkpoints) and requeue it, like a preempted job; release it with
                                  pl_cluster_release once stopped. Nothing is taken for it: the next
                                  cycle places it alone if the device is still free */
};

/* Why a filter rejected a pool (or why a job waits although some pool passed). */
enum pl_filter {
    PL_OK = 0,
    PL_F_DC,                   /* data center not allowed by the job */
    PL_F_TYPE,                 /* GPU type not allowed by the job (or no GPUs for a GPU job) */
    PL_F_GPU_MEM,              /* GPU memory below the job's minimum */
    PL_F_NODE_SIZE,            /* pool too small for the gang even when empty */
    PL_F_QUOTA,                /* tenant at its quota for this type and may not borrow */
    PL_F_LIMIT,                /* tenant at its hard GPU cap */
    PL_F_GPUS,                 /* not enough free GPUs (or GPU share) on any node / in the pool */
    PL_F_CPU,                  /* GPUs free but not enough CPU next to them */
    PL_F_MEM,                  /* GPUs and CPU free but not enough host memory */
    PL_F_RESERVED,             /* the room is reserved for a job ahead in the queue */
    PL_F_UNSCHEDULABLE,        /* every node of the pool is cordoned */
    PL_F_COUNT,
};

/* A short lower-case phrase for a filter code ("not enough free GPUs"). */
const char *pl_filter_name(enum pl_filter f);

struct pl_reason {
    enum pl_filter main;       /* the filter that rejected the most hopeful pool */
    int32_t n_pools;           /* pools examined; the first PL_MAX_REASON_POOLS are listed */
    struct {
        int32_t dc, gpu_type;
        enum pl_filter filter;
    } pools[PL_MAX_REASON_POOLS];
    int32_t preemption_pending; /* 1: victims are stopping for this job; it starts when they do */
};

/* Writes "dc NAME type NAME: what; ..." into buf (names from the arrays, or ids when NULL). */
void pl_reason_format(char *buf, size_t len, const struct pl_reason *r, const char *const *dc_names,
                      const char *const *type_names);

struct pl_decision {
    enum pl_action action;
    struct pl_job *job;
    struct pl_job *for_job;    /* PREEMPT/SHRINK: the job the room is for */
    int32_t gpus;              /* GROW/SHRINK: the new size */
    double not_before;         /* PREEMPT: now + the victim's grace period */
    struct pl_alloc alloc;     /* PLACE: where; GROW: added; SHRINK: to give back */
    struct pl_reason reason;   /* WAIT */
};

struct pl_result {
    int32_t n;
    struct pl_decision *decisions; /* owned by the cluster, valid until the next pl_schedule */
    int32_t placed, waiting, preempted;
};

/* ---------------------------------------------------------------------------------------------- */
/* The cluster                                                                                     */

struct pl_cluster;

/* Copies the nodes and tenants. Returns NULL and writes a message into err on a bad snapshot
 * (a node with too many GPUs, an id out of range, a weight <= 0). */
struct pl_cluster *pl_cluster_new(const struct pl_node *nodes, int32_t n_nodes, const struct pl_tenant *tenants,
                                  int32_t n_tenants, const struct pl_config *cfg, char *err, size_t errlen);
void pl_cluster_free(struct pl_cluster *c);

/* Replaces the typical job shapes the FGD score optimises for; weights are normalised. -1 if n is
 * negative or any weight is negative. */
int pl_cluster_set_profile(struct pl_cluster *c, const struct pl_shape *shapes, int32_t n);

/* Registers a job that already runs on job->alloc (loading a snapshot): takes its resources.
 * -1 if they are not free or the alloc is malformed (err says which slot). */
int pl_cluster_add_running(struct pl_cluster *c, struct pl_job *job, char *err, size_t errlen);

/* The caller numbers the co-training groups of running jobs (pl_job.cotrain_group) 1..last: those ids are
 * taken, whether or not a member could be added (pl_cluster_add_running refuses one that no longer fits
 * its node), so a group formed in a cycle is numbered above them and never takes a running group's id. */
void pl_cluster_reserve_groups(struct pl_cluster *c, uint64_t last);

/* A running or stopping job ended: gives back its resources; the job becomes QUEUED again (a caller
 * requeues a preempted job by passing it to the next pl_schedule). */
void pl_cluster_release(struct pl_cluster *c, struct pl_job *job);

/* Applies a SHRINK decision once the job has given the GPUs back. */
void pl_cluster_shrink(struct pl_cluster *c, struct pl_job *job, const struct pl_alloc *give_back);

/* One scheduling cycle over the queue (jobs in state QUEUED; the array may be in any order: the
 * configured order sorts it). `now` is the caller's clock in seconds. */
const struct pl_result *pl_schedule(struct pl_cluster *c, struct pl_job *const *queue, int32_t n_queue, double now);

/* Read access for reports and tests. */
int32_t pl_cluster_n_nodes(const struct pl_cluster *c);
const struct pl_node *pl_cluster_node(const struct pl_cluster *c, int32_t i);
int32_t pl_cluster_n_running(const struct pl_cluster *c);
struct pl_job *pl_cluster_running(const struct pl_cluster *c, int32_t i);
int64_t pl_cluster_gpu_milli_capacity(const struct pl_cluster *c);
int64_t pl_cluster_gpu_milli_used(const struct pl_cluster *c);
/* The tenant's dominant share (max over GPU, CPU, memory of used / capacity) divided by its weight. */
double pl_cluster_tenant_share(const struct pl_cluster *c, int32_t tenant);
/* Whole-GPU equivalents (milli / 1000) the tenant holds of one GPU type. */
double pl_cluster_tenant_gpus(const struct pl_cluster *c, int32_t tenant, int32_t gpu_type);

/* CPU and memory a slot of the job holds (its totals split by GPUs; all of it for a 0/1-GPU job). */
int64_t pl_slot_cpu(const struct pl_job *job, int32_t slot);
int64_t pl_slot_mem(const struct pl_job *job, int32_t slot);

#endif
