/* comm.h - collectives between the ranks of a distributed training run: one process per device, a
 * gang of world_size of them, found through rank 0's rendezvous (comm_store.h).
 *
 * Two implementations under this header (comm_internal.h): Gloo over TCP between CPU ranks
 * (comm_gloo.cc), NCCL between GPU ranks (nccl/comm_nccl.c, in builds with the CUDA toolkit's NCCL),
 * picked by the device the rank trains on. Every collective is asynchronous: *_start queues it and
 * returns at once, comm_wait waits for it; collectives run in the order they were started, on every
 * rank the same order (the caller's duty, as with any collective library). The synchronous forms are
 * start + wait. Buffers are the backend's device memory (host memory on the CPU; NCCL also takes host
 * buffers, staged through the device) and must stay untouched until the wait.
 *
 * Sharding (ZeRO): a buffer of n elements is cut into world_size contiguous shards, comm_shard's
 * [lo, hi) for each rank; reduce-scatter leaves each rank the sum of its own shard, all-gather gives
 * every rank everyone's shard.
 *
 * Errors: a peer that dies, or does not answer within timeout_s, fails the collective on every other
 * rank with a message naming the rendezvous; the run then exits (the runtime restarts the gang). */
#ifndef WHET_COMM_H
#define WHET_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

#ifdef __cplusplus
extern "C" {
#endif

struct comm_opts {
    int world_size, rank;
    const char *rendezvous;  /* HOST:PORT: rank 0 listens there (port 0: any), the others connect */
    const char *host;        /* the address this rank's peers reach it at (NULL: 127.0.0.1) */
    unsigned generation;     /* the gang's start count: ranks of another generation are refused */
    int timeout_s;           /* for the rendezvous and for each collective */
    const char *device;      /* the rank's: "cpu" (NULL means it) joins with Gloo, "cuda" or "cuda:N" with NCCL */
    /* Rank 0: called once its rendezvous listens, with the address the other ranks must be given. */
    void (*on_listen)(void *ctx, const char *address);
    void *ctx;
};

struct comm;
/* Joins the gang: returns once every rank has (or fails at the deadline); rank 0's rendezvous stops
 * listening then. */
int comm_open(struct comm **out, const struct comm_opts *o, struct whet_err *err);
void comm_close(struct comm *c);
int comm_rank(const struct comm *c);
int comm_world_size(const struct comm *c);
/* "gloo" or "nccl". */
const char *comm_library(const struct comm *c);
/* Bytes this rank has sent in reduce-scatters, all-gathers and all-reduces so far. */
uint64_t comm_bytes_sent(const struct comm *c);
/* The shard [lo, hi) of n elements that `rank` owns: contiguous, sizes differing by at most one. */
void comm_shard(const struct comm *c, size_t n, int rank, size_t *lo, size_t *hi);

struct comm_op;
/* Sums buf[0..n) over the ranks, in place. */
struct comm_op *comm_allreduce_start(struct comm *c, float *buf, size_t n);
/* After: buf's shard comm_shard(c, n, own rank) holds its sum over the ranks (the rest is scratch). */
struct comm_op *comm_reduce_scatter_start(struct comm *c, float *buf, size_t n);
/* Before: each rank's shard of buf holds its values; after: buf holds every shard on every rank. */
struct comm_op *comm_allgather_start(struct comm *c, float *buf, size_t n);
/* Waits for op and frees it; -1 with err set when the collective failed. */
int comm_wait(struct comm_op *op, struct whet_err *err);

int comm_allreduce(struct comm *c, float *buf, size_t n, struct whet_err *err);
int comm_allreduce_f64(struct comm *c, double *buf, size_t n, struct whet_err *err);
int comm_reduce_scatter(struct comm *c, float *buf, size_t n, struct whet_err *err);
int comm_allgather(struct comm *c, float *buf, size_t n, struct whet_err *err);
/* root's bytes to every rank. */
int comm_broadcast(struct comm *c, void *buf, size_t bytes, int root, struct whet_err *err);
int comm_barrier(struct comm *c, struct whet_err *err);

#ifdef __cplusplus
}
#endif

#endif
