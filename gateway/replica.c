/* replica.c - the gateway's own PostgreSQL session for what replicas share (see replica.h). The thread
 * waits with poll() on the session's socket, a heartbeat timer and an eventfd that replica_stop()
 * writes; it connects without blocking (PQconnectStart/PQconnectPoll) so that a stop is never held up
 * by an unreachable database, and its statements run under a short statement_timeout. */
#include "replica.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "crypto.h"
#include "log.h"
#include "server.h"
#include "util.h"

#define RETRY_MIN_MS 200
#define RETRY_MAX_MS 5000
#define HEARTBEAT_MS 1000

struct replica {
    pthread_t tid;
    int stop_fd; /* eventfd: readable once replica_stop() has run */
    char *database_url;
    char id[40]; /* this replica's row in gateway_replicas */
};

/* Waits until `fd` is ready for `events` or the stop eventfd is readable, at most timeout_ms (-1:
 * unbounded). Returns 1 when fd is ready, 0 on timeout, -1 when stopping. */
static int wait_fd(const struct replica *l, int fd, short events, int timeout_ms) {
    struct pollfd p[2] = {{.fd = l->stop_fd, .events = POLLIN}, {.fd = fd, .events = events}};
    for (;;) {
        int n = poll(p, fd >= 0 ? 2 : 1, timeout_ms);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || p[0].revents) return -1;
        return n > 0;
    }
}

static void log_session_error(const char *what, PGconn *conn) {
    const char *why = conn ? PQerrorMessage(conn) : "out of memory";
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
    PGconn *conn = PQconnectStart(l->database_url);
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    while (conn && PQstatus(conn) != CONNECTION_BAD && st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
        int ready = wait_fd(l, PQsocket(conn), st == PGRES_POLLING_READING ? POLLIN : POLLOUT, RETRY_MAX_MS * 2);
        if (ready < 0) {
            *stopping = 1;
            PQfinish(conn);
            return NULL;
        }
        st = PQconnectPoll(conn);
    }
    if (conn && PQstatus(conn) == CONNECTION_OK && exec_ok(conn, "SET statement_timeout = '2s'") == 0 &&
        exec_ok(conn, "LISTEN whet_auth") == 0)
        return conn;
    log_session_error("cannot connect and LISTEN on whet_auth; retrying", conn);
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
            log_session_error("failed its heartbeat; reconnecting", conn);
            return 0;
        }
        int ready;
        while ((ready = wait_fd(l, PQsocket(conn), POLLIN, HEARTBEAT_MS)) > 0) {
            if (!PQconsumeInput(conn)) {
                log_session_error("lost its connection; reconnecting", conn);
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
            if (!stopping && wait_fd(l, -1, 0, retry_ms) < 0) stopping = 1;
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
    l->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (l->stop_fd < 0 || pthread_create(&l->tid, NULL, replica_main, l) != 0) {
        log_warn("msg=\"gateway replica session not started: keys revoked elsewhere are refused after the auth "
                 "cache TTL, and this replica enforces the whole rate limits\"");
        if (l->stop_fd >= 0) close(l->stop_fd);
        free(l->database_url);
        free(l);
        return NULL;
    }
    return l;
}

void replica_stop(struct replica *l) {
    if (!l) return;
    uint64_t one = 1;
    ssize_t w = write(l->stop_fd, &one, sizeof one);
    (void)w;
    pthread_join(l->tid, NULL);
    close(l->stop_fd);
    free(l->database_url);
    free(l);
}
