/* scale.c - `whet sim scale`: how fast the placement library decides on a large synthetic fleet.
 *
 * Two measurements on the same fleet and queue:
 *   - one scheduling cycle over the whole queue (sort, then filter/score/pick per job until the fleet
 *     is full, then a WAIT with its reason for each job left): decisions per second;
 *   - the same jobs offered one per cycle to a second, empty fleet, each call timed: the latency of
 *     a single decision (p50, p99).
 * The queue resembles the Philly mix (mostly one GPU, some shares, a tail of 8- to 32-GPU gangs),
 * with type and data-center constraints on a fraction of jobs and several tenants and priorities.
 *
 * Times are this thread's CPU time, not wall time: on a shared machine other processes' time
 * slices would otherwise show up as decision latency. The wall time of the cycle is printed too. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void make_job(struct pl_job *j, uint64_t id, struct rng *rng, const struct sim_scale_opts *o) {
    memset(j, 0, sizeof *j);
    j->id = id;
    j->tenant = (int32_t)rng_below(rng, 16);
    j->priority = (int32_t)rng_below(rng, 3);
    uint64_t r = rng_below(rng, 1000);
    j->gpu_milli = PL_MILLI;
    if (r < 100) {
        j->gpus = 1;
        j->gpu_milli = r < 50 ? 250 : 500;
    } else if (r < 850) {
        j->gpus = 1;
    } else if (r < 900) {
        j->gpus = 2;
    } else if (r < 950) {
        j->gpus = 4;
    } else if (r < 985) {
        j->gpus = 8;
    } else if (r < 995) {
        j->gpus = 16;
    } else {
        j->gpus = 32;
    }
    if (j->gpus > o->gpus_per_node * PL_MAX_NODES_PER_JOB) j->gpus = o->gpus_per_node;
    j->cpu_milli = (int64_t)j->gpus * 8000;
    j->mem_mib = (int64_t)j->gpus * 65536;
    if (rng_below(rng, 10) == 0 && o->types > 1) j->allowed_types = 1ull << rng_below(rng, (uint64_t)o->types);
    if (rng_below(rng, 10) == 0 && o->dcs > 1) j->allowed_dcs = 1ull << rng_below(rng, (uint64_t)o->dcs);
    j->preemptible = 1;
    j->submit_time = (double)id;
    if (o->cotrain_keys && j->gpus == 1 && j->gpu_milli == PL_MILLI) {
        /* LoRA of an 8B base: the group holds the base and a pass once (24 GB), each member 3 GB */
        j->cotrain_key = 1 + rng_below(rng, (uint64_t)o->cotrain_keys);
        j->cotrain_base_mib = 24576;
        j->cotrain_member_mib = 3072;
    }
}

int sim_scale(FILE *out, const struct sim_scale_opts *o, const char *policy, struct whet_err *err) {
    struct pl_config cfg;
    if (pl_config_for_policy(&cfg, policy)) return whet_errf(err, "unknown policy \"%s\"", policy);
    if (o->nodes < 1 || o->gpus_per_node < 1 || o->gpus_per_node > PL_MAX_GPUS_PER_NODE || o->queued < 1 ||
        o->dcs < 1 || o->dcs > PL_MAX_DCS || o->types < 1 || o->types > PL_MAX_TYPES)
        return whet_errf(err, "scale: --nodes, --gpus-per-node (1..%d), --queued, --dcs (1..%d), --types (1..%d) "
                              "must be positive",
                         PL_MAX_GPUS_PER_NODE, PL_MAX_DCS, PL_MAX_TYPES);
    cfg.nodes_to_score = -1; /* the kube-scheduler rule: a large fleet is sampled, not scanned */

    struct pl_node *nodes = xcalloc((size_t)o->nodes, sizeof *nodes);
    for (int32_t i = 0; i < o->nodes; i++) {
        struct pl_node *n = &nodes[i];
        n->dc = i % o->dcs;
        n->gpu_type = (i / o->dcs) % o->types;
        n->gpus = o->gpus_per_node;
        n->gpu_mem_mib = 81920;
        n->cpu_milli = (int64_t)o->gpus_per_node * 16000;
        n->mem_mib = (int64_t)o->gpus_per_node * 131072;
        n->schedulable = 1;
        pl_node_reset_free(n);
    }
    struct pl_tenant tenants[16];
    memset(tenants, 0, sizeof tenants);
    for (int t = 0; t < 16; t++) {
        tenants[t].weight = 1 + t % 4;
        tenants[t].may_borrow = 1;
    }

    struct rng rng;
    rng_seed(&rng, o->seed);
    struct pl_job *jobs = xcalloc((size_t)o->queued, sizeof *jobs);
    struct pl_job **queue = xmalloc((size_t)o->queued * sizeof *queue);
    for (int32_t i = 0; i < o->queued; i++) {
        make_job(&jobs[i], (uint64_t)i + 1, &rng, o);
        queue[i] = &jobs[i];
    }
    struct pl_shape shapes[] = {
        {1, 250, 8000, 65536, 0, 5}, {1, 500, 8000, 65536, 0, 5},       {1, 1000, 8000, 65536, 0, 75},
        {2, 1000, 16000, 131072, 0, 5}, {4, 1000, 32000, 262144, 0, 5}, {8, 1000, 64000, 524288, 0, 5},
    };

    char msg[256];
    struct pl_cluster *c = pl_cluster_new(nodes, o->nodes, tenants, 16, &cfg, msg, sizeof msg);
    if (!c) {
        free(nodes);
        free(jobs);
        free(queue);
        return whet_errf(err, "scale: %s", msg);
    }
    pl_cluster_set_profile(c, shapes, (int32_t)WHET_ARRAY_LEN(shapes));
    double t0 = whet_now_mono(), c0 = cpu_now();
    const struct pl_result *r = pl_schedule(c, queue, o->queued, 0);
    double cycle_s = cpu_now() - c0, cycle_wall_s = whet_now_mono() - t0;
    int32_t placed = r->placed, waiting = r->waiting;
    uint64_t decisions_hash = 1469598103934665603ull; /* FNV-1a of what was decided: equal runs, equal decisions */
    for (int32_t i = 0; i < r->n; i++) {
        const struct pl_decision *d = &r->decisions[i];
        uint64_t parts[4] = {d->job->id, (uint64_t)d->action,
                             (uint64_t)(d->alloc.n_slots ? d->alloc.slots[0].node : -1),
                             d->alloc.n_slots ? d->alloc.slots[0].gpu_mask : 0};
        for (int k = 0; k < 4; k++) decisions_hash = (decisions_hash ^ parts[k]) * 1099511628211ull;
    }
    double used_pct = 100.0 * (double)pl_cluster_gpu_milli_used(c) / (double)pl_cluster_gpu_milli_capacity(c);
    pl_cluster_free(c);

    /* Latency: one job per cycle on a fresh fleet, in arrival order. */
    for (int32_t i = 0; i < o->queued; i++) {
        jobs[i].state = PL_JOB_QUEUED;
        jobs[i].alloc.n_slots = 0;
        jobs[i].cotrain_group = 0;
        jobs[i].cotrain_rider = 0;
    }
    c = pl_cluster_new(nodes, o->nodes, tenants, 16, &cfg, msg, sizeof msg);
    pl_cluster_set_profile(c, shapes, (int32_t)WHET_ARRAY_LEN(shapes));
    double *lat = xmalloc((size_t)o->queued * sizeof *lat);
    for (int32_t i = 0; i < o->queued; i++) {
        double a = cpu_now();
        pl_schedule(c, &queue[i], 1, i);
        lat[i] = (cpu_now() - a) * 1e6;
    }
    pl_cluster_free(c);
    qsort(lat, (size_t)o->queued, sizeof *lat, cmp_double);
    fprintf(out,
            "{\"mode\":\"scale\",\"policy\":\"%s\",\"nodes\":%d,\"gpus\":%lld,\"queued\":%d,\"dcs\":%d,\"types\":%d,"
            "\"cotrain_keys\":%d,"
            "\"placed\":%d,\"waiting\":%d,\"gpu_allocated_pct\":%.2f,\"cycle_cpu_s\":%.4f,\"cycle_wall_s\":%.4f,"
            "\"decisions_per_s\":%.0f,\"decisions_hash\":\"%016llx\","
            "\"p50_decision_us\":%.2f,\"p99_decision_us\":%.2f,\"max_decision_us\":%.2f}\n",
            policy, o->nodes, (long long)o->nodes * o->gpus_per_node, o->queued, o->dcs, o->types, o->cotrain_keys,
            placed, waiting, used_pct, cycle_s, cycle_wall_s, cycle_s > 0 ? (placed + waiting) / cycle_s : 0.0,
            (unsigned long long)decisions_hash, lat[o->queued / 2], lat[(int64_t)o->queued * 99 / 100],
            lat[o->queued - 1]);
    free(lat);
    free(nodes);
    free(jobs);
    free(queue);
    return 0;
}
