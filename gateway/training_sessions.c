/* training_sessions.c - training sessions (a whet extension after Tinker's training API) and the tokenizer
 * helper, answered by the model worker of the session's base (executor/serve/serve_session_http.h says
 * what each call does and returns).
 *
 *   POST   /v1/training_sessions                        {base_model, lora, init_checkpoint}
 *   POST   /v1/training_sessions/{id}/forward_backward|optim_step|sample|save
 *   DELETE /v1/training_sessions/{id}
 *   POST   /v1/tokenize                                 {model, text | messages}
 *
 * The gateway owns who may touch a session: it names the session (the worker takes the name from x-whet-session),
 * records it with its tenant and base (training_sessions, migration 0017), and hands each call to the worker of
 * that base only when the session is the tenant's and not deleted; another tenant's session is a 404 like one that
 * never was. init_checkpoint is one of the tenant's fine-tuned models or checkpoints of the same base, resolved as
 * completions resolve `model` (its object-store prefix goes to the worker in x-whet-adapter). With encryption at
 * rest a create from init_checkpoint and a save carry the tenant's data key wrapped under the operator key
 * (x-whet-data-key, inference.h): the worker reads the initial adapter and writes the save sealed. A save is one of
 * the tenant's fine-tuned models (session_models, migration 0024): the gateway names it
 * ft:BASE:TENANT:SESSION:save-HEX and where it goes (sessions/SESSION/save-HEX, x-whet-save-prefix), records it,
 * and the worker answers the name (x-whet-save-model) with the checkpoint; a save that is not answered 200 is
 * forgotten. It is listed and served like a job's model (models.h, inference.h) and outlives its session. A tenant
 * (or API key) whose month's spend reached its monthly limit cannot create a session nor run its passes
 * (forward_backward, optim_step, sample): 429 insufficient_quota (budget_gate); it can still save and delete.
 * Metering, per token as Tinker bills: the worker reports each forward_backward's train tokens and each sample's
 * prefill (prompt) and sample tokens, the numbers of the answer's own `usage` (x-whet-usage, taken out of what the
 * client sees); the gateway writes one session_usage row per call answered 200 (migration 0028), with the API key
 * that asked, which /v1/usage and the cost lines (/v1/costs, budgets, an API key's spend, the FOCUS export) read.
 * Train tokens are priced at trained_tokens_1m, prefill and sample tokens at the inference prompt and completion
 * prices. optim_step, save, create and delete are not metered.
 * Bodies are checked by the worker (400 naming the field); the gateway checks what it decides on. A create for a
 * base with no ready worker waits for one's cold start as completions do (model_workers_await: the lookup records
 * the demand that starts one), then is a 503 with retry-after; the calls on a session do not wait (the session
 * lives on its worker: with no worker, it is gone). */
#include "training_sessions.h"

#include <stdlib.h>
#include <string.h>

#include "budgets.h"
#include "crypto.h"
#include "db.h"
#include "inference.h"
#include "log.h"
#include "model_workers.h"

/* What a create has decided so far, from the request's pool. */
struct create {
    const char *base, *init, *lora, *id, *data_key;
};

static void created(struct gw_req *r, const struct db_result *res, void *arg) {
    struct create *c = arg;
    if (db_reply_failed(r, res)) return;
    const char *const headers[][2] = {
        {"x-whet-session", c->id}, {"x-whet-adapter", c->init}, {"x-whet-data-key", c->data_key}};
    model_workers_proxy(r, c->base, headers, !c->init ? 1 : c->data_key ? 3 : 2);
}

static void insert(struct gw_req *r, struct create *c) {
    char id[32];
    whet_random_id("ts-", 24, id);
    c->id = http_strdup(r, id);
    const char *params[] = {c->id, http_tenant_id(r), c->base, c->lora, c->init};
    db_query(r, "training_sessions_insert", 5, params, created, c);
}

/* The initial adapter is the tenant's data: read with its data key when sealed. */
static void init_keyed(struct gw_req *r, const char *data_key, void *arg) {
    struct create *c = arg;
    c->data_key = data_key;
    insert(r, c);
}

/* init_checkpoint resolved: its base and the prefix of its adapter. */
static void init_resolved(struct gw_req *r, const struct db_result *res, void *arg) {
    struct create *c = arg;
    if (db_reply_failed(r, res)) return;
    const PGresult *row = res->res[0];
    if (PQntuples(row) == 0 || PQgetisnull(row, 0, 1)) {
        http_reply_error(r, 404, "init_checkpoint", "model_not_found",
                         "init_checkpoint: `%s` is not one of your fine-tuned models or checkpoints", c->init);
        return;
    }
    if (strcmp(PQgetvalue(row, 0, 0), c->base)) {
        http_reply_error(r, 400, "init_checkpoint", "invalid_value",
                         "init_checkpoint: `%s` is a fine-tune of %s, not of base_model %s", c->init,
                         PQgetvalue(row, 0, 0), c->base);
        return;
    }
    c->init = http_strdup(r, PQgetvalue(row, 0, 1));
    inference_data_key(r, init_keyed, c);
}

/* The base has a ready worker (after its cold start, when it had none). */
static void base_served(struct gw_req *r, const struct model_worker *w, void *arg) {
    struct create *c = arg;
    (void)w;
    if (!c->init) {
        insert(r, c);
        return;
    }
    const char *params[] = {http_tenant_id(r), c->init};
    db_query(r, "inference_model", 2, params, init_resolved, c); /* inference.c's: completions' resolution */
}

static void base_found(struct gw_req *r, const struct db_result *res, void *arg) {
    struct create *c = arg;
    if (db_reply_failed(r, res)) return;
    if (PQntuples(res->res[0]) == 0) {
        http_reply_error(r, 404, "base_model", "model_not_found", "base_model: no base model `%s`", c->base);
        return;
    }
    model_workers_await(r, c->base, base_served, c);
}

static void create_allowed(struct gw_req *r, void *arg) {
    struct create *c = arg;
    const char *params[] = {c->base};
    db_query(r, "training_sessions_base", 1, params, base_found, c);
}

static void create(struct gw_req *r) {
    json_t *body = http_body_json(r);
    if (!body) return;
    static const char *const keys[] = {"base_model", "lora", "init_checkpoint", NULL};
    if (http_body_keys_known(r, body, keys)) {
        json_decref(body);
        return;
    }
    const json_t *base = json_object_get(body, "base_model"), *lora = json_object_get(body, "lora"),
                 *init = json_object_get(body, "init_checkpoint");
    const char *param = NULL, *problem = NULL;
    if (!json_is_string(base) || !*json_string_value(base))
        param = "base_model", problem = "expected the name of a base model";
    else if (lora && !json_is_null(lora) && !json_is_object(lora))
        param = "lora", problem = "expected an object {r, alpha, target_modules}";
    else if (init && !json_is_null(init) && !json_is_string(init))
        param = "init_checkpoint", problem = "expected the name of a fine-tuned model or checkpoint";
    if (problem) {
        json_decref(body);
        http_reply_error(r, 400, param, "invalid_value", "%s: %s", param, problem);
        return;
    }
    struct create *c = http_alloc(r, sizeof *c);
    c->base = http_strdup(r, json_string_value(base));
    c->init = json_is_string(init) ? http_strdup(r, json_string_value(init)) : NULL;
    char *lora_text = lora && !json_is_null(lora) ? json_dumps(lora, JSON_COMPACT) : NULL;
    c->lora = http_strdup(r, lora_text ? lora_text : "{}");
    free(lora_text);
    json_decref(body);
    budget_gate(r, create_allowed, c);
}

/* ---- Metering: a forward_backward or sample answered 200 is one session_usage row (migration 0028) */

struct meter_prefilter {
    h2o_req_prefilter_t super;
    struct gw_req *r;
    const char *call, *base;
};

static void usage_written(struct gw_req *r, const struct db_result *res, void *arg) {
    (void)arg;
    if (!res->ok)
        log_error("msg=\"training session usage not recorded\" request_id=%s error=\"%s\"", r->request_id,
                  res->message);
}

/* The worker's report, "TRAIN PREFILL SAMPLE" (x-whet-usage, serve_session_http.h), becomes a usage row; the
 * client never sees it. */
static void call_answered(h2o_req_prefilter_t *self, h2o_req_t *req, h2o_ostream_t **slot) {
    const struct meter_prefilter *pf = (const struct meter_prefilter *)self;
    struct gw_req *r = pf->r;
    ssize_t h = h2o_find_header_by_str(&req->res.headers, H2O_STRLIT("x-whet-usage"), -1);
    char text[64] = "";
    if (h >= 0) {
        h2o_iovec_t v = req->res.headers.entries[h].value;
        snprintf(text, sizeof text, "%.*s", (int)(v.len < sizeof text - 1 ? v.len : sizeof text - 1), v.base);
        h2o_delete_header(&req->res.headers, h);
    }
    long long n[3];
    char *at = text, *end;
    int ok = 1;
    for (int i = 0; i < 3 && ok; i++, at = end) {
        n[i] = strtoll(at, &end, 10);
        ok = end != at && n[i] >= 0;
    }
    if (req->res.status == 200 && (h < 0 || !ok || *at)) {
        log_warn("msg=\"a model worker answered a training session's %s without a usable usage report: the call is "
                 "not metered\" request_id=%s session=%s base=%s report=\"%s\"",
                 pf->call, r->request_id, http_path_param(r, "id"), pf->base, text);
    } else if (req->res.status == 200) { /* a failed call is not metered */
        const char *params[] = {http_tenant_id(r),
                                http_path_param(r, "id"),
                                pf->base,
                                pf->call,
                                r->request_id,
                                http_printf(r, "%lld", n[0]),
                                http_printf(r, "%lld", n[1]),
                                http_printf(r, "%lld", n[2]),
                                r->api_key_id[0] ? r->api_key_id : NULL};
        db_query(r, "session_usage_insert", 9, params, usage_written, NULL);
    }
    h2o_setup_next_prefilter(self, req, slot);
}

/* A call on a session the tenant holds: handed to its base's worker; `call` (forward_backward, sample) is
 * metered, NULL not. */
static void session_found(struct gw_req *r, const struct db_result *res, void *arg) {
    const char *call = arg;
    if (db_reply_unless_found(r, res, "training session", "id")) return;
    const char *base = PQgetvalue(res->res[0], 0, 0);
    if (!call) {
        model_workers_proxy(r, base, NULL, 0);
        return;
    }
    struct meter_prefilter *pf = (struct meter_prefilter *)h2o_add_prefilter(r->req, sizeof *pf);
    pf->super.on_setup_ostream = call_answered;
    pf->r = r;
    pf->call = call;
    pf->base = http_strdup(r, base);
    const char *const headers[][2] = {{"x-whet-usage", "1"}};
    model_workers_proxy(r, base, headers, 1);
}

static void session_call(struct gw_req *r, void *arg) {
    const char *params[] = {http_tenant_id(r), http_path_param(r, "id")};
    db_query(r, "training_sessions_get", 2, params, session_found, arg);
}

/* forward_backward, optim_step, sample: within the budget; optim_step is not metered. */
static void session_forward_backward(struct gw_req *r) { budget_gate(r, session_call, (void *)"forward_backward"); }
static void session_optim_step(struct gw_req *r) { budget_gate(r, session_call, NULL); }
static void session_sample(struct gw_req *r) { budget_gate(r, session_call, (void *)"sample"); }

/* A save: named by the gateway (a model of the tenant's, session_models) before the worker writes it. */
struct save {
    const char *base, *model, *prefix, *data_key;
};

struct save_prefilter {
    h2o_req_prefilter_t super;
    struct gw_req *r;
    const struct save *save;
};

static void save_forgotten(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct save *sv = arg;
    if (!res->ok)
        log_error("msg=\"a failed session save is still listed as a model\" model=%s request_id=%s error=\"%s\"",
                  sv->model, r->request_id, res->message);
}

/* The save's answer starts (the worker's, or the gateway's 503 when the base has no worker): a save that
 * failed is no model. */
static void save_answered(h2o_req_prefilter_t *self, h2o_req_t *req, h2o_ostream_t **slot) {
    const struct save_prefilter *pf = (const struct save_prefilter *)self;
    if (req->res.status != 200) {
        const char *params[] = {http_tenant_id(pf->r), pf->save->model};
        db_query(pf->r, "session_models_forget", 2, params, save_forgotten, (void *)pf->save);
    }
    h2o_setup_next_prefilter(self, req, slot);
}

static void save_recorded(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct save *sv = arg;
    if (db_reply_failed(r, res)) return;
    struct save_prefilter *pf = (struct save_prefilter *)h2o_add_prefilter(r->req, sizeof *pf);
    pf->super.on_setup_ostream = save_answered;
    pf->r = r;
    pf->save = sv;
    const char *const headers[][2] = {
        {"x-whet-save-prefix", sv->prefix}, {"x-whet-save-model", sv->model}, {"x-whet-data-key", sv->data_key}};
    model_workers_proxy(r, sv->base, headers, sv->data_key ? 3 : 2);
}

/* A save writes the tenant's data: sealed with its key. */
static void save_keyed(struct gw_req *r, const char *data_key, void *arg) {
    struct save *sv = arg;
    char id[32];
    whet_random_id("save-", 12, id);
    const char *session = http_path_param(r, "id");
    sv->data_key = data_key;
    sv->model = http_printf(r, "ft:%s:%s:%s:%s", sv->base, r->tenant_name, session, id);
    sv->prefix = http_printf(r, "sessions/%s/%s", session, id);
    const char *params[] = {sv->model, http_tenant_id(r), session, sv->base, sv->prefix};
    db_query(r, "session_models_insert", 5, params, save_recorded, sv);
}

static void save_found(struct gw_req *r, const struct db_result *res, void *arg) {
    (void)arg;
    if (db_reply_unless_found(r, res, "training session", "id")) return;
    struct save *sv = http_alloc(r, sizeof *sv);
    sv->base = http_strdup(r, PQgetvalue(res->res[0], 0, 0));
    inference_data_key(r, save_keyed, sv);
}

static void session_save(struct gw_req *r) {
    const char *params[] = {http_tenant_id(r), http_path_param(r, "id")};
    db_query(r, "training_sessions_get", 2, params, save_found, NULL);
}

/* DELETE marks the row first: from then on the session is the tenant's no more, whatever the worker says. */
static void session_delete(struct gw_req *r) {
    const char *params[] = {http_tenant_id(r), http_path_param(r, "id")};
    db_query(r, "training_sessions_delete", 2, params, session_found, NULL);
}

static void tokenize_resolved(struct gw_req *r, const char *model, const char *base, const char *prefix) {
    model_workers_proxy(r, base, NULL, 0); /* a fine-tune has its base's tokenizer */
}

static void tokenize(struct gw_req *r) {
    json_t *body = http_body_json(r);
    if (!body) return;
    static const char *const keys[] = {"model", "text", "messages", NULL};
    if (http_body_keys_known(r, body, keys)) {
        json_decref(body);
        return;
    }
    const char *model = json_string_value(json_object_get(body, "model"));
    if (!model || !*model) {
        json_decref(body);
        http_reply_error(r, 400, "model", "invalid_value", "model: expected the name of a model");
        return;
    }
    inference_resolve(r, model, tokenize_resolved);
    json_decref(body);
}

void training_sessions_routes(struct http_router *rt) {
    model_workers_read();
    db_prepare("training_sessions_base", "SELECT id FROM base_models WHERE id = $1");
    db_prepare("training_sessions_insert",
               "INSERT INTO training_sessions (id, tenant_id, base_model, lora, init_checkpoint)"
               " VALUES ($1, $2, $3, $4::jsonb, $5)");
    db_prepare("training_sessions_get", "SELECT base_model FROM training_sessions"
                                        " WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL");
    db_prepare("session_models_insert",
               "INSERT INTO session_models (model, tenant_id, session_id, base_model, object_prefix)"
               " VALUES ($1, $2, $3, $4, $5)");
    db_prepare("session_usage_insert",
               "INSERT INTO session_usage (tenant_id, session_id, base_model, call, request_id, train_tokens,"
               " prefill_tokens, sample_tokens, api_key_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)");
    db_prepare("session_models_forget", "DELETE FROM session_models WHERE tenant_id = $1 AND model = $2");
    db_prepare("training_sessions_delete",
               "UPDATE training_sessions SET deleted_at = whet_now()"
               " WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL RETURNING base_model");
    http_route(rt, "POST", "/v1/training_sessions", create, HTTP_ROUTE_TENANT, "training_sessions.create");
    http_route(rt, "POST", "/v1/training_sessions/{id}/forward_backward", session_forward_backward, HTTP_ROUTE_TENANT,
               "training_sessions.forward_backward");
    http_route(rt, "POST", "/v1/training_sessions/{id}/optim_step", session_optim_step, HTTP_ROUTE_TENANT,
               "training_sessions.optim_step");
    http_route(rt, "POST", "/v1/training_sessions/{id}/sample", session_sample, HTTP_ROUTE_TENANT,
               "training_sessions.sample");
    http_route(rt, "POST", "/v1/training_sessions/{id}/save", session_save, HTTP_ROUTE_TENANT,
               "training_sessions.save");
    http_route(rt, "DELETE", "/v1/training_sessions/{id}", session_delete, HTTP_ROUTE_TENANT,
               "training_sessions.delete");
    http_route(rt, "POST", "/v1/tokenize", tokenize, HTTP_ROUTE_TENANT, "tokenize");
}
