/* pg.c - see pg.h. */
#include "pg.h"

#include <errno.h>
#include <libpq-events.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env.h"

const char *whet_database_url(struct whet_err *err) {
    const char *url = whet_env("WHET_DATABASE_URL", NULL);
    if (!url) {
        whet_errf(err, "WHET_DATABASE_URL is not set");
        whet_err_hint(err, "set it to a libpq conninfo or URI, or pass --data-dir of a running `whet up` (its whet.env "
                           "names the database)");
    }
    return url;
}

int whet_pg_error(const PGresult *res, PGconn *conn, struct whet_err *err) {
    const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    const char *detail = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL) : NULL;
    if (!primary) {
        const char *m = conn ? PQerrorMessage(conn) : "no connection";
        size_t n = strlen(m);
        while (n && m[n - 1] == '\n') n--;
        return whet_errf(err, "database: %.*s", (int)n, m);
    }
    if (detail) return whet_errf(err, "database: %s (%s)", primary, detail);
    return whet_errf(err, "database: %s", primary);
}

const char *whet_pg_sqlstate(const PGresult *res) {
    const char *s = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    return s ? s : "";
}

/* A server's warning (libpq's notice) written to stderr in one write(): libpq's own fprintf() writes one longer
 * than stdio's buffer (an auto_explain plan) in pieces, which another thread's warnings cut apart. */
static void notice_whole(void *arg, const char *message) {
    (void)arg;
    for (size_t done = 0, len = strlen(message); done < len;) {
        ssize_t n = write(STDERR_FILENO, message + done, len - done);
        if (n <= 0 && errno != EINTR) return;
        if (n > 0) done += (size_t)n;
    }
}

/* What every session of ours starts with: warnings and worse reach stderr, whole. */
static void session_setup(PGconn *conn) {
    PQsetNoticeProcessor(conn, notice_whole, NULL);
    PQclear(PQexec(conn, "SET client_min_messages = warning"));
}

PGconn *whet_pg_connect(const char *conninfo, struct whet_err *err) {
    PGconn *conn = PQconnectdb(conninfo);
    if (PQstatus(conn) != CONNECTION_OK) {
        whet_pg_error(NULL, conn, err);
        PQfinish(conn);
        return NULL;
    }
    session_setup(conn);
    return conn;
}

PGconn *whet_pg_connect_stoppable(const char *conninfo, const struct background *b, int *stopping,
                                  struct whet_err *err) {
    PGconn *conn = PQconnectStart(conninfo);
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    while (conn && PQstatus(conn) != CONNECTION_BAD && st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
        /* a timeout polls again: libpq's connect_timeout, when the conninfo sets one, gives up */
        if (background_wait(b, PQsocket(conn), st == PGRES_POLLING_READING ? POLLIN : POLLOUT, 10000) < 0) {
            *stopping = 1;
            PQfinish(conn);
            return NULL;
        }
        st = PQconnectPoll(conn);
    }
    if (PQstatus(conn) != CONNECTION_OK) {
        whet_pg_error(NULL, conn, err);
        PQfinish(conn);
        return NULL;
    }
    session_setup(conn);
    return conn;
}

/* ---------------------------------------------------------------- prepared statements */

/* A connection's prepared statements, kept as libpq instance data: libpq tells stmt_cache_event when the
 * connection is reset (a new session, with none prepared) or freed. Under tests/bench/scale's job churn,
 * parsing and planning the handlers' statements on each call was ~30% of PostgreSQL's CPU (perf). The
 * statements are few and fixed; texts past STMT_CACHE_MAX (none today) run unprepared. */
#define STMT_CACHE_MAX 128

struct stmt_cache {
    int n;
    struct {
        uint64_t hash;
        char *sql;
    } stmt[STMT_CACHE_MAX];
};

static void stmt_cache_clear(struct stmt_cache *c) {
    for (int i = 0; i < c->n; i++) free(c->stmt[i].sql);
    c->n = 0;
}

static int stmt_cache_event(PGEventId id, void *info, void *passthrough) {
    (void)passthrough;
    if (id == PGEVT_CONNRESET) {
        struct stmt_cache *c = PQinstanceData(((PGEventConnReset *)info)->conn, stmt_cache_event);
        if (c) stmt_cache_clear(c);
    } else if (id == PGEVT_CONNDESTROY) {
        struct stmt_cache *c = PQinstanceData(((PGEventConnDestroy *)info)->conn, stmt_cache_event);
        if (c) stmt_cache_clear(c);
        free(c);
    }
    return 1;
}

int whet_pg_prepare_statements(PGconn *conn) {
    if (!PQregisterEventProc(conn, stmt_cache_event, "whet statement cache", NULL)) return -1;
    struct stmt_cache *c = xcalloc(1, sizeof *c);
    if (!PQsetInstanceData(conn, stmt_cache_event, c)) {
        free(c);
        return -1;
    }
    return 0;
}

/* Runs sql as the cache's prepared statement, preparing it first when it is new; NULL when the connection
 * caches nothing or is full (the caller runs it unprepared). A failed PREPARE is returned as the result. */
static PGresult *exec_cached(PGconn *conn, const char *sql, int nparams, const char *const *params) {
    struct stmt_cache *c = PQinstanceData(conn, stmt_cache_event);
    if (!c) return NULL;
    uint64_t h = whet_hash_text(sql);
    int i = 0;
    while (i < c->n && (c->stmt[i].hash != h || strcmp(c->stmt[i].sql, sql) != 0)) i++;
    char name[24];
    snprintf(name, sizeof name, "whet_%d", i);
    if (i == c->n) {
        if (c->n == STMT_CACHE_MAX) return NULL;
        PGresult *prep = PQprepare(conn, name, sql, nparams, NULL);
        if (PQresultStatus(prep) != PGRES_COMMAND_OK) return prep;
        PQclear(prep);
        c->stmt[c->n].hash = h;
        c->stmt[c->n].sql = xstrdup(sql);
        c->n++;
    }
    return PQexecPrepared(conn, name, nparams, params, NULL, NULL, 0);
}

/* ---------------------------------------------------------------- statements */

PGresult *whet_pg_query(PGconn *conn, const char *sql, int nparams, const char *const *params, struct whet_err *err) {
    PGresult *res = nparams ? exec_cached(conn, sql, nparams, params) : NULL;
    if (!res) res = nparams ? PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0) : PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) return res;
    whet_pg_error(res, conn, err);
    PQclear(res);
    return NULL;
}

PGresult *whet_pg_query_stoppable(PGconn *conn, const char *sql, int nparams, const char *const *params,
                                  const struct background *b, int *stopping, struct whet_err *err) {
    if (!PQsendQueryParams(conn, sql, nparams, NULL, params, NULL, NULL, 0)) {
        whet_pg_error(NULL, conn, err);
        return NULL;
    }
    int cancelled = 0;
    while (PQisBusy(conn)) {
        if (!cancelled && background_wait(b, PQsocket(conn), POLLIN, -1) < 0) {
            /* Told to stop: the server cancels the statement and answers with an error, read below. */
            cancelled = *stopping = 1;
            char why[256];
            PGcancel *cancel = PQgetCancel(conn);
            if (cancel) PQcancel(cancel, why, sizeof why);
            PQfreeCancel(cancel);
            continue;
        }
        if (cancelled) {
            struct pollfd p = {.fd = PQsocket(conn), .events = POLLIN};
            if (poll(&p, 1, 5000) <= 0) return whet_errf(err, "stopped"), NULL; /* the caller closes the connection */
        }
        if (!PQconsumeInput(conn)) break;
    }
    /* The last result is the statement's; a failed one comes with PostgreSQL's message. */
    PGresult *res = NULL, *next;
    while ((next = PQgetResult(conn))) {
        PQclear(res);
        res = next;
    }
    ExecStatusType st = PQresultStatus(res);
    if (res && !*stopping && (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)) return res;
    if (*stopping) whet_errf(err, "stopped");
    else whet_pg_error(res, conn, err);
    PQclear(res);
    return NULL;
}

int whet_pg_exec(PGconn *conn, const char *sql, int nparams, const char *const *params, struct whet_err *err) {
    PGresult *res = whet_pg_query(conn, sql, nparams, params, err);
    if (!res) return -1;
    PQclear(res);
    return 0;
}
