/* estimate.c - job estimates before a run (see estimate.h). */
#include "estimate.h"

#include "db.h"

int estimate_take_dry_run(struct gw_req *r, json_t *body) {
    json_t *whet = json_object_get(body, "whet");
    json_t *dry = json_is_object(whet) ? json_object_get(whet, "dry_run") : NULL;
    if (!dry) return 0;
    if (!json_is_boolean(dry)) {
        http_reply_error(r, 400, "whet.dry_run", "invalid_request", "whet.dry_run: expected a boolean, found %s",
                         json_is_string(dry) ? "a string" : json_is_number(dry) ? "a number" : "another value");
        return -1;
    }
    int on = json_is_true(dry);
    json_object_del(whet, "dry_run");
    return on;
}

struct estimate_ctx {
    const char *model, *training_file;
};

static void estimate_done(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct estimate_ctx *c = arg;
    if (db_reply_failed(r, res)) return;
    json_t *e = db_json_value(res->res[0], 0, 0);
    json_object_set_new(e, "model", json_string(c->model));
    json_object_set_new(e, "training_file", json_string(c->training_file));
    json_object_set_new(e, "dry_run", json_true());
    http_reply_json(r, 200, e);
}

void estimate_reply(struct gw_req *r, const char *model, const char *base_model, const char *method_json,
                    const char *training_file, const char *whet_json) {
    struct estimate_ctx *c = http_alloc(r, sizeof *c);
    c->model = model;
    c->training_file = training_file;
    const char *p[] = {base_model, method_json, training_file, whet_json ? whet_json : "{}"};
    db_query(r, "jobs_estimate", 4, p, estimate_done, c);
}

void estimate_prepare(void) {
    db_prepare("jobs_estimate", "SELECT whet_job_estimate($1, $2::jsonb, $3, $4::jsonb)");
}
