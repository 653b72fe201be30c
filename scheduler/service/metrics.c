/* metrics.c - the scheduler's Prometheus metrics, served at GET /metrics on WHET_SCHEDULER_METRICS
 * (`whet scheduler --metrics HOST:PORT`; off when unset) by common/metrics_http: whether this process
 * leads, the cycles (count, failures, a duration histogram, when the last one ended), what the last
 * cycle's snapshot held (ready nodes, running and queued jobs, how long the oldest queued job has
 * waited), the nodes declared lost with the jobs they sent back to the queue, whether a mass
 * silence holds those back, the heartbeats written with the statements that wrote them, how long the
 * heartbeats' handlers took (a histogram: the time from the handler's start to its answer, without what the
 * call waited for a free handler thread), and the checkpoints the
 * retention deleted with the removals from the object store that failed, the ended attempts' objects the
 * garbage collection removed with its failed removals, and the maintenance passes that failed. A standby serves them
 * too, with whet_scheduler_leader 0, so "no leader" is max() == 0 over the replicas.
 *
 * The cycle updates atomics (relaxed: statistics); the server's thread reads them. */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "metrics_http.h"
#include "rpc.h"
#include "service_internal.h"

/* 0.75 and 0.9 s: the goal is a cycle under 1 s, and a p99 interpolated inside 0.5-1 s read 0.99 s whatever the
 * cycles took (tests/bench/scale/run.sh). */
static const double cycle_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1, 2.5, 5, 10};
static const double heartbeat_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
#define NBUCKETS_MAX 13
_Static_assert(WHET_ARRAY_LEN(cycle_bounds) <= NBUCKETS_MAX && WHET_ARRAY_LEN(heartbeat_bounds) <= NBUCKETS_MAX,
               "a histogram has more bounds than struct histogram holds");

/* A histogram's counts, above its bounds' array; count and sum of what it observed. */
struct histogram {
    const double *bounds;
    int n;
    atomic_ulong buckets[NBUCKETS_MAX], count, sum_us;
};

static void histogram_observe(struct histogram *h, double seconds) {
    int b = 0;
    while (b < h->n && seconds > h->bounds[b]) b++;
    if (b < h->n) atomic_fetch_add_explicit(&h->buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, (unsigned long)(seconds * 1e6), memory_order_relaxed);
}

/* The maintenance thread's passes (maintenance.c), as the label of their failures. */
static const char *const passes[] = {"partitions", "throughput", "checkpoint_retention", "attempt_gc"};
#define NPASSES ((int)WHET_ARRAY_LEN(passes))

static struct {
    atomic_int leader;
    atomic_ulong cycle_failures;
    struct histogram cycle, heartbeat;
    atomic_ulong last_cycle_ms; /* Unix time */
    atomic_long nodes_ready, jobs_running, jobs_queued, oldest_queued_ms;
    atomic_ulong nodes_lost, jobs_requeued;
    atomic_int mass_silence;
    atomic_ulong heartbeats, heartbeat_statements, heartbeats_quiet;
    atomic_ulong checkpoints_deleted, checkpoint_purge_failures;
    atomic_ulong attempt_objects_removed, attempt_gc_failures, maintenance_failures[NPASSES];
} m = {.cycle = {cycle_bounds, (int)WHET_ARRAY_LEN(cycle_bounds)},
       .heartbeat = {heartbeat_bounds, (int)WHET_ARRAY_LEN(heartbeat_bounds)}};

static struct metrics_http *server;

void scheduler_metrics_leader(int leading) { atomic_store_explicit(&m.leader, leading, memory_order_relaxed); }

void scheduler_metrics_cycle(double seconds, int ok) {
    if (!ok) {
        atomic_fetch_add_explicit(&m.cycle_failures, 1, memory_order_relaxed);
        return;
    }
    histogram_observe(&m.cycle, seconds);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    atomic_store_explicit(&m.last_cycle_ms, (unsigned long)now.tv_sec * 1000 + (unsigned long)now.tv_nsec / 1000000,
                          memory_order_relaxed);
}

void scheduler_metrics_snapshot(int nodes_ready, int jobs_running, int jobs_queued, double oldest_queued_s) {
    atomic_store_explicit(&m.nodes_ready, nodes_ready, memory_order_relaxed);
    atomic_store_explicit(&m.jobs_running, jobs_running, memory_order_relaxed);
    atomic_store_explicit(&m.jobs_queued, jobs_queued, memory_order_relaxed);
    atomic_store_explicit(&m.oldest_queued_ms, (long)(oldest_queued_s * 1000), memory_order_relaxed);
}

void scheduler_metrics_lost(int nodes, int jobs) {
    atomic_fetch_add_explicit(&m.nodes_lost, (unsigned long)nodes, memory_order_relaxed);
    atomic_fetch_add_explicit(&m.jobs_requeued, (unsigned long)jobs, memory_order_relaxed);
}

void scheduler_metrics_silence(int mass_silence) {
    atomic_store_explicit(&m.mass_silence, mass_silence, memory_order_relaxed);
}

void scheduler_metrics_heartbeats(int n) {
    atomic_fetch_add_explicit(&m.heartbeats, (unsigned long)n, memory_order_relaxed);
    atomic_fetch_add_explicit(&m.heartbeat_statements, 1, memory_order_relaxed);
}

void scheduler_metrics_heartbeat_quiet(void) {
    atomic_fetch_add_explicit(&m.heartbeats_quiet, 1, memory_order_relaxed);
}

void scheduler_metrics_heartbeat_handled(double seconds) { histogram_observe(&m.heartbeat, seconds); }

void scheduler_metrics_checkpoints_deleted(int n) {
    atomic_fetch_add_explicit(&m.checkpoints_deleted, (unsigned long)n, memory_order_relaxed);
}

void scheduler_metrics_checkpoint_purge_failed(void) {
    atomic_fetch_add_explicit(&m.checkpoint_purge_failures, 1, memory_order_relaxed);
}

void scheduler_metrics_maintenance_failed(const char *pass) {
    for (int i = 0; i < NPASSES; i++)
        if (!strcmp(passes[i], pass)) atomic_fetch_add_explicit(&m.maintenance_failures[i], 1, memory_order_relaxed);
}

void scheduler_metrics_attempt_objects_removed(int n) {
    atomic_fetch_add_explicit(&m.attempt_objects_removed, (unsigned long)n, memory_order_relaxed);
}

void scheduler_metrics_attempt_gc_failed(void) {
    atomic_fetch_add_explicit(&m.attempt_gc_failures, 1, memory_order_relaxed);
}

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

static void histogram_render(struct whet_buf *t, const char *name, const char *help, struct histogram *h) {
    unsigned long buckets[NBUCKETS_MAX];
    for (int b = 0; b < h->n; b++) buckets[b] = LOAD(h->buckets[b]);
    metrics_http_histogram(t, name, help, h->bounds, h->n, buckets, LOAD(h->count), (double)LOAD(h->sum_us) / 1e6);
}

/* The Prometheus text exposition (on the server's thread). */
static void render(struct whet_buf *t) {
    metrics_http_sample(t, "whet_scheduler_leader", "gauge",
                        "1 while this scheduler leads (holds the advisory lock), else 0.", (double)LOAD(m.leader));
    metrics_http_sample(t, "whet_scheduler_cycle_failures_total", "counter",
                        "Cycles that failed (the database, mostly).", (double)LOAD(m.cycle_failures));
    histogram_render(t, "whet_scheduler_cycle_duration_seconds", "Time one successful cycle took.", &m.cycle);
    metrics_http_sample(t, "whet_scheduler_last_cycle_timestamp_seconds", "gauge",
                        "Unix time the last successful cycle ended.", (double)LOAD(m.last_cycle_ms) / 1e3);
    metrics_http_sample(t, "whet_scheduler_nodes_ready", "gauge", "Nodes ready to take jobs, in the last cycle.",
                        (double)LOAD(m.nodes_ready));
    metrics_http_sample(t, "whet_scheduler_jobs_running", "gauge", "Jobs running on a node, in the last cycle.",
                        (double)LOAD(m.jobs_running));
    metrics_http_sample(t, "whet_scheduler_jobs_queued", "gauge", "Jobs waiting to be placed, in the last cycle.",
                        (double)LOAD(m.jobs_queued));
    metrics_http_sample(t, "whet_scheduler_oldest_queued_job_seconds", "gauge",
                        "How long the oldest queued job has waited since it was created, in the last cycle (0: none).",
                        (double)LOAD(m.oldest_queued_ms) / 1e3);
    metrics_http_sample(t, "whet_scheduler_nodes_lost_total", "counter",
                        "Nodes declared lost (silent past their lease).", (double)LOAD(m.nodes_lost));
    metrics_http_sample(t, "whet_scheduler_jobs_requeued_total", "counter",
                        "Running jobs sent back to the queue by a lost node.", (double)LOAD(m.jobs_requeued));
    metrics_http_sample(t, "whet_scheduler_mass_silence", "gauge",
                        "1 while most nodes of every data center are past their lease at once (no node is declared "
                        "lost meanwhile: leases.c), else 0.",
                        (double)LOAD(m.mass_silence));
    metrics_http_sample(t, "whet_scheduler_heartbeats_total", "counter", "Heartbeats written (heartbeats.c).",
                        (double)LOAD(m.heartbeats));
    metrics_http_sample(t, "whet_scheduler_heartbeat_statements_total", "counter",
                        "Statements that wrote them: heartbeats arriving together share one.",
                        (double)LOAD(m.heartbeat_statements));
    metrics_http_sample(t, "whet_scheduler_heartbeats_quiet_total", "counter",
                        "Heartbeats answered without the database: nothing to write or hand out (heartbeat_quiet.c).",
                        (double)LOAD(m.heartbeats_quiet));
    histogram_render(t, "whet_scheduler_heartbeat_duration_seconds",
                     "Time a heartbeat's handler took, from its start to its answer (not the wait for a free "
                     "handler thread before it).",
                     &m.heartbeat);
    metrics_http_sample(t, "whet_scheduler_rpc_calls_expired_total", "counter",
                        "Executor calls answered DEADLINE_EXCEEDED without running: they waited for a free handler "
                        "thread, or a heartbeat for its statement, past their deadline (the scheduler is overloaded; "
                        "the executor retries).",
                        (double)rpc_server_calls_expired());
    metrics_http_sample(t, "whet_scheduler_checkpoints_deleted_total", "counter",
                        "Checkpoints the retention settings let go (checkpoint_retention.c).",
                        (double)LOAD(m.checkpoints_deleted));
    metrics_http_sample(t, "whet_scheduler_checkpoint_purge_failures_total", "counter",
                        "Removals of a deleted checkpoint's files from the object store that failed (tried again).",
                        (double)LOAD(m.checkpoint_purge_failures));
    metrics_http_sample(
        t, "whet_scheduler_attempt_objects_removed_total", "counter",
        "Objects of ended attempts that nothing references, removed from the object store (attempt_gc.c).",
        (double)LOAD(m.attempt_objects_removed));
    metrics_http_sample(t, "whet_scheduler_attempt_gc_failures_total", "counter",
                        "Cleanings of an ended attempt's prefix in the object store that failed (tried again).",
                        (double)LOAD(m.attempt_gc_failures));
    metrics_http_family(t, "whet_scheduler_maintenance_failures_total", "counter",
                        "Passes of the leader's maintenance thread that failed, by pass (maintenance.c).");
    for (int i = 0; i < NPASSES; i++)
        whet_buf_printf(t, "whet_scheduler_maintenance_failures_total{pass=\"%s\"} %lu\n", passes[i],
                        LOAD(m.maintenance_failures[i]));
}

int scheduler_metrics_start(const char *addr, struct whet_err *err) {
    return (server = metrics_http_start(addr, render, err)) ? 0 : -1;
}

void scheduler_metrics_stop(void) {
    metrics_http_stop(server);
    server = NULL;
}
