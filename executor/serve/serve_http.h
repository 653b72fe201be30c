/* serve_http.h - `whet serve`: the model worker's HTTP front, OpenAI's chat completions and
 * completions (streamed as server-sent events or whole) for one base model and its named adapters.
 *
 * Two threads: an h2o event loop that parses requests (serve_api.h) and writes answers, and the
 * engine's thread (serve_engine.h) that batches every request's sequences. They talk through a
 * locked queue (loop -> engine: submissions, cancellations) and h2o's multithread queue (engine ->
 * loop: tokens, finishes). A client that goes away cancels its request at the engine's next step.
 *
 * Models are named in the body: the base by its name, a local adapter by the name given to it. The
 * gateway, which resolves a tenant's fine-tuned model, names its adapter instead by the object-store
 * prefix of its checkpoint in the header x-whet-adapter; a third thread fetches it (once, into the
 * cache dir) before the request reaches the engine; a sealed adapter (encryption at rest) comes with
 * the tenant's wrapped data key in x-whet-data-key (serve_store.h). Workers are reachable by the
 * gateway alone. */
#ifndef WHET_SERVE_HTTP_H
#define WHET_SERVE_HTTP_H

#include "serve_engine.h"
#include "util.h"

#define SERVE_MAX_ADAPTERS 256

struct serve_http_opts {
    const char *http;      /* HOST:PORT to listen on (port 0: any; the address is logged) */
    const char *name;      /* the base model's name in requests (model) */
    int n_adapters;        /* adapters served under their names */
    const char *adapter_names[SERVE_MAX_ADAPTERS];
    const char *adapter_dirs[SERVE_MAX_ADAPTERS];
    struct serve_engine_opts engine;
    const char *address_file; /* optional: the bound HOST:PORT is written there once listening */
    const char *object_store; /* optional: adapters named by x-whet-adapter: PREFIX are fetched from it */
    const char *cache_dir;    /* where fetched adapters are kept */
    int training;             /* training sessions (serve_session_http.h); engine.training must be set too */
    int max_sessions;
    double session_idle_s;    /* an idle session expires after this */
    int max_train_tokens;     /* a training pass's padded tokens at most */
};

/* Serves until SIGINT or SIGTERM; returns 0, or -1 with err when it could not start. */
int serve_http_run(const struct serve_http_opts *o, struct whet_err *err);

#endif
