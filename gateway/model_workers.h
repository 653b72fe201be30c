/* model_workers.h - the model workers (`whet serve`) the gateway hands requests to, one per base model:
 * WHET_SERVE_WORKERS="BASE=HOST:PORT[,BASE=HOST:PORT…]", read at start (placement by the scheduler and
 * scaling from zero are to come). inference.c keeps a copy of the same table for completions; it is
 * to use this one. */
#ifndef WHET_GATEWAY_MODEL_WORKERS_H
#define WHET_GATEWAY_MODEL_WORKERS_H

#include "http.h"

/* Reads WHET_SERVE_WORKERS (again); a malformed entry is logged and left out. */
void model_workers_read(void);
/* Whether a worker serves base model `base`. */
int model_workers_has(const char *base);
/* Hands the request to the worker of `base`, unchanged but for its headers: no Authorization, no
 * x-whet-* header the client sent (those are the gateway's word to the worker), and headers[0..n)
 * added (name, value pairs, copied). h2o's reverse proxy streams the worker's answer back. A base
 * without a worker is a 503 with retry-after. */
void model_workers_proxy(struct gw_req *r, const char *base, const char *const (*headers)[2], int n);

#endif
