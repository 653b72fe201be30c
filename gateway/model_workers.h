/* model_workers.h - the model workers (`whet serve`) the gateway hands requests to, per base model:
 *  - the static table WHET_SERVE_WORKERS="BASE=HOST:PORT[,BASE=HOST:PORT…]" (optional), read at start
 *    (`whet up` and tests name their workers so);
 *  - else the workers the scheduler placed (migration 0021), read from the database on each lookup:
 *    a ready one (not one a gateway found refusing connections: model_workers.unreachable_at, migration 0031),
 *    picked at random. The lookup records the demand that scales a base from zero and
 *    keeps its workers from idling out: serving_deployments.last_request_at (written at most once a
 *    second per base), and NOTIFY whet_jobs when the base has no worker, which starts a scheduler
 *    cycle at once (scheduler/service/serving.h).
 * Completions (inference.c, which waits for a worker's cold start and meters the answer) and training
 * sessions (training_sessions.c) go through these lookups, and answer alike when the worker they handed a
 * request to could not be reached (model_workers_reach and what follows it, at the end). */
#ifndef WHET_GATEWAY_MODEL_WORKERS_H
#define WHET_GATEWAY_MODEL_WORKERS_H

#include <stdint.h>
#include <sys/socket.h>

#include "http.h"

#define MODEL_WORKERS_MAX 64

struct model_worker {
    char model[128], host[256];
    uint16_t port;
    struct sockaddr_storage addr; /* a static worker's, resolved at start; addr_len 0: not resolved */
    socklen_t addr_len;
    int slot;                     /* its index in WHET_SERVE_WORKERS, or -1: placed by the scheduler */
    char id[64];                  /* a placed one's model_workers.id; "" for a static one */
};

/* Reads WHET_SERVE_WORKERS (again; a malformed entry is logged and left out) and
 * WHET_SERVE_COLD_START_MS. Declares the lookup's statement: call before the gateway starts. */
void model_workers_read(void);

/* Calls found(r, w, arg) with a worker of base model `base`, or w NULL when none is ready (or the
 * database failed: logged); w is valid during the call. It runs at once for a static worker, else
 * once the database answered, and not at all when the client went away meanwhile (arg should come
 * from the request's pool). */
typedef void (*model_workers_found_fn)(struct gw_req *r, const struct model_worker *w, void *arg);
void model_workers_find(struct gw_req *r, const char *base, model_workers_found_fn found, void *arg);

/* Like model_workers_find, but a base without a ready worker is looked up again every 100 ms while
 * the scheduler starts one, for WHET_SERVE_COLD_START_MS (default 5000); then the request is answered
 * 503 with retry-after and found is not called. found gets a worker, never NULL. */
void model_workers_await(struct gw_req *r, const char *base, model_workers_found_fn found, void *arg);
/* The loop's clock (ms) when a cold start that begins now is given up. */
uint64_t model_workers_cold_start_deadline(struct gw_req *r);
/* Calls again(arg) in 100 ms while the request is alive, unless `deadline` (the loop's clock, ms) has
 * passed or the gateway stops: then the request is answered 503 with retry-after, naming base's worker
 * as still starting. */
void model_workers_retry(struct gw_req *r, uint64_t deadline, const char *base, void (*again)(void *arg), void *arg);

/* The worker a training session is pinned to (gateway/training_sessions.c): a placed one (id not NULL) at
 * `address` (HOST:PORT), which the caller found ready, or the static worker of base at `address`. Returns 0
 * with *w filled, or -1 when there is no such static worker (any more) or the address is malformed. */
int model_workers_pinned(struct model_worker *w, const char *base, const char *id, const char *address);

/* Hands the request to worker w, unchanged but for its headers: no Authorization, no x-whet-* header
 * the client sent (those are the gateway's word to the worker: which adapter, which session, whether to
 * report usage), and headers[0..n) added (name, value pairs, copied). h2o's reverse proxy streams the
 * worker's answer back; when it cannot reach the worker its own 502 may be sent before this returns, so a
 * caller's prefilters go in before (the request's log and metrics count the status they leave). */
void model_workers_hand_over(struct gw_req *r, const struct model_worker *w, const char *const (*headers)[2], int n);
/* model_workers_hand_over to a worker of `base` (headers copied at once); a base without a ready
 * worker is a 503 with retry-after. */
void model_workers_proxy(struct gw_req *r, const char *base, const char *const (*headers)[2], int n);

/* ---- A worker that could not be reached (completions and training sessions alike)
 * A worker that died is found so by the request handed to it before its executor reports it (its row still
 * ready): h2o's proxy then answers its own 502 (plain text). The caller's prefilter (on_setup_ostream) asks
 * model_workers_reach why; for a worker's end it answers model_workers_answer_unavailable instead, which the
 * SDKs retry, and for a refused connection model_workers_mark_unreachable, so that the retry goes elsewhere. */

/* How a worker's answer starts. */
enum model_worker_reach {
    MODEL_WORKER_ANSWERED, /* the worker's own answer (or the proxy's 502 for a malformed one) */
    MODEL_WORKER_REFUSED,  /* the proxy's 502: the worker refused the connection, the request reached nothing */
    MODEL_WORKER_DROPPED,  /* the proxy's 502: the worker dropped the connection before its answer began; the
                              request may have run, so the gateway does not repeat it (nor mark it on a guess) */
};
/* Which, from the request's error log (in a prefilter's on_setup_ostream); *cause: h2o's words, when not
 * MODEL_WORKER_ANSWERED. */
enum model_worker_reach model_workers_reach(const h2o_req_t *req, h2o_iovec_t *cause);
/* Answers 503 with retry-after: 1 (code service_unavailable, `message`) in place of the proxy's 502: returns the
 * slot for the next ostream. */
h2o_ostream_t **model_workers_answer_unavailable(h2o_req_t *req, h2o_ostream_t **slot, const char *message);
/* For a placed worker w (a static one is left alone): marks it unreachable (model_workers.unreachable_at,
 * migration 0031: lookups pass it over, the scheduler replaces it once its executor reports it) and holds the
 * answer until the mark is written, so that the client's retry, however quick, finds it passed over. Returns the
 * slot for the next ostream. */
h2o_ostream_t **model_workers_mark_unreachable(struct gw_req *r, const struct model_worker *w, h2o_req_t *req,
                                               h2o_ostream_t **slot);

#endif
