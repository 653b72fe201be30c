/* backend_cuda_attention.cu - causal attention over packed segments, forward and backward, and decode
 * attention against a KV cache, on the device in fp32.
 *
 * A warp owns one query row (token, head): each lane holds up to MAX_DIMS_PER_LANE of the head's
 * dimensions (d = lane + 32k), dot products are warp sums, and the softmax is the online one of
 * FlashAttention (running maximum and sum), so no score matrix is ever stored: the forward keeps the
 * log-sum-exp per row and the backward recomputes the probabilities from it. Memory is O(N); work is
 * the plain O(L^2 D) per segment and head, with keys read from global memory (L2) rather than staged
 * through shared-memory tiles: simple first, a tiled kernel later behind the same op.
 *
 * The backward runs as three kernels, none with atomics: delta (dO . O per row, O recomputed), dq (a
 * warp per query row over its keys) and dk/dv (a warp per key row over the queries that see it, for all
 * the query heads of its GQA group), so every sum has a fixed order. */
#include <math.h>

#include "backend_cuda.h"

#define MAX_DIMS_PER_LANE 8 /* head dim up to 256 */
#define ATT_WARPS 4         /* query rows (warps) per block */

static void check_head_dim(int D) {
    if (D > 32 * MAX_DIMS_PER_LANE || D <= 0) {
        fprintf(stderr, "whet: CUDA backend: attention with head dim %d: the kernels hold at most %d per head\n", D,
                32 * MAX_DIMS_PER_LANE);
        abort();
    }
}

/* Loads the head's D values at p into this lane's registers (zero past D). */
__device__ inline void load_head(float r[MAX_DIMS_PER_LANE], const float *p, int D, int lane) {
#pragma unroll
    for (int k = 0; k < MAX_DIMS_PER_LANE; k++) {
        int d = lane + 32 * k;
        r[k] = d < D ? p[d] : 0.0f;
    }
}

/* The dot product of a head held in registers with D values at p, in every lane. */
__device__ inline float dot_head(const float r[MAX_DIMS_PER_LANE], const float *p, int D, int lane) {
    float s = 0;
#pragma unroll
    for (int k = 0; k < MAX_DIMS_PER_LANE; k++) {
        int d = lane + 32 * k;
        if (d < D) s += r[k] * p[d];
    }
    return warp_sum(s);
}

/* The online softmax of one query row (in registers) over key and value rows r0 .. r1-1 (key r at
 * k + r*ldk, value r at v + r*ldv): acc = sum_r exp(s_r - mx) v_r and *sum = sum_r exp(s_r - mx), with
 * s_r = scale * q . k_r and *mx their maximum. */
__device__ inline void attend(float acc[MAX_DIMS_PER_LANE], float *mx_out, float *sum_out,
                              const float qr[MAX_DIMS_PER_LANE], const float *k, int ldk, const float *v, int ldv,
                              int r0, int r1, int D, int lane, float scale) {
    for (int x = 0; x < MAX_DIMS_PER_LANE; x++) acc[x] = 0;
    float mx = -INFINITY, sum = 0;
    for (int r = r0; r < r1; r++) {
        float s = dot_head(qr, k + (size_t)r * ldk, D, lane) * scale;
        float m_new = fmaxf(mx, s), correction = expf(mx - m_new), p = expf(s - m_new);
        sum = sum * correction + p;
        const float *vr = v + (size_t)r * ldv;
#pragma unroll
        for (int x = 0; x < MAX_DIMS_PER_LANE; x++) {
            int d = lane + 32 * x;
            acc[x] = acc[x] * correction + (d < D ? p * vr[d] : 0.0f);
        }
        mx = m_new;
    }
    *mx_out = mx, *sum_out = sum;
}

/* o[d] = acc / sum for this lane's dimensions (0 for a row that saw nothing). */
__device__ inline void store_head(float *o, const float acc[MAX_DIMS_PER_LANE], float sum, int D, int lane) {
#pragma unroll
    for (int x = 0; x < MAX_DIMS_PER_LANE; x++) {
        int d = lane + 32 * x;
        if (d < D) o[d] = sum > 0 ? acc[x] / sum : 0.0f;
    }
}

/* The row a warp owns in a grid of (segment, head, block of ATT_WARPS rows): row i = z*ATT_WARPS + w of
 * segment x, token t = start + i, head y. */
struct att_row {
    struct attn_segment seg;
    int t, head, lane;
};

/* This warp's row, or false when the row is past its segment's end (the whole warp returns). */
__device__ inline bool att_row_of(struct att_row *w, const struct attn_segment *segs) {
    w->seg = segs[blockIdx.x];
    int i = blockIdx.z * ATT_WARPS + (threadIdx.x >> 5);
    w->t = w->seg.start + i, w->head = blockIdx.y, w->lane = threadIdx.x & 31;
    return i < w->seg.len;
}

/* attend() for the warp's query row over the tokens it sees (its segment's start .. t). */
__device__ inline void attend_query(float acc[MAX_DIMS_PER_LANE], float *mx, float *sum, const struct att_row *w,
                                    const float *q, int ldq, const float *k, int ldk, const float *v, int ldv, int H,
                                    int HKV, int D, float scale) {
    int kh = w->head / (H / HKV);
    float qr[MAX_DIMS_PER_LANE];
    load_head(qr, q + (size_t)w->t * ldq + (size_t)w->head * D, D, w->lane);
    attend(acc, mx, sum, qr, k + (size_t)kh * D, ldk, v + (size_t)kh * D, ldv, w->seg.start, w->t + 1, D, w->lane,
           scale);
}

/* Grid (segment, head, block of ATT_WARPS query rows): warp w of block z has row i = z*ATT_WARPS + w
 * of its segment, token t = start + i, which sees tokens start..t. */
__global__ void attention_forward(float *out, float *lse, const float *q, int ldq, const float *k, int ldk,
                                  const float *v, int ldv, const struct attn_segment *segs, int N, int H, int HKV,
                                  int D, float scale) {
    struct att_row w;
    if (!att_row_of(&w, segs)) return;
    float acc[MAX_DIMS_PER_LANE], mx, sum;
    attend_query(acc, &mx, &sum, &w, q, ldq, k, ldk, v, ldv, H, HKV, D, scale);
    store_head(out + (size_t)w.t * H * D + (size_t)w.head * D, acc, sum, D, w.lane);
    if (w.lane == 0) lse[(size_t)w.head * N + w.t] = mx + logf(sum);
}

/* delta[h, t] = dO[t,h] . O[t,h], with O recomputed (as the forward computed it). */
__global__ void attention_backward_delta(float *delta, const float *dout, const float *q, int ldq,
                                         const float *k, int ldk, const float *v, int ldv,
                                         const struct attn_segment *segs, int N, int H, int HKV, int D, float scale) {
    struct att_row w;
    if (!att_row_of(&w, segs)) return;
    float o[MAX_DIMS_PER_LANE], mx, sum;
    attend_query(o, &mx, &sum, &w, q, ldq, k, ldk, v, ldv, H, HKV, D, scale);
    for (int x = 0; x < MAX_DIMS_PER_LANE; x++) o[x] /= sum;
    float dd = dot_head(o, dout + (size_t)w.t * H * D + (size_t)w.head * D, D, w.lane);
    if (w.lane == 0) delta[(size_t)w.head * N + w.t] = dd;
}

/* dq[t,h] += scale * sum_u P[t,u] (dO[t] . V[u] - delta[t]) K[u], a warp per query row. */
__global__ void attention_backward_dq(float *dq, int lddq, const float *delta, const float *dout, const float *lse,
                                      const float *q, int ldq, const float *k, int ldk, const float *v, int ldv,
                                      const struct attn_segment *segs, int N, int H, int HKV, int D, float scale) {
    struct att_row w;
    if (!att_row_of(&w, segs)) return;
    int t = w.t, h = w.head, kh = h / (H / HKV), lane = w.lane;
    float qr[MAX_DIMS_PER_LANE], dor[MAX_DIMS_PER_LANE], acc[MAX_DIMS_PER_LANE];
    float l = lse[(size_t)h * N + t], dl = delta[(size_t)h * N + t];
    load_head(qr, q + (size_t)t * ldq + (size_t)h * D, D, lane);
    load_head(dor, dout + (size_t)t * H * D + (size_t)h * D, D, lane);
    for (int x = 0; x < MAX_DIMS_PER_LANE; x++) acc[x] = 0;
    for (int u = w.seg.start; u <= t; u++) {
        const float *ku = k + (size_t)u * ldk + (size_t)kh * D;
        float p = expf(dot_head(qr, ku, D, lane) * scale - l);
        float ds = p * (dot_head(dor, v + (size_t)u * ldv + (size_t)kh * D, D, lane) - dl);
#pragma unroll
        for (int x = 0; x < MAX_DIMS_PER_LANE; x++) {
            int d = lane + 32 * x;
            if (d < D) acc[x] += ds * ku[d];
        }
    }
    float *g = dq + (size_t)t * lddq + (size_t)h * D;
#pragma unroll
    for (int x = 0; x < MAX_DIMS_PER_LANE; x++) {
        int d = lane + 32 * x;
        if (d < D) g[d] += scale * acc[x];
    }
}

/* Grid (segment, kv head, block of key rows): the warp of key row j (token u) sums, over the query heads
 * of its group and the queries t >= u of its segment, dv[u] += P[t,u] dO[t] and
 * dk[u] += scale * P[t,u] (dO[t] . V[u] - delta[t]) Q[t]. */
__global__ void attention_backward_dkdv(float *dk, int lddk, float *dv, int lddv, const float *delta,
                                        const float *dout, const float *lse, const float *q, int ldq, const float *k,
                                        int ldk, const float *v, int ldv, const struct attn_segment *segs, int N, int H,
                                        int HKV, int D, float scale) {
    struct att_row w;
    if (!att_row_of(&w, segs)) return;
    int u = w.t, kh = w.head, lane = w.lane, group = H / HKV;
    float kr[MAX_DIMS_PER_LANE], vr[MAX_DIMS_PER_LANE], dka[MAX_DIMS_PER_LANE], dva[MAX_DIMS_PER_LANE];
    load_head(kr, k + (size_t)u * ldk + (size_t)kh * D, D, lane);
    load_head(vr, v + (size_t)u * ldv + (size_t)kh * D, D, lane);
    for (int x = 0; x < MAX_DIMS_PER_LANE; x++) dka[x] = dva[x] = 0;
    for (int h = kh * group; h < (kh + 1) * group; h++)
        for (int t = u; t < w.seg.start + w.seg.len; t++) {
            const float *qt = q + (size_t)t * ldq + (size_t)h * D, *dot = dout + (size_t)t * H * D + (size_t)h * D;
            float p = expf(dot_head(kr, qt, D, lane) * scale - lse[(size_t)h * N + t]);
            float ds = p * (dot_head(vr, dot, D, lane) - delta[(size_t)h * N + t]);
#pragma unroll
            for (int x = 0; x < MAX_DIMS_PER_LANE; x++) {
                int d = lane + 32 * x;
                if (d < D) {
                    dva[x] += p * dot[d];
                    dka[x] += ds * qt[d];
                }
            }
        }
    float *gk = dk + (size_t)u * lddk + (size_t)kh * D, *gv = dv + (size_t)u * lddv + (size_t)kh * D;
#pragma unroll
    for (int x = 0; x < MAX_DIMS_PER_LANE; x++) {
        int d = lane + 32 * x;
        if (d < D) {
            gk[d] += scale * dka[x];
            gv[d] += dva[x];
        }
    }
}

/* A warp per (query i, head h) over its cache rows first[i] .. first[i] + n_ctx[i] - 1. */
__global__ void attention_cached(float *out, const float *q, int ldq, const float *kc, const float *vc,
                                 const int *first, const int *n_ctx, int n, int H, int HKV, int D, float scale) {
    int w = blockIdx.x * ATT_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (w >= n * H) return;
    int i = w / H, h = w % H, kh = h / (H / HKV), KVD = HKV * D;
    float qr[MAX_DIMS_PER_LANE], acc[MAX_DIMS_PER_LANE], mx, sum;
    load_head(qr, q + (size_t)i * ldq + (size_t)h * D, D, lane);
    attend(acc, &mx, &sum, qr, kc + (size_t)kh * D, KVD, vc + (size_t)kh * D, KVD, first[i], first[i] + n_ctx[i], D,
           lane, scale);
    store_head(out + (size_t)i * H * D + (size_t)h * D, acc, sum, D, lane);
}

void cuda_attention_forward(struct backend *be, float *out, float *lse, const float *q, int ldq, const float *k, int ldk,
                            const float *v, int ldv, const struct attn_segment *segs, int n_segs, int N, int T, int H,
                            int HKV, int D) {
    struct cuda_ctx *c = cuda_begin(be);
    if (n_segs <= 0 || T <= 0) return;
    check_head_dim(D);
    dim3 grid(n_segs, H, cuda_blocks(T, ATT_WARPS));
    attention_forward<<<grid, 32 * ATT_WARPS, 0, c->stream>>>(out, lse, q, ldq, k, ldk, v, ldv, segs, N, H, HKV, D,
                                                              1.0f / sqrtf((float)D));
    LAUNCH_CHECK();
}

void cuda_attention_backward(struct backend *be, float *dq, int lddq, float *dk, int lddk, float *dv, int lddv,
                             const float *dout, const float *lse, const float *q, int ldq, const float *k, int ldk,
                             const float *v, int ldv, const struct attn_segment *segs, int n_segs, int N, int T, int H,
                             int HKV, int D) {
    struct cuda_ctx *c = cuda_begin(be);
    if (n_segs <= 0 || T <= 0) return;
    check_head_dim(D);
    float scale = 1.0f / sqrtf((float)D);
    float *delta = (float *)cuda_scratch(be, sizeof(float) * (size_t)H * N);
    dim3 grid(n_segs, H, cuda_blocks(T, ATT_WARPS)), kv_grid(n_segs, HKV, cuda_blocks(T, ATT_WARPS));
    attention_backward_delta<<<grid, 32 * ATT_WARPS, 0, c->stream>>>(delta, dout, q, ldq, k, ldk, v, ldv, segs, N,
                                                                     H, HKV, D, scale);
    LAUNCH_CHECK();
    attention_backward_dq<<<grid, 32 * ATT_WARPS, 0, c->stream>>>(dq, lddq, delta, dout, lse, q, ldq, k, ldk, v, ldv,
                                                                  segs, N, H, HKV, D, scale);
    LAUNCH_CHECK();
    attention_backward_dkdv<<<kv_grid, 32 * ATT_WARPS, 0, c->stream>>>(dk, lddk, dv, lddv, delta, dout, lse, q, ldq, k,
                                                                       ldk, v, ldv, segs, N, H, HKV, D, scale);
    LAUNCH_CHECK();
}

void cuda_attention_cached(struct backend *be, float *out, const float *q, int ldq, const float *kc, const float *vc,
                           const int *first, const int *n_ctx, int n, int H, int HKV, int D) {
    struct cuda_ctx *c = cuda_begin(be);
    if (n <= 0) return;
    check_head_dim(D);
    attention_cached<<<cuda_blocks((size_t)n * H, ATT_WARPS), 32 * ATT_WARPS, 0, c->stream>>>(
        out, q, ldq, kc, vc, first, n_ctx, n, H, HKV, D, 1.0f / sqrtf((float)D));
    LAUNCH_CHECK();
}
