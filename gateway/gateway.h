/* gateway.h - the HTTP gateway: tenants' OpenAI-compatible API, the operator API, health and metrics.
 *
 * `whet gateway` calls gateway_run(), which serves until SIGINT or SIGTERM and then stops gracefully
 * (listeners closed first, requests in flight finished). `whet up` runs `whet gateway` as a child
 * process, like every other component, and starts it again if it dies (cli/cmd_up.c). gateway_run()
 * is made of the three calls below: gateway_start() returns once every listener is bound,
 * gateway_stop() (safe from any thread, and from a signal handler) asks it to stop, gateway_wait()
 * waits for that and frees it. */
#ifndef WHET_GATEWAY_H
#define WHET_GATEWAY_H

#include <stddef.h>

#include "util.h"

struct gateway_options {
    const char *http;          /* HOST:PORT to listen on (WHET_HTTP; default 127.0.0.1:8080) */
    int threads;               /* event-loop threads; 0: one per core */
    const char *database_url;  /* libpq conninfo or URI (WHET_DATABASE_URL); required */
    int db_conns_per_thread;   /* tenant-pool connections per thread; 0: 2 */
    int db_admin_conns_per_thread; /* operator-pool connections per thread; 0: 1 */
    size_t body_limit;         /* hard limit on a request body (file uploads); 0: 512 MiB */
    size_t json_body_limit;    /* limit for every other route; 0: 1 MiB */
    int workers;               /* threads for blocking work (object store I/O); 0: 4 */
    int auth_cache_ttl_ms;     /* how long a verified API key or tenant row is trusted; 0: 5000 */
    int replica;               /* 1: share the auth cache and rate limits with other replicas (replica.h) */
    int log_requests;          /* 1: one log line per request (default via gateway_options_default) */
    const char *tls_cert;      /* PEM certificate chain (WHET_GATEWAY_TLS_CERT): with tls_key, HTTPS only, */
    const char *tls_key;       /* HTTP/2 or HTTP/1.1 chosen by ALPN; NULL both: plain HTTP */
};

/* Fills `opts` from the environment (WHET_HTTP, WHET_DATABASE_URL, WHET_GATEWAY_THREADS,
 * WHET_GATEWAY_DB_CONNS, WHET_GATEWAY_BODY_LIMIT, WHET_GATEWAY_TLS_CERT, WHET_GATEWAY_TLS_KEY); the
 * strings point into the environment. */
void gateway_options_default(struct gateway_options *opts);

struct gateway;

/* Starts the event loops; returns when every listener is bound (NULL with err on failure: bad
 * address, port in use, bad JWT configuration). The database may still be down: requests then get
 * 503 until it answers. */
struct gateway *gateway_start(const struct gateway_options *opts, struct whet_err *err);
/* Asks the gateway to stop (async-signal-safe). */
void gateway_stop(struct gateway *gw);
/* Waits until every loop has stopped, then frees everything. Returns 0. */
int gateway_wait(struct gateway *gw);
/* The address actually bound ("127.0.0.1:8080"; useful with port 0). */
const char *gateway_address(const struct gateway *gw);

/* gateway_start + wait for SIGINT/SIGTERM + gateway_stop + gateway_wait. Prints
 * "whet: gateway listening on http://HOST:PORT" (https:// with TLS) on stderr once serving. */
int gateway_run(const struct gateway_options *opts, struct whet_err *err);

#endif
