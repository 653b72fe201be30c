/* service_internal.h - what the scheduler service's files share. */
#ifndef WHET_SCHEDULER_SERVICE_INTERNAL_H
#define WHET_SCHEDULER_SERVICE_INTERNAL_H

#include <libpq-fe.h>

#include "rpc.h"
#include "scheduler.h"

struct scheduler {
    const struct scheduler_options *opts;
};

/* The gRPC methods the leader serves (handlers.c). */
extern const struct rpc_method scheduler_methods[];
extern const int scheduler_n_methods;

/* One scheduling cycle on the leader's connection (cycle.c): leases, pause/cancel commands, sizing
 * of the queued jobs (scheduler/placement/sizing.h), placement, then the public state of every job
 * (wait_reason, queue_position, estimated_finish) in one transaction. Returns 0, or 1 when it left
 * decisions to the next cycle (more to place than its time allows: run the next one at once), or -1
 * with err when the database failed. */
int scheduler_cycle(struct scheduler *s, PGconn *conn, struct whet_err *err);

/* The START manifest of a job's new attempt (manifest.c): the trainer config and where the executor
 * finds the base model, the data and the checkpoint to resume from. Returns a malloc'd JSON string,
 * or NULL with err. */
char *scheduler_manifest(PGconn *conn, const struct scheduler_options *opts, const char *job_id, int attempt,
                         int devices, struct whet_err *err);
/* A stored START manifest as it is handed to the executor (manifest.c): with encryption at rest on
 * ($WHET_DATA_KEY_FILE), plus the tenant's unwrapped data key ("data_key": {"id", "key"}), or the reason
 * it is unavailable ("data_key_error"), which fails the attempt. The key is added only here, on the way
 * out, so node_commands never holds it. Returns a malloc'd string. */
char *scheduler_manifest_deliver(PGconn *conn, const char *manifest);

/* The scheduler's Prometheus metrics (metrics.c): a thread serving GET /metrics on `addr` (start
 * returns -1 with err when it cannot listen; stop joins it), and what the loop and the cycle report. */
int scheduler_metrics_start(const char *addr, struct whet_err *err);
void scheduler_metrics_stop(void);
void scheduler_metrics_leader(int leading);
void scheduler_metrics_cycle(double seconds, int ok);
void scheduler_metrics_snapshot(int nodes_ready, int jobs_running, int jobs_queued, double oldest_queued_s);
void scheduler_metrics_lost(int nodes, int jobs);

#endif
