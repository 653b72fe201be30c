/* retention.c - what the database stops keeping. Idempotency-Key rows live 24 hours (migration 0039);
 * clients send a fresh key with nearly every write, so without this the table grows by a row a write.
 * The leader deletes expired rows in batches of RETENTION_BATCH, at most every RETENTION_EVERY_S; a full
 * batch is followed by another at the next cycle, so a backlog drains without one long statement holding
 * locks. */
#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "pg.h"
#include "service_internal.h"

#define RETENTION_EVERY_S 60
#define RETENTION_BATCH 5000

/* When the next batch is due (the leader's cycle runs on one thread). */
static double next_batch;

int scheduler_retention(PGconn *conn, struct whet_err *err) {
    double now = whet_now_mono();
    if (now < next_batch) return 0;
    char batch[16];
    snprintf(batch, sizeof batch, "%d", RETENTION_BATCH);
    const char *params[] = {batch};
    PGresult *res =
        whet_pg_query(conn,
                      "DELETE FROM idempotency_keys WHERE ctid = ANY (ARRAY(SELECT ctid FROM idempotency_keys"
                      " WHERE created_at <= whet_now() - whet_idempotency_ttl_s() LIMIT $1::int))",
                      1, params, err);
    if (!res) return -1;
    long deleted = atol(PQcmdTuples(res));
    PQclear(res);
    if (deleted > 0) log_info("msg=\"expired idempotency keys deleted\" rows=%ld", deleted);
    next_batch = deleted == RETENTION_BATCH ? 0 : now + RETENTION_EVERY_S;
    return 0;
}
