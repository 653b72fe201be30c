/* db.c - asynchronous libpq inside an h2o 2.2 event loop (see db.h for the contract).
 *
 * The technique is that of TechEmpower's h2o entry: each connection's socket is dup()ed into an h2o
 * socket created with H2O_SOCKET_FLAG_DONT_READ, so the loop only tells us when it is readable or
 * writable and libpq does the I/O (PQconnectPoll while connecting, PQconsumeInput/PQgetResult and
 * PQflush once connected). Connections run in pipeline mode.
 *
 * What travels on a connection is a FIFO of segments, each some statements followed by one
 * PQpipelineSync (so each segment is one implicit transaction):
 *   SETUP  - at connect: SET ROLE whet_app (tenant pool), statement_timeout, every prepared statement
 *   TENANT - set_config('whet.tenant_id', $1, false), once, before the connection's first request of a
 *            tenant: the session's tenant (its own segment, so a failing query never rolls the setting back)
 *   QUERY  - the statements of one or more requests (db_query, db_transaction), each request's led by
 *            set_config('whet.tenant_id', $1, true) when its tenant is not the one in effect there:
 *            the setting lasts to the segment's end (its implicit transaction), so requests of many
 *            tenants share a segment as those of one do
 * Results come back in the same order: for each statement one result and a NULL, then a
 * PGRES_PIPELINE_SYNC for the segment, preceded by an error and a NULL when the commit failed (a deferred
 * trigger raised: seg_commit_failed).
 *
 * Batching: libpq 15's PQpipelineSync always flushes, so a segment per request cost a send(2) per
 * request, and a wakeup of the backend for each. Instead the requests a loop iteration submits to a
 * connection are held, then sent from the loop's zero timeout after the iteration's events, in order of
 * tenant, sharing one QUERY segment (the connection's `open` one, or a few: see conn_send_item) closed
 * with a single sync. A request's callback runs at its segment's
 * sync, once the shared implicit transaction committed. When a statement of a shared segment fails,
 * PostgreSQL rolls the whole segment back, and the requests are sent again, each in a segment of
 * its own ("solo"; see seg_query_done), so no request ever sees another's failure or another's
 * rolled-back writes, and nothing of a request is committed unless all of its statements are.
 * Plain-SQL statements (db_query_sql) always go solo. A broken connection fails every segment in flight (their
 * callbacks see `unavailable`), is closed, and is reopened (every 100 ms for about half a second,
 * then every 2 s: a restart is caught quickly, a longer outage costs little); while no
 * connection of a pool is up, new queries fail at once (503) instead of piling up.
 *
 * Sections: statement registry, results for handlers, segments, connections (connect, read, write,
 * fail), pools, submission. */
#include "db.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "server.h"
#include "util.h"

#define DB_PIPELINE_MAX 64      /* query segments in flight per connection */
#define DB_QUEUE_MAX 4096       /* queries waiting for a connection, per pool */
#define DB_CONNECT_TIMEOUT_MS 5000
#define DB_BACKOFF_MIN_MS 100
#define DB_BACKOFF_MAX_MS 2000
#define DB_STATEMENT_TIMEOUT "30s"

/* ---- Statement registry ------------------------------------------------------------------------ */

#define DB_STATEMENTS_MAX 256

struct db_prepared {
    const char *name, *sql;
    int read_only;
};
static struct db_prepared statements[DB_STATEMENTS_MAX];
static int nstatements;
static int statements_frozen;

static void prepare(const char *name, const char *sql, int read_only) {
    if (statements_frozen) {
        log_error("msg=\"db_prepare after the gateway started; ignored\" statement=%s", name);
        return;
    }
    for (int i = 0; i < nstatements; i++) {
        if (!strcmp(statements[i].name, name)) {
            statements[i].sql = sql; /* the same route set registered twice (tests): last wins */
            statements[i].read_only = read_only;
            return;
        }
    }
    if (nstatements == DB_STATEMENTS_MAX) {
        log_error("msg=\"too many prepared statements\" statement=%s", name);
        return;
    }
    statements[nstatements++] = (struct db_prepared){name, sql, read_only};
}

void db_prepare(const char *name, const char *sql) { prepare(name, sql, 0); }
void db_prepare_read(const char *name, const char *sql) { prepare(name, sql, 1); }

void db_prepare_freeze(void) { statements_frozen = 1; }

static const struct db_prepared *statement_find(const char *name) {
    for (int i = 0; i < nstatements; i++)
        if (!strcmp(statements[i].name, name)) return &statements[i];
    return NULL;
}

/* ---- Results for handlers ---------------------------------------------------------------------- */

json_t *db_json_string(const PGresult *res, int row, int col) {
    const char *v = db_value(res, row, col);
    return v ? json_string(v) : json_null();
}

json_t *db_json_integer(const PGresult *res, int row, int col) {
    const char *v = db_value(res, row, col);
    return v ? json_integer(strtoll(v, NULL, 10)) : json_null();
}

json_t *db_json_value(const PGresult *res, int row, int col) {
    const char *v = db_value(res, row, col);
    json_t *j = v ? json_loads(v, JSON_DECODE_ANY, NULL) : NULL;
    return j ? j : json_null();
}

void http_reply_db_error(struct gw_req *r, const struct db_result *res) {
    if (res->unavailable) {
        http_reply_unavailable(r, 1, "the database");
        return;
    }
    const char *state = res->sqlstate ? res->sqlstate : "";
    if (!strcmp(state, "23505")) {
        http_reply_error(r, 409, NULL, "conflict", "the object already exists");
    } else if (!strcmp(state, "23503")) {
        http_reply_error(r, 404, NULL, "not_found", "a referenced object does not exist");
    } else if (!strncmp(state, "22", 2) || !strcmp(state, "23514") || !strcmp(state, "23502")) {
        http_reply_error(r, 400, NULL, "invalid_value", "invalid value: %s", res->message);
    } else if (!strcmp(state, "57014")) {
        http_reply_unavailable(r, 1, "the database (the query timed out)");
    } else {
        log_error("msg=\"database error\" request_id=%s sqlstate=%s statement=%d error=\"%s\"", r->request_id, state,
                  res->failed, res->message);
        http_reply_error(r, 500, NULL, "internal_error", "internal error (request %s)", r->request_id);
    }
}

int db_reply_failed(struct gw_req *r, const struct db_result *res) {
    if (res->ok) return 0;
    http_reply_db_error(r, res);
    return 1;
}

int db_reply_unless_found(struct gw_req *r, const struct db_result *res, const char *what, const char *param) {
    if (db_reply_failed(r, res)) return 1;
    if (PQntuples(res->res[0]) == 0) {
        http_reply_not_found(r, what, http_path_param(r, param));
        return 1;
    }
    return 0;
}

json_t *db_rows_json(const PGresult *rows, int max, json_t *(*to_json)(const PGresult *res, int row)) {
    int n = PQntuples(rows);
    if (max >= 0 && max < n) n = max;
    json_t *data = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(data, to_json(rows, i));
    return data;
}

/* ---- Segments ---------------------------------------------------------------------------------- */

enum seg_kind { SEG_SETUP, SEG_PREPARE, SEG_TENANT, SEG_QUERY };

/* One submission (db_query/db_transaction): owns copies of the statements' parameters. */
struct db_item {
    struct db_item *next; /* in the pool's wait queue */
    struct db_pool *pool;
    struct gw_req *r;
    db_callback cb;
    void *arg;
    char tenant[HTTP_TENANT_ID_MAX + 1];
    int n;
    struct db_stmt stmts[DB_TX_MAX];
    PGresult *res[DB_TX_MAX];
    char **param_storage; /* one allocation per statement's parameter array */
    int misuse;           /* a bad statement count: fails as an internal error, never runs */
    int solo;             /* runs in a segment of its own (plain SQL, or sent again after a shared
                             segment failed) */
    int sets_tenant;      /* its statements follow a set_config of its tenant in its segment (whose result
                             is not the request's) */
    int writes;           /* a statement of it is not db_prepare_read's */
    int deadlocks;        /* times its own segment was the victim of a deadlock and it was sent again */
};

struct db_segment {
    struct db_segment *next;
    enum seg_kind kind;
    int nstmts;
    int got;          /* statements whose result has arrived */
    int want_null;    /* the NULL after a statement's result is next */
    /* SEG_QUERY: the requests sharing the segment, in the order their statements were sent (linked
     * through item->next), and the one the next result belongs to. */
    struct db_item *items, *items_tail;
    int nitems;
    struct db_item *cur;
    int cur_stmt;     /* -1: cur's set_config */
    int failed;       /* a statement did not succeed */
    int statement;    /* SEG_PREPARE: index in the registry */
};

static void item_finish(struct db_item *item, int unavailable);

/* ---- Connections ------------------------------------------------------------------------------- */

enum conn_state { CONN_DOWN, CONN_CONNECTING, CONN_SETUP, CONN_READY };

struct db_conn {
    struct db_pool *pool;
    PGconn *pg;
    h2o_socket_t *sock;
    int fd;      /* PQsocket() the h2o socket duplicates */
    ino_t inode; /* and its socket's inode: libpq moving to the next host of a multi-host conninfo closes
                    the socket and opens another, which usually gets the same descriptor number */
    enum conn_state state;
    struct db_segment *head, *tail;
    int queries_in_flight;          /* requests sent, results not yet delivered */
    struct db_segment *open;        /* the QUERY segment still taking requests (no sync sent yet) */
    char tenant[HTTP_TENANT_ID_MAX + 1];      /* the session's ("": unset) */
    char open_tenant[HTTP_TENANT_ID_MAX + 1]; /* in effect at the end of the open segment */
    char open_writer[HTTP_TENANT_ID_MAX + 1]; /* the last (greatest) tenant whose requests write in it ("": none yet) */
    int setup_left;  /* SETUP and PREPARE segments still to complete before the connection is ready */
    int backoff_ms;
    h2o_timeout_entry_t timer; /* connect timeout, or reconnect backoff */
    int timer_is_reconnect;
    h2o_timeout_entry_t flush_timer; /* sends what the requests of one loop iteration queued, at once */
    /* The requests given to this connection during the loop iteration, not sent yet: flush_timer sends them
     * in order of tenant (conn_send_held). */
    struct db_item *held[DB_PIPELINE_MAX];
    int nheld;
};

struct db_pool {
    struct gw_thread *thread;
    char *conninfo;
    int admin;
    int nconns;
    struct db_conn *conns;
    struct db_item *queue_head, **queue_tail;
    size_t queued;
    int up;        /* connections READY */
    int failing;   /* no connection up and the last attempt failed: fail fast */
    h2o_timeout_t connect_timeout, backoff_timeout[2];
    /* Items that failed without reaching a connection, delivered from the loop, not from db_query. */
    struct db_item *failed_head, **failed_tail;
    h2o_timeout_entry_t failed_timer;
    size_t busy; /* items alive (queued, in flight, or waiting for delivery) */
};

static void conn_connect(struct db_conn *c);
static void conn_fail(struct db_conn *c, const char *why);
static void conn_on_readable(h2o_socket_t *sock, const char *err);
static void conn_on_writable(h2o_socket_t *sock, const char *err);
static void pool_drain_queue(struct db_pool *pool);
static void pool_fail_queue(struct db_pool *pool);
static void pool_fail_later(struct db_pool *pool, struct db_item *item);

/* The first line of a libpq message, quotes replaced, for a log field. */
static void first_line(const char *msg, char *out, size_t size) {
    size_t n = 0;
    for (; msg[n] && msg[n] != '\n' && n + 1 < size; n++) out[n] = msg[n] == '"' ? '\'' : msg[n];
    out[n] = 0;
}

static void seg_push(struct db_conn *c, struct db_segment *s) {
    s->next = NULL;
    if (c->tail) c->tail->next = s;
    else c->head = s;
    c->tail = s;
}

static struct db_segment *seg_pop(struct db_conn *c) {
    struct db_segment *s = c->head;
    c->head = s->next;
    if (!c->head) c->tail = NULL;
    return s;
}

/* Delivers (or, with `unavailable`, fails) every request of a QUERY segment, in order. */
static void seg_finish_items(struct db_pool *pool, struct db_segment *s, int unavailable) {
    struct db_item *item = s->items;
    s->items = s->items_tail = NULL;
    while (item) {
        struct db_item *next = item->next;
        metrics_db_add(pool->admin, METRICS_DB_IN_FLIGHT, -1);
        item_finish(item, unavailable);
        item = next;
    }
}

static void conn_close_socket(struct db_conn *c) {
    if (c->sock) {
        h2o_socket_read_stop(c->sock);
        h2o_socket_close(c->sock); /* closes our dup, not libpq's descriptor */
        c->sock = NULL;
    }
    c->fd = -1;
}

/* Makes c->sock watch PQsocket(c->pg) (which may change while connecting). */
static int conn_watch_socket(struct db_conn *c) {
    int fd = PQsocket(c->pg);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) return -1;
    if (c->sock && fd == c->fd && st.st_ino == c->inode) return 0;
    conn_close_socket(c);
    int dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dupfd < 0) return -1;
    c->sock = h2o_evloop_socket_create(c->pool->thread->ctx.loop, dupfd, H2O_SOCKET_FLAG_DONT_READ);
    if (!c->sock) {
        close(dupfd);
        return -1;
    }
    c->sock->data = c;
    c->fd = fd;
    c->inode = st.st_ino;
    return 0;
}

/* Sends what libpq has buffered; asks the loop for writability when the socket is full. */
static int conn_flush(struct db_conn *c) {
    int rc = PQflush(c->pg);
    if (rc < 0) return -1;
    if (rc > 0 && !h2o_socket_is_writing(c->sock)) h2o_socket_notify_write(c->sock, conn_on_writable);
    return 0;
}

static void conn_timer_stop(struct db_conn *c) {
    if (h2o_timeout_is_linked(&c->timer)) h2o_timeout_unlink(&c->timer);
    if (h2o_timeout_is_linked(&c->flush_timer)) h2o_timeout_unlink(&c->flush_timer);
}

static void conn_process_results(struct db_conn *c);

/* Ends the open segment with its sync (which libpq sends at once, with everything before it). */
static int conn_close_open(struct db_conn *c) {
    if (!c->open) return 0;
    c->open = NULL;
    return PQpipelineSync(c->pg) ? 0 : -1;
}

static int conn_send_held(struct db_conn *c);

static void conn_on_flush_timer(h2o_timeout_entry_t *entry) {
    struct db_conn *c = H2O_STRUCT_FROM_MEMBER(struct db_conn, flush_timer, entry);
    if (c->state == CONN_DOWN) return;
    if (conn_send_held(c) < 0) return;
    if (conn_close_open(c) < 0 || conn_flush(c) < 0) conn_fail(c, "write failed");
    else if (c->state == CONN_READY) conn_process_results(c);
}

/* Queries submitted while the loop handles one batch of events leave in one write: the flush runs
 * from the loop's zero timeout, after the event callbacks. */
static void conn_flush_soon(struct db_conn *c) {
    if (h2o_timeout_is_linked(&c->flush_timer)) return;
    c->flush_timer.cb = conn_on_flush_timer;
    h2o_timeout_link(c->pool->thread->ctx.loop, &c->pool->thread->ctx.zero_timeout, &c->flush_timer);
}

static void conn_on_timer(h2o_timeout_entry_t *entry) {
    struct db_conn *c = H2O_STRUCT_FROM_MEMBER(struct db_conn, timer, entry);
    if (c->timer_is_reconnect) conn_connect(c);
    else conn_fail(c, "connect timeout");
}

static void conn_schedule_reconnect(struct db_conn *c) {
    conn_timer_stop(c);
    c->timer_is_reconnect = 1;
    c->timer.cb = conn_on_timer;
    /* two fixed timeouts (h2o timeouts have one duration each): short first, long once failing */
    h2o_timeout_link(c->pool->thread->ctx.loop, &c->pool->backoff_timeout[c->backoff_ms >= DB_BACKOFF_MAX_MS],
                     &c->timer);
    c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : DB_BACKOFF_MIN_MS;
    if (c->backoff_ms > DB_BACKOFF_MAX_MS) c->backoff_ms = DB_BACKOFF_MAX_MS;
}

/* Fails everything in flight on `c` and schedules a reconnect. Never frees `c` (pools own their
 * connections for their whole life), so callers up the stack can check c->state afterwards. */
static void conn_fail(struct db_conn *c, const char *why) {
    struct db_pool *pool = c->pool;
    int was_ready = c->state == CONN_READY;
    /* Log transitions only: a database that stays down must not flood the log every backoff. */
    if (was_ready || (c->state != CONN_DOWN && c->backoff_ms == 0)) {
        char detail[160];
        first_line(c->pg ? PQerrorMessage(c->pg) : "", detail, sizeof(detail));
        log_warn("msg=\"database connection %s\" pool=%s thread=%d reason=\"%s\" detail=\"%s\"",
                 was_ready ? "lost" : "failed", pool->admin ? "admin" : "tenant", pool->thread->index, why, detail);
    }
    if (was_ready) {
        pool->up--;
        metrics_db_add(pool->admin, METRICS_DB_CONNS_UP, -1);
    }
    c->state = CONN_DOWN;
    conn_timer_stop(c);
    conn_close_socket(c);
    if (c->pg) {
        PQfinish(c->pg);
        c->pg = NULL;
    }
    c->tenant[0] = 0;
    for (int i = 0; i < c->nheld; i++) pool_fail_later(pool, c->held[i]);
    c->nheld = 0;
    /* Detach the FIFO first: callbacks may submit new queries (which cannot pick this connection). */
    struct db_segment *s = c->head;
    c->head = c->tail = c->open = NULL;
    c->queries_in_flight = 0;
    while (s) {
        struct db_segment *next = s->next;
        seg_finish_items(pool, s, 1);
        free(s);
        s = next;
    }
    if (pool->up == 0) {
        pool->failing = 1;
        pool_fail_queue(pool);
    }
    conn_schedule_reconnect(c);
}

/* Sends the session settings (SETUP: a failure drops the connection), then each prepared statement in
 * its own segment (PREPARE: a statement that does not prepare is logged and its queries fail, but it
 * does not take the other routes down with it). */
static int conn_send_setup(struct db_conn *c) {
    if (PQsetnonblocking(c->pg, 1) || !PQenterPipelineMode(c->pg)) return -1;
    struct db_segment *s = xcalloc(1, sizeof(*s));
    s->kind = SEG_SETUP;
    seg_push(c, s); /* from here on conn_fail frees it */
    c->setup_left = 1 + nstatements;
    if (!c->pool->admin) {
        if (!PQsendQueryParams(c->pg, "SET ROLE whet_app", 0, NULL, NULL, NULL, NULL, 0)) return -1;
        s->nstmts++;
    }
    if (!PQsendQueryParams(c->pg, "SET statement_timeout = '" DB_STATEMENT_TIMEOUT "'", 0, NULL, NULL, NULL, NULL, 0))
        return -1;
    s->nstmts++;
    if (!PQpipelineSync(c->pg)) return -1;
    for (int i = 0; i < nstatements; i++) {
        if (!PQsendPrepare(c->pg, statements[i].name, statements[i].sql, 0, NULL) || !PQpipelineSync(c->pg)) return -1;
        struct db_segment *p = xcalloc(1, sizeof(*p));
        p->kind = SEG_PREPARE;
        p->nstmts = 1;
        p->statement = i;
        seg_push(c, p);
    }
    return conn_flush(c);
}

static void conn_on_connect_event(h2o_socket_t *sock, const char *err) {
    struct db_conn *c = sock->data;
    if (err) {
        conn_fail(c, err);
        return;
    }
    switch (PQconnectPoll(c->pg)) {
    case PGRES_POLLING_READING:
        if (conn_watch_socket(c) < 0) break;
        h2o_socket_read_start(c->sock, conn_on_connect_event);
        return;
    case PGRES_POLLING_WRITING:
        if (conn_watch_socket(c) < 0) break;
        h2o_socket_read_stop(c->sock);
        if (!h2o_socket_is_writing(c->sock)) h2o_socket_notify_write(c->sock, conn_on_connect_event);
        return;
    case PGRES_POLLING_OK:
        if (conn_watch_socket(c) < 0) break;
        h2o_socket_read_stop(c->sock);
        c->state = CONN_SETUP;
        if (conn_send_setup(c) < 0) break;
        h2o_socket_read_start(c->sock, conn_on_readable);
        return;
    default:
        break;
    }
    conn_fail(c, "connect failed");
}

static void conn_connect(struct db_conn *c) {
    conn_timer_stop(c);
    c->pg = PQconnectStart(c->pool->conninfo);
    if (!c->pg || PQstatus(c->pg) == CONNECTION_BAD || conn_watch_socket(c) < 0) {
        c->state = CONN_CONNECTING; /* so conn_fail logs it */
        conn_fail(c, "connect failed");
        return;
    }
    c->state = CONN_CONNECTING;
    c->timer_is_reconnect = 0;
    c->timer.cb = conn_on_timer;
    h2o_timeout_link(c->pool->thread->ctx.loop, &c->pool->connect_timeout, &c->timer);
    h2o_socket_notify_write(c->sock, conn_on_connect_event);
}

static void conn_became_ready(struct db_conn *c) {
    struct db_pool *pool = c->pool;
    conn_timer_stop(c);
    c->state = CONN_READY;
    c->backoff_ms = 0;
    pool->up++;
    pool->failing = 0;
    metrics_db_add(pool->admin, METRICS_DB_CONNS_UP, 1);
    log_info("msg=\"database connection ready\" pool=%s thread=%d", pool->admin ? "admin" : "tenant", pool->thread->index);
    pool_drain_queue(pool);
}

static void pool_submit(struct db_pool *pool, struct db_item *item);

/* A QUERY segment's sync arrived. When every statement succeeded, each request gets its results.
 * Otherwise PostgreSQL rolled the shared transaction back. A failure of the segment's first request
 * is its own (nothing ran before it): it gets it, and the others are sent again. A failure further
 * on may come from what an earlier request wrote and has now lost (two creates with one
 * idempotency key collide inside the segment): then every request is sent again, each on its own,
 * where a failure is a request's own. A shared transaction takes its requests' locks in an order no
 * request chose, so two of them can deadlock where the requests alone would not: seen in CI with
 * concurrent completes of one upload under one idempotency key, a segment held the key's row (one
 * request's idem_store) and waited for the upload's row (another's complete), while a complete alone
 * on another connection held the upload's row and its INSERT of the key waited for that uncommitted
 * UPDATE (a unique check waits for the row's updater). A request alone in its segment that PostgreSQL
 * chose as the victim is sent again, up to DB_DEADLOCK_RETRIES times, as PostgreSQL advises: its
 * transaction was rolled back whole. */
#define DB_DEADLOCK_RETRIES 3
/* Whether a statement of the request failed, and whether the first that did was a deadlock's victim. */
static int item_failed(const struct db_item *item, int *deadlocked) {
    for (int i = 0; i < item->n; i++) {
        ExecStatusType st = item->res[i] ? PQresultStatus(item->res[i]) : PGRES_FATAL_ERROR;
        if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) continue;
        const char *state = item->res[i] ? PQresultErrorField(item->res[i], PG_DIAG_SQLSTATE) : NULL;
        *deadlocked = state && strcmp(state, "40P01") == 0;
        return 1;
    }
    *deadlocked = 0;
    return 0;
}

static void item_send_again(struct db_pool *pool, struct db_item *item) {
    metrics_db_add(pool->admin, METRICS_DB_IN_FLIGHT, -1);
    for (int i = 0; i < item->n; i++) {
        PQclear(item->res[i]);
        item->res[i] = NULL;
    }
    item->solo = 1;
    pool_submit(pool, item);
}

static void seg_query_done(struct db_pool *pool, struct db_segment *s) {
    int deadlocked;
    if (s->failed && s->nitems == 1 && item_failed(s->items, &deadlocked) && deadlocked &&
        s->items->deadlocks < DB_DEADLOCK_RETRIES) {
        struct db_item *item = s->items;
        s->items = s->items_tail = NULL;
        item->deadlocks++;
        item_send_again(pool, item);
        return;
    }
    if (!s->failed || s->nitems == 1) {
        seg_finish_items(pool, s, 0);
        return;
    }
    struct db_item *item = s->items;
    s->items = s->items_tail = NULL;
    /* A deadlock can come from the locks the whole shared transaction held: not the first request's own. */
    if (item_failed(item, &deadlocked) && !deadlocked) {
        struct db_item *next = item->next;
        metrics_db_add(pool->admin, METRICS_DB_IN_FLIGHT, -1);
        item_finish(item, 0);
        item = next;
    }
    while (item) {
        struct db_item *next = item->next;
        item_send_again(pool, item);
        item = next;
    }
}

/* Every statement of a QUERY segment succeeded and its commit failed: a deferred constraint trigger raised
 * (migration 0064's active-job count), or a deadlock or serialization failure at the commit. The whole
 * transaction rolled back. A request alone in its segment gets the error as its last statement's result (so
 * its callback sees the SQLSTATE, and a deadlock is retried as any other); shared requests are sent again each
 * on its own, as after any failure that is not the first request's. */
static void seg_commit_failed(struct db_segment *s, PGresult *res) {
    s->failed = 1;
    if (s->nitems == 1) {
        PQclear(s->items->res[s->items->n - 1]);
        s->items->res[s->items->n - 1] = res;
    } else {
        PQclear(res);
    }
}

/* One result for the head segment. Returns -1 when the connection must be dropped. */
static int conn_take_result(struct db_conn *c, PGresult *res) {
    struct db_segment *s = c->head;
    if (s->want_null) {
        if (res) { /* a statement produced two results: cannot happen with the extended protocol */
            PQclear(res);
            return -1;
        }
        s->want_null = 0;
        if (s->got < s->nstmts) s->got++; /* else the NULL after the commit's error */
        return 0;
    }
    if (s->got == s->nstmts) { /* the sync, or the error of the commit before it */
        if (s->kind == SEG_QUERY && !s->failed && res && PQresultStatus(res) == PGRES_FATAL_ERROR) {
            seg_commit_failed(s, res);
            s->want_null = 1;
            return 0;
        }
        if (!res || PQresultStatus(res) != PGRES_PIPELINE_SYNC) {
            PQclear(res);
            return -1;
        }
        PQclear(res);
        seg_pop(c);
        if (s->kind == SEG_SETUP || s->kind == SEG_PREPARE) {
            int fatal = s->kind == SEG_SETUP && s->failed;
            free(s);
            if (fatal) return -1;
            if (--c->setup_left == 0) conn_became_ready(c);
        } else if (s->kind == SEG_TENANT) {
            int failed = s->failed;
            free(s);
            /* The segments behind this one assumed the tenant was set: never let them answer. */
            if (failed) return -1;
        } else {
            c->queries_in_flight -= s->nitems;
            seg_query_done(c->pool, s);
            free(s);
        }
        return 0;
    }
    if (!res) return -1;
    ExecStatusType st = PQresultStatus(res);
    int ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    if (s->kind == SEG_QUERY) {
        while (s->cur_stmt == s->cur->n) { /* the next request's statements */
            s->cur = s->cur->next;
            s->cur_stmt = -s->cur->sets_tenant;
        }
        if (!ok) s->failed = 1; /* a failed set_config aborts the request's statements: they fail it */
        if (s->cur_stmt < 0) {
            s->cur_stmt++;
            PQclear(res);
        } else {
            s->cur->res[s->cur_stmt++] = res;
        }
    } else {
        if (!ok) {
            char detail[200];
            first_line(PQresultErrorMessage(res), detail, sizeof(detail));
            s->failed = 1;
            if (s->kind == SEG_PREPARE) {
                /* once per process is enough: every connection prepares the same text */
                if (c->pool->thread->index == 0 && c == &c->pool->conns[0] && !c->pool->admin)
                    log_error("msg=\"statement does not prepare; its queries will fail\" statement=%s error=\"%s\"",
                              statements[s->statement].name, detail);
            } else {
                log_error("msg=\"database session setup failed\" pool=%s error=\"%s\"",
                          c->pool->admin ? "admin" : "tenant", detail);
            }
        }
        PQclear(res);
    }
    s->want_null = 1;
    return 0;
}

/* Hands every complete result in libpq's input buffer to its segment. Called after reading, and also
 * after every flush: when the socket cannot take all it sends, libpq reads what has arrived (to avoid
 * a deadlock), and data already in its buffer leaves the socket unreadable, so nothing else would
 * wake us for it. */
static void conn_process_results(struct db_conn *c) {
    while (c->head && !PQisBusy(c->pg)) {
        /* Every statement sent so far has its result, the sync is not sent yet: nothing to read. */
        if (c->head == c->open && c->open->got == c->open->nstmts && !c->open->want_null) break;
        PGresult *res = PQgetResult(c->pg);
        if (conn_take_result(c, res) < 0) {
            conn_fail(c, "unexpected result");
            return;
        }
        /* A callback ran: it may have queued more, or (through a send error) failed this connection. */
        if (c->state == CONN_DOWN) return;
    }
    for (PGnotify *n = PQnotifies(c->pg); n; n = PQnotifies(c->pg)) PQfreemem(n);
    if (PQstatus(c->pg) == CONNECTION_BAD) conn_fail(c, "connection closed");
}

static void conn_on_readable(h2o_socket_t *sock, const char *err) {
    struct db_conn *c = sock->data;
    if (err) {
        conn_fail(c, err);
        return;
    }
    if (!PQconsumeInput(c->pg)) {
        conn_fail(c, "read failed");
        return;
    }
    conn_process_results(c);
}

static void conn_on_writable(h2o_socket_t *sock, const char *err) {
    struct db_conn *c = sock->data;
    if (err || conn_flush(c) < 0) conn_fail(c, err ? err : "write failed");
    else if (c->state == CONN_READY) conn_process_results(c);
}

/* ---- Pools ------------------------------------------------------------------------------------- */

struct db_pool *db_pool_new(struct gw_thread *t, const char *conninfo, int nconns, int admin) {
    struct db_pool *pool = xcalloc(1, sizeof(*pool));
    pool->thread = t;
    pool->conninfo = xstrdup(conninfo);
    pool->admin = admin;
    pool->nconns = nconns;
    pool->queue_tail = &pool->queue_head;
    pool->failed_tail = &pool->failed_head;
    h2o_loop_t *loop = t->ctx.loop;
    h2o_timeout_init(loop, &pool->connect_timeout, DB_CONNECT_TIMEOUT_MS);
    h2o_timeout_init(loop, &pool->backoff_timeout[0], DB_BACKOFF_MIN_MS);
    h2o_timeout_init(loop, &pool->backoff_timeout[1], DB_BACKOFF_MAX_MS);
    pool->conns = xcalloc((size_t)nconns, sizeof(*pool->conns));
    metrics_db_add(admin, METRICS_DB_CONNS_TOTAL, nconns);
    for (int i = 0; i < nconns; i++) {
        struct db_conn *c = &pool->conns[i];
        c->pool = pool;
        c->fd = -1;
        conn_connect(c);
    }
    return pool;
}

static void pool_deliver_failed(h2o_timeout_entry_t *entry);

void db_pool_free(struct db_pool *pool) {
    if (!pool) return;
    for (int i = 0; i < pool->nconns; i++) {
        struct db_conn *c = &pool->conns[i];
        if (c->state == CONN_READY) metrics_db_add(pool->admin, METRICS_DB_CONNS_UP, -1);
        c->state = CONN_DOWN; /* quiet */
        conn_timer_stop(c);
        conn_close_socket(c);
        if (c->pg) PQfinish(c->pg);
        c->pg = NULL;
        c->open = NULL;
        for (int k = 0; k < c->nheld; k++) pool_fail_later(pool, c->held[k]);
        c->nheld = 0;
        while (c->head) {
            struct db_segment *s = seg_pop(c);
            seg_finish_items(pool, s, 1);
            free(s);
        }
    }
    pool_fail_queue(pool);
    if (h2o_timeout_is_linked(&pool->failed_timer)) h2o_timeout_unlink(&pool->failed_timer);
    pool_deliver_failed(&pool->failed_timer);
    metrics_db_add(pool->admin, METRICS_DB_CONNS_TOTAL, -pool->nconns);
    h2o_loop_t *loop = pool->thread->ctx.loop;
    h2o_timeout_dispose(loop, &pool->connect_timeout);
    h2o_timeout_dispose(loop, &pool->backoff_timeout[0]);
    h2o_timeout_dispose(loop, &pool->backoff_timeout[1]);
    free(pool->conns);
    free(pool->conninfo);
    free(pool);
}

int db_pool_ready(const struct db_pool *pool) { return pool->up > 0; }
size_t db_pool_busy(const struct db_pool *pool) { return pool->busy; }

static void pool_deliver_failed(h2o_timeout_entry_t *entry) {
    struct db_pool *pool = H2O_STRUCT_FROM_MEMBER(struct db_pool, failed_timer, entry);
    struct db_item *item = pool->failed_head;
    pool->failed_head = NULL;
    pool->failed_tail = &pool->failed_head;
    while (item) {
        struct db_item *next = item->next;
        item_finish(item, 1);
        item = next;
    }
}

/* Fails `item` later, from the loop (so db_query never calls back before it returns). */
static void pool_fail_later(struct db_pool *pool, struct db_item *item) {
    item->next = NULL;
    *pool->failed_tail = item;
    pool->failed_tail = &item->next;
    if (!h2o_timeout_is_linked(&pool->failed_timer)) {
        pool->failed_timer.cb = pool_deliver_failed;
        h2o_timeout_link(pool->thread->ctx.loop, &pool->thread->ctx.zero_timeout, &pool->failed_timer);
    }
}

static void pool_fail_queue(struct db_pool *pool) {
    struct db_item *item = pool->queue_head;
    pool->queue_head = NULL;
    pool->queue_tail = &pool->queue_head;
    metrics_db_add(pool->admin, METRICS_DB_QUEUED, -(long)pool->queued);
    pool->queued = 0;
    while (item) {
        struct db_item *next = item->next;
        pool_fail_later(pool, item);
        item = next;
    }
}

/* The ready connection with the most room in its pipeline (its requests sent and held), or NULL. */
static struct db_conn *pool_pick(struct db_pool *pool) {
    struct db_conn *best = NULL;
    for (int i = 0; i < pool->nconns; i++) {
        struct db_conn *c = &pool->conns[i];
        if (c->state != CONN_READY || c->queries_in_flight + c->nheld >= DB_PIPELINE_MAX) continue;
        if (!best || c->queries_in_flight + c->nheld < best->queries_in_flight + best->nheld) best = c;
    }
    return best;
}

/* Puts `item` on the wire of `c`: a TENANT segment first when the session has no tenant yet, then the
 * item's statements in the open segment (a new one when there is none, or when the item must run
 * alone), after a set_config of its tenant where another is in effect. The sync follows from
 * conn_on_flush_timer. */
#define DB_BATCH_MAX 32 /* requests per shared segment */
static int conn_send_item(struct db_conn *c, struct db_item *item) {
    /* The session's tenant is the first tenant's to come: a request of none (an API key's lookup, whose tenant
     * is not known yet) runs as well with the setting unset, which reads as "" (whet_current_tenant), and taking
     * its "" for the session's made every later request set its tenant again. */
    if (!c->pool->admin && !c->tenant[0] && item->tenant[0]) {
        static const char *set_tenant = "SELECT set_config('whet.tenant_id', $1, false)";
        const char *p[] = {item->tenant};
        if (conn_close_open(c) < 0) return -1;
        if (!PQsendQueryParams(c->pg, set_tenant, 1, NULL, p, NULL, NULL, 0) || !PQpipelineSync(c->pg)) return -1;
        struct db_segment *ts = xcalloc(1, sizeof(*ts));
        ts->kind = SEG_TENANT;
        ts->nstmts = 1;
        seg_push(c, ts);
        memcpy(c->tenant, item->tenant, sizeof(c->tenant));
    }
    /* A write holds its tenant's locks (the counter of active jobs) to the end of its transaction. Writes
     * of several tenants share one only in ascending order of tenant, so every transaction takes those
     * locks in one order: one that wants a lock another holds waits for it, and no two wait for each
     * other (in any order, two connections' transactions writing for the same two tenants deadlock). */
    int out_of_order = item->writes && c->open && c->open_writer[0] && strcmp(item->tenant, c->open_writer) < 0;
    if (item->solo || out_of_order || (c->open && c->open->nitems >= DB_BATCH_MAX)) {
        if (conn_close_open(c) < 0) return -1;
    }
    item->sets_tenant = !c->pool->admin && strcmp(c->open ? c->open_tenant : c->tenant, item->tenant) != 0;
    if (item->sets_tenant) {
        static const char *set_local_tenant = "SELECT set_config('whet.tenant_id', $1, true)";
        const char *p[] = {item->tenant};
        if (!PQsendQueryParams(c->pg, set_local_tenant, 1, NULL, p, NULL, NULL, 0)) return -1;
    }
    for (int i = 0; i < item->n; i++) {
        const struct db_stmt *st = &item->stmts[i];
        int ok = st->name ? PQsendQueryPrepared(c->pg, st->name, st->nparams, st->params, NULL, NULL, 0)
                          : PQsendQueryParams(c->pg, st->sql, st->nparams, NULL, st->params, NULL, NULL, 0);
        if (!ok) return -1;
    }
    struct db_segment *s = c->open;
    if (!s) {
        s = xcalloc(1, sizeof(*s));
        s->kind = SEG_QUERY;
        seg_push(c, s);
        c->open = s;
        c->open_writer[0] = 0;
    }
    item->next = NULL;
    if (s->items_tail) s->items_tail->next = item;
    else {
        s->items = s->cur = item;
        s->cur_stmt = -item->sets_tenant;
    }
    s->items_tail = item;
    s->nitems++;
    s->nstmts += item->sets_tenant + item->n;
    if (!c->pool->admin) memcpy(c->open_tenant, item->tenant, sizeof c->open_tenant);
    if (item->writes) memcpy(c->open_writer, item->tenant, sizeof c->open_writer);
    c->queries_in_flight++;
    metrics_db_add(c->pool->admin, METRICS_DB_IN_FLIGHT, 1);
    if (item->solo && conn_close_open(c) < 0) return -1;
    return 0;
}

/* Sends the requests held during the loop iteration, in order of tenant (a stable sort: one tenant's keep
 * theirs). Their writes then run in ascending order of tenant, so they share segments (conn_send_item):
 * sent as they came, the creates of 32 tenants, the clients going round them, closed a segment at almost
 * every write, and a create shared its transaction with 1.6 others where one tenant's shared with ~8. Their
 * tenant's set_config is needed once per tenant, not per request. -1 when the connection failed (and with it
 * what was held). */
static int conn_send_held(struct db_conn *c) {
    struct db_item *items[DB_PIPELINE_MAX];
    int n = c->nheld;
    memcpy(items, c->held, (size_t)n * sizeof *items);
    c->nheld = 0;
    for (int i = 1; i < n; i++) { /* at most DB_PIPELINE_MAX: an insertion sort, which is stable */
        struct db_item *item = items[i];
        int k = i;
        for (; k > 0 && strcmp(items[k - 1]->tenant, item->tenant) > 0; k--) items[k] = items[k - 1];
        items[k] = item;
    }
    for (int i = 0; i < n; i++) {
        if (conn_send_item(c, items[i]) < 0) {
            /* The item may or may not be in c's FIFO: conn_fail finishes it in the first case. */
            int queued = c->tail && c->tail->kind == SEG_QUERY && c->tail->items_tail == items[i];
            conn_fail(c, "send failed");
            if (!queued) pool_fail_later(c->pool, items[i]);
            while (++i < n) pool_fail_later(c->pool, items[i]);
            return -1;
        }
    }
    return 0;
}

/* Routes an item: to a connection (sent with the loop iteration's others), to the wait queue, or to a
 * deferred failure. */
static void pool_submit(struct db_pool *pool, struct db_item *item) {
    struct db_conn *c = pool_pick(pool);
    if (c) {
        c->held[c->nheld++] = item;
        conn_flush_soon(c);
        return;
    }
    if (pool->failing || pool->queued >= DB_QUEUE_MAX) {
        if (pool->queued >= DB_QUEUE_MAX) metrics_db_error();
        pool_fail_later(pool, item);
        return;
    }
    item->next = NULL;
    *pool->queue_tail = item;
    pool->queue_tail = &item->next;
    pool->queued++;
    metrics_db_add(pool->admin, METRICS_DB_QUEUED, 1);
}

static void pool_drain_queue(struct db_pool *pool) {
    while (pool->queue_head) {
        struct db_conn *c = pool_pick(pool);
        if (!c) return;
        struct db_item *item = pool->queue_head;
        pool->queue_head = item->next;
        if (!pool->queue_head) pool->queue_tail = &pool->queue_head;
        pool->queued--;
        metrics_db_add(pool->admin, METRICS_DB_QUEUED, -1);
        pool_submit(pool, item);
    }
}

/* ---- Submission -------------------------------------------------------------------------------- */

/* Calls the handler back (unless the client left) and frees the item. */
static void item_finish(struct db_item *item, int unavailable) {
    struct gw_req *r = item->r;
    struct db_pool *pool = item->pool;
    struct db_result result = {.ok = !unavailable, .unavailable = unavailable, .failed = -1, .sqlstate = "",
                               .message = "", .n = item->n, .res = item->res};
    if (item->misuse) {
        result = (struct db_result){.failed = 0, .sqlstate = "XX000", .message = "bad statement count", .res = item->res};
    } else if (!unavailable) {
        for (int i = 0; i < item->n; i++) {
            ExecStatusType st = item->res[i] ? PQresultStatus(item->res[i]) : PGRES_FATAL_ERROR;
            if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) continue;
            result.ok = 0;
            result.failed = i;
            if (item->res[i]) {
                const char *state = PQresultErrorField(item->res[i], PG_DIAG_SQLSTATE);
                const char *msg = PQresultErrorField(item->res[i], PG_DIAG_MESSAGE_PRIMARY);
                result.sqlstate = state ? state : "";
                result.message = msg ? msg : "";
            }
            break;
        }
    } else {
        for (int i = 0; i < item->n; i++) {
            PQclear(item->res[i]);
            item->res[i] = NULL;
        }
        metrics_db_error();
    }
    if (!http_gone(r)) item->cb(r, &result, item->arg);
    for (int i = 0; i < item->n; i++) PQclear(item->res[i]);
    pool->busy--;
    gw_req_release(r);
    free(item->param_storage);
    free(item);
}

/* Copies the statements and their parameters into one item. */
static struct db_item *item_new(struct gw_req *r, struct db_pool *pool, const struct db_stmt *stmts, int n,
                                db_callback cb, void *arg) {
    size_t bytes = 0;
    int nptrs = 0;
    for (int i = 0; i < n; i++) {
        nptrs += stmts[i].nparams;
        for (int j = 0; j < stmts[i].nparams; j++)
            if (stmts[i].params[j]) bytes += strlen(stmts[i].params[j]) + 1;
    }
    struct db_item *item = xcalloc(1, sizeof(*item));
    char **ptrs = xmalloc((size_t)nptrs * sizeof(char *) + bytes + 1);
    char *text = (char *)(ptrs + nptrs);
    item->param_storage = ptrs;
    item->r = r;
    item->pool = pool;
    item->cb = cb;
    item->arg = arg;
    item->n = n;
    memcpy(item->tenant, r->tenant_id, sizeof(item->tenant));
    for (int i = 0; i < n; i++) {
        item->stmts[i].name = stmts[i].name;
        item->stmts[i].sql = stmts[i].sql;
        item->stmts[i].nparams = stmts[i].nparams;
        item->stmts[i].params = (const char *const *)ptrs;
        for (int j = 0; j < stmts[i].nparams; j++) {
            const char *p = stmts[i].params[j];
            if (!p) {
                *ptrs++ = NULL;
                continue;
            }
            size_t len = strlen(p) + 1;
            memcpy(text, p, len);
            *ptrs++ = text;
            text += len;
        }
    }
    return item;
}

void db_transaction(struct gw_req *r, const struct db_stmt *stmts, int n, db_callback cb, void *arg) {
    struct db_pool *pool = r->admin ? r->thread->db_admin : r->thread->db_tenant;
    int misuse = n < 1 || n > DB_TX_MAX;
    if (misuse) {
        log_error("msg=\"db_transaction with %d statements (1..%d allowed)\" request_id=%s", n, DB_TX_MAX, r->request_id);
        n = 0;
    }
    struct db_item *item = item_new(r, pool, stmts, n, cb, arg);
    item->misuse = misuse;
    for (int i = 0; i < n; i++) {
        if (!stmts[i].name) {
            item->solo = item->writes = 1; /* its text is not checked for BEGIN/COMMIT: keep it alone */
            continue;
        }
        const struct db_prepared *st = statement_find(stmts[i].name);
        if (!st)
            log_error("msg=\"unknown prepared statement (declare it with db_prepare)\" statement=%s", stmts[i].name);
        if (!st || !st->read_only) item->writes = 1;
    }
    gw_req_retain(r);
    pool->busy++;
    if (misuse) {
        pool_fail_later(pool, item);
        return;
    }
    pool_submit(pool, item);
}

void db_query(struct gw_req *r, const char *stmt, int nparams, const char *const *params, db_callback cb, void *arg) {
    struct db_stmt s = {.name = stmt, .nparams = nparams, .params = params};
    db_transaction(r, &s, 1, cb, arg);
}

void db_query_sql(struct gw_req *r, const char *sql, int nparams, const char *const *params, db_callback cb,
                  void *arg) {
    struct db_stmt s = {.sql = sql, .nparams = nparams, .params = params};
    db_transaction(r, &s, 1, cb, arg);
}
