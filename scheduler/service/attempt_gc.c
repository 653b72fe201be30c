/* attempt_gc.c - the files of ended attempts that nothing references leave the object store (issue 15;
 * migration 0050 has the rules).
 *
 * Each attempt writes under jobs/<job>/attempt-<N>/ (manifest.c). An attempt declared lost whose trainer ran
 * on, a late final model that was refused, an attempt stopped before its first checkpoint: their uploads are
 * listed, served and metered by nothing. A pass of the leader's maintenance thread (maintenance.c), with an
 * object store only, first lets whet_attempt_gc() decide about the queued attempts whose grace period has
 * passed (each moves to attempt_gc_removals with the keys under it that rows reference: its checkpoints,
 * the job's final model and result file), then removes everything else under those prefixes, each in the
 * transaction that holds its row (maintenance_remove_prefixes); a removal that fails is left for the next
 * pass. Only queued attempts are looked at, so a pass costs O(what changed), never O(every job). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "objstore.h"
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

/* The keys under an attempt's prefix (in byte order). */
struct keys {
    char **names;
    size_t len, cap;
};

static int collect_key(void *ctx, const char *key, uint64_t size) {
    (void)size;
    struct keys *k = ctx;
    if (k->len == k->cap) k->names = xrealloc(k->names, (k->cap = k->cap ? 2 * k->cap : 64) * sizeof *k->names);
    k->names[k->len++] = xstrdup(key);
    return 0;
}

/* Whether `key` is referenced: one of `keep` (JSON strings), or inside one of them as a folder. */
static int kept(const char *key, const json_t *keep) {
    size_t i;
    json_t *v;
    json_array_foreach(keep, i, v) {
        const char *k = json_string_value(v);
        size_t n = strlen(k);
        if (!strncmp(key, k, n) && (key[n] == 0 || key[n] == '/')) return 1;
    }
    return 0;
}

/* Removes what lies under the row's prefix but what it keeps (column 2, a JSON array): a folder's manifest
 * first, as objstore_delete_dir does, so that a removal cut short leaves no folder that looks complete. */
static int remove_unreferenced(struct objstore *store, const PGresult *res, int row, struct whet_err *err) {
    json_t *keep = json_loads(PQgetvalue(res, row, 2), 0, NULL);
    char *under = xasprintf("%s/", PQgetvalue(res, row, 1));
    struct keys keys = {0};
    int rc = keep ? objstore_list(store, under, collect_key, &keys, err) : whet_errf(err, "bad keep list");
    int removed = 0;
    for (int manifests = 1; manifests >= 0 && rc == 0; manifests--)
        for (size_t i = 0; i < keys.len && rc == 0; i++) {
            int manifest = strcmp(strrchr(keys.names[i], '/') + 1, OBJSTORE_MANIFEST) == 0;
            if (manifest != manifests || kept(keys.names[i], keep)) continue;
            if ((rc = objstore_delete(store, keys.names[i], err)) == 0) removed++;
        }
    if (removed > 0) scheduler_metrics_attempt_objects_removed(removed);
    for (size_t i = 0; i < keys.len; i++) free(keys.names[i]);
    free(keys.names);
    free(under);
    json_decref(keep);
    return rc;
}

static const struct prefix_removal removal = {
    .select_sql = "SELECT object_prefix, object_prefix, array_to_json(keep) FROM attempt_gc_removals"
                  " ORDER BY decided_at LIMIT $1::int FOR UPDATE SKIP LOCKED",
    .done_sql = "DELETE FROM attempt_gc_removals WHERE object_prefix = $1",
    .batch = REMOVE_BATCH,
    .left_msg = "an ended attempt's unreferenced files stay in the object store until the next pass",
    .removed_msg = "ended attempts' unreferenced files removed from the object store",
    .failed = scheduler_metrics_attempt_gc_failed,
    .remove = remove_unreferenced,
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
