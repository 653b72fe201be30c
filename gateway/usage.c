/* usage.c - metering, as tenants and finance see it.
 *
 *   GET /v1/usage                        the tenant's own usage, one row per job and device type, and
 *                                        (`inference`) one per model it asked for completions and
 *                                        (`training_sessions`) one per training session
 *   GET /admin/v1/usage                  every tenant's, for billing (?format=csv for a spreadsheet)
 *
 * Device-seconds and tokens come from usage_records, which the scheduler writes once per attempt
 * (idempotently, so retries and failovers never count twice; an attempt lost with its node is counted
 * and flagged). Storage is the checkpoints' bytes times the hours they have been kept. Each row's `cost`
 * sums the database's cost lines (prices.h) of its job and device type over the same window; a job's
 * storage is costed on its first device type's row. Inference tokens come from inference_usage, one row
 * per answer (gateway/inference.c), summed per model; training sessions' tokens from session_usage, one row
 * per forward_backward or sample (gateway/training_sessions.c), summed per session. Neither belongs to a job,
 * so a job_id filter leaves them out. */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "db.h"
#include "server.h"
#include "usage.h"

/* The cost object of a usage row: the cost lines LINES (a call of a whet_*cost_lines function) that WHERE
 * keeps, summed by line item. */
#define COST_SQL(LINES, WHERE)                                                                                   \
    " (SELECT jsonb_build_object('amount', coalesce(sum(l.amount), 0), 'currency', whet_currency(),"             \
    "   'line_items', coalesce(jsonb_object_agg(l.line_item, l.amount), '{}'))"                                  \
    "  FROM (SELECT line_item, sum(amount) AS amount FROM " LINES " WHERE " WHERE " GROUP BY line_item) l)"
#define WINDOW_SQL "coalesce($3::bigint, 0), coalesce($4::bigint, 9223372036854775807)"

/* Usage per job and device type, with storage byte-hours from the job's checkpoints (a deleted one's up to its
 * deletion). $1: tenant id or NULL for all tenants. */
#define USAGE_SQL                                                                                         \
    "SELECT u.tenant_id, t.name, u.job_id, u.device_type, sum(u.device_seconds)::float8,"                 \
    " sum(u.trained_tokens)::bigint, sum(u.rollout_tokens)::bigint,"                                      \
    " coalesce((SELECT sum(c.bytes * greatest(coalesce(c.deleted_at, whet_now()) - c.created_at, 0)"      \
    "   / 3600.0) FROM checkpoint_storage c WHERE c.job_id = u.job_id), 0)::float8,"                      \
    " count(DISTINCT u.attempt), coalesce(sum(u.device_seconds) FILTER (WHERE u.lost), 0)::float8,"       \
    " min(u.created_at), max(u.created_at),"                                                              \
    COST_SQL("whet_cost_lines(u.tenant_id, u.job_id, " WINDOW_SQL ")", "device_type = u.device_type")     \
    " FROM usage_records u JOIN tenants t ON t.id = u.tenant_id"                                          \
    " WHERE ($1::text IS NULL OR u.tenant_id = $1) AND ($2::text IS NULL OR u.job_id = $2)"               \
    "   AND u.created_at >= coalesce($3::bigint, 0) AND u.created_at < coalesce($4::bigint, 9223372036854775807)" \
    " GROUP BY u.tenant_id, t.name, u.job_id, u.device_type ORDER BY min(u.created_at), u.job_id, u.device_type"

/* Inference per tenant and model, with the cost lines of the same model over the same window. $1: tenant
 * id or NULL for all tenants; $2: a job id (no inference row belongs to a job). */
#define INFERENCE_USAGE_SQL                                                                                            \
    "SELECT i.tenant_id, t.name, i.model, count(*), sum(i.prompt_tokens)::bigint,"                                     \
    " sum(i.completion_tokens)::bigint, min(i.created_at), max(i.created_at),"                                         \
    COST_SQL("whet_cost_lines(i.tenant_id, NULL, " WINDOW_SQL ")", "model = i.model")                                  \
    " FROM inference_usage i JOIN tenants t ON t.id = i.tenant_id"                                                     \
    " WHERE ($1::text IS NULL OR i.tenant_id = $1) AND $2::text IS NULL"                                               \
    "   AND i.created_at >= coalesce($3::bigint, 0) AND i.created_at < coalesce($4::bigint, 9223372036854775807)"      \
    " GROUP BY i.tenant_id, t.name, i.model ORDER BY min(i.created_at), i.model"

/* Training sessions per tenant and session, with the cost lines of the session over the same window. $1: tenant
 * id or NULL for all tenants; $2: a job id (no session row belongs to a job). */
#define SESSION_USAGE_SQL                                                                                              \
    "SELECT s.tenant_id, t.name, s.session_id, s.base_model, count(*) FILTER (WHERE s.call = 'forward_backward'),"    \
    " count(*) FILTER (WHERE s.call = 'sample'), sum(s.train_tokens)::bigint, sum(s.prefill_tokens)::bigint,"          \
    " sum(s.sample_tokens)::bigint, min(s.created_at), max(s.created_at),"                                             \
    COST_SQL("whet_inference_cost_lines(s.tenant_id, NULL, " WINDOW_SQL ")", "model = s.session_id")                  \
    " FROM session_usage s JOIN tenants t ON t.id = s.tenant_id"                                                       \
    " WHERE ($1::text IS NULL OR s.tenant_id = $1) AND $2::text IS NULL"                                               \
    "   AND s.created_at >= coalesce($3::bigint, 0) AND s.created_at < coalesce($4::bigint, 9223372036854775807)"      \
    " GROUP BY s.tenant_id, t.name, s.session_id, s.base_model ORDER BY min(s.created_at), s.session_id"

/* An operator's row names its tenant (columns 0 and 1). */
static json_t *with_tenant(json_t *o, const PGresult *res, int i, int admin) {
    if (admin) {
        json_object_set_new(o, "tenant_id", db_json_string(res, i, 0));
        json_object_set_new(o, "tenant", db_json_string(res, i, 1));
    }
    return o;
}

static json_t *inference_row(const PGresult *res, int i, int admin) {
    json_t *o = json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "object", "usage.inference", "model",
                          db_json_string(res, i, 2), "requests", db_json_integer(res, i, 3), "prompt_tokens",
                          db_json_integer(res, i, 4), "completion_tokens", db_json_integer(res, i, 5),
                          "first_recorded_at", db_json_integer(res, i, 6), "last_recorded_at",
                          db_json_integer(res, i, 7), "cost", db_json_value(res, i, 8));
    return with_tenant(o, res, i, admin);
}

static json_t *session_row(const PGresult *res, int i, int admin) {
    json_t *o = json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "object", "usage.training_session",
                          "session_id", db_json_string(res, i, 2), "base_model", db_json_string(res, i, 3),
                          "forward_backward_calls", db_json_integer(res, i, 4), "sample_calls",
                          db_json_integer(res, i, 5), "train_tokens", db_json_integer(res, i, 6), "prefill_tokens",
                          db_json_integer(res, i, 7), "sample_tokens", db_json_integer(res, i, 8), "first_recorded_at",
                          db_json_integer(res, i, 9), "last_recorded_at", db_json_integer(res, i, 10), "cost",
                          db_json_value(res, i, 11));
    return with_tenant(o, res, i, admin);
}

static json_t *usage_row(const PGresult *res, int i, int admin) {
    json_t *o = json_pack("{s:s, s:o, s:o, s:f, s:o, s:o, s:f, s:o, s:f, s:o, s:o, s:o}", "object", "usage", "job_id",
                          db_json_string(res, i, 2), "device_type", db_json_string(res, i, 3), "device_seconds",
                          atof(PQgetvalue(res, i, 4)), "trained_tokens", db_json_integer(res, i, 5), "rollout_tokens",
                          db_json_integer(res, i, 6), "storage_byte_hours", atof(PQgetvalue(res, i, 7)), "attempts",
                          db_json_integer(res, i, 8), "lost_device_seconds", atof(PQgetvalue(res, i, 9)),
                          "first_recorded_at", db_json_integer(res, i, 10), "last_recorded_at",
                          db_json_integer(res, i, 11), "cost", db_json_value(res, i, 12));
    return with_tenant(o, res, i, admin);
}

/* `start_time`/`end_time` are Unix seconds; anything else is a 400. Returns 0 or -1 (answered). */
static int time_param(struct gw_req *r, const char *name, const char **out) {
    const char *v = http_query_param(r, name);
    *out = NULL;
    if (!v) return 0;
    char *end;
    long long t = strtoll(v, &end, 10);
    if (!*v || *end || t < 0) {
        http_reply_error(r, 400, name, "invalid_value", "%s must be a Unix time in seconds", name);
        return -1;
    }
    *out = v;
    return 0;
}

static void usage_list_done(struct gw_req *r, const struct db_result *res, void *arg) {
    int admin = arg != NULL;
    if (db_reply_failed(r, res)) return;
    const PGresult *pr = res->res[1], *inf = res->res[2], *ses = res->res[3]; /* res[0]: usage_no_jit */
    const char *format = http_query_param(r, "format");
    if (admin && format && !strcmp(format, "csv")) {
        /* a job's row leaves the inference columns empty, a model's the job's */
        struct whet_buf csv = {0};
        whet_buf_puts(&csv,
                      "tenant,tenant_id,job_id,device_type,device_seconds,lost_device_seconds,trained_tokens,"
                      "rollout_tokens,storage_byte_hours,attempts,model,requests,prompt_tokens,completion_tokens\n");
        for (int i = 0; i < PQntuples(pr); i++)
            whet_buf_printf(&csv, "%s,%s,%s,%s,%.3f,%.3f,%s,%s,%.3f,%s,,,,\n", PQgetvalue(pr, i, 1),
                            PQgetvalue(pr, i, 0), PQgetvalue(pr, i, 2), PQgetvalue(pr, i, 3),
                            atof(PQgetvalue(pr, i, 4)), atof(PQgetvalue(pr, i, 9)), PQgetvalue(pr, i, 5),
                            PQgetvalue(pr, i, 6), atof(PQgetvalue(pr, i, 7)), PQgetvalue(pr, i, 8));
        for (int i = 0; i < PQntuples(inf); i++)
            whet_buf_printf(&csv, "%s,%s,,,,,,,,,%s,%s,%s,%s\n", PQgetvalue(inf, i, 1), PQgetvalue(inf, i, 0),
                            PQgetvalue(inf, i, 2), PQgetvalue(inf, i, 3), PQgetvalue(inf, i, 4), PQgetvalue(inf, i, 5));
        http_add_header(r, "content-disposition", "attachment; filename=\"whet-usage.csv\"");
        http_reply_bytes(r, 200, "text/csv; charset=utf-8", csv.data, csv.len);
        return;
    }
    if (format && strcmp(format, "json") && !(admin && !strcmp(format, "csv"))) {
        http_reply_error(r, 400, "format", "invalid_value", "format must be json%s", admin ? " or csv" : "");
        return;
    }
    json_t *data = json_array(), *inference = json_array(), *sessions = json_array();
    for (int i = 0; i < PQntuples(pr); i++) json_array_append_new(data, usage_row(pr, i, admin));
    for (int i = 0; i < PQntuples(inf); i++) json_array_append_new(inference, inference_row(inf, i, admin));
    for (int i = 0; i < PQntuples(ses); i++) json_array_append_new(sessions, session_row(ses, i, admin));
    json_t *list = json_pack("{s:s, s:o, s:o, s:o, s:b}", "object", "list", "data", data, "inference", inference,
                             "training_sessions", sessions, "has_more", 0);
    /* A tenant sees its budget and this month's spend beside (budgets.h): soft_alert is the alert flag. */
    if (res->n == 5) json_object_set_new(list, "budget", db_json_value(res->res[4], 0, 1));
    http_reply_json(r, 200, list);
}

static void usage_list(struct gw_req *r, int admin) {
    const char *start, *end;
    if (time_param(r, "start_time", &start) < 0 || time_param(r, "end_time", &end) < 0) return;
    const char *tenant = admin ? http_query_param(r, "tenant_id") : http_tenant_id(r);
    const char *params[] = {tenant, http_query_param(r, "job_id"), start, end};
    const char *budget[] = {tenant};
    struct db_stmt stmts[] = {{"usage_no_jit", NULL, 0, NULL},
                              {"usage_list", NULL, 4, params},
                              {"usage_inference", NULL, 4, params},
                              {"usage_sessions", NULL, 4, params},
                              {"budget_status", NULL, 1, budget}};
    db_transaction(r, stmts, admin ? 4 : 5, usage_list_done, admin ? (void *)1 : NULL);
}

static void usage_tenant(struct gw_req *r) { usage_list(r, 0); }
static void usage_admin(struct gw_req *r) { usage_list(r, 1); }

void usage_routes(struct http_router *rt) {
    /* The usage statements inline the cost-line functions once per row: costed past jit_above_cost, they
     * were compiled on every call (2-3 s of a 50 ms answer for a tenant's month, 7-10 s once usage_records
     * is in monthly partitions, migration 0051). Off for this transaction only. */
    db_prepare("usage_no_jit", "SELECT set_config('jit', 'off', true)");
    db_prepare("usage_list", USAGE_SQL);
    db_prepare("usage_inference", INFERENCE_USAGE_SQL);
    db_prepare("usage_sessions", SESSION_USAGE_SQL);
    http_route(rt, "GET", "/v1/usage", usage_tenant, HTTP_ROUTE_TENANT, "usage");
    http_route(rt, "GET", "/admin/v1/usage", usage_admin, HTTP_ROUTE_ADMIN, "admin_usage");
}
