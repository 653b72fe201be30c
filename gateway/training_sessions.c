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
 * rest every call carries the tenant's data key wrapped under the operator key (x-whet-data-key, inference.h):
 * the worker reads the initial adapter and writes the save and the session's state sealed. A save is one of
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
 * the demand that starts one), then is a 503 with retry-after.
 * Sessions are pinned and durable (migration 0030): a create goes to a ready worker of the base, recorded in the
 * session's row, and every call goes to that worker, so its gradients and optimizer state are where its calls
 * are. Each call carries where the session keeps its state (x-whet-session-state: sessions/ID/state): the worker
 * writes it after the create and each optim_step (adapter, AdamW moments, step count), before answering. When
 * the pinned worker is gone (not ready: stopped, lost, killed), the call waits for a ready worker as a create
 * does, re-pins the session to it (unless a concurrent call of the session did first: then to that one) and goes
 * there; the worker restores the session from its state: where its last optim_step left it, the gradients of
 * forward_backward calls since then lost (so a forward_backward after the move proceeds from the last step).
 * A call in the moment between a worker's death and its executor's report (its row still ready) goes to it and
 * is a 503 with retry-after: 1 (the worker is being replaced); the worker refused its connection, so the
 * gateway marks it unreachable (migration 0031) and the client's retry goes to a ready worker at once (a worker
 * that ended mid-call is not retried by the gateway: the call may have run; the retry finds it refusing).
 * Each call records when it came (last_call_at): a session without a call for WHET_SESSION_IDLE_S (default
 * 1800, whet serve's --session-idle) has expired and its calls are 404s, whichever worker still has it; a
 * worker that frees an idle session before (its own --session-idle) restores it on the next call. The
 * scheduler keeps the workers of live sessions (serving.h). A DELETE (of an expired session too) goes to the
 * pinned worker, which frees the session and removes its state; with that worker gone the gateway answers it
 * alone. The state of a session that expired, or was deleted while its worker was gone, is removed by the
 * gateway's sweep (session_sweep.h); a save stays. */
#include "training_sessions.h"

#include <stdlib.h>
#include <string.h>

#include "budgets.h"
#include "crypto.h"
#include "db.h"
#include "env.h"
#include "inference.h"
#include "log.h"
#include "model_workers.h"
#include "server.h"

/* How long a session may be idle before it expires (WHET_SESSION_IDLE_S, seconds; read at start). */
#define SESSION_IDLE_S_DEFAULT 1800
static int idle_seconds = SESSION_IDLE_S_DEFAULT;
static char session_idle_s[16];

int training_sessions_idle_s(void) { return idle_seconds; }

/* Where a session keeps its state in the object store (serve_session_http.h). */
static const char *state_prefix(struct gw_req *r, const char *session) {
    return http_printf(r, "sessions/%s/state", session);
}

/* A DELETE's answer (the worker's own is the same). */
static json_t *deleted_json(const char *session) {
    return json_pack("{s:s, s:s, s:b}", "id", session, "object", "training_session.deleted", "deleted", 1);
}

/* ---- A worker that could not be reached: it is being replaced */

struct unreached_prefilter {
    h2o_req_prefilter_t super;
    struct gw_req *r;
    const char *session;        /* NULL: a create's */
    struct model_worker worker; /* the worker the call went to */
    int deleting;
};

/* The call's answer starts. When it is h2o's proxy's own 502 because the worker refused the connection or
 * dropped it before answering (model_workers_reach), the worker ended: a DELETE is answered as done (the sweep
 * removes the state, session_sweep.h), any other call 503 with retry-after, which the SDKs retry. A refused
 * connection reached nothing: the worker is gone, and a placed one is marked so before the answer goes
 * (model_workers_mark_unreachable), so that the client's retry moves the session to a ready worker at once.
 * One that ended mid-call may have run the call, so the gateway does not repeat it (nor mark the worker on a
 * guess); the retry finds it refusing. Another 502 (a malformed answer) stays the proxy's. */
static void unreached_setup(h2o_req_prefilter_t *self, h2o_req_t *req, h2o_ostream_t **slot) {
    struct unreached_prefilter *pf = (struct unreached_prefilter *)self;
    struct gw_req *r = pf->r;
    h2o_iovec_t why = {NULL, 0};
    enum model_worker_reach reach = model_workers_reach(req, &why);
    if (reach == MODEL_WORKER_ANSWERED) {
        h2o_setup_next_prefilter(self, req, slot);
        return;
    }
    const char *what = pf->session ? http_printf(r, "training session %s", pf->session) : "the new training session";
    log_warn("msg=\"a training session's model worker could not be reached: it is being replaced\" session=%s "
             "worker=%s address=%s:%u cause=\"%.*s\" request_id=%s",
             pf->session ? pf->session : "(create)", pf->worker.id[0] ? pf->worker.id : "(static)", pf->worker.host,
             (unsigned)pf->worker.port, (int)why.len, why.base, r->request_id);
    if (pf->deleting) {
        req->res.status = 200, req->res.reason = "OK";
        json_t *body = deleted_json(pf->session);
        char *text = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        slot = gw_answer_replace_json(req, slot, text);
        free(text);
    } else {
        slot = model_workers_answer_unavailable(
            req, slot,
            reach == MODEL_WORKER_REFUSED
                ? http_printf(r,
                              "the model worker of %s is gone and is being replaced: the call did not reach it; "
                              "retry in 1 s",
                              what)
                : http_printf(r,
                              "the model worker of %s ended before answering (%.*s) and is being replaced; retry "
                              "in 1 s (gradients of forward_backward calls since the last optim_step are lost "
                              "with it)",
                              what, (int)why.len, why.base));
    }
    if (reach == MODEL_WORKER_REFUSED) slot = model_workers_mark_unreachable(r, &pf->worker, req, slot);
    h2o_setup_next_prefilter(self, req, slot);
}

/* Hands the call (of `session`, NULL for a create) to worker w, watching for the worker's end. */
static void to_worker_watched(struct gw_req *r, const struct model_worker *w, const char *session, int deleting,
                              const char *const (*headers)[2], int n) {
    struct unreached_prefilter *pf = (struct unreached_prefilter *)h2o_add_prefilter(r->req, sizeof *pf);
    pf->super.on_setup_ostream = unreached_setup;
    pf->r = r;
    pf->session = session;
    pf->worker = *w;
    pf->deleting = deleting;
    model_workers_hand_over(r, w, headers, n);
}

/* What a create has decided so far, from the request's pool. */
struct create {
    const char *base, *init, *lora, *id, *data_key;
    struct model_worker worker; /* the ready worker the session goes to, pinned */
};

static void created(struct gw_req *r, const struct db_result *res, void *arg) {
    struct create *c = arg;
    if (db_reply_failed(r, res)) return;
    const char *headers[4][2] = {{"x-whet-session", c->id}, {"x-whet-session-state", state_prefix(r, c->id)}};
    int n = 2;
    if (c->data_key) headers[n][0] = "x-whet-data-key", headers[n++][1] = c->data_key;
    if (c->init) headers[n][0] = "x-whet-adapter", headers[n++][1] = c->init;
    to_worker_watched(r, &c->worker, NULL, 0, (const char *const (*)[2])headers, n);
}

/* The session's state, and its initial adapter, are the tenant's data: sealed with its data key. */
static void create_keyed(struct gw_req *r, const char *data_key, void *arg) {
    struct create *c = arg;
    char id[32];
    whet_random_id("ts-", 24, id);
    c->id = http_strdup(r, id);
    c->data_key = data_key;
    const struct model_worker *w = &c->worker;
    const char *params[] = {c->id, http_tenant_id(r), c->base, c->lora, c->init, w->id[0] ? w->id : NULL,
                            http_printf(r, "%s:%u", w->host, (unsigned)w->port)};
    db_query(r, "training_sessions_insert", 7, params, created, c);
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
    inference_data_key(r, create_keyed, c);
}

/* The base has a ready worker (after its cold start, when it had none): the session's. */
static void base_served(struct gw_req *r, const struct model_worker *w, void *arg) {
    struct create *c = arg;
    c->worker = *w;
    if (!c->init) {
        inference_data_key(r, create_keyed, c);
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

/* ---- A call on a session: to the worker it is pinned to, or, that one gone, to a ready one that restores it */

#define CALL_HEADERS 6
#define REPIN_TRIES 3

struct call {
    const char *base, *worker_id, *address; /* its pinned worker (worker_id NULL: a static one) */
    int held;                                /* that worker is ready (placed) and not found unreachable */
    int deleting;                            /* a DELETE: to the pinned worker, which removes the state */
    int tries;                               /* re-pins lost to a concurrent call of the session */
    const char *headers[CALL_HEADERS][2];
    int n;
    const char *meter; /* forward_backward, sample: metered (a session_usage row); NULL: not */
    /* the call's own next step once the data key is known (a save names its model); NULL: to the worker */
    void (*keyed)(struct gw_req *r, struct call *c);
    struct model_worker moved_to; /* the ready worker it is being re-pinned to */
};

/* A call of the request's, zeroed, from its pool. */
static struct call *new_call(struct gw_req *r) {
    struct call *c = http_alloc(r, sizeof *c);
    memset(c, 0, sizeof *c);
    return c;
}

static void header(struct call *c, const char *name, const char *value) {
    c->headers[c->n][0] = name, c->headers[c->n++][1] = value;
}

static void hand_over(struct gw_req *r, struct call *c, const struct model_worker *w) {
    to_worker_watched(r, w, http_path_param(r, "id"), c->deleting, (const char *const (*)[2])c->headers, c->n);
}

static void session_call(struct gw_req *r, const struct db_result *res, void *arg);

static void repinned(struct gw_req *r, const struct db_result *res, void *arg) {
    struct call *c = arg;
    if (db_reply_failed(r, res)) return;
    if (PQntuples(res->res[0]) == 1) {
        hand_over(r, c, &c->moved_to);
        return;
    }
    /* another call of the session re-pinned it first: to the worker it chose */
    if (++c->tries == REPIN_TRIES) {
        http_reply_unavailable(r, 1, "the model worker of this training session (it is moving)");
        return;
    }
    const char *params[] = {http_tenant_id(r), http_path_param(r, "id"), session_idle_s};
    db_query(r, "training_sessions_call", 3, params, session_call, c);
}

/* A ready worker for a session whose worker is gone: it restores the session from its state (the call carries
 * x-whet-session-state); pinned to it unless another call of the session was first. */
static void worker_found(struct gw_req *r, const struct model_worker *w, void *arg) {
    struct call *c = arg;
    c->moved_to = *w;
    log_info("msg=\"training session moves to another model worker\" session=%s model=%s from=%s to=%s:%u "
             "request_id=%s",
             http_path_param(r, "id"), c->base, c->address ? c->address : "(none)", w->host, (unsigned)w->port,
             r->request_id);
    const char *params[] = {http_tenant_id(r), http_path_param(r, "id"), w->id[0] ? w->id : NULL,
                            http_printf(r, "%s:%u", w->host, (unsigned)w->port), c->address};
    db_query(r, "training_sessions_repin", 5, params, repinned, c);
}

/* The call's headers are complete: to its worker, or (gone) a ready one after a cold start as a create. */
static void to_worker(struct gw_req *r, struct call *c) {
    struct model_worker w;
    if (c->address && (c->held || !c->worker_id) && !model_workers_pinned(&w, c->base, c->worker_id, c->address))
        hand_over(r, c, &w);
    else model_workers_await(r, c->base, worker_found, c);
}

static void call_keyed(struct gw_req *r, const char *data_key, void *arg) {
    struct call *c = arg;
    header(c, "x-whet-session-state", state_prefix(r, http_path_param(r, "id")));
    if (data_key) header(c, "x-whet-data-key", data_key);
    if (c->keyed) c->keyed(r, c);
    else to_worker(r, c);
}

/* The session's row (training_sessions_call or _delete: base, worker id, worker address, worker ready) read
 * into c; 1 when the request was answered (no such session, or it expired). */
static int call_read(struct gw_req *r, const struct db_result *res, struct call *c) {
    if (db_reply_unless_found(r, res, "training session", "id")) return 1;
    const PGresult *row = res->res[0];
    c->base = http_strdup(r, PQgetvalue(row, 0, 0));
    c->worker_id = PQgetisnull(row, 0, 1) ? NULL : http_strdup(r, PQgetvalue(row, 0, 1));
    c->address = PQgetisnull(row, 0, 2) ? NULL : http_strdup(r, PQgetvalue(row, 0, 2));
    c->held = !strcmp(PQgetvalue(row, 0, 3), "t");
    return 0;
}

/* Found again after a lost re-pin (the headers are complete), or found the first time. */
static void session_call(struct gw_req *r, const struct db_result *res, void *arg) {
    struct call *c = arg;
    if (call_read(r, res, c)) return;
    if (c->tries) {
        to_worker(r, c);
        return;
    }
    if (c->meter) {
        struct meter_prefilter *pf = (struct meter_prefilter *)h2o_add_prefilter(r->req, sizeof *pf);
        pf->super.on_setup_ostream = call_answered;
        pf->r = r;
        pf->call = c->meter;
        pf->base = c->base;
        header(c, "x-whet-usage", "1");
    }
    inference_data_key(r, call_keyed, c); /* the state is the tenant's data: sealed with its key */
}

/* A call on a session the tenant holds, not expired (its last call now): c made by the caller. */
static void session_lookup(struct gw_req *r, struct call *c) {
    const char *params[] = {http_tenant_id(r), http_path_param(r, "id"), session_idle_s};
    db_query(r, "training_sessions_call", 3, params, session_call, c);
}

/* forward_backward, sample: metered; optim_step not (meter NULL). */
static void session_pass(struct gw_req *r, void *meter) {
    struct call *c = new_call(r);
    c->meter = meter;
    session_lookup(r, c);
}

/* forward_backward, optim_step, sample: within the budget; optim_step is not metered. */
static void session_forward_backward(struct gw_req *r) { budget_gate(r, session_pass, (void *)"forward_backward"); }
static void session_optim_step(struct gw_req *r) { budget_gate(r, session_pass, NULL); }
static void session_sample(struct gw_req *r) { budget_gate(r, session_pass, (void *)"sample"); }

/* A save: named by the gateway (a model of the tenant's, session_models) before the worker writes it. */
struct save {
    const char *model;
    struct call *call;
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
    struct save *sv = arg;
    if (db_reply_failed(r, res)) return;
    struct save_prefilter *pf = (struct save_prefilter *)h2o_add_prefilter(r->req, sizeof *pf);
    pf->super.on_setup_ostream = save_answered;
    pf->r = r;
    pf->save = sv;
    to_worker(r, sv->call);
}

/* A save writes the tenant's data: sealed with its key (the call's). */
static void save_keyed(struct gw_req *r, struct call *c) {
    struct save *sv = http_alloc(r, sizeof *sv);
    char id[32];
    whet_random_id("save-", 12, id);
    const char *session = http_path_param(r, "id");
    sv->call = c;
    sv->model = http_printf(r, "ft:%s:%s:%s:%s", c->base, r->tenant_name, session, id);
    const char *prefix = http_printf(r, "sessions/%s/%s", session, id);
    header(c, "x-whet-save-prefix", prefix);
    header(c, "x-whet-save-model", sv->model);
    const char *params[] = {sv->model, http_tenant_id(r), session, c->base, prefix};
    db_query(r, "session_models_insert", 5, params, save_recorded, sv);
}

static void session_save(struct gw_req *r) {
    struct call *c = new_call(r);
    c->keyed = save_keyed;
    session_lookup(r, c);
}

/* DELETE marks the row first (an expired session too): from then on the session is the tenant's no more,
 * whatever the worker says. Its worker frees it and removes its state; a worker gone is not waited for (nor
 * started): the sweep removes the state (session_sweep.h). */
static void deleted(struct gw_req *r, const struct db_result *res, void *arg) {
    struct call *c = arg;
    if (call_read(r, res, c)) return;
    struct model_worker w;
    if (!c->address || (c->worker_id && !c->held) || model_workers_pinned(&w, c->base, c->worker_id, c->address)) {
        http_reply_json(r, 200, deleted_json(http_path_param(r, "id")));
        return;
    }
    inference_data_key(r, call_keyed, c);
}

static void session_delete(struct gw_req *r) {
    struct call *c = new_call(r);
    c->deleting = 1;
    const char *params[] = {http_tenant_id(r), http_path_param(r, "id")};
    db_query(r, "training_sessions_delete", 2, params, deleted, c);
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
    const char *idle = whet_env("WHET_SESSION_IDLE_S", NULL);
    char *idle_end;
    long idle_s = idle ? strtol(idle, &idle_end, 10) : SESSION_IDLE_S_DEFAULT;
    if (idle && (*idle_end || idle_s < 1 || idle_s > 86400 * 30)) {
        log_warn("msg=\"WHET_SESSION_IDLE_S: expected seconds (1 to 2592000), using the default\" value=\"%s\" "
                 "default=%d",
                 idle, SESSION_IDLE_S_DEFAULT);
        idle_s = SESSION_IDLE_S_DEFAULT;
    }
    idle_seconds = (int)idle_s;
    snprintf(session_idle_s, sizeof session_idle_s, "%ld", idle_s);
    db_prepare("training_sessions_insert",
               "INSERT INTO training_sessions (id, tenant_id, base_model, lora, init_checkpoint, worker_id,"
               " worker_address) VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7)");
    /* a call: the session's last call now, unless it expired; its pinned worker and whether that is ready */
    db_prepare("training_sessions_call",
               "UPDATE training_sessions s SET last_call_at = extract(epoch FROM clock_timestamp())"
               " WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL"
               " AND last_call_at > extract(epoch FROM clock_timestamp()) - $3::int"
               " RETURNING base_model, worker_id, worker_address, EXISTS (SELECT 1 FROM model_workers w"
               "   WHERE w.id = s.worker_id AND w.address = s.worker_address AND w.state = 'ready'"
               "   AND w.unreachable_at IS NULL)");
    /* unless another call of the session re-pinned it since it was read */
    db_prepare("training_sessions_repin",
               "UPDATE training_sessions SET worker_id = $3, worker_address = $4"
               " WHERE tenant_id = $1 AND id = $2 AND worker_address IS NOT DISTINCT FROM $5 RETURNING id");
    db_prepare("session_models_insert",
               "INSERT INTO session_models (model, tenant_id, session_id, base_model, object_prefix)"
               " VALUES ($1, $2, $3, $4, $5)");
    db_prepare("session_usage_insert",
               "INSERT INTO session_usage (tenant_id, session_id, base_model, call, request_id, train_tokens,"
               " prefill_tokens, sample_tokens, api_key_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)");
    db_prepare("session_models_forget", "DELETE FROM session_models WHERE tenant_id = $1 AND model = $2");
    db_prepare("training_sessions_delete",
               "UPDATE training_sessions s SET deleted_at = whet_now()"
               " WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL RETURNING base_model, worker_id,"
               " worker_address, EXISTS (SELECT 1 FROM model_workers w"
               "   WHERE w.id = s.worker_id AND w.address = s.worker_address AND w.state = 'ready'"
               "   AND w.unreachable_at IS NULL)");
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
