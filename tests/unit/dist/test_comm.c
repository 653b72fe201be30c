/* test_comm.c - comm.h's collectives against plain references, at world sizes 1..4 (a thread per rank),
 * on sizes that do not divide evenly (shards of different lengths, empty shards); the rendezvous
 * refusing a rank of another generation; a collective failing, not hanging, when a peer is gone. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "comm_store.h"
#include "test.h"

/* The gang of one test: rank 0 publishes its bound rendezvous address here for the other threads. */
struct gang {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char address[300];
    int world;
    unsigned generation;
    int timeout_s;
};

struct rank_arg {
    struct gang *g;
    int rank;
    void (*body)(struct comm *c, int rank, int world, int *failed);
    int failed;
    int open_failed;
    char error[512];
};

static void on_listen(void *ctx, const char *address) {
    struct gang *g = ctx;
    pthread_mutex_lock(&g->mu);
    snprintf(g->address, sizeof g->address, "%s", address);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void *rank_main(void *p) {
    struct rank_arg *a = p;
    struct gang *g = a->g;
    char address[300];
    if (a->rank == 0) {
        snprintf(address, sizeof address, "127.0.0.1:0");
    } else {
        pthread_mutex_lock(&g->mu);
        while (!g->address[0]) pthread_cond_wait(&g->cv, &g->mu);
        snprintf(address, sizeof address, "%s", g->address);
        pthread_mutex_unlock(&g->mu);
    }
    struct comm_opts o = {.world_size = g->world, .rank = a->rank, .rendezvous = address, .host = "127.0.0.1",
                          .generation = g->generation, .timeout_s = g->timeout_s, .on_listen = on_listen, .ctx = g};
    struct comm *c = NULL;
    struct whet_err err = {0};
    if (comm_open(&c, &o, &err)) {
        a->open_failed = 1;
        snprintf(a->error, sizeof a->error, "%s", err.msg);
        return NULL;
    }
    a->body(c, a->rank, g->world, &a->failed);
    comm_close(c);
    return NULL;
}

/* Runs body on `world` ranks; returns how many ranks saw a wrong value. */
static int run_gang(int world, void (*body)(struct comm *, int, int, int *)) {
    struct gang g = {.world = world, .timeout_s = 30};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    struct rank_arg args[4];
    pthread_t t[4];
    for (int r = 0; r < world; r++) {
        args[r] = (struct rank_arg){.g = &g, .rank = r, .body = body};
        pthread_create(&t[r], NULL, rank_main, &args[r]);
    }
    int failed = 0;
    for (int r = 0; r < world; r++) {
        pthread_join(t[r], NULL);
        CHECK_MSG(!args[r].open_failed, "rank %d: %s", r, args[r].error);
        failed += args[r].failed;
    }
    return failed;
}

/* Rank r's input element i: distinct per rank and position, exact in float sums of 4 terms. */
static float term(int rank, size_t i) { return (float)((int)(i % 97) - 40) * 0.25f + (float)(rank + 1) * 1024.0f; }
static float sum_of_terms(int world, size_t i) {
    float s = 0;
    for (int r = 0; r < world; r++) s += term(r, i);
    return s;
}

static const size_t sizes[] = {0, 1, 3, 7, 1000, 100003};

static void allreduce_body(struct comm *c, int rank, int world, int *failed) {
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        float *buf = malloc(sizeof(float) * (n + 1));
        for (size_t i = 0; i < n; i++) buf[i] = term(rank, i);
        struct whet_err err = {0};
        uint64_t sent = comm_bytes_sent(c);
        if (comm_allreduce(c, buf, n, &err)) *failed += 1;
        /* The ring's volume: every chunk but this rank's own (reduce-scatter) and but the next rank's
         * (all-gather), 2(N-1)/N of the buffer when the chunks are equal. */
        size_t own_lo, own_hi, next_lo, next_hi;
        comm_shard(c, n, rank, &own_lo, &own_hi);
        comm_shard(c, n, (rank + 1) % world, &next_lo, &next_hi);
        size_t expect = world == 1 ? 0 : sizeof(float) * (2 * n - (own_hi - own_lo) - (next_hi - next_lo));
        if (comm_bytes_sent(c) - sent != expect) {
            fprintf(stderr, "rank %d: allreduce of %zu floats sent %llu bytes, the ring sends %zu\n", rank, n,
                    (unsigned long long)(comm_bytes_sent(c) - sent), expect);
            *failed += 1;
        }
        for (size_t i = 0; i < n; i++)
            if (buf[i] != sum_of_terms(world, i)) {
                *failed += 1;
                break;
            }
        double d[3] = {rank, 1.5, 1e-3 * rank};
        if (comm_allreduce_f64(c, d, 3, &err) || d[0] != world * (world - 1) / 2.0 || d[1] != 1.5 * world) *failed += 1;
        free(buf);
    }
}

/* Reduce-scatter, then all-gather of the reduced shards: every rank ends with the whole sum; the two
 * started back to back and waited for in order (the asynchronous form). */
static void scatter_gather_body(struct comm *c, int rank, int world, int *failed) {
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k], lo, hi;
        float *buf = malloc(sizeof(float) * (n + 1));
        for (size_t i = 0; i < n; i++) buf[i] = term(rank, i);
        struct whet_err err = {0};
        if (comm_reduce_scatter(c, buf, n, &err)) *failed += 1;
        comm_shard(c, n, rank, &lo, &hi);
        /* The shards tile [0, n) in rank order, their sizes at most one apart. */
        size_t prev_hi = 0;
        for (int r = 0; r < world; r++) {
            size_t l, h;
            comm_shard(c, n, r, &l, &h);
            if (l != prev_hi || h - l > n / (size_t)world + 1 || h - l < n / (size_t)world) *failed += 1;
            prev_hi = h;
        }
        if (prev_hi != n) *failed += 1;
        for (size_t i = lo; i < hi; i++)
            if (buf[i] != sum_of_terms(world, i)) {
                *failed += 1;
                break;
            }
        /* Scribble outside the shard: the all-gather must overwrite it with the others' shards. */
        for (size_t i = 0; i < n; i++)
            if (i < lo || i >= hi) buf[i] = -7.0f;
        struct comm_op *op = comm_allgather_start(c, buf, n);
        if (comm_wait(op, &err)) *failed += 1;
        for (size_t i = 0; i < n; i++)
            if (buf[i] != sum_of_terms(world, i)) {
                *failed += 1;
                break;
            }
        free(buf);
    }
}

static void broadcast_barrier_body(struct comm *c, int rank, int world, int *failed) {
    char text[64] = {0};
    if (rank == world - 1) snprintf(text, sizeof text, "from the last rank");
    struct whet_err err = {0};
    if (comm_broadcast(c, text, sizeof text, world - 1, &err) || strcmp(text, "from the last rank")) *failed += 1;
    if (comm_barrier(c, &err)) *failed += 1;
}

TEST(single_rank_is_identity) { CHECK(run_gang(1, allreduce_body) == 0); }

TEST(allreduce_matches_reference) {
    for (int w = 2; w <= 4; w++) CHECK_MSG(run_gang(w, allreduce_body) == 0, "world %d", w);
}

TEST(reduce_scatter_and_allgather_match_reference) {
    for (int w = 1; w <= 4; w++) CHECK_MSG(run_gang(w, scatter_gather_body) == 0, "world %d", w);
}

TEST(broadcast_and_barrier) {
    for (int w = 1; w <= 4; w++) CHECK_MSG(run_gang(w, broadcast_barrier_body) == 0, "world %d", w);
}

TEST(rendezvous_refuses_another_generation) {
    struct comm_store_server *srv = NULL;
    struct comm_store *cl = NULL;
    struct whet_err err = {0};
    char bound[300];
    CHECK(comm_store_serve(&srv, "127.0.0.1:0", 5, bound, sizeof bound, &err) == 0);
    CHECK(comm_store_connect(&cl, bound, 4, 1, whet_now_mono() + 5, &err) == -1);
    CHECK_MSG(strstr(err.msg, "generation 4") && strstr(err.msg, "generation 5"), "%s", err.msg);
    CHECK(comm_store_connect(&cl, bound, 5, 1, whet_now_mono() + 5, &err) == 0);
    void *v = NULL;
    size_t len = 0;
    /* A get waits for its key, or fails at its deadline. */
    CHECK(comm_store_get(cl, "missing", &v, &len, whet_now_mono() + 0.2, &err) == -1);
    CHECK_MSG(strstr(err.msg, "timed out"), "%s", err.msg);
    comm_store_close(cl);
    CHECK(comm_store_connect(&cl, bound, 5, 1, whet_now_mono() + 5, &err) == 0);
    CHECK(comm_store_set(cl, "k", "value", 5, &err) == 0);
    CHECK(comm_store_get(cl, "k", &v, &len, whet_now_mono() + 5, &err) == 0 && len == 5 && !memcmp(v, "value", 5));
    free(v);
    comm_store_close(cl);
    comm_store_server_stop(srv);
}

/* Rank 1 leaves after the first collective; rank 0's second one fails within the timeout. */
static void peer_lost_body(struct comm *c, int rank, int world, int *failed) {
    float x = 1;
    struct whet_err err = {0};
    if (comm_allreduce(c, &x, 1, &err) || x != 2) *failed += 1;
    if (rank == 1) return;
    int rc = comm_allreduce(c, &x, 1, &err);
    if (rc != -1 || !strstr(err.msg, "rank 0 of 2")) {
        fprintf(stderr, "expected a failure naming the rank, got rc %d: %s\n", rc, err.msg);
        *failed += 1;
    }
}

TEST(lost_peer_fails_the_collective) { CHECK(run_gang(2, peer_lost_body) == 0); }

int main(void) {
    RUN(single_rank_is_identity);
    RUN(allreduce_matches_reference);
    RUN(reduce_scatter_and_allgather_match_reference);
    RUN(broadcast_and_barrier);
    RUN(rendezvous_refuses_another_generation);
    RUN(lost_peer_fails_the_collective);
    return test_summary();
}
