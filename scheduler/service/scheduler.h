/* scheduler.h - the scheduler service (`whet scheduler`).
 *
 * One leader at a time (pg_try_advisory_lock on a dedicated connection; a second scheduler waits and
 * takes over when the leader's session ends). The leader serves the executors' gRPC calls
 * (proto/whet.proto) and runs a cycle on every NOTIFY whet_jobs, when its own FinishJob handler freed
 * capacity (scheduler_wake: no NOTIFY round trip), and at least once a second:
 *
 *   1. leases: a node silent for longer than its lease is lost; its running attempts end as `lost` and
 *      their jobs go back to the queue, to resume from their last complete checkpoint elsewhere;
 *   2. commands: pause and cancel requests of running jobs become STOP / CANCEL commands;
 *   3. placement: queued jobs are sized (scheduler/placement/sizing.h) and go with ready nodes and
 *      running attempts through the placement library, a gang on one node when one holds it, else on
 *      the fewest nodes of one data center (one attempt of N ranks: gang.c); PLACE becomes a new
 *      attempt and a START command (a gang's rank 0 first), PREEMPT a STOP command; then one
 *      transaction writes every waiting job's wait_reason and queue_position.
 *
 * Beside the cycle, the leader's maintenance thread (maintenance.c) keeps job_events' monthly partitions,
 * deletes the checkpoints the operator's retention lets go (checkpoint_retention.c) and removes the files of
 * ended attempts that nothing references (attempt_gc.c), on a connection of its own: what it waits on never
 * holds up a cycle.
 *
 * All state is in PostgreSQL, so a restarted scheduler loses nothing: commands wait in node_commands
 * until a heartbeat collects them, and executor reports are idempotent by (job, attempt, seq). */
#ifndef WHET_SCHEDULER_H
#define WHET_SCHEDULER_H

#include "util.h"

struct scheduler_options {
    const char *database_url;
    const char *grpc_addr;      /* HOST:PORT the executors call */
    const char *executor_token; /* shared secret executors present */
    const char *object_store;   /* URL, passed to executors in job manifests */
    int lease_ms;               /* a node silent this long is lost (default 10000) */
    int heartbeat_ms;           /* what executors are told to use (default 1000) */
    int rpc_threads;            /* default 16: each a PostgreSQL connection; handlers wait on the database
                                   (heartbeats have threads of their own: handlers.c) */
    int progress_ms;            /* a running job's step written at most this often (progress.c); 0: always */
    const char *policy;         /* placement policy name (default "whet") */
    const char *metrics_addr;   /* HOST:PORT serving GET /metrics (Prometheus), or NULL: none */
    int cotrain_pass_tokens;    /* a co-training group's passes hold at most this many tokens, as the
                                   executors run them (both read WHET_COTRAIN_PASS_TOKENS); <= 0: the
                                   trainer's default (sizing.h's sz_cotrain_mib) */
    double cotrain_move_min_left_s; /* a co-trained job with less work left than this stays in its group
                                   when a device frees up (default 60) */
    int checkpoint_keep;            /* the newest step checkpoints of a job kept (and every pinned one, and the
                                   final model); 0: every checkpoint (migration 0040) */
    long long deleted_model_keep_s; /* a deleted fine-tuned model's checkpoints and final model go this long
                                   after the deletion; -1: never */
    int event_retention_days;       /* job events (messages and metrics) are dropped a month at a time,
                                   once the month ended this many days ago (partitions.c); 0: kept */
    long long attempt_gc_grace_s;   /* an ended attempt's unreferenced files are removed this long after it
                                   ended (attempt_gc.c) */
    int usage_retention_days;       /* usage records are dropped a month of jobs at a time, once the month
                                   ended and nothing in it was recorded for this many days; 0: kept */
    int cycle_target_ms;            /* a cycle writes placements until it has run this long (one batch at
                                   least) and leaves the rest to the next cycles (cycle.c); 0: 800 */
};

/* Runs until SIGINT/SIGTERM (returns 0) or a fatal error (-1 with err). */
int scheduler_run(const struct scheduler_options *opts, struct whet_err *err);

#endif
