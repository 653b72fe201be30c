/* comm_internal.h - what an implementation of comm.h's collectives provides to comm.c, which does the
 * rest: the rendezvous (comm_store.h), the handles, the shards and the error messages. Gloo (CPU ranks,
 * comm_gloo.cc) is always built; NCCL (GPU ranks, nccl/comm_nccl.c) where the CUDA toolkit has it. */
#ifndef WHET_COMM_INTERNAL_H
#define WHET_COMM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "comm_store.h"

#ifdef __cplusplus
extern "C" {
#endif

enum comm_kind { COMM_ALLREDUCE, COMM_ALLREDUCE_F64, COMM_REDUCE_SCATTER, COMM_ALLGATHER, COMM_BROADCAST, COMM_BARRIER };

/* One collective: `n` elements of buf (floats, doubles for COMM_ALLREDUCE_F64, bytes for COMM_BROADCAST). */
struct comm_call {
    enum comm_kind kind;
    void *buf;
    size_t n;
    int root; /* COMM_BROADCAST */
};

struct comm_impl {
    const char *name;
    /* Joins the gang of o through `store`, rank 0's rendezvous, connected (NULL when world_size is 1),
     * by `deadline` (whet_now_mono's clock); *state is the implementation's. Errors say why, without
     * the rank or the rendezvous (comm.c adds them). */
    int (*join)(void **state, const struct comm_opts *o, struct comm_store *store, double deadline,
                struct whet_err *err);
    void (*leave)(void *state);
    /* Starts a collective, after those started before; its handle goes to wait. */
    void *(*start)(void *state, const struct comm_call *call);
    /* Waits for a collective and frees its handle; -1 with err when it failed. */
    int (*wait)(void *state, void *op, struct whet_err *err);
    uint64_t (*bytes_sent)(const void *state);
};

extern const struct comm_impl comm_gloo;
#ifdef WHET_HAVE_NCCL
extern const struct comm_impl comm_nccl;
#endif

/* Shard [lo, hi) of n elements of `rank` in a gang of `world` (model_plan's mp_shard). */
void comm_shard_of(size_t n, int world, int rank, size_t *lo, size_t *hi);

#ifdef __cplusplus
}
#endif

#endif
