/* server.c - the gateway's event loops: one h2o evloop per thread, each with its own SO_REUSEPORT
 * listener and database pools, a request pipeline shared by every route, and graceful shutdown.
 *
 * A request goes: on_req() -> request id -> route match -> body limit -> authentication and rate
 * limit (server_auth.c) -> the route's handler, which answers through http.c. Each request gets a
 * `struct gw_req` (http.h) that outlives the h2o request when a database query or blocking job is
 * still pending: the h2o pool holds one reference (released by a guard object when the pool is
 * cleared, which also marks the request gone), each pending operation another.
 *
 * With WHET_GATEWAY_TLS_CERT and WHET_GATEWAY_TLS_KEY the listeners speak TLS only, and ALPN picks
 * HTTP/2 or HTTP/1.1 per connection (h2o serves both on the same handler).
 *
 * Shutdown: gateway_stop() writes an eventfd that every loop watches; each loop then closes its
 * listener (so a new instance can take the port at once), answers 503 to requests that still
 * arrive on open connections, and keeps running until its requests in flight are done (bounded by
 * a grace period), then frees its pools. */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "crypto.h"
#include "db.h"
#include "env.h"
#include "estimate.h"
#include "log.h"
#include "net.h"
#include "replica.h"
#include "rng.h"
#include "session_sweep.h"
#include "training_sessions.h"

#define GRACE_S 10.0      /* how long a stopping loop waits for requests in flight */
#define IDLE_GRACE_S 1.0  /* and then for idle keep-alive connections to close */
#define ACCEPT_BATCH 16

atomic_uint gw_auth_epoch;
atomic_uint gw_replicas = 1;

/* ---- Options ----------------------------------------------------------------------------------- */

static long env_long(const char *name, long fallback) {
    const char *v = whet_env(name, NULL);
    if (!v) return fallback;
    char *end;
    long n = strtol(v, &end, 10);
    return *end || n < 0 ? fallback : n;
}

void gateway_options_default(struct gateway_options *opts) {
    memset(opts, 0, sizeof(*opts));
    opts->http = whet_env("WHET_HTTP", "127.0.0.1:8080");
    opts->database_url = whet_env("WHET_DATABASE_URL", NULL);
    opts->threads = (int)env_long("WHET_GATEWAY_THREADS", 0);
    opts->db_conns_per_thread = (int)env_long("WHET_GATEWAY_DB_CONNS", 0);
    opts->body_limit = (size_t)env_long("WHET_GATEWAY_BODY_LIMIT", 0);
    opts->json_body_limit = (size_t)env_long("WHET_GATEWAY_JSON_BODY_LIMIT", 0);
    opts->log_requests = (int)env_long("WHET_GATEWAY_LOG_REQUESTS", 1);
    /* How long a verified API key or tenant stays cached per loop: the bound on how long a key
     * revoked (or a tenant disabled) other than through this gateway's operator API keeps working. */
    opts->auth_cache_ttl_ms = (int)env_long("WHET_GATEWAY_AUTH_CACHE_MS", 0);
    /* The session replicas share the auth cache and the rate limits through (replica.h); 0 where the
     * database is reached through a pooler that cannot LISTEN. */
    opts->replica = (int)env_long("WHET_GATEWAY_REPLICA", 1);
    opts->tls_cert = whet_env("WHET_GATEWAY_TLS_CERT", NULL);
    opts->tls_key = whet_env("WHET_GATEWAY_TLS_KEY", NULL);
}

static void options_fill_defaults(struct gateway_options *o) {
    if (o->threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o->threads = n > 0 ? (int)n : 1;
    }
    if (o->threads > 256) o->threads = 256;
    if (o->db_conns_per_thread <= 0) o->db_conns_per_thread = 2;
    if (o->db_admin_conns_per_thread <= 0) o->db_admin_conns_per_thread = 1;
    if (!o->body_limit) o->body_limit = 512u << 20;
    if (!o->json_body_limit) o->json_body_limit = 1u << 20;
    if (o->json_body_limit > o->body_limit) o->json_body_limit = o->body_limit;
    if (o->workers <= 0) o->workers = 4;
    if (o->auth_cache_ttl_ms <= 0) o->auth_cache_ttl_ms = 5000;
    /* Request lines are info lines (http.c writes them itself, in batches): honour WHET_LOG_LEVEL. */
    const char *level = whet_env("WHET_LOG_LEVEL", NULL);
    if (level && (!strcmp(level, "warn") || !strcmp(level, "error"))) o->log_requests = 0;
}

/* ---- Requests ---------------------------------------------------------------------------------- */

struct req_guard {
    struct gw_req *r;
};

void gw_req_retain(struct gw_req *r) { r->refs++; }

void gw_req_release(struct gw_req *r) {
    if (--r->refs > 0) return;
    r->thread->requests_in_flight--;
    free(r);
}

/* The h2o pool is being cleared: the request is over (answered, or the client is gone). */
static void req_guard_dispose(void *p) {
    struct req_guard *g = p;
    g->r->req = NULL;
    gw_req_release(g->r);
}

static int request_id_acceptable(const char *s, size_t len) {
    if (len == 0 || len > HTTP_REQUEST_ID_MAX) return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              c == '.' || c == ':'))
            return 0;
    }
    return 1;
}

/* "req_" + 24 characters of [A-Za-z0-9]. Request ids need to be unique, not secret: a per-loop
 * splitmix64 stream seeded from getrandom saves a system call per request. */
static void request_id_new(struct gw_thread *t, char *out) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    memcpy(out, "req_", 4);
    uint64_t bits = 0;
    for (int i = 0; i < 24; i++) {
        /* 8 characters per 64-bit draw (6 bits each, modulo bias negligible) */
        if (i % 8 == 0) bits = rng_splitmix64(&t->request_id_state);
        out[4 + i] = alphabet[(bits & 63) % 62];
        bits >>= 8;
    }
    out[28] = 0;
}

void gw_req_dispatch(struct gw_req *r) { r->route->handler(r); }

static int on_req(h2o_handler_t *self, h2o_req_t *req) {
    struct gw_thread *t = H2O_STRUCT_FROM_MEMBER(struct gw_thread, ctx, req->conn->ctx);
    struct gateway *gw = t->gw;
    struct gw_req *r = xcalloc(1, sizeof(*r));
    r->req = req;
    r->thread = t;
    r->refs = 1;
    r->started = whet_now_mono();
    t->requests_in_flight++;
    struct req_guard *g = h2o_mem_alloc_shared(&req->pool, sizeof(*g), req_guard_dispose);
    g->r = r;

    ssize_t h = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-request-id"), -1);
    if (h >= 0 && request_id_acceptable(req->headers.entries[h].value.base, req->headers.entries[h].value.len)) {
        memcpy(r->request_id, req->headers.entries[h].value.base, req->headers.entries[h].value.len);
    } else {
        request_id_new(t, r->request_id);
    }

    if (t->stopping) {
        http_reply_unavailable(r, 1, "the gateway (shutting down)");
        return 0;
    }
    size_t path_len = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
    int status = 404;
    r->route = router_match(gw->router, r, req->method.base, req->method.len, req->path.base, path_len, &status);
    if (!r->route) {
        if (status == 405) http_reply_error(r, 405, NULL, "method_not_allowed", "method not allowed on this path");
        else if (status == 400)
            http_reply_error(r, 400, r->path_names[r->npath - 1], "invalid_value",
                             "path parameter \"%s\" holds a control character (a byte below 0x20 or 0x7f, such as %%00)",
                             r->path_names[r->npath - 1]);
        else http_reply_error_hint(r, 404, NULL, "unknown_url", "the API lives under /v1", "unknown path");
        return 0;
    }
    size_t limit = r->route->flags & HTTP_ROUTE_LARGE_BODY ? gw->opts.body_limit : gw->opts.json_body_limit;
    if (req->entity.len > limit) {
        http_reply_error(r, 413, NULL, "request_too_large", "request body of %zu bytes exceeds the limit of %zu bytes",
                         req->entity.len, limit);
        return 0;
    }
    if (r->route->flags & HTTP_ROUTE_PUBLIC) gw_req_dispatch(r);
    else gw_authenticate(r);
    return 0;
}

/* ---- Errors h2o answers itself ------------------------------------------------------------------ */

/* h2o refuses some requests before on_req() sees them: a body past max_request_entity_size (413, from
 * the Content-Length or while reading a chunked body), a malformed request line or chunked encoding
 * (400). It answers those through the host's fallback path, whose only filter is this one: it turns
 * h2o's plain-text body into the OpenAI error body every other answer has, with a request id, and
 * counts and logs the request like http_reply_raw() does. */
struct replaced_ostream {
    h2o_ostream_t super;
    h2o_iovec_t body;
};

static void replaced_do_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t bufcnt,
                             h2o_send_state_t state) {
    struct replaced_ostream *o = (struct replaced_ostream *)self;
    /* h2o sends its text in one final call (none for HEAD): our body replaces it. */
    h2o_ostream_send_next(&o->super, req, bufcnt ? &o->body : NULL, bufcnt ? 1 : 0, state);
}

h2o_ostream_t **gw_answer_replace_json(h2o_req_t *req, h2o_ostream_t **slot, const char *body) {
    struct replaced_ostream *o = (struct replaced_ostream *)h2o_add_ostream(req, sizeof(*o), slot);
    o->super.do_send = replaced_do_send;
    o->body = h2o_strdup(&req->pool, body, strlen(body));
    req->res.content_length = o->body.len;
    ssize_t ct = h2o_find_header(&req->res.headers, H2O_TOKEN_CONTENT_TYPE, -1);
    if (ct >= 0) req->res.headers.entries[ct].value = h2o_iovec_init(H2O_STRLIT("application/json"));
    else h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("application/json"));
    return &o->super.next;
}

static void h2o_error_setup_ostream(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot) {
    struct gw_thread *t = H2O_STRUCT_FROM_MEMBER(struct gw_thread, ctx, req->conn->ctx);
    int status = req->res.status;
    if (status < 400) {
        h2o_setup_next_ostream(req, slot);
        return;
    }
    char message[3 * WHET_ERR_MAX], request_id[HTTP_REQUEST_ID_MAX + 1];
    const char *code;
    struct whet_err e;
    if (status == 413) {
        code = "request_too_large";
        whet_errf(&e, "request body exceeds the gateway's hard limit of %zu bytes", t->gw->opts.body_limit);
        whet_err_hint(&e, "upload large files in parts with the Uploads API (POST /v1/uploads, then POST "
                          "/v1/uploads/{id}/parts)");
    } else {
        code = status == 400 ? "invalid_request" : NULL;
        whet_errf(&e, "the HTTP request was refused: %s", req->res.reason ? req->res.reason : "error");
    }
    whet_err_text(&e, message, sizeof message);
    request_id_new(t, request_id);
    json_t *err = json_pack("{s:{s:s, s:s, s:n, s:o}}", "error", "message", message, "type",
                            status == 401 ? "authentication_error" : status >= 500 ? "server_error" : "invalid_request_error",
                            "param", "code", code ? json_string(code) : json_null());
    char *text = json_dumps(err, JSON_COMPACT);
    json_decref(err);
    slot = gw_answer_replace_json(req, slot, text);
    free(text);
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-request-id"), 0, NULL,
                          h2o_strdup(&req->pool, request_id, strlen(request_id)).base, strlen(request_id));
    metrics_observe(-1, status, 0);
    log_info("msg=request method=%.*s route=\"-\" status=%d refused_by=h2o request_id=%s",
             (int)(req->input.method.len > 16 ? 16 : req->input.method.len), req->input.method.base, status, request_id);
    h2o_setup_next_ostream(req, slot);
}

/* ---- Listeners --------------------------------------------------------------------------------- */

/* Binds one listening socket with SO_REUSEPORT; `port` may be "0" the first time. */
static int listen_on(const char *host, const char *port, struct whet_err *err) {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *res = NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc) return whet_errf(err, "WHET_HTTP: %s: %s", host, gai_strerror(rc));
    int fd = -1, saved = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        int on = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on));
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 4096) == 0) break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        whet_errf(err, "cannot listen on %s:%s: %s", host, port, strerror(saved ? saved : EADDRNOTAVAIL));
        return whet_err_hint(err, "pick another address with --http or WHET_HTTP");
    }
    return fd;
}

static void on_conn_close(void *data) {
    size_t *conns = data;
    (*conns)--;
}

static void on_accept(h2o_socket_t *listener, const char *err) {
    struct gw_thread *t = listener->data;
    if (err || t->stopping) return;
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
        if (!sock) break;
        t->connections++;
        sock->on_close.cb = on_conn_close;
        sock->on_close.data = &t->connections;
        h2o_accept(&t->accept_ctx, sock);
    }
}

/* ---- Event loops ------------------------------------------------------------------------------- */

static void loop_begin_stop(struct gw_thread *t) {
    if (t->stopping) return;
    t->stopping = 1;
    t->stop_deadline = whet_now_mono() + GRACE_S;
    if (t->listener) {
        h2o_socket_read_stop(t->listener);
        h2o_socket_close(t->listener);
        t->listener = NULL;
    }
    /* Idle keep-alive connections wait on the HTTP/1 request timeout: expiring it now makes h2o close
     * them itself (h2o 2.2 has no call that closes idle HTTP/1 connections). */
    t->ctx.http1.req_timeout.timeout = 0;
}

static void on_stop_event(h2o_socket_t *sock, const char *err) {
    struct gw_thread *t = sock->data;
    /* Nobody reads the eventfd: it stays readable, so every loop sees it. */
    h2o_socket_read_stop(sock);
    loop_begin_stop(t);
}

static int loop_busy(struct gw_thread *t) {
    return t->requests_in_flight > 0 || db_pool_busy(t->db_tenant) > 0 || db_pool_busy(t->db_admin) > 0;
}

static void *loop_main(void *arg) {
    struct gw_thread *t = arg;
    struct gateway *gw = t->gw;
    h2o_context_init(&t->ctx, h2o_evloop_create(), &gw->h2o_config);
    t->accept_ctx.ctx = &t->ctx;
    t->accept_ctx.hosts = gw->h2o_config.hosts;
    t->accept_ctx.ssl_ctx = gw->ssl_ctx;
    t->listener = h2o_evloop_socket_create(t->ctx.loop, t->listen_fd, H2O_SOCKET_FLAG_DONT_READ);
    t->listener->data = t;
    h2o_socket_read_start(t->listener, on_accept);
    t->stop_sock = h2o_evloop_socket_create(t->ctx.loop, fcntl(gw->stop_fd, F_DUPFD_CLOEXEC, 0),
                                            H2O_SOCKET_FLAG_DONT_READ);
    t->stop_sock->data = t;
    h2o_socket_read_start(t->stop_sock, on_stop_event);
    h2o_multithread_register_receiver(t->ctx.queue, &t->receiver, gw_workers_on_messages);
    t->db_tenant = db_pool_new(t, gw->opts.database_url, gw->opts.db_conns_per_thread, 0);
    t->db_admin = db_pool_new(t, gw->opts.database_url, gw->opts.db_admin_conns_per_thread, 1);
    t->auth_cache = auth_cache_new();
    whet_random_bytes(&t->request_id_state, sizeof(t->request_id_state));
    sem_post(&gw->started);

    while (!t->stopping) h2o_evloop_run(t->ctx.loop, INT32_MAX);
    while (loop_busy(t) && whet_now_mono() < t->stop_deadline) h2o_evloop_run(t->ctx.loop, 50);
    double idle_deadline = whet_now_mono() + IDLE_GRACE_S;
    while (t->connections > 0 && whet_now_mono() < idle_deadline) h2o_evloop_run(t->ctx.loop, 50);
    if (loop_busy(t))
        log_warn("msg=\"stopping with work in flight\" thread=%d requests=%zu", t->index, t->requests_in_flight);

    db_pool_free(t->db_tenant);
    db_pool_free(t->db_admin);
    t->db_tenant = t->db_admin = NULL;
    auth_cache_free(t->auth_cache);
    t->auth_cache = NULL;
    h2o_socket_close(t->stop_sock);
    gw_workers_close_loop(gw->workers, t);
    h2o_evloop_run(t->ctx.loop, 0); /* delivers posted jobs, lets the closed sockets go */
    h2o_multithread_unregister_receiver(t->ctx.queue, &t->receiver);
    http_log_flush(t, 1);
    /* h2o 2.2 cannot close idle keep-alive connections from outside: when some are still open the
     * context stays allocated (the process is about to exit); otherwise free everything. */
    if (t->connections == 0 && t->requests_in_flight == 0) {
        h2o_loop_t *loop = t->ctx.loop;
        h2o_context_dispose(&t->ctx);
        h2o_evloop_destroy(loop);
    }
    return NULL;
}

/* ---- Gateway ----------------------------------------------------------------------------------- */

static void gateway_free(struct gateway *gw) {
    replica_stop(gw->replica);
    session_sweep_stop(gw->sweep);
    if (gw->workers) gw_workers_free(gw->workers);
    if (gw->router) router_free(gw->router);
    metrics_free();
    estimate_free();
    auth_config_free(&gw->auth);
    if (gw->threads) {
        for (int i = 0; i < gw->nthreads; i++)
            if (gw->threads[i].listen_fd >= 0 && !gw->threads[i].listener) close(gw->threads[i].listen_fd);
        free(gw->threads);
    }
    if (gw->stop_fd >= 0) close(gw->stop_fd);
    SSL_CTX_free(gw->ssl_ctx);
    h2o_config_dispose(&gw->h2o_config);
    sem_destroy(&gw->started);
    free(gw);
}

/* The TLS context of an HTTPS gateway: the certificate chain and its key from PEM files, TLS 1.2 at
 * least, and ALPN offering h2 then http/1.1 (h2o serves whichever the client picks). NULL with err
 * when a file cannot be used. */
static SSL_CTX *tls_context(const char *cert, const char *key, struct whet_err *err) {
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        whet_errf(err, "TLS: cannot create a context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    const char *what = NULL, *path = key;
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
        what = "certificate chain";
        path = cert;
    } else if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        what = "private key";
    } else if (SSL_CTX_check_private_key(ctx) != 1) {
        what = "private key (it does not match the certificate)";
    }
    if (what) {
        char reason[256];
        ERR_error_string_n(ERR_get_error(), reason, sizeof reason);
        ERR_clear_error();
        SSL_CTX_free(ctx);
        whet_errf(err, "TLS: cannot use %s as the gateway's %s: %s", path, what, reason);
        whet_err_hint(err, "WHET_GATEWAY_TLS_CERT and WHET_GATEWAY_TLS_KEY name PEM files the gateway can read");
        return NULL;
    }
    h2o_ssl_register_alpn_protocols(ctx, h2o_http2_alpn_protocols);
    return ctx;
}

struct gateway *gateway_start(const struct gateway_options *opts, struct whet_err *err) {
    if (!opts->database_url || !*opts->database_url) {
        whet_errf(err, "WHET_DATABASE_URL is not set");
        whet_err_hint(err, "point it at the PostgreSQL database `whet migrate` prepared");
        return NULL;
    }
    struct gateway *gw = xcalloc(1, sizeof(*gw));
    gw->opts = *opts;
    options_fill_defaults(&gw->opts);
    gw->stop_fd = -1;
    sem_init(&gw->started, 0, 0);
    h2o_config_init(&gw->h2o_config);
    if (auth_config_from_env(&gw->auth, err) < 0) {
        gateway_free(gw);
        return NULL;
    }
    int has_cert = gw->opts.tls_cert && *gw->opts.tls_cert, has_key = gw->opts.tls_key && *gw->opts.tls_key;
    if (has_cert != has_key) {
        whet_errf(err, "WHET_GATEWAY_TLS_%s is set without WHET_GATEWAY_TLS_%s", has_cert ? "CERT" : "KEY",
                  has_cert ? "KEY" : "CERT");
        whet_err_hint(err, "set both for HTTPS, or neither for plain HTTP");
        gateway_free(gw);
        return NULL;
    }
    if (has_cert && !(gw->ssl_ctx = tls_context(gw->opts.tls_cert, gw->opts.tls_key, err))) {
        gateway_free(gw);
        return NULL;
    }
    gw->h2o_config.server_name = h2o_iovec_init(H2O_STRLIT("whet"));
    gw->h2o_config.max_request_entity_size = gw->opts.body_limit;
    /* inference answers come from model workers through h2o's proxy: a whole (not streamed) answer may
     * take minutes of generation before its first byte */
    gw->h2o_config.proxy.io_timeout = 600000;
    h2o_hostconf_t *host = h2o_config_register_host(&gw->h2o_config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    h2o_handler_t *handler = h2o_create_handler(path, sizeof(*handler));
    handler->on_req = on_req;
    h2o_filter_t *errors = h2o_create_filter(&host->fallback_path, sizeof(*errors));
    errors->on_setup_ostream = h2o_error_setup_ostream;

    auth_prepare_statements();
    gw->router = router_new();
    router_register_all(gw->router);
    db_prepare_freeze();
    metrics_init(router_count(gw->router));

    char host_name[96], port[16];
    if (whet_split_host_port(gw->opts.http, host_name, sizeof(host_name), port, sizeof(port)) < 0) {
        whet_errf(err, "WHET_HTTP: \"%s\" is not HOST:PORT", gw->opts.http);
        gateway_free(gw);
        return NULL;
    }
    gw->nthreads = gw->opts.threads;
    gw->threads = xcalloc((size_t)gw->nthreads, sizeof(*gw->threads));
    for (int i = 0; i < gw->nthreads; i++) gw->threads[i].listen_fd = -1;
    for (int i = 0; i < gw->nthreads; i++) {
        struct gw_thread *t = &gw->threads[i];
        t->gw = gw;
        t->index = i;
        t->listen_fd = listen_on(host_name, port, err);
        if (t->listen_fd < 0) {
            gateway_free(gw);
            return NULL;
        }
        if (i == 0) { /* port 0: the others join the port the kernel picked */
            struct sockaddr_storage ss;
            socklen_t sl = sizeof(ss);
            getsockname(t->listen_fd, (struct sockaddr *)&ss, &sl);
            char hbuf[NI_MAXHOST];
            getnameinfo((struct sockaddr *)&ss, sl, hbuf, sizeof(hbuf), port, sizeof(port),
                        NI_NUMERICHOST | NI_NUMERICSERV);
            snprintf(gw->address, sizeof(gw->address), strchr(hbuf, ':') ? "[%s]:%s" : "%s:%s", hbuf, port);
        }
    }
    gw->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (gw->opts.replica) gw->replica = replica_start(gw->opts.database_url);
    gw->sweep = session_sweep_start(gw->opts.database_url, training_sessions_idle_s());
    gw->workers = gw_workers_new(gw->opts.workers);
    for (int i = 0; i < gw->nthreads; i++) h2o_multithread_create_thread(&gw->threads[i].tid, NULL, loop_main, &gw->threads[i]);
    for (int i = 0; i < gw->nthreads; i++) sem_wait(&gw->started);
    log_info("msg=\"gateway listening\" address=%s tls=%s threads=%d db_conns_per_thread=%d", gw->address,
             gw->ssl_ctx ? "yes" : "no", gw->nthreads, gw->opts.db_conns_per_thread);
    return gw;
}

void gateway_stop(struct gateway *gw) {
    uint64_t one = 1;
    ssize_t w = write(gw->stop_fd, &one, sizeof(one));
    (void)w;
}

int gateway_wait(struct gateway *gw) {
    for (int i = 0; i < gw->nthreads; i++) pthread_join(gw->threads[i].tid, NULL);
    for (int i = 0; i < gw->nthreads; i++) gw->threads[i].listen_fd = -1; /* closed with their h2o sockets */
    log_info("msg=\"gateway stopped\"");
    gateway_free(gw);
    return 0;
}

const char *gateway_address(const struct gateway *gw) { return gw->address; }

int gateway_run(const struct gateway_options *opts, struct whet_err *err) {
    sigset_t stop_signals, old;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    /* Blocked before the loops start so that only this thread ever receives them. */
    pthread_sigmask(SIG_BLOCK, &stop_signals, &old);
    signal(SIGPIPE, SIG_IGN);
    struct gateway *gw = gateway_start(opts, err);
    if (!gw) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return -1;
    }
    fprintf(stderr, "whet: gateway listening on %s://%s\n", gw->ssl_ctx ? "https" : "http", gw->address);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    log_info("msg=\"stopping\" signal=%s", sig == SIGINT ? "SIGINT" : "SIGTERM");
    gateway_stop(gw);
    gateway_wait(gw);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return 0;
}
