/* server.h - the gateway's insides, shared by server.c and the middleware around it (not for the
 * resource handlers, which need only http.h and db.h).
 *
 * One `struct gateway` per process holds what every thread reads (options, JWT configuration, the
 * router, the worker pool); one `struct gw_thread` per event loop holds what only that loop touches
 * (its h2o context and listener, its two database pools, its authentication cache). Counters that
 * /metrics reports are process-wide atomics (metrics.c). */
#ifndef WHET_GATEWAY_SERVER_H
#define WHET_GATEWAY_SERVER_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>

#include "auth.h"
#include "gateway.h"
#include "http.h"

struct db_pool;
struct auth_cache;
struct gw_workers;

struct gw_thread {
    struct gateway *gw;
    int index;
    pthread_t tid;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;
    int listen_fd;                       /* bound by gateway_start, watched by the loop */
    h2o_socket_t *listener;
    h2o_socket_t *stop_sock;             /* a dup of the gateway's stop eventfd */
    size_t connections;                  /* open client connections */
    h2o_multithread_receiver_t receiver; /* worker completions and the stop message */
    struct db_pool *db_tenant;           /* SET ROLE whet_app, scoped per tenant */
    struct db_pool *db_admin;            /* operator queries */
    struct auth_cache *auth_cache;
    size_t requests_in_flight;           /* gw_req objects alive on this loop */
    uint64_t request_id_state;           /* splitmix64 state for request ids (seeded from getrandom) */
    int stopping;
    int receiver_closed;                 /* set (under the workers' lock) once the loop stops */
    double stop_deadline;                /* whet_now_mono() after which remaining work is dropped */
    /* Request log lines of one loop iteration, written together (http.c). */
    char *log_buf;
    size_t log_len;
    h2o_timeout_entry_t log_flush;
    long log_second;                     /* the Unix second log_stamp holds */
    char log_stamp[24];                  /* "YYYY-MM-DDTHH:MM:SS." for log_second */
};

struct gateway {
    struct gateway_options opts;
    char address[128];                   /* HOST:PORT actually bound */
    struct auth_config auth;
    struct http_router *router;
    struct gw_workers *workers;
    h2o_globalconf_t h2o_config;
    SSL_CTX *ssl_ctx;                    /* HTTPS (options tls_cert, tls_key), or NULL */
    int nthreads;
    struct gw_thread *threads;
    int stop_fd;                         /* eventfd written by gateway_stop() */
    struct replica *replica;             /* NULL unless opts.replica (replica.h) */
    struct session_sweep *sweep;         /* ended training sessions' state (session_sweep.h) */
    sem_t started;                       /* each loop posts once it is serving */
    int start_failed;
};

/* ---- Request lifecycle (server.c) -------------------------------------------------------------- */

/* Takes / drops a reference on a request (pending database queries and blocking jobs hold one). */
void gw_req_retain(struct gw_req *r);
void gw_req_release(struct gw_req *r);
/* Runs the route's handler once authentication and the rate limit have passed (server_auth.c calls
 * it when the identity is known). */
void gw_req_dispatch(struct gw_req *r);
/* From a filter or prefilter setting up an answer's ostreams at `slot`: the answer's body becomes `body` (JSON,
 * copied), in place of the one h2o sends in a single final call (its own answers: h2o_send_error_*,
 * h2o_send_inline), with its length and content type. Returns the slot that follows. */
h2o_ostream_t **gw_answer_replace_json(h2o_req_t *req, h2o_ostream_t **slot, const char *body);
/* Process-wide auth-cache generation: bumped when an operator revokes a key or disables a tenant, so
 * every thread's cache forgets at once. */
extern atomic_uint gw_auth_epoch;
/* The live gateway replicas (replica.h; 1 until counted): each enforces its share of a tenant's rate
 * limits. */
extern atomic_uint gw_replicas;

/* ---- Authentication (server_auth.c) ------------------------------------------------------------ */

struct auth_cache *auth_cache_new(void);
void auth_cache_free(struct auth_cache *c);
/* Authenticates the request for its route (tenant or operator), applies the tenant's rate limit and
 * calls gw_req_dispatch(), or answers 401/429/503 itself. */
void gw_authenticate(struct gw_req *r);
/* Prepared statements the middleware uses (called once before the loops start). */
void auth_prepare_statements(void);

/* ---- Rate limits (ratelimit.c) ----------------------------------------------------------------- */

/* Takes one token from the tenant's bucket (refilled at rate_per_s up to burst). Returns 1 when
 * allowed, else 0 with the seconds until a token is available in *retry_after_s. Thread-safe. */
int ratelimit_take(const char *tenant_id, double rate_per_s, double burst, double now, double *retry_after_s);
void ratelimit_reset_all(void);

/* ---- Routing (router.c, router_table.c) -------------------------------------------------------- */

struct http_route {
    const char *method;
    const char *pattern;
    const char *name;
    http_handler handler;
    int flags;
    int index;              /* 0..n-1, for metrics */
    int nsegments;
    char **segments;        /* literal text, or NULL for a parameter */
    char **param_names;     /* parallel to segments */
    int literal_count;
};

struct http_router *router_new(void);
void router_free(struct http_router *rt);
/* Finds the route for method and path (no query string). Fills r->path_* (decoded, in the request's
 * pool). Returns the route, or NULL with *status 404 (no such path), 405 (path exists, other method)
 * or 400 (a parameter holds a control character: r->path_names[r->npath - 1] names it, its value is
 * NULL). */
const struct http_route *router_match(const struct http_router *rt, struct gw_req *r, const char *method,
                                      size_t method_len, const char *path, size_t path_len, int *status);
int router_count(const struct http_router *rt);
const struct http_route *router_at(const struct http_router *rt, int i);
/* Registers every route of the gateway (router_table.c). */
void router_register_all(struct http_router *rt);

/* Route sets of the gateway's own files. */
void health_routes(struct http_router *rt);
void admin_routes(struct http_router *rt);
void auth_routes(struct http_router *rt);
void openapi_routes(struct http_router *rt);
void console_routes(struct http_router *rt);

/* ---- Metrics (metrics.c) ----------------------------------------------------------------------- */

void metrics_init(int nroutes);
void metrics_free(void);
/* Counts one answered request (route index -1 for unmatched paths). */
void metrics_observe(int route_index, int status, double seconds);
/* Database pool gauges, summed over threads. */
enum metrics_db_gauge { METRICS_DB_CONNS_UP, METRICS_DB_CONNS_TOTAL, METRICS_DB_QUEUED, METRICS_DB_IN_FLIGHT };
void metrics_db_add(int admin_pool, enum metrics_db_gauge g, long delta);
void metrics_db_error(void);
/* Counts one error answer by its error code (NULL: "other"). */
void metrics_error_code(const char *code);
/* The Prometheus text exposition; the caller frees it. */
char *metrics_render(const struct http_router *rt, size_t *len);

/* ---- Database pools (db.c) --------------------------------------------------------------------- */

struct db_pool *db_pool_new(struct gw_thread *t, const char *conninfo, int nconns, int admin);
void db_pool_free(struct db_pool *pool);
/* 1 when at least one connection is up. */
int db_pool_ready(const struct db_pool *pool);
/* Queries pending or in flight (shutdown waits for 0). */
size_t db_pool_busy(const struct db_pool *pool);
void db_prepare_freeze(void);

/* ---- Blocking work (server_workers.c) ---------------------------------------------------------- */

struct gw_workers *gw_workers_new(int nthreads);
void gw_workers_free(struct gw_workers *w);
/* Marks a stopping loop's receiver closed: jobs that finish later are dropped, not posted. */
void gw_workers_close_loop(struct gw_workers *w, struct gw_thread *t);
/* Delivers finished jobs on the loop thread (the receiver callback of struct gw_thread). */
void gw_workers_on_messages(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages);

/* ---- Replies (http.c) -------------------------------------------------------------------------- */

/* Answers and logs; all http_reply_* end here. `body` is owned by the caller's pool or static. */
/* Percent-decodes a path segment into the request's pool; NULL when the result holds a control
 * character (below 0x20, or 0x7f): handlers compare names as C strings, so "model.safetensors%00.json"
 * must not reach them as "model.safetensors". */
char *http_path_decode(struct gw_req *r, const char *s, size_t len);
void http_reply_raw(struct gw_req *r, int status, const char *content_type, const char *body, size_t len);
/* http_reply_raw() past the audit log's hold (audit.h): answers at once. */
void http_reply_now(struct gw_req *r, int status, const char *content_type, const char *body, size_t len);
/* Writes the request log lines the loop has gathered (the loop's zero timeout calls it after each
 * iteration; the loop calls it once more before it exits) and frees the buffer when `final`. */
void http_log_flush(struct gw_thread *t, int final);

#endif
