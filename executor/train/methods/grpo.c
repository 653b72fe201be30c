/* grpo.c - GRPO advantages, the clipped policy loss with the k3 KL, and their per-token gradient
 * (see grpo.h for the formulas and where they follow veRL's core_algos.py). */
#include "grpo.h"

#include <math.h>
#include <string.h>

static const char *const agg_names[] = {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum"};

const char *grpo_loss_agg_name(enum grpo_loss_agg agg) {
    return (unsigned)agg < sizeof agg_names / sizeof agg_names[0] ? agg_names[agg] : "?";
}

int grpo_loss_agg_parse(const char *name, enum grpo_loss_agg *out) {
    for (unsigned i = 0; i < sizeof agg_names / sizeof agg_names[0]; i++)
        if (!strcmp(name, agg_names[i])) {
            *out = (enum grpo_loss_agg)i;
            return 0;
        }
    return -1;
}

void grpo_advantages(double *adv, const double *rewards, int n_groups, int group_size, int norm_adv_by_std) {
    for (int g = 0; g < n_groups; g++) {
        const double *r = rewards + (size_t)g * group_size;
        double *a = adv + (size_t)g * group_size;
        /* A group of one: veRL takes mean 0 and std 1, so the advantage is the reward itself. */
        double mean = 0, std = 1;
        if (group_size > 1) {
            for (int i = 0; i < group_size; i++) mean += r[i];
            mean /= group_size;
            double ss = 0;
            for (int i = 0; i < group_size; i++) ss += (r[i] - mean) * (r[i] - mean);
            std = sqrt(ss / (group_size - 1)); /* torch.std: the unbiased estimate */
        }
        for (int i = 0; i < group_size; i++)
            a[i] = norm_adv_by_std ? (r[i] - mean) / (std + GRPO_ADV_EPS) : r[i] - mean;
    }
}

int grpo_filter_groups(int *keep, const double *rewards, int n_groups, int group_size) {
    int kept = 0;
    for (int g = 0; g < n_groups; g++) {
        const double *r = rewards + (size_t)g * group_size;
        keep[g] = 0;
        for (int i = 1; i < group_size && !keep[g]; i++) keep[g] = r[i] != r[0];
        kept += keep[g];
    }
    return kept;
}

double grpo_token_coef(enum grpo_loss_agg agg, int seq_len, long long step_tokens, int step_seqs) {
    switch (agg) {
    case GRPO_TOKEN_MEAN: return step_tokens > 0 ? 1.0 / (double)step_tokens : 0;
    case GRPO_SEQ_MEAN_TOKEN_MEAN: return seq_len > 0 && step_seqs > 0 ? 1.0 / ((double)seq_len * step_seqs) : 0;
    case GRPO_SEQ_MEAN_TOKEN_SUM: return step_seqs > 0 ? 1.0 / step_seqs : 0;
    }
    return 0;
}

/* x clamped to [lo, hi]; *passes says whether the gradient goes through (torch.clamp: inclusive). */
static double clamp_grad(double x, double lo, double hi, int *passes) {
    *passes = x >= lo && x <= hi;
    return x < lo ? lo : x > hi ? hi : x;
}

void grpo_response_loss(double *dloss_dlogp, struct grpo_loss_stats *st, const float *logp, const float *old_logp,
                        const float *ref_logp, int n, double advantage, double coef,
                        const struct grpo_loss_opts *opts) {
    const double A = advantage;
    for (int t = 0; t < n; t++) {
        double x = logp[t];
        /* The policy term. */
        int log_ratio_passes;
        double log_ratio = clamp_grad(x - old_logp[t], -20, 20, &log_ratio_passes);
        double ratio = exp(log_ratio);
        double dratio = log_ratio_passes ? ratio : 0;
        double pg1 = -A * ratio;
        double pg2 = -A * fmin(fmax(ratio, 1 - opts->clip_ratio_low), 1 + opts->clip_ratio_high);
        int clipped = pg2 > pg1;
        /* max(pg1, pg2): where they are equal the ratio lies inside the clip range (or A = 0), and
         * both branches carry −A·dratio; where pg2 wins, the clamp holds the ratio: no gradient. */
        double pg = clipped ? pg2 : pg1;
        double dpg = clipped ? 0 : -A * dratio;
        if (A < 0) {
            double pg3 = -A * opts->clip_ratio_c;
            if (pg > pg3) { /* dual clip: the loss of a very unlikely-made bad token is capped */
                pg = pg3;
                dpg = 0;
            } else if (pg == pg3) {
                dpg *= 0.5; /* torch.min splits the gradient of a tie */
            }
        }
        /* The KL term (k3); none without a reference. */
        double k3 = 0, dk3 = 0;
        if (ref_logp) {
            int kl_passes, k3_passes;
            double kl = clamp_grad((double)ref_logp[t] - x, -20, 20, &kl_passes);
            k3 = clamp_grad(exp(kl) - kl - 1, -10, 10, &k3_passes);
            dk3 = kl_passes && k3_passes ? 1 - exp(kl) : 0;
        }

        dloss_dlogp[t] = coef * (dpg + opts->kl_coef * dk3);
        st->loss += coef * (pg + opts->kl_coef * k3);
        st->pg_loss += coef * pg;
        st->kl += coef * k3;
        st->ppo_kl += -log_ratio;
        st->n_clipped += clipped;
    }
    st->n_tokens += n;
}
