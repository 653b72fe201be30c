/* grpo.h - the GRPO objective: group-normalised advantages and the clipped policy loss with a KL to
 * the reference, as per-token weights on the engine's negative log-likelihood (pure math, no I/O).
 *
 * The formulas are veRL's (verl/trainer/ppo/core_algos.py), names kept:
 *
 *   advantages (compute_grpo_outcome_advantage), for response i of a group of G with rewards r:
 *       A_i = (r_i − mean(r)) / (std(r) + 1e-6)     std unbiased (torch.std); G = 1: mean 0, std 1
 *       A_i =  r_i − mean(r)                         norm_adv_by_std false (Dr. GRPO)
 *   policy loss (compute_policy_loss_vanilla), per response token t, x = log π(t), old = log π_old(t):
 *       ratio = exp(clamp(x − old, −20, 20))
 *       pg1 = −A·ratio,  pg2 = −A·clamp(ratio, 1 − clip_ratio_low, 1 + clip_ratio_high)
 *       pg  = max(pg1, pg2);  for A < 0 also min(pg, −A·clip_ratio_c) (dual clip, c = 3)
 *       clip_frac = token-mean of [pg2 > pg1]
 *   KL to the reference (kl_penalty "low_var_kl", Schulman's k3), ref = log π_ref(t):
 *       kl = clamp(ref − x, −20, 20);  k3 = clamp(exp(kl) − kl − 1, −10, 10)
 *   aggregation (agg_loss) of a per-token quantity l over the step's responses:
 *       token-mean            Σ_all l / Σ_all 1
 *       seq-mean-token-mean   mean over responses of (Σ_resp l / |resp|)
 *       seq-mean-token-sum    mean over responses of  Σ_resp l
 *   loss = agg(pg) + kl_coef · agg(k3)                (the actor's use_kl_loss form)
 *
 * Every aggregation is a sum of coef_i · l_t with one coefficient per response (grpo_token_coef),
 * so the gradient is per token: d loss / d x_t = coef_i · (d pg_t/dx + kl_coef · d k3_t/dx), with
 *       d pg/dx  = −A·ratio where pg1 is the term taken (0 where clipped, where the dual clip binds
 *                  or the ±20 clamp is active; half at an exact tie of the dual clip, as torch.min)
 *       d k3/dx  = 1 − exp(ref − x)  (0 where a clamp is active)
 * and since the engine's nll is −x, the weight model_set_loss_weights takes is −d loss / d x.
 *
 * Departures from veRL, on purpose: the aggregation spans the whole optimizer step (all its
 * micro-batches), as veRL's global-token normalisation does, rather than one micro-batch scaled by
 * the accumulation count; token-mean divides by the token count without veRL's + 1e-8 (a response has
 * at least one token). Dynamic sampling (DAPO's filter_groups) drops the groups whose rewards are all
 * equal; trainer_grpo.c refills the batch with further prompts (max_gen_batches). */
#ifndef WHET_GRPO_H
#define WHET_GRPO_H

enum grpo_loss_agg { GRPO_TOKEN_MEAN, GRPO_SEQ_MEAN_TOKEN_MEAN, GRPO_SEQ_MEAN_TOKEN_SUM };

#define GRPO_ADV_EPS 1e-6     /* veRL's epsilon of compute_grpo_outcome_advantage */
#define GRPO_CLIP_RATIO_C 3.0 /* veRL's default clip_ratio_c (dual-clip PPO) */

/* "token-mean" … ; grpo_loss_agg_parse returns -1 for an unknown name. */
const char *grpo_loss_agg_name(enum grpo_loss_agg agg);
int grpo_loss_agg_parse(const char *name, enum grpo_loss_agg *out);

/* adv[n_groups * group_size] from rewards of the same layout (group-major). */
void grpo_advantages(double *adv, const double *rewards, int n_groups, int group_size, int norm_adv_by_std);

/* keep[g] = 0 when every reward of group g is the same (its advantages are all 0: it teaches nothing),
 * else 1. Returns the number of groups kept. */
int grpo_filter_groups(int *keep, const double *rewards, int n_groups, int group_size);

/* The aggregation coefficient of each token of a response of seq_len tokens in a step that trains
 * step_tokens response tokens in step_seqs responses. */
double grpo_token_coef(enum grpo_loss_agg agg, int seq_len, long long step_tokens, int step_seqs);

struct grpo_loss_opts {
    double clip_ratio_low, clip_ratio_high, clip_ratio_c;
    double kl_coef;
};

/* Sums over the tokens given so far; the aggregated figures already carry the coefficients. */
struct grpo_loss_stats {
    double loss;      /* Σ coef·(pg + kl_coef·k3): the step's loss */
    double pg_loss;   /* Σ coef·pg */
    double kl;        /* Σ coef·k3 (agg of the k3 KL, what veRL reports as kl_loss) */
    double ppo_kl;    /* Σ (old − x): divide by n_tokens for veRL's ppo_kl */
    long long n_tokens;
    long long n_clipped; /* tokens with pg2 > pg1: n_clipped / n_tokens is veRL's pg_clipfrac */
};

/* One response's n tokens: log-probs under the policy being trained (logp), at rollout (old_logp) and
 * under the reference (ref_logp), its advantage and aggregation coefficient. Writes
 * dloss_dlogp[n] and adds to *st. ref_logp NULL leaves the KL term out (k3 and its gradient 0, st->kl
 * unchanged): with kl_coef 0 the same loss and gradient, bit for bit, without a reference pass. */
void grpo_response_loss(double *dloss_dlogp, struct grpo_loss_stats *st, const float *logp, const float *old_logp,
                        const float *ref_logp, int n, double advantage, double coef,
                        const struct grpo_loss_opts *opts);

#endif
