/* inference.c - OpenAI's chat completions and completions for the tenant's models, answered by model
 * workers (`whet serve`).
 *
 * The gateway authenticates the tenant and resolves `model`: a catalog base model, one of the tenant's
 * fine-tuned models (`ft:…`, the final adapter of a succeeded job) or one of its checkpoints
 * (`ft:…:ckpt-step-N`); not one the tenant deleted (models.h). Another tenant's model is a 404 like one
 * that never was. The request then goes
 * to the worker that holds the base model, unchanged but for two headers: the adapter's object-store
 * prefix in x-whet-adapter (the worker fetches it once) and no Authorization (a worker is reachable by
 * the gateway alone). h2o's own reverse proxy streams the answer back as it comes (server-sent events
 * included) and the client going away closes the worker's connection, which cancels the generation.
 *
 * Workers: WHET_SERVE_WORKERS="BASE=HOST:PORT[,BASE=HOST:PORT…]", read at start (placement by the
 * scheduler and scaling from zero are to come). A base model without a worker is a 503 with
 * retry-after. */
#include "inference.h"

#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "log.h"

#define MAX_WORKERS 64

static struct worker {
    char model[128], host[256];
    uint16_t port;
} workers[MAX_WORKERS];
static int n_workers;

/* Parses WHET_SERVE_WORKERS; a malformed entry is logged and left out. */
static void read_workers(void) {
    const char *spec = getenv("WHET_SERVE_WORKERS");
    n_workers = 0;
    for (const char *p = spec; p && *p && n_workers < MAX_WORKERS;) {
        const char *end = strchr(p, ','), *eq = memchr(p, '=', end ? (size_t)(end - p) : strlen(p));
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = eq ? memrchr(eq, ':', len - (size_t)(eq - p)) : NULL;
        struct worker *w = &workers[n_workers];
        long port = colon ? strtol(colon + 1, NULL, 10) : 0;
        if (eq && colon && eq > p && colon > eq + 1 && port > 0 && port < 65536 && (size_t)(eq - p) < sizeof w->model &&
            (size_t)(colon - eq - 1) < sizeof w->host) {
            snprintf(w->model, sizeof w->model, "%.*s", (int)(eq - p), p);
            snprintf(w->host, sizeof w->host, "%.*s", (int)(colon - eq - 1), eq + 1);
            w->port = (uint16_t)port;
            n_workers++;
        } else {
            log_warn("msg=\"WHET_SERVE_WORKERS: entry left out\" entry=\"%.*s\" expected=BASE=HOST:PORT", (int)len, p);
        }
        p = end ? end + 1 : p + len;
    }
}

static const struct worker *worker_for(const char *base) {
    for (int i = 0; i < n_workers; i++)
        if (!strcmp(workers[i].model, base)) return &workers[i];
    return NULL;
}

/* The model is the base `base`, with the adapter stored at `prefix` (NULL: the base alone). */
static void proxy_to_worker(struct gw_req *r, const char *base, const char *prefix) {
    const struct worker *w = worker_for(base);
    if (!w) {
        http_reply_unavailable(r, 5, http_printf(r, "the model worker of %s", base));
        return;
    }
    h2o_req_t *req = r->req;
    ssize_t auth = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
    if (auth >= 0) h2o_delete_header(&req->headers, auth);
    if (prefix)
        h2o_add_header_by_str(&req->pool, &req->headers, H2O_STRLIT("x-whet-adapter"), 0, NULL,
                              h2o_strdup(&req->pool, prefix, SIZE_MAX).base, strlen(prefix));
    h2o_req_overrides_t *ov = h2o_mem_alloc_pool(&req->pool, sizeof *ov);
    memset(ov, 0, sizeof *ov);
    ov->client_ctx = &req->conn->ctx->proxy.client_ctx;
    ov->hostport.host = h2o_strdup(&req->pool, w->host, SIZE_MAX);
    ov->hostport.port = w->port;
    char *authority = http_printf(r, "%s:%u", w->host, (unsigned)w->port);
    r->status = 200; /* the worker answers from here on (the log line says so) */
    h2o_reprocess_request(req, req->method, &H2O_URL_SCHEME_HTTP, h2o_iovec_init(authority, strlen(authority)),
                          req->path, ov, 0);
}

static void resolved(struct gw_req *r, const struct db_result *res, void *arg) {
    const char *model = arg;
    if (db_reply_failed(r, res)) return;
    if (PQntuples(res->res[0]) == 0) {
        http_reply_error(r, 404, "model", "model_not_found",
                         "The model `%s` does not exist or you do not have access to it.", model);
        return;
    }
    const PGresult *row = res->res[0];
    proxy_to_worker(r, PQgetvalue(row, 0, 0), PQgetisnull(row, 0, 1) ? NULL : PQgetvalue(row, 0, 1));
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
    char *name = http_strdup(r, model);
    json_decref(body);
    const char *params[] = {http_tenant_id(r), name};
    db_query(r, "inference_model", 2, params, resolved, name);
}

void inference_routes(struct http_router *rt) {
    read_workers();
    /* base, adapter prefix: a catalog model, the tenant's fine-tuned model, or one of its checkpoints */
    db_prepare("inference_model",
               "SELECT id, NULL::text FROM base_models WHERE id = $2"
               " UNION ALL SELECT model, final_object_prefix FROM jobs WHERE tenant_id = $1 AND fine_tuned_model = $2"
               " AND status = 'succeeded' AND final_object_prefix IS NOT NULL AND model_deleted_at IS NULL"
               " UNION ALL SELECT j.model, c.object_prefix FROM checkpoints c JOIN jobs j ON j.id = c.job_id"
               " WHERE c.tenant_id = $1 AND c.fine_tuned_model_checkpoint = $2 AND j.model_deleted_at IS NULL LIMIT 1");
    http_route(rt, "POST", "/v1/chat/completions", completions, HTTP_ROUTE_TENANT, "chat.completions.create");
    http_route(rt, "POST", "/v1/completions", completions, HTTP_ROUTE_TENANT, "completions.create");
}
