/* running.c - the running attempts as the leader's cycle sees them, kept between cycles.
 *
 * Reading every running attempt each cycle cost 1.3-1.5 s at 80000 attempts (tests/bench/scale). The
 * leader reads them all once, then each cycle only the jobs that triggers named in running_changes
 * (migrations/0020_scheduler_scale.sql) since its previous read (change_log.c): their running attempts
 * are read again and replace what it held of them. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "pg.h"
#include "service_internal.h"

/* What placement reads of a running attempt, after its job's id (every query's column 0). The last
 * checkpoint is the job's newest by seq: one probe of checkpoints_job at its end. */
#define RUNNING_COLUMNS                                                                                             \
    "a.attempt, a.node_id, a.gpu_mask, j.tenant_id, j.priority, j.created_at, j.seq, j.preempt_requested,"          \
    " a.started_at, coalesce((SELECT c.created_at FROM checkpoints c WHERE c.job_id = j.id ORDER BY c.seq DESC"     \
    " LIMIT 1), a.started_at),"                                                                                     \
    " (SELECT string_agg(r.node_id || ' ' || r.gpu_mask, ' ') FROM gang_ranks r"                                   \
    "   WHERE r.job_id = a.job_id AND r.attempt = a.attempt),"                                                     \
    " j.whet->'min_gpus', j.whet->'max_gpus', a.cotrain_group, j.base_model"

static void attempt_free(void *entry) {
    struct running_attempt *a = entry;
    free(a->job_id);
    free(a->tenant_id);
    free(a->node_id);
    free(a->ranks);
    free(a->cotrain_group);
    free(a->base_model);
}

static void stopped_free(struct running_cache *c) {
    for (int i = 0; i < c->n_stopped; i++) free(c->stopped[i]);
    free(c->stopped);
    c->stopped = NULL;
    c->n_stopped = 0;
}

void running_reset(struct running_cache *c) {
    for (int i = 0; i < c->n; i++) attempt_free(&c->a[i]);
    free(c->a);
    stopped_free(c);
    memset(c, 0, sizeof *c);
}

/* Placement's order, the order of the full read before: by job, then attempt. */
static int cmp_attempt(const void *x, const void *y) {
    const struct running_attempt *a = x, *b = y;
    if (a->seq != b->seq) return a->seq < b->seq ? -1 : 1;
    return (a->attempt > b->attempt) - (a->attempt < b->attempt);
}

/* Appends row `i` of a read; a job with no running attempt comes as NULLs, and joins the stopped. */
static void add_row(struct running_cache *c, const PGresult *res, int i) {
    if (PQgetisnull(res, i, 1)) {
        c->stopped[c->n_stopped++] = xstrdup(PQgetvalue(res, i, 0));
        return;
    }
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 1024;
        c->a = xrealloc(c->a, (size_t)c->cap * sizeof *c->a);
    }
    c->a[c->n++] = (struct running_attempt){
        .job_id = xstrdup(PQgetvalue(res, i, 0)),
        .attempt = atoi(PQgetvalue(res, i, 1)),
        .node_id = xstrdup(PQgetvalue(res, i, 2)),
        .gpu_mask = atoi(PQgetvalue(res, i, 3)),
        .tenant_id = xstrdup(PQgetvalue(res, i, 4)),
        .priority = atoi(PQgetvalue(res, i, 5)),
        .created_at = atof(PQgetvalue(res, i, 6)),
        .seq = atoll(PQgetvalue(res, i, 7)),
        .stopping = PQgetvalue(res, i, 8)[0] == 't',
        .started_at = atof(PQgetvalue(res, i, 9)),
        .last_checkpoint = atof(PQgetvalue(res, i, 10)),
        .ranks = PQgetisnull(res, i, 11) ? NULL : xstrdup(PQgetvalue(res, i, 11)),
        .min_gpus = atoi(PQgetvalue(res, i, 12)), /* (NULL or not a number: 0) */
        .max_gpus = atoi(PQgetvalue(res, i, 13)),
        .cotrain_group = PQgetisnull(res, i, 14) ? NULL : xstrdup(PQgetvalue(res, i, 14)),
        .base_model = xstrdup(PQgetvalue(res, i, 15)),
    };
}

int running_refresh(struct running_cache *c, PGconn *conn, struct whet_err *err) {
    const char *params[] = {c->loaded ? c->xmin : NULL};
    char xmin[CHANGE_XMIN_LEN];
    if (change_log_advance(conn, "running_changes", params[0], xmin, err) < 0) return -1;
    PGresult *res;
    if (c->loaded)
        res = whet_pg_query(conn,
                            "WITH ch AS (SELECT DISTINCT job_id FROM running_changes WHERE xid >= $1::xid8)"
                            " SELECT ch.job_id, " RUNNING_COLUMNS " FROM ch LEFT JOIN (job_attempts a JOIN jobs j"
                            "   ON j.id = a.job_id) ON a.job_id = ch.job_id AND a.ended_at IS NULL",
                            1, params, err);
    else
        res = whet_pg_query(conn,
                            "SELECT a.job_id, " RUNNING_COLUMNS " FROM job_attempts a JOIN jobs j ON j.id = a.job_id"
                            " WHERE a.ended_at IS NULL",
                            0, NULL, err);
    if (!res) return -1;
    if (c->loaded) /* the read holds all of the changed jobs' running attempts now */
        c->n = change_log_drop(c->a, c->n, sizeof *c->a, offsetof(struct running_attempt, job_id), res, attempt_free);
    else
        running_reset(c);
    int rows = PQntuples(res);
    stopped_free(c);
    c->stopped = xcalloc((size_t)rows + 1, sizeof *c->stopped);
    for (int i = 0; i < rows; i++) add_row(c, res, i);
    PQclear(res);
    /* Nothing read: the order holds (sorting 80k attempts every cycle was ~3% of the scheduler's CPU at 10k
     * nodes). */
    if (rows > 0 && c->n > 1) qsort(c->a, (size_t)c->n, sizeof *c->a, cmp_attempt);
    memcpy(c->xmin, xmin, sizeof xmin);
    c->loaded = 1;
    return 0;
}
