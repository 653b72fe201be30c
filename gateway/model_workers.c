/* model_workers.c - the model workers' table and the hand-over of a request to one (see model_workers.h). */
#include "model_workers.h"

#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"

static struct model_worker workers[MODEL_WORKERS_MAX];
static int n_workers;

/* The address is resolved once, for inference.c's cold-start probes; h2o's proxy resolves on its own. */
static void resolve(struct model_worker *w) {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
    char port[8];
    snprintf(port, sizeof port, "%u", (unsigned)w->port);
    if (getaddrinfo(w->host, port, &hints, &res)) {
        log_warn("msg=\"WHET_SERVE_WORKERS: cannot resolve a worker: its requests go to it without waiting for a "
                 "cold start\" model=%s host=%s",
                 w->model, w->host);
        return;
    }
    memcpy(&w->addr, res->ai_addr, res->ai_addrlen);
    w->addr_len = res->ai_addrlen;
    freeaddrinfo(res);
}

void model_workers_read(void) {
    const char *spec = getenv("WHET_SERVE_WORKERS");
    n_workers = 0;
    for (const char *p = spec; p && *p && n_workers < MODEL_WORKERS_MAX;) {
        const char *end = strchr(p, ','), *eq = memchr(p, '=', end ? (size_t)(end - p) : strlen(p));
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = eq ? memrchr(eq, ':', len - (size_t)(eq - p)) : NULL;
        struct model_worker *w = &workers[n_workers];
        long port = colon ? strtol(colon + 1, NULL, 10) : 0;
        if (eq && colon && eq > p && colon > eq + 1 && port > 0 && port < 65536 && (size_t)(eq - p) < sizeof w->model &&
            (size_t)(colon - eq - 1) < sizeof w->host) {
            memset(w, 0, sizeof *w);
            snprintf(w->model, sizeof w->model, "%.*s", (int)(eq - p), p);
            snprintf(w->host, sizeof w->host, "%.*s", (int)(colon - eq - 1), eq + 1);
            w->port = (uint16_t)port;
            resolve(w);
            n_workers++;
        } else {
            log_warn("msg=\"WHET_SERVE_WORKERS: entry left out\" entry=\"%.*s\" expected=BASE=HOST:PORT", (int)len, p);
        }
        p = end ? end + 1 : p + len;
    }
}

int model_workers_find(const char *base) {
    for (int i = 0; i < n_workers; i++)
        if (!strcmp(workers[i].model, base)) return i;
    return -1;
}

const struct model_worker *model_workers_at(int i) { return &workers[i]; }

/* The worker's answer starts: counted and logged as the gateway's own answers are. */
struct observed {
    h2o_req_prefilter_t super;
    struct gw_req *r;
};

static void observe_answer(h2o_req_prefilter_t *self, h2o_req_t *req, h2o_ostream_t **slot) {
    http_observe(((struct observed *)self)->r, req->res.status);
    h2o_setup_next_prefilter(self, req, slot);
}

void model_workers_hand_over(struct gw_req *r, int i, const char *const (*headers)[2], int n) {
    const struct model_worker *w = &workers[i];
    h2o_req_t *req = r->req;
    for (size_t k = 0; k < req->headers.size;) {
        const h2o_iovec_t *name = req->headers.entries[k].name;
        if ((name->len >= 7 && !strncasecmp(name->base, "x-whet-", 7)) ||
            h2o_lcstris(name->base, name->len, H2O_STRLIT("authorization")))
            h2o_delete_header(&req->headers, (ssize_t)k);
        else k++;
    }
    for (int k = 0; k < n; k++)
        h2o_add_header_by_str(&req->pool, &req->headers, headers[k][0], strlen(headers[k][0]), 0, NULL,
                              h2o_strdup(&req->pool, headers[k][1], SIZE_MAX).base, strlen(headers[k][1]));
    h2o_req_overrides_t *ov = h2o_mem_alloc_pool(&req->pool, sizeof *ov);
    memset(ov, 0, sizeof *ov);
    ov->client_ctx = &req->conn->ctx->proxy.client_ctx;
    ov->hostport.host = h2o_strdup(&req->pool, w->host, SIZE_MAX);
    ov->hostport.port = w->port;
    char *authority = http_printf(r, "%s:%u", w->host, (unsigned)w->port);
    r->status = 200; /* the worker answers from here on: no second answer from the gateway */
    struct observed *o = (struct observed *)h2o_add_prefilter(req, sizeof *o);
    o->super.on_setup_ostream = observe_answer;
    o->r = r;
    h2o_reprocess_request(req, req->method, &H2O_URL_SCHEME_HTTP, h2o_iovec_init(authority, strlen(authority)),
                          req->path, ov, 0);
}

void model_workers_proxy(struct gw_req *r, const char *base, const char *const (*headers)[2], int n) {
    int i = model_workers_find(base);
    if (i < 0) {
        http_reply_unavailable(r, 5, http_printf(r, "the model worker of %s", base));
        return;
    }
    model_workers_hand_over(r, i, headers, n);
}
