/* emu.cpp - the emulated CUDA runtime and cuBLAS of cuda_runtime.h and cublas_v2.h: kernels run as
 * fibers, a block at a time; see cuda_runtime.h for what is checked.
 *
 * A fiber starts on its own stack through makecontext/setcontext and from then on switches with
 * _setjmp/_longjmp, which save no signal mask: swapcontext's system call per switch made the sampling
 * tests (thousands of launches of hundreds of threads meeting at dozens of barriers) take minutes.
 * Jumping between stacks is what the fortified longjmp refuses, hence no _FORTIFY_SOURCE here. */
#undef _FORTIFY_SOURCE
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <vector>

#include "cublas_v2.h"
#include "cuda_runtime.h"

dim3 emu_thread_idx, emu_block_idx, emu_block_dim, emu_grid_dim;

enum fiber_state { RUNNING, AT_BLOCK_BARRIER, AT_WARP_BARRIER, EXITED };

struct fiber {
    ucontext_t start; /* the first entry */
    jmp_buf resume;   /* where it waits, once started */
    int started;
    enum fiber_state state;
    unsigned tid;
};

#define STACK_BYTES (128 * 1024)

/* The fibers' stacks, kept from launch to launch, freed at exit. */
static struct fiber_stacks {
    std::vector<char *> all;
    ~fiber_stacks() {
        for (char *s : all) free(s);
    }
} stacks;
static std::vector<fiber> fibers;
static fiber *current;
static jmp_buf scheduler;
static const std::function<void()> *kernel_body;
static uint64_t warp_slots[1024];

static void die(const char *what) {
    fprintf(stderr, "emulated CUDA: %s (block %u,%u,%u of a %u-thread block)\n", what, emu_block_idx.x, emu_block_idx.y,
            emu_block_idx.z, emu_block_dim.x);
    abort();
}

static void fiber_main(void) {
    (*kernel_body)();
    current->state = EXITED;
    _longjmp(scheduler, 1);
}

static void wait_as(enum fiber_state s) {
    current->state = s;
    if (!_setjmp(current->resume)) _longjmp(scheduler, 1);
}

void __syncthreads(void) { wait_as(AT_BLOCK_BARRIER); }
void emu_warp_sync(void) { wait_as(AT_WARP_BARRIER); }
void *emu_warp_slot(int lane) { return &warp_slots[(threadIdx.x & ~31u) + (unsigned)lane]; }

/* One block: every fiber runs until it exits or waits; then the barriers whose threads have all arrived
 * open, until every fiber has exited. */
static void run_block(unsigned n) {
    if (fibers.size() < n) fibers.resize(n);
    while (stacks.all.size() < n) stacks.all.push_back((char *)malloc(STACK_BYTES));
    for (unsigned t = 0; t < n; t++) {
        fiber *f = &fibers[t];
        f->tid = t;
        f->state = RUNNING;
        f->started = 0;
        getcontext(&f->start);
        f->start.uc_stack.ss_sp = stacks.all[t];
        f->start.uc_stack.ss_size = STACK_BYTES;
        f->start.uc_link = NULL;
        makecontext(&f->start, fiber_main, 0);
    }
    for (;;) {
        for (unsigned t = 0; t < n; t++)
            if (fibers[t].state == RUNNING) {
                current = &fibers[t];
                emu_thread_idx = dim3(t);
                if (_setjmp(scheduler)) continue; /* the fiber waits or has exited */
                if (current->started) _longjmp(current->resume, 1);
                current->started = 1;
                setcontext(&current->start);
            }
        unsigned exited = 0, at_block = 0;
        int opened = 0;
        for (unsigned t = 0; t < n; t++) exited += fibers[t].state == EXITED, at_block += fibers[t].state == AT_BLOCK_BARRIER;
        if (exited == n) return;
        for (unsigned w = 0; w < n; w += 32) { /* warps whose lanes all wait at a shuffle */
            unsigned waiting = 0, gone = 0;
            for (unsigned t = w; t < w + 32 && t < n; t++)
                waiting += fibers[t].state == AT_WARP_BARRIER, gone += fibers[t].state == EXITED;
            if (!waiting) continue;
            if (gone) die("a warp shuffle after some lanes of the warp exited");
            if (waiting == 32) {
                for (unsigned t = w; t < w + 32 && t < n; t++) fibers[t].state = RUNNING;
                opened = 1;
            }
        }
        if (opened) continue;
        if (at_block == n - exited) {
            if (exited) die("__syncthreads after some threads of the block exited");
            for (unsigned t = 0; t < n; t++) fibers[t].state = RUNNING;
            continue;
        }
        die("threads wait at barriers that can never open (a __syncthreads or a shuffle not every thread reaches)");
    }
}

void emu_run(dim3 grid, dim3 block, const std::function<void()> &body) {
    if (block.x == 0 || block.x > 1024 || block.x % 32 || block.y != 1 || block.z != 1) die("bad block size");
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) die("bad grid size");
    kernel_body = &body;
    emu_grid_dim = grid;
    emu_block_dim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                emu_block_idx = dim3(x, y, z);
                run_block(block.x);
            }
}

/* ---- runtime: device memory is host memory, every call synchronous ---- */

#define DEVICE_BYTES ((size_t)16 << 30) /* what the emulated device says it has */

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    default: return "invalid argument";
    }
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    *s = (cudaStream_t)malloc(1);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    free(s);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return cudaSuccess; }
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s) {
    *p = bytes <= DEVICE_BYTES ? malloc(bytes) : NULL;
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
    free(p);
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s) {
    memset(p, v, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s) {
    if ((char *)dst < (const char *)src + bytes && (const char *)src < (char *)dst + bytes)
        return cudaErrorInvalidValue; /* overlapping regions: undefined on the device */
    memcpy(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    *free_bytes = DEVICE_BYTES / 2, *total = DEVICE_BYTES;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device) {
    *pool = NULL;
    return cudaSuccess;
}
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) { return cudaSuccess; }
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value) { return cudaSuccess; }

/* ---- cuBLAS ---- */

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = (cublasHandle_t)malloc(1);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) { return CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusString(cublasStatus_t s) { return s ? "CUBLAS_STATUS_INVALID_VALUE" : "CUBLAS_STATUS_SUCCESS"; }

/* Column-major c[m,n] = alpha op(a)[m,k] op(b)[k,n] + beta c, with cuBLAS's argument checks. */
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *a, int lda, const float *b, int ldb, const float *beta,
                           float *c, int ldc) {
    if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? (m > 1 ? m : 1) : (k > 1 ? k : 1)) ||
        ldb < (tb == CUBLAS_OP_N ? (k > 1 ? k : 1) : (n > 1 ? n : 1)) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                float x = ta == CUBLAS_OP_N ? a[i + (size_t)p * lda] : a[p + (size_t)i * lda];
                float y = tb == CUBLAS_OP_N ? b[p + (size_t)j * ldb] : b[j + (size_t)p * ldb];
                s += (double)x * y;
            }
            float *cij = &c[i + (size_t)j * ldc];
            *cij = (float)(*alpha * s + (*beta == 0 ? 0.0 : (double)*beta * *cij));
        }
    return CUBLAS_STATUS_SUCCESS;
}

/* cublasSgemm on each of `batch` matrices, the i-th at a + i*sa, b + i*sb, c + i*sc. */
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *a, int lda, long long sa,
                                         const float *b, int ldb, long long sb, const float *beta, float *c, int ldc,
                                         long long sc, int batch) {
    if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    for (int i = 0; i < batch; i++) {
        cublasStatus_t s = cublasSgemm(h, ta, tb, m, n, k, alpha, a + i * sa, lda, b + i * sb, ldb, beta, c + i * sc, ldc);
        if (s != CUBLAS_STATUS_SUCCESS) return s;
    }
    return CUBLAS_STATUS_SUCCESS;
}
