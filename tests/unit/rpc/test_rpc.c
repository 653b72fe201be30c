/* Unary gRPC over a real loopback socket: a call and its reply, the token check, unknown methods, calls
 * answered by a free thread while another's handler is held, deadlines, retries that give up when no
 * server answers, many calls in flight on one queue (rpc_start/rpc_next), cancelled or not, a method
 * with threads of its own answered while every shared thread is held, a call that waited for a thread
 * past its deadline answered without running its handler, and replies deferred (rpc_defer) to another
 * thread: known past their deadline, and waited for by the server's stop. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proto/whet.pb-c.h"
#include "rpc.h"
#include "test.h"

#define HEARTBEAT "/whet.v1.Scheduler/Heartbeat"
#define OWN_LANE "/whet.test.Lane/Heartbeat" /* the same handler, on a thread of its own */
#define DEFERRED "/whet.test.Deferred/Heartbeat" /* replies left to the test (handle_deferred), one thread */

static int calls;
static int late_calls; /* handlers run for a node called "late" */

/* A node called "held" waits in its handler until the test lets it go. */
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t held_cond = PTHREAD_COND_INITIALIZER;
static int held_running, held_released;

static void hold(void) {
    pthread_mutex_lock(&held_lock);
    held_running++;
    pthread_cond_broadcast(&held_cond);
    while (!held_released) pthread_cond_wait(&held_cond, &held_lock);
    pthread_mutex_unlock(&held_lock);
}

/* Replies with one START command per job reported, echoing its id; a node called "slow" sleeps, one called
 * "held" waits (hold). */
static int handle_heartbeat(void *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out, struct whet_err *err) {
    (void)ctx;
    const Whet__V1__HeartbeatRequest *req = (const Whet__V1__HeartbeatRequest *)msg;
    __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
    if (!strcmp(req->node_id, "late")) __atomic_add_fetch(&late_calls, 1, __ATOMIC_SEQ_CST);
    if (!strcmp(req->node_id, "slow")) usleep(500 * 1000);
    if (!strcmp(req->node_id, "held")) hold();
    if (!strcmp(req->node_id, "bad")) return whet_errf(err, "node unknown"), RPC_NOT_FOUND;
    Whet__V1__HeartbeatResponse *resp = malloc(sizeof *resp);
    whet__v1__heartbeat_response__init(resp);
    resp->n_commands = req->n_jobs;
    resp->commands = calloc(req->n_jobs ? req->n_jobs : 1, sizeof *resp->commands);
    for (size_t i = 0; i < req->n_jobs; i++) {
        Whet__V1__Command *c = malloc(sizeof *c);
        whet__v1__command__init(c);
        c->kind = WHET__V1__COMMAND__KIND__START;
        c->job_id = strdup(req->jobs[i]->job_id);
        resp->commands[i] = c;
    }
    *out = &resp->base;
    return RPC_OK;
}

static void free_heartbeat_response(ProtobufCMessage *msg) {
    Whet__V1__HeartbeatResponse *resp = (Whet__V1__HeartbeatResponse *)msg;
    for (size_t i = 0; i < resp->n_commands; i++) {
        free(resp->commands[i]->job_id);
        free(resp->commands[i]);
    }
    free(resp->commands);
    free(resp);
}

/* Deferred calls waiting for the test to answer them, with their requests. */
#define DEFERRED_MAX 32
static pthread_mutex_t deferred_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t deferred_cond = PTHREAD_COND_INITIALIZER;
static struct deferred {
    struct rpc_reply *reply;
    const Whet__V1__HeartbeatRequest *req;
} deferred[DEFERRED_MAX];
static int n_deferred;

static int handle_deferred(void *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out, struct whet_err *err) {
    (void)ctx, (void)out, (void)err;
    struct rpc_reply *reply = rpc_defer();
    CHECK(reply != NULL);
    pthread_mutex_lock(&deferred_lock);
    deferred[n_deferred++] = (struct deferred){reply, (const Whet__V1__HeartbeatRequest *)msg};
    pthread_cond_broadcast(&deferred_cond);
    pthread_mutex_unlock(&deferred_lock);
    return RPC_OK;
}

/* Waits until n calls are deferred. */
static int wait_deferred(int n) {
    pthread_mutex_lock(&deferred_lock);
    for (int i = 0; i < 500 && n_deferred < n; i++) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 10 * 1000 * 1000;
        if (t.tv_nsec >= 1000000000) t.tv_sec++, t.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&deferred_cond, &deferred_lock, &t);
    }
    int got = n_deferred;
    pthread_mutex_unlock(&deferred_lock);
    return got;
}

/* Answers deferred call i from the calling thread: a START of the node's name, or for node "bad" NOT_FOUND. */
static void answer_deferred(int i) {
    const Whet__V1__HeartbeatRequest *req = deferred[i].req;
    struct whet_err err = {0};
    if (!strcmp(req->node_id, "bad")) {
        whet_errf(&err, "node unknown");
        rpc_reply_send(deferred[i].reply, RPC_NOT_FOUND, NULL, &err);
        return;
    }
    Whet__V1__HeartbeatResponse *resp = malloc(sizeof *resp);
    whet__v1__heartbeat_response__init(resp);
    resp->n_commands = 1;
    resp->commands = calloc(1, sizeof *resp->commands);
    resp->commands[0] = malloc(sizeof *resp->commands[0]);
    whet__v1__command__init(resp->commands[0]);
    resp->commands[0]->job_id = strdup(req->node_id);
    rpc_reply_send(deferred[i].reply, RPC_OK, &resp->base, &err);
}

static const struct rpc_method methods[] = {
    {HEARTBEAT, &whet__v1__heartbeat_request__descriptor, handle_heartbeat, free_heartbeat_response, 0},
    {OWN_LANE, &whet__v1__heartbeat_request__descriptor, handle_heartbeat, free_heartbeat_response, 1},
    {DEFERRED, &whet__v1__heartbeat_request__descriptor, handle_deferred, free_heartbeat_response, 1},
};

static struct rpc_server *server;
static char target[64];

static int heartbeat(const char *token, const char *node, const char *method, int timeout_ms, int budget_ms,
                     Whet__V1__HeartbeatResponse **resp, struct whet_err *err) {
    struct rpc_client *client;
    CHECK(rpc_client_open(target, token, &client, err) == 0);
    Whet__V1__JobProgress job = WHET__V1__JOB_PROGRESS__INIT, *jobs[] = {&job};
    job.job_id = "ftjob-1";
    Whet__V1__HeartbeatRequest req = WHET__V1__HEARTBEAT_REQUEST__INIT;
    req.node_id = (char *)node;
    req.n_jobs = 1;
    req.jobs = jobs;
    int rc = rpc_call(client, method, &req.base, &whet__v1__heartbeat_response__descriptor, (ProtobufCMessage **)resp,
                      timeout_ms, budget_ms, err);
    rpc_client_close(client);
    return rc;
}

TEST(call_and_reply) {
    Whet__V1__HeartbeatResponse *resp = NULL;
    struct whet_err err;
    int rc = heartbeat("secret", "node-a", HEARTBEAT, 5000, 5000, &resp, &err);
    CHECK_MSG(rc == RPC_OK, "%s", err.msg);
    if (rc != RPC_OK) return;
    CHECK(resp->n_commands == 1);
    CHECK_STR(resp->commands[0]->job_id, "ftjob-1");
    CHECK(resp->commands[0]->kind == WHET__V1__COMMAND__KIND__START);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

TEST(wrong_token_is_unauthenticated) {
    Whet__V1__HeartbeatResponse *resp = NULL;
    struct whet_err err;
    int before = calls;
    CHECK(heartbeat("guess", "node-a", HEARTBEAT, 5000, 5000, &resp, &err) == RPC_UNAUTHENTICATED);
    CHECK(heartbeat("", "node-a", HEARTBEAT, 5000, 5000, &resp, &err) == RPC_UNAUTHENTICATED);
    CHECK(calls == before); /* the handler never ran */
}

TEST(handler_status_reaches_client) {
    Whet__V1__HeartbeatResponse *resp = NULL;
    struct whet_err err;
    CHECK(heartbeat("secret", "bad", HEARTBEAT, 5000, 5000, &resp, &err) == RPC_NOT_FOUND);
    CHECK_CONTAINS(err.msg, "node unknown");
}

TEST(unknown_method) {
    Whet__V1__HeartbeatResponse *resp = NULL;
    struct whet_err err;
    CHECK(heartbeat("secret", "node-a", "/whet.v1.Scheduler/Nope", 5000, 5000, &resp, &err) == 12);
}

struct held_call {
    const char *method;
    int rc;
    pthread_t thread;
};

static void *held_call_main(void *arg) {
    struct held_call *h = arg;
    Whet__V1__HeartbeatResponse *resp = NULL;
    struct whet_err err;
    h->rc = heartbeat("secret", "held", h->method, 30000, 30000, &resp, &err);
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
    return NULL;
}

/* Starts n calls of `method` whose handlers wait until release_held; returns when all of them wait. */
static void hold_calls(struct held_call *h, int n, const char *method) {
    pthread_mutex_lock(&held_lock);
    held_running = held_released = 0;
    pthread_mutex_unlock(&held_lock);
    for (int i = 0; i < n; i++) {
        h[i] = (struct held_call){.method = method, .rc = -1};
        pthread_create(&h[i].thread, NULL, held_call_main, &h[i]);
    }
    pthread_mutex_lock(&held_lock);
    while (held_running < n) pthread_cond_wait(&held_cond, &held_lock);
    pthread_mutex_unlock(&held_lock);
}

/* Lets the held handlers go; 0 when every held call was then answered OK. */
static int release_held(struct held_call *h, int n) {
    pthread_mutex_lock(&held_lock);
    held_released = 1;
    pthread_cond_broadcast(&held_cond);
    pthread_mutex_unlock(&held_lock);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(h[i].thread, NULL);
        failed |= h[i].rc != RPC_OK;
    }
    return failed;
}

/* With one of the two threads held in a handler, every other call is answered by the free one: none is
 * queued behind the held handler (each would then miss its deadline). */
TEST(a_held_handler_holds_up_no_other_call) {
    struct held_call held;
    hold_calls(&held, 1, HEARTBEAT);
    for (int i = 0; i < 8; i++) {
        Whet__V1__HeartbeatResponse *resp = NULL;
        struct whet_err err;
        int rc = heartbeat("secret", "node-a", HEARTBEAT, 3000, 3000, &resp, &err);
        CHECK_MSG(rc == RPC_OK, "call %d: %s", i, err.msg);
        if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    CHECK(release_held(&held, 1) == 0);
}

TEST(deadline_exceeded) {
    Whet__V1__HeartbeatResponse *resp = NULL;
    struct whet_err err;
    CHECK(heartbeat("secret", "slow", HEARTBEAT, 100, 100, &resp, &err) == RPC_DEADLINE_EXCEEDED);
}

TEST(no_server_gives_up_after_budget) {
    Whet__V1__HeartbeatResponse *resp = NULL;
    struct whet_err err;
    char saved[64];
    strcpy(saved, target);
    strcpy(target, "127.0.0.1:1"); /* nothing listens on port 1 */
    double t0 = whet_now_mono();
    int rc = heartbeat("secret", "node-a", HEARTBEAT, 200, 1000, &resp, &err);
    double took = whet_now_mono() - t0;
    strcpy(target, saved);
    CHECK(rc == RPC_UNAVAILABLE || rc == RPC_DEADLINE_EXCEEDED);
    CHECK_MSG(took < 3.0, "took %.2fs", took);
}

/* Calls in flight together on one queue end each once, with their own tag, reply and status. */
TEST(calls_in_flight_on_one_queue) {
    struct rpc_client *client;
    struct whet_err err;
    CHECK(rpc_client_open(target, "secret", &client, &err) == 0);
    struct rpc_queue *q = rpc_queue_open();
    void *tag;
    ProtobufCMessage *msg = NULL;
    CHECK(rpc_next(q, 50, &tag, &msg, &err) == -1); /* nothing in flight */
    enum { N = 16 };
    char nodes[N][16], jobs[N][16];
    int seen[N] = {0};
    for (int i = 0; i < N; i++) {
        /* the last two: a handler's status, and one past its deadline */
        snprintf(nodes[i], sizeof nodes[i], "%s", i == N - 2 ? "bad" : i == N - 1 ? "slow" : "node");
        snprintf(jobs[i], sizeof jobs[i], "job-%d", i);
        Whet__V1__JobProgress job = WHET__V1__JOB_PROGRESS__INIT, *pjob = &job;
        job.job_id = jobs[i];
        Whet__V1__HeartbeatRequest req = WHET__V1__HEARTBEAT_REQUEST__INIT;
        req.node_id = nodes[i];
        req.n_jobs = 1;
        req.jobs = &pjob;
        CHECK(rpc_start(q, client, HEARTBEAT, &req.base, &whet__v1__heartbeat_response__descriptor,
                        i == N - 1 ? 100 : 5000, &seen[i], &err) == RPC_OK);
    }
    for (int ended = 0; ended < N; ended++) {
        msg = NULL;
        int rc = rpc_next(q, 5000, &tag, &msg, &err);
        CHECK_MSG(rc != -1, "%d of %d calls ended", ended, N);
        int i = (int)((int *)tag - seen);
        CHECK(i >= 0 && i < N && !seen[i]);
        seen[i] = 1;
        if (i == N - 2) {
            CHECK_MSG(rc == RPC_NOT_FOUND && strstr(err.msg, "node unknown"), "%d: %s", rc, err.msg);
        } else if (i == N - 1) {
            CHECK(rc == RPC_DEADLINE_EXCEEDED);
        } else {
            const Whet__V1__HeartbeatResponse *resp = (const Whet__V1__HeartbeatResponse *)msg;
            CHECK_MSG(rc == RPC_OK, "call %d: %s", i, err.msg);
            CHECK(resp->n_commands == 1 && !strcmp(resp->commands[0]->job_id, jobs[i]));
        }
        if (msg) protobuf_c_message_free_unpacked(msg, NULL);
    }
    /* A cancelled call ends at once, with its tag, long before its handler's half second. */
    Whet__V1__HeartbeatRequest req = WHET__V1__HEARTBEAT_REQUEST__INIT;
    req.node_id = "slow";
    int slow_tag;
    CHECK(rpc_start(q, client, HEARTBEAT, &req.base, &whet__v1__heartbeat_response__descriptor, 5000, &slow_tag,
                    &err) == RPC_OK);
    double t0 = whet_now_mono();
    rpc_queue_cancel(q);
    msg = NULL;
    CHECK(rpc_next(q, 5000, &tag, &msg, &err) == RPC_CANCELLED);
    CHECK(tag == &slow_tag && !msg);
    CHECK_MSG(whet_now_mono() - t0 < 0.4, "cancelled after %.2fs", whet_now_mono() - t0);
    /* Closed with a call still in flight: cancelled and collected by the close. */
    CHECK(rpc_start(q, client, HEARTBEAT, &req.base, &whet__v1__heartbeat_response__descriptor, 5000, &slow_tag,
                    &err) == RPC_OK);
    rpc_queue_close(q);
    rpc_client_close(client);
}

/* Both shared threads held: a method with a thread of its own is still answered (in the shared lane it
 * would wait behind the held handlers past its deadline), and the shared one is not. */
TEST(a_method_with_its_own_thread_is_answered_while_the_shared_ones_are_held) {
    struct held_call held[2];
    hold_calls(held, 2, HEARTBEAT);
    Whet__V1__HeartbeatResponse *resp = NULL;
    struct whet_err err;
    int rc = heartbeat("secret", "node-a", OWN_LANE, 1000, 1000, &resp, &err);
    CHECK_MSG(rc == RPC_OK, "own lane: %d %s", rc, err.msg);
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
    resp = NULL;
    unsigned long expired = rpc_server_calls_expired();
    CHECK(heartbeat("secret", "node-a", HEARTBEAT, 300, 300, &resp, &err) == RPC_DEADLINE_EXCEEDED);
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
    CHECK(release_held(held, 2) == 0);
    /* The shared call expired behind the held ones is counted by whichever thread takes it next: waited for
     * here, so that the next test's count of expired calls starts from a settled one. */
    for (int i = 0; i < 500 && rpc_server_calls_expired() == expired; i++) usleep(10 * 1000);
}

/* The own lane's one thread held: a call queued behind it past its deadline is answered DEADLINE_EXCEEDED
 * and counted, and its handler never runs, even once the thread is free; the next call is served. */
TEST(a_call_that_waited_past_its_deadline_is_not_run) {
    struct held_call held;
    hold_calls(&held, 1, OWN_LANE);
    int late_before = late_calls;
    unsigned long expired_before = rpc_server_calls_expired();
    Whet__V1__HeartbeatResponse *resp = NULL;
    struct whet_err err;
    CHECK(heartbeat("secret", "late", OWN_LANE, 300, 300, &resp, &err) == RPC_DEADLINE_EXCEEDED);
    /* The server's deadline is the timeout from when the call reached it, after the client's: a thread freed
     * at once could still find it in time (CI's run of ef1d7d2 did). Freed a second later, it cannot. */
    usleep(1000 * 1000);
    CHECK(release_held(&held, 1) == 0);
    /* One thread takes the lane's calls in order: this one's answer comes after the late one was dealt with. */
    int rc = heartbeat("secret", "node-a", OWN_LANE, 5000, 5000, &resp, &err);
    CHECK_MSG(rc == RPC_OK, "after: %d %s", rc, err.msg);
    if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
    CHECK_MSG(late_calls == late_before, "the late call's handler ran %d times", late_calls - late_before);
    CHECK(rpc_server_calls_expired() == expired_before + 1);
}

/* Deferred calls on a lane of one thread: all of them reach their handler while none is answered (a
 * blocking handler would hold the thread, one call at a time), and each is answered from this thread, in
 * reverse order, with what its own request said, a status and message too. */
TEST(deferred_replies_leave_the_thread_free) {
    struct rpc_client *client;
    struct whet_err err;
    CHECK(rpc_client_open(target, "secret", &client, &err) == 0);
    struct rpc_queue *q = rpc_queue_open();
    enum { N = 12 };
    char nodes[N][16];
    int seen[N] = {0};
    n_deferred = 0;
    for (int i = 0; i < N; i++) {
        snprintf(nodes[i], sizeof nodes[i], i == 3 ? "bad" : "node-%d", i);
        Whet__V1__HeartbeatRequest req = WHET__V1__HEARTBEAT_REQUEST__INIT;
        req.node_id = nodes[i];
        CHECK(rpc_start(q, client, DEFERRED, &req.base, &whet__v1__heartbeat_response__descriptor, 5000, &seen[i],
                        &err) == RPC_OK);
    }
    CHECK_MSG(wait_deferred(N) == N, "%d of %d calls reached their handler", n_deferred, N);
    void *tag;
    ProtobufCMessage *msg = NULL;
    CHECK(rpc_next(q, 100, &tag, &msg, &err) == -1); /* none answered yet */
    for (int i = n_deferred - 1; i >= 0; i--) answer_deferred(i);
    for (int ended = 0; ended < N; ended++) {
        msg = NULL;
        int rc = rpc_next(q, 5000, &tag, &msg, &err);
        CHECK_MSG(rc != -1, "%d of %d calls ended", ended, N);
        if (rc == -1) break;
        int i = (int)((int *)tag - seen);
        seen[i] = 1;
        if (i == 3) {
            CHECK_MSG(rc == RPC_NOT_FOUND && strstr(err.msg, "node unknown"), "%d: %s", rc, err.msg);
        } else {
            const Whet__V1__HeartbeatResponse *resp = (const Whet__V1__HeartbeatResponse *)msg;
            CHECK_MSG(rc == RPC_OK && resp->n_commands == 1 && !strcmp(resp->commands[0]->job_id, nodes[i]),
                      "call %d: %d %s", i, rc, err.msg);
        }
        if (msg) protobuf_c_message_free_unpacked(msg, NULL);
    }
    rpc_queue_close(q);
    rpc_client_close(client);
}

/* Starts one call of the deferred method for `node` on a new queue and client, and waits until its handler has
 * deferred it (deferred[0]). */
static void defer_one(const char *node, int timeout_ms, struct rpc_client **client, struct rpc_queue **q) {
    struct whet_err err;
    CHECK(rpc_client_open(target, "secret", client, &err) == 0);
    *q = rpc_queue_open();
    n_deferred = 0;
    Whet__V1__HeartbeatRequest req = WHET__V1__HEARTBEAT_REQUEST__INIT;
    req.node_id = (char *)node;
    static int tag_storage;
    CHECK(rpc_start(*q, *client, DEFERRED, &req.base, &whet__v1__heartbeat_response__descriptor, timeout_ms,
                    &tag_storage, &err) == RPC_OK);
    CHECK(wait_deferred(1) == 1);
}

/* A deferred call past its deadline is known as such, and answered DEADLINE_EXCEEDED it is counted. */
TEST(a_deferred_call_past_its_deadline_is_known) {
    struct rpc_client *client;
    struct rpc_queue *q;
    struct whet_err err;
    defer_one("node-late", 2000, &client, &q);
    CHECK(!rpc_reply_expired(deferred[0].reply));
    void *tag;
    ProtobufCMessage *msg = NULL;
    CHECK(rpc_next(q, 5000, &tag, &msg, &err) == RPC_DEADLINE_EXCEEDED); /* the client gave up */
    usleep(100 * 1000);
    CHECK(rpc_reply_expired(deferred[0].reply));
    unsigned long expired = rpc_server_calls_expired();
    struct whet_err late;
    whet_errf(&late, "too late");
    rpc_reply_send(deferred[0].reply, RPC_DEADLINE_EXCEEDED, NULL, &late);
    CHECK(rpc_server_calls_expired() == expired + 1);
    rpc_queue_close(q);
    rpc_client_close(client);
}

static int answered_late;

static void *answer_later_main(void *arg) {
    (void)arg;
    usleep(300 * 1000);
    answered_late = 1;
    answer_deferred(0);
    return NULL;
}

/* A deferred call in flight when the server stops: the stop waits for its answer, which reaches the client. */
TEST(stop_waits_for_a_deferred_reply) {
    struct rpc_client *client;
    struct rpc_queue *q;
    struct whet_err err;
    defer_one("node-last", 5000, &client, &q);
    pthread_t answerer;
    pthread_create(&answerer, NULL, answer_later_main, NULL);
    rpc_server_stop(server);
    CHECK_MSG(answered_late, "the server stopped before its deferred call was answered");
    void *tag;
    ProtobufCMessage *msg = NULL;
    int rc = rpc_next(q, 5000, &tag, &msg, &err);
    CHECK_MSG(rc == RPC_OK && msg && !strcmp(((Whet__V1__HeartbeatResponse *)msg)->commands[0]->job_id, "node-last"),
              "%d %s", rc, err.msg);
    if (msg) protobuf_c_message_free_unpacked(msg, NULL);
    pthread_join(answerer, NULL);
    rpc_queue_close(q);
    rpc_client_close(client);
}

int main(void) {
    struct whet_err err;
    if (rpc_server_start("127.0.0.1:0", "secret", methods, 3, NULL, 2, &server, &err) < 0) {
        fprintf(stderr, "server: %s\n", err.msg);
        return 1;
    }
    snprintf(target, sizeof target, "127.0.0.1:%d", rpc_server_port(server));
    RUN(call_and_reply);
    RUN(wrong_token_is_unauthenticated);
    RUN(handler_status_reaches_client);
    RUN(unknown_method);
    RUN(a_held_handler_holds_up_no_other_call);
    RUN(deadline_exceeded);
    RUN(no_server_gives_up_after_budget);
    RUN(calls_in_flight_on_one_queue);
    RUN(a_method_with_its_own_thread_is_answered_while_the_shared_ones_are_held);
    RUN(a_call_that_waited_past_its_deadline_is_not_run);
    RUN(deferred_replies_leave_the_thread_free);
    RUN(a_deferred_call_past_its_deadline_is_known);
    RUN(stop_waits_for_a_deferred_reply); /* stops the server, while the "slow" handler may still run */
    return test_summary();
}
