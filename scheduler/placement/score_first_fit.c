/* score_first_fit.c - first fit: the lowest node index wins, and within a node the lowest GPU that
 * holds a share. Its score only falls with the index, so the pick stops at the first feasible node
 * (lowest_index) and needs no memo. */
#include "internal.h"

static double first_fit_node(const struct pl_cluster *c, const struct pl_score_args *a) {
    (void)c;
    return -(double)a->ni;
}

static double first_fit_gpu(const struct pl_cluster *c, const struct pl_node *n, int g, const struct pl_score_args *a) {
    (void)c, (void)n, (void)a;
    return -g;
}

const struct pl_score_plugin pl_score_first_fit = {
    .name = "first-fit", .node = first_fit_node, .gpu = first_fit_gpu, .lowest_index = 1,
};
