/* change_log.c - where the leader's next read of a change log (running_changes, node_changes) starts.
 *
 * Triggers name what changed in a log table, each row with its transaction id. Which rows are new is
 * decided by transaction ids, not commit order: each read first takes the xmin of a snapshot (the oldest
 * transaction then unfinished) and the next read takes every row from that xmin on, so a transaction that
 * commits late is read then; rows below it were seen by the read and are deleted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg.h"
#include "service_internal.h"

int change_log_advance(PGconn *conn, const char *table, const char *previous, char xmin[CHANGE_XMIN_LEN],
                       struct whet_err *err) {
    /* The rows the previous read saw go (all of them before a first read, which sees them); the xmin
     * of this statement's snapshot, older than the read that follows, is where the next read starts. */
    char sql[256];
    snprintf(sql, sizeof sql,
             "WITH d AS (DELETE FROM %s WHERE xid < coalesce($1::xid8, pg_snapshot_xmin(pg_current_snapshot())))"
             " SELECT pg_snapshot_xmin(pg_current_snapshot())::text",
             table);
    const char *params[] = {previous};
    PGresult *res = whet_pg_query(conn, sql, 1, params, err);
    if (!res) return -1;
    snprintf(xmin, CHANGE_XMIN_LEN, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return 0;
}

int change_log_drop(void *entries, int n, size_t size, size_t id_offset, const PGresult *res, void (*drop)(void *)) {
    int changed_n = PQntuples(res);
    char **changed = xcalloc((size_t)changed_n + 1, sizeof *changed);
    for (int i = 0; i < changed_n; i++) changed[i] = PQgetvalue(res, i, 0);
    qsort(changed, (size_t)changed_n, sizeof *changed, whet_cmp_strp);
    char *base = entries;
    int kept = 0;
    for (int i = 0; i < n; i++) {
        char *entry = base + (size_t)i * size;
        if (changed_n && bsearch(entry + id_offset, changed, (size_t)changed_n, sizeof *changed, whet_cmp_strp))
            drop(entry);
        else if (kept++ < i) memcpy(base + (size_t)(kept - 1) * size, entry, size);
    }
    free(changed);
    return kept;
}
