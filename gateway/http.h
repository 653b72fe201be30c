/* http.h - what a resource handler sees of an HTTP request, and every way it can answer.
 *
 * The gateway runs one h2o event loop per thread. A request goes through the same steps on every
 * route (server.c): request id, route match, path parameters, body-size check, authentication (auth.c),
 * the tenant's rate limit, then the route's handler. A handler is one function:
 *
 *     static void files_get(struct gw_req *r) {
 *         const char *params[] = {http_path_param(r, "id")};
 *         db_query(r, "files_get", 1, params, files_get_done, NULL);   // see db.h
 *     }
 *     static void files_get_done(struct gw_req *r, const struct db_result *res, void *arg) {
 *         if (db_reply_unless_found(r, res, "file", "id")) return;   // a failure, or 404 "no such file: ID"
 *         http_reply_json(r, 200, file_to_json(res->res[0], 0));
 *     }
 *
 * Rules every handler follows:
 * - A handler (or the callback it handed on) answers exactly once with one of the http_reply_*
 *   functions. After answering it must not touch `r` again: the request may be freed right away.
 * - Nothing blocks on an event-loop thread. Database work goes through db.h; blocking work (object
 *   store I/O, hashing a large file) goes through http_run_blocking().
 * - Memory for the request comes from its pool (http_alloc, http_strdup, http_printf): it is freed
 *   when the request is done, on every path, so nothing is freed by hand.
 * - Errors use the OpenAI body {"error":{"message","type","param","code"}}; the message follows the
 *   PostgreSQL style (lower case, says what and where). A client's bad input is never a 500.
 * - Tenant isolation: a handler filters every query by http_tenant_id(r) (and the database enforces
 *   it again with row-level security); another tenant's object is a 404, never a 403.
 *
 * Routes: each resource file exports `void <resource>_routes(struct http_router *rt)` that calls
 * http_route() for its paths; gateway/router_table.c lists those functions (one line per resource). */
#ifndef WHET_GATEWAY_HTTP_H
#define WHET_GATEWAY_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <h2o.h>
#include <jansson.h>

#include "util.h"

struct gw_thread; /* one event loop and everything it owns (server.c) */
struct http_route;

#define HTTP_REQUEST_ID_MAX 64
#define HTTP_TENANT_ID_MAX 64
#define HTTP_PATH_PARAMS_MAX 4

/* One request in flight. Allocated by the server for every request; the fields are read-only for
 * handlers except `handler_data`. */
struct gw_req {
    h2o_req_t *req;                 /* the h2o request; NULL once the client has gone away */
    struct gw_thread *thread;       /* the event loop the request lives on */
    const struct http_route *route; /* the matched route (NULL for 404s) */
    char request_id[HTTP_REQUEST_ID_MAX + 1];
    /* Who is calling (set by authentication before the handler runs). */
    int admin;                               /* an operator token on /admin/v1 */
    char tenant_id[HTTP_TENANT_ID_MAX + 1];  /* tenants.id, "" for operator and public routes */
    char tenant_name[HTTP_TENANT_ID_MAX + 1];/* tenants.name */
    char api_key_id[HTTP_TENANT_ID_MAX + 1]; /* api_keys.id when an API key authenticated, else "" */
    /* Path parameters from the route pattern ("/v1/files/{id}"), decoded, NUL-terminated. */
    int npath;
    const char *path_names[HTTP_PATH_PARAMS_MAX];
    const char *path_values[HTTP_PATH_PARAMS_MAX];
    void *handler_data; /* free for the handler's own use */
    /* Internal bookkeeping (server.c). */
    double started;     /* whet_now_mono() at arrival */
    int status;         /* the status answered, 0 until then */
    int refs;           /* the h2o pool holds one, each pending db query or blocking job one */
    const char *auth_kind; /* "key", "jwt" or NULL, for the log line */
    void *query_cache;  /* the parsed query string */
};

/* ---- Routing ----------------------------------------------------------------------------------- */

typedef void (*http_handler)(struct gw_req *r);

enum http_route_flags {
    HTTP_ROUTE_TENANT = 0,     /* default: a tenant's API key or JWT is required */
    HTTP_ROUTE_PUBLIC = 1 << 0,/* no authentication (/healthz, /readyz, /metrics) */
    HTTP_ROUTE_ADMIN = 1 << 1, /* an operator token is required (/admin/v1/...) */
    HTTP_ROUTE_LARGE_BODY = 1 << 2, /* accepts bodies up to the server's hard limit (file uploads);
                                       other routes stop at the JSON body limit (413) */
};

struct http_router;

/* Registers `handler` for `method` ("GET", "POST", "DELETE", ...) and `pattern`: literal segments and
 * `{name}` segments that match one path segment ("/v1/files/{id}/content"). `name` labels the route in
 * metrics and logs (defaults to the pattern when NULL). Literal segments win over parameters. */
void http_route(struct http_router *rt, const char *method, const char *pattern, http_handler handler, int flags,
                const char *name);

/* ---- Reading the request ----------------------------------------------------------------------- */

/* A path parameter by name ("id"), or NULL. */
const char *http_path_param(struct gw_req *r, const char *name);
/* A query-string parameter, percent-decoded ('+' is a space), or NULL when absent. The first one wins
 * when a name repeats. */
const char *http_query_param(struct gw_req *r, const char *name);
struct http_kv {
    const char *key, *value; /* decoded, from the request's pool */
};
/* Every query-string parameter in order (for filters like metadata[k]=v); returns the count. */
size_t http_query_params(struct gw_req *r, const struct http_kv **out);
/* A request header (name in lower case), NUL-terminated copy, or NULL. */
const char *http_header(struct gw_req *r, const char *name);
/* The whole request body (h2o buffers it before the handler runs). */
h2o_iovec_t http_body(struct gw_req *r);
/* Parses the body as a JSON object. On failure it answers 400 (invalid JSON, or not an object) and
 * returns NULL: the handler just returns. The caller owns the result (json_decref). */
json_t *http_body_json(struct gw_req *r);
/* Answers 400 "KEY: unrecognized request argument supplied" (param KEY) for the first key of `body`
 * that `keys` (NULL-terminated) does not list, and returns -1; returns 0 when it lists them all. */
int http_body_keys_known(struct gw_req *r, const json_t *body, const char *const *keys);
/* The tenant's id for queries (tenants.id), "" on public or operator routes. */
static inline const char *http_tenant_id(const struct gw_req *r) { return r->tenant_id; }

/* ---- Request-scoped memory --------------------------------------------------------------------- */

void *http_alloc(struct gw_req *r, size_t n);
char *http_strdup(struct gw_req *r, const char *s);
char *http_strndup(struct gw_req *r, const char *s, size_t n);
char *http_printf(struct gw_req *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Frees a malloc'd pointer when the request is done (for buffers from other libraries). */
void http_free_later(struct gw_req *r, void *p);

/* ---- Answering --------------------------------------------------------------------------------- */

/* Adds a response header (both strings are copied). Call before the reply. */
void http_add_header(struct gw_req *r, const char *name, const char *value);
/* Answers `status` with `body` as JSON; takes the reference to `body`. */
void http_reply_json(struct gw_req *r, int status, json_t *body);
/* Answers with raw bytes; takes ownership of `data` (malloc'd; freed when the request is done). */
void http_reply_bytes(struct gw_req *r, int status, const char *content_type, void *data, size_t len);
/* Answers an OpenAI-shaped error. The type follows the status: 400/404/409/413/422 ->
 * "invalid_request_error", 401 -> "authentication_error", 403 -> "permission_error", 429 ->
 * "rate_limit_error", 5xx -> "server_error". `param` and `code` may be NULL (JSON null). */
void http_reply_error(struct gw_req *r, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The same for an error in parts (util.h): the body's message is its one-line form, "MESSAGE; DETAIL;
 * hint: HINT". */
void http_reply_err(struct gw_req *r, int status, const char *param, const char *code, const struct whet_err *err);
/* http_reply_error with a hint (what the client can do about it; NULL for none) kept apart from the
 * message until the body is written. */
void http_reply_error_hint(struct gw_req *r, int status, const char *param, const char *code, const char *hint,
                           const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* 404 for an object the tenant cannot see (whether it exists for someone else or not at all). */
void http_reply_not_found(struct gw_req *r, const char *what, const char *id);
/* 429 with `retry-after: seconds` (rounded up, at least 1); `hint` may be NULL. */
void http_reply_rate_limited(struct gw_req *r, double retry_after_s, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* 503 with `retry-after` for a dependency that is down (the database during a restart). */
void http_reply_unavailable(struct gw_req *r, int retry_after_s, const char *what);
/* Counts an answer that the gateway passes on rather than makes (a model worker's, proxied) in /metrics
 * and writes its request log line, as the http_reply_* functions do for theirs. */
void http_observe(struct gw_req *r, int status);

/* ---- Streaming replies -------------------------------------------------------------------------- */

/* Fills `buf` with the next min(cap, bytes left) bytes of a streamed body and sets *len; runs on a
 * worker thread (it may block), never two calls at once for one stream, in order. Returns 0, or -1
 * with `err` filled. */
typedef int (*http_stream_read_fn)(void *source, void *buf, size_t cap, size_t *len, struct whet_err *err);

/* A body too large to hold in memory (a file's content, a model's weights), read a chunk at a time. */
struct http_stream {
    const char *content_type;
    uint64_t size;               /* the body's exact length, sent as Content-Length */
    http_stream_read_fn read;
    void (*release)(void *source); /* frees `source`; called once, on the event loop, when the stream ends */
    void *source;
    const char *what;            /* names the body in log lines ("file file-abc"); copied */
};

/* Answers `status` with a body that `s->read` produces in chunks of at most HTTP_STREAM_CHUNK bytes:
 * one chunk is read on a worker thread while h2o sends the one before, so a request never holds more
 * than two chunks, however large the body or slow the client. Takes `s->source` in every case.
 * - Nothing is sent before the first chunk is read: when that read fails, the answer is a clean 500
 *   (code "storage_error"), as from any handler.
 * - A read that fails later, or a body that comes out longer or shorter than `size`, cannot change
 *   the status any more: the connection is closed before the last byte (the client sees a truncated
 *   body) and the failure is logged.
 * - A client that goes away stops the reading at the next chunk.
 * This counts as the handler's one answer; `r` must not be touched after the call. */
#define HTTP_STREAM_CHUNK ((size_t)1 << 20)
void http_reply_stream(struct gw_req *r, int status, const struct http_stream *s);

/* The request's `Range: bytes=…` for a body of `size` bytes (RFC 9110, one range: "a-b", "a-" or the
 * last n bytes "-n"). Returns 1 with the range in *offset and *length; 0 when there is none to honour
 * (no header, another unit, several ranges, a malformed one, or an If-Range that cannot be checked:
 * the whole body is sent); -1 when it cannot be satisfied (answer 416). */
int http_range(struct gw_req *r, uint64_t size, uint64_t *offset, uint64_t *length);

/* ---- Blocking work ----------------------------------------------------------------------------- */

/* Runs `work(arg)` on the gateway's worker threads (object store I/O, which blocks), then `done(r,
 * arg)` back on the request's event loop. `work` must not touch `r` (another thread). `done` is
 * always called, exactly once, so it can free `arg`; when the client went away meanwhile,
 * http_gone(r) is true there and `done` must not answer. Returns -1 only when the worker queue is
 * full; the caller then answers 503 itself. */
int http_run_blocking(struct gw_req *r, void (*work)(void *arg), void (*done)(struct gw_req *r, void *arg), void *arg);
/* http_run_blocking, answering 503 "the gateway's workers are busy" when the worker queue is full;
 * then returns -1, `done` is not called and the caller frees `arg` (without touching `r`). */
int http_run_blocking_or_busy(struct gw_req *r, void (*work)(void *arg), void (*done)(struct gw_req *r, void *arg),
                              void *arg);
static inline int http_gone(const struct gw_req *r) { return r->req == NULL; }

#endif
