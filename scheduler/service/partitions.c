/* partitions.c - the monthly partitions of job_events (migration 0044) and usage_records (migration 0051).
 * The leader's maintenance thread (maintenance.c) makes sure this month's and the next month's partitions
 * exist, moves rows that fell into a DEFAULT partition to their months', and, with a retention set, drops the
 * months that ended longer ago than it (usage: only a month with nothing recorded since): all in one call of
 * whet_partitions_maintain, at most every PARTITIONS_EVERY_S. A month's partition is made a month before it
 * is needed, so an hour between calls costs nothing; a call that failed (a lock not granted in time: the
 * function waits at most 100 ms for a table, migration 0053, as everything after it queues meanwhile) is
 * tried again after PARTITIONS_RETRY_S. `NOTIFY whet_maintenance` makes a call due at once. The wait is the
 * maintenance thread's, never the placement cycle's; a stop cancels it. */
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "pg.h"
#include "service_internal.h"

#define PARTITIONS_EVERY_S 3600
#define PARTITIONS_RETRY_S 10

/* When the next call is due (one maintenance thread runs at a time). */
static double next_run;

int scheduler_partitions(struct maintenance_pass *p, struct whet_err *err) {
    double now = whet_now_mono();
    if (now < next_run && !p->forced) return 0;
    int retention_days = p->opts->event_retention_days;
    next_run = now + PARTITIONS_RETRY_S;
    char days[16], usage_days[16];
    snprintf(days, sizeof days, "%d", retention_days);
    snprintf(usage_days, sizeof usage_days, "%d", p->opts->usage_retention_days);
    const char *params[] = {days, usage_days};
    PGresult *res = whet_pg_query_stoppable(
        p->conn, "SELECT action, partition_name FROM whet_partitions_maintain($1::int, $2::int)", 2, params, p->thread,
        &p->stopping, err);
    if (!res) return -1;
    for (int i = 0; i < PQntuples(res); i++) {
        const char *name = PQgetvalue(res, i, 1);
        int usage = !strncmp(name, "usage_records_", 14);
        log_info("msg=\"%s partition %s\" partition=%s retention_days=%d", usage ? "usage" : "event",
                 PQgetvalue(res, i, 0), name, usage ? p->opts->usage_retention_days : retention_days);
    }
    PQclear(res);
    next_run = now + PARTITIONS_EVERY_S;
    return 0;
}
