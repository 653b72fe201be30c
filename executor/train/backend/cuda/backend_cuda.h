/* backend_cuda.h - what the CUDA backend's files share: the instance's context, error checks, launch
 * sizes and the block reductions the kernels use.
 *
 * Determinism: every reduction here is a fixed tree over a fixed assignment of elements to threads
 * (warp shuffles, then one warp over the warps' partial sums), so a result does not depend on which
 * block runs first; no kernel of this backend adds with atomics. */
#ifndef WHET_BACKEND_CUDA_H
#define WHET_BACKEND_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "backend.h"
}

/* The state behind be->ctx. */
struct cuda_ctx {
    int ordinal;
    char name[32]; /* "cuda:N", what be->name points at */
    cudaStream_t stream;
    cublasHandle_t blas; /* bound to `stream` */
    void *scratch;       /* per-op temporaries (partial sums, sort keys), grown on demand */
    size_t scratch_bytes;
};

/* A failing CUDA call inside an op is a bug or a lost device, not an input error the caller could
 * mend (ops return nothing), so it stops the process saying what failed where. */
void cuda_fail(const char *what, const char *detail, const char *file, int line);
#define CUDA_CHECK(call)                                                                                             \
    do {                                                                                                             \
        cudaError_t e_ = (call);                                                                                     \
        if (e_ != cudaSuccess) cuda_fail(#call, cudaGetErrorString(e_), __FILE__, __LINE__);                       \
    } while (0)
#define BLAS_CHECK(call)                                                                                               \
    do {                                                                                                               \
        cublasStatus_t s_ = (call);                                                                                    \
        if (s_ != CUBLAS_STATUS_SUCCESS) cuda_fail(#call, cublasGetStatusString(s_), __FILE__, __LINE__);              \
    } while (0)
/* After each kernel launch: a bad launch configuration shows here, not at the next download. */
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

/* The context of an op's instance, with its device made current for the calling thread (the CUDA
 * runtime keeps the current device per thread, and the trainer may call from more than one). */
struct cuda_ctx *cuda_begin(struct backend *be);
/* At least `bytes` of scratch device memory, valid until the next op that asks for scratch (ops run in
 * stream order, so one op's use is over before the next one's begins). */
void *cuda_scratch(struct backend *be, size_t bytes);

/* The sampling op (backend_cuda_sample.cu) and the attention ops (backend_cuda_attention.cu). */
void cuda_sample(struct backend *be, const struct sample_out *out, float *logits, const struct sample_row *rows, int n,
                 int V);
void cuda_attention_forward(struct backend *be, float *out, float *lse, const float *q, int ldq, const float *k,
                            int ldk, const float *v, int ldv, const struct attn_segment *segs,
                            const struct attn_segment *host_segs, int n_segs, int N, int T, int H, int HKV, int D);
void cuda_attention_backward(struct backend *be, float *dq, int lddq, float *dk, int lddk, float *dv, int lddv,
                             const float *dout, const float *lse, const float *q, int ldq, const float *k, int ldk,
                             const float *v, int ldv, const struct attn_segment *segs,
                             const struct attn_segment *host_segs, int n_segs, int N, int T, int H, int HKV, int D);
void cuda_attention_cached(struct backend *be, float *out, const float *q, int ldq, const float *kc, const float *vc,
                           const int *first, const int *n_ctx, int n, int H, int HKV, int D);

/* Blocks of `threads` covering n elements (one element per thread). */
static inline unsigned cuda_blocks(size_t n, int threads) { return (unsigned)((n + (size_t)threads - 1) / threads); }

/* ---- reductions (blockDim.x a multiple of 32, at most 1024) ---- */

template <typename T> __device__ inline T warp_sum(T v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v; /* the same bits in every lane: each step adds the same two numbers, in either order */
}

/* The sum of v over the block, returned to every thread. */
template <typename T> __device__ inline T block_sum(T v) {
    __shared__ T partial[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < n_warps ? partial[lane] : (T)0;
    v = warp_sum(v);
    __syncthreads(); /* partial may be reused by the next call */
    return v;
}

/* The maximum of v over the block, returned to every thread. */
__device__ inline float block_max(float v) {
    __shared__ float partial[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < n_warps ? partial[lane] : -INFINITY;
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    __syncthreads(); /* partial may be reused by the next call */
    return v;
}

/* The block's maximum of v and its lowest index among equal maxima (the argmax, ties to the lowest id),
 * to every thread. Each thread passes its own best (value, index); index INT32_MAX for none. */
__device__ inline void block_argmax(float *v, int *idx) {
    __shared__ float pv[32];
    __shared__ int pi[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    float x = *v;
    int i = *idx;
    for (int round = 0; round < 2; round++) {
        for (int off = 16; off > 0; off >>= 1) {
            float ox = __shfl_xor_sync(0xffffffffu, x, off);
            int oi = __shfl_xor_sync(0xffffffffu, i, off);
            if (ox > x || (ox == x && oi < i)) x = ox, i = oi;
        }
        if (round == 1) break;
        if (lane == 0) pv[warp] = x, pi[warp] = i;
        __syncthreads();
        x = lane < n_warps ? pv[lane] : -INFINITY;
        i = lane < n_warps ? pi[lane] : INT32_MAX;
        __syncthreads();
    }
    *v = x, *idx = i;
}

#endif
