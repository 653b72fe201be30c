/* auth_listen.c - the thread that LISTENs on whet_auth for the auth cache (see auth_listen.h). It waits
 * with poll() on the session's socket and an eventfd that auth_listener_stop() writes, connecting
 * without blocking (PQconnectStart/PQconnectPoll) so that a stop is never held up by an unreachable
 * database. */
#include "auth_listen.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "log.h"
#include "server.h"
#include "util.h"

#define RETRY_MIN_MS 200
#define RETRY_MAX_MS 5000

struct auth_listener {
    pthread_t tid;
    int stop_fd; /* eventfd: readable once auth_listener_stop() has run */
    char *database_url;
};

/* Waits until `fd` is ready for `events` or the stop eventfd is readable, at most timeout_ms (-1:
 * unbounded). Returns 1 when fd is ready, 0 on timeout, -1 when stopping. */
static int wait_fd(const struct auth_listener *l, int fd, short events, int timeout_ms) {
    struct pollfd p[2] = {{.fd = l->stop_fd, .events = POLLIN}, {.fd = fd, .events = events}};
    for (;;) {
        int n = poll(p, fd >= 0 ? 2 : 1, timeout_ms);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || p[0].revents) return -1;
        return n > 0;
    }
}

/* Connects and LISTENs; NULL when that failed (logged) or when stopping (*stopping set). */
static PGconn *listen_connect(const struct auth_listener *l, int *stopping) {
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
    if (conn && PQstatus(conn) == CONNECTION_OK) {
        PGresult *res = PQexec(conn, "LISTEN whet_auth");
        int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        PQclear(res);
        if (ok && PQsetnonblocking(conn, 1) == 0) return conn;
    }
    const char *why = conn ? PQerrorMessage(conn) : "out of memory";
    log_warn("msg=\"auth cache listener cannot LISTEN on whet_auth; keys revoked elsewhere are refused after the "
             "cache TTL (WHET_GATEWAY_AUTH_CACHE_MS) meanwhile; retrying\" error=\"%.*s\"",
             (int)strcspn(why, "\n"), why);
    PQfinish(conn);
    return NULL;
}

static void *listen_main(void *arg) {
    struct auth_listener *l = arg;
    int retry_ms = RETRY_MIN_MS, stopping = 0;
    while (!stopping) {
        PGconn *conn = listen_connect(l, &stopping);
        if (!conn) {
            if (!stopping && wait_fd(l, -1, 0, retry_ms) < 0) stopping = 1;
            retry_ms = retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : retry_ms * 2;
            continue;
        }
        retry_ms = RETRY_MIN_MS;
        atomic_fetch_add(&gw_auth_epoch, 1); /* notifications sent while no session listened are lost */
        for (;;) {
            int ready = wait_fd(l, PQsocket(conn), POLLIN, -1);
            if (ready < 0) {
                stopping = 1;
                break;
            }
            if (!PQconsumeInput(conn)) {
                const char *why = PQerrorMessage(conn);
                log_warn("msg=\"auth cache listener lost its session; reconnecting\" error=\"%.*s\"",
                         (int)strcspn(why, "\n"), why);
                break;
            }
            PGnotify *n;
            int any = 0;
            while ((n = PQnotifies(conn))) {
                any = 1;
                PQfreemem(n);
            }
            if (any) atomic_fetch_add(&gw_auth_epoch, 1);
        }
        PQfinish(conn);
    }
    return NULL;
}

struct auth_listener *auth_listener_start(const char *database_url) {
    struct auth_listener *l = xcalloc(1, sizeof *l);
    l->database_url = xstrdup(database_url);
    l->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (l->stop_fd < 0 || pthread_create(&l->tid, NULL, listen_main, l) != 0) {
        log_warn("msg=\"auth cache listener not started; keys revoked elsewhere are refused after the cache TTL\"");
        if (l->stop_fd >= 0) close(l->stop_fd);
        free(l->database_url);
        free(l);
        return NULL;
    }
    return l;
}

void auth_listener_stop(struct auth_listener *l) {
    if (!l) return;
    uint64_t one = 1;
    ssize_t w = write(l->stop_fd, &one, sizeof one);
    (void)w;
    pthread_join(l->tid, NULL);
    close(l->stop_fd);
    free(l->database_url);
    free(l);
}
