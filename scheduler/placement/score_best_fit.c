/* score_best_fit.c - best fit, the ATC'23 artifact's BestFit: the node left with the least CPU and
 * GPU share (1 - mean of the two over the largest node's), and within a node the fullest GPU that
 * holds a share. Scale: [0, 1]. */
#include "internal.h"

static double best_fit_node(const struct pl_cluster *c, const struct pl_score_args *a) {
    const struct pl_node *n = &c->nodes[a->ni];
    int64_t cpu_left = n->cpu_free_milli - a->cpu, gpu_left = a->gpu_free - (int64_t)a->k * a->milli;
    double s = 0;
    if (c->max_node_cpu) s += 0.5 * (double)cpu_left / (double)c->max_node_cpu;
    if (c->max_node_gpu_milli) s += 0.5 * (double)gpu_left / (double)c->max_node_gpu_milli;
    return 1.0 - s;
}

static double best_fit_gpu(const struct pl_cluster *c, const struct pl_node *n, int g, const struct pl_score_args *a) {
    (void)c, (void)a;
    return -n->gpu_free_milli[g];
}

const struct pl_score_plugin pl_score_best_fit = {.name = "best-fit", .node = best_fit_node, .gpu = best_fit_gpu};
