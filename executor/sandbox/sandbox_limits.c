/* sandbox_limits.c - rlimits: chosen by the caller, set by the worker just before exec.
 *
 * Where a cgroup holds the sandbox's memory (sandbox_cgroup.c) RLIMIT_AS is left alone: the cgroup
 * limit counts what is resident, the address space counts reservations too (thread stacks, malloc
 * arenas, mapped model files). Everywhere else RLIMIT_AS is the memory limit, per process. */
#include <string.h>
#include <sys/resource.h>

#include "sandbox_internal.h"

static void push(struct sandbox_plan *plan, int resource, rlim_t soft, rlim_t hard) {
    struct rlimit_op *op = &plan->rlimits[plan->n_rlimits++];
    op->resource = resource;
    op->limit.rlim_cur = soft;
    op->limit.rlim_max = hard;
}

void sandbox_rlimits_plan(struct sandbox_plan *plan, const struct sandbox_spec *spec, int cgroup_memory) {
    plan->n_rlimits = 0;
    /* SIGXCPU at the limit, SIGKILL a second later for a program that catches SIGXCPU. */
    if (spec->cpu_seconds) push(plan, RLIMIT_CPU, spec->cpu_seconds, spec->cpu_seconds + 1);
    if (spec->mem_bytes && !cgroup_memory) push(plan, RLIMIT_AS, spec->mem_bytes, spec->mem_bytes);
    if (spec->file_bytes) push(plan, RLIMIT_FSIZE, spec->file_bytes, spec->file_bytes);
    if (spec->max_procs > 0) push(plan, RLIMIT_NPROC, (rlim_t)spec->max_procs, (rlim_t)spec->max_procs);
    int files = spec->open_files > 0 ? spec->open_files : 256;
    push(plan, RLIMIT_NOFILE, (rlim_t)files, (rlim_t)files);
    push(plan, RLIMIT_CORE, 0, 0);
    push(plan, RLIMIT_MEMLOCK, 0, 0);
}

int sandbox_rlimits_child(const struct sandbox_plan *plan, const char **what) {
    *what = "setrlimit";
    for (size_t i = 0; i < plan->n_rlimits; i++)
        if (setrlimit(plan->rlimits[i].resource, &plan->rlimits[i].limit) < 0) return -1;
    return 0;
}
