/* checkpoint_retention.c - the checkpoints the object store stops keeping (migration 0040 has the rules).
 *
 * A pass of the leader's maintenance thread (maintenance.c), because removing objects from an S3 store
 * takes round trips the placement cycle must not wait on. A pass first lets whet_checkpoint_retention()
 * move what the rules let go from `checkpoints` to `checkpoint_deletions` (from then on nothing lists,
 * serves or resumes from it, and its storage is no longer metered), then removes the objects of moved
 * rows and stamps them purged. A row's objects are removed inside the transaction that holds its row lock,
 * so two leaders for a moment never remove the same prefix twice; a removal that fails is left for the
 * next pass. Without an object store the pass does not run: rows whose objects could not go are not hidden. */
#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "objstore.h"
#include "pg.h"
#include "service_internal.h"

/* Queued jobs per call of the SQL function, and prefixes removed per transaction; a full batch is followed by
 * another at once, so a backlog (new settings queue every job) drains without one long transaction. */
#define JOBS_BATCH 200
#define PURGE_BATCH 32

/* The operator's settings as the SQL function's parameters. */
struct retention_settings {
    char keep[16], deleted_model_keep_s[24];
};

/* Moves what the rules let go; the number of queued jobs looked at (JOBS_BATCH: more are due), -1 on error. */
static int move_batch(const struct retention_settings *r, PGconn *conn, struct whet_err *err) {
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

/* The deleted rows whose objects are still stored, oldest deletion first. */
static const struct prefix_removal purge = {
    .select_sql = "SELECT id, object_prefix FROM checkpoint_deletions WHERE purged_at IS NULL"
                  " ORDER BY deleted_at LIMIT $1::int FOR UPDATE SKIP LOCKED",
    .done_sql = "UPDATE checkpoint_deletions SET purged_at = whet_now() WHERE id = $1",
    .batch = PURGE_BATCH,
    .left_msg = "a deleted checkpoint's files stay in the object store until the next pass",
    .removed_msg = "deleted checkpoints' files removed from the object store",
    .failed = scheduler_metrics_checkpoint_purge_failed,
};

int checkpoint_retention_pass(struct maintenance_pass *p, struct whet_err *err) {
    struct retention_settings r;
    snprintf(r.keep, sizeof r.keep, "%d", p->opts->checkpoint_keep);
    r.deleted_model_keep_s[0] = 0;
    if (p->opts->deleted_model_keep_s >= 0)
        snprintf(r.deleted_model_keep_s, sizeof r.deleted_model_keep_s, "%lld", p->opts->deleted_model_keep_s);
    int n;
    while ((n = move_batch(&r, p->conn, err)) == JOBS_BATCH && background_wait(p->thread, -1, 0, 0) == 0) continue;
    if (n >= 0)
        while ((n = maintenance_remove_prefixes(p, &purge, err)) == PURGE_BATCH &&
               background_wait(p->thread, -1, 0, 0) == 0)
            continue;
    return n < 0 ? -1 : 0;
}
