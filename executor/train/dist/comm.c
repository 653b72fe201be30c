/* comm.c - comm.h over its implementations (comm_internal.h): Gloo between CPU ranks, NCCL between GPU
 * ranks. What they share is here: rank 0's rendezvous store (the implementations bootstrap through it:
 * Gloo's full mesh exchanges each rank's address, NCCL's unique id is one key), the handles, the
 * shards and the error messages that name the rank and the rendezvous. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"
#include "model_plan.h"

struct comm {
    const struct comm_impl *impl;
    void *state;
    int rank, world;
    char rendezvous[300];
};

struct comm_op {
    struct comm *c;
    void *op;
};

static int on_cuda(const char *device) { return device && !strncmp(device, "cuda", 4); }

static int pick(const struct comm_impl **impl, const char *device, struct whet_err *err) {
    if (!on_cuda(device)) {
        *impl = &comm_gloo;
        return 0;
    }
#ifdef WHET_HAVE_NCCL
    *impl = &comm_nccl;
    return 0;
#else
    return whet_errf(err, "distributed: device %s needs NCCL, and this build has none (build with the CUDA toolkit's "
                          "NCCL, or train the gang on \"cpu\")", device);
#endif
}

int comm_open(struct comm **out, const struct comm_opts *o, struct whet_err *err) {
    struct comm *c = xcalloc(1, sizeof *c);
    c->rank = o->rank;
    c->world = o->world_size;
    snprintf(c->rendezvous, sizeof c->rendezvous, "%s", o->rendezvous ? o->rendezvous : "");
    double deadline = whet_now_mono() + (o->timeout_s > 0 ? o->timeout_s : 300);
    struct comm_store_server *server = NULL;
    struct comm_store *store = NULL;
    int rc = pick(&c->impl, o->device, err);
    if (!rc && c->world > 1 && c->rank == 0) {
        char listen_at[sizeof c->rendezvous];
        snprintf(listen_at, sizeof listen_at, "%s", c->rendezvous);
        rc = comm_store_serve(&server, listen_at, o->generation, c->rendezvous, sizeof c->rendezvous, err);
        if (!rc && o->on_listen) o->on_listen(o->ctx, c->rendezvous);
    }
    if (!rc && c->world > 1) rc = comm_store_connect(&store, c->rendezvous, o->generation, c->rank, deadline, err);
    if (!rc && c->impl->join(&c->state, o, store, deadline, err))
        rc = whet_err_prefix(err, "distributed: rank %d of %d cannot join the gang at %s (%s)", c->rank, c->world,
                             c->rendezvous, c->impl->name);
    /* Once every rank has joined nobody needs the rendezvous: rank 0 stops listening rather than keep a
     * port open for the whole run. */
    comm_store_close(store);
    comm_store_server_stop(server);
    if (rc) {
        free(c);
        return -1;
    }
    *out = c;
    return 0;
}

void comm_close(struct comm *c) {
    if (!c) return;
    c->impl->leave(c->state);
    free(c);
}

int comm_rank(const struct comm *c) { return c->rank; }
int comm_world_size(const struct comm *c) { return c->world; }
const char *comm_library(const struct comm *c) { return c->impl->name; }
uint64_t comm_bytes_sent(const struct comm *c) { return c->impl->bytes_sent(c->state); }

void comm_shard_of(size_t n, int world, int rank, size_t *lo, size_t *hi) {
    int64_t l, h;
    mp_shard((int64_t)n, world, rank, &l, &h);
    *lo = (size_t)l, *hi = (size_t)h;
}

void comm_shard(const struct comm *c, size_t n, int rank, size_t *lo, size_t *hi) {
    comm_shard_of(n, c->world, rank, lo, hi);
}

static struct comm_op *start(struct comm *c, enum comm_kind kind, void *buf, size_t n, int root) {
    struct comm_op *op = xmalloc(sizeof *op);
    op->c = c;
    op->op = c->impl->start(c->state, &(struct comm_call){kind, buf, n, root});
    return op;
}

int comm_wait(struct comm_op *op, struct whet_err *err) {
    struct comm *c = op->c;
    int rc = c->impl->wait(c->state, op->op, err);
    free(op);
    if (rc)
        return whet_err_prefix(err, "distributed: rank %d of %d (rendezvous %s, %s)", c->rank, c->world, c->rendezvous,
                               c->impl->name);
    return 0;
}

struct comm_op *comm_allreduce_start(struct comm *c, float *buf, size_t n) {
    return start(c, COMM_ALLREDUCE, buf, n, 0);
}

struct comm_op *comm_reduce_scatter_start(struct comm *c, float *buf, size_t n) {
    return start(c, COMM_REDUCE_SCATTER, buf, n, 0);
}

struct comm_op *comm_allgather_start(struct comm *c, float *buf, size_t n) {
    return start(c, COMM_ALLGATHER, buf, n, 0);
}

int comm_allreduce(struct comm *c, float *buf, size_t n, struct whet_err *err) {
    return comm_wait(comm_allreduce_start(c, buf, n), err);
}

int comm_allreduce_f64(struct comm *c, double *buf, size_t n, struct whet_err *err) {
    return comm_wait(start(c, COMM_ALLREDUCE_F64, buf, n, 0), err);
}

int comm_reduce_scatter(struct comm *c, float *buf, size_t n, struct whet_err *err) {
    return comm_wait(comm_reduce_scatter_start(c, buf, n), err);
}

int comm_allgather(struct comm *c, float *buf, size_t n, struct whet_err *err) {
    return comm_wait(comm_allgather_start(c, buf, n), err);
}

int comm_broadcast(struct comm *c, void *buf, size_t bytes, int root, struct whet_err *err) {
    return comm_wait(start(c, COMM_BROADCAST, buf, bytes, root), err);
}

int comm_barrier(struct comm *c, struct whet_err *err) { return comm_wait(start(c, COMM_BARRIER, NULL, 0, 0), err); }
