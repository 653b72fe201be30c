/* estimate.c - job estimates and the budget's hard cap on create (see estimate.h). */
#include "estimate.h"

#include <string.h>

#include "db.h"

int estimate_take_dry_run(struct gw_req *r, json_t *body) {
    json_t *whet = json_object_get(body, "whet");
    json_t *dry = json_is_object(whet) ? json_object_get(whet, "dry_run") : NULL;
    if (!dry) return 0;
    if (!json_is_boolean(dry)) {
        http_reply_error(r, 400, "whet.dry_run", "invalid_request", "whet.dry_run: expected a boolean, found %s",
                         json_is_string(dry)   ? "a string"
                         : json_is_number(dry) ? "a number"
                                               : "another value");
        return -1;
    }
    int on = json_is_true(dry);
    json_object_del(whet, "dry_run");
    return on;
}

struct estimate_ctx {
    struct estimate_req q;
    estimate_next_fn next;
    void *arg;
};

/* Columns: the estimate, the budget status, over the hard cap, over the soft limit, the calling API key's
 * monthly limit and this month's spend when the estimate would take it past that limit (else NULL). */
static void estimate_done(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct estimate_ctx *c = arg;
    if (db_reply_failed(r, res)) return;
    const PGresult *row = res->res[0];
    int over_hard = !strcmp(PQgetvalue(row, 0, 2), "t"), over_soft = !strcmp(PQgetvalue(row, 0, 3), "t");
    if (c->q.dry_run) {
        json_t *e = db_json_value(row, 0, 0);
        json_object_set_new(e, "model", json_string(c->q.model));
        json_object_set_new(e, "training_file", json_string(c->q.training_file));
        json_object_set_new(e, "dry_run", json_true());
        json_object_set_new(e, "budget", db_json_value(row, 0, 1));
        json_object_set_new(e, "within_budget", json_boolean(!over_hard && PQgetisnull(row, 0, 4)));
        http_reply_json(r, 200, e);
        return;
    }
    if (!PQgetisnull(row, 0, 4)) {
        http_reply_error_hint(r, 429, NULL, "insufficient_quota",
                              "ask for a higher limit on this API key, or use another",
                              "this job's estimated cost would take this API key's spend this month (%s) past its "
                              "monthly limit of %s",
                              PQgetvalue(row, 0, 5), PQgetvalue(row, 0, 4));
        return;
    }
    if (over_hard) {
        json_t *b = db_json_value(row, 0, 1), *e = db_json_value(row, 0, 0);
        http_reply_error_hint(r, 429, NULL, "insufficient_quota", "ask your operator to raise the monthly limit",
                              "this job's estimated cost (%g %s) would take the month's spend (%g) past the monthly "
                              "limit of %g",
                              json_number_value(json_object_get(json_object_get(e, "cost"), "amount")),
                              json_string_value(json_object_get(b, "currency")),
                              json_number_value(json_object_get(b, "spent")),
                              json_number_value(json_object_get(b, "monthly_limit")));
        json_decref(b);
        json_decref(e);
        return;
    }
    c->next(r, http_strdup(r, PQgetvalue(row, 0, 0)), over_soft, c->arg);
}

void estimate_job(struct gw_req *r, const struct estimate_req *q, estimate_next_fn next, void *arg) {
    struct estimate_ctx *c = http_alloc(r, sizeof *c);
    c->q = *q;
    c->next = next;
    c->arg = arg;
    const char *p[] = {q->base_model,         q->method_json,
                       q->training_file,      q->whet_json ? q->whet_json : "{}",
                       http_tenant_id(r),     r->api_key_id[0] ? r->api_key_id : NULL,
                       q->dry_run ? "t" : "f"};
    db_query(r, "jobs_estimate", 7, p, estimate_done, c);
}

void estimate_prepare(void) {
    /* The month's spend sums the tenant's usage, so a create weighs it only when the tenant has a budget
     * (a dry run shows it anyway); without one the create reads a bounded number of rows. */
    db_prepare("jobs_estimate",
               "SELECT e, b, (b ->> 'monthly_limit') IS NOT NULL AND (b ->> 'spent')::numeric + "
               "(e -> 'cost' ->> 'amount')::numeric > (b ->> 'monthly_limit')::numeric, "
               "(b ->> 'soft_limit') IS NOT NULL AND (b ->> 'spent')::numeric + "
               "(e -> 'cost' ->> 'amount')::numeric >= (b ->> 'soft_limit')::numeric, "
               "k.monthly_limit, k.spent FROM (SELECT whet_job_estimate($1, $2::jsonb, $3, $4::jsonb) AS e, "
               "CASE WHEN $7::boolean OR EXISTS (SELECT 1 FROM budgets WHERE tenant_id = $5 AND "
               "(monthly_limit IS NOT NULL OR soft_limit IS NOT NULL)) THEN whet_budget_status($5) END AS b) s LEFT "
               "JOIN LATERAL (SELECT monthly_limit, whet_key_spend(id) AS spent "
               "FROM api_keys WHERE id = $6 AND monthly_limit IS NOT NULL) k "
               "ON k.spent + (e -> 'cost' ->> 'amount')::numeric > k.monthly_limit");
}
