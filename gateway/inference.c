/* inference.c - OpenAI's chat completions and completions for the tenant's models, answered by model
 * workers (`whet serve`).
 *
 * The gateway authenticates the tenant and resolves `model`: a catalog base model, one of the tenant's fine-tuned
 * models (`ft:…`, the final adapter of a succeeded job, or a training session's save) or one of its checkpoints
 * (`ft:…:ckpt-step-N`); not one the tenant deleted (models.h). Another tenant's model is a 404 like one that
 * never was. A tenant (or API key) whose month's spend reached its monthly limit is a 429 insufficient_quota
 * first (budget_gate). The request then goes to the worker that holds the base model, unchanged but for its
 * headers: the adapter's object-store prefix in x-whet-adapter (the worker fetches it once), with encryption at
 * rest the tenant's data key wrapped under the operator key in x-whet-data-key (the worker holds the operator
 * keyring and unwraps it: the data key never crosses the network in the clear), x-whet-usage (the worker reports
 * the tokens it counted), no Authorization (a worker is reachable by the gateway alone) and no x-whet-* header
 * the client sent. h2o's own reverse proxy streams the answer back as it comes (server-sent events included) and
 * the client going away closes the worker's connection, which cancels the generation.
 *
 * Workers (model_workers.h): the static WHET_SERVE_WORKERS="BASE=HOST:PORT[,…]", else the ready workers
 * the scheduler placed, whose lookup records the demand that scales the base from zero.
 *
 * Cold start, for WHET_SERVE_COLD_START_MS (default 5000), then a 503 with retry-after: a base with no
 * ready worker is looked up again every 100 ms (the loop's hundred_ms_timeout) while the scheduler
 * starts one; a static worker not reached yet (or whose last answer was the proxy's 502, or cut short)
 * is connected to, again every 100 ms while it refuses (a worker listens once its model is loaded). A
 * worker found up (a placed one is ready once it listens) is not waited for: if it died since, the
 * request is a 503 with retry-after: 1 instead of the proxy's 502 (answer_unreached: a placed worker
 * that refused the connection is marked unreachable first, so the client's retry goes to another ready
 * worker or waits for a new one; a static one is waited for again), or a stream it cuts short ends with
 * an error event (below).
 *
 * Metering: the worker reports each answer's prompt and completion tokens, the numbers of the answer's own `usage`
 * (x-whet-usage, below); the gateway removes the report from what the client sees and writes one inference_usage
 * row per answer (migration 0015), with the API key that asked (0024), which /v1/usage and the cost lines
 * (/v1/costs, budgets, an API key's spend, the FOCUS export) read. An answer the client left before its end (the
 * worker cancels it) or that failed is not metered. */
#include "inference.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "budgets.h"
#include "buf.h"
#include "db.h"
#include "env.h"
#include "files_common.h"
#include "log.h"
#include "model_workers.h"
#include "server.h"

/* Whether static worker i was reached since its last failure (every loop's view): one connect proves a worker
 * up; a 502 from the proxy (it could not reach it) or an answer cut short makes the next request wait
 * for it again. */
static atomic_uchar worker_up[MODEL_WORKERS_MAX];

/* ---- Metering ---------------------------------------------------------------------------------- */

/* One answer on its way from a worker (in the request's pool). */
struct answer {
    struct gw_req *r;
    const char *model, *base;
    const struct model_worker *worker; /* the route's copy */
    struct whet_buf held, out; /* a stream's bytes not passed on yet (a partial event); what was passed last */
    int ended;                 /* the stream's last event came: [DONE], or the worker's error */
    int metered;               /* the worker's report came */
};

struct answer_prefilter {
    h2o_req_prefilter_t super;
    struct answer *a;
};

struct answer_ostream {
    h2o_ostream_t super;
    struct answer *a;
};

static void usage_written(struct gw_req *r, const struct db_result *res, void *arg) {
    (void)arg;
    if (!res->ok)
        log_error("msg=\"inference usage not recorded\" request_id=%s error=\"%s\"", r->request_id, res->message);
}

/* The worker's report, "PROMPT_TOKENS COMPLETION_TOKENS", becomes a usage row. */
static void meter(struct answer *a, const char *report, size_t len) {
    char text[64], *mid, *end;
    snprintf(text, sizeof text, "%.*s", (int)(len < sizeof text - 1 ? len : sizeof text - 1), report);
    long long prompt = strtoll(text, &mid, 10), completion = strtoll(mid, &end, 10);
    if (mid == text || end == mid || *end || prompt < 0 || completion < 0) {
        log_error("msg=\"a model worker's usage report is malformed: the answer is not metered\" request_id=%s "
                  "report=\"%s\"",
                  a->r->request_id, text);
        return;
    }
    const char *p[] = {http_tenant_id(a->r),
                       a->model,
                       a->base,
                       a->r->request_id,
                       http_printf(a->r, "%lld", prompt),
                       http_printf(a->r, "%lld", completion),
                       a->r->api_key_id[0] ? a->r->api_key_id : NULL};
    db_query(a->r, "inference_usage_insert", 7, p, usage_written, NULL);
    a->metered = 1;
}

/* An answer the worker did not report (a worker older than the gateway?) is not metered: say so. */
static void unreported(const struct answer *a) {
    log_warn("msg=\"a model worker answered without a usage report: the answer is not metered\" request_id=%s "
             "model=%s worker=%s:%u",
             a->r->request_id, a->model, a->worker->host, (unsigned)a->worker->port);
}

/* A stream's events pass on whole; the report (a comment event, ": x-whet-usage P C") is taken out. A
 * stream that stops before its last event lost its worker (h2o's proxy takes a connection closed
 * between two chunks for the end of the body): it gets an error event, which the SDKs raise. */
#define USAGE_EVENT ": x-whet-usage "
#define STARTS(p, len, s) ((len) >= strlen(s) && !memcmp((p), (s), strlen(s)))

static void stream_do_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t n, h2o_send_state_t state) {
    struct answer *a = ((struct answer_ostream *)self)->a;
    for (size_t i = 0; i < n; i++) whet_buf_append(&a->held, bufs[i].base, bufs[i].len);
    size_t whole = a->held.len; /* the end of the last whole event; all of it once the stream ends */
    if (h2o_send_state_is_in_progress(state)) {
        while (whole >= 2 && memcmp(a->held.data + whole - 2, "\n\n", 2)) whole--;
        if (whole < 2) whole = 0;
    }
    a->out.len = 0;
    for (size_t at = 0; at < whole;) {
        const char *ev = a->held.data + at, *sep = memmem(ev, whole - at, "\n\n", 2);
        size_t len = sep ? (size_t)(sep - ev) + 2 : whole - at;
        at += len;
        if (STARTS(ev, len, USAGE_EVENT)) {
            meter(a, ev + strlen(USAGE_EVENT), len - strlen(USAGE_EVENT) - (sep ? 2 : 0));
            continue;
        }
        if (STARTS(ev, len, "data: [DONE]") && !a->metered) unreported(a);
        if (STARTS(ev, len, "data: [DONE]") || STARTS(ev, len, "data: {\"error\"")) a->ended = 1;
        whet_buf_append(&a->out, ev, len);
    }
    memmove(a->held.data, a->held.data + whole, a->held.len - whole);
    a->held.len -= whole;
    if (!h2o_send_state_is_in_progress(state) && !a->ended) {
        if (a->worker->slot >= 0) worker_up[a->worker->slot] = 0;
        json_t *error = json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message",
                                  http_printf(a->r,
                                              "the model worker of %s stopped before the answer was complete "
                                              "(request %s); retry the request",
                                              a->base, a->r->request_id),
                                  "type", "server_error", "param", "code", "worker_lost");
        char *text = json_dumps(error, JSON_COMPACT);
        json_decref(error);
        whet_buf_printf(&a->out, "data: %s\n\n", text);
        free(text);
    }
    h2o_iovec_t out = h2o_iovec_init(a->out.data, a->out.len);
    h2o_ostream_send_next(self, req, &out, out.len ? 1 : 0, state);
}

/* The proxy's 502 because the worker ended (model_workers_reach): it died before its executor reported it (its
 * row still ready), or a static worker stopped. Answered 503 with retry-after: 1 instead, which the SDKs retry;
 * a placed worker that refused the connection is marked unreachable before that answer goes, so that the retry
 * goes to another ready worker of the base or waits for a new one's cold start. One that dropped the connection
 * may have run the request: not marked on a guess (the retry finds it refusing). */
static h2o_ostream_t **answer_unreached(struct answer *a, enum model_worker_reach reach, h2o_iovec_t why,
                                        h2o_req_t *req, h2o_ostream_t **slot) {
    const struct model_worker *w = a->worker;
    log_warn("msg=\"a model worker could not be reached: the request is answered 503 to be retried\" model=%s "
             "worker=%s address=%s:%u cause=\"%.*s\" request_id=%s",
             a->model, w->id[0] ? w->id : "(static)", w->host, (unsigned)w->port, (int)why.len, why.base,
             a->r->request_id);
    const char *message =
        reach == MODEL_WORKER_DROPPED
            ? http_printf(a->r, "the model worker of %s ended before answering (%.*s); retry in 1 s", a->base,
                          (int)why.len, why.base)
        : w->id[0] ? http_printf(a->r,
                                 "the model worker of %s is gone and is being replaced: the request did not reach "
                                 "it; retry in 1 s",
                                 a->base)
                   : http_printf(a->r,
                                 "the model worker of %s refused the connection: the request did not reach it; "
                                 "retry in 1 s",
                                 a->base);
    slot = model_workers_answer_unavailable(req, slot, message);
    if (reach == MODEL_WORKER_REFUSED) slot = model_workers_mark_unreachable(a->r, w, req, slot);
    return slot;
}

/* The worker's answer starts: a whole one carries its report in a header, a stream at its end. */
static void answer_setup(h2o_req_prefilter_t *self, h2o_req_t *req, h2o_ostream_t **slot) {
    struct answer *a = ((struct answer_prefilter *)self)->a;
    if (req->res.status == 502 && a->worker->slot >= 0) worker_up[a->worker->slot] = 0; /* the proxy could not reach it */
    h2o_iovec_t why = {NULL, 0};
    enum model_worker_reach reach = model_workers_reach(req, &why);
    if (reach != MODEL_WORKER_ANSWERED) {
        h2o_setup_next_prefilter(self, req, answer_unreached(a, reach, why, req, slot));
        return;
    }
    ssize_t h = h2o_find_header_by_str(&req->res.headers, H2O_STRLIT("x-whet-usage"), -1);
    if (h >= 0) {
        meter(a, req->res.headers.entries[h].value.base, req->res.headers.entries[h].value.len);
        h2o_delete_header(&req->res.headers, h);
    }
    ssize_t ct = h2o_find_header(&req->res.headers, H2O_TOKEN_CONTENT_TYPE, -1);
    if (req->res.status == 200 && ct >= 0 &&
        h2o_memis(req->res.headers.entries[ct].value.base, req->res.headers.entries[ct].value.len,
                  H2O_STRLIT("text/event-stream"))) {
        struct answer_ostream *o = (struct answer_ostream *)h2o_add_ostream(req, sizeof *o, slot);
        req->res.content_length = SIZE_MAX; /* the report is taken out */
        o->super.do_send = stream_do_send;
        o->a = a;
        slot = &o->super.next;
    } else if (req->res.status == 200 && !a->metered) {
        unreported(a);
    }
    h2o_setup_next_prefilter(self, req, slot);
}

static void answer_dispose(void *p) {
    struct answer *a = p;
    whet_buf_free(&a->held);
    whet_buf_free(&a->out);
}

/* ---- Proxying ---------------------------------------------------------------------------------- */

/* A request on its way to a worker of `base` (with the adapter stored at `prefix`, NULL for the base
 * alone, and sealed with the tenant's `data_key`, NULL when not), for the tenant's `model`; in the
 * request's pool. */
struct route {
    struct gw_req *r;
    const char *model, *base, *prefix, *data_key;
    struct model_worker worker; /* the one found */
    uint64_t deadline;          /* the loop's clock (ms) when a cold start is given up */
};

/* A probe of a route's static worker: the request held (its pool with the route may go when the client
 * leaves). */
struct waiting {
    struct gw_req *r;
    struct route *rt;
};

static void proxy(struct route *rt) {
    struct gw_req *r = rt->r;
    h2o_req_t *req = r->req;
    struct answer *a = h2o_mem_alloc_shared(&req->pool, sizeof *a, answer_dispose);
    *a = (struct answer){.r = r, .model = rt->model, .base = rt->base, .worker = &rt->worker};
    struct answer_prefilter *pf = (struct answer_prefilter *)h2o_add_prefilter(req, sizeof *pf);
    pf->super.on_setup_ostream = answer_setup;
    pf->a = a;
    /* the usage report the metering above takes out of the answer, the adapter (none: the base) and the key
     * it is sealed with */
    const char *const headers[3][2] = {
        {"x-whet-usage", "1"}, {"x-whet-adapter", rt->prefix}, {"x-whet-data-key", rt->data_key}};
    model_workers_hand_over(r, &rt->worker, headers, !rt->prefix ? 1 : rt->data_key ? 3 : 2);
}

/* Tries `again` (on the route) in 100 ms, unless the cold start is over: then a 503. */
static void retry_later(struct route *rt, void (*again)(void *rt)) {
    model_workers_retry(rt->r, rt->deadline, rt->base, again, rt);
}

static void probe(void *arg);

static void probe_connected(h2o_socket_t *sock, const char *err) {
    struct waiting *w = sock->data;
    struct gw_req *r = w->r;
    h2o_socket_close(sock);
    if (r->req && err) {
        retry_later(w->rt, probe);
    } else if (r->req) {
        worker_up[w->rt->worker.slot] = 1;
        proxy(w->rt);
    }
    free(w);
    gw_req_release(r);
}

/* A static worker not known up is connected to first. */
static void probe(void *arg) {
    struct route *rt = arg;
    struct waiting *w = xcalloc(1, sizeof *w);
    *w = (struct waiting){.r = rt->r, .rt = rt};
    gw_req_retain(rt->r);
    h2o_socket_t *sock = h2o_socket_connect(rt->r->thread->ctx.loop, (struct sockaddr *)&rt->worker.addr,
                                            rt->worker.addr_len, probe_connected);
    if (sock) {
        sock->data = w;
        return;
    }
    free(w);
    gw_req_release(rt->r);
    retry_later(rt, probe);
}

/* A worker of the base is up (model_workers_await waited for its cold start). */
static void worker_found(struct gw_req *r, const struct model_worker *w, void *arg) {
    struct route *rt = arg;
    (void)r;
    rt->worker = *w;
    if (w->slot >= 0 && !worker_up[w->slot] && w->addr_len) probe(rt);
    else proxy(rt);
}

static void route_to_worker(struct gw_req *r, const char *model, const char *base, const char *prefix,
                            const char *data_key) {
    struct route *rt = http_alloc(r, sizeof *rt);
    *rt = (struct route){.r = r,
                         .model = model,
                         .base = http_strdup(r, base),
                         .prefix = prefix ? http_strdup(r, prefix) : NULL,
                         .data_key = data_key,
                         .deadline = model_workers_cold_start_deadline(r)};
    model_workers_await(r, rt->base, worker_found, rt);
}

/* The tenant's data key found: the lookup's result, and where it goes on (the lookup is freed here: the
 * request's pool may be gone by the time a worker thread is done). */
struct keying {
    char *tenant_id;
    const char *data_key;
    int rc;
    struct whet_err err;
    inference_keyed_fn next;
    void *arg;
};

static void keying_work(void *arg) {
    struct keying *k = arg;
    k->rc = files_tenant_wrapped_key(k->tenant_id, &k->data_key, &k->err);
}

static void keying_done(struct gw_req *r, void *arg) {
    struct keying *k = arg;
    if (!http_gone(r)) {
        if (k->rc)
            http_reply_error_hint(r, 503, NULL, "service_unavailable", "retry later",
                                  "your data key (encryption at rest) is unavailable: %s", k->err.msg);
        else k->next(r, k->data_key, k->arg);
    }
    free(k->tenant_id);
    free(k);
}

void inference_data_key(struct gw_req *r, inference_keyed_fn next, void *arg) {
    if (!files_encryption_on()) {
        next(r, NULL, arg);
        return;
    }
    struct keying *k = xcalloc(1, sizeof *k);
    *k = (struct keying){.tenant_id = xstrdup(http_tenant_id(r)), .next = next, .arg = arg};
    if (http_run_blocking_or_busy(r, keying_work, keying_done, k)) {
        free(k->tenant_id);
        free(k);
    }
}

/* A fine-tuned model's adapter is the tenant's data: with its data key when sealed. */
struct adapter {
    const char *model, *base, *prefix;
};

static void adapter_keyed(struct gw_req *r, const char *data_key, void *arg) {
    const struct adapter *a = arg;
    route_to_worker(r, a->model, a->base, a->prefix, data_key);
}

static void model_resolved(struct gw_req *r, const char *model, const char *base, const char *prefix) {
    if (!prefix) {
        route_to_worker(r, model, base, NULL, NULL);
        return;
    }
    struct adapter *a = http_alloc(r, sizeof *a);
    *a = (struct adapter){model, http_strdup(r, base), http_strdup(r, prefix)};
    inference_data_key(r, adapter_keyed, a);
}

static void budget_allows(struct gw_req *r, void *arg) { inference_resolve(r, arg, model_resolved); }

struct resolving {
    const char *model;
    inference_resolved_fn done;
};

static void resolved(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct resolving *q = arg;
    if (db_reply_failed(r, res)) return;
    if (PQntuples(res->res[0]) == 0) {
        http_reply_error(r, 404, "model", "model_not_found",
                         "The model `%s` does not exist or you do not have access to it.", q->model);
        return;
    }
    const PGresult *row = res->res[0];
    q->done(r, q->model, PQgetvalue(row, 0, 0), PQgetisnull(row, 0, 1) ? NULL : PQgetvalue(row, 0, 1));
}

void inference_resolve(struct gw_req *r, const char *model, inference_resolved_fn done) {
    struct resolving *q = http_alloc(r, sizeof *q);
    *q = (struct resolving){http_strdup(r, model), done};
    const char *params[] = {http_tenant_id(r), q->model};
    db_query(r, "inference_model", 2, params, resolved, q);
}

static void completions(struct gw_req *r) {
    json_t *body = http_body_json(r);
    if (!body) return;
    const char *model = json_string_value(json_object_get(body, "model"));
    if (!model || !*model) {
        json_decref(body);
        http_reply_error(r, 400, "model", "invalid_value", "model: expected the name of a model");
        return;
    }
    const char *name = http_strdup(r, model);
    json_decref(body);
    budget_gate(r, budget_allows, (void *)name);
}

void inference_routes(struct http_router *rt) {
    model_workers_read();
    /* base, adapter prefix: a catalog model, the tenant's fine-tuned model, one of its checkpoints, or a
     * training session's save (migration 0024) */
    db_prepare("inference_model",
               "SELECT id, NULL::text FROM base_models WHERE id = $2"
               " UNION ALL SELECT model, final_object_prefix FROM jobs WHERE tenant_id = $1 AND fine_tuned_model = $2"
               " AND status = 'succeeded' AND final_object_prefix IS NOT NULL AND model_deleted_at IS NULL"
               " UNION ALL SELECT j.model, c.object_prefix FROM checkpoints c JOIN jobs j ON j.id = c.job_id"
               " WHERE c.tenant_id = $1 AND c.fine_tuned_model_checkpoint = $2 AND j.model_deleted_at IS NULL"
               " UNION ALL SELECT base_model, object_prefix FROM session_models WHERE tenant_id = $1 AND model = $2"
               " AND deleted_at IS NULL LIMIT 1");
    db_prepare(
        "inference_usage_insert",
        "INSERT INTO inference_usage (tenant_id, model, base_model, request_id, prompt_tokens, completion_tokens, "
        "api_key_id) VALUES ($1, $2, $3, $4, $5, $6, $7)");
    http_route(rt, "POST", "/v1/chat/completions", completions, HTTP_ROUTE_TENANT, "chat.completions.create");
    http_route(rt, "POST", "/v1/completions", completions, HTTP_ROUTE_TENANT, "completions.create");
}
