/* attempt_gc.c - the files of ended attempts that nothing references leave the object store (issue 15;
 * migration 0049 has the rules).
 *
 * Each attempt writes under jobs/<job>/attempt-<N>/ (manifest.c). An attempt declared lost whose trainer ran
 * on, a late final model that was refused, an attempt stopped before its first checkpoint: their uploads are
 * listed, served and metered by nothing. A pass of the leader's maintenance thread (maintenance.c), with an
 * object store only, first lets whet_attempt_gc() decide about the queued attempts whose grace period has
 * passed (a prefix nothing references moves to attempt_gc_removals), then removes the decided prefixes, each
 * in the transaction that holds its row (maintenance_remove_prefixes); a removal that fails is left for the
 * next pass. Only queued attempts are looked at, so a pass costs O(what changed), never O(every job). */
#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "pg.h"
#include "service_internal.h"

/* Queued attempts per call of the SQL function, and prefixes removed per transaction; a full batch is followed
 * by another at once. */
#define DECIDE_BATCH 200
#define REMOVE_BATCH 32

/* Decides about one batch of due attempts: how many were looked at (DECIDE_BATCH: more are due), -1 on error. */
static int decide_batch(struct maintenance_pass *p, struct whet_err *err) {
    char grace[24], batch[16];
    snprintf(grace, sizeof grace, "%lld", p->opts->attempt_gc_grace_s);
    snprintf(batch, sizeof batch, "%d", DECIDE_BATCH);
    const char *params[] = {grace, batch};
    PGresult *res =
        whet_pg_query(p->conn, "SELECT looked_at, doomed FROM whet_attempt_gc($1::bigint, $2::int)", 2, params, err);
    if (!res) return -1;
    int looked_at = atoi(PQgetvalue(res, 0, 0)), doomed = atoi(PQgetvalue(res, 0, 1));
    PQclear(res);
    if (doomed > 0)
        log_info("msg=\"ended attempts' unreferenced files to be removed\" attempts=%d looked_at=%d", doomed,
                 looked_at);
    return looked_at;
}

static const struct prefix_removal removal = {
    .select_sql = "SELECT object_prefix, object_prefix FROM attempt_gc_removals"
                  " ORDER BY decided_at LIMIT $1::int FOR UPDATE SKIP LOCKED",
    .done_sql = "DELETE FROM attempt_gc_removals WHERE object_prefix = $1",
    .batch = REMOVE_BATCH,
    .left_msg = "an ended attempt's unreferenced files stay in the object store until the next pass",
    .removed_msg = "ended attempts' unreferenced files removed from the object store",
    .failed = scheduler_metrics_attempt_gc_failed,
    .removed = scheduler_metrics_attempt_prefixes_removed,
};

int attempt_gc_pass(struct maintenance_pass *p, struct whet_err *err) {
    int n;
    while ((n = decide_batch(p, err)) == DECIDE_BATCH && background_wait(p->thread, -1, 0, 0) == 0) continue;
    if (n >= 0)
        while ((n = maintenance_remove_prefixes(p, &removal, err)) == REMOVE_BATCH &&
               background_wait(p->thread, -1, 0, 0) == 0)
            continue;
    return n < 0 ? -1 : 0;
}
