/* dpo.c - the DPO loss, the reference pass with the adapter off, and the weighted backward (see dpo.h). */
#include "dpo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model_plan.h"

static struct model_batch model_batch_of(const struct dpo_batch *b) {
    return (struct model_batch){b->B, b->T, b->ids, b->positions, b->seq_ids, b->targets, NULL};
}

/* logps[side] = −Σ nll over the scored tokens of each sequence, from a forward pass's nll[B*T] of b. */
static void sum_logps(double *logps, const float *nll, const struct dpo_batch *b) {
    size_t N = (size_t)b->B * b->T;
    memset(logps, 0, sizeof(double) * 2 * (size_t)b->n_pairs);
    for (size_t t = 0; t < N; t++)
        if (b->side[t] >= 0) logps[b->side[t]] -= nll[t];
}

/* The token nlls of a forward pass of b: nll[B*T], the caller's to free. */
static float *forward_nll(struct model *m, const struct dpo_batch *b, struct whet_err *err) {
    struct model_batch mb = model_batch_of(b);
    float loss;
    if (model_forward(m, &mb, &loss, err)) return NULL;
    float *nll = xmalloc((size_t)b->B * b->T * sizeof *nll);
    model_get_token_losses(m, nll);
    return nll;
}

int dpo_sequence_logps(double *logps, struct model *m, const struct dpo_batch *b, struct whet_err *err) {
    float *nll = forward_nll(m, b, err);
    if (!nll) return -1;
    sum_logps(logps, nll, b);
    free(nll);
    return 0;
}

int dpo_reference_logps(double *logps, struct model *m, struct model *ref, const struct dpo_batch *b,
                        struct whet_err *err) {
    if (ref) return dpo_sequence_logps(logps, ref, b, err);
    if (!model_is_lora(m))
        return whet_errf(err, "dpo: the reference of a full fine-tune needs its own frozen model");
    model_set_adapter_enabled(m, 0);
    int rc = dpo_sequence_logps(logps, m, b, err);
    model_set_adapter_enabled(m, 1);
    return rc;
}

/* Share `share` of `shares` of the batches of an epoch of n_rows rows: [*lo, *hi). */
static void reference_share(int n_rows, int batch_rows, int share, int shares, int64_t *lo, int64_t *hi) {
    mp_shard((n_rows + batch_rows - 1) / batch_rows, shares, share, lo, hi);
}

int dpo_reference_passes(const struct dpo_dataset *ds, int batch_rows, int share, int shares) {
    struct sft_epoch ep;
    sft_epoch_pack(&ep, &ds->pairs, 0, 0, 0, batch_rows);
    int64_t lo, hi;
    reference_share(ep.n_rows, batch_rows, share, shares, &lo, &hi);
    sft_epoch_free(&ep);
    return (int)(hi - lo);
}

int dpo_reference_table(double *table, struct model *m, struct model *ref, const struct dpo_dataset *ds,
                        int batch_rows, int share, int shares, struct dpo_batch *scratch, struct whet_err *err) {
    struct sft_epoch ep;
    sft_epoch_pack(&ep, &ds->pairs, 0, 0, 0, batch_rows);
    double *logps = xmalloc(sizeof(double) * 2 * (size_t)(dpo_num_pairs(ds) ? dpo_num_pairs(ds) : 1));
    int rc = 0;
    int64_t lo, hi;
    reference_share(ep.n_rows, batch_rows, share, shares, &lo, &hi);
    for (int row = (int)lo * batch_rows; row < ep.n_rows && row < (int)hi * batch_rows && !rc; row += batch_rows) {
        dpo_batch_fill(scratch, ds, &ep, row, batch_rows);
        rc = dpo_reference_logps(logps, m, ref, scratch, err);
        for (int p = 0; p < scratch->n_pairs && !rc; p++) {
            table[2 * scratch->pairs[p]] = logps[2 * p];
            table[2 * scratch->pairs[p] + 1] = logps[2 * p + 1];
        }
    }
    free(logps);
    sft_epoch_free(&ep);
    return rc;
}

void dpo_batch_reference(double *out, const double *table, const struct dpo_batch *b) {
    for (int p = 0; p < b->n_pairs; p++) {
        out[2 * p] = table[2 * b->pairs[p]];
        out[2 * p + 1] = table[2 * b->pairs[p] + 1];
    }
}

double dpo_pair_loss(double *dloss_dz, double policy_chosen, double policy_rejected, double ref_chosen,
                     double ref_rejected, double beta) {
    double z = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected));
    /* −log σ(z) = log(1 + e^−z), written so neither branch overflows; d/dz = σ(z) − 1 = −σ(−z). */
    double loss = z > 0 ? log1p(exp(-z)) : -z + log1p(exp(z));
    if (dloss_dz) *dloss_dz = -1.0 / (1.0 + exp(z));
    return loss;
}

static void add_stats(struct dpo_stats *st, const double *logps, const double *ref_logps, double beta, int n_pairs,
                      double *dloss_dz) {
    for (int p = 0; p < n_pairs; p++) {
        double pc = logps[2 * p], pr = logps[2 * p + 1], rc = ref_logps[2 * p], rr = ref_logps[2 * p + 1];
        double z = beta * ((pc - rc) - (pr - rr));
        st->loss_sum += dpo_pair_loss(dloss_dz ? &dloss_dz[p] : NULL, pc, pr, rc, rr, beta);
        st->margin_sum += z;
        st->n_correct += z > 0;
        st->chosen_logps += pc;
        st->rejected_logps += pr;
    }
    st->n_pairs += n_pairs;
}

int dpo_evaluate(struct model *m, const struct dpo_batch *b, const double *ref_logps, double beta,
                 struct dpo_stats *st, struct whet_err *err) {
    double *logps = xmalloc(sizeof(double) * 2 * (size_t)(b->n_pairs ? b->n_pairs : 1));
    int rc = dpo_sequence_logps(logps, m, b, err);
    if (!rc) add_stats(st, logps, ref_logps, beta, b->n_pairs, NULL);
    free(logps);
    return rc;
}

void dpo_loss_weights(float *weights, const struct dpo_batch *b, const float *nll, const double *ref_logps,
                      double beta, double loss_scale, struct dpo_stats *st) {
    size_t N = (size_t)b->B * b->T, P = (size_t)(b->n_pairs ? b->n_pairs : 1);
    double *logps = xmalloc(sizeof(double) * 2 * P), *dloss_dz = xmalloc(sizeof(double) * P);
    sum_logps(logps, nll, b);
    add_stats(st, logps, ref_logps, beta, b->n_pairs, dloss_dz);
    /* The engine's backward gives d(Σ w·nll); with log π = −Σ nll, the weight of a token of the
     * chosen response is −loss_scale·β·dloss/dz, of the rejected one +loss_scale·β·dloss/dz. */
    for (size_t t = 0; t < N; t++) {
        int s = b->side[t];
        double g = s < 0 ? 0 : loss_scale * beta * dloss_dz[s / 2];
        weights[t] = (float)(s < 0 ? 0 : s % 2 ? g : -g);
    }
    free(dloss_dz);
    free(logps);
}

int dpo_forward_backward(struct model *m, const struct dpo_batch *b, const double *ref_logps, double beta,
                         double loss_scale, struct dpo_stats *st, struct whet_err *err) {
    float *nll = forward_nll(m, b, err);
    if (!nll) return -1;
    float *weights = xmalloc((size_t)b->B * b->T * sizeof *weights);
    dpo_loss_weights(weights, b, nll, ref_logps, beta, loss_scale, st);
    int rc = model_set_loss_weights(m, weights, err) || model_backward(m, 1.0f, err) ? -1 : 0;
    free(weights);
    free(nll);
    return rc;
}
