/* throughput.c - the successes the estimate learns from (migration 0060): a pass of the leader's maintenance
 * thread (maintenance.c) folds the jobs named in throughput_queue into the throughput aggregate, FOLD_BATCH at a
 * time in a transaction each, until the queue is empty or FOLD_ROUNDS_MAX batches ran (what is left waits for the
 * next pass: a pass must not hold up the others for long). FinishJob only names the job: folding it there took
 * a third of a finish's time under churn. */
#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "pg.h"
#include "service_internal.h"

#define FOLD_BATCH 500
#define FOLD_ROUNDS_MAX 20

int throughput_fold_pass(struct maintenance_pass *p, struct whet_err *err) {
    char batch[16];
    snprintf(batch, sizeof batch, "%d", FOLD_BATCH);
    const char *params[] = {batch};
    int folded = 0;
    for (int round = 0; round < FOLD_ROUNDS_MAX && !p->stopping; round++) {
        PGresult *res = whet_pg_query_stoppable(p->conn, "SELECT whet_throughput_fold($1::int)", 1, params, p->thread,
                                                &p->stopping, err);
        if (!res) return -1;
        int n = atoi(PQgetvalue(res, 0, 0));
        PQclear(res);
        folded += n;
        if (n < FOLD_BATCH) break;
    }
    if (folded > 0) log_debug("msg=\"throughput folded\" jobs=%d", folded);
    return 0;
}
