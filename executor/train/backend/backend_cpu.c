/* backend_cpu.c - the CPU implementation of backend.h: OpenBLAS sgemm for everything shaped like a
 * matrix product, OpenMP loops for the rest.
 *
 * Threading: there is one thread pool, OpenMP's. OpenBLAS runs on the calling thread (see
 * backend_cpu()) and every product is split here into per-thread blocks of rows or columns, each an
 * ordinary single-threaded sgemm. Two pools (OpenBLAS's pthreads next to OpenMP's
 * spinning workers) oversubscribe the cores and, on a busy machine, wait on each other; one pool
 * also lets attention run whole (segment, head) problems in parallel instead of many small threaded
 * products. Static partitions and per-thread partial sums added in a fixed order make every result
 * independent of scheduling (the same thread count gives the same bits).
 *
 * Inner loops carry `omp simd`: GCC at -O2 vectorises no floating-point reduction (a sum, a max) by
 * itself, and these loops are most of the non-sgemm time of a step.
 *
 * Attention keeps no probability matrix: per (segment, head) and block of 64 query rows, scores
 * are a small sgemm into per-thread scratch, and the backward pass recomputes them from the kept
 * log-sum-exp. Blocks above the causal diagonal are never computed. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"
#include "backend_cpu.h"
#include "util.h"

/* Loops over fewer elements than this run on one thread: waking the pool costs more. */
#define PAR_MIN 32768
/* The same for loops of a few operations per element (norms, RoPE, copies, row gathers): below
 * this they are a fraction of a millisecond of work, and on a loaded machine waking the sleeping
 * partner for them costs more than the whole loop (the profile of bench_train showed RMSNorm at 20x
 * its CPU time in wall time, split in two). */
#define PAR_MIN_LIGHT (1 << 20)

/* exp(x) in plain arithmetic, so loops of it vectorise (libm's expf is a call per element):
 * 2^n * p(r) with n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts), p the degree-6 Taylor
 * polynomial, exact enough on |r| <= ln2/2 (relative error under 3e-7). x is clamped to the float
 * range, so exp of a very negative number is 1.6e-38 instead of 0, which no sum notices. */
static inline float exp_fast(float x) {
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    float n = rintf(x * 1.44269504f);
    float r = x - n * 0.693145752f - n * 1.42860677e-6f;
    float p = 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return p * scale;
}

/* ---------------------------------------------------------------- memory ---- */

/* Available memory as the kernel counts it (MemAvailable), and the machine's total. */
static void cpu_mem_info(struct backend *be, size_t *free_bytes, size_t *total_bytes) {
    long page = sysconf(_SC_PAGESIZE), avail = sysconf(_SC_AVPHYS_PAGES), total = sysconf(_SC_PHYS_PAGES);
    *free_bytes = avail > 0 ? (size_t)avail * (size_t)page : 0;
    *total_bytes = total > 0 ? (size_t)total * (size_t)page : 0;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long long kib;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) *free_bytes = (size_t)kib * 1024;
    if (f) fclose(f);
}

/* memcpy from src (memset to zero when src is NULL), split across the threads in blocks of `from` / 4 bytes
 * from `from` bytes on. An allocation is zeroed here, and that is the first touch of its memory: its page
 * faults, which on a virtual machine cost several times the writes (a co-trained base's activations,
 * hundreds of MB, were a tenth of a short run's CPU time, all of it on the one thread while the other
 * waited); an upload's copy likewise (the base's weights, as a co-training process starts). */
static void fill_bytes(void *dst, const void *src, size_t bytes, size_t from) {
    size_t chunk = from / 4, n = (bytes + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (bytes >= from)
    for (size_t i = 0; i < n; i++) {
        size_t len = i + 1 < n ? chunk : bytes - i * chunk;
        if (src) memcpy((char *)dst + i * chunk, (const char *)src + i * chunk, len);
        else memset((char *)dst + i * chunk, 0, len);
    }
}

/* Allocations from this size on are checked against the available memory before they are made. */
#define CHECKED_ALLOC_BYTES ((size_t)1 << 30)

static void *cpu_alloc(struct backend *be, size_t bytes, struct whet_err *err) {
    void *p = NULL;
    size_t free_bytes, total;
    /* Where the kernel always overcommits (vm.overcommit_memory=1, as Redis and many container hosts set
     * it), malloc of terabytes succeeds and the zeroing below gets the process OOM-killed: a large block
     * that cannot fit is refused here with the error a failed malloc gives. */
    if (bytes >= CHECKED_ALLOC_BYTES) {
        cpu_mem_info(be, &free_bytes, &total);
        if (bytes > free_bytes) return backend_out_of_memory(err, "host", bytes, free_bytes);
    }
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) {
        cpu_mem_info(be, &free_bytes, &total);
        return backend_out_of_memory(err, "host", bytes, free_bytes);
    }
    /* Fresh memory is split from PAR_MIN floats (128 KiB: a fault a page), not PAR_MIN_LIGHT: most activation
     * buffers of a pass of a thousand tokens are a few MB, and were each zeroed on one thread. */
    fill_bytes(p, NULL, bytes, sizeof(float) * PAR_MIN);
    return p;
}
static void cpu_free(struct backend *be, void *p) { free(p); }

/* Zeroes the bytes and hands the whole pages among them back to the kernel (they read as zero when next
 * touched, and take memory again only then). Safe on any block `alloc` made: the allocator's own
 * records lie outside the bytes it handed out, and its memory is private and anonymous. */
static void cpu_release(struct backend *be, void *p, size_t bytes) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)p, hi = lo + bytes;
    uintptr_t a = (lo + page - 1) & ~(page - 1), b = hi & ~(page - 1);
    if (b <= a) {
        memset(p, 0, bytes);
        return;
    }
    memset(p, 0, a - lo);
    memset((void *)b, 0, hi - b);
    if (madvise((void *)a, b - a, MADV_DONTNEED)) memset((void *)a, 0, b - a);
}

static void cpu_upload(struct backend *be, void *dst, const void *src, size_t bytes) {
    fill_bytes(dst, src, bytes, sizeof(float) * PAR_MIN);
}
static void cpu_download(struct backend *be, void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_zero(struct backend *be, void *p, size_t bytes) {
    fill_bytes(p, NULL, bytes, sizeof(float) * PAR_MIN_LIGHT);
}
static void cpu_copy(struct backend *be, void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }

/* ---------------------------------------------------------------- matmul ---- */

/* One single-threaded sgemm (row-major). */
static void sgemm1(int ta, int tb, int M, int N, int K, float alpha, const float *a, int lda, const float *b, int ldb,
                   float beta, float *c, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, a,
                lda, b, ldb, beta, c, ldc);
}

/* Products smaller than this many multiply-adds run on one thread. */
#define GEMM_PARALLEL_MIN (1 << 18)

/* c[M,N] = alpha op(a) op(b) + beta c, split across the OpenMP threads along the larger of M and N
 * in blocks that are multiples of 16 (whole sgemm kernel tiles). */
static void cpu_gemm(struct backend *be, int ta, int tb, int M, int N, int K, float alpha, const float *a, int lda, const float *b,
                     int ldb, float beta, float *c, int ldc) {
    if (M <= 0 || N <= 0) return;
    if ((double)M * N * K < GEMM_PARALLEL_MIN || omp_get_max_threads() == 1) {
        sgemm1(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    int split_m = M >= N;
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num(), total = split_m ? M : N;
        int chunk = (total + nt - 1) / nt;
        chunk = (chunk + 15) / 16 * 16;
        int lo = t * chunk, hi = lo + chunk < total ? lo + chunk : total;
        if (lo < hi) {
            if (split_m) /* rows lo..hi of op(a) and of c */
                sgemm1(ta, tb, hi - lo, N, K, alpha, ta ? a + lo : a + (size_t)lo * lda, lda, b, ldb, beta,
                       c + (size_t)lo * ldc, ldc);
            else /* columns lo..hi of op(b) and of c */
                sgemm1(ta, tb, M, hi - lo, K, alpha, a, lda, tb ? b + (size_t)lo * ldb : b + lo, ldb, beta, c + lo, ldc);
        }
    }
}

/* out[N,OC] = beta*out + inp[N,C] @ weight[OC,C]^T + bias */
static void cpu_matmul_forward(struct backend *be, float *out, int ldo, const float *inp, int ldi, const float *weight,
                               const float *bias, int N, int C, int OC, float beta) {
    cpu_gemm(be, 0, 1, N, OC, C, 1.0f, inp, ldi, weight, C, beta, out, ldo);
    if (bias) {
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= PAR_MIN_LIGHT)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) out[(size_t)n * ldo + o] += bias[o];
    }
}

static void cpu_matmul_backward(struct backend *be, float *dinp, int lddi, float *dweight, float *dbias, const float *dout, int lddo,
                                const float *inp, int ldi, const float *weight, int N, int C, int OC) {
    if (dinp) /* dinp[N,C] += dout[N,OC] @ weight[OC,C] */
        cpu_gemm(be, 0, 0, N, C, OC, 1.0f, dout, lddo, weight, C, 1.0f, dinp, lddi);
    if (dweight) /* dweight[OC,C] += dout^T @ inp */
        cpu_gemm(be, 1, 0, OC, C, N, 1.0f, dout, lddo, inp, ldi, 1.0f, dweight, C);
    if (dbias) {
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= PAR_MIN_LIGHT)
        for (int o = 0; o < OC; o++) {
            float s = 0;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * lddo + o];
            dbias[o] += s;
        }
    }
}

/* ---------------------------------------------------------------- embedding ---- */

static void cpu_embedding_forward(struct backend *be, float *out, const int *ids, const float *wte, int N, int C) {
#pragma omp parallel for schedule(static) if ((size_t)N * C >= PAR_MIN_LIGHT)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * C, wte + (size_t)ids[n] * C, sizeof(float) * (size_t)C);
}

static void cpu_embedding_backward(struct backend *be, float *dwte, const float *dout, const int *ids, int N, int C) {
    /* Threads own column ranges, so repeated ids never race and the sum order is fixed. */
#pragma omp parallel if ((size_t)N * C >= PAR_MIN_LIGHT)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int c0 = (int)((long long)C * t / nt), c1 = (int)((long long)C * (t + 1) / nt);
        for (int n = 0; n < N; n++) {
            float *d = dwte + (size_t)ids[n] * C;
            const float *g = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) d[c] += g[c];
        }
    }
}

/* ---------------------------------------------------------------- RMSNorm ---- */

static void cpu_rmsnorm_forward(struct backend *be, float *out, int ldo, float *rstd, const float *inp, int ldi, const float *weight,
                                int N, int H, int D, float eps) {
#pragma omp parallel for schedule(static) if ((size_t)N * H * D >= PAR_MIN_LIGHT)
    for (int r = 0; r < N * H; r++) {
        int n = r / H, h = r % H;
        const float *x = inp + (size_t)n * ldi + (size_t)h * D;
        float *y = out + (size_t)n * ldo + (size_t)h * D;
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int i = 0; i < D; i++) ss += x[i] * x[i];
        float s = 1.0f / sqrtf(ss / (float)D + eps);
        rstd[r] = s;
#pragma omp simd
        for (int i = 0; i < D; i++) y[i] = x[i] * s * weight[i];
    }
}

static void cpu_rmsnorm_backward(struct backend *be, float *dinp, int lddi, float *dweight, const float *dout, int lddo,
                                 const float *inp, int ldi, const float *weight, const float *rstd, int N, int H,
                                 int D) {
    int nt = omp_get_max_threads();
    float *partial = dweight ? calloc((size_t)nt * D, sizeof(float)) : NULL;
    if (dweight && !partial) abort();
#pragma omp parallel if ((size_t)N * H * D >= PAR_MIN_LIGHT)
    {
        float *pw = partial ? partial + (size_t)omp_get_thread_num() * D : NULL;
#pragma omp for schedule(static)
        for (int r = 0; r < N * H; r++) {
            int n = r / H, h = r % H;
            const float *x = inp + (size_t)n * ldi + (size_t)h * D;
            const float *dy = dout + (size_t)n * lddo + (size_t)h * D;
            float *dx = dinp + (size_t)n * lddi + (size_t)h * D;
            float s = rstd[r], dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int i = 0; i < D; i++) dot += dy[i] * weight[i] * x[i] * s;
            dot /= (float)D;
#pragma omp simd
            for (int i = 0; i < D; i++) dx[i] += s * (dy[i] * weight[i] - x[i] * s * dot);
            if (pw) {
#pragma omp simd
                for (int i = 0; i < D; i++) pw[i] += dy[i] * (x[i] * s);
            }
        }
    }
    if (dweight) {
        for (int t = 0; t < nt; t++)
            for (int i = 0; i < D; i++) dweight[i] += partial[(size_t)t * D + i];
        free(partial);
    }
}

/* ---------------------------------------------------------------- RoPE ---- */

static void rope_apply(float *x, int ldx, const int *pos, const float *cos_sin, int N, int H, int D, float sign) {
    int half = D / 2;
#pragma omp parallel for schedule(static) if ((size_t)N * H * D >= PAR_MIN_LIGHT)
    for (int n = 0; n < N; n++) {
        const float *cs = cos_sin + (size_t)pos[n] * D;
        for (int h = 0; h < H; h++) {
            float *v = x + (size_t)n * ldx + (size_t)h * D;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                float c = cs[i], s = sign * cs[half + i], a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
    }
}

static void cpu_rope_forward(struct backend *be, float *x, int ldx, const int *pos, const float *cos_sin, int N, int H, int D) {
    rope_apply(x, ldx, pos, cos_sin, N, H, D, 1.0f);
}

/* The rotation is orthogonal: its backward is the rotation by the opposite angle. */
static void cpu_rope_backward(struct backend *be, float *dx, int lddx, const int *pos, const float *cos_sin, int N, int H, int D) {
    rope_apply(dx, lddx, pos, cos_sin, N, H, D, -1.0f);
}

/* ---------------------------------------------------------------- SwiGLU ---- */

static void cpu_swiglu_forward(struct backend *be, float *out, const float *gate_up, int N, int F) {
#pragma omp parallel for schedule(static) if ((size_t)N * F >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *g = gate_up + (size_t)n * 2 * F, *u = g + F;
        float *o = out + (size_t)n * F;
#pragma omp simd
        for (int i = 0; i < F; i++) o[i] = g[i] / (1.0f + exp_fast(-g[i])) * u[i];
    }
}

static void cpu_swiglu_backward(struct backend *be, float *dgate_up, const float *dout, const float *gate_up, int N, int F) {
#pragma omp parallel for schedule(static) if ((size_t)N * F >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *g = gate_up + (size_t)n * 2 * F, *u = g + F, *d = dout + (size_t)n * F;
        float *dg = dgate_up + (size_t)n * 2 * F, *du = dg + F;
#pragma omp simd
        for (int i = 0; i < F; i++) {
            float sig = 1.0f / (1.0f + exp_fast(-g[i]));
            dg[i] = d[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
            du[i] = d[i] * g[i] * sig;
        }
    }
}

static void cpu_axpy(struct backend *be, float *y, const float *x, float alpha, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN_LIGHT)
    for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

static void cpu_gather_rows(struct backend *be, float *dst, const float *src, const int *rows, int n_rows, int C) {
#pragma omp parallel for schedule(static) if ((size_t)n_rows * C >= PAR_MIN_LIGHT)
    for (int i = 0; i < n_rows; i++) memcpy(dst + (size_t)i * C, src + (size_t)rows[i] * C, sizeof(float) * (size_t)C);
}

static void cpu_scatter_add_rows(struct backend *be, float *dst, const float *src, const int *rows, int n_rows, int C) {
#pragma omp parallel for schedule(static) if ((size_t)n_rows * C >= PAR_MIN_LIGHT)
    for (int i = 0; i < n_rows; i++) {
        float *d = dst + (size_t)rows[i] * C;
        const float *s = src + (size_t)i * C;
        for (int c = 0; c < C; c++) d[c] += s[c];
    }
}

static void cpu_set_rows(struct backend *be, float *dst, const int *rows, const float *src, int lds, int n_rows, int C) {
    for (int i = 0; i < n_rows; i++) memcpy(dst + (size_t)rows[i] * C, src + (size_t)i * lds, sizeof(float) * (size_t)C);
}

/* ---------------------------------------------------------------- attention ---- */

/* Row blocks of this many queries: the part of the score matrix above the diagonal of a block is
 * never computed. */
#define ATT_BLOCK 64

/* One (segment, head) problem of the forward pass, on the calling thread; S is ATT_BLOCK*T
 * scratch for one block of scores. */
static void attention_forward_one(float *O, int HD, float *lse, float *S, const float *Q, int ldq, const float *K,
                                  int ldk, const float *Vv, int ldv, int L, int D, float scale) {
    for (int r0 = 0; r0 < L; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < L ? r0 + ATT_BLOCK : L, R = r1 - r0;
        /* S[R, r1] = scale * Q[r0:r1] @ K[0:r1]^T */
        sgemm1(0, 1, R, r1, D, scale, Q + (size_t)r0 * ldq, ldq, K, ldk, 0.0f, S, r1);
        for (int i = 0; i < R; i++) {
            float *row = S + (size_t)i * r1, mx = -INFINITY, sum = 0;
            int last = r0 + i;
#pragma omp simd reduction(max : mx)
            for (int j = 0; j <= last; j++) mx = row[j] > mx ? row[j] : mx;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j <= last; j++) sum += (row[j] = exp_fast(row[j] - mx));
            float inv = 1.0f / sum;
#pragma omp simd
            for (int j = 0; j <= last; j++) row[j] *= inv;
            for (int j = last + 1; j < r1; j++) row[j] = 0;
            lse[r0 + i] = mx + logf(sum);
        }
        /* O[r0:r1] = P[R, r1] @ V[0:r1] */
        sgemm1(0, 0, R, D, r1, 1.0f, S, r1, Vv, ldv, 0.0f, O + (size_t)r0 * HD, HD);
    }
}

static void cpu_attention_forward(struct backend *be, float *out, float *lse, const float *q, int ldq, const float *k,
                                  int ldk, const float *v, int ldv, const struct attn_segment *segs,
                                  const struct attn_segment *host_segs, int n_segs, int N, int T, int H, int HKV,
                                  int D) {
    float scale = 1.0f / sqrtf((float)D);
    int group = H / HKV, HD = H * D;
#pragma omp parallel if ((size_t)n_segs * H * T * D >= PAR_MIN)
    {
        float *S = malloc(sizeof(float) * (size_t)ATT_BLOCK * T);
        if (!S) abort();
#pragma omp for schedule(dynamic, 1)
        for (int w = 0; w < n_segs * H; w++) {
            int si = w / H, h = w % H, kh = h / group, s = segs[si].start;
            attention_forward_one(out + (size_t)s * HD + (size_t)h * D, HD, lse + (size_t)h * N + s, S,
                                  q + (size_t)s * ldq + (size_t)h * D, ldq, k + (size_t)s * ldk + (size_t)kh * D, ldk,
                                  v + (size_t)s * ldv + (size_t)kh * D, ldv, segs[si].len, D, scale);
        }
        free(S);
    }
}

/* One (segment, query head) problem of the backward pass. P and dS are ATT_BLOCK*T scratch: the
 * probabilities of a block are recomputed from Q, K and the kept log-sum-exp. */
static void attention_backward_one(float *dQ, int lddq, float *dK, int lddk, float *dV, int lddv, float *P, float *dS,
                                   const float *dO, int HD, const float *lse, const float *Q, int ldq, const float *K,
                                   int ldk, const float *Vv, int ldv, int L, int D, float scale) {
    for (int r0 = 0; r0 < L; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < L ? r0 + ATT_BLOCK : L, R = r1 - r0;
        const float *dOb = dO + (size_t)r0 * HD;
        /* P[R, r1] = exp(scale * Q[r0:r1] @ K[0:r1]^T - lse), zero above the diagonal */
        sgemm1(0, 1, R, r1, D, scale, Q + (size_t)r0 * ldq, ldq, K, ldk, 0.0f, P, r1);
        for (int i = 0; i < R; i++) {
            float *p = P + (size_t)i * r1, l = lse[r0 + i];
            int last = r0 + i;
#pragma omp simd
            for (int j = 0; j <= last; j++) p[j] = exp_fast(p[j] - l);
            for (int j = last + 1; j < r1; j++) p[j] = 0;
        }
        /* dV[0:r1] += P^T @ dO[r0:r1] */
        sgemm1(1, 0, r1, D, R, 1.0f, P, r1, dOb, HD, 1.0f, dV, lddv);
        /* dP[R, r1] = dO[r0:r1] @ V[0:r1]^T */
        sgemm1(0, 1, R, r1, D, 1.0f, dOb, HD, Vv, ldv, 0.0f, dS, r1);
        /* dS = P * (dP - sum_j P dP) */
        for (int i = 0; i < R; i++) {
            const float *p = P + (size_t)i * r1;
            float *d = dS + (size_t)i * r1, dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j < r1; j++) dot += p[j] * d[j];
#pragma omp simd
            for (int j = 0; j < r1; j++) d[j] = p[j] * (d[j] - dot);
        }
        /* dQ[r0:r1] += scale * dS @ K[0:r1];  dK[0:r1] += scale * dS^T @ Q[r0:r1] */
        sgemm1(0, 0, R, D, r1, scale, dS, r1, K, ldk, 1.0f, dQ + (size_t)r0 * lddq, lddq);
        sgemm1(1, 0, r1, D, R, scale, dS, r1, Q + (size_t)r0 * ldq, ldq, 1.0f, dK, lddk);
    }
}

static void cpu_attention_backward(struct backend *be, float *dq, int lddq, float *dk, int lddk, float *dv, int lddv,
                                   const float *dout, const float *lse, const float *q, int ldq, const float *k,
                                   int ldk, const float *v, int ldv, const struct attn_segment *segs,
                                   const struct attn_segment *host_segs, int n_segs, int N, int T, int H, int HKV,
                                   int D) {
    float scale = 1.0f / sqrtf((float)D);
    int group = H / HKV, HD = H * D;
    /* Work items are (segment, kv head): the query heads of a GQA group share dK and dV, so one
     * thread does them all, in order. */
#pragma omp parallel if ((size_t)n_segs * HKV * T * D >= PAR_MIN)
    {
        float *P = malloc(sizeof(float) * (size_t)ATT_BLOCK * T), *dS = malloc(sizeof(float) * (size_t)ATT_BLOCK * T);
        if (!P || !dS) abort();
#pragma omp for schedule(dynamic, 1)
        for (int w = 0; w < n_segs * HKV; w++) {
            int si = w / HKV, kh = w % HKV, s = segs[si].start;
            for (int h = kh * group; h < (kh + 1) * group; h++)
                attention_backward_one(dq + (size_t)s * lddq + (size_t)h * D, lddq, dk + (size_t)s * lddk + (size_t)kh * D,
                                       lddk, dv + (size_t)s * lddv + (size_t)kh * D, lddv, P, dS,
                                       dout + (size_t)s * HD + (size_t)h * D, HD, lse + (size_t)h * N + s,
                                       q + (size_t)s * ldq + (size_t)h * D, ldq, k + (size_t)s * ldk + (size_t)kh * D,
                                       ldk, v + (size_t)s * ldv + (size_t)kh * D, ldv, segs[si].len, D, scale);
        }
        free(P);
        free(dS);
    }
}

static void cpu_attention_cached(struct backend *be, float *out, const float *q, int ldq, const float *kc, const float *vc,
                                 const int *first, const int *n_ctx, int n, int H, int HKV, int D) {
    float scale = 1.0f / sqrtf((float)D);
    int group = H / HKV, KVD = HKV * D;
    int max_ctx = 0;
    for (int i = 0; i < n; i++) max_ctx = n_ctx[i] > max_ctx ? n_ctx[i] : max_ctx;
#pragma omp parallel if ((size_t)n * H * D * 64 >= PAR_MIN)
    {
        float *sc = malloc(sizeof(float) * (size_t)(max_ctx ? max_ctx : 1));
        if (!sc) abort();
#pragma omp for schedule(dynamic)
        for (int ih = 0; ih < n * H; ih++) {
            int i = ih / H, h = ih % H, kh = h / group, L = n_ctx[i];
            const float *qi = q + (size_t)i * ldq + (size_t)h * D;
            const float *K = kc + (size_t)first[i] * KVD + (size_t)kh * D, *V = vc + (size_t)first[i] * KVD + (size_t)kh * D;
            float mx = -INFINITY, sum = 0;
            for (int j = 0; j < L; j++) {
                float s = 0;
#pragma omp simd reduction(+ : s)
                for (int d = 0; d < D; d++) s += qi[d] * K[(size_t)j * KVD + d];
                sc[j] = s * scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < L; j++) sum += (sc[j] = exp_fast(sc[j] - mx));
            float *o = out + (size_t)i * H * D + (size_t)h * D;
            for (int d = 0; d < D; d++) o[d] = 0;
            for (int j = 0; j < L; j++) {
                float p = sc[j] / sum;
                for (int d = 0; d < D; d++) o[d] += p * V[(size_t)j * KVD + d];
            }
        }
        free(sc);
    }
}

/* ---------------------------------------------------------------- loss ---- */

static void cpu_crossentropy_forward(struct backend *be, float *losses, float *lse, int *correct, const float *logits, const int *targets,
                                     int M, int V) {
#pragma omp parallel for schedule(static) if ((size_t)M * V >= PAR_MIN)
    for (int m = 0; m < M; m++) {
        const float *row = logits + (size_t)m * V;
        /* The maximum in a vectorised pass, then its first index (the argmax, ties to the lowest). */
        float mx = row[0];
#pragma omp simd reduction(max : mx)
        for (int j = 1; j < V; j++) mx = row[j] > mx ? row[j] : mx;
        int arg = 0;
        while (arg < V - 1 && row[arg] != mx) arg++; /* bounded: a NaN maximum matches nothing */
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < V; j++) sum += exp_fast(row[j] - mx);
        lse[m] = mx + logf(sum);
        losses[m] = lse[m] - row[targets[m]];
        correct[m] = arg == targets[m];
    }
}

static void cpu_crossentropy_backward(struct backend *be, float *logits, const float *lse, const int *targets, const float *weights,
                                      float scale, int M, int V) {
#pragma omp parallel for schedule(static) if ((size_t)M * V >= PAR_MIN)
    for (int m = 0; m < M; m++) {
        float *row = logits + (size_t)m * V, w = scale * weights[m], l = lse[m];
#pragma omp simd
        for (int j = 0; j < V; j++) row[j] = w * exp_fast(row[j] - l);
        row[targets[m]] -= w;
    }
}

/* ---------------------------------------------------------------- optimiser ---- */

/* sqrt(x) for x >= 0 in plain arithmetic (libm's sqrtf keeps errno for negative input, which stops
 * the loop around it from vectorising): x * rsqrt(x), rsqrt from the classic bit-level estimate
 * and three Newton steps (relative error near 1e-7); 0 gives 0. */
static inline float sqrt_fast(float x) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    bits = 0x5f3759dfu - (bits >> 1);
    float y;
    memcpy(&y, &bits, 4);
    float h = 0.5f * x;
    y = y * (1.5f - h * y * y);
    y = y * (1.5f - h * y * y);
    y = y * (1.5f - h * y * y);
    return x * y;
}

static void cpu_adamw(struct backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1, float beta2,
                      float eps, float wd, float bc1, float bc2) {
    float step = lr / bc1, sbc2 = sqrtf(bc2);
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
        v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        float pi = p[i] * (1.0f - lr * wd);
        p[i] = pi - step * m[i] / (sqrt_fast(v[i]) / sbc2 + eps);
    }
}

static void cpu_sumsq(struct backend *be, double *out, const float *x, size_t n) {
    double s = 0;
#pragma omp parallel for simd reduction(+ : s) schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    *out += s;
}

static void cpu_scale(struct backend *be, float *x, float s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

static void cpu_clip_by_norm(struct backend *be, float *x, size_t n, const double *sumsq, float max_norm) {
    float norm = (float)sqrt(*sumsq);
    if (max_norm > 0 && norm > max_norm) cpu_scale(be, x, max_norm / (norm + 1e-6f), n);
}

static void cpu_loss_stats(struct backend *be, double *last, double *acc, const float *losses, const float *weights,
                           const int *correct, int M) {
    double s[4] = {0, 0, 0, M};
    for (int m = 0; m < M; m++) {
        s[0] += (double)weights[m] * losses[m];
        s[1] += weights[m];
        s[2] += correct[m];
    }
    for (int i = 0; i < 4; i++) {
        last[i] = s[i];
        if (acc) acc[i] += s[i];
    }
}

static void cpu_close(struct backend *be) { free(be); }

static const struct backend cpu = {
    .name = "cpu",
    .close = cpu_close,
    .mem_info = cpu_mem_info,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .zero = cpu_zero,
    .release = cpu_release,
    .copy = cpu_copy,
    .gemm = cpu_gemm,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .axpy = cpu_axpy,
    .gather_rows = cpu_gather_rows,
    .scatter_add_rows = cpu_scatter_add_rows,
    .set_rows = cpu_set_rows,
    .attention_cached = cpu_attention_cached,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .crossentropy_forward = cpu_crossentropy_forward,
    .crossentropy_backward = cpu_crossentropy_backward,
    .adamw = cpu_adamw,
    .sumsq = cpu_sumsq,
    .clip_by_norm = cpu_clip_by_norm,
    .scale = cpu_scale,
    .loss_stats = cpu_loss_stats,
    .sample = cpu_sample,
};

int backend_cpu_open(struct backend **out, struct whet_err *err) {
    /* Products are split across OpenMP threads here, so OpenBLAS must stay on the calling thread.
     * The pthreads build needs telling; the OpenMP build does so by itself inside a parallel region
     * (and there openblas_set_num_threads would shrink OpenMP's own pool to one thread). */
    if (openblas_get_parallel() == 1) openblas_set_num_threads(1);
    struct backend *be = xmalloc(sizeof *be);
    *be = cpu;
    *out = be;
    return 0;
}
