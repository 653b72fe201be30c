/* gang.c - a job placed on more than one device, on one node or over several: one attempt of N ranks
 * (one trainer process per device), started, ended and metered together (migrations/0018_gangs.sql
 * keeps the rows and the rules that several paths share).
 *
 * Start: placement (cycle.c) records the ranks and sends rank 0 its START; rank 0's trainer listens
 * and its executor publishes the address here (PublishRendezvous); only then are the other ranks'
 * STARTs queued, each manifest carrying the address. A rank 0 that has not published within
 * GANG_RENDEZVOUS_S fails the attempt (scheduler_gang_deadlines), and once published the trainers
 * themselves fail a rank that does not join within their timeout. The attempt number is the gang's
 * generation: a rank of an older attempt is refused by its peers and cancelled by the scheduler.
 *
 * End: each rank's executor reports FinishJob for that rank. Rank 0's outcome (succeeded, stopped,
 * cancelled) decides the job; any rank's failure ends the gang at once: the other ranks' nodes get
 * CANCEL and the job resumes from its last complete checkpoint (whet_gang_fail), with an event that
 * names the rank and its node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crypto.h"
#include "log.h"
#include "pg.h"
#include "service_internal.h"

int scheduler_gang_deadlines(PGconn *conn, struct whet_err *err) {
    char message[128];
    snprintf(message, sizeof message, "rank 0 did not publish its rendezvous address within %d s", GANG_RENDEZVOUS_S);
    const char *params[] = {message};
    PGresult *res = whet_pg_query(conn,
                                  "SELECT a.job_id, whet_gang_fail(a.job_id, a.attempt, a.node_id, 0, $1, 'failed')"
                                  " FROM job_attempts a WHERE a.ended_at IS NULL AND a.world_size > 1"
                                  " AND a.rendezvous IS NULL AND a.rendezvous_deadline < extract(epoch FROM clock_timestamp())",
                                  1, params, err);
    if (!res) return -1;
    for (int i = 0; i < PQntuples(res); i++) log_warn("msg=\"gang failed: no rendezvous\" job=%s", PQgetvalue(res, i, 0));
    PQclear(res);
    return 0;
}

int scheduler_gang_finish(PGconn *conn, const Whet__V1__FinishJobRequest *req, const char *outcome, const char *dev_s,
                          const char *trained, const char *rollout, struct whet_err *err) {
    char attempt[16], rank[16];
    snprintf(attempt, sizeof attempt, "%u", req->attempt);
    snprintf(rank, sizeof rank, "%u", req->rank);
    const char *params[] = {req->job_id, attempt};
    /* The job's row lock orders the ranks' reports, the cycle and PublishRendezvous. FOR NO KEY UPDATE, the
     * strongest lock that leaves the foreign-key checks of rows inserted for the job alone: under FOR UPDATE,
     * a heartbeat inserting the job's first progress row waited at its key check for this transaction, which
     * went on to wait for that row (a deadlock, seen with scale_fleet's concurrent reports). */
    PGresult *res = whet_pg_query(
        conn,
        "SELECT a.world_size, a.ended_at IS NULL, a.device_type FROM job_attempts a"
        " JOIN jobs j ON j.id = a.job_id WHERE a.job_id = $1 AND a.attempt = $2::int FOR NO KEY UPDATE OF j",
        2, params, err);
    if (!res) return -1;
    if (PQntuples(res) != 1 || atoi(PQgetvalue(res, 0, 0)) <= 1) {
        PQclear(res);
        return GANG_NONE;
    }
    int running = PQgetvalue(res, 0, 1)[0] == 't';
    char *device_type = xstrdup(req->usage && *req->usage->device_type ? req->usage->device_type : PQgetvalue(res, 0, 2));
    PQclear(res);
    /* The rank ends once, metered once: its report_seq is its rank. */
    const char *rparams[] = {req->job_id, attempt, rank, req->node_id, outcome, device_type, dev_s, trained, rollout};
    res = whet_pg_query(
        conn,
        "WITH r AS (UPDATE gang_ranks SET ended_at = extract(epoch FROM clock_timestamp()), outcome = $5"
        "   WHERE job_id = $1 AND attempt = $2::int AND rank = $3::int AND node_id = $4 AND ended_at IS NULL"
        "   RETURNING job_id),"
        " u AS (INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds,"
        "   trained_tokens, rollout_tokens, job_created_at) SELECT j.tenant_id, j.id, $2::int, $3::int, $6,"
        "   $7::float8, $8::bigint, $9::bigint, j.created_at FROM r JOIN jobs j ON j.id = r.job_id"
        "   ON CONFLICT (job_id, attempt, report_seq, job_created_at) DO NOTHING)"
        " SELECT count(*) FROM r",
        9, rparams, err);
    free(device_type);
    if (!res) return -1;
    int ended = atoi(PQgetvalue(res, 0, 0)) == 1;
    PQclear(res);
    if (!ended || !running) return GANG_DONE; /* a retried report, or the gang has ended already */
    if (!strcmp(outcome, "failed")) {
        const char *fparams[] = {req->job_id, attempt, req->node_id, rank,
                                 *req->error_message ? req->error_message : "the trainer failed"};
        res = whet_pg_query(conn, "SELECT whet_gang_fail($1, $2::int, $3, $4::int, $5, 'failed')", 5, fparams, err);
        if (!res) return -1;
        log_warn("msg=\"gang failed\" job=%s attempt=%u rank=%u node=%s requeued=%s", req->job_id, req->attempt, req->rank,
                 req->node_id, PQgetvalue(res, 0, 0));
        PQclear(res);
        return GANG_DONE;
    }
    if (req->rank != 0) return GANG_DONE; /* the others follow rank 0, which decides */
    const char *aparams[] = {req->job_id, attempt, outcome};
    if (whet_pg_exec(conn,
                     "UPDATE job_attempts SET ended_at = extract(epoch FROM clock_timestamp()), outcome = $3"
                     " WHERE job_id = $1 AND attempt = $2::int AND ended_at IS NULL",
                     3, aparams, err) < 0)
        return -1;
    return GANG_JOB;
}

/* ---- PublishRendezvous ---- */

int scheduler_handle_rendezvous(void *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out, struct whet_err *err) {
    struct scheduler *s = ctx;
    const Whet__V1__RendezvousRequest *req = (const Whet__V1__RendezvousRequest *)msg;
    if (req->generation != req->attempt || !*req->address || strlen(req->address) > 255) {
        whet_errf(err, "rendezvous of job %s: generation %u of attempt %u at \"%.64s\"", req->job_id, req->generation,
                  req->attempt, req->address);
        whet_err_hint(err, "a trainer's generation is its attempt number, and its address HOST:PORT");
        return RPC_INVALID_ARGUMENT;
    }
    PGconn *conn = scheduler_handler_conn(s, err);
    if (!conn) return scheduler_db_unavailable(err);
    char attempt[16], event_id[40];
    snprintf(attempt, sizeof attempt, "%u", req->attempt);
    whet_random_id("ftevent-", 24, event_id);
    const char *params[] = {req->job_id, attempt, req->node_id, req->address, event_id};
    /* Once per attempt, from rank 0's node, while it runs: a retried call or a stale attempt's starts
     * nobody. The other ranks' STARTs are queued in rank order. */
    PGresult *res = whet_pg_query(
        conn,
        "WITH a AS (UPDATE job_attempts SET rendezvous = $4 WHERE job_id = $1 AND attempt = $2::int AND node_id = $3"
        "   AND world_size > 1 AND ended_at IS NULL AND rendezvous IS NULL RETURNING job_id, tenant_id, world_size),"
        " s AS (UPDATE gang_ranks r SET started_at = extract(epoch FROM clock_timestamp()) FROM a"
        "   WHERE r.job_id = a.job_id AND r.attempt = $2::int AND r.rank > 0 AND r.started_at IS NULL AND r.ended_at IS NULL"
        "   RETURNING r.node_id, r.rank, r.manifest),"
        " c AS (INSERT INTO node_commands (node_id, job_id, attempt, kind, manifest)"
        "   SELECT node_id, $1, $2::int, 'start', jsonb_set(manifest, '{distributed,rendezvous}', to_jsonb($4::text))"
        "   FROM s ORDER BY rank)"
        " INSERT INTO job_events (id, tenant_id, job_id, message, data)"
        " SELECT $5, tenant_id, job_id, 'Rank 0 listens at ' || $4 || '; starting the other ' || (world_size - 1) ||"
        "   ' ranks', jsonb_build_object('rendezvous', $4, 'attempt', $2::int, 'world_size', world_size) FROM a"
        " RETURNING job_id",
        5, params, err);
    if (!res) return scheduler_db_unavailable(err);
    if (PQntuples(res) == 1)
        log_info("msg=\"gang rendezvous\" job=%s attempt=%u address=%s", req->job_id, req->attempt, req->address);
    PQclear(res);
    Whet__V1__RendezvousResponse *resp = xcalloc(1, sizeof *resp);
    whet__v1__rendezvous_response__init(resp);
    *out = &resp->base;
    return RPC_OK;
}
