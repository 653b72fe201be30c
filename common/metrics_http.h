/* metrics_http.h - a minimal HTTP server for Prometheus scrapes: GET /metrics on HOST:PORT, answered
 * by one thread, one connection at a time (scrapes are rare and small), each bounded by a 2 s receive
 * timeout; any other request is a 404. The scheduler and the executors serve their metrics with it
 * (the gateway answers /metrics through its own router).
 *
 *   static void render(struct whet_buf *out) { metrics_http_sample(out, "whet_x_total", "counter", "Xs.", n); }
 *   struct metrics_http *m = metrics_http_start("0.0.0.0:9464", render, &err);
 *   ...
 *   metrics_http_stop(m);
 *
 * render() runs on the server's thread: it should read atomics. */
#ifndef WHET_METRICS_HTTP_H
#define WHET_METRICS_HTTP_H

#include "buf.h"
#include "util.h"

struct metrics_http;

/* Listens on addr (HOST:PORT; [V6]:PORT) and starts the thread; NULL with err when it cannot. */
struct metrics_http *metrics_http_start(const char *addr, void (*render)(struct whet_buf *out), struct whet_err *err);
/* Stops the thread, closes the socket and frees m (NULL: nothing). */
void metrics_http_stop(struct metrics_http *m);
/* Appends the # HELP and # TYPE lines of a metric family. */
void metrics_http_family(struct whet_buf *out, const char *name, const char *type, const char *help);
/* Appends a family of one unlabelled sample: its # HELP and # TYPE lines and `name value` (integers
 * up to 2^53 and Unix times in milliseconds print exactly). */
void metrics_http_sample(struct whet_buf *out, const char *name, const char *type, const char *help, double value);

#endif
