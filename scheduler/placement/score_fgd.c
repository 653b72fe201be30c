/* score_fgd.c - FGD (ATC'23, "Beware of Fragmentation"): the node whose expected fragmentation grows
 * least when the job takes its GPUs. Fragmentation is the GPU share of a node that the expected next
 * job (the cluster's profile of typical shapes) could not use. Scale: milli-GPU. Within a node, a
 * share goes to the GPU that fragments least, then the fullest. The cluster keeps every node's
 * current fragmentation (frag_cache), so a score is one evaluation of the node after the job. */
#include <string.h>

#include "internal.h"

/* For each typical shape s with frequency p: if s fits the node, the free share of the GPUs too
 * full for s is fragmented; if s does not fit at all (type, CPU, memory, too few GPUs), all of the
 * node's free GPU share is. The sum weighs both by p. Shapes without GPUs are not in the profile. */
double pl_frag(const struct pl_cluster *c, const struct pl_node *node, const int32_t *free_milli, int64_t cpu_free,
               int64_t mem_free) {
    if (node->gpus == 0 || c->n_profile == 0) return 0;
    int64_t total = 0;
    for (int g = 0; g < node->gpus; g++) total += free_milli[g];
    if (total == 0) return 0;
    double frag = 0;
    uint64_t type_bit = 1ull << node->gpu_type;
    for (int32_t s = 0; s < c->n_profile; s++) {
        const struct pl_shape *sh = &c->profile[s];
        int fits = (!sh->allowed_types || (sh->allowed_types & type_bit)) && cpu_free >= sh->cpu_milli &&
                   mem_free >= sh->mem_mib;
        int64_t stranded = 0;
        if (fits) {
            int ok = 0;
            for (int g = 0; g < node->gpus; g++) {
                if (free_milli[g] >= sh->gpu_milli) ok++;
                else stranded += free_milli[g];
            }
            fits = ok >= sh->gpus;
        }
        frag += sh->weight * (double)(fits ? stranded : total);
    }
    return frag;
}

static double fgd_node(const struct pl_cluster *c, const struct pl_score_args *a) {
    const struct pl_node *n = &c->nodes[a->ni];
    int32_t after[PL_MAX_GPUS_PER_NODE];
    memcpy(after, n->gpu_free_milli, sizeof after);
    for (int g = 0; g < n->gpus; g++)
        if (a->mask & (1u << g)) after[g] -= a->milli;
    return -(pl_frag(c, n, after, n->cpu_free_milli - a->cpu, n->mem_free_mib - a->mem) - c->frag[a->ni]);
}

static double fgd_gpu(const struct pl_cluster *c, const struct pl_node *n, int g, const struct pl_score_args *a) {
    int32_t after[PL_MAX_GPUS_PER_NODE];
    memcpy(after, n->gpu_free_milli, sizeof after);
    after[g] -= a->milli;
    return -pl_frag(c, n, after, n->cpu_free_milli - a->cpu, n->mem_free_mib - a->mem) * 1e3 - n->gpu_free_milli[g];
}

const struct pl_score_plugin pl_score_fgd = {.name = "fgd", .node = fgd_node, .gpu = fgd_gpu, .frag_cache = 1};
