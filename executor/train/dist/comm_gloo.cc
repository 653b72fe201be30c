/* comm_gloo.cc - comm.h's collectives between CPU ranks, over Gloo's TCP transport (comm_internal.h).
 *
 * A thin C++ shim, the only C++ in whet: Gloo bootstraps through comm.c's rendezvous (its Store
 * interface over comm_store), and the collectives are the textbook rings written here over Gloo's
 * point-to-point buffers: reduce-scatter and all-gather each send (N-1)/N of the buffer from every rank,
 * the bandwidth-optimal volume, and keep each rank's shard in place in the caller's buffer (Gloo's
 * halving-doubling reduce-scatter moves it to the buffer's start); an all-reduce is the two, as NCCL's
 * ring. The bytes they send are counted (comm_bytes_sent). Broadcast and barrier are Gloo's.
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
#include "comm_internal.h"

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

struct gloo_op {
    std::function<void()> run;
    bool done = false;
    std::string error;
};

struct gloo_comm {
    int rank = 0, world = 1;
    std::chrono::milliseconds timeout{300000};
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    uint32_t tag = 0;
    std::vector<char> scratch; /* a ring step's incoming chunk */
    uint64_t bytes_sent = 0;    /* by this rank's rings, for comm_bytes_sent */
    /* the collectives' thread and its queue */
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<gloo_op *> queue;
    bool quit = false;
};

static void worker(gloo_comm *c) {
    for (;;) {
        gloo_op *op;
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

static gloo_op *enqueue(gloo_comm *c, std::function<void()> run) {
    gloo_op *op = new gloo_op;
    op->run = std::move(run);
    std::lock_guard<std::mutex> lock(c->mu);
    c->queue.push_back(op);
    c->cv.notify_all();
    return op;
}

/* ---------------------------------------------------------------- rings */

/* Step s of N-1: rank r sends its partial sum of chunk (r-1-s) to r+1 and adds what r-1 sends, chunk
 * (r-2-s), to its own; after the last step chunk r has every rank's term. */
template <typename T> static void ring_reduce_scatter(gloo_comm *c, T *buf, size_t n) {
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
        comm_shard_of(n, N, ((r - 1 - s) % N + N) % N, &slo, &shi);
        comm_shard_of(n, N, ((r - 2 - s) % N + N) % N, &rlo, &rhi);
        if (shi > slo) out->send((r + 1) % N, slot, slo * sizeof(T), (shi - slo) * sizeof(T));
        if (rhi > rlo) in->recv((r - 1 + N) % N, slot, 0, (rhi - rlo) * sizeof(T));
        if (rhi > rlo && !in->waitRecv(c->timeout)) throw gloo::IoException("reduce-scatter: receive timed out");
        if (shi > slo && !out->waitSend(c->timeout)) throw gloo::IoException("reduce-scatter: send timed out");
        for (size_t i = rlo; i < rhi; i++) buf[i] += in_chunk[i - rlo];
        c->bytes_sent += (shi - slo) * sizeof(T);
    }
}

/* Step s of N-1: rank r forwards chunk (r-s) to r+1 and receives chunk (r-1-s) from r-1 in place. */
template <typename T> static void ring_allgather(gloo_comm *c, T *buf, size_t n) {
    const int N = c->world, r = c->rank;
    if (N == 1 || n == 0) return;
    auto b = c->ctx->createUnboundBuffer(buf, n * sizeof(T));
    uint64_t slot = gloo::Slot::build(kRingSlotPrefix, c->tag++);
    for (int s = 0; s < N - 1; s++) {
        size_t slo, shi, rlo, rhi;
        comm_shard_of(n, N, ((r - s) % N + N) % N, &slo, &shi);
        comm_shard_of(n, N, ((r - 1 - s) % N + N) % N, &rlo, &rhi);
        if (shi > slo) b->send((r + 1) % N, slot, slo * sizeof(T), (shi - slo) * sizeof(T));
        if (rhi > rlo) b->recv((r - 1 + N) % N, slot, rlo * sizeof(T), (rhi - rlo) * sizeof(T));
        if (rhi > rlo && !b->waitRecv(c->timeout)) throw gloo::IoException("all-gather: receive timed out");
        if (shi > slo && !b->waitSend(c->timeout)) throw gloo::IoException("all-gather: send timed out");
        c->bytes_sent += (shi - slo) * sizeof(T);
    }
}

/* The ring all-reduce: a reduce-scatter then an all-gather, 2(N-1)/N of the buffer sent by each rank,
 * what NCCL's ring does. */
template <typename T> static void ring_allreduce(gloo_comm *c, T *buf, size_t n) {
    ring_reduce_scatter(c, buf, n);
    ring_allgather(c, buf, n);
}

/* ---------------------------------------------------------------- the implementation */

static int gloo_join(void **state, const struct comm_opts *o, struct comm_store *store, double deadline,
                     struct whet_err *err) {
    gloo_comm *c = new gloo_comm;
    c->rank = o->rank;
    c->world = o->world_size;
    c->timeout = std::chrono::milliseconds((long)(o->timeout_s > 0 ? o->timeout_s : 300) * 1000);
    if (c->world > 1) {
        try {
            gloo::transport::tcp::attr attr(o->host && *o->host ? o->host : "127.0.0.1");
            auto dev = gloo::transport::tcp::CreateDevice(attr);
            RendezvousStore rs(store, deadline);
            c->ctx = std::make_shared<gloo::rendezvous::Context>(c->rank, c->world);
            c->ctx->setTimeout(c->timeout);
            c->ctx->connectFullMesh(rs, dev);
            /* every rank connected before rank 0's rendezvous stops listening */
            gloo::BarrierOptions opts(c->ctx);
            opts.setTimeout(c->timeout);
            gloo::barrier(opts);
        } catch (const std::exception &e) {
            delete c;
            return whet_errf(err, "%s", e.what());
        }
    }
    c->thread = std::thread(worker, c);
    *state = c;
    return 0;
}

static void gloo_leave(void *state) {
    gloo_comm *c = static_cast<gloo_comm *>(state);
    {
        std::lock_guard<std::mutex> lock(c->mu);
        c->quit = true;
        c->cv.notify_all();
    }
    c->thread.join();
    c->ctx.reset();
    delete c;
}

static void broadcast(gloo_comm *c, void *buf, size_t bytes, int root) {
    if (c->world == 1 || bytes == 0) return;
    gloo::BroadcastOptions opts(c->ctx);
    opts.setOutput(static_cast<char *>(buf), bytes);
    opts.setRoot(root);
    opts.setTag(c->tag++);
    opts.setTimeout(c->timeout);
    gloo::broadcast(opts);
}

static void barrier(gloo_comm *c) {
    if (c->world == 1) return;
    gloo::BarrierOptions opts(c->ctx);
    opts.setTag(c->tag++);
    opts.setTimeout(c->timeout);
    gloo::barrier(opts);
}

static void *gloo_start(void *state, const struct comm_call *call) {
    gloo_comm *c = static_cast<gloo_comm *>(state);
    void *buf = call->buf;
    size_t n = call->n;
    int root = call->root;
    switch (call->kind) {
    case COMM_ALLREDUCE: return enqueue(c, [c, buf, n] { ring_allreduce(c, static_cast<float *>(buf), n); });
    case COMM_ALLREDUCE_F64: return enqueue(c, [c, buf, n] { ring_allreduce(c, static_cast<double *>(buf), n); });
    case COMM_REDUCE_SCATTER: return enqueue(c, [c, buf, n] { ring_reduce_scatter(c, static_cast<float *>(buf), n); });
    case COMM_ALLGATHER: return enqueue(c, [c, buf, n] { ring_allgather(c, static_cast<float *>(buf), n); });
    case COMM_BROADCAST: return enqueue(c, [c, buf, n, root] { broadcast(c, buf, n, root); });
    case COMM_BARRIER: break;
    }
    return enqueue(c, [c] { barrier(c); });
}

static int gloo_wait(void *state, void *handle, struct whet_err *err) {
    gloo_comm *c = static_cast<gloo_comm *>(state);
    gloo_op *op = static_cast<gloo_op *>(handle);
    {
        std::unique_lock<std::mutex> lock(c->mu);
        c->cv.wait(lock, [op] { return op->done; });
    }
    int rc = op->error.empty() ? 0 : whet_errf(err, "%s", op->error.c_str());
    delete op;
    return rc;
}

static uint64_t gloo_bytes_sent(const void *state) { return static_cast<const gloo_comm *>(state)->bytes_sent; }

extern "C" const struct comm_impl comm_gloo = {"gloo", gloo_join, gloo_leave, gloo_start, gloo_wait, gloo_bytes_sent};
