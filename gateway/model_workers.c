/* model_workers.c - the model workers' lookups (the static table, else the database's ready workers),
 * the hand-over of a request to one, and the answer when it could not be reached (see model_workers.h). */
#include "model_workers.h"

#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "db.h"
#include "env.h"
#include "log.h"
#include "server.h"

#define COLD_START_MS_DEFAULT 5000

static struct model_worker workers[MODEL_WORKERS_MAX];
static int n_workers;
static long cold_start_ms = COLD_START_MS_DEFAULT;

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

/* How long a request waits for a worker's cold start. */
static void read_cold_start(void) {
    const char *cold = whet_env("WHET_SERVE_COLD_START_MS", NULL);
    char *cold_end;
    long ms = cold ? strtol(cold, &cold_end, 10) : COLD_START_MS_DEFAULT;
    if (cold && (*cold_end || ms < 0 || ms > 3600000)) {
        log_warn(
            "msg=\"WHET_SERVE_COLD_START_MS: expected milliseconds (0 to 3600000), using the default\" value=\"%s\" "
            "default=%d",
            cold, COLD_START_MS_DEFAULT);
        ms = COLD_START_MS_DEFAULT;
    }
    cold_start_ms = ms;
}

uint64_t model_workers_cold_start_deadline(struct gw_req *r) {
    return h2o_now(r->thread->ctx.loop) + (uint64_t)cold_start_ms;
}

void model_workers_read(void) {
    read_cold_start();
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
            w->slot = n_workers;
            resolve(w);
            n_workers++;
        } else {
            log_warn("msg=\"WHET_SERVE_WORKERS: entry left out\" entry=\"%.*s\" expected=BASE=HOST:PORT", (int)len, p);
        }
        p = end ? end + 1 : p + len;
    }
    /* The base's ready workers, the demand recorded (see model_workers.h): the deployment's row made or
     * its last request moved (when a second old), and the scheduler woken when no worker of the base
     * is there at all (one starting is not woken for again). Declared once: both completions and
     * training sessions read the table. */
    static int prepared;
    if (!prepared++) {
        /* a worker a gateway found refusing connections (model_workers_mark_unreachable) */
        db_prepare("model_workers_unreachable",
                   "UPDATE model_workers SET unreachable_at = extract(epoch FROM clock_timestamp())"
                   " WHERE id = $1 AND address = $2 AND unreachable_at IS NULL");
        db_prepare("model_workers_demand",
               "WITH d AS (INSERT INTO serving_deployments (base_model) VALUES ($1) ON CONFLICT (base_model, pool)"
               "   DO UPDATE SET last_request_at = extract(epoch FROM clock_timestamp())"
               "   WHERE serving_deployments.last_request_at < extract(epoch FROM clock_timestamp()) - 1),"
               " w AS (SELECT address, id FROM model_workers WHERE base_model = $1 AND state = 'ready'"
               "   AND address IS NOT NULL AND unreachable_at IS NULL ORDER BY random() LIMIT 1)"
               " SELECT address, id FROM w UNION ALL SELECT NULL, NULL FROM (SELECT pg_notify('whet_jobs', 'serve ' || $1)"
               "   WHERE NOT EXISTS (SELECT 1 FROM model_workers WHERE base_model = $1 AND state <> 'stopping')) n"
               " WHERE NOT EXISTS (SELECT 1 FROM w)");
    }
}

struct lookup {
    const char *base;
    model_workers_found_fn found;
    void *arg;
};

/* A placed worker of base at address (HOST:PORT) with its id; -1 (logged) when the address is malformed. */
static int placed_worker(struct model_worker *w, const char *base, const char *id, const char *address) {
    const char *colon = strrchr(address, ':');
    long port = colon ? strtol(colon + 1, NULL, 10) : 0;
    *w = (struct model_worker){.slot = -1};
    if (!colon || port <= 0 || port > 65535 || (size_t)(colon - address) >= sizeof w->host) {
        log_warn("msg=\"a model worker's address is malformed\" model=%s address=\"%s\"", base, address);
        return -1;
    }
    snprintf(w->model, sizeof w->model, "%s", base);
    snprintf(w->host, sizeof w->host, "%.*s", (int)(colon - address), address);
    snprintf(w->id, sizeof w->id, "%s", id);
    w->port = (uint16_t)port;
    return 0;
}

int model_workers_pinned(struct model_worker *w, const char *base, const char *id, const char *address) {
    if (id) return placed_worker(w, base, id, address);
    for (int i = 0; i < n_workers; i++) {
        char at[sizeof workers[i].host + 8];
        snprintf(at, sizeof at, "%s:%u", workers[i].host, (unsigned)workers[i].port);
        if (!strcmp(workers[i].model, base) && !strcmp(at, address)) {
            *w = workers[i];
            return 0;
        }
    }
    return -1;
}

static void demand_done(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct lookup *q = arg;
    const char *address = res->ok && PQntuples(res->res[0]) ? db_value(res->res[0], 0, 0) : NULL;
    if (!res->ok)
        log_warn("msg=\"the model workers of a base could not be read: answered as none ready\" model=%s request_id=%s "
                 "error=\"%s\"",
                 q->base, r->request_id, res->message);
    struct model_worker w;
    if (!address || placed_worker(&w, q->base, db_value(res->res[0], 0, 1), address)) {
        q->found(r, NULL, q->arg);
        return;
    }
    q->found(r, &w, q->arg);
}

void model_workers_find(struct gw_req *r, const char *base, model_workers_found_fn found, void *arg) {
    for (int i = 0; i < n_workers; i++)
        if (!strcmp(workers[i].model, base)) {
            found(r, &workers[i], arg);
            return;
        }
    struct lookup *q = http_alloc(r, sizeof *q);
    *q = (struct lookup){http_strdup(r, base), found, arg};
    const char *params[] = {q->base};
    db_query(r, "model_workers_demand", 1, params, demand_done, q);
}

/* A wait of a request: the request held (its pool with `arg` may go when the client leaves). */
struct waiting {
    struct gw_req *r;
    void (*again)(void *arg);
    void *arg;
    h2o_timeout_entry_t retry;
};

static void wait_over(h2o_timeout_entry_t *entry) {
    struct waiting *w = H2O_STRUCT_FROM_MEMBER(struct waiting, retry, entry);
    struct gw_req *r = w->r;
    if (r->req) w->again(w->arg);
    free(w);
    gw_req_release(r);
}

void model_workers_retry(struct gw_req *r, uint64_t deadline, const char *base, void (*again)(void *arg), void *arg) {
    h2o_context_t *ctx = &r->thread->ctx;
    if (r->thread->stopping || h2o_now(ctx->loop) >= deadline) {
        http_reply_unavailable(r, (int)((cold_start_ms + 999) / 1000),
                               http_printf(r, "the model worker of %s (still starting after %ld ms)", base,
                                           cold_start_ms));
        return;
    }
    struct waiting *w = xcalloc(1, sizeof *w);
    *w = (struct waiting){.r = r, .again = again, .arg = arg, .retry = {.cb = wait_over}};
    gw_req_retain(r);
    h2o_timeout_link(ctx->loop, &ctx->hundred_ms_timeout, &w->retry);
}

/* A lookup that waits for a cold start (model_workers_await). */
struct awaiting {
    struct gw_req *r;
    const char *base;
    uint64_t deadline;
    model_workers_found_fn found;
    void *arg;
};

static void await_look_up(void *arg);

static void await_found(struct gw_req *r, const struct model_worker *w, void *arg) {
    struct awaiting *a = arg;
    if (w) a->found(r, w, a->arg);
    else model_workers_retry(r, a->deadline, a->base, await_look_up, a); /* the scheduler was told */
}

static void await_look_up(void *arg) {
    struct awaiting *a = arg;
    model_workers_find(a->r, a->base, await_found, a);
}

void model_workers_await(struct gw_req *r, const char *base, model_workers_found_fn found, void *arg) {
    struct awaiting *a = http_alloc(r, sizeof *a);
    *a = (struct awaiting){r, http_strdup(r, base), model_workers_cold_start_deadline(r), found, arg};
    await_look_up(a);
}

/* The worker's answer starts: counted and logged as the gateway's own answers are. */
struct observed {
    h2o_req_prefilter_t super;
    struct gw_req *r;
};

static void observe_answer(h2o_req_prefilter_t *self, h2o_req_t *req, h2o_ostream_t **slot) {
    http_observe(((struct observed *)self)->r, req->res.status);
    h2o_setup_next_prefilter(self, req, slot);
}

void model_workers_hand_over(struct gw_req *r, const struct model_worker *w, const char *const (*headers)[2], int n) {
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
    /* last in the chain (h2o runs the prefilter added last first): it counts the status callers' prefilters leave */
    struct observed *o = h2o_mem_alloc_pool(&req->pool, sizeof *o);
    *o = (struct observed){.super = {.on_setup_ostream = observe_answer}, .r = r};
    h2o_req_prefilter_t **tail = &req->prefilters;
    while (*tail) tail = &(*tail)->next;
    *tail = &o->super;
    h2o_reprocess_request(req, req->method, &H2O_URL_SCHEME_HTTP, h2o_iovec_init(authority, strlen(authority)),
                          req->path, ov, 0);
}

struct proxying {
    const char *base;
    const char *(*headers)[2];
    int n;
};

static void proxy_found(struct gw_req *r, const struct model_worker *w, void *arg) {
    const struct proxying *p = arg;
    if (!w) {
        http_reply_unavailable(r, 5, http_printf(r, "the model worker of %s", p->base));
        return;
    }
    model_workers_hand_over(r, w, (const char *const (*)[2])p->headers, p->n);
}

void model_workers_proxy(struct gw_req *r, const char *base, const char *const (*headers)[2], int n) {
    struct proxying *p = http_alloc(r, sizeof *p);
    *p = (struct proxying){http_strdup(r, base), http_alloc(r, (size_t)(n ? n : 1) * sizeof *p->headers), n};
    for (int k = 0; k < n; k++) {
        p->headers[k][0] = http_strdup(r, headers[k][0]);
        p->headers[k][1] = http_strdup(r, headers[k][1]);
    }
    model_workers_find(r, base, proxy_found, p);
}

/* ---- A worker that could not be reached -------------------------------------------------------- */

enum model_worker_reach model_workers_reach(const h2o_req_t *req, h2o_iovec_t *cause) {
    /* h2o 2.2's proxy logs why it answers 502: "connection failure", or "socket create error" when connect()
     * failed at once (as on loopback), for a refused connection; "I/O error (…)" for one dropped before the
     * answer's head */
    const h2o_iovec_t *why = NULL;
    for (size_t i = req->error_logs.size; req->res.status == 502 && !why && i-- > 0;)
        if (!strcmp(req->error_logs.entries[i].module, "lib/core/proxy.c")) why = &req->error_logs.entries[i].msg;
    if (!why) return MODEL_WORKER_ANSWERED;
    *cause = *why;
    if (h2o_memis(why->base, why->len, H2O_STRLIT("connection failure")) ||
        h2o_memis(why->base, why->len, H2O_STRLIT("socket create error")))
        return MODEL_WORKER_REFUSED;
    if (why->len >= 9 && !memcmp(why->base, "I/O error", 9)) return MODEL_WORKER_DROPPED;
    return MODEL_WORKER_ANSWERED; /* a malformed answer: the proxy's 502 stays */
}

h2o_ostream_t **model_workers_answer_unavailable(h2o_req_t *req, h2o_ostream_t **slot, const char *message) {
    req->res.status = 503, req->res.reason = "Service Unavailable";
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("retry-after"), 0, NULL, H2O_STRLIT("1"));
    json_t *body = json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", message, "type", "server_error", "param",
                             "code", "service_unavailable");
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    slot = gw_answer_replace_json(req, slot, text);
    free(text);
    return slot;
}

/* The answer, held until the mark is written. */
struct held_ostream {
    h2o_ostream_t super;
    const char *worker_id;
    h2o_req_t *req;
    h2o_iovec_t body; /* the answer's one buffer (none for HEAD), in the request's pool */
    size_t bufcnt;
    h2o_send_state_t state;
    int waiting, marked; /* the answer came (and waits), the mark is written (or failed) */
};

static void held_do_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t bufcnt,
                         h2o_send_state_t state) {
    struct held_ostream *o = (struct held_ostream *)self;
    if (o->marked || h2o_send_state_is_in_progress(state)) { /* (the answer comes in one final send) */
        h2o_ostream_send_next(self, req, bufs, bufcnt, state);
        return;
    }
    o->req = req, o->bufcnt = bufcnt ? 1 : 0, o->body = bufcnt ? bufs[0] : h2o_iovec_init(NULL, 0), o->state = state;
    o->waiting = 1;
}

/* Not called when the client left meanwhile: the request and the held answer are gone. */
static void marked(struct gw_req *r, const struct db_result *res, void *arg) {
    struct held_ostream *o = arg;
    if (!res->ok)
        log_error("msg=\"a model worker found refusing connections is not marked: lookups may pick it until its "
                  "executor reports it gone\" worker=%s request_id=%s error=\"%s\"",
                  o->worker_id, r->request_id, res->message);
    o->marked = 1;
    if (o->waiting) h2o_ostream_send_next(&o->super, o->req, o->bufcnt ? &o->body : NULL, o->bufcnt, o->state);
}

h2o_ostream_t **model_workers_mark_unreachable(struct gw_req *r, const struct model_worker *w, h2o_req_t *req,
                                               h2o_ostream_t **slot) {
    if (!w->id[0]) return slot;
    struct held_ostream *o = (struct held_ostream *)h2o_add_ostream(req, sizeof *o, slot);
    o->super.do_send = held_do_send;
    o->worker_id = http_strdup(r, w->id);
    o->waiting = o->marked = 0;
    const char *params[] = {o->worker_id, http_printf(r, "%s:%u", w->host, (unsigned)w->port)};
    db_query(r, "model_workers_unreachable", 2, params, marked, o);
    return &o->super.next;
}
