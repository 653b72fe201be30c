/* service_internal.h - what the scheduler service's files share. */
#ifndef WHET_SCHEDULER_SERVICE_INTERNAL_H
#define WHET_SCHEDULER_SERVICE_INTERNAL_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

#include "job_sizing.h"
#include "proto/whet.pb-c.h"
#include "rpc.h"
#include "scheduler.h"

/* Moves a change log's read on (change_log.c): deletes the rows of `table` (running_changes,
 * node_changes) older than `previous` (NULL: older than now, before a first full read), and puts in xmin
 * where the next read starts. The read that follows takes the rows from `previous` on (none before a full
 * read). -1 with err when the database failed. */
#define CHANGE_XMIN_LEN 24
int change_log_advance(PGconn *conn, const char *table, const char *previous, char xmin[CHANGE_XMIN_LEN],
                       struct whet_err *err);
/* Removes from entries[0..n) (each `size` bytes, its id a char * at id_offset) those whose id is in column 0
 * of `res`, the changed rows a read brought, calling drop on each removed. Returns how many are kept, in
 * their order. */
int change_log_drop(void *entries, int n, size_t size, size_t id_offset, const PGresult *res, void (*drop)(void *));

/* A ready node as placement reads it (nodes.c). */
struct cached_node {
    char *id, *dc, *device_type, *address;
    int gpus, gpu_mem_mib; /* gpu_mem_mib: its first device's memory */
    long long cpu_milli, mem_mib;
};

/* The ready nodes the leader keeps between cycles (nodes.c): read once, then only those node_changes
 * names (migrations/0059_node_changes.sql). Whether a node answers (its heartbeats) is not kept here: the
 * lease census reads that each cycle (leases.c). */
struct node_cache {
    int loaded;                 /* 0: the next refresh reads every ready node */
    char xmin[CHANGE_XMIN_LEN]; /* where the next refresh reads node_changes from */
    int n, cap;
    struct cached_node *a; /* by data center, then id (strcmp): the placement library's node order */
    int *by_id;            /* indexes into a, by id (strcmp) */
    unsigned generation;   /* changes whenever a node's index in a may have: never the same twice, never 0 */
};

/* Brings the cache up to date. -1 with err when the database failed (then reset it). */
int node_cache_refresh(struct node_cache *c, PGconn *conn, struct whet_err *err);
/* Empties the cache and frees what it holds: the next refresh reads every node. */
void node_cache_reset(struct node_cache *c);

/* A running attempt as placement reads it (running.c). */
struct running_attempt {
    char *job_id, *tenant_id, *node_id;
    char *ranks; /* a gang's "NODE MASK NODE MASK …", NULL for one process */
    char *cotrain_group; /* the co-training group it shares a device with (cycle.c), NULL: none */
    char *base_model;    /* its job's base model: a running group's co-training key (cycle.c) */
    int attempt, gpu_mask, priority, stopping;
    int min_gpus, max_gpus; /* whet's elastic range; 0: not given */
    long long seq;
    double created_at, started_at, last_checkpoint;
    /* a co-training member's work left (pl_job.remaining_s) as the cycle last read it, and when (whet_now_mono;
     * 0: not read yet): kept with the attempt so that each cycle reads only the members due (cycle.c) */
    double remaining_s, remaining_read_at;
    /* Its node's index in the node cache (cycle.c) while that cache's generation is node_generation (0: not
     * looked up): looking it up by id for each of 80k attempts was ~10% of a cycle's CPU at 10k nodes. */
    int node_index;
    unsigned node_generation;
};

/* The running attempts the leader keeps between cycles (running.c). */
struct running_cache {
    int loaded;                 /* 0: the next refresh reads every running attempt */
    char xmin[CHANGE_XMIN_LEN]; /* where the next refresh reads running_changes from */
    int n, cap;
    struct running_attempt *a; /* by job seq, then attempt */
    char **stopped;            /* the jobs the last refresh found running nothing (public_state.c clears */
    int n_stopped;             /* their public state) */
};

/* Brings the cache up to date: every running attempt when not loaded, else those of the jobs named in
 * running_changes since the previous refresh. -1 with err when the database failed (then reset it: a
 * refresh half done leaves it unknown). */
int running_refresh(struct running_cache *c, PGconn *conn, struct whet_err *err);
/* Empties the cache and frees what it holds: the next refresh reads everything. */
void running_reset(struct running_cache *c);

/* What sizing and placement read of a queued job (queue.c), parsed once: it never changes. */
struct queued_spec {
    char *id;
    json_t *whet;                  /* the job's whet object (gpu_types, regions, …) */
    struct job_sizing_spec sizing; /* its settings as sizing reads them */
};

/* The specifications of the jobs at the head of the queue, kept between cycles (queue.c). */
struct queue_cache {
    int n;
    struct queued_spec *a; /* by id (strcmp) */
};

/* Makes the cache hold the jobs ids[0..n) (duplicates allowed): drops the others, reads the new ones in
 * one query. A job that no longer exists is left out. -1 with err when the database failed (the cache
 * then lacks the new ones: still true, as specifications never change). */
int queue_cache_update(struct queue_cache *c, PGconn *conn, char *const *ids, int n, struct whet_err *err);
/* The job's specification, or NULL when the cache lacks it. */
const struct queued_spec *queue_cache_find(const struct queue_cache *c, const char *id);
/* Empties the cache and frees what it holds. */
void queue_cache_reset(struct queue_cache *c);

/* A job waiting at the end of a cycle, as the cycle tells public_state_record: its reason (NULL: its
 * row is left as it is, a placement left to the next cycle) and place in the queue (0: in none). */
struct waiting_job {
    const char *id;
    char *reason;
    int position;
};

/* What the leader wrote of the waiting jobs (public_state.c), sorted by id: a reason by its hash. */
struct public_written {
    char *id;
    uint64_t reason;
    int position;
    double written_at; /* whet_now_mono() */
};
struct public_state {
    int loaded, n;
    struct public_written *w;
    double swept_at; /* whet_now_mono() of the last comparison of every waiting job's row */
};

/* Writes the public state of the cycle's n waiting jobs (public_state.c): their reasons and places,
 * none left on jobs that stopped waiting or running (`stopped`: those
 * the running attempts' refresh found running nothing); one transaction. Returns 0, or -1 with err (the
 * state is then reset: the next call compares everything). */
int public_state_record(struct public_state *ps, PGconn *conn, const struct waiting_job *jobs, int n,
                        char *const *stopped, int n_stopped, struct whet_err *err);
void public_state_reset(struct public_state *ps);

struct kept_plan;
struct pl_job;

struct scheduler {
    const struct scheduler_options *opts;
    struct node_cache nodes;      /* the leader's; reset when it starts leading */
    struct running_cache running; /* likewise */
    struct queue_cache queue;     /* likewise */
    struct public_state public_state;
    struct kept_plan *plan; /* placements a cycle left to the next ones (cycle.c); NULL: none */
    double place_batch_s;   /* how long the last whole batch of placements took to write (cycle.c) */
    double public_state_s;  /* how long the last full cycle's public state took to write (cycle.c) */
    struct pl_job *running_spare; /* the last snapshot's array of running jobs, for the next (cycle.c) */
    int running_spare_n;
    int wake_fd;            /* eventfd: scheduler_wake's, polled with the NOTIFY socket between cycles */
};

/* Runs the leader's next cycle now rather than on its timer, as a NOTIFY whet_jobs would (scheduler.c): what the
 * process's own handlers call when capacity came free. */
void scheduler_wake(struct scheduler *s);

/* The gRPC methods the leader serves (handlers.c). */
extern const struct rpc_method scheduler_methods[];
extern const int scheduler_n_methods;

/* One scheduling cycle on the leader's connection (cycle.c): leases, pause/cancel commands, sizing
 * of the queued jobs (scheduler/placement/sizing.h), placement, then the public state of every job
 * (wait_reason, queue_position) in one transaction. Returns 0, or 1 when it left
 * decisions to the next cycle (more to place than its time allows: run the next one at once), or -1
 * with err when the database failed. */
int scheduler_cycle(struct scheduler *s, PGconn *conn, struct whet_err *err);
/* Forgets the placements a cycle left to the next ones: before the caches its snapshot points into are reset. */
void scheduler_plan_drop(struct scheduler *s);

/* The START manifests of the next attempts of several jobs (manifest.c), read in one query and built
 * one by one: scheduler_manifest_rows reads, for a JSON array of job ids, one row per job found (column
 * 0: its id; 1: its current attempt number, the manifest is for the next one);
 * scheduler_manifest_build makes row `row`'s manifest: the trainer config and where the executor finds
 * the base model, the data and the checkpoint to resume from. NULL with err on failure. */
PGresult *scheduler_manifest_rows(PGconn *conn, const char *job_ids, struct whet_err *err);
json_t *scheduler_manifest_build(PGconn *conn, const struct scheduler_options *opts, const PGresult *res, int row,
                                 const char *job_id, int devices, struct whet_err *err);
/* A stored START manifest as it is handed to the executor (manifest.c): with encryption at rest on
 * ($WHET_DATA_KEY_FILE), plus the tenant's unwrapped data key ("data_key": {"id", "key"}), or the reason
 * it is unavailable ("data_key_error"), which fails the attempt. The key is added only here, on the way
 * out, so node_commands never holds it. Returns a malloc'd string. */
char *scheduler_manifest_deliver(PGconn *conn, const char *manifest);

/* ---- Gangs (gang.c): a job placed on more than one device (one node or several) runs as one attempt
 * of N ranks, one trainer process per device; migrations/0018_gangs.sql has the rows and the rules. ---- */

/* Seconds rank 0 has, from placement, to publish its rendezvous address before the attempt fails. */
#define GANG_RENDEZVOUS_S 600
/* The trainers' rendezvous and collective deadline (the trainer config's distributed.timeout_s). */
#define GANG_TIMEOUT_S 300

/* The nodes that run an attempt: as a LATERAL subquery over a row `a` of job_attempts, with column
 * node_id: its node, or each node with a started, unfinished rank of a gang. */
#define GANG_NODES_SQL                                                                                          \
    "(SELECT a.node_id AS node_id WHERE a.world_size = 1 UNION SELECT r.node_id FROM gang_ranks r"            \
    " WHERE r.job_id = a.job_id AND r.attempt = a.attempt AND r.started_at IS NOT NULL AND r.ended_at IS NULL)"

/* What one rank of a gang is told (manifest.c adds it to the attempt's manifest). */
struct gang_rank {
    int world_size, rank, generation; /* the generation is the attempt number */
    const char *host;                 /* its node's address, where its peers reach it */
    const char *rendezvous;           /* rank 0: "HOST:0" (it listens); others: NULL until rank 0 published */
    json_t *peers;                    /* the addresses of the gang's nodes (the sandbox lets it reach these) */
    int base_needs_gang;              /* sizing found the job too big for one device: shard the base too */
};

/* Adds "cotrain": {"group": name, "members": [job ids]} to a START manifest: the job runs in the group's
 * shared co-training process (manifest.c). */
void scheduler_manifest_cotrain(json_t *manifest, const char *group, const json_t *members);
/* The START manifest of one rank: a copy of the attempt's manifest with "devices": 1 and the
 * "distributed" object. Returns a new JSON object. */
json_t *scheduler_rank_manifest(const json_t *manifest, const struct gang_rank *r);

/* A heartbeat writes its node's stored lease (nodes.last_heartbeat) only once that is a quarter of the lease
 * old (LEASE_RENEW_AFTER_SQL, heartbeats.c): with a heartbeat every tenth of a lease, two in three then
 * leave the node's row alone. The stored time so trails the node's last heartbeat by up to a quarter lease,
 * and a node is overdue when it is older than a lease and a quarter (LEASE_OVERDUE_AFTER_SQL, leases.c): a
 * whole lease of silence at least, as when every heartbeat was written. SQL of a nodes row, in seconds. */
#define LEASE_RENEW_AFTER_SQL "lease_ms / 4000.0"
#define LEASE_OVERDUE_AFTER_SQL "lease_ms * 0.00125::float8"

/* The Heartbeat method's handler (heartbeats.c): answered from memory when nothing is to be written or
 * handed out, else written with the heartbeats that arrive meanwhile in one statement (its node's lease
 * renewed, its jobs' progress written, its waiting commands in the answer) by a writer thread, which
 * answers the deferred call. heartbeat_writers_start and _stop bracket the server of a leadership term;
 * without them (a handler called directly) the handler writes its heartbeat itself. */
int scheduler_heartbeat(void *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out, struct whet_err *err);
void scheduler_heartbeat_response_free(ProtobufCMessage *m);
void heartbeat_writers_start(struct scheduler *s);
void heartbeat_writers_stop(void);

/* The heartbeats answered without the database (heartbeat_quiet.c): a node whose last statement found it
 * known and without model workers, whose stored lease is not yet due for a write, and to which nothing was
 * given since (heard on the channel whet_node_wake, migration 0061). quiet_start and quiet_stop bracket a
 * leadership term (the listening thread and the memory). */
void quiet_start(const struct scheduler_options *opts);
void quiet_stop(void);
/* 1 when a heartbeat of `node` that brings no progress may be answered from memory: empty, the node known. */
int quiet_answer(const char *node, double now);
/* What a writer reads of a node before its statement runs, and hands back to quiet_written after it. */
struct quiet_mark {
    unsigned long wake, epoch;
};
struct quiet_mark quiet_mark(const char *node);
/* The statement of `mark` succeeded for `node`: `quiet` when it found the node known and without model
 * workers; its stored lease falls due for a write at quiet_until (whet_now_mono()). */
void quiet_written(const char *node, struct quiet_mark mark, int quiet, double quiet_until);

/* Which progress reports of a heartbeat to write (progress.c): a job's first, a changed total, or a
 * grown step at most every progress_ms (0: every report), or with `every_news` at once (the heartbeat
 * goes to the database anyway: its node's jobs are then written together, and its next heartbeats can be
 * quiet). scheduler_progress_due puts the reports of req to write in due[] (req->n_jobs of room; pointers
 * into req) and returns how many;
 * scheduler_progress_written notes those committed. Thread-safe; init before the first heartbeat, free
 * after the last. */
void scheduler_progress_init(int progress_ms);
size_t scheduler_progress_due(const Whet__V1__HeartbeatRequest *req, double now, int every_news,
                              const Whet__V1__JobProgress **due);
void scheduler_progress_written(const Whet__V1__JobProgress *const *written, size_t n, double now);
/* req went to the database: each of its reports that is remembered counts as written at `now` (those not
 * written were no news), so that its node's jobs fall due together. */
void scheduler_progress_seen(const Whet__V1__HeartbeatRequest *req, double now);
void scheduler_progress_free(void);

/* Declares the nodes silent past their lease lost and requeues their jobs, unless the whole fleet
 * went silent at once (leases.c says why). *silent: the ready nodes silent for half their lease or more,
 * which take no new work ("ID ID …", NULL: none; the caller frees it). Returns how many nodes it declared
 * lost, or -1. */
int scheduler_expire_leases(PGconn *conn, char **silent, struct whet_err *err);

/* Deletes a batch of expired rows (idempotency keys) when one is due (retention.c). */
int scheduler_retention(PGconn *conn, struct whet_err *err);

/* The leader's maintenance thread (maintenance.c): the passes below, on a connection of its own, every few
 * seconds and at once on `NOTIFY whet_maintenance`; started when this scheduler takes the lead (NULL when no
 * thread could be had), stopped when it steps down. */
struct maintenance;
struct maintenance *maintenance_start(const struct scheduler_options *opts);
void maintenance_stop(struct maintenance *m);

/* What a maintenance pass works with. */
struct maintenance_pass {
    PGconn *conn;
    struct objstore *store; /* NULL without an object store: the passes that remove files do not run */
    const struct scheduler_options *opts;
    const struct background *thread; /* its stop: a pass looks at it between batches */
    int stopping;                    /* set once a stop cancelled a statement (pg.h) */
    int forced;                      /* NOTIFY whet_maintenance: passes with clocks of their own are due now */
};

/* Prefixes to remove from the object store, listed in a table: `select_sql` ($1: the batch size) selects
 * (id, prefix, ...) rows FOR UPDATE SKIP LOCKED; `done_sql` ($1: the id) records a removal, in the transaction
 * that holds the row, so two leaders for a moment never remove one twice. */
struct prefix_removal {
    const char *select_sql, *done_sql;
    int batch;
    const char *left_msg, *removed_msg; /* logged for a prefix whose removal failed (left for the next pass) and
                                           for the prefixes removed */
    void (*failed)(void);               /* counts a failed removal */
    /* Removes row `row`'s objects: 0, or -1 with err; NULL: all of them (objstore_delete_dir). */
    int (*remove)(struct objstore *store, const PGresult *res, int row, struct whet_err *err);
};
/* Removes one batch (maintenance.c): the batch size when the whole batch went (more may wait), 0 when less did,
 * -1 on a database error. */
int maintenance_remove_prefixes(struct maintenance_pass *p, const struct prefix_removal *r, struct whet_err *err);

/* Makes the coming months' partitions of job_events and usage_records and drops those wholly older than
 * their retentions when a call is due (partitions.c). 0, or -1 with err. */
int scheduler_partitions(struct maintenance_pass *p, struct whet_err *err);
/* Deletes the checkpoints the operator's retention lets go, rows then files (checkpoint_retention.c). */
int checkpoint_retention_pass(struct maintenance_pass *p, struct whet_err *err);
/* Removes the object-store prefixes of ended attempts that nothing references (attempt_gc.c). */
int attempt_gc_pass(struct maintenance_pass *p, struct whet_err *err);
/* Folds the succeeded jobs named in throughput_queue into the throughput the estimate reads (throughput.c). */
int throughput_fold_pass(struct maintenance_pass *p, struct whet_err *err);

/* Fails the gangs whose rank 0 has not published its rendezvous address by the deadline (cycle). */
int scheduler_gang_deadlines(PGconn *conn, struct whet_err *err);

/* FinishJob of a gang's rank, inside handle_finish's transaction: ends the rank (once) and meters it;
 * a failure fails the whole gang (whet_gang_fail); rank 0's success, stop or cancel ends the attempt.
 * Returns GANG_NONE when the attempt is not a gang's (the caller goes on as for one process),
 * GANG_JOB when the caller is to end the job as rank 0's outcome says, GANG_DONE when nothing more is
 * to be done, -1 on a database error. */
enum { GANG_NONE, GANG_JOB, GANG_DONE };
int scheduler_gang_finish(PGconn *conn, const Whet__V1__FinishJobRequest *req, const char *outcome, const char *dev_s,
                          const char *trained, const char *rollout, struct whet_err *err);

/* The PublishRendezvous handler and what handlers.c lends it: the calling thread's connection and
 * the error answer of a failed database call. */
int scheduler_handle_rendezvous(void *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out, struct whet_err *err);
PGconn *scheduler_handler_conn(const struct scheduler *s, struct whet_err *err);
int scheduler_db_unavailable(struct whet_err *err);

/* The scheduler's Prometheus metrics (metrics.c): a thread serving GET /metrics on `addr` (start
 * returns -1 with err when it cannot listen; stop joins it), and what the loop and the cycle report. */
int scheduler_metrics_start(const char *addr, struct whet_err *err);
void scheduler_metrics_stop(void);
void scheduler_metrics_leader(int leading);
void scheduler_metrics_cycle(double seconds, int ok);
void scheduler_metrics_snapshot(int nodes_ready, int jobs_running, int jobs_queued, double oldest_queued_s);
void scheduler_metrics_lost(int nodes, int jobs);
void scheduler_metrics_silence(int mass_silence);
void scheduler_metrics_heartbeats(int n);
void scheduler_metrics_heartbeat_quiet(void);
void scheduler_metrics_heartbeat_handled(double seconds);
void scheduler_metrics_checkpoints_deleted(int n);
void scheduler_metrics_checkpoint_purge_failed(void);
/* A maintenance pass ("partitions", "checkpoint_retention", "attempt_gc") failed. */
void scheduler_metrics_maintenance_failed(const char *pass);
/* Ended attempts' objects removed from the object store, and removals that failed (tried again). */
void scheduler_metrics_attempt_objects_removed(int n);
void scheduler_metrics_attempt_gc_failed(void);

#endif
