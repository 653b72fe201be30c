/* maintenance.c - the leader's maintenance thread: the passes that look after the database and the object
 * store, away from the placement cycle.
 *
 * A pass may wait: whet_partitions_maintain() up to its lock_timeout for job_events, the object store's removals
 * for their round trips. On the cycle's thread such a wait held up placement, leases and the heartbeats'
 * answers; here it holds up only the next pass. The thread has its own PostgreSQL connection and runs while
 * this scheduler leads (scheduler.c starts it when it takes the lead and stops it when it steps down, so a
 * standby never maintains anything); every PASS_EVERY_MS, and at once on `NOTIFY whet_maintenance`, it runs:
 *   - the event and usage partitions (partitions.c), hourly by their own clock, at once on the NOTIFY;
 *   - the throughput of the jobs that succeeded since the last pass, folded for the estimate (throughput.c);
 *   - with an object store (WHET_OBJECT_STORE), the checkpoint retention (checkpoint_retention.c) and the
 *     removal of attempts' unreferenced objects (attempt_gc.c).
 * The passes are independent: one that fails is logged (and counted) and the others still run; a broken
 * connection is made again before the next round. A stop cancels a statement that waits (pg.h). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

#include "background.h"
#include "log.h"
#include "objstore.h"
#include "pg.h"
#include "service_internal.h"

#define PASS_EVERY_MS 5000

struct maintenance {
    struct background thread;
    const struct scheduler_options *opts;
};

int maintenance_remove_prefixes(struct maintenance_pass *p, const struct prefix_removal *r, struct whet_err *err) {
    if (whet_pg_exec(p->conn, "BEGIN", 0, NULL, err) < 0) return -1;
    char batch[16];
    snprintf(batch, sizeof batch, "%d", r->batch);
    const char *params[] = {batch};
    PGresult *res = whet_pg_query(p->conn, r->select_sql, 1, params, err);
    if (!res) goto fail;
    int n = PQntuples(res), removed = 0;
    for (int i = 0; i < n; i++) {
        const char *id = PQgetvalue(res, i, 0), *prefix = PQgetvalue(res, i, 1);
        struct whet_err left;
        if ((r->remove ? r->remove(p->store, res, i, &left) : objstore_delete_dir(p->store, prefix, &left)) != 0) {
            log_warn("msg=\"%s\" id=%s prefix=%s error=\"%s\"", r->left_msg, id, prefix, left.msg);
            r->failed();
            continue;
        }
        const char *done[] = {id};
        if (whet_pg_exec(p->conn, r->done_sql, 1, done, err) < 0) {
            PQclear(res);
            goto fail;
        }
        removed++;
    }
    PQclear(res);
    if (whet_pg_exec(p->conn, "COMMIT", 0, NULL, err) < 0) return -1;
    if (removed > 0) log_info("msg=\"%s\" prefixes=%d", r->removed_msg, removed);
    /* A batch with a failure is not followed at once: the store is likely down. */
    return removed == r->batch ? r->batch : 0;
fail:
    PQclear(PQexec(p->conn, "ROLLBACK"));
    return -1;
}

/* Drains the NOTIFYs that arrived: 1 when one did (the passes with timers of their own run now), -1 when the
 * connection broke. */
static int notified(PGconn *conn) {
    if (!PQconsumeInput(conn)) return -1;
    int any = 0;
    PGnotify *note;
    while ((note = PQnotifies(conn))) {
        PQfreemem(note);
        any = 1;
    }
    return any;
}

static void *maintenance_main(void *arg) {
    struct maintenance *m = arg;
    struct maintenance_pass p = {.opts = m->opts, .thread = &m->thread};
    struct whet_err err;
    int warned = 0;
    if (m->opts->object_store && objstore_open(m->opts->object_store, &p.store, &err) != 0) p.store = NULL;
    if (!p.store)
        log_warn("msg=\"checkpoint retention and attempt garbage collection are off: no object store to remove files "
                 "from\" error=\"%s\"",
                 m->opts->object_store ? err.msg : "WHET_OBJECT_STORE is not set");
    /* The first round at once: a new leader may find a backlog. */
    for (int wait_ms = 0; !p.stopping;) {
        int woke = p.conn ? background_wait(&m->thread, PQsocket(p.conn), POLLIN, wait_ms)
                          : background_wait(&m->thread, -1, 0, wait_ms);
        if (woke < 0) break;
        wait_ms = PASS_EVERY_MS;
        if (!p.conn) {
            if (!(p.conn = whet_pg_connect_stoppable(m->opts->database_url, &m->thread, &p.stopping, &err)) ||
                whet_pg_exec(p.conn, "LISTEN whet_maintenance", 0, NULL, &err) < 0) {
                if (!p.stopping && !warned++)
                    log_warn("msg=\"maintenance waits for the database\" error=\"%s\"", err.msg);
                PQfinish(p.conn);
                p.conn = NULL;
                continue;
            }
            warned = 0;
        }
        if ((p.forced = notified(p.conn)) < 0) {
            PQfinish(p.conn);
            p.conn = NULL;
            continue;
        }
        if (scheduler_partitions(&p, &err) < 0 && !p.stopping) {
            log_warn("msg=\"event and usage partitions not maintained\" error=\"%s\"", err.msg);
            scheduler_metrics_maintenance_failed("partitions");
        }
        if (!p.stopping && throughput_fold_pass(&p, &err) < 0 && !p.stopping) {
            log_warn("msg=\"throughput not folded; trying again at the next pass\" error=\"%s\"", err.msg);
            scheduler_metrics_maintenance_failed("throughput");
        }
        if (p.store && !p.stopping && checkpoint_retention_pass(&p, &err) < 0 && !p.stopping) {
            log_warn("msg=\"checkpoint retention pass failed; trying again at the next\" error=\"%s\"", err.msg);
            scheduler_metrics_maintenance_failed("checkpoint_retention");
        }
        if (p.store && !p.stopping && attempt_gc_pass(&p, &err) < 0 && !p.stopping) {
            log_warn("msg=\"attempt garbage collection pass failed; trying again at the next\" error=\"%s\"", err.msg);
            scheduler_metrics_maintenance_failed("attempt_gc");
        }
        if (PQstatus(p.conn) != CONNECTION_OK || PQtransactionStatus(p.conn) != PQTRANS_IDLE) {
            PQfinish(p.conn);
            p.conn = NULL;
        }
    }
    PQfinish(p.conn);
    objstore_close(p.store);
    return NULL;
}

struct maintenance *maintenance_start(const struct scheduler_options *opts) {
    struct maintenance *m = xcalloc(1, sizeof *m);
    m->opts = opts;
    if (background_start(&m->thread, maintenance_main, m) < 0) {
        log_warn("msg=\"maintenance thread not started: no event partitions made, no checkpoint or attempt files "
                 "removed\"");
        free(m);
        return NULL;
    }
    return m;
}

void maintenance_stop(struct maintenance *m) {
    if (!m) return;
    background_stop(&m->thread);
    free(m);
}
