/* public_state.c - what the tenant sees of scheduling, written at the end of each cycle: every waiting
 * job's wait_reason and queue_position, and neither left on jobs that no longer wait, in one transaction (a tenant reading the job never sees a
 * position from one cycle next to a reason from another). A cycle writes PUBLIC_MAX_ROWS places at most,
 * the front of the queue first; the rest trail by a cycle or more while the queue moves that fast.
 *
 * A place in the queue is rewritten when it moved by more than a tenth (exact in the first ten): a
 * queue that drains moves every job behind each placement, and rewriting all of them each cycle cost
 * 1.1 s per cycle at 10000 waiting jobs in tests/bench/scale; this way a job's row is rewritten about
 * 90 times on its way from place 10000 to place 1.
 *
 * The leader remembers what it wrote (struct public_state), so a cycle sends only the rows to rewrite
 * and the jobs that stopped waiting or running (running.c names the latter): sending all 10000 waiting jobs for the database to compare cost
 * 385 ms per cycle with 100000 queued, and finding the jobs that stopped waiting among every job with
 * a public state read them all. The whole comparison, and the sweep
 * of every job with a public state, run when it remembers nothing: when it starts leading, after a
 * failed cycle, and every PUBLIC_SWEEP_S, which also catches a state some other path left behind. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pg.h"
#include "service_internal.h"

#define PUBLIC_SWEEP_S 300
#define REASON_STALE_S 30
#define PUBLIC_LOG_ROWS 1000 /* a cycle rewriting this many rows logs why */
/* The most rows a cycle rewrites, a sweep excepted: a fleet filling up places thousands of jobs a cycle,
 * which moves as many places and brings as many jobs into the head of the queue (tests/bench/scale at 10k
 * nodes: 9,322 rows, 0.82 s of a 1.47 s cycle, ~90 us a row for the jobs table's indexes). The rest, the
 * back of the queue, is left as it is for the next cycles, so that its places trail the queue by a cycle
 * or two while it moves that fast. */
#define PUBLIC_MAX_ROWS 2000

static int cmp_written(const void *x, const void *y) {
    return strcmp(((const struct public_written *)x)->id, ((const struct public_written *)y)->id);
}

void public_state_reset(struct public_state *ps) {
    for (int i = 0; i < ps->n; i++) free(ps->w[i].id);
    free(ps->w);
    memset(ps, 0, sizeof *ps);
}

/* Whether a row the leader wrote as `old` is to be rewritten: it entered or left the queue, its place
 * moved by more than a tenth, or its reason changed and is older than REASON_STALE_S (at once in the
 * first ten places). With a full fleet the reasons of most waiting jobs flip every cycle between "not
 * enough free GPUs" and "free room reserved for a job ahead in the queue" as a few devices free up:
 * rewriting them all each cycle cost 1.3-1.4 s per cycle at 10000 waiting (tests/bench/scale). */
enum write_cause { KEPT, MOVED, REASON };

static enum write_cause needs_write(const struct public_written *old, uint64_t reason, int position, double now) {
    if ((old->position == 0) != (position == 0) || abs(old->position - position) > old->position / 10) return MOVED;
    return old->reason != reason && (position <= 10 || now - old->written_at >= REASON_STALE_S) ? REASON : KEPT;
}

/* The rewrite of the rows listed, each still waiting: those the leader decided to rewrite, or, in a
 * sweep ($2 true), every row that differs at all, so that the rows then hold what it remembers. */
static const char *const write_sql =
    "UPDATE jobs j SET wait_reason = w.reason, queue_position = w.position,"
    " wait_since = coalesce(j.wait_since, extract(epoch FROM now()))"
    " FROM jsonb_to_recordset($1::jsonb) AS w(id text, reason text, position int, keep bool)"
    " WHERE j.id = w.id AND j.status = 'queued' AND w.keep IS NOT TRUE"
    " AND (j.wait_reason IS DISTINCT FROM w.reason"
    "   OR (j.queue_position IS NULL) <> (w.position IS NULL)"
    "   OR abs(j.queue_position - w.position) > j.queue_position / 10"
    "   OR ($2::bool AND j.queue_position IS DISTINCT FROM w.position))";

/* What a job keeps once it no longer waits: no place, no reason unless it is still queued (a pause not yet
 * applied). Its estimated_finish is the readers' (migration 0028): nothing to clear. */
#define CLEAR_SQL "UPDATE jobs SET queue_position = NULL, wait_reason = CASE WHEN status = 'queued' THEN wait_reason END"

/* The sweep: every job with a public state that it should not have; $1 is every job waiting now. */
static const char *const sweep_sql =
    CLEAR_SQL " WHERE (queue_position IS NOT NULL OR wait_reason IS NOT NULL)"
              " AND ((status <> 'queued' AND (queue_position IS NOT NULL OR wait_reason IS NOT NULL))"
              "   OR (status = 'queued' AND queue_position IS NOT NULL"
              "       AND NOT EXISTS (SELECT 1 FROM jsonb_to_recordset($1::jsonb) AS w(id text) WHERE w.id = jobs.id)))";

/* The jobs that stopped waiting or running since the previous cycle, $1 their ids. */
static const char *const left_sql =
    CLEAR_SQL " WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))"
              " AND (queue_position IS NOT NULL OR (status <> 'queued' AND wait_reason IS NOT NULL))";

/* The ids of what the leader remembers and `next` (both sorted) does not hold, the jobs that left, and
 * of the jobs that stopped running unless they wait now (a waiting job is named there too when its
 * checkpoint or priority changed). */
static json_t *left_jobs(const struct public_state *ps, const struct public_written *next, int n,
                         char *const *stopped, int n_stopped) {
    json_t *left = json_array();
    for (int i = 0; i < n_stopped; i++) {
        struct public_written key = {.id = stopped[i]};
        if (!bsearch(&key, next, (size_t)n, sizeof *next, cmp_written)) json_array_append_new(left, json_string(stopped[i]));
    }
    for (int i = 0, k = 0; i < ps->n; i++) {
        while (k < n && strcmp(next[k].id, ps->w[i].id) < 0) k++;
        if (k == n || strcmp(next[k].id, ps->w[i].id)) json_array_append_new(left, json_string(ps->w[i].id));
    }
    return left;
}

int public_state_record(struct public_state *ps, PGconn *conn, const struct waiting_job *jobs, int n,
                        char *const *stopped, int n_stopped, struct whet_err *err) {
    double now = whet_now_mono();
    int sweep = !ps->loaded || now - ps->swept_at > PUBLIC_SWEEP_S;
    struct public_written *next = xcalloc((size_t)n + 1, sizeof *next);
    json_t *write = json_array();
    int m = 0, causes[3] = {0}, entered = 0, later = 0;
    for (int i = 0; i < n; i++) {
        const struct waiting_job *j = &jobs[i];
        struct public_written key = {.id = (char *)j->id};
        const struct public_written *old = sweep ? NULL : bsearch(&key, ps->w, (size_t)ps->n, sizeof *ps->w, cmp_written);
        if (!j->reason) { /* left as it is: remembered as it was, if it was */
            if (sweep) json_array_append_new(write, json_pack("{s:s, s:b}", "id", j->id, "keep", 1));
            if (old) {
                next[m++] = *old;
                next[m - 1].id = xstrdup(j->id);
            }
            continue;
        }
        uint64_t reason = whet_hash_text(j->reason); /* the leader remembers a reason by its hash */
        enum write_cause cause = old ? needs_write(old, reason, j->position, now) : MOVED;
        if (cause != KEPT && !sweep && j->position > 0 && json_array_size(write) >= PUBLIC_MAX_ROWS) {
            later++; /* the row keeps what it holds, remembered as it was, if it was */
            if (!old) continue;
            cause = KEPT;
        } else if (old) {
            causes[cause]++;
        } else {
            entered++;
        }
        if (cause == KEPT) {
            next[m++] = *old;
            next[m - 1].id = xstrdup(j->id);
            continue;
        }
        json_array_append_new(write, json_pack("{s:s, s:s, s:o}", "id", j->id, "reason", j->reason, "position",
                                               j->position > 0 ? json_integer(j->position) : json_null()));
        next[m++] = (struct public_written){.id = xstrdup(j->id), .reason = reason, .position = j->position,
                                            .written_at = now};
    }
    qsort(next, (size_t)m, sizeof *next, cmp_written);
    json_t *left = sweep ? NULL : left_jobs(ps, next, m, stopped, n_stopped);
    char *write_json = json_dumps(write, JSON_COMPACT), *left_json = left ? json_dumps(left, JSON_COMPACT) : NULL;
    const char *wparams[] = {write_json, sweep ? "true" : "false"}, *lparams[] = {left_json};
    int rc = whet_pg_exec(conn, "BEGIN", 0, NULL, err) < 0 || whet_pg_exec(conn, write_sql, 2, wparams, err) < 0 ||
                     (sweep ? whet_pg_exec(conn, sweep_sql, 1, wparams, err)
                            : json_array_size(left) ? whet_pg_exec(conn, left_sql, 1, lparams, err) : 0) < 0 ||
                     whet_pg_exec(conn, "COMMIT", 0, NULL, err) < 0
                 ? -1
                 : 0;
    /* Why rows are rewritten: a cycle that rewrites thousands says which rule let them through. */
    if (!sweep && json_array_size(write) >= PUBLIC_LOG_ROWS)
        log_info("msg=\"public state rewritten\" rows=%zu moved=%d reason=%d entered=%d kept=%d left=%zu later=%d",
                 json_array_size(write), causes[MOVED], causes[REASON], entered, causes[KEPT], json_array_size(left),
                 later);
    if (rc < 0) PQclear(PQexec(conn, "ROLLBACK"));
    free(write_json);
    free(left_json);
    json_decref(write);
    json_decref(left);
    double swept_at = ps->swept_at;
    public_state_reset(ps);
    if (rc < 0) { /* what the rows hold now is unknown: the next cycle compares and sweeps */
        for (int i = 0; i < m; i++) free(next[i].id);
        free(next);
        return -1;
    }
    *ps = (struct public_state){.loaded = 1, .n = m, .w = next, .swept_at = sweep ? now : swept_at};
    return 0;
}
