/* metrics.c - the executor's Prometheus metrics, served at GET /metrics on WHET_EXECUTOR_METRICS
 * (`whet executor --metrics HOST:PORT`; off when unset) by common/metrics_http: whether it is
 * registered with the scheduler, the jobs it runs, failed heartbeats, checkpoints uploaded, and the
 * object-store operations that failed, by what they were for (fetching a job's inputs, uploading a
 * checkpoint, uploading the final model): the executors move most of the object store's bytes, so
 * their failures are the ones to alert on. Also the model cache's size, bound and evictions (a cache
 * evicting often is too small: every eviction is a model fetched again). Job threads and the main loop
 * update atomics (relaxed: statistics); the server's thread reads them (the cache's through
 * dir_cache_get_stats). */
#include <stdatomic.h>

#include "agent_internal.h"
#include "metrics_http.h"

static const char *const store_ops[] = {"fetch", "checkpoint_upload", "final_upload"};

static struct {
    atomic_int registered;
    atomic_long jobs_running;
    atomic_ulong heartbeat_failures, checkpoints_uploaded;
    atomic_ulong store_failures[WHET_ARRAY_LEN(store_ops)];
} m;

static struct metrics_http *server;
static struct dir_cache *model_cache;

void agent_metrics_model_cache(struct dir_cache *models) { model_cache = models; }

void agent_metrics_registered(int registered) {
    atomic_store_explicit(&m.registered, registered, memory_order_relaxed);
}
void agent_metrics_jobs(int running) { atomic_store_explicit(&m.jobs_running, running, memory_order_relaxed); }
void agent_metrics_heartbeat_failed(void) { atomic_fetch_add_explicit(&m.heartbeat_failures, 1, memory_order_relaxed); }
void agent_metrics_checkpoint_uploaded(void) {
    atomic_fetch_add_explicit(&m.checkpoints_uploaded, 1, memory_order_relaxed);
}
void agent_metrics_store_failed(enum agent_store_op op) {
    atomic_fetch_add_explicit(&m.store_failures[op], 1, memory_order_relaxed);
}

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

static void render(struct whet_buf *t) {
    metrics_http_sample(t, "whet_executor_registered", "gauge", "1 while the scheduler knows this executor, else 0.",
                        (double)LOAD(m.registered));
    metrics_http_sample(t, "whet_executor_jobs_running", "gauge", "Jobs this executor runs.",
                        (double)LOAD(m.jobs_running));
    metrics_http_sample(t, "whet_executor_heartbeat_failures_total", "counter",
                        "Heartbeats the scheduler did not answer.", (double)LOAD(m.heartbeat_failures));
    metrics_http_sample(t, "whet_executor_checkpoints_uploaded_total", "counter", "Checkpoints uploaded and reported.",
                        (double)LOAD(m.checkpoints_uploaded));
    metrics_http_family(t, "whet_executor_object_store_failures_total", "counter",
                        "Object-store operations that failed, by what they were for.");
    for (size_t i = 0; i < WHET_ARRAY_LEN(store_ops); i++)
        whet_buf_printf(t, "whet_executor_object_store_failures_total{op=\"%s\"} %lu\n", store_ops[i],
                        LOAD(m.store_failures[i]));
    if (!model_cache) return;
    struct dir_cache_stats s;
    dir_cache_get_stats(model_cache, &s);
    metrics_http_sample(t, "whet_executor_model_cache_bytes", "gauge",
                        "Bytes of the node's model cache (base and judge models), as its last prune found them.",
                        (double)s.bytes);
    metrics_http_sample(t, "whet_executor_model_cache_max_bytes", "gauge",
                        "The model cache's bound (0: none); it exceeds it only for models in use or the latest.",
                        (double)s.max_bytes);
    metrics_http_sample(t, "whet_executor_model_cache_evictions_total", "counter",
                        "Models removed from the cache, least recently used first, to keep it within its bound.",
                        (double)s.evictions);
}

int agent_metrics_start(const char *addr, struct whet_err *err) {
    return (server = metrics_http_start(addr, render, err)) ? 0 : -1;
}

void agent_metrics_stop(void) {
    metrics_http_stop(server);
    server = NULL;
}
