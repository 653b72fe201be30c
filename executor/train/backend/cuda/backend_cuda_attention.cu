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
 * the query heads of its GQA group), so every sum has a fixed order.
 *
 * Those kernels serve the short segments, all in one launch. A segment of ATT_GEMM_MIN_LEN tokens or
 * more goes through cuBLAS instead, as backend_cpu.c computes attention: blocks of query rows, the
 * block's scores against the keys it sees as one product, a row kernel for the softmax, a product
 * with V; the backward recomputes the block's probabilities from the kept log-sum-exp and forms dV,
 * dP, dS, dQ and dK the same way. Products are batched over heads, so one launch covers a block of
 * every head. On an H200, for a 2048-token segment of 16 heads of 64, the warp kernels took 22 ms a
 * layer (forward and backward), three quarters of a training step; the products run at the device's
 * fp32 matrix rate. Memory: the scratch holds a block's scores for a batch of heads, bounded by
 * ATT_GEMM_SCRATCH whatever the segment's length (fewer heads per launch beyond it). */
#include <math.h>
#include <string.h>

#include "backend_cuda.h"

#define MAX_DIMS_PER_LANE 8                  /* head dim up to 256 */
#define ATT_WARPS 4                          /* query rows (warps) per block */
#define ATT_GEMM_MIN_LEN 128                 /* segments from this length on go through cuBLAS */
#define ATT_GEMM_ROWS 512                    /* query rows per block of scores */
#define ATT_GEMM_SCRATCH ((size_t)512 << 20) /* bytes of score blocks at most, both buffers together */
#define ROW_THREADS 256                      /* threads of a row kernel (one block per score row) */

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

/* This warp's row, or false when the row is past its segment's end or the segment is a long one, which
 * cuBLAS takes (the whole warp returns). */
__device__ inline bool att_row_of(struct att_row *w, const struct attn_segment *segs) {
    w->seg = segs[blockIdx.x];
    int i = blockIdx.z * ATT_WARPS + (threadIdx.x >> 5);
    w->t = w->seg.start + i, w->head = blockIdx.y, w->lane = threadIdx.x & 31;
    return i < w->seg.len && w->seg.len < ATT_GEMM_MIN_LEN;
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
__global__ void attention_backward_delta(float *delta, const float *dout, const float *q, int ldq, const float *k,
                                         int ldk, const float *v, int ldv, const struct attn_segment *segs, int N,
                                         int H, int HKV, int D, float scale) {
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
__global__ void attention_backward_dkdv(float *dk, int lddk, float *dv, int lddv, const float *delta, const float *dout,
                                        const float *lse, const float *q, int ldq, const float *k, int ldk,
                                        const float *v, int ldv, const struct attn_segment *segs, int N, int H, int HKV,
                                        int D, float scale) {
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

/* ---------------------------------------------------------------- long segments: cuBLAS ---- */

/* Softmax of score rows, in place: row i of block b (S + b*bstride + i*cols) sees columns 0 .. r0+i;
 * the rest become 0. lse[b*lse_stride + r0 + i] = the row's log-sum-exp. A block per row. */
__global__ void attention_softmax_rows(float *S, float *lse, int cols, int r0, long long bstride,
                                       long long lse_stride) {
    float *row = S + blockIdx.y * bstride + (size_t)blockIdx.x * cols;
    int last = r0 + (int)blockIdx.x;
    float mx = -INFINITY, sum = 0;
    for (int j = threadIdx.x; j <= last; j += blockDim.x) mx = fmaxf(mx, row[j]);
    mx = block_max(mx);
    for (int j = threadIdx.x; j <= last; j += blockDim.x) sum += expf(row[j] - mx);
    sum = block_sum(sum);
    float inv = 1.0f / sum;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) row[j] = j <= last ? expf(row[j] - mx) * inv : 0.0f;
    if (threadIdx.x == 0) lse[blockIdx.y * lse_stride + r0 + blockIdx.x] = mx + logf(sum);
}

/* The backward's probabilities from the scores and the kept log-sum-exp, in place (0 past the diagonal). */
__global__ void attention_probs_rows(float *P, const float *lse, int cols, int r0, long long bstride,
                                     long long lse_stride) {
    float *row = P + blockIdx.y * bstride + (size_t)blockIdx.x * cols;
    int last = r0 + (int)blockIdx.x;
    float l = lse[blockIdx.y * lse_stride + r0 + blockIdx.x];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) row[j] = j <= last ? expf(row[j] - l) : 0.0f;
}

/* dS = P (dP - sum_j P dP) per row, in place over dP. */
__global__ void attention_dscores_rows(float *dS, const float *P, int cols, long long bstride) {
    size_t at = blockIdx.y * bstride + (size_t)blockIdx.x * cols;
    float *d = dS + at;
    const float *p = P + at;
    float dot = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) dot += p[j] * d[j];
    dot = block_sum(dot);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) d[j] = p[j] * (d[j] - dot);
}

/* Row-major C = alpha op(A) op(B) + beta C for `batch` matrices strided by sa, sb, sc (elements). */
static void gemm_batched(struct cuda_ctx *c, int ta, int tb, int M, int N, int K, float alpha, const float *a, int lda,
                         long long sa, const float *b, int ldb, long long sb, float beta, float *cm, int ldc,
                         long long sc, int batch) {
    BLAS_CHECK(cublasSgemmStridedBatched(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M,
                                         K, &alpha, b, ldb, sb, a, lda, sa, &beta, cm, ldc, sc, batch));
}

/* How a long segment is split: query rows per block and kv heads per launch (the scratch, two buffers of
 * a block's scores, stays within ATT_GEMM_SCRATCH). */
static void att_plan(int L, int HKV, int *rows, int *heads) {
    *rows = L < ATT_GEMM_ROWS ? L : ATT_GEMM_ROWS;
    size_t n = ATT_GEMM_SCRATCH / (2 * sizeof(float) * (size_t)*rows * L);
    *heads = n < 1 ? 1 : n > (size_t)HKV ? HKV : (int)n;
}

/* The launches over a long segment of L tokens: query rows r0 .. r1-1, for each place g in the GQA
 * groups and each batch of n kv heads from kh0 (query heads h0 = kh0*group + g, h0 + group, ...).
 *   for (att_blocks_begin(&b, L, H, HKV, D); att_blocks_next(&b);) ... */
struct att_blocks {
    int L, group, HKV, rows, heads, started;
    int r0, r1, g, kh0, n, h0;
    int R, D;     /* r1 - r0, the head size (the stride between the batch's kv heads) */
    long long bs; /* elements of one head's block of scores, R x r1 */
    long long qs; /* the stride between the batch's query heads, group*D */
};

static void att_blocks_begin(struct att_blocks *b, int L, int H, int HKV, int D) {
    memset(b, 0, sizeof *b);
    b->L = L, b->group = H / HKV, b->HKV = HKV, b->qs = (long long)b->group * D, b->D = D;
    att_plan(L, HKV, &b->rows, &b->heads);
}

static bool att_blocks_next(struct att_blocks *b) {
    if (b->started && (b->kh0 += b->heads) >= b->HKV) {
        b->kh0 = 0;
        if (++b->g == b->group) b->g = 0, b->r0 += b->rows;
    }
    b->started = 1;
    if (b->r0 >= b->L) return false;
    b->r1 = b->r0 + b->rows < b->L ? b->r0 + b->rows : b->L;
    b->n = b->HKV - b->kh0 < b->heads ? b->HKV - b->kh0 : b->heads;
    b->h0 = b->kh0 * b->group + b->g;
    b->R = b->r1 - b->r0, b->bs = (long long)b->R * b->r1;
    return true;
}

/* S = scale Q[r0:r1] K[0:r1]^T for the block's heads, one R x r1 matrix each (q, k at the segment's first
 * token). */
static void att_block_scores(struct cuda_ctx *c, const struct att_blocks *b, float *S, const float *q, int ldq,
                             const float *k, int ldk, float scale) {
    gemm_batched(c, 0, 1, b->R, b->r1, b->D, scale, q + (size_t)b->r0 * ldq + (size_t)b->h0 * b->D, ldq, b->qs,
                 k + (size_t)b->kh0 * b->D, ldk, b->D, 0.0f, S, b->r1, b->bs, b->n);
}

static void attention_gemm_forward(struct cuda_ctx *c, float *S, float *out, float *lse, const float *q, int ldq,
                                   const float *k, int ldk, const float *v, int ldv, int s, int L, int N, int H,
                                   int HKV, int D, float scale) {
    int HD = H * D;
    q += (size_t)s * ldq, k += (size_t)s * ldk, v += (size_t)s * ldv; /* the segment's first token */
    struct att_blocks b;
    for (att_blocks_begin(&b, L, H, HKV, D); att_blocks_next(&b);) {
        /* P = softmax(scale Q[r0:r1] K[0:r1]^T), in place */
        att_block_scores(c, &b, S, q, ldq, k, ldk, scale);
        attention_softmax_rows<<<dim3(b.R, b.n), ROW_THREADS, 0, c->stream>>>(S, lse + (size_t)b.h0 * N + s, b.r1, b.r0,
                                                                              b.bs, (long long)b.group * N);
        LAUNCH_CHECK();
        /* O[r0:r1] = P V[0:r1] */
        gemm_batched(c, 0, 0, b.R, D, b.r1, 1.0f, S, b.r1, b.bs, v + (size_t)b.kh0 * D, ldv, D, 0.0f,
                     out + (size_t)(s + b.r0) * HD + (size_t)b.h0 * D, HD, b.qs, b.n);
    }
}

static void attention_gemm_backward(struct cuda_ctx *c, float *P, float *dS, float *dq, int lddq, float *dk, int lddk,
                                    float *dv, int lddv, const float *dout, const float *lse, const float *q, int ldq,
                                    const float *k, int ldk, const float *v, int ldv, int s, int L, int N, int H,
                                    int HKV, int D, float scale) {
    int HD = H * D;
    q += (size_t)s * ldq, k += (size_t)s * ldk, v += (size_t)s * ldv; /* the segment's first token */
    dq += (size_t)s * lddq, dk += (size_t)s * lddk, dv += (size_t)s * lddv, dout += (size_t)s * HD;
    struct att_blocks b;
    for (att_blocks_begin(&b, L, H, HKV, D); att_blocks_next(&b);) {
        const float *qb = q + (size_t)b.r0 * ldq + (size_t)b.h0 * D, *kb = k + (size_t)b.kh0 * D;
        const float *dob = dout + (size_t)b.r0 * HD + (size_t)b.h0 * D;
        float *dkb = dk + (size_t)b.kh0 * D;
        /* P = exp(scale Q[r0:r1] K[0:r1]^T - lse), zero past the diagonal */
        att_block_scores(c, &b, P, q, ldq, k, ldk, scale);
        attention_probs_rows<<<dim3(b.R, b.n), ROW_THREADS, 0, c->stream>>>(P, lse + (size_t)b.h0 * N + s, b.r1, b.r0,
                                                                            b.bs, (long long)b.group * N);
        LAUNCH_CHECK();
        /* dV[0:r1] += P^T dO[r0:r1] */
        gemm_batched(c, 1, 0, b.r1, D, b.R, 1.0f, P, b.r1, b.bs, dob, HD, b.qs, 1.0f, dv + (size_t)b.kh0 * D, lddv, D,
                     b.n);
        /* dP = dO[r0:r1] V[0:r1]^T, then dS = P (dP - sum_j P dP) in place */
        gemm_batched(c, 0, 1, b.R, b.r1, D, 1.0f, dob, HD, b.qs, v + (size_t)b.kh0 * D, ldv, D, 0.0f, dS, b.r1, b.bs,
                     b.n);
        attention_dscores_rows<<<dim3(b.R, b.n), ROW_THREADS, 0, c->stream>>>(dS, P, b.r1, b.bs);
        LAUNCH_CHECK();
        /* dQ[r0:r1] += scale dS K[0:r1];  dK[0:r1] += scale dS^T Q[r0:r1] */
        gemm_batched(c, 0, 0, b.R, D, b.r1, scale, dS, b.r1, b.bs, kb, ldk, D, 1.0f,
                     dq + (size_t)b.r0 * lddq + (size_t)b.h0 * D, lddq, b.qs, b.n);
        gemm_batched(c, 1, 0, b.r1, D, b.R, scale, dS, b.r1, b.bs, qb, ldq, b.qs, 1.0f, dkb, lddk, D, b.n);
    }
}

/* The longest short segment (the warp kernels' rows) and the scratch a long one's blocks need. */
static void att_split(const struct attn_segment *host_segs, int n_segs, int HKV, int *longest_short,
                      size_t *gemm_bytes) {
    *longest_short = 0, *gemm_bytes = 0;
    for (int i = 0; i < n_segs; i++) {
        int L = host_segs[i].len, rows, heads;
        if (L < ATT_GEMM_MIN_LEN) {
            *longest_short = L > *longest_short ? L : *longest_short;
            continue;
        }
        att_plan(L, HKV, &rows, &heads);
        size_t bytes = 2 * sizeof(float) * (size_t)rows * L * heads;
        *gemm_bytes = bytes > *gemm_bytes ? bytes : *gemm_bytes;
    }
}

void cuda_attention_forward(struct backend *be, float *out, float *lse, const float *q, int ldq, const float *k,
                            int ldk, const float *v, int ldv, const struct attn_segment *segs,
                            const struct attn_segment *host_segs, int n_segs, int N, int T, int H, int HKV, int D) {
    struct cuda_ctx *c = cuda_begin(be);
    if (n_segs <= 0 || T <= 0) return;
    check_head_dim(D);
    float scale = 1.0f / sqrtf((float)D);
    int longest_short;
    size_t gemm_bytes;
    att_split(host_segs, n_segs, HKV, &longest_short, &gemm_bytes);
    if (longest_short) {
        dim3 grid(n_segs, H, cuda_blocks(longest_short, ATT_WARPS));
        attention_forward<<<grid, 32 * ATT_WARPS, 0, c->stream>>>(out, lse, q, ldq, k, ldk, v, ldv, segs, N, H, HKV, D,
                                                                  scale);
        LAUNCH_CHECK();
    }
    if (!gemm_bytes) return;
    float *S = (float *)cuda_scratch(be, gemm_bytes);
    for (int i = 0; i < n_segs; i++)
        if (host_segs[i].len >= ATT_GEMM_MIN_LEN)
            attention_gemm_forward(c, S, out, lse, q, ldq, k, ldk, v, ldv, host_segs[i].start, host_segs[i].len, N, H,
                                   HKV, D, scale);
}

void cuda_attention_backward(struct backend *be, float *dq, int lddq, float *dk, int lddk, float *dv, int lddv,
                             const float *dout, const float *lse, const float *q, int ldq, const float *k, int ldk,
                             const float *v, int ldv, const struct attn_segment *segs,
                             const struct attn_segment *host_segs, int n_segs, int N, int T, int H, int HKV, int D) {
    struct cuda_ctx *c = cuda_begin(be);
    if (n_segs <= 0 || T <= 0) return;
    check_head_dim(D);
    float scale = 1.0f / sqrtf((float)D);
    int longest_short;
    size_t gemm_bytes, delta_bytes = (sizeof(float) * (size_t)H * N + 255) & ~(size_t)255;
    att_split(host_segs, n_segs, HKV, &longest_short, &gemm_bytes);
    /* One scratch request for the op: delta for the warp kernels, then (aligned for cuBLAS) the score blocks */
    float *delta = (float *)cuda_scratch(be, delta_bytes + gemm_bytes);
    float *blocks = (float *)((char *)delta + delta_bytes);
    if (longest_short) {
        dim3 grid(n_segs, H, cuda_blocks(longest_short, ATT_WARPS)),
            kv_grid(n_segs, HKV, cuda_blocks(longest_short, ATT_WARPS));
        attention_backward_delta<<<grid, 32 * ATT_WARPS, 0, c->stream>>>(delta, dout, q, ldq, k, ldk, v, ldv, segs, N,
                                                                         H, HKV, D, scale);
        LAUNCH_CHECK();
        attention_backward_dq<<<grid, 32 * ATT_WARPS, 0, c->stream>>>(dq, lddq, delta, dout, lse, q, ldq, k, ldk, v,
                                                                      ldv, segs, N, H, HKV, D, scale);
        LAUNCH_CHECK();
        attention_backward_dkdv<<<kv_grid, 32 * ATT_WARPS, 0, c->stream>>>(dk, lddk, dv, lddv, delta, dout, lse, q, ldq,
                                                                           k, ldk, v, ldv, segs, N, H, HKV, D, scale);
        LAUNCH_CHECK();
    }
    for (int i = 0; i < n_segs; i++)
        if (host_segs[i].len >= ATT_GEMM_MIN_LEN) {
            int rows, heads;
            att_plan(host_segs[i].len, HKV, &rows, &heads);
            float *P = blocks, *dS = blocks + (size_t)rows * host_segs[i].len * heads;
            attention_gemm_backward(c, P, dS, dq, lddq, dk, lddk, dv, lddv, dout, lse, q, ldq, k, ldk, v, ldv,
                                    host_segs[i].start, host_segs[i].len, N, H, HKV, D, scale);
        }
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
