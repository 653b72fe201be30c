/* costs.c - GET /v1/costs (see costs.h). One query sums the cost lines of the page's days by day and by
 * the groups asked for; the buckets (every day of the page, with or without costs) are built here. */
#include "costs.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "query_params.h"

#define DAY 86400LL
#define COSTS_TIME_MAX 253402300799LL /* 9999-12-31T23:59:59Z */
#define COSTS_LIMIT_DEFAULT 7
#define COSTS_LIMIT_MAX 180

struct costs_ctx {
    long long from, to, end; /* this page's days [from, to); the request's end */
    int by_line_item, by_job;
};

static json_t *result_json(const struct costs_ctx *c, const PGresult *res, int row) {
    char currency[4] = {0};
    for (int i = 0; i < 3 && PQgetvalue(res, row, 4)[i]; i++) currency[i] = (char)tolower(PQgetvalue(res, row, 4)[i]);
    json_t *o = json_pack("{s:s, s:{s:f, s:s}, s:o, s:n}", "object", "organization.costs.result", "amount", "value",
                          strtod(PQgetvalue(res, row, 3), NULL), "currency", currency, "line_item",
                          c->by_line_item ? db_json_string(res, row, 1) : json_null(), "project_id");
    if (c->by_job) json_object_set_new(o, "job_id", db_json_string(res, row, 2));
    return o;
}

static void costs_done(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct costs_ctx *c = arg;
    if (db_reply_failed(r, res)) return;
    const PGresult *rows = res->res[0];
    int n = PQntuples(rows), i = 0;
    json_t *data = json_array();
    for (long long day = c->from; day < c->to; day += DAY) {
        json_t *results = json_array();
        for (; i < n && strtoll(PQgetvalue(rows, i, 0), NULL, 10) == day; i++)
            json_array_append_new(results, result_json(c, rows, i));
        json_array_append_new(data, json_pack("{s:s, s:I, s:I, s:o}", "object", "bucket", "start_time", (json_int_t)day,
                                              "end_time", (json_int_t)(day + DAY), "results", results));
    }
    int more = c->to < c->end;
    http_reply_json(r, 200,
                    json_pack("{s:s, s:o, s:b, s:o}", "object", "page", "data", data, "has_more", more, "next_page",
                              more ? json_string(http_printf(r, "%lld", c->to)) : json_null()));
}

/* group_by: "line_item", "job_id" or both, comma-separated (also as group_by[]=…). Returns -1 having
 * answered 400. */
static int costs_group_by(struct gw_req *r, struct costs_ctx *c) {
    const struct http_kv *kv;
    size_t n = http_query_params(r, &kv);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(kv[i].key, "group_by") && strcmp(kv[i].key, "group_by[]")) continue;
        char *list = http_strdup(r, kv[i].value), *save = NULL;
        for (char *g = strtok_r(list, ",", &save); g; g = strtok_r(NULL, ",", &save)) {
            if (!strcmp(g, "line_item")) c->by_line_item = 1;
            else if (!strcmp(g, "job_id")) c->by_job = 1;
            else {
                http_reply_error(r, 400, "group_by", "invalid_value",
                                 "group_by: expected line_item, job_id or both (comma-separated), got \"%s\"", g);
                return -1;
            }
        }
    }
    return 0;
}

static void costs_get(struct gw_req *r) {
    struct costs_ctx *c = http_alloc(r, sizeof *c);
    memset(c, 0, sizeof *c);
    long long start, end, limit, page;
    int has_start = query_int(r, "start_time", 0, COSTS_TIME_MAX, 0, &start);
    if (has_start < 0) return;
    if (!has_start) {
        http_reply_error(r, 400, "start_time", "missing_required_parameter",
                         "start_time: required (Unix seconds; the first bucket starts at its UTC midnight)");
        return;
    }
    if (query_int(r, "end_time", 0, COSTS_TIME_MAX, whet_now_unix(), &end) < 0) return;
    const char *width = http_query_param(r, "bucket_width");
    if (width && strcmp(width, "1d")) {
        http_reply_error(r, 400, "bucket_width", "invalid_value", "bucket_width: only \"1d\" is supported");
        return;
    }
    if (query_int(r, "limit", 1, COSTS_LIMIT_MAX, COSTS_LIMIT_DEFAULT, &limit) < 0 || costs_group_by(r, c) < 0) return;
    c->from = start / DAY * DAY;
    c->end = (end + DAY - 1) / DAY * DAY;
    if (c->end <= c->from) {
        http_reply_error(r, 400, "end_time", "invalid_value", "end_time: must be after start_time");
        return;
    }
    int has_page = query_int(r, "page", c->from, c->end - 1, 0, &page);
    if (has_page < 0) return;
    if (has_page) {
        if (page % DAY) {
            http_reply_error(r, 400, "page", "invalid_value", "page: not a cursor this API returned (next_page)");
            return;
        }
        c->from = page;
    }
    c->to = c->from + limit * DAY < c->end ? c->from + limit * DAY : c->end;
    const char *p[] = {http_tenant_id(r), http_printf(r, "%lld", c->from), http_printf(r, "%lld", c->to),
                       c->by_line_item ? "true" : "false", c->by_job ? "true" : "false"};
    db_query(r, "costs_by_day", 5, p, costs_done, c);
}

void costs_routes(struct http_router *rt) {
    /* Columns: day, line_item, job_id, amount, currency. */
    db_prepare("costs_by_day",
               "SELECT day, CASE WHEN $4::bool THEN line_item END AS li, CASE WHEN $5::bool THEN job_id END AS job, "
               "sum(amount), min(currency) FROM whet_cost_lines($1, NULL, $2::bigint, $3::bigint) "
               "GROUP BY 1, 2, 3 ORDER BY 1, 2, 3");
    http_route(rt, "GET", "/v1/costs", costs_get, HTTP_ROUTE_TENANT, "costs");
}
