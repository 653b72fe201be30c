/* score.c - the score stage as a list of score plugins, the shape of the Kubernetes scheduling
 * framework's score extension point: each plugin (score_*.c, one file each) has a name and a node
 * score, higher is better; the list gives each a weight, and a node's score is the weighted sum.
 * There is no normalize step: each plugin's score already has a fixed scale (first-fit: the node
 * index, best-fit: [0, 1], FGD: milli-GPU of fragmentation), and the weights convert between scales
 * (fgd_pack_milli is the weight of best-fit next to FGD), so a node's score does not depend on the
 * other nodes and is computed once per node state (state.c). A new score is a score_NAME.c file
 * defining a struct pl_score_plugin, a line declaring it in internal.h and a line in pl_scores_init.
 *
 * Within a node the GPUs of a whole-GPU job are the first wholly free ones; for a share of one GPU
 * the first plugin of the list (the lead) chooses the GPU with its gpu score. */
#include <math.h>
#include <string.h>

#include "internal.h"

static void scores_add(struct pl_scores *s, const struct pl_score_plugin *plugin, double weight) {
    s->e[s->n].plugin = plugin;
    s->e[s->n].weight = weight;
    s->n++;
    s->frag_cache |= plugin->frag_cache;
}

void pl_scores_init(struct pl_scores *s, const struct pl_config *cfg) {
    memset(s, 0, sizeof *s);
    switch (cfg->scorer) {
    case PL_SCORE_FIRST_FIT:
        scores_add(s, &pl_score_first_fit, 1);
        break;
    case PL_SCORE_BEST_FIT:
        scores_add(s, &pl_score_best_fit, 1);
        break;
    case PL_SCORE_FGD:
        /* Fragmentation growth in milli-GPU; best-fit in [0, 1] weighs like fgd_pack_milli milli-GPU
         * of it: near-ties go to the fuller node, so whole nodes stay free for gangs. */
        scores_add(s, &pl_score_fgd, 1);
        scores_add(s, &pl_score_best_fit, cfg->fgd_pack_milli);
        break;
    }
    s->lowest_index = s->n == 1 && s->e[0].plugin->lowest_index;
}

/* The GPUs node ni gives k GPUs of share milli: the first wholly free ones, or for a share the
 * GPU the lead plugin scores best. */
static uint32_t choose_gpus(const struct pl_cluster *c, const struct pl_score_args *a) {
    const struct pl_node *n = &c->nodes[a->ni];
    uint32_t mask = 0;
    if (a->k > 0 && a->milli >= PL_MILLI) {
        int32_t taken = 0;
        for (int g = 0; g < n->gpus && taken < a->k; g++)
            if (n->gpu_free_milli[g] == PL_MILLI) {
                mask |= 1u << g;
                taken++;
            }
    } else if (a->k > 0) {
        const struct pl_score_plugin *lead = c->scores.e[0].plugin;
        double best = -INFINITY;
        for (int g = 0; g < n->gpus; g++) {
            if (n->gpu_free_milli[g] < a->milli) continue;
            double s = lead->gpu(c, n, g, a);
            if (s > best) {
                best = s;
                mask = 1u << g;
            }
        }
    }
    return mask;
}

double pl_node_score(const struct pl_cluster *c, int32_t ni, int32_t k, int32_t milli, int64_t cpu, int64_t mem,
                     uint32_t *mask) {
    const struct pl_node *n = &c->nodes[ni];
    struct pl_score_args a = {.ni = ni, .k = k, .milli = milli, .cpu = cpu, .mem = mem};
    for (int g = 0; g < n->gpus; g++) a.gpu_free += n->gpu_free_milli[g];
    a.mask = *mask = choose_gpus(c, &a);
    double total = 0;
    for (int32_t i = 0; i < c->scores.n; i++) {
        double s = c->scores.e[i].weight * c->scores.e[i].plugin->node(c, &a);
        total = i ? total + s : s;
    }
    return total;
}
