/* dpo.h - the DPO objective (Rafailov et al. 2023) on top of the model engine (model.h).
 *
 * For a pair with chosen sequence c and rejected sequence r, with log π(y|x) the SUM of the
 * log-probabilities of the response's scored tokens under the policy and ref(·) the same under the
 * reference model:
 *
 *     z    = β · ((log π(c) − ref(c)) − (log π(r) − ref(r)))
 *     loss = −log σ(z)                                   (mean over the pairs of a step)
 *
 * as TRL's DPOTrainer computes it with loss_type "sigmoid" and no label smoothing. Reported per step:
 * reward_margin, the mean of β·((log π(c) − ref(c)) − (log π(r) − ref(r))) (= z), preference_accuracy,
 * the share of pairs with z > 0, and the mean chosen / rejected log-probabilities under the policy.
 *
 * The reference: with LoRA, the policy itself with the adapter switched off
 * (model_set_adapter_enabled), which gives the base model's outputs bit for bit without a second
 * copy of the model. For full fine-tuning the caller passes a separate
 * frozen model (loaded for inference) as the reference. Since the reference never changes, the
 * trainer computes it once per pair (dpo_reference_table) rather than at every step.
 *
 * The gradient: d loss / d log π(c) = −β·(1 − σ(z)) and d loss / d log π(r) = +β·(1 − σ(z)), the same
 * for every token of a response, and d log π / d nll_t = −1. So a micro-batch takes one forward
 * pass that measures log π, then sets those per-token weights on the nll (model_set_loss_weights)
 * and goes back through that same pass. */
#ifndef WHET_DPO_H
#define WHET_DPO_H

#include "dpo_data.h"
#include "model.h"
#include "util.h"

/* Sums over one or more micro-batches; divide by n_pairs for the step's means. */
struct dpo_stats {
    int n_pairs;
    int n_correct;          /* pairs with z > 0 */
    double loss_sum;        /* sum of −log σ(z) */
    double margin_sum;      /* sum of z */
    double chosen_logps;    /* sum of log π(c) */
    double rejected_logps;  /* sum of log π(r) */
};

/* The 2*n_pairs sequence log-probabilities of a batch under the model's current weights:
 * logps[2p] for pair p's chosen sequence, logps[2p+1] for its rejected one. */
int dpo_sequence_logps(double *logps, struct model *m, const struct dpo_batch *b, struct whet_err *err);

/* The same under the reference: `ref` when not NULL (full fine-tuning), else `m` with its LoRA
 * adapter switched off (m must be a LoRA model). m's weights are as they were on return. */
int dpo_reference_logps(double *logps, struct model *m, struct model *ref, const struct dpo_batch *b,
                        struct whet_err *err);

/* The reference log-probs of every pair of `ds`, computed once: the reference never changes, so a
 * run pays for it once instead of at every step (TRL's precompute_ref_log_probs). table[2i] and
 * table[2i+1] for pair i's chosen and rejected sequences. Batches of batch_rows rows of the
 * unshuffled packing, so a run and its resumption get the same table. `scratch` is reused. A rank of a
 * gang computes only its share: part `share` of `shares` contiguous parts of those batches (the other
 * entries are not written; the gang sums zeroed tables). */
int dpo_reference_table(double *table, struct model *m, struct model *ref, const struct dpo_dataset *ds,
                        int batch_rows, int share, int shares, struct dpo_batch *scratch, struct whet_err *err);
/* The forward passes (batches) that share computes of that table. */
int dpo_reference_passes(const struct dpo_dataset *ds, int batch_rows, int share, int shares);
/* A batch's reference log-probs from such a table: out[2*n_pairs], in the batch's pair order. */
void dpo_batch_reference(double *out, const double *table, const struct dpo_batch *b);

/* −log σ(z) for one pair, and d loss / d z. */
double dpo_pair_loss(double *dloss_dz, double policy_chosen, double policy_rejected, double ref_chosen,
                     double ref_rejected, double beta);

/* Forward and backward of one micro-batch: ACCUMULATES into m's gradients the gradient of
 * loss_scale · Σ_pairs loss (loss_scale = 1 / pairs in the step for the mean), and adds the batch's
 * figures to *st. ref_logps[2*n_pairs] from dpo_reference_logps. */
int dpo_forward_backward(struct model *m, const struct dpo_batch *b, const double *ref_logps, double beta,
                         double loss_scale, struct dpo_stats *st, struct whet_err *err);

/* The loss of dpo_forward_backward from a forward pass of b already made, its token nlls nll[B*T] (a
 * co-trained run's rows of a shared pass): adds the batch's figures to *st and sets weights[B*T], the
 * token weights (model_set_loss_weights) whose backward pass gives the gradient of loss_scale · Σ loss. */
void dpo_loss_weights(float *weights, const struct dpo_batch *b, const float *nll, const double *ref_logps,
                      double beta, double loss_scale, struct dpo_stats *st);

/* The figures of one micro-batch without any gradient (validation). */
int dpo_evaluate(struct model *m, const struct dpo_batch *b, const double *ref_logps, double beta,
                 struct dpo_stats *st, struct whet_err *err);

#endif
