/* handlers.c - the executors' calls: register, heartbeat, events, checkpoints, finish.
 *
 * Handlers run on the gRPC server's threads; each thread keeps its own PostgreSQL connection
 * (reconnected when it breaks: the executor sees UNAVAILABLE and retries). Every write is idempotent,
 * because an executor retries any call whose answer it did not see.
 *
 * Fencing: a node cut off from the scheduler (a data center partitioned on the WAN) loses its lease and
 * its attempts move elsewhere, while its trainers may run on; when the partition heals, that stale
 * attempt reports again. Every report is checked against the job's current attempt in the statement that
 * applies it (CURRENT_ATTEMPT_SQL; the heartbeat's progress in heartbeats.c's statement): a stale one
 * changes nothing and is answered FAILED_PRECONDITION, on which the executor abandons the attempt (kills
 * its trainer, uploads and reports nothing more). Only the late success below is taken from a stale
 * attempt, on purpose. Each attempt also writes under its own object prefix (manifest.c), so two attempts
 * never write the same objects. */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crypto.h"
#include "log.h"
#include "pg.h"
#include "proto/whet.pb-c.h"
#include "service_internal.h"
#include "serving.h"

static __thread PGconn *thread_conn;

/* thread_conn is also kept under this key, whose destructor closes it when a server thread exits
 * (rpc_server_stop joins them); a __thread variable alone would leak the connection then. */
static pthread_key_t thread_conn_key;
static pthread_once_t thread_conn_key_once = PTHREAD_ONCE_INIT;

static void thread_conn_finish(void *conn) { PQfinish(conn); }
static void thread_conn_key_create(void) { pthread_key_create(&thread_conn_key, thread_conn_finish); }

static void thread_conn_set(PGconn *conn) {
    pthread_once(&thread_conn_key_once, thread_conn_key_create);
    thread_conn = conn;
    pthread_setspecific(thread_conn_key, conn);
}

/* The calling thread's connection, connected on first use and after a failure. Its statements are the
 * handlers' few, run for every report: prepared once (pg.h). */
static PGconn *handler_conn(const struct scheduler *s, struct whet_err *err) {
    if (thread_conn && PQstatus(thread_conn) == CONNECTION_OK) return thread_conn;
    PQfinish(thread_conn);
    PGconn *conn = whet_pg_connect(s->opts->database_url, err);
    if (conn && whet_pg_prepare_statements(conn) < 0) {
        whet_errf(err, "database: libpq could not keep the connection's prepared statements");
        PQfinish(conn);
        conn = NULL;
    }
    thread_conn_set(conn);
    return thread_conn;
}

/* A lost database connection is the executor's cue to retry later; a statement that failed on a
 * working connection is a bug, reported as such (retrying would not help). */
static int db_unavailable(struct whet_err *err) {
    whet_err_prefix(err, "scheduler database");
    if (thread_conn && PQstatus(thread_conn) == CONNECTION_OK) {
        PQclear(PQexec(thread_conn, "ROLLBACK"));
        return RPC_INTERNAL;
    }
    PQfinish(thread_conn);
    thread_conn_set(NULL);
    return RPC_UNAVAILABLE;
}

PGconn *scheduler_handler_conn(const struct scheduler *s, struct whet_err *err) { return handler_conn(s, err); }
int scheduler_db_unavailable(struct whet_err *err) { return db_unavailable(err); }

static void *new_message(size_t size, void (*init)(void *)) {
    void *m = xcalloc(1, size);
    init(m);
    return m;
}

static void free_plain(ProtobufCMessage *m) { free(m); }

/* The job ($2) with its tenant, when attempt $7 on node $9 is its current one: the job runs that attempt
 * (a lost lease, a late success, any end sets its status or a newer attempt) and the attempt has not
 * ended. The job's row is held (FOR SHARE) until the report's statement ends, so a report and the lease's
 * expiry (leases.c, which changes that row) are ordered: a report applied first is one the next attempt's
 * manifest sees; a report that waited is checked again against the changed row and refused. */
#define CURRENT_ATTEMPT_SQL                                                                                            \
    "SELECT j.id, j.tenant_id, j.base_model, j.suffix FROM jobs j JOIN job_attempts a ON a.job_id = j.id"              \
    " AND a.attempt = j.attempt WHERE j.id = $2 AND j.attempt = $7::int AND j.status = 'running'"                      \
    " AND a.node_id = $9 AND a.ended_at IS NULL FOR SHARE OF j"

/* The answer to a stale attempt's report. */
static int stale_attempt(const char *job_id, unsigned attempt, const char *what, struct whet_err *err) {
    whet_errf(err, "attempt %u of job %s is no longer current: its %s is refused", attempt, job_id, what);
    whet_err_detail(err, "The attempt was declared lost (its node missed its lease) or its job has ended.");
    return whet_err_hint(err, "stop the attempt: the job runs, or ran, elsewhere"), RPC_FAILED_PRECONDITION;
}

/* ---- RegisterNode ---- */

static int handle_register(void *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out, struct whet_err *err) {
    struct scheduler *s = ctx;
    const Whet__V1__RegisterRequest *req = (const Whet__V1__RegisterRequest *)msg;
    if (!*req->node_id || !*req->dc || !*req->pool) {
        whet_errf(err, "node_id, dc and pool are required");
        return RPC_INVALID_ARGUMENT;
    }
    PGconn *conn = handler_conn(s, err);
    if (!conn) return db_unavailable(err);

    /* A node registers after it (re)started, so whatever it ran before is gone with the old process:
     * those attempts end as lost and their jobs resume from their last checkpoint. This comes before the
     * node is marked ready, never after: once it is ready the leader may place jobs on it at any moment,
     * and those belong to this process (CI once saw a group placed between the two statements ended
     * at once as "restarted", and placed again). */
    const char *lost_params[] = {req->node_id};
    PGresult *lost = whet_pg_query(conn,
                                   "SELECT whet_requeue_node_attempts($1, 'Node ' || $1 || ' restarted; the job will"
                                   " resume from its last checkpoint')",
                                   1, lost_params, err);
    if (!lost) return db_unavailable(err);
    for (int i = 0; i < PQntuples(lost); i++)
        log_warn("msg=\"job requeued: node restarted\" job=%s", PQgetvalue(lost, i, 0));
    PQclear(lost);

    json_t *devices = json_array(), *models = json_array();
    const char *device_type = "cpu";
    for (size_t i = 0; i < req->n_devices; i++) {
        json_array_append_new(devices,
                              json_pack("{s:s, s:i, s:i}", "type", req->devices[i]->type, "memory_mib",
                                        (int)req->devices[i]->memory_mib, "index", (int)req->devices[i]->index));
        device_type = req->devices[i]->type;
    }
    for (size_t i = 0; i < req->n_cached_models; i++) json_array_append_new(models, json_string(req->cached_models[i]));
    char *devices_json = json_dumps(devices, JSON_COMPACT), *models_json = json_dumps(models, JSON_COMPACT);
    json_decref(devices);
    json_decref(models);
    char gpus[16], cpu[24], mem[24], lease[16];
    snprintf(gpus, sizeof gpus, "%zu", req->n_devices);
    snprintf(cpu, sizeof cpu, "%u", req->cpu_milli);
    snprintf(mem, sizeof mem, "%llu", (unsigned long long)req->memory_mib);
    snprintf(lease, sizeof lease, "%d", s->opts->lease_ms);
    const char *params[] = {req->node_id, req->dc,      req->pool, devices_json,
                            device_type,  gpus,         cpu,       mem,
                            models_json,  req->version, lease,     *req->address ? req->address : "127.0.0.1"};
    /* Ready, also a node that comes back after being declared lost (the executor stopped what it had
     * before it registered again). */
    int rc = whet_pg_exec(conn,
                          "INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib,"
                          " cached_models, version, lease_ms, address) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)"
                          " ON CONFLICT (id) DO UPDATE SET dc = $2, pool = $3, devices = $4, device_type = $5,"
                          " gpus = $6, cpu_milli = $7, memory_mib = $8, cached_models = $9, version = $10,"
                          " lease_ms = $11, address = $12, state = 'ready', registered_at = whet_now(),"
                          " last_heartbeat = extract(epoch FROM clock_timestamp())",
                          12, params, err);
    free(devices_json);
    free(models_json);
    if (rc < 0) return db_unavailable(err);
    log_info("msg=\"node registered\" node=%s dc=%s pool=%s devices=%zu type=%s", req->node_id, req->dc, req->pool,
             req->n_devices, device_type);

    Whet__V1__RegisterResponse *resp = new_message(sizeof *resp, (void (*)(void *))whet__v1__register_response__init);
    resp->lease_ms = (uint32_t)s->opts->lease_ms;
    resp->heartbeat_ms = (uint32_t)s->opts->heartbeat_ms;
    *out = &resp->base;
    return RPC_OK;
}

/* ---- ReportEvents ---- */

static int handle_events(void *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out, struct whet_err *err) {
    struct scheduler *s = ctx;
    const Whet__V1__ReportEventsRequest *req = (const Whet__V1__ReportEventsRequest *)msg;
    PGconn *conn = handler_conn(s, err);
    if (!conn) return db_unavailable(err);
    const Whet__V1__Event *stale = NULL;
    for (size_t i = 0; i < req->n_events; i++) {
        const Whet__V1__Event *e = req->events[i];
        char id[40], attempt[16], seq[16];
        whet_random_id("ftevent-", 24, id);
        snprintf(attempt, sizeof attempt, "%u", e->attempt);
        snprintf(seq, sizeof seq, "%u", e->seq);
        const char *level = !strcmp(e->level, "warn") || !strcmp(e->level, "error") ? e->level : "info";
        const char *type = !strcmp(e->type, "metrics") ? "metrics" : "message";
        const char *params[] = {id,      e->job_id, level,       type, e->message, *e->data_json ? e->data_json : NULL,
                                attempt, seq,       req->node_id};
        /* Recorded once per (job, attempt, seq) however often the report is retried (migration 0044), and
         * only while its attempt is current: a row back when it is. */
        PGresult *res =
            whet_pg_query(conn,
                          "WITH cur AS (" CURRENT_ATTEMPT_SQL ")"
                          " SELECT whet_report_event($1, id, $3, $4, $5, $6::jsonb, $7::int, $8::int) FROM cur",
                          9, params, err);
        if (!res) return db_unavailable(err);
        if (PQntuples(res) == 0) stale = e;
        PQclear(res);
    }
    if (stale) return stale_attempt(stale->job_id, stale->attempt, "event", err);
    *out =
        new_message(sizeof(Whet__V1__ReportEventsResponse), (void (*)(void *))whet__v1__report_events_response__init);
    return RPC_OK;
}

/* ---- ReportCheckpoint ---- */

/* Records a complete checkpoint at `prefix` and its event, in one statement: a retried report adds
 * neither twice, nor brings back a checkpoint the retention deleted (migration 0040). With `fenced`,
 * only while `attempt` on `node` is the job's current one; 1 when it is (or not fenced), 0 when the
 * attempt is stale (nothing recorded), -1 on a database error. FinishJob records the final model's row
 * unfenced, in the transaction that has just ended the attempt, unless the job has succeeded already (an
 * attempt cancelled by a late success may finish before its cancel arrives). */
static int checkpoint_insert(PGconn *conn, const char *job_id, const char *node_id, unsigned attempt_n, unsigned step_n,
                             const char *metrics, const char *prefix, uint64_t bytes_n, int fenced,
                             struct whet_err *err) {
    char id[40], event_id[40], step[16], bytes[24], attempt[16];
    whet_random_id("ftckpt-", 24, id);
    whet_random_id("ftevent-", 24, event_id);
    snprintf(step, sizeof step, "%u", step_n);
    snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)bytes_n);
    snprintf(attempt, sizeof attempt, "%u", attempt_n);
    const char *params[] = {id,      job_id,   step,    *metrics ? metrics : "{}", prefix, bytes,
                            attempt, event_id, node_id, fenced ? "t" : "f"};
    PGresult *res = whet_pg_query(
        conn,
        "WITH cur AS (" CURRENT_ATTEMPT_SQL "),"
        " j AS (SELECT * FROM cur WHERE $10::bool UNION ALL"
        "   SELECT id, tenant_id, base_model, suffix FROM jobs"
        "   WHERE id = $2 AND NOT $10::bool AND status <> 'succeeded'),"
        " ins AS (INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint,"
        "   metrics, object_prefix, bytes, attempt)"
        "   SELECT $1, j.tenant_id, j.id, $3::int,"
        "     'ft:' || j.base_model || ':' || t.name || ':' || coalesce(j.suffix, '') || ':' || j.id"
        "       || ':ckpt-step-' || $3, $4::jsonb, $5, $6::bigint, $7::int"
        "   FROM j JOIN tenants t ON t.id = j.tenant_id"
        "   WHERE NOT EXISTS (SELECT 1 FROM checkpoint_deletions d WHERE d.job_id = j.id AND d.step_number = $3::int)"
        "   ON CONFLICT (job_id, step_number) DO NOTHING RETURNING job_id, tenant_id),"
        " ev AS (INSERT INTO job_events (id, tenant_id, job_id, message, data)"
        "   SELECT $8, ins.tenant_id, ins.job_id, 'Checkpoint created at step ' || $3,"
        "     jsonb_build_object('step', $3::int, 'attempt', $7::int) FROM ins)"
        " SELECT count(*) FROM j",
        10, params, err);
    if (!res) return -1;
    int current = strcmp(PQgetvalue(res, 0, 0), "0") != 0;
    PQclear(res);
    return current;
}

static int handle_checkpoint(void *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out, struct whet_err *err) {
    struct scheduler *s = ctx;
    const Whet__V1__CheckpointReport *req = (const Whet__V1__CheckpointReport *)msg;
    PGconn *conn = handler_conn(s, err);
    if (!conn) return db_unavailable(err);
    int current = checkpoint_insert(conn, req->job_id, req->node_id, req->attempt, req->step, req->metrics_json,
                                    req->object_prefix, req->bytes, 1, err);
    if (current < 0) return db_unavailable(err);
    if (!current) return stale_attempt(req->job_id, req->attempt, "checkpoint", err);
    *out = new_message(sizeof(Whet__V1__ReportCheckpointResponse),
                       (void (*)(void *))whet__v1__report_checkpoint_response__init);
    return RPC_OK;
}

/* ---- FinishJob ---- */

static const char *outcome_name(Whet__V1__FinishJobRequest__Outcome o) {
    switch (o) {
    case WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED: return "succeeded";
    case WHET__V1__FINISH_JOB_REQUEST__OUTCOME__STOPPED: return "stopped";
    case WHET__V1__FINISH_JOB_REQUEST__OUTCOME__CANCELLED: return "cancelled";
    default: return "failed";
    }
}

/* What end_attempt decided. */
enum attempt_end { END_RETRIED, END_APPLY, END_STALE };

/* FinishJob(SUCCEEDED) from an attempt already declared lost: its node went silent past the lease,
 * yet the attempt finished and uploaded the final model (the executor reports a success even after
 * it learns it was declared lost), under its own prefix (manifest.c). Retraining would only redo that
 * work, so the success is taken while the job has not ended otherwise (queued again, running a newer
 * attempt, or paused; not cancelled) and no newer attempt has recorded a checkpoint: once one has, the
 * job's checkpoints are that attempt's, and a final model of another lineage next to them (listed, kept
 * by retention, resumed from by nobody) would mix two runs, so the newer attempt goes on and the late
 * model is refused (its objects stay unreferenced under its prefix). When taken, newer attempts are
 * cancelled (their reports are refused from then on: the job has succeeded), and the lost attempt's usage
 * record, written when it was declared lost, keeps its `lost` flag and gains the seconds and tokens the
 * executor measured. Called inside handle_finish's transaction; returns END_APPLY when taken, END_STALE
 * when not, END_RETRIED for a success taken before, -1 on a database error. */
static int late_success(PGconn *conn, const Whet__V1__FinishJobRequest *req, const char *dev_s, const char *trained,
                        const char *rollout, struct whet_err *err) {
    char attempt[16], event_id[40];
    snprintf(attempt, sizeof attempt, "%u", req->attempt);
    whet_random_id("ftevent-", 24, event_id);
    const char *params[] = {req->job_id, attempt, req->node_id};
    /* The job's row lock orders this against the cycle, a concurrent FinishJob of the newer attempt and
     * its checkpoint reports (which hold the row FOR SHARE while they insert); the checkpoints are read by
     * the next statement, whose snapshot is taken after the lock was granted. FOR NO KEY UPDATE, as in
     * scheduler_gang_finish: the key checks of the job's new rows do not wait for it. */
    PGresult *res = whet_pg_query(conn,
                                  "SELECT 1 FROM jobs j JOIN job_attempts a ON a.job_id = j.id"
                                  " WHERE j.id = $1 AND a.attempt = $2::int AND a.node_id = $3 AND a.outcome = 'lost'"
                                  " AND j.status IN ('queued', 'running', 'paused') FOR NO KEY UPDATE OF j",
                                  3, params, err);
    if (!res) return -1;
    int taken = PQntuples(res) == 1;
    PQclear(res);
    if (!taken) {
        /* A retried report of a success taken finds the job ended with this attempt's model. The job is read
         * by its key alone, its status tested after: with the status in the WHERE clause, a plan made while
         * few jobs had succeeded walks the partial index of succeeded jobs (jobs_succeeded_file) with the id
         * as a filter (14.5 ms a call in tests/bench/scale under job churn, 3,396 rows read). */
        const char *rparams[] = {req->job_id, req->final_object_prefix};
        res = whet_pg_query(conn, "SELECT status = 'succeeded' AND final_object_prefix = $2 FROM jobs WHERE id = $1", 2,
                            rparams, err);
        if (!res) return -1;
        int retried = PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't';
        PQclear(res);
        return retried ? END_RETRIED : END_STALE;
    }
    res = whet_pg_query(conn, "SELECT EXISTS (SELECT 1 FROM checkpoints WHERE job_id = $1 AND attempt > $2::int)", 2,
                        params, err);
    if (!res) return -1;
    int newer = PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    if (newer) {
        log_warn("msg=\"late success refused: a newer attempt has written checkpoints\" job=%s attempt=%u node=%s",
                 req->job_id, req->attempt, req->node_id);
        return END_STALE;
    }
    const char *uparams[] = {req->job_id, attempt, dev_s, trained, rollout};
    const char *cparams[] = {req->job_id, attempt, req->node_id, event_id};
    if (whet_pg_exec(conn,
                     "UPDATE usage_records SET device_seconds = greatest(device_seconds, $3::float8),"
                     " trained_tokens = $4::bigint, rollout_tokens = $5::bigint"
                     " WHERE job_id = $1 AND attempt = $2::int AND report_seq = 0 AND lost"
                     " AND job_created_at = (SELECT created_at FROM jobs WHERE id = $1)",
                     5, uparams, err) < 0 ||
        whet_pg_exec(conn,
                     "WITH c AS (INSERT INTO node_commands (node_id, job_id, attempt, kind, grace_ms, reason)"
                     "   SELECT node_id, job_id, attempt, 'cancel', 0, 'the job succeeded on an earlier attempt'"
                     "   FROM job_attempts WHERE job_id = $1 AND attempt > $2::int AND ended_at IS NULL)"
                     " INSERT INTO job_events (id, tenant_id, job_id, level, message, data)"
                     " SELECT $4, tenant_id, id, 'info', 'Attempt ' || $2 || ' on node ' || $3 || ', declared lost,"
                     " had finished training; its model is kept and the job does not train again',"
                     " jsonb_build_object('attempt', $2::int, 'node', $3::text) FROM jobs WHERE id = $1",
                     4, cparams, err) < 0)
        return -1;
    log_warn("msg=\"late success taken\" job=%s attempt=%u node=%s", req->job_id, req->attempt, req->node_id);
    return END_APPLY;
}

/* Ends a one-process attempt once and meters it, inside handle_finish's transaction: END_APPLY when the
 * job is to end as the report says, END_RETRIED when nothing changes (a retried FinishJob finds the
 * attempt ended by its first), END_STALE when the attempt had been declared lost (a lost attempt's
 * success may still be taken: late_success), -1 on a database error. */
static int end_attempt(PGconn *conn, const Whet__V1__FinishJobRequest *req, const char *outcome, const char *dev_s,
                       const char *trained, const char *rollout, struct whet_err *err) {
    char attempt[16];
    snprintf(attempt, sizeof attempt, "%u", req->attempt);
    const Whet__V1__Usage *u = req->usage;
    const char *aparams[] = {req->job_id, attempt, outcome, req->node_id};
    PGresult *res =
        whet_pg_query(conn,
                      "UPDATE job_attempts SET ended_at = extract(epoch FROM clock_timestamp()), outcome = $3"
                      " WHERE job_id = $1 AND attempt = $2::int AND node_id = $4 AND ended_at IS NULL"
                      " RETURNING device_type, tenant_id",
                      4, aparams, err);
    if (!res) return -1;
    if (PQntuples(res) == 0) {
        PQclear(res);
        if (req->outcome == WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED && *req->final_object_prefix)
            return late_success(conn, req, dev_s, trained, rollout, err);
        const char *sparams[] = {req->job_id, attempt, req->node_id};
        res = whet_pg_query(conn,
                            "SELECT 1 FROM job_attempts WHERE job_id = $1 AND attempt = $2::int AND node_id = $3"
                            " AND outcome IS DISTINCT FROM 'lost'",
                            3, sparams, err);
        if (!res) return -1;
        int retried = PQntuples(res) == 1;
        PQclear(res);
        return retried ? END_RETRIED : END_STALE;
    }
    char *device_type = xstrdup(PQgetvalue(res, 0, 0));
    PQclear(res);
    const char *uparams[] = {req->job_id, attempt, u && *u->device_type ? u->device_type : device_type,
                             dev_s,       trained, rollout};
    int rc = whet_pg_exec(
        conn,
        "INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds,"
        " trained_tokens, rollout_tokens, job_created_at) SELECT tenant_id, id, $2::int, 0, $3, $4::float8,"
        " $5::bigint, $6::bigint, created_at FROM jobs WHERE id = $1"
        " ON CONFLICT (job_id, attempt, report_seq, job_created_at) DO NOTHING",
        6, uparams, err);
    free(device_type);
    return rc < 0 ? -1 : END_APPLY;
}

static int handle_finish(void *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out, struct whet_err *err) {
    struct scheduler *s = ctx;
    const Whet__V1__FinishJobRequest *req = (const Whet__V1__FinishJobRequest *)msg;
    PGconn *conn = handler_conn(s, err);
    if (!conn) return db_unavailable(err);
    const char *outcome = outcome_name(req->outcome);
    char attempt[16], tokens[24], dev_s[32], trained[24], rollout[24], event_id[40];
    snprintf(attempt, sizeof attempt, "%u", req->attempt);
    snprintf(tokens, sizeof tokens, "%llu", (unsigned long long)req->trained_tokens);
    const Whet__V1__Usage *u = req->usage;
    snprintf(dev_s, sizeof dev_s, "%.3f", u ? u->device_seconds : 0.0);
    snprintf(trained, sizeof trained, "%llu", (unsigned long long)(u ? u->trained_tokens : 0));
    snprintf(rollout, sizeof rollout, "%llu", (unsigned long long)(u ? u->rollout_tokens : 0));
    whet_random_id("ftevent-", 24, event_id);

    if (whet_pg_exec(conn, "BEGIN", 0, NULL, err) < 0) return db_unavailable(err);
    /* A gang's rank ends alone; only rank 0's end goes on to the job (gang.c). */
    int gang = scheduler_gang_finish(conn, req, outcome, dev_s, trained, rollout, err);
    if (gang < 0) goto db_fail;
    if (gang == GANG_DONE) {
        if (whet_pg_exec(conn, "COMMIT", 0, NULL, err) < 0) goto db_fail;
        scheduler_wake(s);
        *out = new_message(sizeof(Whet__V1__FinishJobResponse), (void (*)(void *))whet__v1__finish_job_response__init);
        return RPC_OK;
    }
    int end = gang == GANG_JOB ? END_APPLY : end_attempt(conn, req, outcome, dev_s, trained, rollout, err);
    if (end < 0) goto db_fail;
    if (end != END_APPLY) {
        PQclear(PQexec(conn, "ROLLBACK"));
        if (end == END_STALE) return stale_attempt(req->job_id, req->attempt, "end", err);
        *out = new_message(sizeof(Whet__V1__FinishJobResponse), (void (*)(void *))whet__v1__finish_job_response__init);
        return RPC_OK;
    }
    /* The final model is the last checkpoint too when the last step had none (the executor says so), recorded
     * with the end: a refused late success leaves no row. */
    if (req->outcome == WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED && req->final_step &&
        *req->final_object_prefix &&
        checkpoint_insert(conn, req->job_id, req->node_id, req->attempt, req->final_step, req->final_metrics_json,
                          req->final_object_prefix, req->final_bytes, 0, err) < 0)
        goto db_fail;

    const char *jparams[] = {req->job_id, outcome, req->error_code, req->error_message, req->final_object_prefix,
                             tokens,      event_id};
    /* succeeded: the model gets its name; stopped: paused if the tenant asked, else (preempted) back to
     * the queue; failed/cancelled: final. A job that has succeeded stays so: the attempt cancelled
     * after a late success (above) ends without touching it. */
    if (whet_pg_exec(
            conn,
            "WITH upd AS (UPDATE jobs j SET"
            "  status = CASE $2::text WHEN 'succeeded' THEN 'succeeded' WHEN 'failed' THEN 'failed'"
            "    WHEN 'cancelled' THEN 'cancelled'"
            "    ELSE CASE j.desired WHEN 'pause' THEN 'paused' WHEN 'cancel' THEN 'cancelled' ELSE 'queued' END END,"
            "  node_id = NULL, preempt_requested = false,"
            "  finished_at = CASE WHEN $2::text IN ('succeeded', 'failed', 'cancelled') THEN whet_now() END,"
            "  fine_tuned_model = CASE WHEN $2::text = 'succeeded' THEN 'ft:' || j.base_model || ':' ||"
            "    (SELECT name FROM tenants WHERE id = j.tenant_id) || ':' || coalesce(j.suffix, '') || ':' || j.id END,"
            "  final_object_prefix = CASE WHEN $2::text = 'succeeded' THEN nullif($5::text, '') END,"
            "  error = CASE WHEN $2::text = 'failed' THEN jsonb_build_object('code', nullif($3::text, ''), 'message', "
            "$4::text,"
            "    'param', NULL) END"
            " WHERE j.id = $1 AND j.status <> 'succeeded' RETURNING j.id, j.tenant_id, j.status, j.attempt),"
            " tokens AS (INSERT INTO job_progress AS p (job_id, tenant_id, attempt, trained_tokens)"
            "  SELECT id, tenant_id, attempt, $6::bigint FROM upd ON CONFLICT (job_id) DO UPDATE"
            "  SET trained_tokens = greatest(coalesce(p.trained_tokens, 0), EXCLUDED.trained_tokens))"
            " INSERT INTO job_events (id, tenant_id, job_id, level, message)"
            " SELECT $7::text, tenant_id, id, CASE WHEN status = 'failed' THEN 'error' ELSE 'info' END,"
            "  CASE status WHEN 'succeeded' THEN 'The job has successfully completed'"
            "   WHEN 'failed' THEN 'The job failed: ' || $4::text"
            "   WHEN 'cancelled' THEN 'The job was cancelled'"
            "   WHEN 'paused' THEN 'The job was paused'"
            "   ELSE 'The job was preempted; it will resume from its last checkpoint' END FROM upd",
            7, jparams, err) < 0)
        goto db_fail;
    if (*req->result_object_key) {
        /* The step-metrics CSV becomes the job's result file, as on OpenAI. */
        char file_id[40], bytes[24];
        whet_random_id("file-", 24, file_id);
        snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)req->result_bytes);
        const char *fparams[] = {file_id, req->job_id, bytes, req->result_sha256, req->result_object_key};
        if (whet_pg_exec(conn,
                         "WITH f AS (INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key)"
                         "   SELECT $1, tenant_id, 'fine-tune-results', 'step_metrics.csv', $3::bigint, $4, $5"
                         "   FROM jobs WHERE id = $2 RETURNING id)"
                         " UPDATE jobs SET result_files = result_files || to_jsonb(f.id) FROM f WHERE jobs.id = $2",
                         5, fparams, err) < 0)
            goto db_fail;
    }
    if (whet_pg_exec(conn, "COMMIT", 0, NULL, err) < 0) goto db_fail;
    scheduler_wake(s);
    log_info("msg=\"attempt finished\" job=%s attempt=%u outcome=%s node=%s", req->job_id, req->attempt, outcome,
             req->node_id);
    *out = new_message(sizeof(Whet__V1__FinishJobResponse), (void (*)(void *))whet__v1__finish_job_response__init);
    return RPC_OK;
db_fail:
    PQclear(PQexec(conn, "ROLLBACK"));
    return db_unavailable(err);
}

/* Heartbeats have threads of their own (besides --rpc-threads): they keep the nodes' leases, are mostly
 * answered from memory, and the others are left to heartbeats.c's writers without holding a thread. In the
 * shared threads, an overloaded scheduler's FinishJob and checkpoint reports (a 1,000-node fleet of jobs of
 * 10-40 s on 2 cores) queued past their deadline, the heartbeats behind them too, and nodes were lost. */
#define HEARTBEAT_THREADS 8

const struct rpc_method scheduler_methods[] = {
    {"/whet.v1.Scheduler/RegisterNode", &whet__v1__register_request__descriptor, handle_register, free_plain, 0},
    {"/whet.v1.Scheduler/Heartbeat", &whet__v1__heartbeat_request__descriptor, scheduler_heartbeat,
     scheduler_heartbeat_response_free, HEARTBEAT_THREADS},
    {"/whet.v1.Scheduler/ReportEvents", &whet__v1__report_events_request__descriptor, handle_events, free_plain, 0},
    {"/whet.v1.Scheduler/ReportCheckpoint", &whet__v1__checkpoint_report__descriptor, handle_checkpoint, free_plain, 0},
    {"/whet.v1.Scheduler/FinishJob", &whet__v1__finish_job_request__descriptor, handle_finish, free_plain, 0},
    {"/whet.v1.Scheduler/PublishRendezvous", &whet__v1__rendezvous_request__descriptor, scheduler_handle_rendezvous,
     free_plain, 0},
};
const int scheduler_n_methods = (int)(sizeof scheduler_methods / sizeof scheduler_methods[0]);
