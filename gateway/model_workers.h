/* model_workers.h - the model workers (`whet serve`) the gateway hands requests to, one per base model:
 * WHET_SERVE_WORKERS="BASE=HOST:PORT[,BASE=HOST:PORT…]", read at start (placement by the scheduler and
 * scaling from zero are to come). Completions (inference.c, which waits for a worker's cold start and
 * meters the answer) and training sessions (training_sessions.c) go through this one table. */
#ifndef WHET_GATEWAY_MODEL_WORKERS_H
#define WHET_GATEWAY_MODEL_WORKERS_H

#include <stdint.h>
#include <sys/socket.h>

#include "http.h"

#define MODEL_WORKERS_MAX 64

struct model_worker {
    char model[128], host[256];
    uint16_t port;
    struct sockaddr_storage addr; /* resolved at start; addr_len 0: not resolved */
    socklen_t addr_len;
};

/* Reads WHET_SERVE_WORKERS (again); a malformed entry is logged and left out. */
void model_workers_read(void);
/* The index of the worker of base model `base`, or -1; and the worker at an index. */
int model_workers_find(const char *base);
const struct model_worker *model_workers_at(int i);
/* Hands the request to worker i, unchanged but for its headers: no Authorization, no x-whet-* header
 * the client sent (those are the gateway's word to the worker: which adapter, which session, whether to
 * report usage), and headers[0..n) added (name, value pairs, copied). h2o's reverse proxy streams the
 * worker's answer back. */
void model_workers_hand_over(struct gw_req *r, int i, const char *const (*headers)[2], int n);
/* model_workers_hand_over to the worker of `base`; a base without a worker is a 503 with retry-after. */
void model_workers_proxy(struct gw_req *r, const char *base, const char *const (*headers)[2], int n);

#endif
