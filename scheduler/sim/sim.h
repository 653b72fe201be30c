/* sim.h - `whet sim`: public cluster traces replayed through the placement library.
 *
 * Three experiments, each printing one JSON object per policy on one line:
 *   inflate  the ATC'23 method: tasks drawn at random from a pod list until the GPU requested reaches
 *            load x capacity; a task that cannot be placed when it arrives fails (no queue)
 *   replay   a time-based replay of a job trace (Philly) with queueing, preemption and checkpoints
 *   scale    a synthetic fleet and queue, to measure decisions per second and decision latency
 *
 * The parsers reject malformed input with "FILE: line N: column: what is wrong". */
#ifndef WHET_SIM_H
#define WHET_SIM_H

#include <stdint.h>
#include <stdio.h>

#include "placement.h"
#include "rng.h"
#include "util.h"

/* A name table: GPU types, data centers, tenants. Ids are positions. */
struct sim_names {
    char **names;
    int32_t n, cap;
};
/* Returns the id of name, adding it when absent; -1 when the table is full (max ids). */
int32_t sim_names_intern(struct sim_names *t, const char *name, int32_t max);
void sim_names_free(struct sim_names *t);

/* A fleet from a node CSV: `sn,cpu_milli,memory_mib,gpu,model[,dc]` (the Alibaba 2023 format; `dc`
 * optional, default "dc0"). */
struct sim_fleet {
    struct pl_node *nodes;
    int32_t n_nodes;
    struct sim_names types, dcs;
};
int sim_fleet_parse(struct sim_fleet *out, const char *path, const char *text, struct whet_err *err);
void sim_fleet_free(struct sim_fleet *f);

/* Tasks from an Alibaba pod list: `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]`.
 * gpu_spec names (`V100M16|V100M32`) are interned into the fleet's type table, so a type the fleet
 * lacks still constrains (nothing matches it). */
struct sim_pod {
    int64_t cpu_milli, mem_mib;
    int32_t gpus, gpu_milli;
    uint64_t allowed_types;
};
struct sim_pods {
    struct sim_pod *pods;
    int32_t n;
};
int sim_pods_parse(struct sim_pods *out, struct sim_fleet *fleet, const char *path, const char *text,
                   struct whet_err *err);
void sim_pods_free(struct sim_pods *p);

/* A job trace in the Philly format: `timestamp,duration,num_gpus,gpu_time,cluster`; timestamps
 * `YYYY-MM-DD HH:MM:SS` (UTC). Jobs come back sorted by submit time (stable). */
struct sim_trace_job {
    double submit_s;   /* seconds since the first submission */
    double duration_s; /* run time on its GPUs, uninterrupted */
    int32_t gpus, tenant;
    int32_t line;      /* line in the file (ties in submit time keep file order) */
};
struct sim_trace {
    struct sim_trace_job *jobs;
    int32_t n;
    struct sim_names tenants;
};
int sim_trace_parse(struct sim_trace *out, const char *path, const char *text, struct whet_err *err);
void sim_trace_free(struct sim_trace *t);

/* Splits a comma-separated policy list; checks each name. Returns the count, -1 on a bad name. */
int sim_policies(const char *list, char names[][16], int max, struct whet_err *err);

struct sim_inflate_opts {
    double load;     /* requested GPU / capacity at which sampling stops, e.g. 1.3 */
    uint64_t seed;
};
/* Runs one inflation experiment per policy, printing a JSON line each. */
int sim_inflate(FILE *out, const struct sim_fleet *fleet, const struct sim_pods *pods, const struct sim_inflate_opts *o,
                const char *policy, struct whet_err *err);

struct sim_replay_opts {
    int32_t max_jobs;          /* the first N jobs by submit time; 0: all */
    double checkpoint_every_s; /* running jobs checkpoint this often */
    double checkpoint_cost_s;  /* a resumed job spends this long restoring before it progresses */
    double grace_s;            /* a preempted job keeps its GPUs this long */
};
int sim_replay(FILE *out, const struct sim_fleet *fleet, const struct sim_trace *trace, const struct sim_replay_opts *o,
               const char *policy, struct whet_err *err);

struct sim_scale_opts {
    int32_t nodes, gpus_per_node, queued, dcs, types;
    int32_t cotrain_keys; /* 0: no job co-trainable; K: every whole one-GPU job is, of one of K base models */
    uint64_t seed;
};
int sim_scale(FILE *out, const struct sim_scale_opts *o, const char *policy, struct whet_err *err);

#endif
