/* comm_gloo.cc - comm.h over Gloo's TCP transport: the collectives of CPU ranks.
 *
 * A thin C++ shim, the only C++ in whet: the rendezvous is comm_store's (Gloo's Store interface over
 * it), and the collectives are the textbook rings written here over Gloo's point-to-point buffers:
 * reduce-scatter and all-gather each send (N-1)/N of the buffer from every rank, the bandwidth-optimal
 * volume, and keep each rank's shard in place in the caller's buffer (Gloo's halving-doubling
 * reduce-scatter moves it to the buffer's start); an all-reduce is the two, as NCCL's ring. The
 * bytes they send are counted (comm_bytes_sent). Broadcast and barrier are Gloo's.
 *
 * Collectives run on one thread per communicator, in the order they were started (comm.h); a Gloo
 * exception becomes the op's error message. */
/* whet's C headers, with C linkage (comm.h says so itself). */
extern "C" {
#include "comm_store.h"
/* C's struct mp_plan and function mp_plan share a name, which C++ warns of. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#include "model_plan.h"
#pragma GCC diagnostic pop
#include "util.h"
}
#include "comm.h"

#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

/* Gloo's Store on comm_store's client: rank 0's TCP key-value server. */
class RendezvousStore : public gloo::rendezvous::Store {
  public:
    RendezvousStore(struct comm_store *s, double deadline) : s_(s), deadline_(deadline) {}
    void set(const std::string &key, const std::vector<char> &data) override {
        struct whet_err err = {};
        if (comm_store_set(s_, key.c_str(), data.data(), data.size(), &err)) throw gloo::IoException(err.msg);
    }
    std::vector<char> get(const std::string &key) override {
        struct whet_err err = {};
        void *value = nullptr;
        size_t len = 0;
        if (comm_store_get(s_, key.c_str(), &value, &len, deadline_, &err)) throw gloo::IoException(err.msg);
        std::vector<char> out(static_cast<char *>(value), static_cast<char *>(value) + len);
        free(value);
        return out;
    }
    void wait(const std::vector<std::string> &keys) override {
        for (const auto &k : keys) get(k);
    }
    void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &) override { wait(keys); }

  private:
    struct comm_store *s_;
    double deadline_;
};

/* The slots of whet's rings, apart from those of Gloo's own collectives (gloo/types.h). */
constexpr uint8_t kRingSlotPrefix = 0x40;

} // namespace

struct comm_op {
    struct comm *c;
    std::function<void()> run;
    bool done = false;
    std::string error;
};

struct comm {
    int rank = 0, world = 1;
    std::chrono::milliseconds timeout{300000};
    std::string rendezvous;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    uint32_t tag = 0;
    std::vector<char> scratch; /* a ring step's incoming chunk */
    uint64_t bytes_sent = 0;    /* by this rank's rings, for comm_bytes_sent */
    /* the collectives' thread and its queue */
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<comm_op *> queue;
    bool quit = false;
};

static void worker(struct comm *c) {
    for (;;) {
        comm_op *op;
        {
            std::unique_lock<std::mutex> lock(c->mu);
            c->cv.wait(lock, [c] { return c->quit || !c->queue.empty(); });
            if (c->queue.empty()) return;
            op = c->queue.front();
        }
        try {
            op->run();
        } catch (const std::exception &e) {
            op->error = e.what();
        }
        std::lock_guard<std::mutex> lock(c->mu);
        c->queue.pop_front();
        op->done = true;
        c->cv.notify_all();
    }
}

static comm_op *start(struct comm *c, std::function<void()> run) {
    comm_op *op = new comm_op;
    op->c = c;
    op->run = std::move(run);
    std::lock_guard<std::mutex> lock(c->mu);
    c->queue.push_back(op);
    c->cv.notify_all();
    return op;
}

/* ---------------------------------------------------------------- rings */

static void shard(size_t n, int world, int rank, size_t *lo, size_t *hi) {
    int64_t l, h;
    mp_shard((int64_t)n, world, rank, &l, &h);
    *lo = (size_t)l, *hi = (size_t)h;
}

/* Step s of N-1: rank r sends its partial sum of chunk (r-1-s) to r+1 and adds what r-1 sends, chunk
 * (r-2-s), to its own; after the last step chunk r has every rank's term. */
template <typename T> static void ring_reduce_scatter(struct comm *c, T *buf, size_t n) {
    const int N = c->world, r = c->rank;
    if (N == 1 || n == 0) return;
    size_t max_chunk = n / (size_t)N + 1;
    if (c->scratch.size() < max_chunk * sizeof(T)) c->scratch.resize(max_chunk * sizeof(T));
    T *in_chunk = reinterpret_cast<T *>(c->scratch.data());
    auto out = c->ctx->createUnboundBuffer(buf, n * sizeof(T));
    auto in = c->ctx->createUnboundBuffer(in_chunk, max_chunk * sizeof(T));
    uint64_t slot = gloo::Slot::build(kRingSlotPrefix, c->tag++);
    for (int s = 0; s < N - 1; s++) {
        size_t slo, shi, rlo, rhi;
        shard(n, N, ((r - 1 - s) % N + N) % N, &slo, &shi);
        shard(n, N, ((r - 2 - s) % N + N) % N, &rlo, &rhi);
        if (shi > slo) out->send((r + 1) % N, slot, slo * sizeof(T), (shi - slo) * sizeof(T));
        if (rhi > rlo) in->recv((r - 1 + N) % N, slot, 0, (rhi - rlo) * sizeof(T));
        if (rhi > rlo && !in->waitRecv(c->timeout)) throw gloo::IoException("reduce-scatter: receive timed out");
        if (shi > slo && !out->waitSend(c->timeout)) throw gloo::IoException("reduce-scatter: send timed out");
        for (size_t i = rlo; i < rhi; i++) buf[i] += in_chunk[i - rlo];
        c->bytes_sent += (shi - slo) * sizeof(T);
    }
}

/* Step s of N-1: rank r forwards chunk (r-s) to r+1 and receives chunk (r-1-s) from r-1 in place. */
template <typename T> static void ring_allgather(struct comm *c, T *buf, size_t n) {
    const int N = c->world, r = c->rank;
    if (N == 1 || n == 0) return;
    auto b = c->ctx->createUnboundBuffer(buf, n * sizeof(T));
    uint64_t slot = gloo::Slot::build(kRingSlotPrefix, c->tag++);
    for (int s = 0; s < N - 1; s++) {
        size_t slo, shi, rlo, rhi;
        shard(n, N, ((r - s) % N + N) % N, &slo, &shi);
        shard(n, N, ((r - 1 - s) % N + N) % N, &rlo, &rhi);
        if (shi > slo) b->send((r + 1) % N, slot, slo * sizeof(T), (shi - slo) * sizeof(T));
        if (rhi > rlo) b->recv((r - 1 + N) % N, slot, rlo * sizeof(T), (rhi - rlo) * sizeof(T));
        if (rhi > rlo && !b->waitRecv(c->timeout)) throw gloo::IoException("all-gather: receive timed out");
        if (shi > slo && !b->waitSend(c->timeout)) throw gloo::IoException("all-gather: send timed out");
        c->bytes_sent += (shi - slo) * sizeof(T);
    }
}

/* The ring all-reduce: a reduce-scatter then an all-gather, 2(N-1)/N of the buffer sent by each rank,
 * what NCCL's ring does. */
template <typename T> static void ring_allreduce(struct comm *c, T *buf, size_t n) {
    ring_reduce_scatter(c, buf, n);
    ring_allgather(c, buf, n);
}

/* ---------------------------------------------------------------- the C interface */

extern "C" {

static void on_bound(const struct comm_opts *o, const char *address) {
    if (o->on_listen) o->on_listen(o->ctx, address);
}

int comm_open(struct comm **out, const struct comm_opts *o, struct whet_err *err) {
    struct comm *c = new comm;
    c->rank = o->rank;
    c->world = o->world_size;
    c->timeout = std::chrono::milliseconds((long)(o->timeout_s > 0 ? o->timeout_s : 300) * 1000);
    c->rendezvous = o->rendezvous ? o->rendezvous : "";
    double deadline = whet_now_mono() + (double)c->timeout.count() / 1000.0;
    struct comm_store_server *server = nullptr;
    struct comm_store *store = nullptr;
    int rc = 0;
    if (c->world > 1) {
        if (c->rank == 0) {
            char bound[300];
            rc = comm_store_serve(&server, c->rendezvous.c_str(), o->generation, bound, sizeof bound, err);
            if (!rc) {
                c->rendezvous = bound;
                on_bound(o, bound);
            }
        }
        if (!rc) rc = comm_store_connect(&store, c->rendezvous.c_str(), o->generation, c->rank, deadline, err);
        if (!rc) {
            try {
                gloo::transport::tcp::attr attr(o->host && *o->host ? o->host : "127.0.0.1");
                auto dev = gloo::transport::tcp::CreateDevice(attr);
                RendezvousStore rs(store, deadline);
                c->ctx = std::make_shared<gloo::rendezvous::Context>(c->rank, c->world);
                c->ctx->setTimeout(c->timeout);
                c->ctx->connectFullMesh(rs, dev);
                /* Once every rank is connected nobody needs the rendezvous: rank 0 stops listening
                 * rather than keep a port open for the whole run. */
                gloo::BarrierOptions opts(c->ctx);
                opts.setTimeout(c->timeout);
                gloo::barrier(opts);
            } catch (const std::exception &e) {
                rc = whet_errf(err, "distributed: rank %d of %d cannot join the gang at %s: %s", c->rank, c->world,
                               c->rendezvous.c_str(), e.what());
            }
        }
        comm_store_close(store);
    }
    comm_store_server_stop(server);
    if (rc) {
        delete c;
        return -1;
    }
    c->thread = std::thread(worker, c);
    *out = c;
    return 0;
}

void comm_close(struct comm *c) {
    if (!c) return;
    {
        std::lock_guard<std::mutex> lock(c->mu);
        c->quit = true;
        c->cv.notify_all();
    }
    c->thread.join();
    c->ctx.reset();
    delete c;
}

int comm_rank(const struct comm *c) { return c->rank; }
uint64_t comm_bytes_sent(const struct comm *c) { return c->bytes_sent; }
int comm_world_size(const struct comm *c) { return c->world; }

void comm_shard(const struct comm *c, size_t n, int rank, size_t *lo, size_t *hi) { shard(n, c->world, rank, lo, hi); }

struct comm_op *comm_allreduce_start(struct comm *c, float *buf, size_t n) {
    return start(c, [c, buf, n] { ring_allreduce(c, buf, n); });
}

struct comm_op *comm_reduce_scatter_start(struct comm *c, float *buf, size_t n) {
    return start(c, [c, buf, n] { ring_reduce_scatter(c, buf, n); });
}

struct comm_op *comm_allgather_start(struct comm *c, float *buf, size_t n) {
    return start(c, [c, buf, n] { ring_allgather(c, buf, n); });
}

int comm_wait(struct comm_op *op, struct whet_err *err) {
    {
        std::unique_lock<std::mutex> lock(op->c->mu);
        op->c->cv.wait(lock, [op] { return op->done; });
    }
    int rc = 0;
    if (!op->error.empty())
        rc = whet_errf(err, "distributed: rank %d of %d (rendezvous %s): %s", op->c->rank, op->c->world,
                       op->c->rendezvous.c_str(), op->error.c_str());
    delete op;
    return rc;
}

int comm_allreduce(struct comm *c, float *buf, size_t n, struct whet_err *err) {
    return comm_wait(comm_allreduce_start(c, buf, n), err);
}

int comm_allreduce_f64(struct comm *c, double *buf, size_t n, struct whet_err *err) {
    return comm_wait(start(c, [c, buf, n] { ring_allreduce(c, buf, n); }), err);
}

int comm_reduce_scatter(struct comm *c, float *buf, size_t n, struct whet_err *err) {
    return comm_wait(comm_reduce_scatter_start(c, buf, n), err);
}

int comm_allgather(struct comm *c, float *buf, size_t n, struct whet_err *err) {
    return comm_wait(comm_allgather_start(c, buf, n), err);
}

int comm_broadcast(struct comm *c, void *buf, size_t bytes, int root, struct whet_err *err) {
    return comm_wait(start(c,
                           [c, buf, bytes, root] {
                               if (c->world == 1 || bytes == 0) return;
                               gloo::BroadcastOptions opts(c->ctx);
                               opts.setOutput(static_cast<char *>(buf), bytes);
                               opts.setRoot(root);
                               opts.setTag(c->tag++);
                               opts.setTimeout(c->timeout);
                               gloo::broadcast(opts);
                           }),
                     err);
}

int comm_barrier(struct comm *c, struct whet_err *err) {
    return comm_wait(start(c,
                           [c] {
                               if (c->world == 1) return;
                               gloo::BarrierOptions opts(c->ctx);
                               opts.setTag(c->tag++);
                               opts.setTimeout(c->timeout);
                               gloo::barrier(opts);
                           }),
                     err);
}

} // extern "C"
