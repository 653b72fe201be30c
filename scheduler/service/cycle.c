/* cycle.c - one scheduling cycle of the leader: leases, tenant requests, placement.
 *
 * The snapshot is read fresh from PostgreSQL each cycle (the fleet and queue of one control plane fit
 * easily), handed to the placement library, and its decisions are written back, each in its own
 * transaction, so a crash between two decisions leaves a consistent state to start again from. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crypto.h"
#include "log.h"
#include "pg.h"
#include "placement.h"
#include "service_internal.h"

/* ------------------------------------------------------------------------------------------------
 * Leases and tenant requests
 * ---------------------------------------------------------------------------------------------- */

/* Nodes silent past their lease are lost: their attempts end as `lost` (the seconds they ran are
 * metered as such), their jobs return to the queue, and an event says why. */
static int expire_leases(PGconn *conn, struct whet_err *err) {
    PGresult *res = whet_pg_query(conn,
                                  "WITH lost AS (UPDATE nodes SET state = 'lost' WHERE state = 'ready'"
                                  "   AND last_heartbeat < extract(epoch FROM clock_timestamp()) - lease_ms / 1000.0"
                                  "   RETURNING id)"
                                  " SELECT job FROM lost, LATERAL whet_requeue_node_attempts(lost.id, 'Node ' || lost.id"
                                  "   || ' stopped answering; the job will resume from its last checkpoint elsewhere') job",
                                  0, NULL, err);
    if (!res) return -1;
    for (int i = 0; i < PQntuples(res); i++) log_warn("msg=\"job requeued: node lost\" job=%s", PQgetvalue(res, i, 0));
    PQclear(res);
    return 0;
}

/* Pause and cancel of jobs that run somewhere become STOP and CANCEL commands (once per attempt);
 * queued jobs change state at once. */
static int apply_tenant_requests(PGconn *conn, struct whet_err *err) {
    return whet_pg_exec(conn,
                        "INSERT INTO node_commands (node_id, job_id, attempt, kind, grace_ms, reason)"
                        " SELECT a.node_id, a.job_id, a.attempt, CASE j.desired WHEN 'pause' THEN 'stop' ELSE 'cancel' END,"
                        "   30000, j.desired FROM jobs j JOIN job_attempts a ON a.job_id = j.id AND a.ended_at IS NULL"
                        " WHERE j.desired IN ('pause', 'cancel') AND NOT EXISTS (SELECT 1 FROM node_commands c"
                        "   WHERE c.job_id = j.id AND c.attempt = a.attempt AND c.kind IN ('stop', 'cancel'))",
                        0, NULL, err) < 0 ||
                   whet_pg_exec(conn,
                                "UPDATE jobs SET status = CASE desired WHEN 'pause' THEN 'paused' ELSE 'cancelled' END,"
                                " finished_at = CASE desired WHEN 'cancel' THEN whet_now() END"
                                " WHERE status = 'queued' AND desired IN ('pause', 'cancel')",
                                0, NULL, err) < 0
               ? -1
               : 0;
}

/* ------------------------------------------------------------------------------------------------
 * The snapshot
 * ---------------------------------------------------------------------------------------------- */

/* Small name -> id tables for data centers, device types and tenants. */
struct names {
    int n;
    char *name[PL_MAX_TYPES];
};

static int name_id(struct names *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->name[i], name)) return i;
    if (t->n == PL_MAX_TYPES) return -1;
    t->name[t->n] = xstrdup(name);
    return t->n++;
}

static void names_free(struct names *t) {
    for (int i = 0; i < t->n; i++) free(t->name[i]);
}

struct snapshot {
    struct names dcs, types, tenant_ids;
    int n_nodes;
    struct pl_node *nodes;
    char **node_ids;
    int n_running, n_queued;
    struct pl_job *running, *queued; /* stable addresses for the library */
    char **running_ids, **queued_ids;
    int *running_attempts;
};

static void snapshot_free(struct snapshot *s) {
    for (int i = 0; i < s->n_nodes; i++) free(s->node_ids[i]);
    for (int i = 0; i < s->n_running; i++) free(s->running_ids[i]);
    for (int i = 0; i < s->n_queued; i++) free(s->queued_ids[i]);
    free(s->nodes);
    free(s->node_ids);
    free(s->running);
    free(s->queued);
    free(s->running_ids);
    free(s->queued_ids);
    free(s->running_attempts);
    names_free(&s->dcs);
    names_free(&s->types);
    names_free(&s->tenant_ids);
}

static int node_index(const struct snapshot *s, const char *id) {
    for (int i = 0; i < s->n_nodes; i++)
        if (!strcmp(s->node_ids[i], id)) return i;
    return -1;
}

/* Bit mask of the names in a JSON array that the table knows (0 when the array is absent: any). An
 * array naming only unknown entries gives a mask no pool matches, so the job waits with a reason. */
static uint64_t mask_of(json_t *array, struct names *t) {
    if (!json_is_array(array) || json_array_size(array) == 0) return 0;
    uint64_t mask = 0;
    size_t i;
    json_t *v;
    json_array_foreach(array, i, v) {
        const char *name = json_string_value(v);
        for (int k = 0; name && k < t->n; k++)
            if (!strcmp(t->name[k], name)) mask |= 1ull << k;
    }
    return mask ? mask : 1ull << 63;
}

/* The request of a job: the `whet` extension pins GPUs, types and regions; otherwise one device. */
static void job_request(struct pl_job *j, struct snapshot *s, const char *tenant_id, const char *whet_json,
                        int priority, double created_at, uint64_t id) {
    json_t *whet = json_loads(whet_json, 0, NULL);
    j->id = id;
    j->tenant = name_id(&s->tenant_ids, tenant_id);
    j->priority = priority;
    json_t *gpus = json_object_get(whet, "max_gpus");
    j->gpus = json_is_integer(gpus) && json_integer_value(gpus) > 0 ? (int32_t)json_integer_value(gpus) : 1;
    if (j->gpus > PL_MAX_GPUS_PER_NODE) j->gpus = PL_MAX_GPUS_PER_NODE; /* the trainer runs on one node */
    j->gpu_milli = PL_MILLI;
    j->allowed_types = mask_of(json_object_get(whet, "gpu_types"), &s->types);
    j->allowed_dcs = mask_of(json_object_get(whet, "regions"), &s->dcs);
    j->preemptible = 1;
    j->grace_s = 30;
    j->submit_time = created_at;
    json_decref(whet);
}

static int load_snapshot(PGconn *conn, struct snapshot *s, struct whet_err *err) {
    memset(s, 0, sizeof *s);
    PGresult *res = whet_pg_query(conn,
                                  "SELECT id, dc, device_type, gpus, cpu_milli, memory_mib,"
                                  " coalesce((devices->0->>'memory_mib')::int, 0) FROM nodes WHERE state = 'ready'"
                                  " ORDER BY dc, id",
                                  0, NULL, err);
    if (!res) return -1;
    s->n_nodes = PQntuples(res);
    s->nodes = xcalloc((size_t)s->n_nodes + 1, sizeof *s->nodes);
    s->node_ids = xcalloc((size_t)s->n_nodes + 1, sizeof *s->node_ids);
    for (int i = 0; i < s->n_nodes; i++) {
        struct pl_node *n = &s->nodes[i];
        s->node_ids[i] = xstrdup(PQgetvalue(res, i, 0));
        n->dc = name_id(&s->dcs, PQgetvalue(res, i, 1));
        n->gpu_type = name_id(&s->types, PQgetvalue(res, i, 2));
        n->gpus = atoi(PQgetvalue(res, i, 3));
        if (n->gpus > PL_MAX_GPUS_PER_NODE) n->gpus = PL_MAX_GPUS_PER_NODE;
        n->cpu_milli = atoll(PQgetvalue(res, i, 4));
        n->mem_mib = atoll(PQgetvalue(res, i, 5));
        n->gpu_mem_mib = atoi(PQgetvalue(res, i, 6));
        n->schedulable = 1;
        pl_node_reset_free(n);
    }
    PQclear(res);

    res = whet_pg_query(conn,
                        "SELECT a.job_id, a.attempt, a.node_id, a.gpu_mask, j.tenant_id, j.whet::text, j.priority,"
                        " j.created_at, j.seq, j.preempt_requested, a.started_at,"
                        " coalesce((SELECT max(c.created_at) FROM checkpoints c WHERE c.job_id = j.id), a.started_at)"
                        " FROM job_attempts a JOIN jobs j ON j.id = a.job_id"
                        " WHERE a.ended_at IS NULL ORDER BY j.seq",
                        0, NULL, err);
    if (!res) return -1;
    int n = PQntuples(res);
    s->running = xcalloc((size_t)n + 1, sizeof *s->running);
    s->running_ids = xcalloc((size_t)n + 1, sizeof *s->running_ids);
    s->running_attempts = xcalloc((size_t)n + 1, sizeof *s->running_attempts);
    for (int i = 0; i < n; i++) {
        int node = node_index(s, PQgetvalue(res, i, 2));
        if (node < 0) continue; /* its node is being declared lost */
        struct pl_job *j = &s->running[s->n_running];
        job_request(j, s, PQgetvalue(res, i, 4), PQgetvalue(res, i, 5), atoi(PQgetvalue(res, i, 6)),
                    atof(PQgetvalue(res, i, 7)), (uint64_t)atoll(PQgetvalue(res, i, 8)));
        uint16_t mask = (uint16_t)atoi(PQgetvalue(res, i, 3));
        j->gpus = __builtin_popcount(mask);
        j->allowed_types = j->allowed_dcs = 0;
        j->alloc.n_slots = 1;
        j->alloc.slots[0] = (struct pl_slot){.node = node, .gpu_mask = mask, .gpu_count = (uint16_t)j->gpus};
        /* A victim already told to stop keeps its resources until it has; the library then waits for it
         * instead of choosing new victims. Victims are chosen by the work they lose since their last
         * checkpoint. */
        j->state = PQgetvalue(res, i, 9)[0] == 't' ? PL_JOB_STOPPING : PL_JOB_RUNNING;
        j->start_time = atof(PQgetvalue(res, i, 10));
        j->last_checkpoint_time = atof(PQgetvalue(res, i, 11));
        s->running_ids[s->n_running] = xstrdup(PQgetvalue(res, i, 0));
        s->running_attempts[s->n_running] = atoi(PQgetvalue(res, i, 1));
        s->n_running++;
    }
    PQclear(res);

    res = whet_pg_query(conn,
                        "SELECT id, tenant_id, whet::text, priority, created_at, seq FROM jobs"
                        " WHERE status = 'queued' AND desired = 'run' ORDER BY seq LIMIT 10000",
                        0, NULL, err);
    if (!res) return -1;
    s->n_queued = PQntuples(res);
    s->queued = xcalloc((size_t)s->n_queued + 1, sizeof *s->queued);
    s->queued_ids = xcalloc((size_t)s->n_queued + 1, sizeof *s->queued_ids);
    for (int i = 0; i < s->n_queued; i++) {
        job_request(&s->queued[i], s, PQgetvalue(res, i, 1), PQgetvalue(res, i, 2), atoi(PQgetvalue(res, i, 3)),
                    atof(PQgetvalue(res, i, 4)), (uint64_t)atoll(PQgetvalue(res, i, 5)));
        s->queued_ids[i] = xstrdup(PQgetvalue(res, i, 0));
    }
    PQclear(res);
    return 0;
}

/* Tenants' weights and quotas, indexed as in the snapshot. */
static struct pl_tenant *load_tenants(PGconn *conn, struct snapshot *s, struct whet_err *err) {
    struct pl_tenant *t = xcalloc((size_t)s->tenant_ids.n + 1, sizeof *t);
    for (int i = 0; i < s->tenant_ids.n; i++) {
        t[i].weight = 1;
        t[i].may_borrow = 1;
        const char *params[] = {s->tenant_ids.name[i]};
        PGresult *res = whet_pg_query(conn,
                                      "SELECT t.weight, q.gpu_type, q.gpus FROM tenants t"
                                      " LEFT JOIN quotas q ON q.tenant_id = t.id WHERE t.id = $1",
                                      1, params, err);
        if (!res) {
            free(t);
            return NULL;
        }
        for (int r = 0; r < PQntuples(res); r++) {
            t[i].weight = atof(PQgetvalue(res, r, 0));
            if (PQgetisnull(res, r, 1)) continue;
            for (int k = 0; k < s->types.n; k++)
                if (!strcmp(s->types.name[k], PQgetvalue(res, r, 1))) t[i].quota_gpus[k] = atoi(PQgetvalue(res, r, 2));
        }
        PQclear(res);
    }
    return t;
}

/* ------------------------------------------------------------------------------------------------
 * Decisions
 * ---------------------------------------------------------------------------------------------- */

static int record_place(struct scheduler *sch, PGconn *conn, struct snapshot *s, int q, const struct pl_decision *d,
                        struct whet_err *err) {
    const char *job_id = s->queued_ids[q];
    int node = d->alloc.slots[0].node;
    const char *node_id = s->node_ids[node];
    const char *dc = s->dcs.name[s->nodes[node].dc];
    const char *type = s->types.name[s->nodes[node].gpu_type >= 0 ? s->nodes[node].gpu_type : 0];
    char mask[16], milli[16], event_id[40];
    snprintf(mask, sizeof mask, "%u", d->alloc.slots[0].gpu_mask);
    snprintf(milli, sizeof milli, "%d", d->job->gpu_milli);
    whet_random_id("ftevent-", 24, event_id);

    if (whet_pg_exec(conn, "BEGIN", 0, NULL, err) < 0) return -1;
    const char *params[] = {job_id, node_id, dc, mask, milli, type};
    PGresult *res = whet_pg_query(conn,
                                  "UPDATE jobs SET attempt = attempt + 1, status = 'running', node_id = $2, placed_dc = $3,"
                                  " wait_reason = NULL WHERE id = $1 AND status = 'queued' AND desired = 'run'"
                                  " RETURNING attempt, last_step",
                                  3, params, err);
    if (!res) goto fail;
    if (PQntuples(res) != 1) { /* paused or cancelled since the snapshot */
        PQclear(res);
        PQclear(PQexec(conn, "ROLLBACK"));
        return 0;
    }
    int attempt = atoi(PQgetvalue(res, 0, 0));
    char attempt_s[16];
    snprintf(attempt_s, sizeof attempt_s, "%d", attempt);
    PQclear(res);
    char *manifest = scheduler_manifest(conn, sch->opts, job_id, attempt, d->alloc.slots[0].gpu_count, err);
    if (!manifest) goto fail;
    json_t *m = json_loads(manifest, 0, NULL);
    json_t *resume = json_object_get(m, "resume");
    int resume_step = json_is_object(resume) ? (int)json_integer_value(json_object_get(resume, "step")) : 0;
    json_decref(m);
    char resume_s[16];
    snprintf(resume_s, sizeof resume_s, "%d", resume_step);
    const char *aparams[] = {job_id, attempt_s, node_id, mask, milli, type, resume_s, manifest, event_id, dc};
    int rc = whet_pg_exec(conn,
                          "WITH a AS (INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, gpu_mask, gpu_milli,"
                          "   device_type, resume_step) SELECT id, $2::int, tenant_id, $3, $4::int, $5::int, $6, $7::int"
                          "   FROM jobs WHERE id = $1 RETURNING job_id, tenant_id),"
                          " c AS (INSERT INTO node_commands (node_id, job_id, attempt, kind, manifest)"
                          "   VALUES ($3, $1, $2::int, 'start', $8::jsonb))"
                          " INSERT INTO job_events (id, tenant_id, job_id, message, data)"
                          " SELECT $9, tenant_id, job_id, 'Job placed on node ' || $3 || ' in ' || $10 ||"
                          "   CASE WHEN $7::int > 0 THEN ', resuming from step ' || $7 ELSE '' END,"
                          "   jsonb_build_object('node', $3, 'dc', $10, 'attempt', $2::int, 'device_type', $6) FROM a",
                          10, aparams, err);
    free(manifest);
    if (rc < 0 || whet_pg_exec(conn, "COMMIT", 0, NULL, err) < 0) goto fail;
    log_info("msg=\"job placed\" job=%s attempt=%d node=%s dc=%s resume_step=%d", job_id, attempt, node_id, dc, resume_step);
    return 0;
fail:
    PQclear(PQexec(conn, "ROLLBACK"));
    return -1;
}

static int record_wait(PGconn *conn, struct snapshot *s, int q, const struct pl_decision *d, struct whet_err *err) {
    char reason[512];
    pl_reason_format(reason, sizeof reason, &d->reason, (const char *const *)s->dcs.name,
                     (const char *const *)s->types.name);
    if (s->n_nodes == 0) snprintf(reason, sizeof reason, "no executor is registered");
    const char *params[] = {s->queued_ids[q], reason};
    return whet_pg_exec(conn,
                        "UPDATE jobs SET wait_reason = $2, wait_since = coalesce(wait_since, extract(epoch FROM now()))"
                        " WHERE id = $1 AND wait_reason IS DISTINCT FROM $2",
                        2, params, err);
}

static int record_preempt(PGconn *conn, struct snapshot *s, const struct pl_decision *d, struct whet_err *err) {
    int r = (int)(d->job - s->running);
    if (r < 0 || r >= s->n_running) return 0;
    const char *for_job = "";
    if (d->for_job && d->for_job >= s->queued && d->for_job < s->queued + s->n_queued)
        for_job = s->queued_ids[d->for_job - s->queued];
    char attempt[16], event_id[40];
    snprintf(attempt, sizeof attempt, "%d", s->running_attempts[r]);
    whet_random_id("ftevent-", 24, event_id);
    const char *params[] = {s->running_ids[r], attempt, for_job, event_id};
    if (whet_pg_exec(conn,
                     "WITH j AS (UPDATE jobs SET preempt_requested = true WHERE id = $1 AND NOT preempt_requested"
                     "   RETURNING id, tenant_id, node_id),"
                     " c AS (INSERT INTO node_commands (node_id, job_id, attempt, kind, grace_ms, reason)"
                     "   SELECT node_id, id, $2::int, 'stop', 30000, 'preempted' FROM j)"
                     " INSERT INTO job_events (id, tenant_id, job_id, level, message, data)"
                     " SELECT $4, tenant_id, id, 'warn', 'The job is being preempted for a job of higher priority;"
                     " it checkpoints now and resumes later', jsonb_build_object('for_job', $3::text) FROM j",
                     4, params, err) < 0)
        return -1;
    log_info("msg=\"preempting\" job=%s for=%s", s->running_ids[r], for_job);
    return 0;
}

int scheduler_cycle(struct scheduler *sch, PGconn *conn, struct whet_err *err) {
    if (expire_leases(conn, err) < 0 || apply_tenant_requests(conn, err) < 0) return -1;
    struct snapshot s;
    struct pl_tenant *tenants = NULL;
    struct pl_cluster *cluster = NULL;
    int rc = -1;
    if (load_snapshot(conn, &s, err) < 0) goto out;
    if (s.n_queued == 0) {
        rc = 0;
        goto out;
    }
    if (!(tenants = load_tenants(conn, &s, err))) goto out;
    struct pl_config cfg;
    if (pl_config_for_policy(&cfg, sch->opts->policy ? sch->opts->policy : "whet") < 0) {
        whet_errf(err, "unknown placement policy \"%s\"", sch->opts->policy);
        goto out;
    }
    cfg.min_run_s = 5;
    char perr[256];
    cluster = pl_cluster_new(s.nodes, s.n_nodes, tenants, s.tenant_ids.n ? s.tenant_ids.n : 1, &cfg, perr, sizeof perr);
    if (!cluster) {
        whet_errf(err, "placement snapshot: %s", perr);
        goto out;
    }
    for (int i = 0; i < s.n_running; i++)
        if (pl_cluster_add_running(cluster, &s.running[i], perr, sizeof perr) < 0)
            log_warn("msg=\"running job does not fit its node\" job=%s error=\"%s\"", s.running_ids[i], perr);
    struct pl_job **queue = xcalloc((size_t)s.n_queued, sizeof *queue);
    for (int i = 0; i < s.n_queued; i++) queue[i] = &s.queued[i];
    const struct pl_result *r = pl_schedule(cluster, queue, s.n_queued, (double)whet_now_unix());
    rc = 0;
    for (int i = 0; i < r->n && PQstatus(conn) == CONNECTION_OK; i++) {
        const struct pl_decision *d = &r->decisions[i];
        log_debug("msg=\"decision\" action=%d job_seq=%llu for_seq=%llu", (int)d->action, (unsigned long long)d->job->id,
                  d->for_job ? (unsigned long long)d->for_job->id : 0ull);
        int q = d->job >= s.queued && d->job < s.queued + s.n_queued ? (int)(d->job - s.queued) : -1;
        int failed = 0;
        if (d->action == PL_PLACE && q >= 0) failed = record_place(sch, conn, &s, q, d, err) < 0;
        else if (d->action == PL_WAIT && q >= 0) failed = record_wait(conn, &s, q, d, err) < 0;
        else if (d->action == PL_PREEMPT) failed = record_preempt(conn, &s, d, err) < 0;
        /* One decision that cannot be written must not hold up the others. */
        if (failed) log_warn("msg=\"decision not recorded\" action=%d job_seq=%llu error=\"%s\"", (int)d->action,
                             (unsigned long long)d->job->id, err->msg);
    }
    if (PQstatus(conn) != CONNECTION_OK) rc = whet_errf(err, "the database connection broke during the cycle");
    free(queue);
out:
    pl_cluster_free(cluster);
    free(tenants);
    snapshot_free(&s);
    return rc;
}
