/* leases.c - nodes silent past their lease are lost: their attempts end as `lost` (the seconds they ran
 * are metered as such), their jobs return to the queue, and an event says why.
 *
 * Two guards keep an overloaded control plane from turning its own slowness into a fleet-wide restart
 * (after the Kubernetes node lifecycle controller, which stops evicting when every zone is disrupted):
 *  - a mass silence, when at least LEASE_MASS_SILENCE_NODES nodes are overdue and, in every data
 *    center that has ready nodes, at least LEASE_MASS_SILENCE_PERCENT of them: the likely cause is the
 *    scheduler, its database or its own network, not thousands of nodes failing together, and moving
 *    every job would only add load. No node is declared lost while it lasts (a warning says so when it
 *    begins and ends). A partition of some data centers is not one: the others still answer, so the
 *    silent data centers' jobs move to them, as they should.
 *  - at most LEASE_LOST_PER_CYCLE nodes are declared lost per cycle (the longest-silent first): the
 *    statement locks their attempts' jobs, and FinishJob and the heartbeats of other nodes wait on
 *    those locks; tests/bench/scale under job churn saw one statement declare 995 nodes lost in 7 s
 *    while the executors' calls timed out behind it.
 * A small fleet (fewer overdue nodes than the threshold) is handled node by node, as always: one silent
 * node of one is lost. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "log.h"
#include "pg.h"
#include "service_internal.h"

#define LEASE_MASS_SILENCE_NODES 10
#define LEASE_MASS_SILENCE_PERCENT 55
#define LEASE_LOST_PER_CYCLE 100

#define OVERDUE_SQL "last_heartbeat < extract(epoch FROM clock_timestamp()) - " LEASE_OVERDUE_AFTER_SQL

/* 1 while a mass silence lasts (the cycle runs on one thread). */
static int mass_silence;

/* One read of every ready node's heartbeat per cycle, by data center: the overdue nodes, and the nodes
 * silent for half their lease or more (*silent, "ID ID …" in order, or NULL), which take no new work: likely
 * gone, and a gang that failed with one would be placed back on it until its lease runs out (a kept plan
 * compares the list with its own: cycle.c). Returns 1 when the overdue nodes make a mass silence, 0 when
 * not, -1 on a database error. */
static int census(PGconn *conn, int *overdue, int *ready, char **silent, struct whet_err *err) {
    /* The clock read once, float8 arithmetic: clock_timestamp() and numeric arithmetic for each of 10k rows
     * were half of this statement's time. */
    PGresult *res =
        whet_pg_query(conn,
                      "SELECT count(*), count(*) FILTER (WHERE last_heartbeat < t.now - " LEASE_OVERDUE_AFTER_SQL "),"
                      " string_agg(id, ' ' ORDER BY id)"
                      "   FILTER (WHERE last_heartbeat < t.now - lease_ms * 0.0005::float8)"
                      " FROM nodes, (SELECT extract(epoch FROM clock_timestamp())::float8 AS now) t"
                      " WHERE state = 'ready' GROUP BY dc ORDER BY dc",
                      0, NULL, err);
    if (!res) return -1;
    struct whet_buf ids = {0}; /* its data becomes *silent */
    int every_dc = 1;
    *overdue = *ready = 0;
    for (int r = 0; r < PQntuples(res); r++) {
        int dc_ready = atoi(PQgetvalue(res, r, 0)), dc_overdue = atoi(PQgetvalue(res, r, 1));
        *ready += dc_ready;
        *overdue += dc_overdue;
        if (dc_overdue * 100 < dc_ready * LEASE_MASS_SILENCE_PERCENT) every_dc = 0;
        if (!PQgetisnull(res, r, 2)) whet_buf_printf(&ids, "%s%s", ids.len ? " " : "", PQgetvalue(res, r, 2));
    }
    PQclear(res);
    *silent = ids.data;
    return *overdue >= LEASE_MASS_SILENCE_NODES && every_dc;
}

int scheduler_expire_leases(PGconn *conn, char **silent, struct whet_err *err) {
    int overdue, ready, mass = census(conn, &overdue, &ready, silent, err);
    if (mass < 0) return -1;
    if (mass != mass_silence) {
        if (mass)
            log_warn("msg=\"mass silence: %d of %d ready nodes are past their lease in every data center; the "
                     "scheduler, its database or its network is the likely cause, so no node is declared lost until "
                     "heartbeats resume\"",
                     overdue, ready);
        else
            log_warn("msg=\"mass silence over: nodes silent past their lease are declared lost again\" overdue=%d",
                     overdue);
        mass_silence = mass;
    }
    scheduler_metrics_silence(mass);
    if (mass || overdue == 0) return 0;
    char limit[16];
    snprintf(limit, sizeof limit, "%d", LEASE_LOST_PER_CYCLE);
    const char *params[] = {limit};
    PGresult *res = whet_pg_query(conn,
                                  "WITH lost AS (UPDATE nodes SET state = 'lost' WHERE id IN (SELECT id FROM nodes"
                                  "   WHERE state = 'ready' AND " OVERDUE_SQL " ORDER BY last_heartbeat LIMIT $1::int)"
                                  "   AND state = 'ready' AND " OVERDUE_SQL " RETURNING id)"
                                  " SELECT lost.id, job FROM lost LEFT JOIN LATERAL whet_requeue_node_attempts(lost.id,"
                                  "   'Node ' || lost.id || ' stopped answering; the job will resume from its last"
                                  " checkpoint elsewhere') job ON true ORDER BY lost.id",
                                  1, params, err);
    if (!res) return -1;
    int nodes = 0, jobs = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        /* One row per requeued job, or one with a NULL job for a node that ran none. */
        if (i == 0 || strcmp(PQgetvalue(res, i, 0), PQgetvalue(res, i - 1, 0))) {
            log_warn("msg=\"node lost\" node=%s", PQgetvalue(res, i, 0));
            nodes++;
        }
        if (PQgetisnull(res, i, 1)) continue;
        log_warn("msg=\"job requeued: node lost\" job=%s", PQgetvalue(res, i, 1));
        jobs++;
    }
    scheduler_metrics_lost(nodes, jobs);
    PQclear(res);
    return nodes;
}
