/* backend_cpu_sample.c - the CPU backend's `sample` op: one token per row of logits, drawn as
 * struct sample_row says, with the row's entropy and log-probs.
 *
 * The candidates of a top-k or top-p cut are found without sorting all V tokens: the tokens above a
 * probability threshold are sorted, with the threshold lowered until that prefix is long enough (see
 * sorted_prefix). The logits are left as they were (the op may overwrite them; this one does not).
 * Rows are independent and run in parallel; each draws its uniform from its own (seed, counter), so
 * the result does not depend on the order or the thread count. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "backend_cpu.h"
#include "rng.h"

static int by_prob_desc(const void *a, const void *b, void *probs_arg) {
    const float *probs = probs_arg;
    float x = probs[*(const int *)a], y = probs[*(const int *)b];
    if (x != y) return x < y ? 1 : -1;
    return *(const int *)a - *(const int *)b; /* ties: lower id first, so the order is total */
}

/* Sorts into order[0..) the tokens whose probability is at least a threshold t, most likely first,
 * with t the largest of 1e-1, 1e-2, 1e-3, 1e-4, 1e-6, 1e-9, 0 for which that prefix of the full sorted
 * order is long enough: `need_count` tokens, or (need_count 0) a mass of need_mass. Sorting only that
 * prefix instead of all V tokens gives the same order for it (every token below t sorts after every
 * token at or above t). Returns the prefix length. */
static int sorted_prefix(int *order, const float *probs, int V, int need_count, double need_mass) {
    static const float thresholds[] = {1e-1f, 1e-2f, 1e-3f, 1e-4f, 1e-6f, 1e-9f, 0.0f};
    int n = 0;
    for (size_t k = 0; k < WHET_ARRAY_LEN(thresholds); k++) {
        double mass = 0;
        n = 0;
        for (int i = 0; i < V; i++)
            if (probs[i] >= thresholds[k]) {
                order[n++] = i;
                mass += probs[i];
            }
        if (need_count ? n >= need_count : mass >= need_mass) break;
    }
    qsort_r(order, (size_t)n, sizeof *order, by_prob_desc, (void *)probs);
    return n;
}

/* The first of order[0..n) at which the running mass passes u. */
static int draw_from(const float *probs, const int *order, int n, double u) {
    double acc = 0;
    for (int k = 0; k < n; k++) {
        acc += probs[order[k]];
        if (u < acc) return order[k];
    }
    return order[n - 1];
}

/* log-sum-exp of logits[V] and the entropy of their softmax in nats. */
static double lse_and_entropy(const float *logits, int V, float *entropy) {
    float max = logits[0];
    for (int i = 1; i < V; i++) max = logits[i] > max ? logits[i] : max;
    double z = 0, zx = 0;
    for (int i = 0; i < V; i++) {
        double d = (double)logits[i] - max, e = exp(d);
        z += e;
        zx += e * d;
    }
    *entropy = (float)(log(z) - zx / z);
    return max + log(z);
}

/* The k most likely tokens of logits[V] (ties: lower id first) and their log-probs. */
static void top_tokens(const float *logits, int V, double lse, int k, int *ids, float *lps) {
    int n = 0;
    for (int i = 0; i < V; i++) {
        if (n == k && logits[i] <= logits[ids[n - 1]]) continue;
        int j = n < k ? n++ : n - 1; /* insert i, dropping the last when full */
        while (j > 0 && logits[ids[j - 1]] < logits[i]) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = i;
    }
    for (int j = 0; j < n; j++) lps[j] = (float)(logits[ids[j]] - lse);
}

/* The token row `logits[V]` draws; probs (V floats) and order (V ints) are scratch. */
static int sample_one(const float *logits, float *probs, int *order, int V, const struct sample_row *r) {
    if (r->vocab > 0 && r->vocab < V) V = r->vocab; /* ids past the tokenizer's are never drawn */
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (r->temperature <= 0 || r->top_k == 1) return best;
    double sum = 0;
    float max = logits[best];
    for (int i = 0; i < V; i++) {
        probs[i] = expf((logits[i] - max) / r->temperature);
        sum += probs[i];
    }
    for (int i = 0; i < V; i++) probs[i] = (float)(probs[i] / sum);
    double u = rng_counter_uniform(r->seed, r->counter);
    if (r->top_k > 0 && r->top_k < V) {
        /* the k most likely tokens; top-p then applies to their renormalised distribution (the order
         * of Hugging Face's TopK and TopP warpers), that is to a share top_p of their mass */
        sorted_prefix(order, probs, V, r->top_k, 0);
        double kept = 0, mass = 0;
        for (int k = 0; k < r->top_k; k++) kept += probs[order[k]];
        int n = 0;
        while (n < r->top_k && (n == 0 || mass < r->top_p * kept)) mass += probs[order[n++]];
        return draw_from(probs, order, n, u * mass);
    }
    if (r->top_p < 1) {
        int n_sorted = sorted_prefix(order, probs, V, 0, r->top_p), n = 0;
        double mass = 0;
        while (n < n_sorted && mass < r->top_p) mass += probs[order[n++]];
        return draw_from(probs, order, n, u * mass);
    }
    double acc = 0;
    for (int i = 0; i < V; i++) {
        acc += probs[i];
        if (u < acc) return i;
    }
    return best; /* rounding left u above the total: the likeliest token */
}

void cpu_sample(struct backend *be, const struct sample_out *out, float *logits, const struct sample_row *rows, int n,
                int V) {
#pragma omp parallel if (n > 1 && (size_t)n * V >= (1 << 16))
    {
        int *order = malloc(sizeof(int) * (size_t)V);
        float *probs = malloc(sizeof(float) * (size_t)V);
        if (!order || !probs) abort();
#pragma omp for schedule(static)
        for (int i = 0; i < n; i++) {
            const float *row = logits + (size_t)i * V;
            const struct sample_row *r = &rows[i];
            float entropy;
            double lse = lse_and_entropy(row, V, &entropy);
            int k = r->top_logprobs < 0 ? 0 : r->top_logprobs > SAMPLE_TOP_MAX ? SAMPLE_TOP_MAX : r->top_logprobs;
            if (out->top_ids && k)
                top_tokens(row, V, lse, k, out->top_ids + (size_t)i * SAMPLE_TOP_MAX,
                           out->top_logprobs + (size_t)i * SAMPLE_TOP_MAX);
            int id = sample_one(row, probs, order, V, r);
            out->ids[i] = id;
            if (out->entropy) out->entropy[i] = entropy;
            if (out->logprob) out->logprob[i] = (float)(row[id] - lse);
        }
        free(order);
        free(probs);
    }
}
