/* serve_http.c - the model worker's HTTP front (see serve_http.h).
 *
 * A request's life: on_req checks the body (400/404 at once), makes a `call` and queues it for the
 * engine thread, which submits it and answers with a SUBMITTED message (the engine's id, or its
 * refusal). Token and final events come back one message each; a streamed call writes a chunk per
 * token (holding back a character whose last bytes are still to come), a whole one answers after its
 * last choice ends. h2o allows one h2o_send in flight per request: chunks wait in `pending` until
 * proceed. A call ends when both sides are done with it: the engine (every choice's final event)
 * and h2o (the request's pool is disposed, whether the answer was sent or the client left). */
#include "serve_http.h"

#include <errno.h>
#include <h2o.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "crypto.h"
#include "log.h"
#include "net.h"
#include "serve_api.h"
#include "serve_metrics.h"
#include "serve_session_http.h"
#include "serve_store.h"

enum msg_kind { MSG_SUBMITTED, MSG_EVENT };

struct call;

/* engine thread -> loop */
struct msg {
    h2o_multithread_message_t super;
    enum msg_kind kind;
    struct call *call;
    uint64_t engine_id; /* SUBMITTED: 0 when refused (text says why, status the answer's: 400 or 503) */
    int status;
    int choice, token, prompt_tokens, completion_tokens;
    enum serve_finish finish;
    char *text;
    size_t text_len;
    struct serve_api_token logprobs; /* of the token, when the request asked for them */
};

struct choice {
    struct whet_buf text;
    size_t sent; /* streamed so far */
    enum serve_finish finish;
    int started, finished, completion_tokens;
    struct serve_api_token *tokens; /* with logprobs: every token (n_tokens), streamed from `streamed` on */
    int n_tokens, cap_tokens, streamed;
};

struct call {
    struct server *srv;
    h2o_req_t *req; /* NULL once h2o has disposed of the request */
    int gone;       /* the client left: nothing more is sent */
    h2o_generator_t gen;
    struct serve_api_request api;
    char *adapter_dir;    /* the adapter's local dir, NULL for the base */
    char *adapter_prefix; /* x-whet-adapter: the object-store prefix to fetch it from */
    char *data_key;       /* x-whet-data-key: the tenant's wrapped data key, for a sealed adapter */
    /* x-whet-usage in the request: the gateway meters the answer's tokens. They are reported as "PROMPT
     * COMPLETION" (the numbers of the answer's usage) in the header x-whet-usage of a whole answer, in a
     * comment event ": x-whet-usage PROMPT COMPLETION" before a stream's [DONE]; the gateway takes both
     * out. */
    int report_usage;
    char id[48];
    long long created;
    double arrived; /* whet_now_mono() when the request came: the first token's latency */
    int first_token_seen;
    uint64_t engine_id;
    int cancel_wanted, engine_done, n_finished, prompt_tokens;
    struct choice *choices;
    /* streaming */
    int streaming, in_flight, final_queued;
    struct whet_buf pending;
    struct call *next_submit; /* the engine's queue */
};

struct server {
    const struct serve_http_opts *o;
    struct serve_engine *engine;
    h2o_globalconf_t config;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept;
    h2o_socket_t *listener;
    h2o_multithread_receiver_t receiver;
    pthread_t engine_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct call *submit_head, **submit_tail;
    struct serve_store *store;           /* NULL without --object-store */
    struct serve_sessions *sessions;     /* NULL without --training */
    pthread_t fetch_thread;
    pthread_cond_t fetch_cv;
    struct call *fetch_head, **fetch_tail; /* calls whose adapter is to be fetched first */
    uint64_t *cancels;
    size_t n_cancels, cap_cancels;
    int stop;
    long long started; /* when the worker started: its models' `created` */
};

static volatile sig_atomic_t stop_signal;
static void on_signal(int sig) { stop_signal = sig; }

/* ---------------------------------------------------------------- answers */

static void reply(h2o_req_t *req, int status, const char *reason, const char *type, const char *body) {
    serve_metrics_answer(status);
    req->res.status = status;
    req->res.reason = reason;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, type, strlen(type));
    h2o_send_inline(req, body, strlen(body));
}

static void reply_error(h2o_req_t *req, int status, const char *message, const char *type, const char *param,
                        const char *code) {
    char *body = serve_api_error(message, type, param, code);
    reply(req, status,
          status == 404   ? "Not Found"
          : status == 405 ? "Method Not Allowed"
          : status == 503 ? "Service Unavailable"
                          : "Bad Request",
          "application/json", body);
    free(body);
}

static void call_free(struct call *c) {
    for (int i = 0; c->choices && i < c->api.n; i++) {
        whet_buf_free(&c->choices[i].text);
        free(c->choices[i].tokens);
    }
    free(c->choices);
    whet_buf_free(&c->pending);
    serve_api_request_free(&c->api);
    free(c->adapter_dir);
    free(c->adapter_prefix);
    free(c->data_key);
    free(c);
}

/* Sends what is pending (and the end once queued) when h2o is ready for more. */
static void stream_flush(struct call *c) {
    if (!c->req || c->gone || c->in_flight || (!c->pending.len && !c->final_queued)) return;
    h2o_iovec_t buf = h2o_iovec_init(h2o_mem_alloc_pool(&c->req->pool, c->pending.len + 1), c->pending.len);
    memcpy(buf.base, c->pending.data ? c->pending.data : "", c->pending.len);
    c->pending.len = 0;
    c->in_flight = 1;
    h2o_send(c->req, &buf, 1, c->final_queued ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_IN_PROGRESS);
}

static void stream_proceed(h2o_generator_t *gen, h2o_req_t *req) {
    struct call *c = H2O_STRUCT_FROM_MEMBER(struct call, gen, gen);
    c->in_flight = 0;
    stream_flush(c);
}

static void queue_cancel(struct server *s, uint64_t engine_id) {
    pthread_mutex_lock(&s->mu);
    if (s->n_cancels == s->cap_cancels) {
        s->cap_cancels = s->cap_cancels ? 2 * s->cap_cancels : 16;
        s->cancels = xrealloc(s->cancels, s->cap_cancels * sizeof *s->cancels);
    }
    s->cancels[s->n_cancels++] = engine_id;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* The client left mid-stream: the engine stops the request; h2o disposes the request later. */
static void stream_stop(h2o_generator_t *gen, h2o_req_t *req) {
    struct call *c = H2O_STRUCT_FROM_MEMBER(struct call, gen, gen);
    c->gone = 1;
    if (c->engine_done) return;
    if (c->engine_id) queue_cancel(c->srv, c->engine_id);
    else c->cancel_wanted = 1;
}

/* h2o is done with the request (answered, or the client is gone). */
static void on_request_disposed(void *p) {
    struct call *c = *(struct call **)p;
    c->req = NULL;
    if (c->engine_done) {
        call_free(c);
        return;
    }
    if (c->engine_id) queue_cancel(c->srv, c->engine_id);
    else c->cancel_wanted = 1;
}

static void append_chunk(struct call *c, char *chunk) {
    whet_buf_puts(&c->pending, chunk);
    free(chunk);
}

/* The sendable part of choice i's text that has not been sent, with the log-probs of its new tokens. */
static void stream_text(struct call *c, int i, int first) {
    struct choice *ch = &c->choices[i];
    size_t upto = ch->finished
                      ? ch->text.len
                      : ch->sent + serve_api_complete_prefix(ch->text.data + ch->sent, ch->text.len - ch->sent);
    struct serve_api_choice piece = {.text = ch->text.data + ch->sent,
                                     .text_len = upto - ch->sent,
                                     .tokens = ch->tokens + ch->streamed,
                                     .n_tokens = ch->n_tokens - ch->streamed};
    if (upto > ch->sent || first || piece.n_tokens > 0)
        append_chunk(c, serve_api_chunk(&c->api, serve_engine_tokenizer(c->srv->engine), c->id, c->created, i, first,
                                        &piece, NULL));
    ch->sent = upto;
    ch->streamed = ch->n_tokens;
}

static void answer_whole(struct call *c) {
    struct serve_api_choice *choices = xcalloc((size_t)c->api.n, sizeof *choices);
    int completion = 0;
    for (int i = 0; i < c->api.n; i++) {
        const struct choice *ch = &c->choices[i];
        choices[i] = (struct serve_api_choice){ch->text.data, ch->text.len, ch->finish, ch->tokens, ch->n_tokens};
        completion += ch->completion_tokens;
    }
    char *body = serve_api_response(&c->api, serve_engine_tokenizer(c->srv->engine), c->id, c->created, choices,
                                    c->prompt_tokens, completion);
    if (c->report_usage) {
        char report[48];
        int len = snprintf(report, sizeof report, "%d %d", c->prompt_tokens, completion);
        h2o_add_header_by_str(&c->req->pool, &c->req->res.headers, H2O_STRLIT("x-whet-usage"), 0, NULL,
                              h2o_strdup(&c->req->pool, report, (size_t)len).base, (size_t)len);
    }
    reply(c->req, 200, "OK", "application/json", body);
    free(body);
    free(choices);
}

/* A choice ended. The call's answer ends with its last choice. */
static void on_final(struct call *c, const struct msg *m) {
    struct choice *ch = &c->choices[m->choice];
    ch->finished = 1, ch->finish = m->finish, ch->completion_tokens = m->completion_tokens;
    c->prompt_tokens = m->prompt_tokens;
    c->engine_done = ++c->n_finished == c->api.n;
    if (!c->req) {
        if (c->engine_done) call_free(c);
        return;
    }
    if (c->gone) return;
    if (m->finish == SERVE_ERROR) { /* the adapter did not load: every choice fails, before any token */
        if (!c->engine_done) return;
        if (!c->streaming) {
            reply_error(c->req, 503, m->text, "server_error", NULL, "adapter_unavailable");
            return;
        }
        char *e = serve_api_error(m->text, "server_error", NULL, "adapter_unavailable");
        append_chunk(c, xasprintf("data: %s\n\n", e));
        free(e);
        c->final_queued = 1;
        stream_flush(c);
        return;
    }
    if (c->streaming) {
        stream_text(c, m->choice, 0);
        append_chunk(c, serve_api_chunk(&c->api, serve_engine_tokenizer(c->srv->engine), c->id, c->created, m->choice,
                                        0, NULL, serve_api_finish_reason(m->finish)));
        if (c->engine_done) {
            int completion = 0;
            for (int i = 0; i < c->api.n; i++) completion += c->choices[i].completion_tokens;
            if (c->api.include_usage)
                append_chunk(c, serve_api_usage_chunk(&c->api, c->id, c->created, c->prompt_tokens, completion));
            if (c->report_usage) whet_buf_printf(&c->pending, ": x-whet-usage %d %d\n\n", c->prompt_tokens, completion);
            whet_buf_puts(&c->pending, "data: [DONE]\n\n");
            c->final_queued = 1;
        }
        stream_flush(c);
    } else if (c->engine_done) {
        answer_whole(c);
    }
}

static void on_messages(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages) {
    while (!h2o_linklist_is_empty(messages)) {
        struct msg *m = H2O_STRUCT_FROM_MEMBER(struct msg, super.link, messages->next);
        h2o_linklist_unlink(&m->super.link);
        struct call *c = m->call;
        if (m->kind == MSG_SUBMITTED) {
            if (!m->engine_id) { /* refused: a 400 from the engine, a 503 when the adapter could not be fetched */
                const char *type = m->status == 503 ? "server_error" : "invalid_request_error";
                const char *code = m->status == 503 ? "adapter_unavailable" : NULL;
                c->engine_done = 1;
                if (!c->req) call_free(c);
                else if (!c->gone && !c->streaming)
                    reply_error(c->req, m->status, m->text, type, NULL, code);
                else if (!c->gone) { /* a stream has begun: the error is its last event */
                    char *e = serve_api_error(m->text, type, NULL, code);
                    append_chunk(c, xasprintf("data: %s\n\n", e));
                    free(e);
                    c->final_queued = 1;
                    stream_flush(c);
                }
            } else {
                c->engine_id = m->engine_id;
                if (c->cancel_wanted) queue_cancel(c->srv, c->engine_id);
            }
        } else if (m->finish != SERVE_RUNNING) {
            on_final(c, m);
        } else {
            struct choice *ch = &c->choices[m->choice];
            int first = !ch->started;
            if (!c->first_token_seen) {
                c->first_token_seen = 1;
                serve_metrics_first_token(whet_now_mono() - c->arrived);
            }
            ch->started = 1;
            whet_buf_append(&ch->text, m->text, m->text_len);
            if (c->api.logprobs) {
                if (ch->n_tokens == ch->cap_tokens) {
                    ch->cap_tokens = ch->cap_tokens ? 2 * ch->cap_tokens : 16;
                    ch->tokens = xrealloc(ch->tokens, sizeof *ch->tokens * (size_t)ch->cap_tokens);
                }
                ch->tokens[ch->n_tokens++] = m->logprobs;
            }
            if (c->streaming && c->req && !c->gone) {
                stream_text(c, m->choice, first);
                stream_flush(c);
            }
        }
        free(m->text);
        free(m);
    }
}

/* ---------------------------------------------------------------- the engine's thread */

static void post(struct server *s, struct msg *m) { h2o_multithread_send_message(&s->receiver, &m->super); }

static void on_engine_event(void *ctx, const struct serve_event *ev) {
    struct call *c = ctx;
    struct msg *m = xcalloc(1, sizeof *m);
    m->kind = MSG_EVENT, m->call = c, m->choice = ev->choice, m->token = ev->token, m->finish = ev->finish;
    m->logprobs.id = ev->token, m->logprobs.logprob = ev->logprob, m->logprobs.n_top = ev->n_top;
    if (ev->n_top > 0) {
        memcpy(m->logprobs.top_ids, ev->top_ids, sizeof(int) * (size_t)ev->n_top);
        memcpy(m->logprobs.top_logprobs, ev->top_logprobs, sizeof(float) * (size_t)ev->n_top);
    }
    m->prompt_tokens = ev->prompt_tokens, m->completion_tokens = ev->completion_tokens;
    m->text = xmalloc(ev->text_len + 1);
    memcpy(m->text, ev->text, ev->text_len);
    m->text[ev->text_len] = 0;
    m->text_len = ev->text_len;
    post(c->srv, m);
}

static void submit(struct server *s, struct call *c) {
    struct serve_request r = serve_api_engine_request(&c->api, on_engine_event, c);
    r.adapter = c->adapter_dir;
    struct msg *m = xcalloc(1, sizeof *m);
    m->kind = MSG_SUBMITTED, m->call = c;
    struct whet_err err;
    if (serve_engine_submit(s->engine, &r, &m->engine_id, &err)) {
        m->engine_id = 0, m->status = 400;
        m->text = xstrdup(err.msg);
    }
    post(s, m);
}

/* Training sessions have work for the engine thread. */
static void wake_engine(void *arg) {
    struct server *s = arg;
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void *engine_main(void *arg) {
    struct server *s = arg;
    int busy = 0;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        if (!busy && !s->submit_head && !s->n_cancels && !serve_sessions_pending(s->sessions)) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        struct call *todo = s->submit_head;
        s->submit_head = NULL, s->submit_tail = &s->submit_head;
        size_t n_cancels = s->n_cancels;
        uint64_t *cancels = xmalloc(sizeof *cancels * (n_cancels ? n_cancels : 1));
        if (n_cancels) memcpy(cancels, s->cancels, sizeof *cancels * n_cancels);
        s->n_cancels = 0;
        pthread_mutex_unlock(&s->mu);
        for (struct call *c = todo, *next; c; c = next) {
            next = c->next_submit;
            submit(s, c);
        }
        for (size_t i = 0; i < n_cancels; i++) serve_engine_cancel(s->engine, cancels[i]);
        free(cancels);
        serve_sessions_run(s->sessions);
        struct whet_err err;
        busy = serve_engine_step(s->engine, &err);
        struct serve_stats stats = serve_engine_stats(s->engine);
        serve_metrics_engine(&stats);
        if (busy < 0) {
            log_error("msg=\"engine step failed\" error=\"%s\"", err.msg);
            busy = 0;
        }
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---------------------------------------------------------------- fetching adapters */

static void queue_submit(struct server *s, struct call *c) {
    *s->submit_tail = c;
    s->submit_tail = &c->next_submit;
    pthread_cond_signal(&s->cv);
}

/* The fetch thread: adapters named by object-store prefix are fetched (once) before their calls go to
 * the engine, so a download never stalls the decoding of everyone else. */
static void *fetch_main(void *arg) {
    struct server *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && !s->fetch_head) pthread_cond_wait(&s->fetch_cv, &s->mu);
        if (s->stop) break;
        struct call *c = s->fetch_head;
        s->fetch_head = c->next_submit;
        if (!s->fetch_head) s->fetch_tail = &s->fetch_head;
        c->next_submit = NULL;
        pthread_mutex_unlock(&s->mu);
        struct whet_err err;
        char *dir = serve_store_fetch(s->store, c->adapter_prefix, c->data_key, &err);
        pthread_mutex_lock(&s->mu);
        if (dir) {
            c->adapter_dir = dir;
            queue_submit(s, c);
        } else {
            log_warn("msg=\"adapter fetch failed\" prefix=\"%s\" error=\"%s\"", c->adapter_prefix, err.msg);
            struct msg *m = xcalloc(1, sizeof *m);
            m->kind = MSG_SUBMITTED, m->call = c, m->status = 503;
            m->text = xstrdup(err.msg);
            post(s, m);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---------------------------------------------------------------- requests */

/* The adapter dir of model name `model` (NULL: the base); -1 when no such model is served here. */
static int resolve_model(const struct serve_http_opts *o, const char *model, char **dir) {
    *dir = NULL;
    if (!strcmp(model, o->name)) return 0;
    for (int i = 0; i < o->n_adapters; i++)
        if (!strcmp(model, o->adapter_names[i])) {
            *dir = xstrdup(o->adapter_dirs[i]);
            return 0;
        }
    return -1;
}

static void list_models(struct server *s, h2o_req_t *req) {
    struct whet_buf b = {0};
    const char *fmt = "%s{\"id\":\"%s\",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"whet\"}";
    whet_buf_puts(&b, "{\"object\":\"list\",\"data\":[");
    whet_buf_printf(&b, fmt, "", s->o->name, s->started);
    for (int i = 0; i < s->o->n_adapters; i++) whet_buf_printf(&b, fmt, ",", s->o->adapter_names[i], s->started);
    whet_buf_puts(&b, "]}");
    reply(req, 200, "OK", "application/json", b.data);
    whet_buf_free(&b);
}

static int path_is(const h2o_req_t *req, const char *path) {
    size_t len = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
    return len == strlen(path) && !memcmp(req->path.base, path, len);
}

static int on_req(h2o_handler_t *self, h2o_req_t *req) {
    struct server *s = *(struct server **)(self + 1);
    int post_req = h2o_memis(req->method.base, req->method.len, H2O_STRLIT("POST"));
    if (path_is(req, "/metrics")) {
        struct whet_buf b = {0};
        serve_metrics_render(&b);
        reply(req, 200, "OK", "text/plain; version=0.0.4", b.data);
        whet_buf_free(&b);
        return 0;
    }
    if (path_is(req, "/healthz")) {
        reply(req, 200, "OK", "text/plain", "ok\n");
        return 0;
    }
    if (path_is(req, "/v1/models")) {
        list_models(s, req);
        return 0;
    }
    if (serve_sessions_on_req(s->sessions, req) || serve_tokenize_on_req(s->engine, req)) return 0;
    enum serve_api_kind kind;
    if (path_is(req, "/v1/chat/completions")) kind = SERVE_API_CHAT;
    else if (path_is(req, "/v1/completions")) kind = SERVE_API_COMPLETION;
    else {
        reply_error(req, 404, "no such route on this model worker", "invalid_request_error", NULL, "not_found");
        return 0;
    }
    if (!post_req) {
        reply_error(req, 405, "use POST", "invalid_request_error", NULL, "method_not_allowed");
        return 0;
    }
    struct call *c = xcalloc(1, sizeof *c);
    c->srv = s;
    char param[64];
    struct whet_err err;
    struct serve_api_limits lim = {.max_n = s->o->engine.n_slots, .max_len = s->o->engine.max_len};
    if (serve_api_parse(&c->api, kind, req->entity.base, req->entity.len, serve_engine_tokenizer(s->engine),
                        serve_engine_chat_template(s->engine), &lim, param, sizeof param, &err)) {
        reply_error(req, 400, err.msg, "invalid_request_error", param, "invalid_value");
        call_free(c);
        return 0;
    }
    /* The gateway names a tenant's adapter by where it is stored (it resolved the model and checked the
     * tenant); a worker is reachable by the gateway alone. */
    if ((c->adapter_prefix = serve_header(req, "x-whet-adapter"))) {
        if (!s->store) {
            reply_error(req, 503, "this model worker has no object store to fetch adapters from (--object-store)",
                        "server_error", NULL, "adapter_unavailable");
            call_free(c);
            return 0;
        }
        c->data_key = serve_header(req, "x-whet-data-key");
    } else if (resolve_model(s->o, c->api.model, &c->adapter_dir)) {
        char msg[300];
        snprintf(msg, sizeof msg, "The model `%.200s` does not exist or you do not have access to it.", c->api.model);
        reply_error(req, 404, msg, "invalid_request_error", "model", "model_not_found");
        call_free(c);
        return 0;
    }
    c->report_usage = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-whet-usage"), -1) >= 0;
    uint64_t rid;
    whet_random_bytes(&rid, sizeof rid);
    snprintf(c->id, sizeof c->id, "%s-%016llx", kind == SERVE_API_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)rid);
    c->created = (long long)time(NULL);
    c->arrived = whet_now_mono();
    c->choices = xcalloc((size_t)c->api.n, sizeof *c->choices);
    c->req = req;
    *(struct call **)h2o_mem_alloc_shared(&req->pool, sizeof(struct call *), on_request_disposed) = c;
    if (c->api.stream) {
        c->streaming = 1;
        c->gen.proceed = stream_proceed;
        c->gen.stop = stream_stop;
        req->res.status = 200;
        req->res.reason = "OK";
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("text/event-stream"));
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
        serve_metrics_answer(200);
        h2o_start_response(req, &c->gen);
    }
    pthread_mutex_lock(&s->mu);
    if (c->adapter_prefix) {
        *s->fetch_tail = c;
        s->fetch_tail = &c->next_submit;
        pthread_cond_signal(&s->fetch_cv);
    } else {
        queue_submit(s, c);
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* ---------------------------------------------------------------- the server */

static void on_accept(h2o_socket_t *listener, const char *err) {
    struct server *s = listener->data;
    h2o_socket_t *sock;
    if (!err && (sock = h2o_evloop_socket_accept(listener))) h2o_accept(&s->accept, sock);
}

int serve_http_run(const struct serve_http_opts *o, struct whet_err *err) {
    static struct server s;
    memset(&s, 0, sizeof s);
    s.o = o;
    s.started = (long long)time(NULL);
    char bound[300];
    int fd = whet_tcp_bind("--http", o->http, bound, sizeof bound, err);
    if (fd < 0) return -1;
    if (serve_engine_open(&s.engine, &o->engine, err)) {
        close(fd);
        return -1;
    }
    if (o->object_store && serve_store_open(&s.store, o->object_store, o->cache_dir, err)) {
        serve_engine_close(s.engine);
        close(fd);
        return -1;
    }
    /* Bound before the model loads (a port in use fails at once), connections refused until it has: the
     * gateway waits for a cold start by connecting (gateway/inference.c). */
    if (listen(fd, SOMAXCONN)) {
        whet_errf(err, "--http %s: %s", o->http, strerror(errno));
        serve_store_close(s.store);
        serve_engine_close(s.engine);
        close(fd);
        return -1;
    }
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    pthread_cond_init(&s.fetch_cv, NULL);
    s.submit_tail = &s.submit_head;
    s.fetch_tail = &s.fetch_head;
    h2o_config_init(&s.config);
    s.config.server_name = h2o_iovec_init(H2O_STRLIT("whet-serve"));
    s.config.max_request_entity_size = 4 << 20; /* a prompt of 4 MiB is far past any context; h2o answers 413 */
    h2o_hostconf_t *host = h2o_config_register_host(&s.config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    h2o_handler_t *handler = h2o_create_handler(path, sizeof(*handler) + sizeof(struct server *));
    handler->on_req = on_req;
    *(struct server **)(handler + 1) = &s;
    h2o_context_init(&s.ctx, h2o_evloop_create(), &s.config);
    s.accept.ctx = &s.ctx;
    s.accept.hosts = s.config.hosts;
    h2o_multithread_register_receiver(s.ctx.queue, &s.receiver, on_messages);
    struct serve_sessions_opts so = {.max_sessions = o->max_sessions, .idle_timeout_s = o->session_idle_s,
                                     .object_store = o->object_store, .cache_dir = o->cache_dir,
                                     .max_len = o->engine.max_len, .max_n = o->engine.n_slots,
                                     .max_pass_tokens = o->max_train_tokens};
    if (o->training && serve_sessions_open(&s.sessions, &so, s.engine, &s.ctx, wake_engine, &s, err)) {
        serve_store_close(s.store);
        serve_engine_close(s.engine);
        close(fd);
        return -1;
    }
    s.listener = h2o_evloop_socket_create(s.ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    s.listener->data = &s;
    h2o_socket_read_start(s.listener, on_accept);
    pthread_create(&s.engine_thread, NULL, engine_main, &s);
    if (s.store) pthread_create(&s.fetch_thread, NULL, fetch_main, &s);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (o->address_file) { /* whole or not at all: a reader that sees the file sees the address */
        char line[320];
        int len = snprintf(line, sizeof line, "%s\n", bound);
        struct whet_err ferr;
        if (whet_write_file_atomic(o->address_file, line, (size_t)len, &ferr))
            log_warn("msg=\"cannot write the address file\" error=\"%s\"", ferr.msg);
    }
    log_info("msg=\"serving\" address=%s model=%s adapters=%d slots=%d max_len=%d", bound, o->name, o->n_adapters,
             o->engine.n_slots, o->engine.max_len);
    while (!stop_signal) {
        h2o_evloop_run(s.ctx.loop, 100);
        serve_sessions_tick(s.sessions);
    }
    log_info("msg=\"stopping\" signal=%d", (int)stop_signal);
    h2o_socket_read_stop(s.listener);
    h2o_socket_close(s.listener);
    pthread_mutex_lock(&s.mu);
    s.stop = 1;
    pthread_cond_signal(&s.cv);
    pthread_cond_signal(&s.fetch_cv);
    pthread_mutex_unlock(&s.mu);
    pthread_join(s.engine_thread, NULL);
    if (s.store) pthread_join(s.fetch_thread, NULL);
    serve_store_close(s.store);
    h2o_evloop_run(s.ctx.loop, 0); /* the engine's last messages: calls whose client left are freed */
    serve_sessions_close(s.sessions);
    serve_engine_close(s.engine);
    free(s.cancels);
    /* the process exits next: h2o 2.2 cannot close idle keep-alive connections from outside, so the
     * loop and its context are left to the exit */
    return 0;
}
