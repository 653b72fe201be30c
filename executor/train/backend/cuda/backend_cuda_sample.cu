/* backend_cuda_sample.cu - the CUDA backend's `sample` op: a block per row of logits, drawing the same
 * token as backend_cpu_sample.c for the same inputs, with the row's entropy, the drawn token's log-prob
 * and the most likely tokens' log-probs (at temperature 1, over all V). The logits are left as they
 * were: the tempered probabilities go to scratch.
 *
 * Same ids as the CPU: each step is the CPU's arithmetic. The tempered probabilities are
 * (float)exp((double)((x - max) / T)), which rounds like glibc's expf (within 0.502 ULP) where CUDA's
 * expf may be 2 ULP off; their normaliser is summed in double; the uniform is rng_counter_uniform's
 * (the same mixer, written here for the device); the candidates of a top-k or top-p cut are sorted
 * by (probability descending, id ascending), a total order, and one thread walks them summing in that
 * order as the CPU does. Only the order of the block's double sums differs from the CPU's loop, which
 * moves a boundary by ~1e-16 of the mass: results differ only where a draw is within float rounding of
 * a boundary.
 *
 * The sort: the tokens at or above a probability threshold (chosen as the CPU's sorted_prefix chooses
 * it) become 64-bit keys (~probability bits, id), and a bitonic network sorts them ascending in
 * scratch. Rows run SAMPLE_ROWS_MAX at a time so the scratch stays bounded (for Qwen's 151,936-token
 * vocabulary, 2.6 MiB a row: keys and probabilities). */
#include <math.h>

#include "backend_cuda.h"

#ifndef SAMPLE_THREADS /* the emulated op test (tests/unit/backend/cuda_emu) runs fewer: its threads are fibers */
#define SAMPLE_THREADS 512
#endif
#define SAMPLE_ROWS_MAX 64

/* rng_counter_uniform of common/rng.h: splitmix64's finaliser of seed + golden * (counter + 1). */
__device__ inline double counter_uniform(uint64_t seed, uint64_t counter) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (counter + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* The smallest power of two >= n (n >= 1). */
__device__ inline int pow2_at_least(int n) {
    int p = 1;
    while (p < n) p <<= 1;
    return p;
}

/* Sorts keys[0..n) ascending (n a power of two) with the whole block. */
__device__ void bitonic_sort(uint64_t *keys, int n) {
    for (int k = 2; k <= n; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                int partner = i ^ j;
                if (partner <= i) continue;
                uint64_t a = keys[i], b = keys[partner];
                if ((i & k) == 0 ? a > b : a < b) keys[i] = b, keys[partner] = a;
            }
            __syncthreads();
        }
}

/* The first of the sorted candidates at which the running mass passes u (backend_cpu_sample.c's
 * draw_from); one thread. */
__device__ int draw_from(const float *probs, const uint64_t *sorted, int n, double u) {
    double acc = 0;
    for (int k = 0; k < n; k++) {
        acc += probs[(uint32_t)sorted[k]];
        if (u < acc) return (int)(uint32_t)sorted[k];
    }
    return (int)(uint32_t)sorted[n - 1];
}

/* The token row `logit` draws as r says (backend_cpu_sample.c's sample_one), to thread 0 (the others
 * get -1). x (V floats) and key (a power of two >= V) are the row's scratch, chunk_mass and n_candidates
 * shared memory. The whole block calls it. */
__device__ int draw(float *x, uint64_t *key, double *chunk_mass, int *n_candidates, const float *logit, int V,
                    struct sample_row r) {
    int tid = threadIdx.x;
    if (r.vocab > 0 && r.vocab < V) V = r.vocab; /* ids past the tokenizer's are never drawn */
    float mx = -INFINITY;
    int best = INT32_MAX;
    for (int i = tid; i < V; i += blockDim.x)
        if (best == INT32_MAX || logit[i] > mx) mx = logit[i], best = i;
    block_argmax(&mx, &best);
    if (r.temperature <= 0 || r.top_k == 1) return tid == 0 ? best : -1;

    double sum = 0;
    for (int i = tid; i < V; i += blockDim.x) sum += x[i] = (float)exp((double)((logit[i] - mx) / r.temperature));
    sum = block_sum(sum);
    for (int i = tid; i < V; i += blockDim.x) x[i] = (float)(x[i] / sum);
    __syncthreads();
    double u = counter_uniform(r.seed, r.counter);

    int cut_k = r.top_k > 0 && r.top_k < V, cut_p = r.top_p < 1;
    if (cut_k || cut_p) {
        /* the candidates: every token at or above the largest threshold that keeps enough of them (a
         * little more mass than top-p asks, so the walk below never runs out of candidates on rounding) */
        const float thresholds[] = {1e-1f, 1e-2f, 1e-3f, 1e-4f, 1e-6f, 1e-9f, 0.0f};
        float th = 0;
        for (int t = 0; t < 7; t++) {
            int count = 0;
            double mass = 0;
            for (int i = tid; i < V; i += blockDim.x)
                if (x[i] >= thresholds[t]) count++, mass += x[i];
            count = block_sum(count);
            mass = block_sum(mass);
            th = thresholds[t];
            if (cut_k ? count >= r.top_k : mass >= (double)r.top_p + 1e-6) break;
        }
        if (tid == 0) *n_candidates = 0;
        __syncthreads();
        /* slots come in any order; the sort's order is total, so the result does not depend on it */
        for (int i = tid; i < V; i += blockDim.x)
            if (x[i] >= th) {
                int slot = atomicAdd(n_candidates, 1);
                key[slot] = (uint64_t)(0xffffffffu - __float_as_uint(x[i])) << 32 | (uint32_t)i;
            }
        __syncthreads();
        int n = *n_candidates, padded = pow2_at_least(n);
        for (int i = n + tid; i < padded; i += blockDim.x) key[i] = UINT64_MAX; /* sorts last */
        __syncthreads();
        bitonic_sort(key, padded);
        if (tid != 0) return -1;
        double mass = 0;
        int take = 0;
        if (cut_k) {
            /* top-p applies to the renormalised top-k distribution (Hugging Face's TopK then TopP) */
            double kept = 0;
            for (int j = 0; j < r.top_k; j++) kept += x[(uint32_t)key[j]];
            while (take < r.top_k && (take == 0 || mass < r.top_p * kept)) mass += x[(uint32_t)key[take++]];
        } else {
            while (take < n && mass < r.top_p) mass += x[(uint32_t)key[take++]];
        }
        return draw_from(x, key, take, u * mass);
    }

    /* no cut: the first id at which the running mass (in id order) passes u; each thread sums a
     * contiguous chunk, then one thread walks the chunks and the chunk that passes u */
    int chunk = (V + (int)blockDim.x - 1) / (int)blockDim.x, lo = tid * chunk, hi = min(lo + chunk, V);
    double m = 0;
    for (int i = lo; i < hi; i++) m += x[i];
    chunk_mass[tid] = m;
    __syncthreads();
    if (tid != 0) return -1;
    double acc = 0;
    for (int t = 0; t < (int)blockDim.x; t++) {
        int a = t * chunk, b = min(a + chunk, V);
        if (!(u < acc + chunk_mass[t])) {
            acc += chunk_mass[t];
            continue;
        }
        for (int i = a; i < b; i++) {
            acc += x[i];
            if (u < acc) return i;
        }
    }
    return best; /* rounding left u above the total: the likeliest token */
}

/* Block b handles row row0 + b; keys (key_stride a row) and probs (V a row) are the scratch of
 * SAMPLE_ROWS_MAX rows. */
__global__ void sample(struct sample_out out, const float *logits, const struct sample_row *rows, uint64_t *keys,
                       float *probs, int key_stride, int row0, int V) {
    __shared__ int n_candidates;
    __shared__ double chunk_mass[SAMPLE_THREADS];
    int row = row0 + blockIdx.x, tid = threadIdx.x;
    const float *logit = logits + (size_t)row * V;
    struct sample_row r = rows[row];

    /* over all V at temperature 1, before anything is cut: the log-sum-exp, the entropy and the most
     * likely tokens' log-probs */
    float top = -INFINITY;
    int top_id = INT32_MAX;
    for (int i = tid; i < V; i += blockDim.x)
        if (top_id == INT32_MAX || logit[i] > top) top = logit[i], top_id = i;
    block_argmax(&top, &top_id);
    double z = 0, zx = 0;
    for (int i = tid; i < V; i += blockDim.x) {
        double d = (double)logit[i] - top, e = exp(d);
        z += e;
        zx += e * d;
    }
    z = block_sum(z);
    zx = block_sum(zx);
    double lse = top + log(z);
    if (out.entropy && tid == 0) out.entropy[row] = (float)(log(z) - zx / z);
    int k = r.top_logprobs < 0 ? 0 : r.top_logprobs > SAMPLE_TOP_MAX ? SAMPLE_TOP_MAX : r.top_logprobs;
    if (out.top_ids && k) {
        /* k rounds, each the first token (logit descending, id ascending) after the one before */
        float prev = top;
        int prev_id = top_id;
        for (int j = 0; j < k && prev_id != INT32_MAX; j++) {
            if (tid == 0) {
                out.top_ids[(size_t)row * SAMPLE_TOP_MAX + j] = prev_id;
                out.top_logprobs[(size_t)row * SAMPLE_TOP_MAX + j] = (float)(prev - lse);
            }
            float next = -INFINITY;
            int next_id = INT32_MAX;
            for (int i = tid; i < V; i += blockDim.x)
                if ((logit[i] < prev || (logit[i] == prev && i > prev_id)) && (next_id == INT32_MAX || logit[i] > next))
                    next = logit[i], next_id = i;
            block_argmax(&next, &next_id);
            prev = next, prev_id = next_id;
        }
    }

    int id = draw(probs + (size_t)blockIdx.x * V, keys + (size_t)blockIdx.x * key_stride, chunk_mass, &n_candidates,
                  logit, V, r);
    if (tid == 0) {
        out.ids[row] = id;
        if (out.logprob) out.logprob[row] = (float)(logit[id] - lse);
    }
}

void cuda_sample(struct backend *be, const struct sample_out *out, float *logits, const struct sample_row *rows, int n,
                 int V) {
    struct cuda_ctx *c = cuda_begin(be);
    if (n <= 0 || V <= 0) return;
    int key_stride = 1;
    while (key_stride < V) key_stride <<= 1;
    int per_launch = n < SAMPLE_ROWS_MAX ? n : SAMPLE_ROWS_MAX;
    size_t key_bytes = sizeof(uint64_t) * (size_t)key_stride * per_launch;
    uint64_t *keys = (uint64_t *)cuda_scratch(be, key_bytes + sizeof(float) * (size_t)V * per_launch);
    float *probs = (float *)(keys + (size_t)key_stride * per_launch);
    for (int row0 = 0; row0 < n; row0 += per_launch) {
        int rows_now = n - row0 < per_launch ? n - row0 : per_launch;
        sample<<<rows_now, SAMPLE_THREADS, 0, c->stream>>>(*out, logits, rows, keys, probs, key_stride, row0, V);
        LAUNCH_CHECK();
    }
}
