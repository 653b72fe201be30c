/* comm_nccl.c - comm.h's collectives between GPU ranks, over NCCL (comm_internal.h). Built where the
 * CUDA toolkit has NCCL (cmake/cuda.cmake); a rank on "cuda" or "cuda:N" joins with it.
 *
 * Bootstrap: rank 0 makes NCCL's unique id and publishes it as one key of comm.c's rendezvous store;
 * the others read it there, so a gang of GPU ranks starts exactly as one of CPU ranks (the runtime's
 * rendezvous, generations and deadlines unchanged).
 *
 * Streams: the collectives run on a stream of their own, in the order they were started. The buffers
 * come from more than one backend instance (the policy's and a frozen reference's), each with its own
 * stream, so a start first drains the device (cudaDeviceSynchronize): whatever kernels wrote the buffer
 * are done, whichever stream they ran on. The host then goes on queueing compute while the collective
 * runs beside it, so a data-parallel gang's bucket all-reduces still overlap the rest of the backward
 * pass; only the queue ahead of the host is lost at each start. (Handing the comm the producers'
 * streams, to wait on events instead, is the next step once a GPU measures the difference.)
 *
 * Shards: comm.h's shards differ in length by up to one element (mp_shard). When n divides evenly the
 * collectives are NCCL's in-place reduce-scatter and all-gather; otherwise one grouped ncclReduce (to
 * each shard's owner) or ncclBroadcast (from it) per shard, the same bytes on the wire.
 *
 * Host buffers (the trainer's few double sums, a checkpoint's gathered moments) are staged through
 * device memory allocated on the collective's stream and freed after it.
 *
 * In the executor's sandbox (executor/sandbox, executor/agent/trainer_sandbox.h) every rank is a process
 * of its own in its own mount, PID and IPC namespaces, sharing the host's network namespace under a
 * policy that lets it reach its gang's peers only (sandbox_net.c); it sees its own GPU's /dev/nvidiaN
 * and no other. What NCCL (2.28) needs there, and what the executor decided:
 *   - /dev/shm: every NCCL process maps its proxy's op pool there (src/proxy.cc) and init stat()s it
 *     (src/init.cc); the SHM transport shares files there between a node's ranks, and uses it only
 *     between ranks whose /dev/shm has the same st_dev. A GPU gang's ranks on one node get one
 *     directory bound as /dev/shm (work_dir/gang-shm/JOB-ATTEMPT; a tmpfs there bounds its size),
 *     which no other job sees, and which goes with the node's last rank of the gang.
 *   - unix sockets: ncclProxyCreate always binds one, to the abstract name "\0tmp/nccl-socket-RANK-
 *     HASH" (abstract at NCCL's compile time; no setting changes it). An abstract name lives in the
 *     network namespace, here the host's, where it could reach or squat the host's own abstract
 *     sockets; so the sandbox lets a GPU gang rank bind path names and a name of exactly NCCL's form
 *     only, and a Landlock scope keeps it from every abstract socket made outside its sandbox (Linux
 *     6.12, else such a rank does not start).
 *   - what crosses processes over that socket, cuMem's file-descriptor handles (P2P buffers, and SHM
 *     buffers when cuMem host memory is on), cannot reach another rank's private /tmp: NCCL_CUMEM_ENABLE
 *     =0 (SHM then uses plain /dev/shm files; NVLS, which needs cuMem, off: NCCL_NVLS_ENABLE=0).
 *   - CUDA P2P between two ranks' GPUs (legacy IPC handles go over the bootstrap, but opening one maps
 *     the other GPU, whose device node this rank lacks): NCCL_P2P_DISABLE=1, for correctness.
 *   - InfiniBand/RoCE: the sandbox binds no /dev/infiniband, so NCCL_IB_DISABLE=1 and NCCL's socket
 *     transport on NCCL_SOCKET_IFNAME (the executor's own setting, where the peers are reached; its
 *     listening ports land in the gang's port range because the sandbox picks them on bind).
 * The cost: a node's ranks exchange through host memory (the SHM transport: a copy in and out of
 * /dev/shm, some 10-20 GB/s per direction instead of NVLink's ~450 GB/s on an H100/H200 node), and
 * nodes over TCP instead of RDMA. Data-parallel LoRA moves little and hardly notices; a full
 * fine-tune's all-reduces or ZeRO-3's all-gathers become bound by it. Recovering NVLink means giving a
 * gang's ranks on a node one sandbox (all its GPUs, one /tmp) or the peers' device nodes plus a shared
 * socket directory; recovering RDMA means binding the uverbs devices. Both are later steps.
 *
 * Waiting polls the collective's event and NCCL's asynchronous error: a peer that died, or a collective
 * that exceeds timeout_s, aborts the communicator (its kernels stop) and fails the wait with the reason. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_internal.h"

struct nccl_comm {
    ncclComm_t comm;
    cudaStream_t stream;
    int rank, world, device;
    double timeout_s;
    uint64_t bytes_sent; /* by the ring algorithm's count: NCCL does not report its own */
    int aborted;
};

struct nccl_op {
    cudaEvent_t done;
    struct whet_err err; /* a failure found while starting it */
    int failed;
};

static int cuda_failed(struct whet_err *err, cudaError_t e, const char *what) {
    return whet_errf(err, "%s: %s", what, cudaGetErrorString(e));
}

static int nccl_failed(struct whet_err *err, ncclResult_t r, const char *what) {
    return whet_errf(err, "%s: %s", what, ncclGetErrorString(r));
}

/* "cuda" -> 0, "cuda:N" -> N. */
static int device_index(const char *device) { return device[4] == ':' ? atoi(device + 5) : 0; }

static int nccl_join(void **state, const struct comm_opts *o, struct comm_store *store, double deadline,
                     struct whet_err *err) {
    struct nccl_comm *c = xcalloc(1, sizeof *c);
    c->rank = o->rank;
    c->world = o->world_size;
    c->device = device_index(o->device);
    c->timeout_s = o->timeout_s > 0 ? o->timeout_s : 300;
    ncclUniqueId id;
    cudaError_t ce;
    ncclResult_t nr;
    void *got = NULL;
    size_t len = 0;
    int rc = 0;
    if ((ce = cudaSetDevice(c->device)) != cudaSuccess) {
        rc = cuda_failed(err, ce, o->device);
    } else if (c->rank == 0) {
        if ((nr = ncclGetUniqueId(&id)) != ncclSuccess) rc = nccl_failed(err, nr, "ncclGetUniqueId");
        else if (store) rc = comm_store_set(store, "nccl-unique-id", &id, sizeof id, err);
    } else if (!(rc = comm_store_get(store, "nccl-unique-id", &got, &len, deadline, err))) {
        if (len == sizeof id) memcpy(&id, got, sizeof id);
        else rc = whet_errf(err, "rank 0's NCCL unique id has %zu bytes, this build's %zu: every rank must run the same "
                                 "NCCL", len, sizeof id);
    }
    free(got);
    if (!rc && (nr = ncclCommInitRank(&c->comm, c->world, id, c->rank)) != ncclSuccess)
        rc = nccl_failed(err, nr, "ncclCommInitRank");
    if (!rc && (ce = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        ncclCommDestroy(c->comm);
        rc = cuda_failed(err, ce, "cudaStreamCreateWithFlags");
    }
    if (rc) {
        free(c);
        return -1;
    }
    *state = c;
    return 0;
}

static void nccl_leave(void *state) {
    struct nccl_comm *c = state;
    if (!c->aborted) {
        cudaStreamSynchronize(c->stream);
        ncclCommDestroy(c->comm);
    }
    cudaStreamDestroy(c->stream);
    free(c);
}

/* The bytes a rank sends for one collective over n elements of `size` bytes: (N-1)/N of them for a
 * reduce-scatter or an all-gather, twice that for an all-reduce (the ring's, what NCCL's bus bandwidth
 * is quoted against). */
static uint64_t ring_bytes(const struct nccl_comm *c, size_t n, size_t size, int phases) {
    return (uint64_t)phases * (uint64_t)(n * size) * (uint64_t)(c->world - 1) / (uint64_t)c->world;
}

static ncclResult_t reduce_scatter(struct nccl_comm *c, float *buf, size_t n) {
    size_t lo, hi;
    if (n % (size_t)c->world == 0) {
        comm_shard_of(n, c->world, c->rank, &lo, &hi);
        return ncclReduceScatter(buf, buf + lo, hi - lo, ncclFloat, ncclSum, c->comm, c->stream);
    }
    ncclResult_t r = ncclGroupStart();
    for (int k = 0; k < c->world && r == ncclSuccess; k++) {
        comm_shard_of(n, c->world, k, &lo, &hi);
        if (hi > lo) r = ncclReduce(buf + lo, buf + lo, hi - lo, ncclFloat, ncclSum, k, c->comm, c->stream);
    }
    ncclResult_t end = ncclGroupEnd();
    return r != ncclSuccess ? r : end;
}

static ncclResult_t allgather(struct nccl_comm *c, float *buf, size_t n) {
    size_t lo, hi;
    if (n % (size_t)c->world == 0) {
        comm_shard_of(n, c->world, c->rank, &lo, &hi);
        return ncclAllGather(buf + lo, buf, hi - lo, ncclFloat, c->comm, c->stream);
    }
    ncclResult_t r = ncclGroupStart();
    for (int k = 0; k < c->world && r == ncclSuccess; k++) {
        comm_shard_of(n, c->world, k, &lo, &hi);
        if (hi > lo) r = ncclBroadcast(buf + lo, buf + lo, hi - lo, ncclFloat, k, c->comm, c->stream);
    }
    ncclResult_t end = ncclGroupEnd();
    return r != ncclSuccess ? r : end;
}

/* Queues the collective on dev, a device buffer holding the call's values. */
static ncclResult_t queue(struct nccl_comm *c, const struct comm_call *call, void *dev) {
    switch (call->kind) {
    case COMM_ALLREDUCE:
        c->bytes_sent += ring_bytes(c, call->n, sizeof(float), 2);
        return ncclAllReduce(dev, dev, call->n, ncclFloat, ncclSum, c->comm, c->stream);
    case COMM_ALLREDUCE_F64:
        c->bytes_sent += ring_bytes(c, call->n, sizeof(double), 2);
        return ncclAllReduce(dev, dev, call->n, ncclDouble, ncclSum, c->comm, c->stream);
    case COMM_REDUCE_SCATTER: c->bytes_sent += ring_bytes(c, call->n, sizeof(float), 1); return reduce_scatter(c, dev, call->n);
    case COMM_ALLGATHER: c->bytes_sent += ring_bytes(c, call->n, sizeof(float), 1); return allgather(c, dev, call->n);
    case COMM_BROADCAST: return ncclBroadcast(dev, dev, call->n, ncclUint8, call->root, c->comm, c->stream);
    case COMM_BARRIER: return ncclAllReduce(dev, dev, 1, ncclFloat, ncclSum, c->comm, c->stream);
    }
    return ncclInvalidArgument;
}

static size_t call_bytes(const struct comm_call *call) {
    switch (call->kind) {
    case COMM_ALLREDUCE_F64: return call->n * sizeof(double);
    case COMM_BROADCAST: return call->n;
    case COMM_BARRIER: return sizeof(float);
    default: return call->n * sizeof(float);
    }
}

static int on_device(const void *p) {
    struct cudaPointerAttributes a;
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* (an unregistered host pointer may leave an error behind on old runtimes) */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static int start_on_stream(struct nccl_comm *c, const struct comm_call *call, struct whet_err *err) {
    cudaError_t ce;
    ncclResult_t nr;
    size_t bytes = call_bytes(call);
    if (!bytes && call->kind != COMM_BARRIER) return 0;
    if ((ce = cudaSetDevice(c->device)) != cudaSuccess || (ce = cudaDeviceSynchronize()) != cudaSuccess)
        return cuda_failed(err, ce, "before the collective");
    if (call->kind != COMM_BARRIER && on_device(call->buf)) {
        if ((nr = queue(c, call, call->buf)) != ncclSuccess) return nccl_failed(err, nr, "queueing the collective");
        return 0;
    }
    /* staged: the host values up, the collective, the result back down */
    void *dev = NULL;
    if ((ce = cudaMallocAsync(&dev, bytes, c->stream)) != cudaSuccess) return cuda_failed(err, ce, "staging buffer");
    if (call->buf) ce = cudaMemcpyAsync(dev, call->buf, bytes, cudaMemcpyHostToDevice, c->stream);
    else ce = cudaMemsetAsync(dev, 0, bytes, c->stream);
    if (ce == cudaSuccess && (nr = queue(c, call, dev)) != ncclSuccess) {
        cudaFreeAsync(dev, c->stream);
        return nccl_failed(err, nr, "queueing the collective");
    }
    if (ce == cudaSuccess && call->buf) ce = cudaMemcpyAsync(call->buf, dev, bytes, cudaMemcpyDeviceToHost, c->stream);
    cudaFreeAsync(dev, c->stream);
    return ce == cudaSuccess ? 0 : cuda_failed(err, ce, "staging a host buffer");
}

static void *nccl_start(void *state, const struct comm_call *call) {
    struct nccl_comm *c = state;
    struct nccl_op *op = xcalloc(1, sizeof *op);
    cudaError_t ce;
    int rc = c->aborted ? whet_errf(&op->err, "the communicator was aborted by an earlier failure")
                        : start_on_stream(c, call, &op->err);
    if (!rc && ((ce = cudaEventCreateWithFlags(&op->done, cudaEventDisableTiming)) != cudaSuccess ||
                (ce = cudaEventRecord(op->done, c->stream)) != cudaSuccess))
        rc = cuda_failed(&op->err, ce, "recording the collective");
    op->failed = rc != 0;
    return op;
}

static void abort_comm(struct nccl_comm *c) {
    ncclCommAbort(c->comm);
    c->aborted = 1;
}

static int nccl_wait(void *state, void *handle, struct whet_err *err) {
    struct nccl_comm *c = state;
    struct nccl_op *op = handle;
    int rc = 0;
    if (op->failed) {
        *err = op->err;
        rc = -1;
    }
    double deadline = whet_now_mono() + c->timeout_s;
    while (!rc) {
        cudaError_t ce = cudaEventQuery(op->done);
        if (ce == cudaSuccess) break;
        if (ce != cudaErrorNotReady) {
            rc = cuda_failed(err, ce, "the collective");
            break;
        }
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(c->comm, &async);
        if (async != ncclSuccess) {
            rc = whet_errf(err, "a peer failed: %s (%s)", ncclGetErrorString(async), ncclGetLastError(c->comm));
            abort_comm(c);
        } else if (whet_now_mono() > deadline) {
            rc = whet_errf(err, "the collective timed out after %.0f s: a peer stopped answering", c->timeout_s);
            abort_comm(c);
        } else {
            nanosleep(&(struct timespec){0, 20000}, NULL);
        }
    }
    if (op->done) cudaEventDestroy(op->done);
    free(op);
    return rc;
}

static uint64_t nccl_bytes_sent(const void *state) { return ((const struct nccl_comm *)state)->bytes_sent; }

const struct comm_impl comm_nccl = {"nccl", nccl_join, nccl_leave, nccl_start, nccl_wait, nccl_bytes_sent};
