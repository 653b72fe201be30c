/* budgets.c - the budget routes (see budgets.h). The status (spend, limits, alerts) is computed by the
 * database, whet_budget_status. */
#include "budgets.h"

#include "db.h"
#include "json_text.h"

static void budget_done(struct gw_req *r, const struct db_result *res, void *arg) {
    (void)arg;
    if (db_reply_unless_found(r, res, "tenant", "id")) return;
    const PGresult *status = res->res[res->n - 1];
    json_t *b = db_json_value(status, 0, 1);
    json_object_set_new(b, "tenant_id", db_json_string(status, 0, 0));
    http_reply_json(r, 200, b);
}

static void budget_get(struct gw_req *r) {
    const char *p[] = {http_path_param(r, "id")};
    db_query(r, "budget_status", 1, p, budget_done, NULL);
}

int budget_limit_field(struct gw_req *r, const json_t *body, const char *name, const char **text) {
    json_t *v = json_object_get(body, name);
    char buf[WHET_JSON_REAL_MAX];
    *text = NULL;
    if (!v || json_is_null(v)) return 0;
    double x = json_number_value(v);
    if (!json_is_number(v) || !(x >= 0 && x <= 1e15) || whet_json_real(x, buf) < 0) {
        http_reply_error(r, 400, name, "invalid_value",
                         "%s: expected an amount of 0 to 1e15 in the price book's "
                         "currency, or null for none",
                         name);
        return -1;
    }
    *text = http_strdup(r, buf);
    return 0;
}

struct gate {
    void (*next)(struct gw_req *r, void *arg);
    void *arg;
};

/* Columns: the tenant's budget status when it has a monthly limit; the key's monthly limit and spend when
 * the spend reached it. */
static void gate_done(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct gate *g = arg;
    if (db_reply_failed(r, res)) return;
    const PGresult *row = res->res[0];
    const char *over = NULL, *hint = NULL;
    json_t *b = PQgetisnull(row, 0, 0) ? NULL : db_json_value(row, 0, 0);
    if (!PQgetisnull(row, 0, 1)) {
        over = http_printf(r, "this API key's spend this month (%s) reached its monthly limit of %s",
                           PQgetvalue(row, 0, 2), PQgetvalue(row, 0, 1));
        hint = "ask for a higher limit on this API key, or use another";
    } else if (b && json_is_true(json_object_get(b, "hard_cap_reached"))) {
        over = http_printf(r, "this month's spend (%g %s) reached the monthly limit of %g",
                           json_number_value(json_object_get(b, "spent")),
                           json_string_value(json_object_get(b, "currency")),
                           json_number_value(json_object_get(b, "monthly_limit")));
        hint = "ask your operator to raise the monthly limit";
    }
    json_decref(b);
    if (over)
        http_reply_error_hint(r, 429, NULL, "insufficient_quota", hint, "You exceeded your current quota: %s", over);
    else g->next(r, g->arg);
}

void budget_gate(struct gw_req *r, void (*next)(struct gw_req *r, void *arg), void *arg) {
    struct gate *g = http_alloc(r, sizeof *g);
    *g = (struct gate){next, arg};
    const char *p[] = {http_tenant_id(r), r->api_key_id[0] ? r->api_key_id : NULL};
    db_query(r, "budget_gate", 2, p, gate_done, g);
}

static void budget_put(struct gw_req *r) {
    json_t *body = http_body_json(r);
    if (!body) return;
    static const char *const keys[] = {"monthly_limit", "soft_limit", NULL};
    const char *hard, *soft;
    if (http_body_keys_known(r, body, keys) == 0 && budget_limit_field(r, body, "monthly_limit", &hard) == 0 &&
        budget_limit_field(r, body, "soft_limit", &soft) == 0) {
        const char *put[] = {http_path_param(r, "id"), hard, soft};
        const char *get[] = {http_path_param(r, "id")};
        struct db_stmt stmts[] = {{"budget_put", NULL, 3, put}, {"budget_status", NULL, 1, get}};
        db_transaction(r, stmts, 2, budget_done, NULL);
    }
    json_decref(body);
}

static void budget_mine(struct gw_req *r) {
    const char *p[] = {http_tenant_id(r)};
    db_query(r, "budget_status", 1, p, budget_done, NULL);
}

void budgets_routes(struct http_router *rt) {
    db_prepare("budget_status", "SELECT t.id, whet_budget_status(t.id) FROM tenants t WHERE t.id = $1 OR t.name = $1");
    db_prepare("budget_put", "INSERT INTO budgets (tenant_id, monthly_limit, soft_limit) "
                             "SELECT id, $2::numeric, $3::numeric FROM tenants WHERE id = $1 OR name = $1 "
                             "ON CONFLICT (tenant_id) DO UPDATE SET monthly_limit = excluded.monthly_limit, "
                             "soft_limit = excluded.soft_limit, updated_at = whet_now() RETURNING tenant_id");
    db_prepare("budget_gate",
               "SELECT (SELECT whet_budget_status(tenant_id) FROM budgets WHERE tenant_id = $1 AND "
               "monthly_limit IS NOT NULL), k.monthly_limit, k.spent FROM (SELECT 1) o LEFT JOIN LATERAL "
               "(SELECT monthly_limit, whet_key_spend(id) AS spent FROM api_keys WHERE id = $2 AND "
               "monthly_limit IS NOT NULL) k ON k.spent >= k.monthly_limit");
    http_route(rt, "PUT", "/admin/v1/tenants/{id}/budget", budget_put, HTTP_ROUTE_ADMIN, "admin_budget.put");
    http_route(rt, "GET", "/admin/v1/tenants/{id}/budget", budget_get, HTTP_ROUTE_ADMIN, "admin_budget.get");
    http_route(rt, "GET", "/v1/budget", budget_mine, HTTP_ROUTE_TENANT, "budget");
}
