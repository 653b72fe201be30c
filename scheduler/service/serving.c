/* serving.c - the model workers' placement, scale to zero and heartbeat reports (see serving.h). */
#include "serving.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "crypto.h"
#include "env.h"
#include "log.h"
#include "pg.h"

#define IDLE_S_DEFAULT 300
/* A training session expires after this long without a call (WHET_SESSION_IDLE_S, as the gateway reads it:
 * gateway/training_sessions.c); until then its worker is kept (migration 0030). */
#define SESSION_IDLE_S_DEFAULT 1800
/* The worker w holds a live training session (its gateway's pin, not expired; $SESSION_IDLE the idle period's
 * parameter). */
#define HOLDS_SESSION_SQL(SESSION_IDLE)                                                                                \
    "EXISTS (SELECT 1 FROM training_sessions t WHERE t.worker_id = w.id AND t.deleted_at IS NULL"                     \
    "   AND t.last_call_at > extract(epoch FROM clock_timestamp()) - " SESSION_IDLE "::int)"
#define MAX_REPLICAS_DEFAULT 4
/* What one replica is taken to generate at most (WHET_SERVE_TOKENS_PER_S_PER_REPLICA): the replicas of a
 * base whose tokens/s average this much are all busy, as they are with queues. A worker whose batch is
 * full on a 7B-class model on one GPU generates a few thousand; the operator sets the figure measured
 * for the model and device (whet-tiny on a CPU core generates more). */
#define TOKENS_PER_S_DEFAULT 2000
/* A replica is busy once it has had requests waiting for a sequence slot this long (in every heartbeat
 * since): a request that waits for the next decode step alone is no queue. */
#define QUEUE_S 2
/* A worker the node never reported since it was placed (its executor restarted before it heard of it)
 * is forgotten after this long, and placed again. */
#define UNSEEN_S 30
/* Serving's priority among jobs: a worker that finds no free device preempts a job of lower priority
 * (the default job priority, 0, is lower), never one of this priority or higher. */
#define SERVE_PRIORITY 1
/* Placements in one cycle at most: one per deployment that wants a replica; the rest wait a cycle. */
#define PLACE_MAX 64

/* A setting from the environment, an integer in [1, max], else (logged) the fallback. */
static int setting(const char *name, int fallback, int max) {
    const char *v = whet_env(name, NULL);
    char *end;
    long n = v ? strtol(v, &end, 10) : fallback;
    if (v && (*end || n < 1 || n > max)) {
        log_warn("msg=\"%s: expected an integer from 1 to %d, using the default\" value=\"%s\" default=%d", name, max, v,
                 fallback);
        n = fallback;
    }
    return (int)n;
}

/* Logs each row of a result (what, base model, where) as `msg` with the names of the first and third
 * columns; returns -1 for a failed query. */
static int log_rows(PGresult *res, const char *msg, const char *what, const char *where) {
    if (!res) return -1;
    for (int i = 0; i < PQntuples(res); i++)
        log_info("msg=\"%s\" %s=%s model=%s %s=%s", msg, what, PQgetvalue(res, i, 0), PQgetvalue(res, i, 1), where,
                 PQgetvalue(res, i, 2));
    PQclear(res);
    return 0;
}

/* The devices of node n that attempts (gang ranks included) and workers hold, as a mask. */
#define HELD_SQL                                                                                                       \
    "(coalesce((SELECT bit_or(a.gpu_mask) FROM job_attempts a WHERE a.node_id = n.id AND a.ended_at IS NULL), 0)"     \
    " | coalesce((SELECT bit_or(r.gpu_mask) FROM gang_ranks r WHERE r.node_id = n.id AND r.ended_at IS NULL), 0)"      \
    " | coalesce((SELECT bit_or(1 << w.device_index) FROM model_workers w WHERE w.node_id = n.id), 0))"

/* What place_one did. */
enum placed { PLACED_NONE_WANTED, PLACED_NO_DEVICE, PLACED_ONE };

/* One wanted replica placed: the deployment asked for most recently first, on a node that has its model
 * cached when one does. The nodes are looked at per deployment that wants a replica (the LIMIT keeps the
 * lateral subquery from being pulled up): with none, the statement reads no node (pulled up, its devices'
 * subqueries ran for every node of the fleet each cycle: 290 ms a cycle at 10k nodes in tests/bench/scale,
 * with no deployment at all). Returns what it did, or -1. */
static int place_one(PGconn *conn, struct whet_err *err) {
    PGresult *res = whet_pg_query(
        conn,
        "SELECT d.base_model, d.pool, n.id, n.dev FROM serving_deployments d"
        " LEFT JOIN LATERAL (SELECT n.id, n.dev FROM (SELECT n.id, n.cached_models, (SELECT i FROM"
        "   generate_series(0, n.gpus - 1) i WHERE (" HELD_SQL " >> i) & 1 = 0 ORDER BY i LIMIT 1) AS dev FROM nodes n"
        "   WHERE n.state = 'ready' AND (d.pool = '' OR n.pool = d.pool)"
        "   AND n.last_heartbeat >= extract(epoch FROM clock_timestamp()) - n.lease_ms / 2000.0) n"
        "   WHERE n.dev IS NOT NULL ORDER BY n.cached_models ? d.base_model DESC, n.id LIMIT 1) n ON true"
        " WHERE d.desired > (SELECT count(*) FROM model_workers w"
        "   WHERE w.base_model = d.base_model AND w.pool = d.pool AND w.state <> 'stopping')"
        " ORDER BY n.id IS NULL, d.last_request_at DESC LIMIT 1",
        0, NULL, err);
    if (!res) return -1;
    if (PQntuples(res) == 0 || PQgetisnull(res, 0, 2)) {
        int placed = PQntuples(res) == 0 ? PLACED_NONE_WANTED : PLACED_NO_DEVICE;
        PQclear(res);
        return placed;
    }
    char id[40];
    whet_random_id("worker-", 24, id);
    const char *params[] = {id, PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2),
                            PQgetvalue(res, 0, 3)};
    int rc = whet_pg_exec(conn,
                          "INSERT INTO model_workers (id, base_model, pool, node_id, device_index)"
                          " VALUES ($1, $2, $3, $4, $5::int)",
                          5, params, err);
    if (rc == 0)
        log_info("msg=\"model worker placed\" worker=%s model=%s pool=\"%s\" node=%s device=%s", id, params[1],
                 params[2], params[3], params[4]);
    PQclear(res);
    return rc < 0 ? -1 : PLACED_ONE;
}

/* A base with no worker left wanting one once every free device is taken (an extra replica for load
 * preempts nothing): the running 1-device attempt of lowest priority below SERVE_PRIORITY on a node of
 * the pool (the newest of them: it loses the least) that holds its device alone (a member of a
 * co-training group frees none: the group goes on there, and the worker would wait for as long as the
 * group runs) is told to checkpoint and stop, as the placement library's preemptions are, and the worker
 * is placed on its device at once (the executor starts it once the job has left the device), so the
 * job, back in the queue, cannot take the device again. One at a time: none while an earlier victim is
 * still stopping. */
static int preempt_for_worker(PGconn *conn, struct whet_err *err) {
    char priority[16], event_id[40], worker_id[40];
    snprintf(priority, sizeof priority, "%d", SERVE_PRIORITY);
    whet_random_id("ftevent-", 24, event_id);
    whet_random_id("worker-", 24, worker_id);
    const char *params[] = {priority, event_id, worker_id};
    return log_rows(
        whet_pg_query(
            conn,
            "WITH v AS (SELECT a.job_id, a.attempt, a.node_id, d.base_model, d.pool,"
            "   coalesce((SELECT min(i) FROM generate_series(0, 31) i WHERE (a.gpu_mask >> i) & 1 = 1), 0) AS dev"
            "   FROM serving_deployments d"
            "   JOIN nodes n ON n.state = 'ready' AND (d.pool = '' OR n.pool = d.pool)"
            "   JOIN job_attempts a ON a.node_id = n.id AND a.ended_at IS NULL AND a.world_size = 1"
            "   AND NOT EXISTS (SELECT 1 FROM job_attempts o WHERE o.node_id = a.node_id AND o.ended_at IS NULL"
            "     AND o.job_id <> a.job_id AND o.gpu_mask & a.gpu_mask <> 0)"
            "   JOIN jobs j ON j.id = a.job_id AND j.priority < $1::int AND NOT j.preempt_requested"
            "   WHERE d.desired > 0 AND NOT EXISTS (SELECT 1 FROM model_workers w WHERE w.base_model = d.base_model"
            "     AND w.pool = d.pool AND w.state <> 'stopping')"
            "   AND NOT EXISTS (SELECT 1 FROM jobs p JOIN job_attempts pa ON pa.job_id = p.id AND pa.ended_at IS NULL"
            "     WHERE p.preempt_requested)"
            "   ORDER BY j.priority, a.started_at DESC LIMIT 1),"
            " j AS (UPDATE jobs SET preempt_requested = true FROM v WHERE jobs.id = v.job_id"
            "   RETURNING jobs.id, jobs.tenant_id),"
            " c AS (INSERT INTO node_commands (node_id, job_id, attempt, kind, grace_ms, reason)"
            "   SELECT node_id, job_id, attempt, 'stop', 30000, 'preempted' FROM v),"
            " e AS (INSERT INTO job_events (id, tenant_id, job_id, level, message, data)"
            "   SELECT $2, j.tenant_id, j.id, 'warn', 'The job is being preempted for a model worker;"
            " it checkpoints now and resumes later', jsonb_build_object('for_model_worker', v.base_model) FROM j, v),"
            " wk AS (INSERT INTO model_workers (id, base_model, pool, node_id, device_index)"
            "   SELECT $3, base_model, pool, node_id, dev FROM v)"
            " SELECT job_id, base_model, node_id FROM v",
            3, params, err),
        "preempting a job for a model worker", "job", "node");
}

int scheduler_serving_cycle(PGconn *conn, struct whet_err *err) {
    static int idle_s, max_replicas, tokens_per_s, session_idle_s;
    if (!idle_s) {
        idle_s = setting("WHET_SERVE_IDLE_S", IDLE_S_DEFAULT, 86400 * 30);
        session_idle_s = setting("WHET_SESSION_IDLE_S", SESSION_IDLE_S_DEFAULT, 86400 * 30);
        max_replicas = setting("WHET_SERVE_MAX_REPLICAS", MAX_REPLICAS_DEFAULT, 1024);
        tokens_per_s = setting("WHET_SERVE_TOKENS_PER_S_PER_REPLICA", TOKENS_PER_S_DEFAULT, 1000000000);
    }
    char idle[16], max[16], queue[16], capacity[16], session_idle[16];
    snprintf(idle, sizeof idle, "%d", idle_s);
    snprintf(session_idle, sizeof session_idle, "%d", session_idle_s);
    snprintf(max, sizeof max, "%d", max_replicas);
    snprintf(queue, sizeof queue, "%d", QUEUE_S);
    snprintf(capacity, sizeof capacity, "%d", tokens_per_s);
    const char *params[] = {idle, max, queue, capacity, session_idle}, *stop_params[] = {session_idle};
    if (log_rows(whet_pg_query(conn,
                               "DELETE FROM model_workers w USING nodes n WHERE n.id = w.node_id AND n.state <> 'ready'"
                               " RETURNING w.id, w.base_model, w.node_id",
                               0, NULL, err),
                 "model worker lost with its node", "worker", "node") < 0 ||
        /* the replicas wanted (migrations 0021, 0024): none when idle; one more while the ready ones are
         * busy (every one has had a queue for QUEUE_S, or they generate the capacity's tokens/s on average)
         * and none is starting; as many while they were busy within the idle period; else one; and never
         * fewer than the replicas that hold live training sessions (migration 0030) */
        whet_pg_exec(conn,
                     "WITH now AS (SELECT extract(epoch FROM clock_timestamp()) AS t),"
                     " x AS (SELECT d.base_model, d.pool, s.busy, greatest(s.holding, CASE"
                     "     WHEN d.last_request_at <= now.t - $1::int THEN 0"
                     "     WHEN s.busy AND s.starting = 0 THEN least($2::int, s.ready + 1)"
                     "     WHEN d.busy_at > now.t - $1::int THEN greatest(1, least(d.desired, $2::int)) ELSE 1 END) AS want"
                     "   FROM serving_deployments d CROSS JOIN now CROSS JOIN LATERAL (SELECT"
                     "     count(*) FILTER (WHERE w.state = 'ready') AS ready,"
                     "     count(*) FILTER (WHERE w.state = 'ready' AND w.queued_since <= now.t - $3::int) AS queued,"
                     "     count(*) FILTER (WHERE w.state = 'starting') AS starting,"
                     "     coalesce(sum(w.tokens_per_s) FILTER (WHERE w.state = 'ready'), 0) AS tokens,"
                     "     count(*) FILTER (WHERE w.state <> 'stopping' AND " HOLDS_SESSION_SQL("$5") ") AS holding"
                     "     FROM model_workers w WHERE w.base_model = d.base_model AND w.pool = d.pool) c"
                     "   CROSS JOIN LATERAL (SELECT c.*, c.ready > 0 AND (c.ready = c.queued"
                     "     OR c.tokens >= c.ready * $4::bigint) AS busy) s)"
                     " UPDATE serving_deployments d SET desired = x.want,"
                     " busy_at = CASE WHEN x.busy THEN (SELECT t FROM now) ELSE d.busy_at END FROM x"
                     " WHERE d.base_model = x.base_model AND d.pool = x.pool AND (d.desired <> x.want OR x.busy)",
                     5, params, err) < 0 ||
        /* the replicas beyond what is wanted stop: those holding no live training session first (a holder's
         * sessions would move to another replica, losing the gradients since their last optim_step), the newest
         * first (a ready one is kept over a starting one) */
        log_rows(whet_pg_query(conn,
                               "UPDATE model_workers w SET state = 'stopping' FROM (SELECT w.id, d.desired, row_number()"
                               "   OVER (PARTITION BY w.base_model, w.pool ORDER BY " HOLDS_SESSION_SQL("$1") " DESC,"
                               "   w.ready_at NULLS LAST, w.started_at) AS k"
                               "   FROM model_workers w JOIN serving_deployments d USING (base_model, pool)"
                               "   WHERE w.state <> 'stopping') x"
                               " WHERE w.id = x.id AND x.k > x.desired RETURNING w.id, w.base_model, w.node_id",
                               1, stop_params, err),
                 "model worker idle: stopping it", "worker", "node") < 0)
        return -1;
    /* A preemption only when a replica is wanted and no device is free: its statement joins the running
     * attempts of the whole fleet. */
    for (int i = 0; i < PLACE_MAX; i++) {
        int placed = place_one(conn, err);
        if (placed < 0) return -1;
        if (placed == PLACED_NO_DEVICE) return preempt_for_worker(conn, err);
        if (placed == PLACED_NONE_WANTED) break;
    }
    return 0;
}

int scheduler_serving_heartbeat(PGconn *conn, const Whet__V1__HeartbeatRequest *req, Whet__V1__HeartbeatResponse *resp,
                                struct whet_err *err) {
    json_t *reports = json_array();
    for (size_t i = 0; i < req->n_serve_workers; i++) {
        const Whet__V1__ServeWorkerState *w = req->serve_workers[i];
        json_array_append_new(reports, json_pack("{s:s, s:s, s:s, s:i, s:i, s:I}", "id", w->worker_id, "state",
                                                 w->state, "address", w->address, "waiting",
                                                 (int)w->requests_waiting, "running", (int)w->requests_running,
                                                 "tokens_per_s", (json_int_t)w->tokens_per_s));
        if (!strcmp(w->state, "exited"))
            log_warn("msg=\"model worker ended\" worker=%s node=%s why=\"%s\"", w->worker_id, req->node_id, w->message);
    }
    char *list = json_dumps(reports, JSON_COMPACT);
    json_decref(reports);
    const char *params[] = {req->node_id, list};
    char unseen[16];
    snprintf(unseen, sizeof unseen, "%d", UNSEEN_S);
    const char *params3[] = {req->node_id, list, unseen};
    /* Ready ones take their address, and each its load (requests waiting, tokens/s): written when it
     * changed (an idle worker's stays 0); a request being answered
     * is a request (a stream longer than the idle period does not idle its worker out). A node that
     * reports none (the common case) costs the one statement below. */
    int rc = req->n_serve_workers == 0 ||
                     (log_rows(whet_pg_query(conn,
                                             "WITH r AS (SELECT * FROM jsonb_to_recordset($2::jsonb) AS r(id text, state text, address text))"
                                             " UPDATE model_workers w SET state = 'ready', address = r.address,"
                                             " ready_at = extract(epoch FROM clock_timestamp()) FROM r"
                                             " WHERE w.id = r.id AND w.node_id = $1 AND w.state = 'starting' AND r.state = 'ready'"
                                             " RETURNING w.id, w.base_model, w.address",
                                             2, params, err),
                               "model worker ready", "worker", "address") == 0 &&
                      whet_pg_exec(conn,
                                   "WITH r AS (SELECT * FROM jsonb_to_recordset($2::jsonb) AS r(id text, state text, waiting int,"
                                   "   running int, tokens_per_s bigint) WHERE r.state = 'ready'),"
                                   " busy AS (UPDATE serving_deployments d SET last_request_at = extract(epoch FROM clock_timestamp())"
                                   "   FROM model_workers w JOIN r ON r.id = w.id WHERE w.node_id = $1 AND r.running + r.waiting > 0"
                                   "   AND d.base_model = w.base_model AND d.pool = w.pool"
                                   "   AND d.last_request_at < extract(epoch FROM clock_timestamp()) - 1)"
                                   " UPDATE model_workers w SET requests_waiting = r.waiting,"
                                   "   tokens_per_s = r.tokens_per_s, queued_since = CASE WHEN r.waiting > 0"
                                   "   THEN coalesce(w.queued_since, extract(epoch FROM clock_timestamp())) END FROM r"
                                   " WHERE w.id = r.id AND w.node_id = $1"
                                   "   AND (w.requests_waiting <> r.waiting OR w.tokens_per_s <> r.tokens_per_s)",
                                   2, params, err) >= 0)
                 ? 0
                 : -1;
    /* Ended ones go, and so do those the node no longer reports (its executor restarted: they are gone),
     * a starting one once it had time to be heard of; the rest the node is to run are its answer. */
    PGresult *res = rc < 0 ? NULL
                           : whet_pg_query(conn,
                                           "WITH r AS (SELECT * FROM jsonb_to_recordset($2::jsonb) AS r(id text, state text)),"
                                           " gone AS (DELETE FROM model_workers w WHERE w.node_id = $1 AND"
                                           "   (w.id IN (SELECT id FROM r WHERE state = 'exited') OR (w.id NOT IN (SELECT id FROM r)"
                                           "   AND (w.state <> 'starting' OR w.started_at < extract(epoch FROM clock_timestamp()) - $3::int)))"
                                           "   RETURNING w.id, w.base_model, w.node_id)"
                                           " SELECT 'gone', id, base_model, node_id FROM gone UNION ALL"
                                           " SELECT 'run', w.id, json_build_object('id', b.id, 'object_prefix', b.object_prefix, 'sha256',"
                                           "   b.sha256)::text, '' FROM model_workers w JOIN base_models b ON b.id = w.base_model"
                                           " WHERE w.node_id = $1 AND w.state <> 'stopping' AND w.id NOT IN (SELECT id FROM gone)",
                                           3, params3, err);
    free(list);
    if (!res) return -1;
    int n = PQntuples(res);
    resp->serve_workers = xcalloc((size_t)n + 1, sizeof *resp->serve_workers);
    for (int i = 0; i < n; i++) {
        if (!strcmp(PQgetvalue(res, i, 0), "gone")) {
            log_info("msg=\"model worker gone\" worker=%s model=%s node=%s", PQgetvalue(res, i, 1), PQgetvalue(res, i, 2),
                     PQgetvalue(res, i, 3));
            continue;
        }
        Whet__V1__ServeWorker *w = xcalloc(1, sizeof *w);
        whet__v1__serve_worker__init(w);
        w->worker_id = xstrdup(PQgetvalue(res, i, 1));
        w->base_model_json = xstrdup(PQgetvalue(res, i, 2));
        resp->serve_workers[resp->n_serve_workers++] = w;
    }
    PQclear(res);
    return 0;
}

void scheduler_serving_free(Whet__V1__HeartbeatResponse *resp) {
    for (size_t i = 0; i < resp->n_serve_workers; i++) {
        free(resp->serve_workers[i]->worker_id);
        free(resp->serve_workers[i]->base_model_json);
        free(resp->serve_workers[i]);
    }
    free(resp->serve_workers);
}
