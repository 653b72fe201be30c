/* inflate.c - `whet sim inflate`: the ATC'23 (FGD) experiment on the Alibaba 2023 fleet.
 *
 * Tasks are drawn uniformly at random (with replacement, seeded) from the pod list until the GPU
 * they request reaches load x the fleet's capacity. Each task is offered to the placement library
 * alone, the moment it arrives: placed, or failed (no queue, no departures). The figure is the GPU
 * allocation ratio at the end: allocated GPU milli / capacity. Every policy sees the same tasks. */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* The pod list's GPU task shapes with their frequencies: the "target workload" FGD expects. */
static int32_t build_profile(const struct sim_pods *pods, struct pl_shape *shapes) {
    int32_t n = 0;
    for (int32_t i = 0; i < pods->n; i++) {
        const struct sim_pod *p = &pods->pods[i];
        if (p->gpus == 0) continue;
        int32_t k = 0;
        while (k < n && !(shapes[k].gpus == p->gpus && shapes[k].gpu_milli == p->gpu_milli &&
                          shapes[k].cpu_milli == p->cpu_milli && shapes[k].allowed_types == p->allowed_types))
            k++;
        if (k == n) {
            shapes[n] = (struct pl_shape){p->gpus, p->gpu_milli, p->cpu_milli, 0, p->allowed_types, 0};
            n++;
        }
        shapes[k].weight += 1;
    }
    return n;
}

int sim_inflate(FILE *out, const struct sim_fleet *fleet, const struct sim_pods *pods, const struct sim_inflate_opts *o,
                const char *policy, struct whet_err *err) {
    struct pl_config cfg;
    if (pl_config_for_policy(&cfg, policy)) return whet_errf(err, "unknown policy \"%s\"", policy);
    if (!(o->load > 0 && o->load <= 100)) return whet_errf(err, "--load: expected a number in (0, 100]");

    struct pl_tenant tenant = {.weight = 1, .may_borrow = 1};
    char msg[256];
    struct pl_cluster *c = pl_cluster_new(fleet->nodes, fleet->n_nodes, &tenant, 1, &cfg, msg, sizeof msg);
    if (!c) return whet_errf(err, "fleet: %s", msg);
    struct pl_shape *shapes = xcalloc((size_t)pods->n, sizeof *shapes);
    pl_cluster_set_profile(c, shapes, build_profile(pods, shapes));
    free(shapes);

    /* Draw the tasks first so the job array never moves (the cluster points at placed jobs). */
    int64_t capacity = pl_cluster_gpu_milli_capacity(c);
    double target = o->load * (double)capacity;
    struct rng rng;
    rng_seed(&rng, o->seed);
    int32_t n = 0, cap = 1024;
    int32_t *draw = xmalloc((size_t)cap * sizeof *draw);
    double requested = 0;
    int has_gpu_task = 0;
    for (int32_t i = 0; i < pods->n; i++) has_gpu_task |= pods->pods[i].gpus > 0;
    while (has_gpu_task && requested < target) {
        if (n == cap) draw = xrealloc(draw, (size_t)(cap *= 2) * sizeof *draw);
        int32_t k = (int32_t)rng_below(&rng, (uint64_t)pods->n);
        draw[n++] = k;
        requested += (double)pods->pods[k].gpus * pods->pods[k].gpu_milli;
    }
    struct pl_job *jobs = xcalloc((size_t)(n ? n : 1), sizeof *jobs);
    int32_t placed = 0, failed = 0, failed_gpu = 0;
    double t0 = whet_now_mono();
    for (int32_t i = 0; i < n; i++) {
        const struct sim_pod *p = &pods->pods[draw[i]];
        struct pl_job *j = &jobs[i];
        j->id = (uint64_t)i + 1;
        j->gpus = p->gpus;
        j->gpu_milli = p->gpu_milli;
        j->cpu_milli = p->cpu_milli;
        j->mem_mib = p->mem_mib;
        j->allowed_types = p->allowed_types;
        j->submit_time = i;
        const struct pl_result *r = pl_schedule(c, &j, 1, i);
        if (r->placed) {
            placed++;
        } else {
            failed++;
            failed_gpu += p->gpus > 0;
        }
    }
    double elapsed = whet_now_mono() - t0;
    int64_t used = pl_cluster_gpu_milli_used(c);
    fprintf(out,
            "{\"mode\":\"inflate\",\"policy\":\"%s\",\"seed\":%llu,\"load\":%.3f,\"nodes\":%d,\"gpus\":%.0f,"
            "\"tasks\":%d,\"placed\":%d,\"failed\":%d,\"failed_gpu_tasks\":%d,\"requested_pct\":%.3f,"
            "\"allocation_pct\":%.3f,\"decisions_per_s\":%.0f}\n",
            policy, (unsigned long long)o->seed, o->load, fleet->n_nodes, (double)capacity / PL_MILLI, n, placed,
            failed, failed_gpu, 100.0 * requested / (double)capacity, 100.0 * (double)used / (double)capacity,
            elapsed > 0 ? n / elapsed : 0.0);
    free(jobs);
    free(draw);
    pl_cluster_free(c);
    return 0;
}
