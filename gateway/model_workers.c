/* model_workers.c - the model workers' table and the hand-over of a request to one (see model_workers.h). */
#include "model_workers.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

#define MAX_WORKERS 64

static struct worker {
    char model[128], host[256];
    uint16_t port;
} workers[MAX_WORKERS];
static int n_workers;

void model_workers_read(void) {
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

int model_workers_has(const char *base) { return worker_for(base) != NULL; }

void model_workers_proxy(struct gw_req *r, const char *base, const char *const (*headers)[2], int n) {
    const struct worker *w = worker_for(base);
    if (!w) {
        http_reply_unavailable(r, 5, http_printf(r, "the model worker of %s", base));
        return;
    }
    h2o_req_t *req = r->req;
    for (size_t i = req->headers.size; i-- > 0;) {
        h2o_iovec_t name = *req->headers.entries[i].name;
        if (h2o_lcstris(name.base, name.len < 7 ? name.len : 7, H2O_STRLIT("x-whet-")) ||
            h2o_lcstris(name.base, name.len, H2O_STRLIT("authorization")))
            h2o_delete_header(&req->headers, (ssize_t)i);
    }
    for (int i = 0; i < n; i++)
        h2o_add_header_by_str(&req->pool, &req->headers, headers[i][0], strlen(headers[i][0]), 0, NULL,
                              h2o_strdup(&req->pool, headers[i][1], SIZE_MAX).base, strlen(headers[i][1]));
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
