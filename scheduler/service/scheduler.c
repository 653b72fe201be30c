/* scheduler.c - the service's main loop: leader election, the gRPC server, cycles on NOTIFY and timer.
 *
 * Leadership is a PostgreSQL session-level advisory lock held by the main connection. If that
 * connection breaks (the database restarted), the leader stops serving, reconnects and competes for
 * the lock again; everything it needs is in the database, so nothing is lost on the way. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"
#include "pg.h"
#include "service_internal.h"

#define LEADER_LOCK_KEY "7265746878"

static volatile sig_atomic_t stopping;
static void on_signal(int sig) {
    (void)sig;
    stopping = 1;
}

/* Connects and takes the leader lock, waiting (and retrying) until both succeed or we are told to
 * stop. Returns the connection, or NULL when stopping. */
static PGconn *become_leader(const struct scheduler_options *opts) {
    int announced_standby = 0;
    while (!stopping) {
        struct whet_err err;
        PGconn *conn = whet_pg_connect(opts->database_url, &err);
        if (!conn) {
            log_warn("msg=\"database unavailable; retrying\" error=\"%s\"", err.msg);
            sleep(1);
            continue;
        }
        PGresult *res = whet_pg_query(conn, "SELECT pg_try_advisory_lock(" LEADER_LOCK_KEY ")", 0, NULL, &err);
        int got = res && PQgetvalue(res, 0, 0)[0] == 't';
        PQclear(res);
        /* A new leader renews every lease once: the nodes could not heartbeat while no scheduler led,
         * and declaring them all lost for it would requeue every running job. */
        /* No JIT for the cycle's statements: their row counts put them past jit_above_cost, and compiling
         * them every cycle cost more than running them (60 of 420 ms of the running-attempts query
         * with 8000 attempts, in tests/bench/scale). */
        if (got && whet_pg_exec(conn, "SET jit = off", 0, NULL, &err) == 0 &&
            whet_pg_exec(conn, "LISTEN whet_jobs", 0, NULL, &err) == 0 &&
            whet_pg_exec(conn,
                         "UPDATE nodes SET last_heartbeat = extract(epoch FROM clock_timestamp()) WHERE state = 'ready'",
                         0, NULL, &err) == 0)
            return conn;
        PQfinish(conn);
        if (!announced_standby) {
            log_info("msg=\"another scheduler leads; standing by\"");
            announced_standby = 1;
        }
        sleep(1);
    }
    return NULL;
}

void scheduler_wake(struct scheduler *s) {
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) {
        /* EAGAIN: the counter is full of wakes already */
    }
}

/* Waits up to `ms` for a NOTIFY, a scheduler_wake or a signal; drains both. -1 if the connection broke. */
static int wait_for_work(PGconn *conn, int wake_fd, int ms) {
    struct pollfd pfd[2] = {{.fd = PQsocket(conn), .events = POLLIN}, {.fd = wake_fd, .events = POLLIN}};
    int n = poll(pfd, 2, ms);
    if (n < 0 && errno != EINTR) return -1;
    if (n > 0 && pfd[1].revents) {
        uint64_t wakes;
        if (read(wake_fd, &wakes, sizeof wakes) < 0) {
            /* EAGAIN: another wait drained it */
        }
    }
    if (n > 0 && pfd[0].revents) {
        if (!PQconsumeInput(conn)) return -1;
        PGnotify *note;
        while ((note = PQnotifies(conn))) PQfreemem(note);
    }
    return PQstatus(conn) == CONNECTION_OK ? 0 : -1;
}

int scheduler_run(const struct scheduler_options *opts, struct whet_err *err) {
    struct scheduler sch = {.opts = opts, .wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)};
    if (sch.wake_fd < 0) return whet_errf(err, "eventfd: %s", strerror(errno));
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    if (opts->metrics_addr && scheduler_metrics_start(opts->metrics_addr, err) < 0) {
        close(sch.wake_fd);
        return -1;
    }
    while (!stopping) {
        PGconn *conn = become_leader(opts);
        if (!conn) break;
        struct rpc_server *server = NULL;
        scheduler_progress_init(opts->progress_ms);
        heartbeat_writers_start(&sch);
        while (!stopping && rpc_server_start(opts->grpc_addr, opts->executor_token, scheduler_methods,
                                             scheduler_n_methods, &sch, opts->rpc_threads, &server, err) < 0) {
            log_warn("msg=\"cannot serve gRPC yet; retrying\" error=\"%s\"", err->msg);
            sleep(1);
        }
        if (!server) {
            heartbeat_writers_stop();
            scheduler_progress_free();
            PQfinish(conn);
            break;
        }
        /* What changed while another led is unknown: read it all again, compare every row again. */
        scheduler_plan_drop(&sch);
        node_cache_reset(&sch.nodes);
        running_reset(&sch.running);
        queue_cache_reset(&sch.queue);
        public_state_reset(&sch.public_state);
        log_info("msg=\"leading\" grpc=%s policy=%s lease_ms=%d", opts->grpc_addr, opts->policy, opts->lease_ms);
        scheduler_metrics_leader(1);
        struct maintenance *maintenance = maintenance_start(opts);
        quiet_start(opts);
        double last_cycle = 0;
        while (!stopping) {
            /* A cycle at least every second: leases expire on the clock, not on notifications. */
            struct whet_err cerr;
            double started = whet_now_mono();
            int rc = scheduler_cycle(&sch, conn, &cerr), ok = rc >= 0;
            scheduler_metrics_cycle(whet_now_mono() - started, ok);
            if (!ok) {
                log_warn("msg=\"cycle failed\" error=\"%s\"", cerr.msg);
                if (PQstatus(conn) != CONNECTION_OK) break;
            }
            last_cycle = whet_now_mono();
            if (wait_for_work(conn, sch.wake_fd, rc == 1 ? 0 : 1000) < 0) break;
            double since = whet_now_mono() - last_cycle;
            if (since < 0.05) usleep(50 * 1000); /* bursts of wakes: one cycle per 50 ms is plenty */
        }
        scheduler_metrics_leader(0);
        maintenance_stop(maintenance);
        if (!stopping) log_warn("msg=\"lost the database; stepping down to compete again\"");
        rpc_server_stop(server); /* its deferred heartbeats answered by the writers */
        heartbeat_writers_stop();
        quiet_stop();
        scheduler_progress_free(); /* what another leader writes meanwhile is not ours to remember */
        PQfinish(conn);
    }
    scheduler_plan_drop(&sch);
    free(sch.running_spare);
    node_cache_reset(&sch.nodes);
    running_reset(&sch.running);
    queue_cache_reset(&sch.queue);
    public_state_reset(&sch.public_state);
    scheduler_metrics_stop();
    close(sch.wake_fd);
    log_info("msg=\"stopped\"");
    return 0;
}
