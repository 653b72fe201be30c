/* checkpoint_retention.c - the checkpoints the object store stops keeping (migration 0040 has the rules).
 *
 * The leader runs it on a thread of its own (background.h), because removing objects from an S3 store
 * takes round trips the placement cycle must not wait on. A pass first lets whet_checkpoint_retention()
 * move what the rules let go from `checkpoints` to `checkpoint_deletions` (from then on nothing lists,
 * serves or resumes from it, and its storage is no longer metered), then removes the objects of moved
 * rows and stamps them purged. A row's objects are removed inside the transaction that holds its row lock,
 * so two leaders for a moment never remove the same prefix twice; a removal that fails is left for the
 * next pass. Without an object store nothing is moved: rows whose objects could not go are not hidden. */
#include <stdio.h>
#include <stdlib.h>

#include "background.h"
#include "log.h"
#include "objstore.h"
#include "pg.h"
#include "service_internal.h"

#define PASS_EVERY_MS 5000
/* Queued jobs per call of the SQL function, and prefixes removed per transaction; a full batch is followed by
 * another at once, so a backlog (new settings queue every job) drains without one long transaction. */
#define JOBS_BATCH 200
#define PURGE_BATCH 32

struct checkpoint_retention {
    struct background thread;
    const struct scheduler_options *opts;
    char keep[16], deleted_model_keep_s[24];
};

/* Moves what the rules let go; the number of queued jobs looked at (JOBS_BATCH: more are due), -1 on error. */
static int move_batch(const struct checkpoint_retention *r, PGconn *conn, struct whet_err *err) {
    char batch[16];
    snprintf(batch, sizeof batch, "%d", JOBS_BATCH);
    const char *params[] = {r->keep, r->deleted_model_keep_s[0] ? r->deleted_model_keep_s : NULL, batch};
    PGresult *res = whet_pg_query(
        conn, "SELECT looked_at, moved FROM whet_checkpoint_retention($1::int, $2::bigint, $3::int)", 3, params, err);
    if (!res) return -1;
    int looked_at = atoi(PQgetvalue(res, 0, 0)), moved = atoi(PQgetvalue(res, 0, 1));
    PQclear(res);
    if (moved > 0) {
        log_info("msg=\"checkpoints deleted by retention\" checkpoints=%d jobs=%d", moved, looked_at);
        scheduler_metrics_checkpoints_deleted(moved);
    }
    return looked_at;
}

/* Removes the objects of up to PURGE_BATCH moved rows: PURGE_BATCH when a whole batch went (more may wait),
 * 0 when less did, -1 on a database error. */
static int purge_batch(PGconn *conn, struct objstore *store, struct whet_err *err) {
    if (whet_pg_exec(conn, "BEGIN", 0, NULL, err) < 0) return -1;
    char batch[16];
    snprintf(batch, sizeof batch, "%d", PURGE_BATCH);
    const char *params[] = {batch};
    PGresult *res = whet_pg_query(conn,
                                  "SELECT id, object_prefix FROM checkpoint_deletions WHERE purged_at IS NULL"
                                  " ORDER BY deleted_at LIMIT $1::int FOR UPDATE SKIP LOCKED",
                                  1, params, err);
    if (!res) goto fail;
    int n = PQntuples(res), purged = 0;
    for (int i = 0; i < n; i++) {
        const char *id = PQgetvalue(res, i, 0), *prefix = PQgetvalue(res, i, 1);
        struct whet_err left;
        if (objstore_delete_dir(store, prefix, &left) != 0) {
            log_warn("msg=\"a deleted checkpoint's files stay in the object store until the next pass\" checkpoint=%s "
                     "prefix=%s error=\"%s\"",
                     id, prefix, left.msg);
            scheduler_metrics_checkpoint_purge_failed();
            continue;
        }
        const char *done[] = {id};
        if (whet_pg_exec(conn, "UPDATE checkpoint_deletions SET purged_at = whet_now() WHERE id = $1", 1, done, err) <
            0) {
            PQclear(res);
            goto fail;
        }
        purged++;
    }
    PQclear(res);
    if (whet_pg_exec(conn, "COMMIT", 0, NULL, err) < 0) return -1;
    if (purged > 0) log_info("msg=\"deleted checkpoints' files removed from the object store\" checkpoints=%d", purged);
    /* A batch with a failure is not followed at once: the store is likely down. */
    return purged == PURGE_BATCH ? PURGE_BATCH : 0;
fail:
    PQclear(PQexec(conn, "ROLLBACK"));
    return -1;
}

static void *retention_main(void *arg) {
    struct checkpoint_retention *r = arg;
    PGconn *conn = NULL;
    struct objstore *store = NULL;
    int stopping = 0, warned = 0;
    struct whet_err err;
    if (!r->opts->object_store || objstore_open(r->opts->object_store, &store, &err) != 0) {
        log_warn("msg=\"checkpoint retention is off: no object store to remove checkpoints from\" error=\"%s\"",
                 r->opts->object_store ? err.msg : "WHET_OBJECT_STORE is not set");
        return NULL;
    }
    /* The first pass at once: a new leader may find a backlog. */
    for (int wait_ms = 0; !stopping && background_wait(&r->thread, -1, 0, wait_ms) == 0; wait_ms = PASS_EVERY_MS) {
        if (!conn && !(conn = whet_pg_connect_stoppable(r->opts->database_url, &r->thread, &stopping, &err))) {
            if (!stopping && !warned++)
                log_warn("msg=\"checkpoint retention waits for the database\" error=\"%s\"", err.msg);
            continue;
        }
        warned = 0;
        int n;
        while ((n = move_batch(r, conn, &err)) == JOBS_BATCH && background_wait(&r->thread, -1, 0, 0) == 0) continue;
        if (n >= 0)
            while ((n = purge_batch(conn, store, &err)) == PURGE_BATCH && background_wait(&r->thread, -1, 0, 0) == 0)
                continue;
        if (n < 0) {
            log_warn("msg=\"checkpoint retention pass failed; trying again at the next\" error=\"%s\"", err.msg);
            PQfinish(conn);
            conn = NULL;
        }
    }
    PQfinish(conn);
    objstore_close(store);
    return NULL;
}

struct checkpoint_retention *checkpoint_retention_start(const struct scheduler_options *opts) {
    struct checkpoint_retention *r = xcalloc(1, sizeof *r);
    r->opts = opts;
    snprintf(r->keep, sizeof r->keep, "%d", opts->checkpoint_keep);
    if (opts->deleted_model_keep_s >= 0)
        snprintf(r->deleted_model_keep_s, sizeof r->deleted_model_keep_s, "%lld", opts->deleted_model_keep_s);
    if (background_start(&r->thread, retention_main, r) < 0) {
        log_warn("msg=\"checkpoint retention not started: every checkpoint is kept\"");
        free(r);
        return NULL;
    }
    return r;
}

void checkpoint_retention_stop(struct checkpoint_retention *r) {
    if (!r) return;
    background_stop(&r->thread);
    free(r);
}
