/* heartbeats.c - the executors' heartbeats, written in batches (group commit).
 *
 * One heartbeat is small work for PostgreSQL (renew a lease, upsert a few progress rows, hand out the
 * node's waiting commands) and most of its cost is per statement: the round trip, the executor start,
 * the commit. A fleet of 10k nodes at a 2 s interval is 5,000 of them a second. So heartbeats that
 * arrive together share one statement: a handler queues its node's heartbeat and defers its reply
 * (rpc_defer), its thread free for the next call at once; HEARTBEAT_WRITERS_MAX writer threads, each with
 * its own connection, take everything queued (up to HEARTBEAT_BATCH_MAX) and run heartbeat_batch_sql,
 * then answer each heartbeat of the batch. While they write, the next heartbeats queue up and become the
 * next batches, so a quiet fleet writes each heartbeat alone, at once, and a busy one writes fewer, bigger
 * statements with no timer (PostgreSQL's and MySQL's group commit work the same way). Two writers: one
 * alone would use one of the database's cores. Never two batches with the same node: a batch's rows are
 * its nodes', its jobs' progress and its nodes' commands, so concurrent batches seldom wait on each
 * other's row locks (a gang's ranks on nodes of two batches share their job's progress row, upserted in
 * job order).
 *
 * Before, the handler thread waited for its batch, and the heartbeat method's 8 threads were all the
 * heartbeats in flight: batches of 2-3, and whenever PostgreSQL was slow for a moment (a CPU-starved
 * machine, tests/bench/scale at 10k nodes), the calls behind them waited for a thread past their 3 s
 * deadline, thousands in a second. Now every heartbeat that arrives reaches the queue, and a slow statement
 * makes the next batch bigger, not the wait for a thread longer.
 *
 * What a heartbeat does is unchanged (handlers.c answers the call): a node's lease is renewed unless it
 * was declared lost (it is told to register again, and abandons its attempts), written to its row only
 * every quarter lease (service_internal.h); then, for a node so
 * renewed, the progress of its running attempts is written to
 * job_progress (migration 0029: narrow and without secondary indexes, so a job's update is HOT; a job
 * that already succeeded keeps what it has; the step and token counts only grow; a row that would not
 * change is not written: most heartbeats repeat the last one's step; and progress.c sends a job's step at
 * most every progress_ms; a stale attempt's progress, of an attempt that has ended, matches no row and is
 * dropped: the fence of handlers.c), and up to HEARTBEAT_COMMANDS_MAX of its
 * waiting commands are handed out, oldest first (a STOP never overtakes its START), marked delivered. The
 * commands are delivered in the answer to the call: a failure after the statement loses them as a lost
 * answer would. A node twice in the queue (an executor that retried) waits for the next batch. */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "json_text.h"
#include "log.h"
#include "pg.h"
#include "service_internal.h"
#include "serving.h"
#include "utf8.h"

#define HEARTBEAT_BATCH_MAX 512
#define HEARTBEAT_WRITERS_MAX 2
#define HEARTBEAT_COMMANDS_MAX 32 /* a node's commands handed out in one answer */
#define STRINGIFY(x) #x
#define COMMANDS_MAX_SQL_(x) STRINGIFY(x)
#define COMMANDS_MAX_SQL COMMANDS_MAX_SQL_(HEARTBEAT_COMMANDS_MAX)

/* The nodes are found by = ANY (ARRAY(…)): the prepared statement's generic plan joined r to a sequential
 * scan of nodes (0.43 of its 1.46 ms at 2,000 nodes, growing with the fleet). A node's lease is written only
 * when due (LEASE_RENEW_AFTER_SQL): k reads the batch's nodes, u renews the due ones (locking their rows, so
 * a node that the lease expiry declared lost meanwhile is not renewed: the expiry only takes nodes whose
 * stored lease is far older than due, so a node read as not due cannot be one), and n is every node renewed.
 * Rows: per renewed node one with seq NULL (whether model workers are placed on it, and in the grace_ms
 * column the milliseconds until its stored lease falls due for a write: heartbeat_quiet.c), then its
 * commands; ordered by node and seq. Progress rows of one job from two nodes of a batch (a gang's ranks)
 * are one upsert (DISTINCT ON), the latest step winning. */
static const char *const heartbeat_batch_sql =
    "WITH r AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(node text, progress jsonb)),"
    " k AS (SELECT nodes.id, " LEASE_RENEW_AFTER_SQL " - (extract(epoch FROM clock_timestamp()) - nodes.last_heartbeat)"
    "   AS due_in FROM nodes WHERE nodes.id = ANY (ARRAY(SELECT node FROM r)) AND nodes.state <> 'lost'),"
    " u AS (UPDATE nodes SET last_heartbeat = extract(epoch FROM clock_timestamp())"
    "   WHERE nodes.id = ANY (ARRAY(SELECT id FROM k WHERE due_in < 0)) AND nodes.state <> 'lost'"
    "   RETURNING nodes.id, " LEASE_RENEW_AFTER_SQL " AS due_in),"
    " n AS (SELECT id, due_in FROM k WHERE due_in >= 0 UNION ALL SELECT id, due_in FROM u),"
    " p AS (INSERT INTO job_progress AS p (job_id, tenant_id, attempt, last_step, total_steps, trained_tokens,"
    "   resume_step, started_at) SELECT DISTINCT ON (j.id) j.id, j.tenant_id, a.attempt, x.step, nullif(x.total, 0),"
    "   x.tokens, a.resume_step, a.started_at"
    "   FROM r JOIN n ON n.id = r.node"
    "   CROSS JOIN LATERAL jsonb_to_recordset(r.progress) AS x(job_id text, attempt int, step int, total int, tokens "
    "bigint)"
    "   JOIN job_attempts a ON a.job_id = x.job_id AND a.attempt = x.attempt AND a.node_id = n.id"
    "   JOIN jobs j ON j.id = x.job_id WHERE a.ended_at IS NULL AND j.status <> 'succeeded' ORDER BY j.id, x.step DESC"
    "   ON CONFLICT (job_id) DO UPDATE SET attempt = EXCLUDED.attempt, last_step = greatest(p.last_step,"
    "   EXCLUDED.last_step), total_steps = EXCLUDED.total_steps, trained_tokens = greatest(coalesce(p.trained_tokens,"
    "   0), EXCLUDED.trained_tokens), resume_step = EXCLUDED.resume_step, started_at = EXCLUDED.started_at"
    "   WHERE (p.attempt, p.total_steps, p.resume_step, p.started_at) IS DISTINCT FROM (EXCLUDED.attempt,"
    "   EXCLUDED.total_steps, EXCLUDED.resume_step, EXCLUDED.started_at) OR EXCLUDED.last_step > p.last_step"
    "   OR EXCLUDED.trained_tokens > coalesce(p.trained_tokens, 0)),"
    " d AS (UPDATE node_commands SET delivered_at = extract(epoch FROM clock_timestamp())"
    "   WHERE seq IN (SELECT c.seq FROM n CROSS JOIN LATERAL (SELECT seq FROM node_commands"
    "     WHERE node_id = n.id AND delivered_at IS NULL ORDER BY seq LIMIT " COMMANDS_MAX_SQL ") c)"
    "   RETURNING node_id, seq, kind, job_id, attempt, coalesce(manifest::text, '') AS manifest, grace_ms, reason)"
    " SELECT n.id, NULL::bigint AS seq, EXISTS (SELECT 1 FROM model_workers w WHERE w.node_id = n.id)::text,"
    "   '', 0, '', floor(n.due_in * 1000)::int, '' FROM n"
    " UNION ALL SELECT * FROM d ORDER BY 1, 2 NULLS FIRST";

/* A heartbeat waiting for its batch. */
struct pending {
    const Whet__V1__HeartbeatRequest *req;
    Whet__V1__HeartbeatResponse *resp;
    const Whet__V1__JobProgress **due; /* the reports of req to write (progress.c) */
    size_t n_due;
    int failed, known, serving;
    double lease_due_in; /* seconds until the node's stored lease falls due for a write */
    struct quiet_mark mark;
    struct whet_err err;
    struct rpc_reply *reply; /* its call, answered by the writer */
    double started;          /* when its handler began (the handled-time metric) */
    struct pending *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER; /* queued heartbeats, a batch ended, or stop */
static struct pending *queue_head, **queue_tail = &queue_head;
/* The writer threads and the batch each is writing (n 0: none). */
static struct writer {
    pthread_t thread;
    struct pending *batch[HEARTBEAT_BATCH_MAX];
    int n;
} writers[HEARTBEAT_WRITERS_MAX];
static struct scheduler *writing_for; /* non-NULL while the writers run */
static int writers_stopping;

/* The prepared statement, per connection (each writer thread has its own). */
static __thread PGconn *prepared_on;

static PGresult *run_batch(PGconn *conn, const char *list, struct whet_err *err) {
    const char *params[] = {list};
    for (int attempt = 0; attempt < 2; attempt++) {
        if (prepared_on != conn) {
            PGresult *p = PQprepare(conn, "heartbeat_batch", heartbeat_batch_sql, 1, NULL);
            int ok = PQresultStatus(p) == PGRES_COMMAND_OK;
            if (!ok) whet_pg_error(p, conn, err);
            PQclear(p);
            if (!ok) return NULL;
            prepared_on = conn;
        }
        PGresult *res = PQexecPrepared(conn, "heartbeat_batch", 1, params, NULL, NULL, 0);
        if (PQresultStatus(res) == PGRES_TUPLES_OK) return res;
        /* A new connection at the old one's address has no statement yet: prepare it and run again. */
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        int missing = state && !strcmp(state, "26000");
        whet_pg_error(res, conn, err);
        PQclear(res);
        if (!missing) return NULL;
        prepared_on = NULL;
    }
    return NULL;
}

static int by_node(const void *a, const void *b) {
    return strcmp((*(struct pending *const *)a)->req->node_id, (*(struct pending *const *)b)->req->node_id);
}

static struct pending *find(struct pending **batch, int n, const char *node) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(node, batch[mid]->req->node_id);
        if (!c) return batch[mid];
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

static Whet__V1__Command__Kind command_kind(const char *kind) {
    if (!strcmp(kind, "start")) return WHET__V1__COMMAND__KIND__START;
    if (!strcmp(kind, "checkpoint")) return WHET__V1__COMMAND__KIND__CHECKPOINT;
    if (!strcmp(kind, "stop")) return WHET__V1__COMMAND__KIND__STOP;
    return WHET__V1__COMMAND__KIND__CANCEL;
}

/* The statement's parameter: [{"node", "progress": [{job_id, attempt, step, total, tokens}]}], written as
 * text at once (building jansson objects, then dumping them, was ~5% of the scheduler's CPU in
 * tests/bench/scale). */
static void batch_json(struct whet_buf *b, struct pending **batch, int n) {
    whet_buf_puts(b, "[");
    for (int i = 0; i < n; i++) {
        const struct pending *p = batch[i];
        whet_buf_puts(b, i ? ",{\"node\":" : "{\"node\":");
        whet_json_put_string(b, p->req->node_id, strlen(p->req->node_id));
        whet_buf_puts(b, ",\"progress\":[");
        for (size_t k = 0; k < p->n_due; k++) {
            const Whet__V1__JobProgress *r = p->due[k];
            whet_buf_puts(b, k ? ",{\"job_id\":" : "{\"job_id\":");
            whet_json_put_string(b, r->job_id, strlen(r->job_id));
            whet_buf_printf(
                b, ",\"attempt\":%" PRIu32 ",\"step\":%" PRIu32 ",\"total\":%" PRIu32 ",\"tokens\":%" PRIu64 "}",
                r->attempt, r->step, r->total_steps, r->trained_tokens);
        }
        whet_buf_puts(b, "]}");
    }
    whet_buf_puts(b, "]");
}

/* Writes batch[0..n) (sorted by node, each node once) and fills in each one's answer. */
static void write_batch(PGconn *conn, struct pending **batch, int n) {
    struct whet_buf text = {0};
    batch_json(&text, batch, n);
    for (int i = 0; i < n; i++) batch[i]->mark = quiet_mark(batch[i]->req->node_id);
    /* The leases' due times count from before the statement: an answer from memory never outlasts them. */
    double asked = whet_now_mono();
    struct whet_err err;
    PGresult *res = run_batch(conn, text.data, &err);
    whet_buf_free(&text);
    scheduler_metrics_heartbeats(n);
    if (!res) {
        for (int i = 0; i < n; i++) batch[i]->failed = 1, batch[i]->err = err;
        return;
    }
    /* Each node's commands: counted first, so that each answer's array is allocated once. */
    for (int r = 0; r < PQntuples(res); r++) {
        struct pending *p = find(batch, n, PQgetvalue(res, r, 0));
        if (!p) continue;
        if (PQgetisnull(res, r, 1)) {
            p->known = 1;
            p->serving = !strcmp(PQgetvalue(res, r, 2), "true");
            p->lease_due_in = atoi(PQgetvalue(res, r, 6)) / 1000.0;
        } else {
            p->resp->n_commands++;
        }
    }
    double now = whet_now_mono();
    for (int i = 0; i < n; i++) {
        if (batch[i]->known) {
            scheduler_progress_written(batch[i]->due, batch[i]->n_due, now);
            scheduler_progress_seen(batch[i]->req, now);
        }
        /* Commands handed out now leave the node quiet too (what the mark read was delivered), unless the
         * answer was full: more may wait. */
        Whet__V1__HeartbeatResponse *resp = batch[i]->resp;
        quiet_written(batch[i]->req->node_id, batch[i]->mark,
                      batch[i]->known && !batch[i]->serving && resp->n_commands < HEARTBEAT_COMMANDS_MAX,
                      asked + batch[i]->lease_due_in);
        resp->commands = xcalloc(resp->n_commands ? resp->n_commands : 1, sizeof *resp->commands);
        resp->n_commands = 0;
    }
    for (int r = 0; r < PQntuples(res); r++) {
        struct pending *p = find(batch, n, PQgetvalue(res, r, 0));
        if (!p || PQgetisnull(res, r, 1)) continue;
        Whet__V1__Command *c = xcalloc(1, sizeof *c);
        whet__v1__command__init(c);
        c->kind = command_kind(PQgetvalue(res, r, 2));
        c->job_id = xstrdup(PQgetvalue(res, r, 3));
        c->attempt = (uint32_t)atoi(PQgetvalue(res, r, 4));
        c->manifest_json = scheduler_manifest_deliver(conn, PQgetvalue(res, r, 5));
        c->grace_ms = (uint32_t)atoi(PQgetvalue(res, r, 6));
        c->reason = xstrdup(PQgetvalue(res, r, 7));
        p->resp->commands[p->resp->n_commands++] = c;
        log_info("msg=\"command delivered\" node=%s kind=%s job=%s attempt=%u", p->req->node_id, PQgetvalue(res, r, 2),
                 c->job_id, c->attempt);
    }
    PQclear(res);
}

/* 1 when node is in a batch being written. */
static int in_flight(const char *node) {
    for (int w = 0; w < HEARTBEAT_WRITERS_MAX; w++)
        if (writers[w].n && find(writers[w].batch, writers[w].n, node)) return 1;
    return 0;
}

/* Takes up to HEARTBEAT_BATCH_MAX queued heartbeats into batch[], oldest first, each node once and none
 * that another batch being written holds (under the lock): a node's second heartbeat stays queued. Those
 * whose call's deadline has passed go to *expired instead: their node has stopped waiting, and the commands
 * their statement would hand out would be lost with the answer (as a call that waited for a thread past its
 * deadline is not run, rpc.c). Returns how many, sorted by node. */
static int take_batch(struct pending **batch, struct pending **expired) {
    int n = 0;
    struct pending **link = &queue_head;
    while (*link && n < HEARTBEAT_BATCH_MAX) {
        struct pending *p = *link;
        if (rpc_reply_expired(p->reply)) {
            *link = p->next;
            p->next = *expired;
            *expired = p;
            continue;
        }
        if (in_flight(p->req->node_id)) {
            link = &p->next;
            continue;
        }
        *link = p->next;
        batch[n++] = p;
    }
    qsort(batch, (size_t)n, sizeof *batch, by_node);
    /* A node twice in the batch: its later heartbeats go back to the front of the queue. */
    int kept = 0;
    for (int i = 0; i < n; i++) {
        if (kept && !strcmp(batch[kept - 1]->req->node_id, batch[i]->req->node_id)) {
            batch[i]->next = queue_head;
            queue_head = batch[i];
        } else {
            batch[kept++] = batch[i];
        }
    }
    queue_tail = &queue_head;
    while (*queue_tail) queue_tail = &(*queue_tail)->next;
    return kept;
}

void scheduler_heartbeat_response_free(ProtobufCMessage *m) {
    Whet__V1__HeartbeatResponse *resp = (Whet__V1__HeartbeatResponse *)m;
    for (size_t i = 0; i < resp->n_commands; i++) {
        free(resp->commands[i]->job_id);
        free(resp->commands[i]->manifest_json);
        free(resp->commands[i]->reason);
        free(resp->commands[i]);
    }
    free(resp->commands);
    scheduler_serving_free(resp);
    free(resp);
}

/* The answer to a written heartbeat, in *out; frees p. A node declared lost, or never registered, is told
 * to register again and has no commands. A node that neither reports nor is given model workers has
 * nothing for the serving step to change or answer: its statement, planned each time (serving.c), cost
 * about as much as the heartbeat's. */
static int answer(struct scheduler *s, struct pending *p, ProtobufCMessage **out, struct whet_err *err) {
    Whet__V1__HeartbeatResponse *resp = p->resp;
    const Whet__V1__HeartbeatRequest *req = p->req;
    int failed = p->failed, known = p->known, serving = p->serving;
    if (failed) *err = p->err;
    free(p->due);
    free(p);
    PGconn *conn = NULL;
    if (!failed && known && (serving || req->n_serve_workers > 0) &&
        (!(conn = scheduler_handler_conn(s, err)) || scheduler_serving_heartbeat(conn, req, resp, err) < 0))
        failed = 1;
    if (failed) {
        scheduler_heartbeat_response_free(&resp->base);
        return scheduler_db_unavailable(err);
    }
    resp->reregister = !known;
    *out = &resp->base;
    return RPC_OK;
}

/* A writer thread: batches of what is queued, until stopped with nothing left. */
static void *writer_main(void *arg) {
    struct writer *w = arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        struct pending *expired = NULL;
        while (!(w->n = take_batch(w->batch, &expired)) && !expired && !writers_stopping)
            pthread_cond_wait(&work, &lock);
        if (!w->n && !expired) break;
        pthread_mutex_unlock(&lock);
        while (expired) {
            struct pending *p = expired;
            expired = p->next;
            struct whet_err late;
            whet_errf(&late, "the heartbeat waited for its statement past its deadline");
            rpc_reply_send(p->reply, RPC_DEADLINE_EXCEEDED, NULL, &late);
            scheduler_heartbeat_response_free(&p->resp->base);
            free(p->due);
            free(p);
        }
        pthread_mutex_lock(&lock);
        if (!w->n) continue;
        pthread_mutex_unlock(&lock);
        struct whet_err err;
        PGconn *conn = scheduler_handler_conn(writing_for, &err);
        if (conn) {
            write_batch(conn, w->batch, w->n);
        } else {
            for (int i = 0; i < w->n; i++) w->batch[i]->failed = 1, w->batch[i]->err = err;
        }
        /* Written: its nodes may go in the next batches (answering frees what in_flight reads of them). */
        pthread_mutex_lock(&lock);
        int n = w->n;
        w->n = 0;
        pthread_cond_broadcast(&work);
        pthread_mutex_unlock(&lock);
        double now = whet_now_mono();
        for (int i = 0; i < n; i++) {
            struct rpc_reply *reply = w->batch[i]->reply;
            double started = w->batch[i]->started;
            ProtobufCMessage *resp = NULL;
            int status = answer(writing_for, w->batch[i], &resp, &err);
            scheduler_metrics_heartbeat_handled(now - started);
            rpc_reply_send(reply, status, resp, &err);
        }
        pthread_mutex_lock(&lock);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

void heartbeat_writers_start(struct scheduler *s) {
    writing_for = s;
    writers_stopping = 0;
    for (int i = 0; i < HEARTBEAT_WRITERS_MAX; i++) pthread_create(&writers[i].thread, NULL, writer_main, &writers[i]);
}

void heartbeat_writers_stop(void) {
    if (!writing_for) return;
    pthread_mutex_lock(&lock);
    writers_stopping = 1;
    pthread_cond_broadcast(&work);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < HEARTBEAT_WRITERS_MAX; i++) pthread_join(writers[i].thread, NULL);
    writing_for = NULL;
}

int scheduler_heartbeat(void *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out, struct whet_err *err) {
    struct scheduler *s = ctx;
    const Whet__V1__HeartbeatRequest *req = (const Whet__V1__HeartbeatRequest *)msg;
    double started = whet_now_mono();
    Whet__V1__HeartbeatResponse *resp = xcalloc(1, sizeof *resp);
    whet__v1__heartbeat_response__init(resp);
    *out = &resp->base;
    /* A node id that is not UTF-8 was never registered (PostgreSQL refuses it), and would spoil its batch's JSON. */
    if (!utf8_valid(req->node_id, strlen(req->node_id))) {
        resp->reregister = 1;
        return RPC_OK;
    }
    struct pending *p = xcalloc(1, sizeof *p);
    p->req = req;
    p->resp = resp;
    p->started = started;
    p->due = xcalloc(req->n_jobs ? req->n_jobs : 1, sizeof *p->due);
    p->n_due = scheduler_progress_due(req, started, 0, p->due);
    /* Nothing to write and, as far as the NOTIFYs tell, nothing to hand out: answered at once. */
    if (!p->n_due && !req->n_serve_workers && quiet_answer(req->node_id, started)) {
        free(p->due);
        free(p);
        scheduler_metrics_heartbeat_quiet();
        scheduler_metrics_heartbeat_handled(whet_now_mono() - started);
        return RPC_OK;
    }
    /* Written: with every job's news, so that the node's jobs fall due together again (each on its own
     * clock, a node of 8 jobs had one due at almost every heartbeat, and none could be quiet). */
    p->n_due = scheduler_progress_due(req, started, 1, p->due);
    pthread_mutex_lock(&lock);
    if (writing_for && (p->reply = rpc_defer())) {
        *out = NULL;
        *queue_tail = p;
        queue_tail = &p->next;
        pthread_cond_signal(&work);
        pthread_mutex_unlock(&lock);
        return RPC_OK;
    }
    pthread_mutex_unlock(&lock);
    /* Called outside a leading scheduler's server (tests call handlers directly): written here, alone. */
    PGconn *conn = scheduler_handler_conn(s, err);
    if (conn) {
        write_batch(conn, &p, 1);
    } else {
        p->failed = 1;
        p->err = *err;
    }
    *out = NULL;
    int status = answer(s, p, out, err);
    scheduler_metrics_heartbeat_handled(whet_now_mono() - started);
    return status;
}
