/* serve_metrics.h - the model worker's Prometheus metrics, answered at GET /metrics on its own port.
 * The engine's thread publishes its figures after every step; the HTTP loop counts answers and times
 * the first token of each request. Everything is an atomic, so any thread may update or render. */
#ifndef WHET_SERVE_METRICS_H
#define WHET_SERVE_METRICS_H

#include "buf.h"
#include "serve_engine.h"

/* After a step: the engine's running and waiting requests, tokens, adapters. */
void serve_metrics_engine(const struct serve_stats *s);
/* An answer sent (status: its HTTP status). */
void serve_metrics_answer(int status);
/* The first token of a request reached its client, seconds after the request arrived. */
void serve_metrics_first_token(double seconds);
/* The Prometheus text exposition. */
void serve_metrics_render(struct whet_buf *out);

#endif
