/* backend_cuda.cu - the CUDA implementation of backend.h in fp32: the instance (a stream, a cuBLAS
 * handle bound to it, scratch), memory, and every op except attention (backend_cuda_attention.cu) and
 * sampling (backend_cuda_sample.cu).
 *
 * In llm.c's style: one kernel per op, named after it, each readable top to bottom; matrix products go
 * to cuBLAS. Everything is queued on the instance's stream; only `download` (and `close`) wait.
 * Correctness comes first here: every kernel is the plain formula of backend_cpu.c with one thread (or
 * one warp, or one block) per output, and reductions are fixed trees (backend_cuda.h), so a step gives
 * the same bits run to run. The bf16 path of the precision policy is a later step: the elementwise
 * kernels become templates over the stored type (fp32 arithmetic inside), the products move to cuBLASLt
 * with bf16 inputs, and these fp32 kernels stay as the mode the tests compare with the CPU. */
#include <math.h>
#include <string.h>

#include "backend_cuda.h"

/* ---------------------------------------------------------------- errors, context ---- */

void cuda_fail(const char *what, const char *detail, const char *file, int line) {
    fprintf(stderr, "whet: CUDA backend: %s failed at %s:%d: %s\n", what, file, line, detail);
    abort();
}

struct cuda_ctx *cuda_begin(struct backend *be) {
    struct cuda_ctx *c = (struct cuda_ctx *)be->ctx;
    CUDA_CHECK(cudaSetDevice(c->ordinal));
    return c;
}

void *cuda_scratch(struct backend *be, size_t bytes) {
    struct cuda_ctx *c = cuda_begin(be);
    if (bytes <= c->scratch_bytes) return c->scratch;
    if (c->scratch) CUDA_CHECK(cudaFreeAsync(c->scratch, c->stream)); /* after the ops queued before */
    c->scratch = NULL;
    size_t grow = bytes + bytes / 4;
    CUDA_CHECK(cudaMallocAsync(&c->scratch, grow, c->stream));
    c->scratch_bytes = grow;
    return c->scratch;
}

/* Threads per block of the elementwise kernels, and the most blocks a grid-stride loop launches. */
#define THREADS 256
#define MAX_BLOCKS 4096

static unsigned grid_stride_blocks(size_t n) {
    unsigned b = cuda_blocks(n, THREADS);
    return b < 1 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : b;
}

/* ---------------------------------------------------------------- memory ---- */

static void cuda_mem_info(struct backend *be, size_t *free_bytes, size_t *total_bytes) {
    cuda_begin(be);
    CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

static void *cuda_alloc(struct backend *be, size_t bytes, struct whet_err *err) {
    struct cuda_ctx *c = cuda_begin(be);
    void *p = NULL;
    size_t want = bytes ? bytes : 256; /* never a NULL that looks like a failure */
    cudaError_t e = cudaMallocAsync(&p, want, c->stream);
    if (e == cudaErrorMemoryAllocation) {
        /* the stream's pool keeps freed blocks for reuse (see backend_cuda_open): give them back to the
         * device and try once more before calling it out of memory */
        (void)cudaGetLastError();
        CUDA_CHECK(cudaStreamSynchronize(c->stream));
        cudaMemPool_t pool;
        CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, c->ordinal));
        CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
        e = cudaMallocAsync(&p, want, c->stream);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it for the next check */
        size_t free_bytes = 0, total = 0;
        cudaMemGetInfo(&free_bytes, &total);
        backend_out_of_memory(err, "GPU", bytes, free_bytes);
        whet_err_detail(err, "cudaMallocAsync on %s: %s", c->name, cudaGetErrorString(e));
        return NULL;
    }
    CUDA_CHECK(cudaMemsetAsync(p, 0, want, c->stream));
    return p;
}

static void cuda_free(struct backend *be, void *p) {
    struct cuda_ctx *c = cuda_begin(be);
    if (p) CUDA_CHECK(cudaFreeAsync(p, c->stream));
}

/* From pageable host memory the copy has taken the source by the time this returns (CUDA stages it), so
 * the caller may reuse its buffer at once. */
static void cuda_upload(struct backend *be, void *dst, const void *src, size_t bytes) {
    struct cuda_ctx *c = cuda_begin(be);
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
}

static void cuda_download(struct backend *be, void *dst, const void *src, size_t bytes) {
    struct cuda_ctx *c = cuda_begin(be);
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
}

static void cuda_zero(struct backend *be, void *p, size_t bytes) {
    struct cuda_ctx *c = cuda_begin(be);
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, c->stream));
}

/* Regions must not overlap (the CPU backend's memmove allows it; no caller relies on it). */
static void cuda_copy(struct backend *be, void *dst, const void *src, size_t bytes) {
    struct cuda_ctx *c = cuda_begin(be);
    if (bytes && dst != src) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
}

/* ---------------------------------------------------------------- matmul ---- */

/* Row-major c[M,N] = alpha op(a) op(b) + beta c through column-major cuBLAS: a row-major matrix is its
 * transpose in column-major order, so this computes c^T = op(b)^T op(a)^T, swapping the operands. */
static void cuda_gemm(struct backend *be, int ta, int tb, int M, int N, int K, float alpha, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc) {
    struct cuda_ctx *cx = cuda_begin(be);
    if (M <= 0 || N <= 0) return;
    BLAS_CHECK(cublasSgemm(cx->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                           b, ldb, a, lda, &beta, c, ldc));
}

__global__ void matmul_forward_bias(float *out, int ldo, const float *bias, int N, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * OC) return;
    int n = (int)(i / OC), o = (int)(i % OC);
    out[(size_t)n * ldo + o] += bias[o];
}

/* dbias[o] += sum over n of dout[n, o]: a thread per feature, summing tokens in order. */
__global__ void matmul_backward_bias(float *dbias, const float *dout, int lddo, int N, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float s = 0;
    for (int n = 0; n < N; n++) s += dout[(size_t)n * lddo + o];
    dbias[o] += s;
}

static void cuda_matmul_forward(struct backend *be, float *out, int ldo, const float *inp, int ldi, const float *weight,
                                const float *bias, int N, int C, int OC, float beta) {
    struct cuda_ctx *c = cuda_begin(be);
    cuda_gemm(be, 0, 1, N, OC, C, 1.0f, inp, ldi, weight, C, beta, out, ldo);
    if (bias && N > 0 && OC > 0) {
        matmul_forward_bias<<<cuda_blocks((size_t)N * OC, THREADS), THREADS, 0, c->stream>>>(out, ldo, bias, N, OC);
        LAUNCH_CHECK();
    }
}

static void cuda_matmul_backward(struct backend *be, float *dinp, int lddi, float *dweight, float *dbias,
                                 const float *dout, int lddo, const float *inp, int ldi, const float *weight, int N,
                                 int C, int OC) {
    struct cuda_ctx *c = cuda_begin(be);
    if (dinp) /* dinp[N,C] += dout[N,OC] @ weight[OC,C] */
        cuda_gemm(be, 0, 0, N, C, OC, 1.0f, dout, lddo, weight, C, 1.0f, dinp, lddi);
    if (dweight) /* dweight[OC,C] += dout^T @ inp */
        cuda_gemm(be, 1, 0, OC, C, N, 1.0f, dout, lddo, inp, ldi, 1.0f, dweight, C);
    if (dbias && OC > 0) {
        matmul_backward_bias<<<cuda_blocks(OC, THREADS), THREADS, 0, c->stream>>>(dbias, dout, lddo, N, OC);
        LAUNCH_CHECK();
    }
}

/* ---------------------------------------------------------------- embedding, rows ---- */

__global__ void embedding_forward(float *out, const int *ids, const float *wte, int N, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C);
    out[i] = wte[(size_t)ids[n] * C + c];
}

/* A thread per column: it adds every token's gradient into its column of dwte, tokens in order, so
 * repeated ids never race and the sum order is fixed (deterministic, no atomics). */
__global__ void embedding_backward(float *dwte, const float *dout, const int *ids, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int n = 0; n < N; n++) dwte[(size_t)ids[n] * C + c] += dout[(size_t)n * C + c];
}

static void cuda_embedding_forward(struct backend *be, float *out, const int *ids, const float *wte, int N, int C) {
    struct cuda_ctx *c = cuda_begin(be);
    if ((size_t)N * C == 0) return;
    embedding_forward<<<cuda_blocks((size_t)N * C, THREADS), THREADS, 0, c->stream>>>(out, ids, wte, N, C);
    LAUNCH_CHECK();
}

static void cuda_embedding_backward(struct backend *be, float *dwte, const float *dout, const int *ids, int N, int C) {
    struct cuda_ctx *c = cuda_begin(be);
    if (C <= 0) return;
    embedding_backward<<<cuda_blocks(C, THREADS), THREADS, 0, c->stream>>>(dwte, dout, ids, N, C);
    LAUNCH_CHECK();
}

__global__ void gather_rows(float *dst, const float *src, const int *rows, int n_rows, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n_rows * C) return;
    int r = (int)(i / C), c = (int)(i % C);
    dst[i] = src[(size_t)rows[r] * C + c];
}

/* rows are distinct (backend.h), so no two threads add into one element */
__global__ void scatter_add_rows(float *dst, const float *src, const int *rows, int n_rows, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n_rows * C) return;
    int r = (int)(i / C), c = (int)(i % C);
    dst[(size_t)rows[r] * C + c] += src[i];
}

__global__ void set_rows(float *dst, const int *rows, const float *src, int lds, int n_rows, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n_rows * C) return;
    int r = (int)(i / C), c = (int)(i % C);
    dst[(size_t)rows[r] * C + c] = src[(size_t)r * lds + c];
}

static void cuda_gather_rows(struct backend *be, float *dst, const float *src, const int *rows, int n_rows, int C) {
    struct cuda_ctx *c = cuda_begin(be);
    if ((size_t)n_rows * C == 0) return;
    gather_rows<<<cuda_blocks((size_t)n_rows * C, THREADS), THREADS, 0, c->stream>>>(dst, src, rows, n_rows, C);
    LAUNCH_CHECK();
}

static void cuda_scatter_add_rows(struct backend *be, float *dst, const float *src, const int *rows, int n_rows, int C) {
    struct cuda_ctx *c = cuda_begin(be);
    if ((size_t)n_rows * C == 0) return;
    scatter_add_rows<<<cuda_blocks((size_t)n_rows * C, THREADS), THREADS, 0, c->stream>>>(dst, src, rows, n_rows, C);
    LAUNCH_CHECK();
}

static void cuda_set_rows(struct backend *be, float *dst, const int *rows, const float *src, int lds, int n_rows,
                          int C) {
    struct cuda_ctx *c = cuda_begin(be);
    if ((size_t)n_rows * C == 0) return;
    set_rows<<<cuda_blocks((size_t)n_rows * C, THREADS), THREADS, 0, c->stream>>>(dst, rows, src, lds, n_rows, C);
    LAUNCH_CHECK();
}

/* ---------------------------------------------------------------- RMSNorm ---- */

/* Rows (token n, head h) of one warp each, WARPS_PER_BLOCK warps to a block. */
#define WARPS_PER_BLOCK 8

__global__ void rmsnorm_forward(float *out, int ldo, float *rstd, const float *inp, int ldi, const float *weight, int N,
                                int H, int D, float eps) {
    int r = blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= N * H) return;
    int n = r / H, h = r % H;
    const float *x = inp + (size_t)n * ldi + (size_t)h * D;
    float *y = out + (size_t)n * ldo + (size_t)h * D;
    float ss = 0;
    for (int i = lane; i < D; i += 32) ss += x[i] * x[i];
    ss = warp_sum(ss); /* every lane has read its x before any lane writes y (out may be inp) */
    float s = 1.0f / sqrtf(ss / (float)D + eps);
    if (lane == 0) rstd[r] = s;
    for (int i = lane; i < D; i += 32) y[i] = x[i] * s * weight[i];
}

__global__ void rmsnorm_backward(float *dinp, int lddi, const float *dout, int lddo, const float *inp, int ldi,
                                 const float *weight, const float *rstd, int N, int H, int D) {
    int r = blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= N * H) return;
    int n = r / H, h = r % H;
    const float *x = inp + (size_t)n * ldi + (size_t)h * D;
    const float *dy = dout + (size_t)n * lddo + (size_t)h * D;
    float *dx = dinp + (size_t)n * lddi + (size_t)h * D;
    float s = rstd[r], dot = 0;
    for (int i = lane; i < D; i += 32) dot += dy[i] * weight[i] * x[i] * s;
    dot = warp_sum(dot) / (float)D;
    for (int i = lane; i < D; i += 32) dx[i] += s * (dy[i] * weight[i] - x[i] * s * dot);
}

/* dweight in two passes, deterministic: partial[chunk, i] sums the rows of one chunk in order, then one
 * thread per feature adds the chunks in order. */
#define NORM_ROWS_PER_CHUNK 256

__global__ void rmsnorm_backward_dweight_partial(float *partial, const float *dout, int lddo, const float *inp, int ldi,
                                                 const float *rstd, int N, int H, int D) {
    int i = blockIdx.y * blockDim.x + threadIdx.x, chunk = blockIdx.x;
    if (i >= D) return;
    int r0 = chunk * NORM_ROWS_PER_CHUNK, r1 = min(r0 + NORM_ROWS_PER_CHUNK, N * H);
    float s = 0;
    for (int r = r0; r < r1; r++) {
        int n = r / H, h = r % H;
        s += dout[(size_t)n * lddo + (size_t)h * D + i] * (inp[(size_t)n * ldi + (size_t)h * D + i] * rstd[r]);
    }
    partial[(size_t)chunk * D + i] = s;
}

__global__ void rmsnorm_backward_dweight_sum(float *dweight, const float *partial, int n_chunks, int D) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= D) return;
    float s = 0;
    for (int c = 0; c < n_chunks; c++) s += partial[(size_t)c * D + i];
    dweight[i] += s;
}

static void cuda_rmsnorm_forward(struct backend *be, float *out, int ldo, float *rstd, const float *inp, int ldi,
                                 const float *weight, int N, int H, int D, float eps) {
    struct cuda_ctx *c = cuda_begin(be);
    if (N * H == 0) return;
    rmsnorm_forward<<<cuda_blocks((size_t)N * H, WARPS_PER_BLOCK), 32 * WARPS_PER_BLOCK, 0, c->stream>>>(
        out, ldo, rstd, inp, ldi, weight, N, H, D, eps);
    LAUNCH_CHECK();
}

static void cuda_rmsnorm_backward(struct backend *be, float *dinp, int lddi, float *dweight, const float *dout,
                                  int lddo, const float *inp, int ldi, const float *weight, const float *rstd, int N,
                                  int H, int D) {
    struct cuda_ctx *c = cuda_begin(be);
    if (N * H == 0) return;
    rmsnorm_backward<<<cuda_blocks((size_t)N * H, WARPS_PER_BLOCK), 32 * WARPS_PER_BLOCK, 0, c->stream>>>(
        dinp, lddi, dout, lddo, inp, ldi, weight, rstd, N, H, D);
    LAUNCH_CHECK();
    if (!dweight) return;
    int n_chunks = (int)cuda_blocks((size_t)N * H, NORM_ROWS_PER_CHUNK);
    float *partial = (float *)cuda_scratch(be, sizeof(float) * (size_t)n_chunks * D);
    rmsnorm_backward_dweight_partial<<<dim3(n_chunks, cuda_blocks(D, THREADS)), THREADS, 0, c->stream>>>(
        partial, dout, lddo, inp, ldi, rstd, N, H, D);
    LAUNCH_CHECK();
    rmsnorm_backward_dweight_sum<<<cuda_blocks(D, THREADS), THREADS, 0, c->stream>>>(dweight, partial, n_chunks, D);
    LAUNCH_CHECK();
}

/* ---------------------------------------------------------------- RoPE, SwiGLU ---- */

/* A thread per rotated pair (n, h, i < D/2); sign -1 rotates back (the backward). */
__global__ void rope_forward(float *x, int ldx, const int *pos, const float *cos_sin, int N, int H, int D, float sign) {
    int half = D / 2;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)N * H * half) return;
    int i = (int)(t % half), h = (int)(t / half % H), n = (int)(t / half / H);
    const float *cs = cos_sin + (size_t)pos[n] * D;
    float *v = x + (size_t)n * ldx + (size_t)h * D;
    float c = cs[i], s = sign * cs[half + i], a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
}

static void cuda_rope_forward(struct backend *be, float *x, int ldx, const int *pos, const float *cos_sin, int N, int H,
                              int D) {
    struct cuda_ctx *c = cuda_begin(be);
    size_t n = (size_t)N * H * (D / 2);
    if (!n) return;
    rope_forward<<<cuda_blocks(n, THREADS), THREADS, 0, c->stream>>>(x, ldx, pos, cos_sin, N, H, D, 1.0f);
    LAUNCH_CHECK();
}

/* The rotation is orthogonal: its backward is the rotation by the opposite angle. */
static void cuda_rope_backward(struct backend *be, float *dx, int lddx, const int *pos, const float *cos_sin, int N,
                               int H, int D) {
    struct cuda_ctx *c = cuda_begin(be);
    size_t n = (size_t)N * H * (D / 2);
    if (!n) return;
    rope_forward<<<cuda_blocks(n, THREADS), THREADS, 0, c->stream>>>(dx, lddx, pos, cos_sin, N, H, D, -1.0f);
    LAUNCH_CHECK();
}

__global__ void swiglu_forward(float *out, const float *gate_up, int N, int F) {
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)N * F) return;
    size_t n = t / F, i = t % F;
    float g = gate_up[n * 2 * F + i], u = gate_up[n * 2 * F + F + i];
    out[t] = g / (1.0f + expf(-g)) * u;
}

__global__ void swiglu_backward(float *dgate_up, const float *dout, const float *gate_up, int N, int F) {
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)N * F) return;
    size_t n = t / F, i = t % F;
    float g = gate_up[n * 2 * F + i], u = gate_up[n * 2 * F + F + i], d = dout[t];
    float sig = 1.0f / (1.0f + expf(-g));
    dgate_up[n * 2 * F + i] = d * u * sig * (1.0f + g * (1.0f - sig));
    dgate_up[n * 2 * F + F + i] = d * g * sig;
}

static void cuda_swiglu_forward(struct backend *be, float *out, const float *gate_up, int N, int F) {
    struct cuda_ctx *c = cuda_begin(be);
    if ((size_t)N * F == 0) return;
    swiglu_forward<<<cuda_blocks((size_t)N * F, THREADS), THREADS, 0, c->stream>>>(out, gate_up, N, F);
    LAUNCH_CHECK();
}

static void cuda_swiglu_backward(struct backend *be, float *dgate_up, const float *dout, const float *gate_up, int N,
                                 int F) {
    struct cuda_ctx *c = cuda_begin(be);
    if ((size_t)N * F == 0) return;
    swiglu_backward<<<cuda_blocks((size_t)N * F, THREADS), THREADS, 0, c->stream>>>(dgate_up, dout, gate_up, N, F);
    LAUNCH_CHECK();
}

/* ---------------------------------------------------------------- vectors ---- */

__global__ void axpy(float *y, const float *x, float alpha, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] += alpha * x[i];
}

__global__ void scale(float *x, float s, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

static void cuda_axpy(struct backend *be, float *y, const float *x, float alpha, size_t n) {
    struct cuda_ctx *c = cuda_begin(be);
    if (!n) return;
    axpy<<<grid_stride_blocks(n), THREADS, 0, c->stream>>>(y, x, alpha, n);
    LAUNCH_CHECK();
}

static void cuda_scale(struct backend *be, float *x, float s, size_t n) {
    struct cuda_ctx *c = cuda_begin(be);
    if (!n) return;
    scale<<<grid_stride_blocks(n), THREADS, 0, c->stream>>>(x, s, n);
    LAUNCH_CHECK();
}

/* ---------------------------------------------------------------- loss ---- */

/* A block per row: the maximum and its first index, then the sum of exponentials. */
__global__ void crossentropy_forward(float *losses, float *lse, int *correct, const float *logits, const int *targets,
                                     int V) {
    int m = blockIdx.x;
    const float *row = logits + (size_t)m * V;
    float mx = -INFINITY;
    int arg = INT32_MAX;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        if (arg == INT32_MAX || row[j] > mx) mx = row[j], arg = j;
    block_argmax(&mx, &arg);
    float sum = 0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(row[j] - mx);
    sum = block_sum(sum);
    if (threadIdx.x == 0) {
        float l = mx + logf(sum);
        lse[m] = l;
        losses[m] = l - row[targets[m]];
        correct[m] = arg == targets[m];
    }
}

/* In place: row <- scale * weight * (softmax(row) - onehot(target)). */
__global__ void crossentropy_backward(float *logits, const float *lse, const int *targets, const float *weights,
                                      float scale, int V) {
    int m = blockIdx.x, target = targets[m];
    float *row = logits + (size_t)m * V, w = scale * weights[m], l = lse[m];
    for (int j = threadIdx.x; j < V; j += blockDim.x) row[j] = w * expf(row[j] - l) - (j == target ? w : 0.0f);
}

/* One block: (sum of w*loss, sum of w, sum of correct, M) in double, into last and added to acc. */
__global__ void loss_stats(double *last, double *acc, const float *losses, const float *weights, const int *correct,
                           int M) {
    double wl = 0, w = 0, c = 0;
    for (int m = threadIdx.x; m < M; m += blockDim.x) {
        wl += (double)weights[m] * losses[m];
        w += weights[m];
        c += correct[m];
    }
    wl = block_sum(wl);
    w = block_sum(w);
    c = block_sum(c);
    if (threadIdx.x == 0) {
        double s[4] = {wl, w, c, (double)M};
        for (int i = 0; i < 4; i++) {
            last[i] = s[i];
            if (acc) acc[i] += s[i];
        }
    }
}

static void cuda_crossentropy_forward(struct backend *be, float *losses, float *lse, int *correct, const float *logits,
                                      const int *targets, int M, int V) {
    struct cuda_ctx *c = cuda_begin(be);
    if (M <= 0) return;
    crossentropy_forward<<<M, THREADS, 0, c->stream>>>(losses, lse, correct, logits, targets, V);
    LAUNCH_CHECK();
}

static void cuda_crossentropy_backward(struct backend *be, float *logits, const float *lse, const int *targets,
                                       const float *weights, float scale, int M, int V) {
    struct cuda_ctx *c = cuda_begin(be);
    if (M <= 0) return;
    crossentropy_backward<<<M, THREADS, 0, c->stream>>>(logits, lse, targets, weights, scale, V);
    LAUNCH_CHECK();
}

static void cuda_loss_stats(struct backend *be, double *last, double *acc, const float *losses, const float *weights,
                            const int *correct, int M) {
    struct cuda_ctx *c = cuda_begin(be);
    loss_stats<<<1, THREADS, 0, c->stream>>>(last, acc, losses, weights, correct, M);
    LAUNCH_CHECK();
}

/* ---------------------------------------------------------------- optimiser ---- */

/* PyTorch AdamW, in the CPU backend's arithmetic: step = lr / bc1 and sbc2 = sqrt(bc2) come from the
 * host. */
__global__ void adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1, float beta2,
                      float eps, float wd, float step, float sbc2) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        p[i] = p[i] * (1.0f - lr * wd) - step * mi / (sqrtf(vi) / sbc2 + eps);
    }
}

static void cuda_adamw(struct backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                       float beta2, float eps, float wd, float bc1, float bc2) {
    struct cuda_ctx *c = cuda_begin(be);
    if (!n) return;
    adamw<<<grid_stride_blocks(n), THREADS, 0, c->stream>>>(p, g, m, v, n, lr, beta1, beta2, eps, wd, lr / bc1,
                                                             sqrtf(bc2));
    LAUNCH_CHECK();
}

/* The sum of squares in two passes: SUMSQ_BLOCKS(n) blocks of fixed element sets write partial sums,
 * then one block adds them in a fixed tree. The partition depends on n only, so the result is the same
 * on every run and every GPU. */
#define SUMSQ_MAX_BLOCKS 1024

__global__ void sumsq_partial(double *partial, const float *x, size_t n) {
    double s = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    s = block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sumsq(double *out, const double *partial, int n_partial) {
    double s = 0;
    for (int i = threadIdx.x; i < n_partial; i += blockDim.x) s += partial[i];
    s = block_sum(s);
    if (threadIdx.x == 0) *out += s;
}

static void cuda_sumsq(struct backend *be, double *out, const float *x, size_t n) {
    struct cuda_ctx *c = cuda_begin(be);
    unsigned blocks = cuda_blocks(n, THREADS);
    blocks = blocks < 1 ? 1 : blocks > SUMSQ_MAX_BLOCKS ? SUMSQ_MAX_BLOCKS : blocks;
    double *partial = (double *)cuda_scratch(be, sizeof(double) * blocks);
    sumsq_partial<<<blocks, THREADS, 0, c->stream>>>(partial, x, n);
    LAUNCH_CHECK();
    sumsq<<<1, 1024, 0, c->stream>>>(out, partial, (int)blocks);
    LAUNCH_CHECK();
}

/* x *= max_norm / (norm + 1e-6) when norm = sqrt(*sumsq) > max_norm, the norm read on the device. */
__global__ void clip_by_norm(float *x, size_t n, const double *sumsq, float max_norm) {
    float norm = (float)sqrt(*sumsq);
    if (!(max_norm > 0 && norm > max_norm)) return;
    float s = max_norm / (norm + 1e-6f);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] *= s;
}

static void cuda_clip_by_norm(struct backend *be, float *x, size_t n, const double *sumsq, float max_norm) {
    struct cuda_ctx *c = cuda_begin(be);
    if (!n) return;
    clip_by_norm<<<grid_stride_blocks(n), THREADS, 0, c->stream>>>(x, n, sumsq, max_norm);
    LAUNCH_CHECK();
}

/* ---------------------------------------------------------------- the instance ---- */

static void cuda_close(struct backend *be) {
    struct cuda_ctx *c = cuda_begin(be);
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    if (c->scratch) cudaFree(c->scratch);
    cublasDestroy(c->blas);
    cudaStreamDestroy(c->stream);
    free(c);
    free(be);
}

static const struct backend cuda_ops = {
    .name = "cuda",
    .ctx = NULL,
    .close = cuda_close,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .zero = cuda_zero,
    .release = cuda_zero,
    .copy = cuda_copy,
    .mem_info = cuda_mem_info,
    .gemm = cuda_gemm,
    .matmul_forward = cuda_matmul_forward,
    .matmul_backward = cuda_matmul_backward,
    .embedding_forward = cuda_embedding_forward,
    .embedding_backward = cuda_embedding_backward,
    .rmsnorm_forward = cuda_rmsnorm_forward,
    .rmsnorm_backward = cuda_rmsnorm_backward,
    .rope_forward = cuda_rope_forward,
    .rope_backward = cuda_rope_backward,
    .swiglu_forward = cuda_swiglu_forward,
    .swiglu_backward = cuda_swiglu_backward,
    .axpy = cuda_axpy,
    .scale = cuda_scale,
    .gather_rows = cuda_gather_rows,
    .scatter_add_rows = cuda_scatter_add_rows,
    .set_rows = cuda_set_rows,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .attention_cached = cuda_attention_cached,
    .crossentropy_forward = cuda_crossentropy_forward,
    .crossentropy_backward = cuda_crossentropy_backward,
    .loss_stats = cuda_loss_stats,
    .adamw = cuda_adamw,
    .sumsq = cuda_sumsq,
    .clip_by_norm = cuda_clip_by_norm,
    .sample = cuda_sample,
};

extern "C" int backend_cuda_open(struct backend **out, int ordinal, struct whet_err *err) {
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return whet_errf(err, "no CUDA device: %s (device cuda:%d)", cudaGetErrorString(e), ordinal);
    }
    if (ordinal >= count) return whet_errf(err, "no CUDA device: cuda:%d (this machine has %d)", ordinal, count);
    if ((e = cudaSetDevice(ordinal)) != cudaSuccess) {
        (void)cudaGetLastError();
        return whet_errf(err, "no CUDA device: %s (device cuda:%d)", cudaGetErrorString(e), ordinal);
    }
    struct cuda_ctx *c = (struct cuda_ctx *)xcalloc(1, sizeof *c);
    c->ordinal = ordinal;
    snprintf(c->name, sizeof c->name, "cuda:%d", ordinal);
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        free(c);
        return whet_errf(err, "cuda:%d: cannot create a stream: %s", ordinal, cudaGetErrorString(e));
    }
    cublasStatus_t s = cublasCreate(&c->blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(c->stream);
        free(c);
        return whet_errf(err, "cuda:%d: cannot start cuBLAS: %s", ordinal, cublasGetStatusString(s));
    }
    BLAS_CHECK(cublasSetStream(c->blas, c->stream));
    /* fp32 products in fp32 (no TF32): the fp32 mode is the one the tests compare with the CPU */
    BLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_PEDANTIC_MATH));
    /* The device's pool keeps what ops free for the next allocation instead of returning it to the
     * driver at every synchronisation; cuda_alloc trims it before reporting out-of-memory. */
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, ordinal));
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    struct backend *be = (struct backend *)xmalloc(sizeof *be);
    *be = cuda_ops;
    be->name = c->name;
    be->ctx = c;
    *out = be;
    return 0;
}
