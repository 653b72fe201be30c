/* replica.c - the gateway's own PostgreSQL session for what replicas share (see replica.h). The thread
 * (background.h) waits on the session's socket and a heartbeat timer, and connects without blocking, so
 * that a stop is never held up by an unreachable database; its statements run under a short
 * statement_timeout. */
#include "replica.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "crypto.h"
#include "log.h"
#include "pg.h"
#include "server.h"
#include "util.h"

#define RETRY_MIN_MS 200
#define RETRY_MAX_MS 5000
#define HEARTBEAT_MS 1000

struct replica {
    struct background thread;
    char *database_url;
    char id[40]; /* this replica's row in gateway_replicas */
};

static void log_session_error(const char *what, const char *why) {
    log_warn("msg=\"gateway replica session %s; until it is back, keys revoked elsewhere are refused after the "
             "auth cache TTL (WHET_GATEWAY_AUTH_CACHE_MS) and the replica count stays as last seen\" error=\"%.*s\"",
             what, (int)strcspn(why, "\n"), why);
}

/* Runs one command; 0 when it succeeded. */
static int exec_ok(PGconn *conn, const char *sql) {
    PGresult *res = PQexec(conn, sql);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    return ok ? 0 : -1;
}

/* Connects and LISTENs; NULL when that failed (logged) or when stopping (*stopping set). */
static PGconn *session_connect(const struct replica *l, int *stopping) {
    struct whet_err err;
    PGconn *conn = whet_pg_connect_stoppable(l->database_url, &l->thread, stopping, &err);
    if (!conn) {
        if (!*stopping) log_session_error("cannot connect; retrying", err.msg);
        return NULL;
    }
    if (exec_ok(conn, "SET statement_timeout = '2s'") == 0 && exec_ok(conn, "LISTEN whet_auth") == 0) return conn;
    log_session_error("cannot LISTEN on whet_auth; retrying", PQerrorMessage(conn));
    PQfinish(conn);
    return NULL;
}

/* Empties the auth caches when notifications arrived (PQexec queues those that come with its result). */
static void take_notifications(PGconn *conn) {
    PGnotify *n;
    int any = 0;
    while ((n = PQnotifies(conn))) {
        any = 1;
        PQfreemem(n);
    }
    if (any) atomic_fetch_add(&gw_auth_epoch, 1);
}

/* Marks this replica alive and counts the live ones (the rows written in the last 3 heartbeats, this
 * one included; the row it writes is not visible to the statement's own count). Forgets rows a minute
 * old: replicas that died without replica_stop(). Returns -1 when the session failed. */
static int heartbeat(const struct replica *l, PGconn *conn) {
    const char *params[] = {l->id};
    PGresult *res = PQexecParams(
        conn,
        "WITH up AS (INSERT INTO gateway_replicas (id, seen_at) VALUES ($1, now()) "
        "  ON CONFLICT (id) DO UPDATE SET seen_at = now()), "
        "gone AS (DELETE FROM gateway_replicas WHERE seen_at < now() - interval '1 minute') "
        "SELECT count(*) + 1 FROM gateway_replicas WHERE id <> $1 AND seen_at > now() - interval '3 seconds'",
        1, NULL, params, NULL, NULL, 0);
    int ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
    if (ok) {
        long n = strtol(PQgetvalue(res, 0, 0), NULL, 10);
        atomic_store(&gw_replicas, n > 0 ? (unsigned)n : 1u);
    }
    PQclear(res);
    take_notifications(conn);
    return ok ? 0 : -1;
}

/* Serves one session until it fails (returns 0) or the replica stops (returns -1). */
static int session_serve(const struct replica *l, PGconn *conn) {
    atomic_fetch_add(&gw_auth_epoch, 1); /* notifications sent while no session listened are lost */
    for (;;) {
        if (heartbeat(l, conn) < 0) {
            log_session_error("failed its heartbeat; reconnecting", PQerrorMessage(conn));
            return 0;
        }
        int ready;
        while ((ready = background_wait(&l->thread, PQsocket(conn), POLLIN, HEARTBEAT_MS)) > 0) {
            if (!PQconsumeInput(conn)) {
                log_session_error("lost its connection; reconnecting", PQerrorMessage(conn));
                return 0;
            }
            take_notifications(conn);
        }
        if (ready < 0) return -1;
    }
}

static void *replica_main(void *arg) {
    struct replica *l = arg;
    int retry_ms = RETRY_MIN_MS, stopping = 0;
    while (!stopping) {
        PGconn *conn = session_connect(l, &stopping);
        if (!conn) {
            if (!stopping && background_wait(&l->thread, -1, 0, retry_ms) < 0) stopping = 1;
            retry_ms = retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : retry_ms * 2;
            continue;
        }
        retry_ms = RETRY_MIN_MS;
        if (session_serve(l, conn) < 0) {
            stopping = 1;
            const char *params[] = {l->id};
            PQclear(PQexecParams(conn, "DELETE FROM gateway_replicas WHERE id = $1", 1, NULL, params, NULL, NULL, 0));
        }
        PQfinish(conn);
    }
    return NULL;
}

struct replica *replica_start(const char *database_url) {
    struct replica *l = xcalloc(1, sizeof *l);
    l->database_url = xstrdup(database_url);
    whet_random_id("gw-", 24, l->id);
    if (background_start(&l->thread, replica_main, l) < 0) {
        log_warn("msg=\"gateway replica session not started: keys revoked elsewhere are refused after the auth "
                 "cache TTL, and this replica enforces the whole rate limits\"");
        free(l->database_url);
        free(l);
        return NULL;
    }
    return l;
}

void replica_stop(struct replica *l) {
    if (!l) return;
    background_stop(&l->thread);
    free(l->database_url);
    free(l);
}
