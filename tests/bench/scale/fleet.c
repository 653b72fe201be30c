/* fleet.c - a simulated fleet of executors for the scheduler load harness (tests/bench/scale/run.sh).
 *
 * Speaks the executor protocol (proto/whet.proto) through the same client as `whet executor`
 * (common/rpc) for N nodes at once: each registers, heartbeats at the interval the scheduler answers
 * with, reporting the progress of its jobs; a START makes a job that "trains" for a duration sampled
 * uniformly in [--run-s MIN:MAX], reports one checkpoint half-way and finishes SUCCEEDED with its usage;
 * STOP and CANCEL finish it at once as STOPPED or CANCELLED. No trainer, no object store: what is left
 * to measure is the scheduler and its database.
 *
 *   scale_fleet --scheduler HOST:PORT --nodes N [--gpus G] [--threads T] [--dcs D] [--run-s MIN:MAX]
 *               [--seconds S] [--seed K]
 *
 * WHET_EXECUTOR_TOKEN is the shared secret. Runs S seconds (default: until SIGINT/SIGTERM), then
 * prints one JSON object: calls made and failed per method, heartbeat latency p50/p99/max, heartbeats
 * answered late (past the executor's 3 s call deadline, or past the interval: the next one was due),
 * the longest gap between two answered heartbeats of one node, and how late the simulator itself sent
 * heartbeats (its own lag: when that is large, the figures measure this process, not the scheduler).
 *
 * Nodes are split over T threads, each making blocking calls on one shared channel; node i's first
 * call is spread over the first interval so that N nodes do not register in one burst. A job's
 * checkpoint and end are reported by T more threads (reporters, sharing one queue), as an executor
 * reports them from the job's own thread (executor/agent/job.c): a slow FinishJob does not hold up the
 * node's heartbeats.
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
#include <unistd.h>

#include "proto/whet.pb-c.h"
#include "rpc.h"

#define CALL_TIMEOUT_MS 3000  /* the executor's heartbeat deadline (executor/agent/agent.c) */
#define LAT_BUCKET_US 100     /* heartbeat latency histogram: 0.1 ms buckets ... */
#define LAT_BUCKETS 100001    /* ... up to 10 s */
#define MAX_TOTAL_STEPS 100

struct sim_job {
    char *id;
    uint32_t attempt;
    double started, duration;
    int checkpointed;
    int reporting; /* a report of it is with the reporters */
};

struct sim_node {
    char id[32];
    int dc;
    int registered;
    double next_hb, last_answered;
    int n_jobs, cap_jobs;
    struct sim_job *jobs;
};

enum { M_REGISTER, M_HEARTBEAT, M_CHECKPOINT, M_FINISH, M_COUNT };
static const char *method_names[M_COUNT] = {"register", "heartbeat", "checkpoint", "finish"};

struct stats {
    long calls[M_COUNT], failed[M_COUNT];
    long hb_over_deadline, hb_over_interval, started, succeeded, stopped;
    double max_gap, max_lag, sum_lag;
    long lagged; /* heartbeats sent more than 100 ms after they were due */
    uint32_t *lat;
};

struct report;

/* A thread of heartbeats (with nodes) or of reports (without): its own statistics, and the reports
 * done for its nodes, handed back by the reporters. */
struct worker {
    pthread_t thread;
    struct sim_node *nodes;
    int n_nodes;
    unsigned seed;
    struct stats run, window; /* read after the join */
    pthread_mutex_t lock;
    struct report *done;
};

/* A checkpoint or an end, queued by the node's worker for a reporter, and back with its answer. */
struct report {
    struct report *next;
    struct worker *owner;
    struct sim_node *node;
    char *job_id;
    uint32_t attempt, step;
    int finish; /* else a checkpoint */
    Whet__V1__FinishJobRequest__Outcome outcome;
    double device_seconds;
    int ok;
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t ready;
    struct report *head, **tail;
    int closed;
} reports = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, &reports.head, 0};

static struct {
    struct rpc_client *rpc;
    int gpus, dcs;
    double run_min, run_max, heartbeat_s, lease_s;
    double until;
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

static int call(struct worker *w, int m, const char *path, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp) {
    struct whet_err err;
    ProtobufCMessage *r = NULL;
    struct stats *s[2];
    int n_stats = stats_of(w, s);
    for (int i = 0; i < n_stats; i++) s[i]->calls[m]++;
    /* one attempt's budget: a retry would hide the latency this measures */
    int rc = rpc_call(g.rpc, path, req, desc, &r, CALL_TIMEOUT_MS, CALL_TIMEOUT_MS, &err);
    if (rc != RPC_OK) {
        for (int i = 0; i < n_stats; i++) s[i]->failed[m]++;
        if (w->run.failed[m] <= 3) fprintf(stderr, "scale_fleet: %s failed: %s\n", method_names[m], err.msg);
        if (r) protobuf_c_message_free_unpacked(r, NULL);
        return -1;
    }
    if (resp)
        *resp = r;
    else
        protobuf_c_message_free_unpacked(r, NULL);
    return 0;
}

static void drop_jobs(struct sim_node *n) {
    for (int i = 0; i < n->n_jobs; i++) free(n->jobs[i].id);
    n->n_jobs = 0;
}

static void node_register(struct worker *w, struct sim_node *n, double now) {
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
    Whet__V1__RegisterResponse *resp = NULL;
    if (call(w, M_REGISTER, "/whet.v1.Scheduler/RegisterNode", &req.base, &whet__v1__register_response__descriptor,
             (ProtobufCMessage **)&resp) < 0) {
        n->next_hb = now + 1;
        return;
    }
    drop_jobs(n); /* the scheduler ends whatever a re-registered node ran */
    n->registered = 1;
    if (g.heartbeat_s == 0) {
        g.heartbeat_s = resp->heartbeat_ms / 1000.0;
        g.lease_s = resp->lease_ms / 1000.0;
    }
    n->last_answered = whet_now_mono();
    n->next_hb = n->last_answered + g.heartbeat_s;
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

static uint32_t job_step(const struct sim_job *j, double now) {
    double f = (now - j->started) / j->duration;
    return (uint32_t)(MAX_TOTAL_STEPS * (f < 0 ? 0 : f > 1 ? 1 : f));
}

/* Hands job k's end (or its checkpoint) to the reporters, once: the job stays the node's, and in its
 * heartbeats, until the report is back (reports_done). */
static void report(struct worker *w, struct sim_node *n, int k, int finish, Whet__V1__FinishJobRequest__Outcome outcome,
                   double now) {
    struct sim_job *j = &n->jobs[k];
    if (j->reporting) return;
    j->reporting = 1;
    struct report *r = xcalloc(1, sizeof *r);
    *r = (struct report){.owner = w,
                         .node = n,
                         .job_id = xstrdup(j->id),
                         .attempt = j->attempt,
                         .step = job_step(j, now),
                         .finish = finish,
                         .outcome = outcome,
                         .device_seconds = now - j->started};
    pthread_mutex_lock(&reports.lock);
    *reports.tail = r;
    reports.tail = &r->next;
    pthread_cond_signal(&reports.ready);
    pthread_mutex_unlock(&reports.lock);
}

/* A reporter's call for r; r->ok when it was answered. */
static void report_call(struct worker *reporter, struct report *r) {
    char prefix[160];
    if (!r->finish) {
        snprintf(prefix, sizeof prefix, "sim/%s/ckpt-%u/", r->job_id, r->step);
        Whet__V1__CheckpointReport req = WHET__V1__CHECKPOINT_REPORT__INIT;
        req.node_id = r->node->id;
        req.job_id = r->job_id;
        req.attempt = r->attempt;
        req.step = r->step;
        req.object_prefix = prefix;
        req.bytes = 1 << 20;
        req.metrics_json = "{}";
        r->ok = call(reporter, M_CHECKPOINT, "/whet.v1.Scheduler/ReportCheckpoint", &req.base,
                     &whet__v1__report_checkpoint_response__descriptor, NULL) == 0;
        return;
    }
    Whet__V1__Usage usage = WHET__V1__USAGE__INIT;
    usage.device_type = "sim-H100";
    usage.device_seconds = r->device_seconds;
    usage.trained_tokens = r->step * 1000ull;
    snprintf(prefix, sizeof prefix, "sim/%s/final/", r->job_id);
    int succeeded = r->outcome == WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED;
    Whet__V1__FinishJobRequest req = WHET__V1__FINISH_JOB_REQUEST__INIT;
    req.node_id = r->node->id;
    req.job_id = r->job_id;
    req.attempt = r->attempt;
    req.outcome = r->outcome;
    req.usage = &usage;
    req.trained_tokens = usage.trained_tokens;
    req.final_object_prefix = succeeded ? prefix : "";
    r->ok = call(reporter, M_FINISH, "/whet.v1.Scheduler/FinishJob", &req.base,
                 &whet__v1__finish_job_response__descriptor, NULL) == 0;
    if (!r->ok) return;
    struct stats *s[2];
    for (int i = 0, n_stats = stats_of(reporter, s); i < n_stats; i++)
        if (succeeded) s[i]->succeeded++;
        else s[i]->stopped++;
}

static void reports_free(struct report *r) {
    while (r) {
        struct report *next = r->next;
        free(r->job_id);
        free(r);
        r = next;
    }
}

static void *reporter_main(void *arg) {
    struct worker *reporter = arg;
    for (;;) {
        pthread_mutex_lock(&reports.lock);
        while (!reports.head && !reports.closed) pthread_cond_wait(&reports.ready, &reports.lock);
        struct report *r = reports.closed ? NULL : reports.head;
        if (r && !(reports.head = r->next)) reports.tail = &reports.head;
        pthread_mutex_unlock(&reports.lock);
        if (!r) return NULL; /* the run is over: what is still queued is freed by main */
        report_call(reporter, r);
        pthread_mutex_lock(&r->owner->lock);
        r->next = r->owner->done;
        r->owner->done = r;
        pthread_mutex_unlock(&r->owner->lock);
    }
}

/* The reports back for w's nodes: a job checkpointed, a job ended (gone from its node), or a failed
 * report, made again at the job's next event (as an executor retries it). */
static void reports_done(struct worker *w) {
    pthread_mutex_lock(&w->lock);
    struct report *r = w->done;
    w->done = NULL;
    pthread_mutex_unlock(&w->lock);
    while (r) {
        struct report *next = r->next;
        struct sim_node *n = r->node;
        for (int k = 0; k < n->n_jobs; k++) {
            struct sim_job *j = &n->jobs[k];
            if (j->attempt != r->attempt || strcmp(j->id, r->job_id) != 0) continue;
            j->reporting = 0;
            if (r->ok && !r->finish) j->checkpointed = 1;
            if (r->ok && r->finish) {
                free(j->id);
                n->jobs[k] = n->jobs[--n->n_jobs];
            }
            break;
        }
        r->next = NULL;
        reports_free(r);
        r = next;
    }
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
    int n_stats = stats_of(w, s);
    for (int i = 0; i < n_stats; i++) {
        if (lag > s[i]->max_lag) s[i]->max_lag = lag;
        s[i]->sum_lag += lag > 0 ? lag : 0;
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
    Whet__V1__HeartbeatResponse *resp = NULL;
    double t0 = whet_now_mono();
    int rc = call(w, M_HEARTBEAT, "/whet.v1.Scheduler/Heartbeat", &req.base, &whet__v1__heartbeat_response__descriptor,
                  (ProtobufCMessage **)&resp);
    double t1 = whet_now_mono(), latency = t1 - t0;
    free(progress);
    free(pp);
    /* The next one is due an interval after this one was due (after now when this one was very late). */
    n->next_hb = (lag > g.heartbeat_s ? now : n->next_hb) + g.heartbeat_s;
    long b = (long)(latency * 1e6 / LAT_BUCKET_US);
    for (int i = 0; i < n_stats; i++) {
        if (rc < 0) {
            s[i]->hb_over_deadline++;
            continue;
        }
        s[i]->lat[b < LAT_BUCKETS ? b : LAT_BUCKETS - 1]++;
        if (latency * 1000 > CALL_TIMEOUT_MS) s[i]->hb_over_deadline++;
        if (latency > g.heartbeat_s) s[i]->hb_over_interval++;
        if (t1 - n->last_answered > s[i]->max_gap) s[i]->max_gap = t1 - n->last_answered;
    }
    if (rc < 0) return;
    n->last_answered = t1;
    if (resp->reregister) {
        n->registered = 0;
        n->next_hb = t1;
    } else {
        for (size_t k = 0; k < resp->n_commands; k++) apply_command(w, n, resp->commands[k], t1);
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

/* When the node next has something to do: a heartbeat, a checkpoint or a job's end. */
static double node_due(const struct sim_node *n) {
    double due = n->next_hb;
    if (!n->registered) return due;
    for (int k = 0; k < n->n_jobs; k++) {
        const struct sim_job *j = &n->jobs[k];
        if (j->reporting) continue;
        double t = j->checkpointed ? j->started + j->duration : j->started + j->duration / 2;
        if (t < due) due = t;
    }
    return due;
}

static void node_step(struct worker *w, struct sim_node *n, double now) {
    if (!n->registered) {
        node_register(w, n, now);
        return;
    }
    /* The checkpoint comes first even when this node's turn came late, past the job's end. */
    for (int k = n->n_jobs - 1; k >= 0; k--) {
        struct sim_job *j = &n->jobs[k];
        if (!j->checkpointed && now >= j->started + j->duration / 2)
            report(w, n, k, 0, WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED, now);
        else if (j->checkpointed && now >= j->started + j->duration)
            report(w, n, k, 1, WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED, now);
    }
    if (now >= n->next_hb) heartbeat(w, n, now);
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    while (!stopping) {
        reports_done(w);
        double now = whet_now_mono();
        if (g.until > 0 && now >= g.until) break;
        /* Up to half a second asleep with nothing due: the reporters' answers wait that long at most (a job
         * reported ended stays in its node's heartbeats meanwhile, which the scheduler drops as stale). A
         * wake every 50 ms, 20 a second for each of 2,048 threads at 10k nodes, was most of this
         * process's CPU with an idle fleet. */
        int next = -1;
        double due = now + 0.5;
        for (int i = 0; i < w->n_nodes; i++) {
            double d = node_due(&w->nodes[i]);
            if (d < due) {
                due = d;
                next = i;
            }
        }
        if (due > now) {
            usleep((useconds_t)((due - now) * 1e6));
            continue;
        }
        if (next >= 0) node_step(w, &w->nodes[next], now);
    }
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
    sum->lagged += s->lagged;
    sum->sum_lag += s->sum_lag;
    if (s->max_gap > sum->max_gap) sum->max_gap = s->max_gap;
    if (s->max_lag > sum->max_lag) sum->max_lag = s->max_lag;
    for (long b = 0; b < LAT_BUCKETS; b++) sum->lat[b] += s->lat[b];
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
        sum->calls[M_HEARTBEAT] ? sum->sum_lag * 1000 / (double)sum->calls[M_HEARTBEAT] : 0, sum->max_lag * 1000,
        sum->started, sum->succeeded, sum->stopped);
}

static void usage(FILE *out) {
    fprintf(out, "usage: scale_fleet --scheduler HOST:PORT --nodes N [--gpus G] [--threads T] [--dcs D]\n"
                 "                   [--run-s MIN:MAX] [--seconds S] [--seed K]\n"
                 "(see tests/bench/scale/fleet.c)\n");
}

int main(int argc, char **argv) {
    static const struct option opts[] = {
        {"scheduler", required_argument, 0, 's'}, {"nodes", required_argument, 0, 'n'},
        {"gpus", required_argument, 0, 'g'},      {"threads", required_argument, 0, 't'},
        {"dcs", required_argument, 0, 'd'},       {"run-s", required_argument, 0, 'r'},
        {"seconds", required_argument, 0, 'S'},   {"seed", required_argument, 0, 'k'},
        {"help", no_argument, 0, 'h'},            {0}};
    const char *target = NULL;
    int n_nodes = 0, threads = 16, c;
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
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    const char *token = getenv("WHET_EXECUTOR_TOKEN");
    if (!target || n_nodes <= 0 || threads <= 0 || g.gpus <= 0 || g.dcs <= 0 || !token) {
        usage(stderr);
        if (!token) fprintf(stderr, "scale_fleet: WHET_EXECUTOR_TOKEN is not set\n");
        return 2;
    }
    if (threads > n_nodes) threads = n_nodes;
    struct whet_err err;
    if (rpc_client_open(target, token, &g.rpc, &err) < 0) {
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
    }
    /* threads heartbeat workers, then as many reporters */
    struct worker *w = xcalloc((size_t)threads * 2, sizeof *w);
    for (int t = 0; t < threads * 2; t++) {
        if (t < threads) {
            w[t].nodes = nodes + (long)n_nodes * t / threads;
            w[t].n_nodes = (int)((long)n_nodes * (t + 1) / threads - (long)n_nodes * t / threads);
        }
        w[t].seed = seed * 7919u + (unsigned)t;
        w[t].run.lat = xcalloc(LAT_BUCKETS, sizeof *w[t].run.lat);
        w[t].window.lat = xcalloc(LAT_BUCKETS, sizeof *w[t].window.lat);
        pthread_mutex_init(&w[t].lock, NULL);
    }
    /* The first node registers alone, until the scheduler answers: its answer gives every node the
     * heartbeat interval. */
    double start = whet_now_mono();
    while (!nodes[0].registered && !stopping) {
        if (whet_now_mono() - start > 30) {
            fprintf(stderr, "scale_fleet: the scheduler at %s did not answer RegisterNode within 30 s\n", target);
            return 1;
        }
        node_register(&w[0], &nodes[0], whet_now_mono());
        if (!nodes[0].registered) usleep(200 * 1000);
    }
    start = whet_now_mono();
    g.until = seconds > 0 ? start + seconds : 0;
    for (int i = 1; i < n_nodes; i++) nodes[i].next_hb = start + g.heartbeat_s * i / n_nodes;
    for (int t = 0; t < threads * 2; t++)
        if (pthread_create(&w[t].thread, NULL, t < threads ? worker_main : reporter_main, &w[t]) != 0) {
            fprintf(stderr, "scale_fleet: cannot start thread %d\n", t);
            return 1;
        }
    struct stats run = {.lat = xcalloc(LAT_BUCKETS, sizeof *run.lat)},
                 win = {.lat = xcalloc(LAT_BUCKETS, sizeof *win.lat)};
    for (int t = 0; t < threads * 2; t++) {
        if (t == threads) { /* the workers are done: the reporters stop */
            pthread_mutex_lock(&reports.lock);
            reports.closed = 1;
            pthread_cond_broadcast(&reports.ready);
            pthread_mutex_unlock(&reports.lock);
        }
        pthread_join(w[t].thread, NULL);
        stats_add(&run, &w[t].run);
        stats_add(&win, &w[t].window);
        free(w[t].run.lat);
        free(w[t].window.lat);
        pthread_mutex_destroy(&w[t].lock);
    }
    for (int t = 0; t < threads; t++) reports_free(w[t].done);
    reports_free(reports.head);
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
    free(win.lat);
    free(w);
    for (int i = 0; i < n_nodes; i++) free(nodes[i].jobs);
    free(nodes);
    rpc_client_close(g.rpc);
    return 0;
}
