/* serve_session_http.c - training sessions over HTTP on the model worker (see serve_session_http.h).
 *
 * An `op` is one call: made on the loop thread from a checked body, queued (ss->queue, under ss->mu),
 * moved by the engine thread to its own ordered list (ss->todo) and run from there when its session is
 * free: not sampling, and no earlier call of it still waiting. Its answer (status and JSON body) goes
 * back as a message; the op is freed when both the answer has been handled and h2o is done with the
 * request, as serve_http.c's calls. */
#include "serve_session_http.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "crypto.h"
#include "log.h"
#include "model.h"
#include "objstore.h"
#include "serve_api.h"
#include "serve_metrics.h"
#include "serve_session.h"
#include "serve_store.h"
#include "tokenizer.h"

#define PREFIX "/v1/training_sessions"
#define MAX_DATA 1024
#define MAX_LORA_R 256

enum op_kind { OP_CREATE, OP_FORWARD_BACKWARD, OP_OPTIM_STEP, OP_SAMPLE, OP_SAVE, OP_DELETE };

struct sample_seq {
    struct whet_buf text;
    int *tokens, n, cap;
    float *logprobs;
    enum serve_finish finish;
};

struct op {
    h2o_multithread_message_t super;
    struct serve_sessions *ss;
    enum op_kind kind;
    char session[64];
    /* loop side */
    h2o_req_t *req; /* NULL once h2o has disposed of it */
    int answered;
    /* inputs */
    struct serve_session_lora lora;
    char *adapter_prefix, *save_prefix, *save_model;
    char *data_key;     /* x-whet-data-key: the tenant's wrapped data key */
    char *state_prefix; /* x-whet-session-state: where the session's state is kept (persist); NULL: nowhere */
    struct serve_fb fb;
    struct serve_adam adam;
    struct serve_api_request sample; /* prompt, n, max_tokens, sampling */
    /* engine side: a running sample */
    struct serve_session *running;
    struct sample_seq *seqs;
    int n_finished;
    /* the answer */
    int status;
    char *body;
    /* x-whet-usage in the request: the gateway meters the call. A forward_backward or sample answered 200
     * reports the tokens of its answer's `usage` as "TRAIN PREFILL SAMPLE" in the header x-whet-usage
     * (the gateway takes it out, gateway/training_sessions.c); empty: nothing to report. */
    int report_usage;
    char usage[64];
    struct op *next;
};

struct serve_sessions {
    struct serve_sessions_opts o;
    struct serve_engine *engine;
    h2o_multithread_receiver_t receiver;
    void (*wake)(void *);
    void *wake_ctx;
    pthread_mutex_t mu;
    struct op *queue, **queue_tail; /* loop -> engine, under mu */
    int expire_due;                 /* under mu */
    double last_tick;               /* loop thread */
    /* engine thread */
    struct op *todo;
    int again;           /* an op waiting in todo may run now */
    double gather_until; /* whet_now_mono() until which a pass waits for the sessions of the last one */
    struct serve_session **sessions;
    int n_sessions;
    struct serve_store *store; /* initial adapters and saves */
};

/* ---------------------------------------------------------------- answers (loop thread) */

static void reply_json(h2o_req_t *req, int status, const char *body) {
    serve_metrics_answer(status);
    req->res.status = status;
    req->res.reason = status == 200   ? "OK"
                      : status == 404 ? "Not Found"
                      : status == 409 ? "Conflict"
                      : status == 503 ? "Service Unavailable"
                      : status >= 500 ? "Internal Server Error"
                                      : "Bad Request";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("application/json"));
    h2o_send_inline(req, body, strlen(body));
}

static void reply_err(h2o_req_t *req, int status, const char *message, const char *param) {
    const char *code = status == 404   ? "not_found"
                       : status == 409 ? "conflict"
                       : status >= 500 ? "server_error"
                                       : "invalid_value";
    char *body = serve_api_error(message, status >= 500 ? "server_error" : "invalid_request_error",
                                 param && *param ? param : NULL, code);
    reply_json(req, status, body);
    free(body);
}

static void op_free(struct op *op) {
    for (int d = 0; op->fb.data && d < op->fb.n_data; d++) {
        struct serve_datum *x = &op->fb.data[d];
        free(x->input), free(x->targets), free(x->weights), free(x->advantages), free(x->logprobs);
    }
    free(op->fb.data);
    free(op->fb.logprobs);
    for (int i = 0; op->seqs && i < op->sample.n; i++) {
        whet_buf_free(&op->seqs[i].text);
        free(op->seqs[i].tokens), free(op->seqs[i].logprobs);
    }
    free(op->seqs);
    serve_api_request_free(&op->sample);
    free(op->adapter_prefix), free(op->save_prefix), free(op->save_model), free(op->data_key), free(op->state_prefix),
        free(op->body);
    free(op);
}

static void on_disposed(void *p) {
    struct op *op = *(struct op **)p;
    op->req = NULL;
    if (op->answered) op_free(op);
}

static void on_answers(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages) {
    while (!h2o_linklist_is_empty(messages)) {
        struct op *op = H2O_STRUCT_FROM_MEMBER(struct op, super.link, messages->next);
        h2o_linklist_unlink(&op->super.link);
        op->answered = 1;
        if (!op->req) {
            op_free(op);
            continue;
        }
        char *body = op->body;
        op->body = NULL;
        if (op->report_usage && op->status == 200 && op->usage[0])
            h2o_add_header_by_str(&op->req->pool, &op->req->res.headers, H2O_STRLIT("x-whet-usage"), 0, NULL,
                                  op->usage, strlen(op->usage));
        reply_json(op->req, op->status, body); /* h2o may dispose of the request (and free op) here */
        free(body);
    }
}

/* ---------------------------------------------------------------- the engine thread */

static void answer(struct op *op, int status, char *body) {
    op->status = status, op->body = body;
    h2o_multithread_send_message(&op->ss->receiver, &op->super);
}

static void answer_err(struct op *op, int status, const char *message) {
    const char *code = status == 404   ? "not_found"
                       : status == 409 ? "conflict"
                       : status == 503 ? "unavailable"
                       : status >= 500 ? "server_error"
                                       : "invalid_value";
    answer(op, status, serve_api_error(message, status >= 500 ? "server_error" : "invalid_request_error", NULL, code));
}

static void answer_not_found(struct op *op) {
    char msg[160];
    snprintf(msg, sizeof msg, "no training session %s on this worker (it may have expired)", op->session);
    answer_err(op, 404, msg);
}

static int find_session(struct serve_sessions *ss, const char *id) {
    for (int i = 0; i < ss->n_sessions; i++)
        if (!strcmp(ss->sessions[i]->id, id)) return i;
    return -1;
}

static void put_real(struct whet_buf *b, double v) {
    if (isfinite(v)) whet_buf_printf(b, "%.9g", v);
    else whet_buf_puts(b, "null");
}

/* Session s joins those the worker holds (it owns it now). */
static void add_session(struct serve_sessions *ss, struct serve_session *s) {
    ss->sessions = xrealloc(ss->sessions, sizeof *ss->sessions * (size_t)(ss->n_sessions + 1));
    ss->sessions[ss->n_sessions++] = s;
}

static void answer_deleted(struct op *op) {
    answer(op, 200, xasprintf("{\"id\":\"%s\",\"object\":\"training_session.deleted\",\"deleted\":true}", op->session));
}

/* The session's state after its create or an optim_step, where the gateway keeps it (op->state_prefix, PREFIX):
 * PREFIX/step-N (N its optimizer steps; serve_session_save_state's files, sealed with the tenant's key when the
 * call carried one), then PREFIX/LATEST naming N, then the step before removed. A worker that dies at any point
 * leaves LATEST naming a whole state. Nothing without a prefix. */
static int persist(struct serve_sessions *ss, const struct serve_session *s, const struct op *op,
                   struct whet_err *err) {
    if (!op->state_prefix) return 0;
    struct objstore *objects = serve_store_objects(ss->store, op->data_key, err);
    if (!objects) return -1;
    int step = model_adam_step_count(s->view);
    char tmpl[] = "/tmp/whet-session-state-XXXXXX", n[16];
    if (!mkdtemp(tmpl)) return whet_errf(err, "cannot make a temporary dir for a session's state: %s", strerror(errno));
    snprintf(n, sizeof n, "%d", step);
    char *prefix = xasprintf("%s/step-%d", op->state_prefix, step), *latest = xasprintf("%s/LATEST", op->state_prefix);
    int rc = serve_session_save_state(s, tmpl, err) || objstore_put_dir(objects, prefix, tmpl, err) ||
             objstore_put(objects, latest, n, strlen(n), err);
    whet_rm_rf(tmpl);
    free(prefix), free(latest);
    if (rc) return whet_err_prefix(err, "the training session's state at %s", op->state_prefix);
    if (step > 0) { /* a leftover of the step before costs storage, not correctness */
        char *before = xasprintf("%s/step-%d", op->state_prefix, step - 1);
        struct whet_err left;
        if (objstore_delete_dir(objects, before, &left))
            log_warn("msg=\"a training session's state of the step before is left in the object store\" prefix=%s "
                     "error=\"%s\"",
                     before, left.msg);
        free(before);
    }
    return 0;
}

/* Session op->session, which this worker does not hold, from the state persist kept at op->state_prefix: its
 * index in ss->sessions, or -1 with op answered (404 when there is no state: the session was deleted). */
static int restore(struct serve_sessions *ss, struct op *op) {
    struct whet_err err;
    struct objstore *objects = serve_store_objects(ss->store, op->data_key, &err);
    if (!objects) {
        answer_err(op, 503, err.msg);
        return -1;
    }
    if (ss->n_sessions >= ss->o.max_sessions) {
        char msg[160];
        snprintf(msg, sizeof msg, "this worker holds its maximum of %d training sessions and cannot take over %s",
                 ss->o.max_sessions, op->session);
        answer_err(op, 503, msg);
        return -1;
    }
    char *latest = xasprintf("%s/LATEST", op->state_prefix), *text = NULL, *end;
    size_t len;
    int rc = objstore_get(objects, latest, &text, &len, 32, &err);
    free(latest);
    if (rc == OBJSTORE_NOT_FOUND) {
        answer_not_found(op);
        return -1;
    }
    long step = rc ? -1 : strtol(text, &end, 10);
    if (!rc && (end == text || *end || step < 0))
        rc = whet_errf(&err, "%s/LATEST: expected a step number, got \"%.16s\"", op->state_prefix, text);
    free(text);
    char *prefix = rc ? NULL : xasprintf("%s/step-%ld", op->state_prefix, step);
    char *dir = rc ? NULL : serve_store_fetch(ss->store, prefix, op->data_key, &err);
    struct serve_session *s = NULL;
    rc = !dir || serve_session_restore(&s, serve_engine_base(ss->engine), op->session, dir, &err);
    if (dir) whet_rm_rf(dir); /* of no use once loaded */
    free(dir), free(prefix);
    if (rc) {
        log_error("msg=\"a training session could not be restored\" session=%s prefix=%s error=\"%s\"", op->session,
                  op->state_prefix, err.msg);
        answer_err(op, 500, err.msg);
        return -1;
    }
    add_session(ss, s);
    log_info("msg=\"training session restored\" session=%s step=%ld prefix=%s", s->id, step, op->state_prefix);
    return ss->n_sessions - 1;
}

/* A deleted session's state goes with it (a failure is logged: the gateway forgot the session anyway). */
static void forget_state(struct serve_sessions *ss, const struct op *op) {
    struct whet_err err;
    struct objstore *objects = op->state_prefix ? serve_store_objects(ss->store, op->data_key, &err) : NULL;
    if (op->state_prefix && (!objects || objstore_delete_dir(objects, op->state_prefix, &err)))
        log_warn("msg=\"a deleted training session's state is left in the object store\" prefix=%s error=\"%s\"",
                 op->state_prefix, err.msg);
}

static void run_create(struct serve_sessions *ss, struct op *op) {
    if (find_session(ss, op->session) >= 0) {
        answer_err(op, 409, "a training session of that id exists");
        return;
    }
    if (ss->n_sessions >= ss->o.max_sessions) {
        char msg[120];
        snprintf(msg, sizeof msg, "this worker holds its maximum of %d training sessions; delete one",
                 ss->o.max_sessions);
        answer_err(op, 503, msg);
        return;
    }
    struct whet_err err;
    char *dir = NULL;
    if (op->adapter_prefix && !(dir = serve_store_fetch(ss->store, op->adapter_prefix, op->data_key, &err))) {
        answer_err(op, 503, err.msg);
        return;
    }
    struct serve_session *s;
    int rc = serve_session_new(&s, serve_engine_base(ss->engine), op->session, &op->lora, dir, &err);
    free(dir);
    if (rc) {
        answer_err(op, 400, err.msg);
        return;
    }
    if (persist(ss, s, op, &err)) {
        serve_session_free(s);
        answer_err(op, 503, err.msg);
        return;
    }
    add_session(ss, s);
    log_info("msg=\"training session created\" session=%s params=%zu", s->id, model_num_trainable(s->view));
    answer(op, 200,
           xasprintf("{\"id\":\"%s\",\"object\":\"training_session\",\"trainable_parameters\":%zu}", s->id,
                     model_num_trainable(s->view)));
}

static void answer_forward_backward(struct op *op) {
    struct whet_buf b = {0};
    whet_buf_puts(&b, "{\"loss\":");
    put_real(&b, op->fb.loss_value);
    whet_buf_puts(&b, ",\"logprobs\":[");
    for (int d = 0, k = 0; d < op->fb.n_data; d++) {
        whet_buf_puts(&b, d ? ",[" : "[");
        for (int i = 0; i < op->fb.data[d].n; i++, k++) {
            if (i) whet_buf_puts(&b, ",");
            put_real(&b, op->fb.logprobs[k]);
        }
        whet_buf_puts(&b, "]");
    }
    int tokens = 0;
    for (int d = 0; d < op->fb.n_data; d++) tokens += op->fb.data[d].n;
    whet_buf_printf(&b, "],\"usage\":{\"train_tokens\":%d}}", tokens);
    snprintf(op->usage, sizeof op->usage, "%d 0 0", tokens);
    answer(op, 200, b.data);
}

/* The rows of a forward_backward call in a pass and the tokens of its longest. */
static void fb_shape(const struct op *op, int *rows, int *T) {
    *rows = op->fb.n_data, *T = 1;
    for (int d = 0; d < op->fb.n_data; d++)
        if (op->fb.data[d].n > *T) *T = op->fb.data[d].n;
}

/* The forward_backward calls of distinct sessions in one pass; its sessions are the next pass's to wait for,
 * for a tenth of its time (at most 0.1 s): enough for a client's answer, optim_step and next call. */
static void run_forward_backward(struct serve_sessions *ss, struct op **ops, int n) {
    struct serve_fb *fbs = xmalloc(sizeof *fbs * (size_t)n);
    for (int i = 0; i < n; i++) fbs[i] = ops[i]->fb;
    struct whet_err err;
    double t0 = whet_now_mono();
    int rc = serve_session_forward_backward(serve_engine_base(ss->engine), fbs, n, &err);
    double t1 = whet_now_mono();
    ss->gather_until = t1 + (t1 - t0 < 1 ? 0.1 * (t1 - t0) : 0.1);
    for (int i = 0; i < ss->n_sessions; i++) ss->sessions[i]->pass_rows = 0;
    for (int i = 0; i < n && !rc; i++) fb_shape(ops[i], &fbs[i].session->pass_rows, &fbs[i].session->pass_T);
    log_debug("msg=\"forward_backward pass\" sessions=%d seconds=%.3f", n, t1 - t0);
    if (rc) log_error("msg=\"forward_backward failed\" sessions=%d error=\"%s\"", n, err.msg);
    for (int i = 0; i < n; i++) {
        ops[i]->fb = fbs[i];
        if (rc) answer_err(ops[i], 500, err.msg);
        else answer_forward_backward(ops[i]);
    }
    free(fbs);
}

static void run_optim_step(struct serve_sessions *ss, struct serve_session *s, struct op *op) {
    float norm = serve_session_optim_step(s, &op->adam);
    struct whet_err err;
    /* The step is applied either way, so the call succeeds; a state that could not be kept is said in the
     * answer ("state_saved": false) and the log, and the next optim_step tries again. Failing the call
     * would invite a retry, which would apply a second step. */
    int saved = persist(ss, s, op, &err) == 0;
    if (!saved)
        log_warn("msg=\"a training session's state was not saved: should the worker end, the session goes on from "
                 "its last saved step\" session=%s error=\"%s\"",
                 s->id, err.msg);
    struct whet_buf b = {0};
    whet_buf_printf(&b, "{\"step\":%d,\"grad_norm\":", model_adam_step_count(s->view));
    put_real(&b, norm);
    whet_buf_printf(&b, ",\"state_saved\":%s}", saved ? "true" : "false");
    answer(op, 200, b.data);
}

static void run_save(struct serve_sessions *ss, struct serve_session *s, struct op *op) {
    struct whet_err err;
    struct objstore *objects = ss->store ? serve_store_objects(ss->store, op->data_key, &err) : NULL;
    if (!objects) {
        answer_err(op, 503, ss->store ? err.msg : "this model worker has no object store to save to (--object-store)");
        return;
    }
    char *prefix = op->save_prefix ? xstrdup(op->save_prefix)
                                   : xasprintf("sessions/%s/step-%d", s->id, model_adam_step_count(s->view));
    char tmpl[] = "/tmp/whet-session-save-XXXXXX";
    int rc = mkdtemp(tmpl) ? 0 : whet_errf(&err, "cannot make a temporary dir for the adapter");
    if (!rc) rc = model_save_adapter(s->view, tmpl, &err) || objstore_put_dir(objects, prefix, tmpl, &err);
    whet_rm_rf(tmpl);
    if (rc) answer_err(op, 500, err.msg);
    else if (op->save_model)
        answer(op, 200, xasprintf("{\"checkpoint\":\"%s\",\"step\":%d,\"model\":\"%s\"}", prefix,
                                  model_adam_step_count(s->view), op->save_model));
    else answer(op, 200, xasprintf("{\"checkpoint\":\"%s\",\"step\":%d}", prefix, model_adam_step_count(s->view)));
    free(prefix);
}

/* Frees session i; the log line sums what it did (the gateway meters each call: x-whet-usage, above). */
static void remove_session(struct serve_sessions *ss, int i, const char *why) {
    const struct serve_session *s = ss->sessions[i];
    log_info("msg=\"training session %s\" session=%s trained_tokens=%lld prefill_tokens=%lld sampled_tokens=%lld", why,
             s->id, s->trained_tokens, s->prefill_tokens, s->sampled_tokens);
    serve_session_free(ss->sessions[i]);
    ss->sessions[i] = ss->sessions[--ss->n_sessions];
}

/* ---- sample: a request of the engine with the session's adapter */

static void on_sample_event(void *ctx, const struct serve_event *ev) {
    struct op *op = ctx;
    struct sample_seq *q = &op->seqs[ev->choice];
    if (ev->finish == SERVE_RUNNING) {
        if (q->n == q->cap) {
            q->cap = q->cap ? 2 * q->cap : 16;
            q->tokens = xrealloc(q->tokens, sizeof *q->tokens * (size_t)q->cap);
            q->logprobs = xrealloc(q->logprobs, sizeof *q->logprobs * (size_t)q->cap);
        }
        q->tokens[q->n] = ev->token, q->logprobs[q->n++] = ev->logprob;
        whet_buf_append(&q->text, ev->text, ev->text_len);
        return;
    }
    q->finish = ev->finish;
    op->running->sampled_tokens += ev->completion_tokens;
    if (++op->n_finished < op->sample.n) return;
    op->running->prefill_tokens += ev->prompt_tokens;
    op->running->sampling--;
    op->running->last_used = whet_now_mono();
    op->ss->again = 1;
    if (ev->finish == SERVE_ERROR || ev->finish == SERVE_CANCELLED) {
        answer_err(op, 500, ev->text_len ? ev->text : "the sample was stopped");
        return;
    }
    struct whet_buf b = {0};
    json_t *text;
    whet_buf_puts(&b, "{\"sequences\":[");
    for (int c = 0; c < op->sample.n; c++) {
        const struct sample_seq *s = &op->seqs[c];
        whet_buf_puts(&b, c ? ",{\"tokens\":[" : "{\"tokens\":[");
        for (int i = 0; i < s->n; i++) whet_buf_printf(&b, i ? ",%d" : "%d", s->tokens[i]);
        whet_buf_puts(&b, "],\"logprobs\":[");
        for (int i = 0; i < s->n; i++) {
            if (i) whet_buf_puts(&b, ",");
            put_real(&b, s->logprobs[i]);
        }
        text = json_stringn(s->text.data ? s->text.data : "", s->text.len);
        char *quoted = text ? json_dumps(text, JSON_ENCODE_ANY) : NULL;
        whet_buf_printf(&b, "],\"text\":%s,\"stop_reason\":\"%s\"}", quoted ? quoted : "\"\"",
                        serve_api_finish_reason(s->finish));
        free(quoted);
        json_decref(text);
    }
    whet_buf_printf(&b, "],\"usage\":{\"prompt_tokens\":%d,\"sample_tokens\":", op->sample.n_prompt);
    int sampled = 0;
    for (int c = 0; c < op->sample.n; c++) sampled += op->seqs[c].n;
    whet_buf_printf(&b, "%d}}", sampled);
    snprintf(op->usage, sizeof op->usage, "0 %d %d", op->sample.n_prompt, sampled);
    answer(op, 200, b.data);
}

static void run_sample(struct serve_sessions *ss, struct serve_session *s, struct op *op) {
    struct serve_request r = serve_api_engine_request(&op->sample, on_sample_event, op);
    r.view = s->view;
    op->seqs = xcalloc((size_t)op->sample.n, sizeof *op->seqs);
    uint64_t id;
    struct whet_err err;
    if (serve_engine_submit(ss->engine, &r, &id, &err)) {
        answer_err(op, 400, err.msg);
        return;
    }
    op->running = s;
    s->sampling++;
}

/* Runs op now (its session free); 1 when it is a forward_backward to join the pass being gathered. */
static int run_op(struct serve_sessions *ss, struct op *op) {
    if (op->kind == OP_CREATE) {
        run_create(ss, op);
        return 0;
    }
    int i = find_session(ss, op->session);
    if (i < 0 && op->state_prefix && op->kind != OP_DELETE && (i = restore(ss, op)) < 0) return 0;
    if (i < 0 && op->kind == OP_DELETE && op->state_prefix) { /* held by a worker that ended: its state goes */
        forget_state(ss, op);
        answer_deleted(op);
        return 0;
    }
    if (i < 0) {
        answer_not_found(op);
        return 0;
    }
    struct serve_session *s = ss->sessions[i];
    s->last_used = whet_now_mono();
    switch (op->kind) {
    case OP_FORWARD_BACKWARD: op->fb.session = s; return 1;
    case OP_OPTIM_STEP: run_optim_step(ss, s, op); break;
    case OP_SAMPLE: run_sample(ss, s, op); break;
    case OP_SAVE: run_save(ss, s, op); break;
    case OP_DELETE:
        remove_session(ss, i, "deleted");
        forget_state(ss, op);
        answer_deleted(op);
        break;
    case OP_CREATE: break;
    }
    return 0;
}

/* Whether an op of session `id` waits (is blocked) in ops[0..n). */
static int blocked(struct op **ops, int n, const char *id) {
    for (int i = 0; i < n; i++)
        if (!strcmp(ops[i]->session, id)) return 1;
    return 0;
}

/* Whether a session of the last pass, not sampling, has not called forward_backward again yet, and its call
 * would fit one pass with those waiting (the shape of its last call standing for the next one's). */
static int cycle_incomplete(const struct serve_sessions *ss) {
    int rows = 0, T = 0, r, t, missing = 0;
    for (const struct op *op = ss->todo; op; op = op->next)
        if (op->kind == OP_FORWARD_BACKWARD) fb_shape(op, &r, &t), rows += r, T = t > T ? t : T;
    for (int i = 0; i < ss->n_sessions; i++) {
        const struct serve_session *s = ss->sessions[i];
        if (!s->pass_rows || s->sampling) continue;
        const struct op *op = ss->todo;
        while (op && (op->kind != OP_FORWARD_BACKWARD || strcmp(op->session, s->id))) op = op->next;
        if (op) continue;
        missing = 1, rows += s->pass_rows, T = s->pass_T > T ? s->pass_T : T;
    }
    return missing && (long long)rows * T <= ss->o.max_pass_tokens;
}

static void expire(struct serve_sessions *ss) {
    double now = whet_now_mono();
    for (int i = ss->n_sessions - 1; i >= 0; i--) {
        struct serve_session *s = ss->sessions[i];
        int waiting = 0;
        for (struct op *op = ss->todo; op && !waiting; op = op->next) waiting = !strcmp(op->session, s->id);
        if (s->sampling || waiting || now - s->last_used < ss->o.idle_timeout_s) continue;
        remove_session(ss, i, "expired");
    }
}

int serve_sessions_pending(struct serve_sessions *ss) {
    if (!ss) return 0;
    pthread_mutex_lock(&ss->mu);
    int pending = ss->queue || ss->expire_due;
    pthread_mutex_unlock(&ss->mu);
    return pending || ss->again;
}

void serve_sessions_run(struct serve_sessions *ss) {
    if (!ss) return;
    pthread_mutex_lock(&ss->mu);
    struct op *in = ss->queue;
    int expire_due = ss->expire_due;
    ss->queue = NULL, ss->queue_tail = &ss->queue, ss->expire_due = 0;
    pthread_mutex_unlock(&ss->mu);
    struct op **tail = &ss->todo;
    while (*tail) tail = &(*tail)->next;
    *tail = in;
    ss->again = 0;
    /* Clock cycles, as Tinker's: sessions that train in lock-step (forward_backward, optim_step, again) would
     * drift into several smaller passes, the first call back starting a pass alone; so while a session of
     * the last pass has not called again, for a moment (gather_until), the forward_backward calls wait. */
    int gather = whet_now_mono() < ss->gather_until && cycle_incomplete(ss);
    /* in order: an op whose session samples, or has an earlier op waiting or in the pass, waits */
    int n_todo = 0, n_waiting = 0, n_pass = 0;
    for (struct op *op = ss->todo; op; op = op->next) n_todo++;
    struct op **waiting = xmalloc(sizeof *waiting * (size_t)(n_todo + 1)),
              **pass = xmalloc(sizeof *pass * (size_t)(n_todo + 1));
    struct op *keep = NULL, **keep_tail = &keep;
    int pass_rows = 0, pass_T = 0; /* the pass's padded batch: at most max_pass_tokens */
    for (struct op *op = ss->todo, *next; op; op = next) {
        next = op->next;
        op->next = NULL;
        int i = op->kind == OP_CREATE ? -1 : find_session(ss, op->session), rows = 0, T = 0;
        if (op->kind == OP_FORWARD_BACKWARD) fb_shape(op, &rows, &T);
        if (T < pass_T) T = pass_T;
        int busy = blocked(waiting, n_waiting, op->session) || blocked(pass, n_pass, op->session) ||
                   (i >= 0 && ss->sessions[i]->sampling) || (gather && op->kind == OP_FORWARD_BACKWARD) ||
                   (n_pass && rows && (long long)(pass_rows + rows) * T > ss->o.max_pass_tokens);
        if (busy) {
            waiting[n_waiting++] = op;
            *keep_tail = op, keep_tail = &op->next;
        } else if (run_op(ss, op)) {
            pass[n_pass++] = op;
            pass_rows += rows, pass_T = T;
        }
    }
    ss->todo = keep;
    if (n_pass) run_forward_backward(ss, pass, n_pass);
    /* what waited only on the pass may run now; what waits on a sample runs when it ends */
    for (int i = 0; i < n_waiting && !ss->again; i++) {
        int s = find_session(ss, waiting[i]->session);
        ss->again = s < 0 || !ss->sessions[s]->sampling;
    }
    free(waiting), free(pass);
    if (expire_due) expire(ss);
    if (gather && ss->again) usleep(1000); /* the engine polls until the cycle is whole or its moment is over */
}

/* ---------------------------------------------------------------- requests (loop thread) */

static int bad(char *param, size_t param_len, const char *name, struct whet_err *err, const char *problem) {
    snprintf(param, param_len, "%s", name);
    return whet_errf(err, "%s: %s", name, problem);
}

/* A number in [lo, hi] at root[name] (absent or null: keeps *out). */
static int number_at(const json_t *root, const char *name, double lo, double hi, int integer, double *out,
                     const char *where, char *param, size_t param_len, struct whet_err *err) {
    const json_t *v = json_object_get(root, name);
    char full[96];
    snprintf(full, sizeof full, "%s%s", where, name);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v) || (integer && !json_is_integer(v)))
        return bad(param, param_len, full, err, integer ? "expected an integer" : "expected a number");
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        snprintf(param, param_len, "%s", full);
        return whet_errf(err, "%s: %g is outside [%g, %g]", full, d, lo, hi);
    }
    *out = d;
    return 0;
}

/* An array of n numbers (n < 0: any length, set): token ids in [0, vocab) when vocab > 0, else finite
 * reals. */
static int array_at(const json_t *v, const char *name, int *n, int vocab, int **ids, float **reals, char *param,
                    size_t param_len, struct whet_err *err) {
    if (!json_is_array(v)) return bad(param, param_len, name, err, "expected an array of numbers");
    int len = (int)json_array_size(v);
    if (*n >= 0 && len != *n) {
        snprintf(param, param_len, "%s", name);
        return whet_errf(err, "%s: expected %d values (one per position of model_input), got %d", name, *n, len);
    }
    *n = len;
    if (vocab > 0) *ids = xmalloc(sizeof(int) * (size_t)(len ? len : 1));
    else *reals = xmalloc(sizeof(float) * (size_t)(len ? len : 1));
    for (int i = 0; i < len; i++) {
        const json_t *x = json_array_get(v, (size_t)i);
        if (vocab > 0) {
            json_int_t id = json_is_integer(x) ? json_integer_value(x) : -1;
            if (id < 0 || id >= vocab) {
                snprintf(param, param_len, "%s", name);
                return whet_errf(err, "%s[%d]: expected a token id in [0, %d)", name, i, vocab);
            }
            (*ids)[i] = (int)id;
        } else {
            double d = json_is_number(x) ? json_number_value(x) : NAN;
            if (!isfinite(d)) {
                snprintf(param, param_len, "%s", name);
                return whet_errf(err, "%s[%d]: expected a finite number", name, i);
            }
            (*reals)[i] = (float)d;
        }
    }
    return 0;
}

static int vocab_of(const struct serve_sessions *ss) {
    const struct model_config *mc = model_get_config(serve_engine_base(ss->engine));
    int tv = (int)tokenizer_vocab_size(serve_engine_tokenizer(ss->engine));
    return tv < mc->vocab_size ? tv : mc->vocab_size;
}

static int parse_create(struct op *op, const json_t *root, char *param, size_t param_len, struct whet_err *err) {
    op->lora = (struct serve_session_lora){.r = 16, .alpha = 32, .targets = LORA_ALL};
    whet_random_bytes(&op->lora.seed, sizeof op->lora.seed);
    const json_t *lora = json_object_get(root, "lora");
    if (!lora || json_is_null(lora)) return 0;
    if (!json_is_object(lora))
        return bad(param, param_len, "lora", err, "expected an object {r, alpha, target_modules}");
    double r = op->lora.r, alpha = -1, seed = -1;
    if (number_at(lora, "r", 1, MAX_LORA_R, 1, &r, "lora.", param, param_len, err) ||
        number_at(lora, "alpha", 1e-6, 1e6, 0, &alpha, "lora.", param, param_len, err) ||
        number_at(lora, "seed", 0, 9007199254740991.0, 1, &seed, "lora.", param, param_len, err))
        return -1;
    op->lora.r = (int)r;
    op->lora.alpha = alpha > 0 ? (float)alpha : (float)(2 * r);
    if (seed >= 0) op->lora.seed = (uint64_t)seed;
    const json_t *t = json_object_get(lora, "target_modules");
    if (t && !json_is_null(t)) {
        size_t n = json_is_string(t) ? 1 : json_is_array(t) ? json_array_size(t) : 0;
        op->lora.targets = 0;
        for (size_t i = 0; i < n; i++) {
            const json_t *name = json_is_string(t) ? t : json_array_get(t, i);
            unsigned bit = json_is_string(name) ? lora_target_from_name(json_string_value(name)) : 0;
            if (!bit)
                return bad(param, param_len, "lora.target_modules", err,
                           "expected \"all-linear\" or names of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
                           "down_proj");
            op->lora.targets |= bit;
        }
        if (!op->lora.targets) return bad(param, param_len, "lora.target_modules", err, "expected at least one module");
    }
    return 0;
}

static int parse_datum(struct serve_sessions *ss, struct op *op, const json_t *v, int d, char *param, size_t param_len,
                       struct whet_err *err) {
    struct serve_datum *x = &op->fb.data[d];
    char name[96];
    snprintf(name, sizeof name, "data[%d].model_input", d);
    x->n = -1;
    if (!json_is_object(v)) return bad(param, param_len, name, err, "expected {model_input, loss_fn_inputs}");
    const json_t *in = json_object_get(v, "model_input"), *inputs = json_object_get(v, "loss_fn_inputs");
    if (array_at(in, name, &x->n, vocab_of(ss), &x->input, NULL, param, param_len, err)) return -1;
    if (x->n == 0 || x->n > ss->o.max_len) {
        snprintf(param, param_len, "%s", name);
        return whet_errf(err, "%s: expected 1 to %d tokens, got %d", name, ss->o.max_len, x->n);
    }
    snprintf(name, sizeof name, "data[%d].loss_fn_inputs", d);
    if (!json_is_object(inputs)) return bad(param, param_len, name, err, "expected an object");
    struct {
        const char *key;
        float **out;
        int needed;
    } fields[] = {{"weights", &x->weights, op->fb.loss == SERVE_LOSS_CROSS_ENTROPY},
                  {"advantages", &x->advantages, op->fb.loss != SERVE_LOSS_CROSS_ENTROPY},
                  {"logprobs", &x->logprobs, op->fb.loss != SERVE_LOSS_CROSS_ENTROPY}};
    snprintf(name, sizeof name, "data[%d].loss_fn_inputs.target_tokens", d);
    int n = x->n;
    if (array_at(json_object_get(inputs, "target_tokens"), name, &n, vocab_of(ss), &x->targets, NULL, param, param_len,
                 err))
        return -1;
    for (size_t f = 0; f < WHET_ARRAY_LEN(fields); f++) {
        const json_t *a = json_object_get(inputs, fields[f].key);
        snprintf(name, sizeof name, "data[%d].loss_fn_inputs.%s", d, fields[f].key);
        if (!a || json_is_null(a)) {
            if (!fields[f].needed) continue;
            if (f > 0) return bad(param, param_len, name, err, "this loss_fn needs it");
            *fields[f].out = xmalloc(sizeof(float) * (size_t)x->n); /* no weights: every position counts */
            for (int i = 0; i < x->n; i++) (*fields[f].out)[i] = 1;
            continue;
        }
        if (array_at(a, name, &n, 0, NULL, fields[f].out, param, param_len, err)) return -1;
    }
    return 0;
}

static int parse_forward_backward(struct serve_sessions *ss, struct op *op, const json_t *root, char *param,
                                  size_t param_len, struct whet_err *err) {
    const json_t *loss = json_object_get(root, "loss_fn"), *data = json_object_get(root, "data");
    int l = json_is_string(loss) ? serve_loss_from_name(json_string_value(loss)) : -1;
    if (l < 0) return bad(param, param_len, "loss_fn", err, "expected cross_entropy, importance_sampling or ppo");
    op->fb.loss = (enum serve_loss)l;
    double lo = 0.8, hi = 1.2;
    const json_t *cfg = json_object_get(root, "loss_fn_config");
    if (cfg && !json_is_null(cfg) &&
        (!json_is_object(cfg) ||
         number_at(cfg, "clip_low_threshold", 0, 1, 0, &lo, "loss_fn_config.", param, param_len, err) ||
         number_at(cfg, "clip_high_threshold", 1, 1e6, 0, &hi, "loss_fn_config.", param, param_len, err)))
        return *param ? -1 : bad(param, param_len, "loss_fn_config", err, "expected an object");
    op->fb.clip_low = (float)lo, op->fb.clip_high = (float)hi;
    if (!json_is_array(data) || json_array_size(data) == 0 || json_array_size(data) > MAX_DATA)
        return bad(param, param_len, "data", err, "expected an array of 1 to 1024 data");
    op->fb.n_data = (int)json_array_size(data);
    op->fb.data = xcalloc((size_t)op->fb.n_data, sizeof *op->fb.data);
    for (int d = 0; d < op->fb.n_data; d++)
        if (parse_datum(ss, op, json_array_get(data, (size_t)d), d, param, param_len, err)) return -1;
    int rows, T;
    fb_shape(op, &rows, &T);
    if ((long long)rows * T > ss->o.max_pass_tokens) {
        snprintf(param, param_len, "data");
        return whet_errf(err,
                         "data: %d data padded to the longest (%d tokens) exceed the %d tokens of a pass here; split "
                         "the call",
                         rows, T, ss->o.max_pass_tokens);
    }
    return 0;
}

static int parse_optim_step(struct op *op, const json_t *root, char *param, size_t param_len, struct whet_err *err) {
    op->adam = serve_adam_default();
    const json_t *p = json_object_get(root, "adam_params");
    if (!p || json_is_null(p)) return 0;
    if (!json_is_object(p)) return bad(param, param_len, "adam_params", err, "expected an object");
    double lr = op->adam.learning_rate, b1 = op->adam.beta1, b2 = op->adam.beta2, eps = op->adam.eps,
           wd = op->adam.weight_decay, clip = 0;
    if (number_at(p, "learning_rate", 0, 10, 0, &lr, "adam_params.", param, param_len, err) ||
        number_at(p, "beta1", 0, 0.999999, 0, &b1, "adam_params.", param, param_len, err) ||
        number_at(p, "beta2", 0, 0.999999999, 0, &b2, "adam_params.", param, param_len, err) ||
        number_at(p, "eps", 0, 1, 0, &eps, "adam_params.", param, param_len, err) ||
        number_at(p, "weight_decay", 0, 10, 0, &wd, "adam_params.", param, param_len, err) ||
        number_at(p, "grad_clip_norm", 0, 1e9, 0, &clip, "adam_params.", param, param_len, err))
        return -1;
    op->adam = (struct serve_adam){(float)lr, (float)b1, (float)b2, (float)eps, (float)wd, (float)clip};
    return 0;
}

static int parse_sample(struct serve_sessions *ss, struct op *op, json_t *root, char *param, size_t param_len,
                        struct whet_err *err) {
    struct serve_api_request *r = &op->sample;
    const json_t *prompt = json_object_get(root, "prompt");
    if (json_is_array(prompt)) {
        r->n_prompt = -1;
        if (array_at(prompt, "prompt", &r->n_prompt, vocab_of(ss), &r->prompt, NULL, param, param_len, err)) return -1;
        if (r->n_prompt == 0) return bad(param, param_len, "prompt", err, "expected at least one token");
    } else {
        if (prompt && !json_is_null(prompt))
            return bad(param, param_len, "prompt", err, "expected an array of token ids (or messages)");
        r->kind = SERVE_API_CHAT;
        if (serve_api_prompt(r, root, serve_engine_tokenizer(ss->engine), serve_engine_chat_template(ss->engine), param,
                             param_len, err))
            return -1;
    }
    double max_tokens = 16, temperature = 1, top_p = 1, top_k = 0, n = 1, seed = -1;
    if (serve_api_stops(r, root, param, param_len, err) ||
        number_at(root, "max_tokens", 1, ss->o.max_len, 1, &max_tokens, "", param, param_len, err) ||
        number_at(root, "temperature", 0, 2, 0, &temperature, "", param, param_len, err) ||
        number_at(root, "top_p", 1e-9, 1, 0, &top_p, "", param, param_len, err) ||
        number_at(root, "top_k", 0, 1 << 20, 1, &top_k, "", param, param_len, err) ||
        number_at(root, "n", 1, ss->o.max_n, 1, &n, "", param, param_len, err) ||
        number_at(root, "num_samples", 1, ss->o.max_n, 1, &n, "", param, param_len, err) ||
        number_at(root, "seed", 0, 9007199254740991.0, 1, &seed, "", param, param_len, err))
        return -1;
    if (r->n_prompt + (int)max_tokens > ss->o.max_len) {
        snprintf(param, param_len, "max_tokens");
        return whet_errf(err, "the prompt (%d tokens) and max_tokens %d exceed the %d tokens a sequence may have here",
                         r->n_prompt, (int)max_tokens, ss->o.max_len);
    }
    r->n = (int)n, r->max_tokens = (int)max_tokens;
    r->sampling = (struct sample_row){.temperature = (float)temperature, .top_p = (float)top_p, .top_k = (int)top_k};
    if (seed >= 0) r->sampling.seed = (uint64_t)seed;
    else whet_random_bytes(&r->sampling.seed, sizeof r->sampling.seed);
    return 0;
}

char *serve_header(h2o_req_t *req, const char *name) {
    ssize_t h = h2o_find_header_by_str(&req->headers, name, strlen(name), -1);
    if (h < 0) return NULL;
    h2o_iovec_t v = req->headers.entries[h].value;
    char *s = xmalloc(v.len + 1);
    memcpy(s, v.base, v.len);
    s[v.len] = 0;
    return s;
}

/* Whether s is 1 to max-1 letters, digits, '-', '_' (and with slashes '/' and '.'): a session id, or a
 * prefix in the store, written into answers as it is. */
static int name_valid(const char *s, size_t max, const char *also) {
    size_t n = strlen(s);
    if (n == 0 || n >= max) return 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '-' || s[i] == '_' || (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= 'A' && s[i] <= 'Z') || strchr(also, s[i])))
            return 0;
    return 1;
}

/* The op a path and method name: kind and session id; -1 when it is none of the routes. */
static int route(h2o_req_t *req, enum op_kind *kind, char *id, size_t id_len) {
    size_t len = req->query_at != SIZE_MAX ? req->query_at : req->path.len, plen = strlen(PREFIX);
    const char *p = req->path.base;
    int post = h2o_memis(req->method.base, req->method.len, H2O_STRLIT("POST"));
    int del = h2o_memis(req->method.base, req->method.len, H2O_STRLIT("DELETE"));
    *id = 0;
    if (len == plen) {
        *kind = OP_CREATE;
        return post ? 0 : 405;
    }
    if (p[plen] != '/') return -1;
    const char *s = p + plen + 1, *end = p + len, *slash = memchr(s, '/', (size_t)(end - s));
    size_t n = (size_t)((slash ? slash : end) - s);
    if (n == 0 || n >= id_len) return 404;
    snprintf(id, id_len, "%.*s", (int)n, s);
    if (!slash) {
        *kind = OP_DELETE;
        return del ? 0 : 405;
    }
    static const struct {
        const char *name;
        enum op_kind kind;
    } ops[] = {{"forward_backward", OP_FORWARD_BACKWARD},
               {"optim_step", OP_OPTIM_STEP},
               {"sample", OP_SAMPLE},
               {"save", OP_SAVE}};
    for (size_t i = 0; i < WHET_ARRAY_LEN(ops); i++)
        if ((size_t)(end - slash - 1) == strlen(ops[i].name) && !memcmp(slash + 1, ops[i].name, strlen(ops[i].name))) {
            *kind = ops[i].kind;
            return post ? 0 : 405;
        }
    return 404;
}

int serve_sessions_on_req(struct serve_sessions *ss, h2o_req_t *req) {
    size_t len = req->query_at != SIZE_MAX ? req->query_at : req->path.len, plen = strlen(PREFIX);
    if (len < plen || memcmp(req->path.base, PREFIX, plen)) return 0;
    enum op_kind kind;
    char id[64];
    int rc = route(req, &kind, id, sizeof id);
    if (rc < 0) return 0;
    if (!ss) {
        reply_err(req, 404, "this model worker does not run training sessions (whet serve --training)", NULL);
        return 1;
    }
    if (rc) {
        reply_err(req, rc, rc == 405 ? "method not allowed on this route" : "no such route on this model worker", NULL);
        return 1;
    }
    struct op *op = xcalloc(1, sizeof *op);
    op->ss = ss, op->kind = kind;
    snprintf(op->session, sizeof op->session, "%s", id);
    char param[96] = "";
    struct whet_err err;
    json_error_t jerr;
    json_t *root = req->entity.len ? json_loadb(req->entity.base, req->entity.len, 0, &jerr) : json_object();
    rc = -1;
    if (!json_is_object(root)) {
        whet_errf(&err, "the body must be a JSON object (%s)", root ? "got another JSON value" : jerr.text);
    } else if (kind == OP_CREATE) {
        char *given = serve_header(req, "x-whet-session");
        op->adapter_prefix = serve_header(req, "x-whet-adapter");
        if (given && !name_valid(given, sizeof op->session, "")) {
            whet_errf(&err, "x-whet-session: expected 1 to 63 letters, digits, '-' or '_'");
        } else if (op->adapter_prefix && !ss->store) {
            whet_errf(&err, "this model worker has no object store to fetch adapters from (--object-store)");
        } else {
            uint64_t r;
            whet_random_bytes(&r, sizeof r);
            if (given) snprintf(op->session, sizeof op->session, "%s", given);
            else snprintf(op->session, sizeof op->session, "ts-%016llx", (unsigned long long)r);
            rc = parse_create(op, root, param, sizeof param, &err);
        }
        free(given);
    } else if (kind == OP_FORWARD_BACKWARD) {
        rc = parse_forward_backward(ss, op, root, param, sizeof param, &err);
    } else if (kind == OP_OPTIM_STEP) {
        rc = parse_optim_step(op, root, param, sizeof param, &err);
    } else if (kind == OP_SAMPLE) {
        rc = parse_sample(ss, op, root, param, sizeof param, &err);
    } else {
        rc = 0;
        if (kind == OP_SAVE && (op->save_prefix = serve_header(req, "x-whet-save-prefix")) &&
            !name_valid(op->save_prefix, 512, "/."))
            rc = whet_errf(&err, "x-whet-save-prefix: expected an object-store prefix of letters, digits, '-', '_', "
                                 "'.' and '/'");
        else if (kind == OP_SAVE && (op->save_model = serve_header(req, "x-whet-save-model")) &&
                 !name_valid(op->save_model, 512, ":."))
            rc = whet_errf(&err, "x-whet-save-model: expected a model name of letters, digits, '-', '_', '.' and ':'");
    }
    op->data_key = serve_header(req, "x-whet-data-key");
    /* a worker without an object store keeps its sessions in memory alone (logged when it starts) */
    if (!rc && ss->store && (op->state_prefix = serve_header(req, "x-whet-session-state")) &&
        !name_valid(op->state_prefix, 512, "/."))
        rc = whet_errf(&err, "x-whet-session-state: expected an object-store prefix of letters, digits, '-', '_', '.' "
                             "and '/'");
    json_decref(root);
    if (rc) {
        reply_err(req, 400, err.msg, param);
        op_free(op);
        return 1;
    }
    op->req = req;
    op->report_usage = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-whet-usage"), -1) >= 0;
    *(struct op **)h2o_mem_alloc_shared(&req->pool, sizeof(struct op *), on_disposed) = op;
    pthread_mutex_lock(&ss->mu);
    *ss->queue_tail = op;
    ss->queue_tail = &op->next;
    pthread_mutex_unlock(&ss->mu);
    ss->wake(ss->wake_ctx);
    return 1;
}

void serve_sessions_tick(struct serve_sessions *ss) {
    double now = whet_now_mono();
    if (!ss || now - ss->last_tick < 1) return;
    ss->last_tick = now;
    pthread_mutex_lock(&ss->mu);
    ss->expire_due = 1;
    pthread_mutex_unlock(&ss->mu);
    ss->wake(ss->wake_ctx);
}

int serve_tokenize_on_req(struct serve_engine *engine, h2o_req_t *req) {
    size_t len = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
    if (len != strlen("/v1/tokenize") || memcmp(req->path.base, "/v1/tokenize", len)) return 0;
    if (!h2o_memis(req->method.base, req->method.len, H2O_STRLIT("POST"))) {
        reply_err(req, 405, "use POST", NULL);
        return 1;
    }
    json_error_t jerr;
    json_t *root = json_loadb(req->entity.base, req->entity.len, 0, &jerr);
    struct serve_api_request r = {.kind = SERVE_API_CHAT};
    char param[96] = "";
    struct whet_err err;
    int32_t *ids = NULL;
    size_t n = 0;
    const json_t *text = json_object_get(root, "text");
    int rc = -1;
    if (!json_is_object(root))
        whet_errf(&err, "the body must be a JSON object (%s)", root ? "got another JSON value" : jerr.text);
    else if (json_is_string(text))
        rc = tokenizer_encode(serve_engine_tokenizer(engine), json_string_value(text), json_string_length(text), &ids,
                              &n, &err);
    else if (text && !json_is_null(text)) bad(param, sizeof param, "text", &err, "expected a string");
    else if (!(rc = serve_api_prompt(&r, root, serve_engine_tokenizer(engine), serve_engine_chat_template(engine),
                                     param, sizeof param, &err)))
        n = (size_t)r.n_prompt;
    json_decref(root);
    if (rc) {
        reply_err(req, 400, err.msg, param);
    } else {
        struct whet_buf b = {0};
        whet_buf_puts(&b, "{\"tokens\":[");
        for (size_t i = 0; i < n; i++) whet_buf_printf(&b, i ? ",%d" : "%d", ids ? (int)ids[i] : r.prompt[i]);
        whet_buf_printf(&b, "],\"count\":%zu}", n);
        reply_json(req, 200, b.data);
        whet_buf_free(&b);
    }
    free(ids);
    serve_api_request_free(&r);
    return 1;
}

/* ---------------------------------------------------------------- opening and closing */

int serve_sessions_open(struct serve_sessions **out, const struct serve_sessions_opts *o, struct serve_engine *engine,
                        h2o_context_t *ctx, void (*wake)(void *), void *wake_ctx, struct whet_err *err) {
    *out = NULL;
    struct serve_sessions *ss = xcalloc(1, sizeof *ss);
    ss->o = *o;
    ss->engine = engine, ss->wake = wake, ss->wake_ctx = wake_ctx;
    ss->queue_tail = &ss->queue;
    if (!o->object_store)
        log_warn("msg=\"no --object-store: training sessions live in this worker's memory alone, and end with it\"");
    if (o->object_store) {
        char *cache = xasprintf("%s/sessions", o->cache_dir);
        int rc = serve_store_open(&ss->store, o->object_store, cache, err);
        free(cache);
        if (rc) {
            free(ss);
            return -1;
        }
    }
    pthread_mutex_init(&ss->mu, NULL);
    h2o_multithread_register_receiver(ctx->queue, &ss->receiver, on_answers);
    *out = ss;
    return 0;
}

void serve_sessions_close(struct serve_sessions *ss) {
    if (!ss) return;
    for (int i = 0; i < ss->n_sessions; i++) serve_session_free(ss->sessions[i]);
    free(ss->sessions);
    serve_store_close(ss->store);
    pthread_mutex_destroy(&ss->mu);
    free(ss);
}
