/* fleet.c - a simulated fleet of executors for the scheduler load harness (tests/bench/scale/run.sh).
 *
 * Speaks the executor protocol (proto/whet.proto) through the same client as `whet executor`
 * (common/rpc) for N nodes at once: each registers, heartbeats at the interval the scheduler answers
 * with, reporting the progress of its jobs; a START makes a job that "trains" for a duration sampled
 * uniformly in [--run-s MIN:MAX], reports one checkpoint half-way and finishes SUCCEEDED with its usage;
 * STOP and CANCEL finish it at once as STOPPED or CANCELLED. No trainer, no object store: what is left
 * to measure is the scheduler and its database.
 *
 *   scale_fleet --scheduler HOST:PORT --nodes N [--gpus G] [--threads T] [--dcs D] [--connections C]
 *               [--run-s MIN:MAX] [--seconds S] [--seed K]
 *
 * WHET_EXECUTOR_TOKEN is the shared secret. Runs S seconds (default: until SIGINT/SIGTERM), then
 * prints one JSON object: calls ended and failed per method, heartbeat latency p50/p99/max, heartbeats
 * answered late (past the executor's 3 s call deadline, or past the interval: the next one was due),
 * the longest gap between two answered heartbeats of one node, and how late the simulator itself sent
 * heartbeats (its own lag: when that is large, the figures measure this process, not the scheduler),
 * and the failed heartbeats of each second by its Unix time (run.sh tells in which phase they failed).
 *
 * Nodes are split over T threads (default 1), each an event loop with its nodes' calls in flight on one
 * queue (rpc_start/rpc_next), its nodes kept in a heap by when each next has something to do; node i's
 * first call is spread over the first interval so that N nodes do not register in one burst. A job's
 * checkpoint and end are calls of their own, in flight beside the node's heartbeats, as an executor
 * reports them from the job's own thread (executor/agent/job.c): a slow FinishJob does not hold up the
 * node's heartbeats. (A blocking call per thread, as before, needed a thread per 4 nodes to keep up; at
 * 10,000 nodes their wake-ups were half of this process's CPU.) The nodes share C connections (default
 * 1), node i the (i mod C)th, where a real fleet's executors each have their own: at 10,000 idle nodes,
 * 100 connections answered heartbeats at p50 88 ms against one's 126 ms (p99 about 0.5 s both), for 1.5x
 * this process's CPU.
 *
 * A window: the first SIGUSR1 opens it, the second closes it, and the JSON has the same figures for it
 * alone under "window" (run.sh opens it for its steady state, past the registration and the fill). */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proto/whet.pb-c.h"
#include "rpc.h"

#define CALL_TIMEOUT_MS 3000  /* the executor's heartbeat deadline (executor/agent/agent.c) */
#define LAT_BUCKET_US 100     /* heartbeat latency histogram: 0.1 ms buckets ... */
#define LAT_BUCKETS 100001    /* ... up to 10 s */
#define MAX_TOTAL_STEPS 100
#define IDLE_WAIT_MS 500 /* the longest wait for answers with no node due */

struct sim_job {
    char *id;
    uint32_t attempt;
    double started, duration;
    int checkpointed;
    int reporting;            /* its checkpoint or end is in flight */
    double retry_at, backoff; /* after a failed report: not before retry_at; the next wait doubles */
};

struct sim_node {
    char id[32];
    int dc;
    int registered;
    int calling; /* its registration or heartbeat is in flight */
    double next_hb, last_answered;
    double queued_at; /* its entry in the worker's heap (older entries are stale); < 0: none */
    int n_jobs, cap_jobs;
    struct sim_job *jobs;
    struct rpc_client *rpc; /* its connection, shared with the nodes of the same index modulo --connections */
};

enum { M_REGISTER, M_HEARTBEAT, M_CHECKPOINT, M_FINISH, M_COUNT };
static const char *method_names[M_COUNT] = {"register", "heartbeat", "checkpoint", "finish"};

struct stats {
    long calls[M_COUNT], failed[M_COUNT];
    long hb_over_deadline, hb_over_interval, started, succeeded, stopped;
    double max_gap, max_lag, sum_lag;
    long sent, lagged; /* heartbeats sent; those sent more than 100 ms after they were due */
    uint32_t *lat;
    uint32_t *hb_failed_per_s; /* the run's only: failed heartbeats by second since g.wall_start */
};

/* Seconds of a run whose failed heartbeats are counted by second (run.sh places them among its phases). */
#define FAILED_SECONDS 7200

/* A node waiting for its time. */
struct due {
    double at;
    struct sim_node *node;
};

/* An event loop: its nodes, its queue of calls in flight, its statistics (read after the join). */
struct worker {
    pthread_t thread;
    struct sim_node *nodes;
    int n_nodes;
    unsigned seed;
    struct stats run, window;
    struct rpc_queue *queue;
    long in_flight;
    int draining; /* the run is over: calls end cancelled */
    struct due *heap;
    int heap_n, heap_cap;
};

/* A call in flight, the tag of its end. A report's job is named by id and attempt: the job may be gone
 * from its node (stopped) when the answer comes. */
struct sim_call {
    int method;
    struct sim_node *node;
    double sent;
    char *job_id;
    uint32_t attempt;
    int succeeded; /* a FinishJob's outcome was SUCCEEDED */
};

static struct {
    struct rpc_client **clients;
    int n_clients;
    int gpus, dcs;
    double run_min, run_max, heartbeat_s, lease_s;
    double until;
    time_t wall_start; /* Unix time when the nodes began */
} g;

static volatile sig_atomic_t stopping;
static void on_signal(int sig) {
    (void)sig;
    stopping = 1;
}

/* The window: 0 not opened yet, 1 open, 2 closed; when it opened and closed (clock_gettime, under
 * whet_now_mono, is async-signal-safe). */
static volatile sig_atomic_t window;
static volatile double window_at[2];
static void on_window(int sig) {
    (void)sig;
    if (window == 2) return;
    window_at[window] = whet_now_mono();
    window++;
}

/* The statistics a record goes into: the run's, and the window's while it is open. */
static int stats_of(struct worker *w, struct stats *s[2]) {
    s[0] = &w->run;
    s[1] = &w->window;
    return window == 1 ? 2 : 1;
}

/* ---------------------------------------------------------------- the heap of nodes by time */

static void heap_push(struct worker *w, double at, struct sim_node *n) {
    if (w->heap_n == w->heap_cap) {
        w->heap_cap = w->heap_cap ? w->heap_cap * 2 : 64;
        w->heap = xrealloc(w->heap, (size_t)w->heap_cap * sizeof *w->heap);
    }
    int i = w->heap_n++;
    while (i > 0 && w->heap[(i - 1) / 2].at > at) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = (struct due){at, n};
}

static struct due heap_pop(struct worker *w) {
    struct due top = w->heap[0], last = w->heap[--w->heap_n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= w->heap_n) break;
        if (c + 1 < w->heap_n && w->heap[c + 1].at < w->heap[c].at) c++;
        if (w->heap[c].at >= last.at) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->heap_n) w->heap[i] = last;
    return top;
}

static uint32_t job_step(const struct sim_job *j, double now) {
    double f = (now - j->started) / j->duration;
    return (uint32_t)(MAX_TOTAL_STEPS * (f < 0 ? 0 : f > 1 ? 1 : f));
}

/* When the node next has something to do that is not in flight: a registration or heartbeat, a
 * checkpoint or a job's end; INFINITY when nothing (its heartbeat's answer reschedules it). */
static double node_due(const struct sim_node *n) {
    double due = n->calling ? INFINITY : n->next_hb;
    if (!n->registered) return due;
    for (int k = 0; k < n->n_jobs; k++) {
        const struct sim_job *j = &n->jobs[k];
        if (j->reporting) continue;
        double t = j->checkpointed ? j->started + j->duration : j->started + j->duration / 2;
        if (t < j->retry_at) t = j->retry_at;
        if (t < due) due = t;
    }
    return due;
}

/* Puts n in the heap at its due time, unless it is there already at that time. */
static void schedule(struct worker *w, struct sim_node *n) {
    double due = node_due(n);
    if (due == n->queued_at) return;
    if (isinf(due)) {
        n->queued_at = -1;
        return;
    }
    n->queued_at = due;
    heap_push(w, due, n);
}

/* ---------------------------------------------------------------- calls */

static void call_ended(struct worker *w, struct sim_call *c, int rc, ProtobufCMessage *resp, double now);

/* Starts a call for c (freed when it ends); one that cannot start ends at once, failed. */
static void call_start(struct worker *w, struct sim_call *c, const char *path, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *desc) {
    c->sent = whet_now_mono();
    struct whet_err err;
    /* one attempt's budget: a retry would hide the latency this measures */
    if (rpc_start(w->queue, c->node->rpc, path, req, desc, CALL_TIMEOUT_MS, c, &err) == RPC_OK) {
        w->in_flight++;
        return;
    }
    if (w->run.failed[c->method] < 3) fprintf(stderr, "scale_fleet: %s failed: %s\n", method_names[c->method], err.msg);
    call_ended(w, c, RPC_INTERNAL, NULL, c->sent);
}

static struct sim_call *call_new(int method, struct sim_node *n) {
    struct sim_call *c = xcalloc(1, sizeof *c);
    c->method = method;
    c->node = n;
    return c;
}

static void drop_jobs(struct sim_node *n) {
    for (int i = 0; i < n->n_jobs; i++) free(n->jobs[i].id);
    n->n_jobs = 0;
}

static void node_register(struct worker *w, struct sim_node *n) {
    Whet__V1__Device devs[64], *pdevs[64];
    int gpus = g.gpus < 64 ? g.gpus : 64;
    for (int i = 0; i < gpus; i++) {
        whet__v1__device__init(&devs[i]);
        devs[i].type = "sim-H100";
        devs[i].memory_mib = 81920;
        devs[i].index = (uint32_t)i;
        pdevs[i] = &devs[i];
    }
    char dc[16];
    snprintf(dc, sizeof dc, "dc-%d", n->dc);
    Whet__V1__RegisterRequest req = WHET__V1__REGISTER_REQUEST__INIT;
    req.node_id = n->id;
    req.dc = dc;
    req.pool = dc;
    req.n_devices = (size_t)gpus;
    req.devices = pdevs;
    req.cpu_milli = 64000;
    req.memory_mib = 1024 * 1024;
    req.version = "scale-fleet";
    n->calling = 1;
    call_start(w, call_new(M_REGISTER, n), "/whet.v1.Scheduler/RegisterNode", &req.base,
               &whet__v1__register_response__descriptor);
}

static void register_ended(struct sim_node *n, const Whet__V1__RegisterResponse *resp, double now) {
    if (!resp) {
        n->next_hb = now + 1;
        return;
    }
    drop_jobs(n); /* the scheduler ends whatever a re-registered node ran */
    n->registered = 1;
    if (g.heartbeat_s == 0) {
        g.heartbeat_s = resp->heartbeat_ms / 1000.0;
        g.lease_s = resp->lease_ms / 1000.0;
    }
    n->last_answered = now;
    n->next_hb = now + g.heartbeat_s;
}

/* Reports job k's checkpoint (half-way) or its end, once at a time: the job stays the node's, and in its
 * heartbeats, until the answer (report_ended). */
static void report(struct worker *w, struct sim_node *n, int k, int finish, Whet__V1__FinishJobRequest__Outcome outcome,
                   double now) {
    struct sim_job *j = &n->jobs[k];
    if (j->reporting) return;
    j->reporting = 1;
    struct sim_call *c = call_new(finish ? M_FINISH : M_CHECKPOINT, n);
    c->job_id = xstrdup(j->id);
    c->attempt = j->attempt;
    uint32_t step = job_step(j, now);
    char prefix[160];
    if (!finish) {
        snprintf(prefix, sizeof prefix, "sim/%s/ckpt-%u/", j->id, step);
        Whet__V1__CheckpointReport req = WHET__V1__CHECKPOINT_REPORT__INIT;
        req.node_id = n->id;
        req.job_id = j->id;
        req.attempt = j->attempt;
        req.step = step;
        req.object_prefix = prefix;
        req.bytes = 1 << 20;
        req.metrics_json = "{}";
        call_start(w, c, "/whet.v1.Scheduler/ReportCheckpoint", &req.base,
                   &whet__v1__report_checkpoint_response__descriptor);
        return;
    }
    Whet__V1__Usage usage = WHET__V1__USAGE__INIT;
    usage.device_type = "sim-H100";
    usage.device_seconds = now - j->started;
    usage.trained_tokens = step * 1000ull;
    snprintf(prefix, sizeof prefix, "sim/%s/final/", j->id);
    c->succeeded = outcome == WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED;
    Whet__V1__FinishJobRequest req = WHET__V1__FINISH_JOB_REQUEST__INIT;
    req.node_id = n->id;
    req.job_id = j->id;
    req.attempt = j->attempt;
    req.outcome = outcome;
    req.usage = &usage;
    req.trained_tokens = usage.trained_tokens;
    req.final_object_prefix = c->succeeded ? prefix : "";
    call_start(w, c, "/whet.v1.Scheduler/FinishJob", &req.base, &whet__v1__finish_job_response__descriptor);
}

/* A report's answer: the job checkpointed, or ended (gone from its node); a failed report is made again after
 * a backoff of 0.5 s doubling to 8 s, with jitter, as an executor's rpc_call retries it (made again at once,
 * the failed reports of an overloaded scheduler came back as a storm that overloaded it further). */
static void report_ended(struct worker *w, const struct sim_call *c, int ok, double now) {
    struct sim_node *n = c->node;
    for (int k = 0; k < n->n_jobs; k++) {
        struct sim_job *j = &n->jobs[k];
        if (j->attempt != c->attempt || strcmp(j->id, c->job_id) != 0) continue;
        j->reporting = 0;
        if (!ok) {
            j->backoff = j->backoff > 0 ? fmin(2 * j->backoff, 8) : 0.5;
            j->retry_at = now + j->backoff * (0.5 + 0.5 * rand_r(&w->seed) / RAND_MAX);
        } else {
            j->backoff = j->retry_at = 0;
        }
        if (ok && c->method == M_CHECKPOINT) j->checkpointed = 1;
        if (ok && c->method == M_FINISH) {
            free(j->id);
            n->jobs[k] = n->jobs[--n->n_jobs];
        }
        break;
    }
    if (!ok || c->method != M_FINISH) return;
    struct stats *s[2];
    for (int i = 0, n_stats = stats_of(w, s); i < n_stats; i++)
        if (c->succeeded) s[i]->succeeded++;
        else s[i]->stopped++;
}

static void apply_command(struct worker *w, struct sim_node *n, const Whet__V1__Command *c, double now) {
    if (c->kind == WHET__V1__COMMAND__KIND__START) {
        if (n->n_jobs == n->cap_jobs) {
            n->cap_jobs = n->cap_jobs ? n->cap_jobs * 2 : 8;
            n->jobs = xrealloc(n->jobs, (size_t)n->cap_jobs * sizeof *n->jobs);
        }
        double u = (double)rand_r(&w->seed) / RAND_MAX;
        n->jobs[n->n_jobs++] = (struct sim_job){.id = xstrdup(c->job_id), .attempt = c->attempt, .started = now,
                                                .duration = g.run_min + u * (g.run_max - g.run_min)};
        struct stats *s[2];
        for (int i = 0, n_stats = stats_of(w, s); i < n_stats; i++) s[i]->started++;
        return;
    }
    if (c->kind != WHET__V1__COMMAND__KIND__STOP && c->kind != WHET__V1__COMMAND__KIND__CANCEL) return;
    for (int k = 0; k < n->n_jobs; k++)
        if (!strcmp(n->jobs[k].id, c->job_id) && n->jobs[k].attempt == c->attempt) {
            report(w, n, k, 1,
                   c->kind == WHET__V1__COMMAND__KIND__STOP ? WHET__V1__FINISH_JOB_REQUEST__OUTCOME__STOPPED
                                                            : WHET__V1__FINISH_JOB_REQUEST__OUTCOME__CANCELLED,
                   now);
            return;
        }
}

static void heartbeat(struct worker *w, struct sim_node *n, double now) {
    double lag = now - n->next_hb;
    struct stats *s[2];
    for (int i = 0, n_stats = stats_of(w, s); i < n_stats; i++) {
        if (lag > s[i]->max_lag) s[i]->max_lag = lag;
        s[i]->sum_lag += lag > 0 ? lag : 0;
        s[i]->sent++;
        if (lag > 0.1) s[i]->lagged++;
    }
    Whet__V1__JobProgress *progress = xcalloc((size_t)n->n_jobs + 1, sizeof *progress);
    Whet__V1__JobProgress **pp = xcalloc((size_t)n->n_jobs + 1, sizeof *pp);
    for (int k = 0; k < n->n_jobs; k++) {
        whet__v1__job_progress__init(&progress[k]);
        progress[k].job_id = n->jobs[k].id;
        progress[k].attempt = n->jobs[k].attempt;
        progress[k].step = job_step(&n->jobs[k], now);
        progress[k].total_steps = MAX_TOTAL_STEPS;
        progress[k].trained_tokens = progress[k].step * 1000ull;
        progress[k].state = "running";
        pp[k] = &progress[k];
    }
    Whet__V1__HeartbeatRequest req = WHET__V1__HEARTBEAT_REQUEST__INIT;
    req.node_id = n->id;
    req.n_jobs = (size_t)n->n_jobs;
    req.jobs = pp;
    /* The next one is due an interval after this one was due (after now when this one was very late). */
    n->next_hb = (lag > g.heartbeat_s ? now : n->next_hb) + g.heartbeat_s;
    n->calling = 1;
    call_start(w, call_new(M_HEARTBEAT, n), "/whet.v1.Scheduler/Heartbeat", &req.base,
               &whet__v1__heartbeat_response__descriptor);
    free(progress);
    free(pp);
}

static void heartbeat_ended(struct worker *w, const struct sim_call *c, const Whet__V1__HeartbeatResponse *resp,
                            double now) {
    struct sim_node *n = c->node;
    double latency = now - c->sent;
    long b = (long)(latency * 1e6 / LAT_BUCKET_US);
    struct stats *s[2];
    for (int i = 0, n_stats = stats_of(w, s); i < n_stats; i++) {
        if (!resp) {
            s[i]->hb_over_deadline++;
            continue;
        }
        s[i]->lat[b < LAT_BUCKETS ? b : LAT_BUCKETS - 1]++;
        if (latency * 1000 > CALL_TIMEOUT_MS) s[i]->hb_over_deadline++;
        if (latency > g.heartbeat_s) s[i]->hb_over_interval++;
        if (now - n->last_answered > s[i]->max_gap) s[i]->max_gap = now - n->last_answered;
    }
    if (!resp) return;
    n->last_answered = now;
    if (resp->reregister) {
        n->registered = 0;
        n->next_hb = now;
        return;
    }
    for (size_t k = 0; k < resp->n_commands; k++) apply_command(w, n, resp->commands[k], now);
}

/* A call's end, counted where it ends: the calls cancelled by the end of the run are not (nor their nodes). */
static void call_ended(struct worker *w, struct sim_call *c, int rc, ProtobufCMessage *resp, double now) {
    if (w->draining) {
        if (resp) protobuf_c_message_free_unpacked(resp, NULL);
        free(c->job_id);
        free(c);
        return;
    }
    struct stats *s[2];
    long second = rc != RPC_OK && c->method == M_HEARTBEAT ? (long)(time(NULL) - g.wall_start) : -1;
    for (int i = 0, n_stats = stats_of(w, s); i < n_stats; i++) {
        s[i]->calls[c->method]++;
        if (rc != RPC_OK) s[i]->failed[c->method]++;
        if (s[i]->hb_failed_per_s && second >= 0 && second < FAILED_SECONDS) s[i]->hb_failed_per_s[second]++;
    }
    switch (c->method) {
    case M_REGISTER:
        c->node->calling = 0;
        register_ended(c->node, (Whet__V1__RegisterResponse *)resp, now);
        break;
    case M_HEARTBEAT:
        c->node->calling = 0;
        heartbeat_ended(w, c, (Whet__V1__HeartbeatResponse *)resp, now);
        break;
    default: report_ended(w, c, rc == RPC_OK, now); break;
    }
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
    schedule(w, c->node);
    free(c->job_id);
    free(c);
}

/* Collects the calls that end within wait_ms (the first waited for, the rest taken as they are). */
static void collect(struct worker *w, int wait_ms) {
    void *tag;
    ProtobufCMessage *resp;
    struct whet_err err;
    int rc;
    while ((resp = NULL, rc = rpc_next(w->queue, wait_ms, &tag, &resp, &err)) != -1) {
        struct sim_call *c = tag;
        w->in_flight--;
        if (rc != RPC_OK && w->run.failed[c->method] < 3 && !w->draining)
            fprintf(stderr, "scale_fleet: %s failed: %s\n", method_names[c->method], err.msg);
        call_ended(w, c, rc, resp, whet_now_mono());
        wait_ms = 0;
    }
}

/* ---------------------------------------------------------------- the event loop */

static void node_step(struct worker *w, struct sim_node *n, double now) {
    if (!n->registered) {
        if (!n->calling) node_register(w, n);
        return;
    }
    /* The checkpoint comes first even when this node's turn came late, past the job's end. */
    for (int k = n->n_jobs - 1; k >= 0; k--) {
        struct sim_job *j = &n->jobs[k];
        if (now < j->retry_at) continue;
        if (!j->checkpointed && now >= j->started + j->duration / 2)
            report(w, n, k, 0, WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED, now);
        else if (j->checkpointed && now >= j->started + j->duration)
            report(w, n, k, 1, WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED, now);
    }
    if (!n->calling && now >= n->next_hb) heartbeat(w, n, now);
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    for (int i = 0; i < w->n_nodes; i++) schedule(w, &w->nodes[i]);
    while (!stopping) {
        double now = whet_now_mono();
        if (g.until > 0 && now >= g.until) break;
        while (w->heap_n && w->heap[0].at <= now) {
            struct due d = heap_pop(w);
            if (d.at != d.node->queued_at) continue; /* rescheduled since */
            d.node->queued_at = -1;
            node_step(w, d.node, now);
            schedule(w, d.node);
        }
        double wait = w->heap_n ? (w->heap[0].at - whet_now_mono()) * 1000 : IDLE_WAIT_MS;
        collect(w, wait < 0 ? 0 : wait > IDLE_WAIT_MS ? IDLE_WAIT_MS : (int)ceil(wait));
    }
    /* What is still in flight ends here, cancelled and not counted, so that every call's record is freed. */
    w->draining = 1;
    rpc_queue_cancel(w->queue);
    while (w->in_flight > 0) collect(w, IDLE_WAIT_MS);
    for (int i = 0; i < w->n_nodes; i++) drop_jobs(&w->nodes[i]);
    return NULL;
}

static double percentile(const uint32_t *hist, long total, double p) {
    if (total == 0) return 0;
    long want = (long)ceil(p * (double)total), seen = 0;
    for (long b = 0; b < LAT_BUCKETS; b++) {
        seen += hist[b];
        if (seen >= want) return (b + 1) * LAT_BUCKET_US / 1e3;
    }
    return LAT_BUCKETS * LAT_BUCKET_US / 1e3;
}

static void stats_add(struct stats *sum, const struct stats *s) {
    for (int m = 0; m < M_COUNT; m++) {
        sum->calls[m] += s->calls[m];
        sum->failed[m] += s->failed[m];
    }
    sum->hb_over_deadline += s->hb_over_deadline;
    sum->hb_over_interval += s->hb_over_interval;
    sum->started += s->started;
    sum->succeeded += s->succeeded;
    sum->stopped += s->stopped;
    sum->sent += s->sent;
    sum->lagged += s->lagged;
    sum->sum_lag += s->sum_lag;
    if (s->max_gap > sum->max_gap) sum->max_gap = s->max_gap;
    if (s->max_lag > sum->max_lag) sum->max_lag = s->max_lag;
    for (long b = 0; b < LAT_BUCKETS; b++) sum->lat[b] += s->lat[b];
    if (sum->hb_failed_per_s && s->hb_failed_per_s)
        for (long t = 0; t < FAILED_SECONDS; t++) sum->hb_failed_per_s[t] += s->hb_failed_per_s[t];
}

/* The figures of `seconds` (the JSON object's members, without its braces). */
static void stats_print(const struct stats *sum, double seconds) {
    long answered = sum->calls[M_HEARTBEAT] - sum->failed[M_HEARTBEAT];
    double max_lat = 0;
    for (long b = LAT_BUCKETS - 1; b >= 0; b--)
        if (sum->lat[b]) {
            max_lat = (b + 1) * LAT_BUCKET_US / 1e3;
            break;
        }
    printf("\"seconds\":%.1f,", seconds);
    for (int m = 0; m < M_COUNT; m++)
        printf("\"%s_calls\":%ld,\"%s_failed\":%ld,", method_names[m], sum->calls[m], method_names[m], sum->failed[m]);
    printf(
        "\"heartbeats_answered_per_s\":%.1f,\"heartbeat_p50_ms\":%.1f,\"heartbeat_p99_ms\":%.1f,"
        "\"heartbeat_max_ms\":%.1f,\"heartbeats_missed_deadline\":%ld,\"heartbeats_over_interval\":%ld,"
        "\"max_heartbeat_gap_s\":%.2f,\"sim_lagged_heartbeats\":%ld,\"sim_mean_lag_ms\":%.1f,\"sim_max_lag_ms\":%.0f,"
        "\"jobs_started\":%ld,\"jobs_succeeded\":%ld,\"jobs_stopped\":%ld",
        answered / seconds, percentile(sum->lat, answered, 0.5), percentile(sum->lat, answered, 0.99), max_lat,
        sum->hb_over_deadline, sum->hb_over_interval, sum->max_gap, sum->lagged,
        sum->sent ? sum->sum_lag * 1000 / (double)sum->sent : 0, sum->max_lag * 1000, sum->started, sum->succeeded,
        sum->stopped);
    if (!sum->hb_failed_per_s) return;
    printf(",\"heartbeats_failed_by_second\":{");
    const char *sep = "";
    for (long t = 0; t < FAILED_SECONDS; t++)
        if (sum->hb_failed_per_s[t]) {
            printf("%s\"%lld\":%u", sep, (long long)g.wall_start + t, sum->hb_failed_per_s[t]);
            sep = ",";
        }
    printf("}");
}

static void usage(FILE *out) {
    fprintf(out, "usage: scale_fleet --scheduler HOST:PORT --nodes N [--gpus G] [--threads T] [--dcs D]\n"
                 "                   [--connections C] [--run-s MIN:MAX] [--seconds S] [--seed K]\n"
                 "(see tests/bench/scale/fleet.c)\n");
}

int main(int argc, char **argv) {
    static const struct option opts[] = {{"scheduler", required_argument, 0, 's'},
                                         {"nodes", required_argument, 0, 'n'},
                                         {"gpus", required_argument, 0, 'g'},
                                         {"threads", required_argument, 0, 't'},
                                         {"dcs", required_argument, 0, 'd'},
                                         {"run-s", required_argument, 0, 'r'},
                                         {"seconds", required_argument, 0, 'S'},
                                         {"seed", required_argument, 0, 'k'},
                                         {"connections", required_argument, 0, 'c'},
                                         {"help", no_argument, 0, 'h'},
                                         {0}};
    const char *target = NULL;
    int n_nodes = 0, threads = 1, c;
    g.n_clients = 1;
    double seconds = 0;
    unsigned seed = 1;
    g.gpus = 8;
    g.dcs = 2;
    g.run_min = 5;
    g.run_max = 20;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': target = optarg; break;
        case 'n': n_nodes = atoi(optarg); break;
        case 'g': g.gpus = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'd': g.dcs = atoi(optarg); break;
        case 'r':
            if (sscanf(optarg, "%lf:%lf", &g.run_min, &g.run_max) != 2 || g.run_min <= 0 || g.run_max < g.run_min) {
                fprintf(stderr, "scale_fleet: --run-s takes MIN:MAX seconds, 0 < MIN <= MAX\n");
                return 2;
            }
            break;
        case 'S': seconds = atof(optarg); break;
        case 'k': seed = (unsigned)atoi(optarg); break;
        case 'c': g.n_clients = atoi(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    const char *token = getenv("WHET_EXECUTOR_TOKEN");
    if (!target || n_nodes <= 0 || threads <= 0 || g.n_clients <= 0 || g.gpus <= 0 || g.dcs <= 0 || !token) {
        usage(stderr);
        if (!token) fprintf(stderr, "scale_fleet: WHET_EXECUTOR_TOKEN is not set\n");
        return 2;
    }
    if (threads > n_nodes) threads = n_nodes;
    struct whet_err err;
    if (g.n_clients > n_nodes) g.n_clients = n_nodes;
    g.clients = xcalloc((size_t)g.n_clients, sizeof *g.clients);
    for (int i = 0; i < g.n_clients; i++)
        if (rpc_client_open(target, token, &g.clients[i], &err) < 0) {
            fprintf(stderr, "scale_fleet: %s\n", err.msg);
            return 1;
        }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct sigaction wa = {.sa_handler = on_window};
    sigaction(SIGUSR1, &wa, NULL);

    struct sim_node *nodes = xcalloc((size_t)n_nodes, sizeof *nodes);
    for (int i = 0; i < n_nodes; i++) {
        snprintf(nodes[i].id, sizeof nodes[i].id, "sim-%06d", i);
        nodes[i].dc = i % g.dcs;
        nodes[i].queued_at = -1;
        nodes[i].rpc = g.clients[i % g.n_clients];
    }
    struct worker *w = xcalloc((size_t)threads, sizeof *w);
    for (int t = 0; t < threads; t++) {
        w[t].nodes = nodes + (long)n_nodes * t / threads;
        w[t].n_nodes = (int)((long)n_nodes * (t + 1) / threads - (long)n_nodes * t / threads);
        w[t].seed = seed * 7919u + (unsigned)t;
        w[t].run.lat = xcalloc(LAT_BUCKETS, sizeof *w[t].run.lat);
        w[t].run.hb_failed_per_s = xcalloc(FAILED_SECONDS, sizeof *w[t].run.hb_failed_per_s);
        w[t].window.lat = xcalloc(LAT_BUCKETS, sizeof *w[t].window.lat);
        w[t].queue = rpc_queue_open();
    }
    /* The first node registers alone, until the scheduler answers: its answer gives every node the
     * heartbeat interval. */
    double start = whet_now_mono();
    while (!nodes[0].registered && !stopping) {
        if (whet_now_mono() - start > 30) {
            fprintf(stderr, "scale_fleet: the scheduler at %s did not answer RegisterNode within 30 s\n", target);
            return 1;
        }
        node_register(&w[0], &nodes[0]);
        while (w[0].in_flight) collect(&w[0], IDLE_WAIT_MS);
        if (!nodes[0].registered) usleep(200 * 1000);
    }
    start = whet_now_mono();
    g.wall_start = time(NULL);
    g.until = seconds > 0 ? start + seconds : 0;
    for (int i = 1; i < n_nodes; i++) nodes[i].next_hb = start + g.heartbeat_s * i / n_nodes;
    for (int t = 0; t < threads; t++)
        if (pthread_create(&w[t].thread, NULL, worker_main, &w[t]) != 0) {
            fprintf(stderr, "scale_fleet: cannot start thread %d\n", t);
            return 1;
        }
    struct stats run = {.lat = xcalloc(LAT_BUCKETS, sizeof *run.lat),
                        .hb_failed_per_s = xcalloc(FAILED_SECONDS, sizeof *run.hb_failed_per_s)},
                 win = {.lat = xcalloc(LAT_BUCKETS, sizeof *win.lat)};
    for (int t = 0; t < threads; t++) {
        pthread_join(w[t].thread, NULL);
        stats_add(&run, &w[t].run);
        stats_add(&win, &w[t].window);
        free(w[t].run.lat);
        free(w[t].run.hb_failed_per_s);
        free(w[t].window.lat);
        free(w[t].heap);
        rpc_queue_close(w[t].queue);
    }
    double end = whet_now_mono();
    printf("{\"nodes\":%d,\"gpus_per_node\":%d,\"threads\":%d,\"heartbeat_ms\":%.0f,\"lease_ms\":%.0f,", n_nodes,
           g.gpus, threads, g.heartbeat_s * 1000, g.lease_s * 1000);
    stats_print(&run, end - start);
    if (window) {
        printf(",\"window\":{");
        stats_print(&win, (window == 2 ? window_at[1] : end) - window_at[0]);
        printf("}");
    }
    printf("}\n");
    free(run.lat);
    free(run.hb_failed_per_s);
    free(win.lat);
    free(w);
    for (int i = 0; i < n_nodes; i++) free(nodes[i].jobs);
    free(nodes);
    for (int i = 0; i < g.n_clients; i++) rpc_client_close(g.clients[i]);
    free(g.clients);
    return 0;
}
