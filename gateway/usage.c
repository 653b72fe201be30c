/* usage.c - metering, as tenants and finance see it.
 *
 *   GET /v1/usage                        the tenant's own usage, one row per job and device type
 *   GET /admin/v1/usage                  every tenant's, for billing (?format=csv for a spreadsheet)
 *   GET /admin/v1/nodes                  the executors, their devices, leases and running jobs
 *
 * Device-seconds and tokens come from usage_records, which the scheduler writes once per attempt
 * (idempotently, so retries and failovers never count twice; an attempt lost with its node is counted
 * and flagged). Storage is the checkpoints' bytes times the hours they have been kept. Each row's `cost`
 * sums the database's cost lines (prices.h) of its job and device type over the same window; a job's
 * storage is costed on its first device type's row. */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "db.h"
#include "server.h"
#include "usage.h"

/* Usage per job and device type, with storage byte-hours from the job's checkpoints. $1: tenant id or
 * NULL for all tenants. */
#define USAGE_SQL                                                                                         \
    "SELECT u.tenant_id, t.name, u.job_id, u.device_type, sum(u.device_seconds)::float8,"                 \
    " sum(u.trained_tokens)::bigint, sum(u.rollout_tokens)::bigint,"                                      \
    " coalesce((SELECT sum(c.bytes * greatest(whet_now() - c.created_at, 0) / 3600.0) FROM checkpoints c" \
    "   WHERE c.job_id = u.job_id), 0)::float8,"                                                          \
    " count(DISTINCT u.attempt), coalesce(sum(u.device_seconds) FILTER (WHERE u.lost), 0)::float8,"       \
    " min(u.created_at), max(u.created_at),"                                                              \
    " (SELECT jsonb_build_object('amount', coalesce(sum(l.amount), 0), 'currency', whet_currency(),"       \
    "   'line_items', coalesce(jsonb_object_agg(l.line_item, l.amount), '{}'))"                              \
    "  FROM (SELECT line_item, sum(amount) AS amount FROM whet_cost_lines(u.tenant_id, u.job_id,"            \
    "   coalesce($3::bigint, 0), coalesce($4::bigint, 9223372036854775807)) WHERE device_type = u.device_type"  \
    "   GROUP BY line_item) l)"                                                                               \
    " FROM usage_records u JOIN tenants t ON t.id = u.tenant_id"                                          \
    " WHERE ($1::text IS NULL OR u.tenant_id = $1) AND ($2::text IS NULL OR u.job_id = $2)"               \
    "   AND u.created_at >= coalesce($3::bigint, 0) AND u.created_at < coalesce($4::bigint, 9223372036854775807)" \
    " GROUP BY u.tenant_id, t.name, u.job_id, u.device_type ORDER BY min(u.created_at), u.job_id, u.device_type"

static json_t *usage_row(const PGresult *res, int i, int with_tenant) {
    json_t *o = json_pack("{s:s, s:o, s:o, s:f, s:o, s:o, s:f, s:o, s:f, s:o, s:o, s:o}", "object", "usage", "job_id",
                          db_json_string(res, i, 2), "device_type", db_json_string(res, i, 3), "device_seconds",
                          atof(PQgetvalue(res, i, 4)), "trained_tokens", db_json_integer(res, i, 5), "rollout_tokens",
                          db_json_integer(res, i, 6), "storage_byte_hours", atof(PQgetvalue(res, i, 7)), "attempts",
                          db_json_integer(res, i, 8), "lost_device_seconds", atof(PQgetvalue(res, i, 9)),
                          "first_recorded_at", db_json_integer(res, i, 10), "last_recorded_at",
                          db_json_integer(res, i, 11), "cost", db_json_value(res, i, 12));
    if (with_tenant) {
        json_object_set_new(o, "tenant_id", db_json_string(res, i, 0));
        json_object_set_new(o, "tenant", db_json_string(res, i, 1));
    }
    return o;
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
    const PGresult *pr = res->res[0];
    const char *format = http_query_param(r, "format");
    if (admin && format && !strcmp(format, "csv")) {
        struct whet_buf csv = {0};
        whet_buf_puts(&csv, "tenant,tenant_id,job_id,device_type,device_seconds,lost_device_seconds,trained_tokens,"
                            "rollout_tokens,storage_byte_hours,attempts\n");
        for (int i = 0; i < PQntuples(pr); i++)
            whet_buf_printf(&csv, "%s,%s,%s,%s,%.3f,%.3f,%s,%s,%.3f,%s\n", PQgetvalue(pr, i, 1), PQgetvalue(pr, i, 0),
                            PQgetvalue(pr, i, 2), PQgetvalue(pr, i, 3), atof(PQgetvalue(pr, i, 4)),
                            atof(PQgetvalue(pr, i, 9)), PQgetvalue(pr, i, 5), PQgetvalue(pr, i, 6),
                            atof(PQgetvalue(pr, i, 7)), PQgetvalue(pr, i, 8));
        http_add_header(r, "content-disposition", "attachment; filename=\"whet-usage.csv\"");
        http_reply_bytes(r, 200, "text/csv; charset=utf-8", csv.data, csv.len);
        return;
    }
    if (format && strcmp(format, "json") && !(admin && !strcmp(format, "csv"))) {
        http_reply_error(r, 400, "format", "invalid_value", "format must be json%s", admin ? " or csv" : "");
        return;
    }
    json_t *data = json_array();
    for (int i = 0; i < PQntuples(pr); i++) json_array_append_new(data, usage_row(pr, i, admin));
    json_t *list = json_pack("{s:s, s:o, s:b}", "object", "list", "data", data, "has_more", 0);
    /* A tenant sees its budget and this month's spend beside (budgets.h): soft_alert is the alert flag. */
    if (res->n == 2) json_object_set_new(list, "budget", db_json_value(res->res[1], 0, 1));
    http_reply_json(r, 200, list);
}

static void usage_list(struct gw_req *r, int admin) {
    const char *start, *end;
    if (time_param(r, "start_time", &start) < 0 || time_param(r, "end_time", &end) < 0) return;
    const char *tenant = admin ? http_query_param(r, "tenant_id") : http_tenant_id(r);
    const char *params[] = {tenant, http_query_param(r, "job_id"), start, end};
    const char *budget[] = {tenant};
    struct db_stmt stmts[] = {{"usage_list", NULL, 4, params}, {"budget_status", NULL, 1, budget}};
    db_transaction(r, stmts, admin ? 1 : 2, usage_list_done, admin ? (void *)1 : NULL);
}

static void usage_tenant(struct gw_req *r) { usage_list(r, 0); }
static void usage_admin(struct gw_req *r) { usage_list(r, 1); }

static void nodes_list_done(struct gw_req *r, const struct db_result *res, void *arg) {
    (void)arg;
    if (db_reply_failed(r, res)) return;
    const PGresult *pr = res->res[0];
    json_t *data = json_array();
    for (int i = 0; i < PQntuples(pr); i++)
        json_array_append_new(data, json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:f, s:o}", "object", "node",
                                              "id", db_json_string(pr, i, 0), "dc", db_json_string(pr, i, 1), "pool",
                                              db_json_string(pr, i, 2), "devices", db_json_value(pr, i, 3), "state",
                                              db_json_string(pr, i, 4), "running_jobs", db_json_value(pr, i, 5),
                                              "version", db_json_string(pr, i, 6), "last_heartbeat",
                                              atof(PQgetvalue(pr, i, 7)), "registered_at", db_json_integer(pr, i, 8)));
    http_reply_json(r, 200, json_pack("{s:s, s:o, s:b}", "object", "list", "data", data, "has_more", 0));
}

static void nodes_list(struct gw_req *r) { db_query(r, "nodes_list", 0, NULL, nodes_list_done, NULL); }

void usage_routes(struct http_router *rt) {
    db_prepare("usage_list", USAGE_SQL);
    db_prepare("nodes_list",
               "SELECT n.id, n.dc, n.pool, n.devices, n.state,"
               " coalesce((SELECT json_agg(a.job_id ORDER BY a.job_id) FROM job_attempts a"
               "   WHERE a.node_id = n.id AND a.ended_at IS NULL), '[]'::json),"
               " n.version, n.last_heartbeat, n.registered_at FROM nodes n ORDER BY n.dc, n.id");
    http_route(rt, "GET", "/v1/usage", usage_tenant, HTTP_ROUTE_TENANT, "usage");
    http_route(rt, "GET", "/admin/v1/usage", usage_admin, HTTP_ROUTE_ADMIN, "admin_usage");
    http_route(rt, "GET", "/admin/v1/nodes", nodes_list, HTTP_ROUTE_ADMIN, "admin_nodes");
}
