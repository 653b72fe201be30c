/* cuda_runtime.h (emulated) - the part of the CUDA runtime and of the device language that the CUDA
 * backend uses, on the CPU, so its kernels run through the backend op test on machines without a GPU
 * (unit_backend_cuda_emulated).
 *
 * Device memory is host memory and every call is synchronous. A kernel launch (rewritten from <<<...>>>
 * by emu_launch.py) runs its blocks one after another; the threads of a block are fibers on the calling
 * thread, switched at __syncthreads and at warp shuffles, so `__shared__` (a static here) is the block's
 * own. The scheduler stops the program when threads could never meet: a __syncthreads some live
 * threads of the block never reach, or a warp shuffle with lanes that exited or wait elsewhere (both
 * undefined on a GPU), which is the class of bug that hangs or corrupts a real device. */
#ifndef WHET_CUDA_EMU_RUNTIME_H
#define WHET_CUDA_EMU_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>

#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

/* The running thread's coordinates (the scheduler sets them before it switches to a fiber). */
extern dim3 emu_thread_idx, emu_block_idx, emu_block_dim, emu_grid_dim;
#define threadIdx emu_thread_idx
#define blockIdx emu_block_idx
#define blockDim emu_block_dim
#define gridDim emu_grid_dim

void __syncthreads(void);
/* Waits for every lane of the calling thread's warp to arrive at a shuffle. */
void emu_warp_sync(void);
/* The calling thread's slot of its warp's exchange area (8 bytes a lane). */
void *emu_warp_slot(int lane);

template <typename T> T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
    (void)mask;
    int lane = (int)(threadIdx.x & 31);
    memcpy(emu_warp_slot(lane), &v, sizeof v);
    emu_warp_sync();
    T other;
    memcpy(&other, emu_warp_slot(lane ^ lane_mask), sizeof other);
    emu_warp_sync(); /* nobody writes its slot again before every lane has read */
    return other;
}

static inline int atomicAdd(int *p, int v) {
    int old = *p; /* the threads of a block never run at the same time here */
    *p = old + v;
    return old;
}
static inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
static inline int min(int a, int b) { return a < b ? a : b; }

/* Runs body once per thread of every block of the grid. */
void emu_run(dim3 grid, dim3 block, const std::function<void()> &body);

/* ---- the runtime ---- */

typedef enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorNoDevice = 100,
} cudaError_t;
typedef struct emu_stream *cudaStream_t;
typedef struct emu_pool *cudaMemPool_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold };
#define cudaStreamNonBlocking 1

const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value);

#endif
