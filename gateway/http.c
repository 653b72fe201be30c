/* http.c - request-scoped helpers for handlers (see http.h): reading parameters, headers and bodies,
 * request-pool memory, and every reply, each of which ends in http_reply_raw(), which counts the
 * request for /metrics, writes its log line and hands the response to h2o. */
#include "http.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "audit.h"
#include "json.h"
#include "json_text.h"
#include "log.h"
#include "server.h"
#include "utf8.h"
#include "util.h"

/* ---- Memory ------------------------------------------------------------------------------------ */

void *http_alloc(struct gw_req *r, size_t n) { return h2o_mem_alloc_pool(&r->req->pool, n); }

char *http_strndup(struct gw_req *r, const char *s, size_t n) {
    char *p = http_alloc(r, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *http_strdup(struct gw_req *r, const char *s) { return http_strndup(r, s, strlen(s)); }

char *http_printf(struct gw_req *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = http_alloc(r, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

static void free_slot(void *p) { free(*(void **)p); }

void http_free_later(struct gw_req *r, void *p) {
    void **slot = h2o_mem_alloc_shared(&r->req->pool, sizeof(void *), free_slot);
    *slot = p;
}

/* ---- Reading the request ----------------------------------------------------------------------- */

const char *http_path_param(struct gw_req *r, const char *name) {
    for (int i = 0; i < r->npath; i++)
        if (!strcmp(r->path_names[i], name)) return r->path_values[i];
    return NULL;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decodes (and '+' to space when `plus`) into the request's pool; *out_len (when not NULL)
 * gets the length, which a "%00" makes longer than strlen's. */
static char *url_decode(struct gw_req *r, const char *s, size_t len, int plus, size_t *out_len) {
    char *out = http_alloc(r, len + 1), *o = out;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%' && i + 2 < len && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
            *o++ = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        } else if (plus && s[i] == '+') {
            *o++ = ' ';
        } else {
            *o++ = s[i];
        }
    }
    *o = 0;
    if (out_len) *out_len = (size_t)(o - out);
    return out;
}

char *http_path_decode(struct gw_req *r, const char *s, size_t len) {
    size_t n;
    char *out = url_decode(r, s, len, 0, &n);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f) return NULL;
    return out;
}

struct query_cache {
    size_t n;
    struct http_kv *kv;
};

size_t http_query_params(struct gw_req *r, const struct http_kv **out) {
    struct query_cache *qc = r->query_cache;
    if (!qc) {
        qc = http_alloc(r, sizeof(*qc));
        qc->n = 0;
        qc->kv = NULL;
        h2o_req_t *req = r->req;
        if (req->query_at != SIZE_MAX) {
            const char *q = req->path.base + req->query_at + 1, *end = req->path.base + req->path.len;
            size_t cap = 1;
            for (const char *p = q; p < end; p++) cap += *p == '&';
            qc->kv = http_alloc(r, cap * sizeof(*qc->kv));
            while (q < end) {
                const char *amp = memchr(q, '&', (size_t)(end - q));
                if (!amp) amp = end;
                if (amp > q) {
                    const char *eq = memchr(q, '=', (size_t)(amp - q));
                    const char *kend = eq ? eq : amp;
                    qc->kv[qc->n].key = url_decode(r, q, (size_t)(kend - q), 1, NULL);
                    qc->kv[qc->n].value = eq ? url_decode(r, eq + 1, (size_t)(amp - eq - 1), 1, NULL) : "";
                    qc->n++;
                }
                q = amp + 1;
            }
        }
        r->query_cache = qc;
    }
    *out = qc->kv;
    return qc->n;
}

const char *http_query_param(struct gw_req *r, const char *name) {
    const struct http_kv *kv;
    size_t n = http_query_params(r, &kv);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(kv[i].key, name)) return kv[i].value;
    return NULL;
}

const char *http_header(struct gw_req *r, const char *name) {
    ssize_t i = h2o_find_header_by_str(&r->req->headers, name, strlen(name), -1);
    if (i < 0) return NULL;
    return http_strndup(r, r->req->headers.entries[i].value.base, r->req->headers.entries[i].value.len);
}

h2o_iovec_t http_body(struct gw_req *r) { return r->req->entity; }

json_t *http_body_json(struct gw_req *r) {
    h2o_iovec_t body = r->req->entity;
    if (!body.base || body.len == 0) {
        http_reply_error_hint(r, 400, NULL, "invalid_json", "send a JSON object", "the request body is empty");
        return NULL;
    }
    json_error_t jerr;
    json_t *obj = json_loadb(body.base, body.len, JSON_REJECT_DUPLICATES, &jerr);
    if (!obj) {
        struct whet_err e;
        whet_json_errf(&e, "the request body", &jerr);
        http_reply_err(r, 400, NULL, "invalid_json", &e);
        return NULL;
    }
    if (!json_is_object(obj)) {
        json_decref(obj);
        http_reply_error(r, 400, NULL, "invalid_json", "the request body must be a JSON object");
        return NULL;
    }
    return obj;
}

int http_body_keys_known(struct gw_req *r, const json_t *body, const char *const *keys) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)body, key, v) {
        const char *const *k = keys;
        while (*k && strcmp(*k, key) != 0) k++;
        if (!*k) {
            http_reply_error(r, 400, key, "invalid_request", "%s: unrecognized request argument supplied", key);
            return -1;
        }
    }
    return 0;
}

/* ---- Answering --------------------------------------------------------------------------------- */

void http_add_header(struct gw_req *r, const char *name, const char *value) {
    if (http_gone(r)) return;
    h2o_req_t *req = r->req;
    size_t nlen = strlen(name);
    char *lname = http_strndup(r, name, nlen);
    for (size_t i = 0; i < nlen; i++) lname[i] = (char)(lname[i] >= 'A' && lname[i] <= 'Z' ? lname[i] + 32 : lname[i]);
    h2o_iovec_t v = h2o_strdup(&req->pool, value, strlen(value));
    h2o_add_header_by_str(&req->pool, &req->res.headers, lname, nlen, 1, NULL, v.base, v.len);
}

static const char *reason_of(int status) {
    switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 416: return "Range Not Satisfiable";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return status < 400 ? "OK" : "Error";
    }
}

/* ---- Request log ------------------------------------------------------------------------------- */

/* One line per request, in common/log.c's format (`ts=… level=info comp=gateway msg=request …`), but
 * gathered per event loop and written with one write(2) per loop iteration instead of one per
 * request: at tens of thousands of requests a second that system call was a fifth of the gateway's.
 * A line therefore reaches stderr at the end of the loop iteration that answered (microseconds
 * later), possibly after a warning another thread logged meanwhile; lines never interleave. The
 * fields are appended by hand because printf takes glibc's slow path in this process (libquadmath,
 * loaded with OpenBLAS, registers printf handlers). */
#define LOG_BUF_SIZE 65536
#define LOG_LINE_MAX 1024

struct line {
    char *p, *end;
};

static void line_str(struct line *l, const char *s, size_t n) {
    if (n > (size_t)(l->end - l->p)) n = (size_t)(l->end - l->p);
    memcpy(l->p, s, n);
    l->p += n;
}

static void line_lit(struct line *l, const char *s) { line_str(l, s, strlen(s)); }

/* A value for a quoted field: quotes, backslashes and control characters become '?'. */
static void line_safe(struct line *l, const char *s, size_t n) {
    for (size_t i = 0; i < n && l->p < l->end; i++) {
        char c = s[i];
        *l->p++ = c == '"' || c == '\\' || (unsigned char)c < 0x20 || c == 0x7f ? '?' : c;
    }
}

static void line_uint(struct line *l, unsigned long long v, int min_digits) {
    char d[24];
    int n = 0;
    do {
        d[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v || n < min_digits);
    while (n && l->p < l->end) *l->p++ = d[--n];
}

static void log_flush_cb(h2o_timeout_entry_t *entry) {
    http_log_flush(H2O_STRUCT_FROM_MEMBER(struct gw_thread, log_flush, entry), 0);
}

void http_log_flush(struct gw_thread *t, int final) {
    size_t off = 0;
    while (off < t->log_len) {
        ssize_t w = write(STDERR_FILENO, t->log_buf + off, t->log_len - off);
        if (w <= 0) break; /* stderr is gone: the lines are lost, as with log.c */
        off += (size_t)w;
    }
    t->log_len = 0;
    if (final) {
        if (h2o_timeout_is_linked(&t->log_flush)) h2o_timeout_unlink(&t->log_flush);
        free(t->log_buf);
        t->log_buf = NULL;
    }
}

static void request_log(struct gw_req *r, int status, double seconds) {
    struct gw_thread *t = r->thread;
    h2o_req_t *req = r->req;
    if (!t->log_buf) t->log_buf = xmalloc(LOG_BUF_SIZE);
    if (t->log_len + LOG_LINE_MAX > LOG_BUF_SIZE) http_log_flush(t, 0);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    if (tv.tv_sec != t->log_second) {
        struct tm tm;
        gmtime_r(&tv.tv_sec, &tm);
        strftime(t->log_stamp, sizeof(t->log_stamp), "%Y-%m-%dT%H:%M:%S.", &tm);
        t->log_second = tv.tv_sec;
    }
    char *start = t->log_buf + t->log_len;
    struct line l = {start, start + LOG_LINE_MAX - 1}; /* room for the newline */
    line_lit(&l, "ts=");
    line_lit(&l, t->log_stamp);
    line_uint(&l, (unsigned long long)(tv.tv_usec / 1000), 3);
    line_lit(&l, "Z level=info comp=gateway msg=request method=");
    line_safe(&l, req->method.base, req->method.len > 16 ? 16 : req->method.len);
    line_lit(&l, " path=\"");
    size_t path_len = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
    line_safe(&l, req->path.base, path_len > 256 ? 256 : path_len);
    line_lit(&l, "\" route=\"");
    line_lit(&l, r->route ? r->route->name : "-");
    line_lit(&l, "\" status=");
    line_uint(&l, (unsigned)status, 1);
    line_lit(&l, " duration_ms=");
    unsigned long long us = (unsigned long long)(seconds * 1e6 + 0.5);
    line_uint(&l, us / 1000, 1);
    line_lit(&l, ".");
    line_uint(&l, us % 1000, 3);
    line_lit(&l, " tenant=");
    line_lit(&l, r->admin ? "(operator)" : r->tenant_name[0] ? r->tenant_name : "-");
    line_lit(&l, " auth=");
    line_lit(&l, r->auth_kind ? r->auth_kind : "-");
    line_lit(&l, " request_id=");
    line_lit(&l, r->request_id);
    *l.p++ = '\n';
    t->log_len += (size_t)(l.p - start);
    if (!h2o_timeout_is_linked(&t->log_flush)) {
        t->log_flush.cb = log_flush_cb;
        h2o_timeout_link(t->ctx.loop, &t->ctx.zero_timeout, &t->log_flush);
    }
}

void http_observe(struct gw_req *r, int status) {
    double seconds = whet_now_mono() - r->started;
    metrics_observe(r->route ? r->route->index : -1, status, seconds);
    if (r->thread->gw->opts.log_requests) request_log(r, status, seconds);
}

/* The part of every answer before its body: refuses a second answer, counts the request for /metrics,
 * writes its log line and sets the status and headers. Returns 0 when the body may follow. */
static int reply_begin(struct gw_req *r, int status, const char *content_type, uint64_t len) {
    if (http_gone(r)) return -1;
    if (r->status) {
        log_error("msg=\"second reply ignored (handler bug)\" request_id=%s route=\"%s\" first=%d second=%d", r->request_id,
                  r->route ? r->route->name : "-", r->status, status);
        return -1;
    }
    h2o_req_t *req = r->req;
    r->status = status;
    http_observe(r, status);
    req->res.status = status;
    req->res.reason = reason_of(status);
    req->res.content_length = len;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, content_type, strlen(content_type));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-request-id"), 0, NULL, r->request_id,
                          strlen(r->request_id));
    return 0;
}

void http_reply_raw(struct gw_req *r, int status, const char *content_type, const char *body, size_t len) {
    if (!http_gone(r) && !r->status && audit_reply(r, status, content_type, body, len)) return; /* sent once recorded */
    http_reply_now(r, status, content_type, body, len);
}

void http_reply_now(struct gw_req *r, int status, const char *content_type, const char *body, size_t len) {
    if (reply_begin(r, status, content_type, len) == 0) h2o_send_inline(r->req, body, len);
}

void http_reply_json(struct gw_req *r, int status, json_t *body) {
    if (http_gone(r)) {
        json_decref(body);
        return;
    }
    size_t len = 0;
    char *text = whet_json_compact(body, &len);
    json_decref(body);
    if (!text) {
        http_reply_error(r, 500, NULL, "internal_error", "cannot encode the response");
        return;
    }
    http_free_later(r, text);
    http_reply_raw(r, status, "application/json", text, len);
}

void http_reply_bytes(struct gw_req *r, int status, const char *content_type, void *data, size_t len) {
    if (http_gone(r)) {
        free(data);
        return;
    }
    http_free_later(r, data);
    http_reply_raw(r, status, content_type, data, len);
}

static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

static void reply_error_message(struct gw_req *r, int status, const char *param, const char *code,
                                const char *message) {
    metrics_error_code(code);
    /* OpenAI types a spent quota by its code (a 429 that waiting does not cure) */
    const char *type = code && !strcmp(code, "insufficient_quota") ? code : error_type(status);
    json_t *err = json_pack("{s:s, s:s, s:o, s:o}", "message", message, "type", type, "param",
                            param ? json_string(param) : json_null(), "code", code ? json_string(code) : json_null());
    http_reply_json(r, status, json_pack("{s:o}", "error", err));
}

void http_reply_error(struct gw_req *r, int status, const char *param, const char *code, const char *fmt, ...) {
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    /* A cut inside a character would make the message invalid JSON text (and the answer a 500). */
    if (n >= (int)sizeof(message)) utf8_trim_incomplete(message, sizeof(message) - 1);
    reply_error_message(r, status, param, code, message);
}

void http_reply_err(struct gw_req *r, int status, const char *param, const char *code, const struct whet_err *err) {
    char message[3 * WHET_ERR_MAX];
    reply_error_message(r, status, param, code, whet_err_text(err, message, sizeof message));
}

/* An error of a primary message and a hint (NULL: none). */
static void reply_error_hint_v(struct gw_req *r, int status, const char *param, const char *code, const char *hint,
                               const char *fmt, va_list ap) {
    struct whet_err err;
    whet_verrf(&err, fmt, ap);
    if (hint) whet_err_hint(&err, "%s", hint);
    http_reply_err(r, status, param, code, &err);
}

void http_reply_error_hint(struct gw_req *r, int status, const char *param, const char *code, const char *hint,
                           const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    reply_error_hint_v(r, status, param, code, hint, fmt, ap);
    va_end(ap);
}

void http_reply_not_found(struct gw_req *r, const char *what, const char *id) {
    http_reply_error(r, 404, "id", "not_found", "no such %s: %s", what, id);
}

void http_reply_rate_limited(struct gw_req *r, double retry_after_s, const char *hint, const char *fmt, ...) {
    char secs[32];
    snprintf(secs, sizeof(secs), "%d", retry_after_s < 1 ? 1 : (int)ceil(retry_after_s));
    http_add_header(r, "retry-after", secs);
    va_list ap;
    va_start(ap, fmt);
    reply_error_hint_v(r, 429, NULL, "rate_limit_exceeded", hint, fmt, ap);
    va_end(ap);
}

void http_reply_unavailable(struct gw_req *r, int retry_after_s, const char *what) {
    char secs[32];
    snprintf(secs, sizeof(secs), "%d", retry_after_s < 1 ? 1 : retry_after_s);
    http_add_header(r, "retry-after", secs);
    const char *hint = http_printf(r, "retry in %s s", secs);
    http_reply_error_hint(r, 503, NULL, "service_unavailable", hint, "%s is unavailable", what);
}

/* ---- Streaming replies ------------------------------------------------------------------------- */

/* One streamed body. Two buffers take turns: while h2o sends one (from h2o_send until it calls
 * proceed), a worker fills the other. The stream holds a reference on the request, so it can outlive
 * the h2o request (a client that left while a chunk was being read); it is freed once h2o is done
 * with the request (its pool is cleared), no read is in flight and none of its callbacks is running. */
struct stream {
    h2o_generator_t generator; /* handed to h2o; its callbacks find the stream through it */
    struct gw_req *r;
    struct http_stream src;
    int status;
    char *buf[2];
    size_t cap;                /* bytes per buffer */
    int reading, ready, sending; /* buffer index, -1 for none */
    size_t ready_len;
    uint64_t read_offset;      /* bytes read so far, the ready buffer included */
    int started;               /* the headers went to h2o */
    int finished;              /* the final (or error) send was made: h2o calls proceed no more */
    int failed;                /* a read failed after the headers: close at the next chance */
    int stopped;               /* h2o stopped the response (the client is gone) */
    int h2o_done;              /* the request's pool was cleared */
    int busy;                  /* callbacks of this stream on the stack */
    /* The read in flight: written by the worker, read by the loop once the job is back. */
    int job_rc;
    size_t job_len;
    struct whet_err job_err;
};

static void stream_maybe_free(struct stream *s) {
    if (s->busy || !s->h2o_done || s->reading >= 0) return;
    free(s->buf[0]);
    free(s->buf[1]);
    if (s->src.release) s->src.release(s->src.source);
    free((char *)s->src.what);
    gw_req_release(s->r);
    free(s);
}

static void stream_pool_cleared(void *p) {
    struct stream *s = *(struct stream **)p;
    s->h2o_done = 1;
    stream_maybe_free(s);
}

static void stream_work(void *arg) {
    struct stream *s = arg;
    uint64_t left = s->src.size - s->read_offset;
    size_t want = left < s->cap ? (size_t)left : s->cap;
    s->job_len = 0;
    s->job_rc = s->src.read(s->src.source, s->buf[s->reading], want, &s->job_len, &s->job_err);
    if (s->job_rc == 0 && (s->job_len == 0 || s->job_len > want))
        s->job_rc = whet_errf(&s->job_err, "read %zu bytes at offset %llu where %zu were due", s->job_len,
                              (unsigned long long)s->read_offset, want);
}

/* Ends a response whose headers are out: an error send closes the connection before the last byte. */
static void stream_abort(struct stream *s) {
    s->finished = 1;
    h2o_send(s->r->req, NULL, 0, H2O_SEND_STATE_ERROR);
}

static void stream_fail(struct stream *s, const char *why) {
    log_error("msg=\"streamed reply failed\" request_id=%s what=\"%s\" offset=%llu size=%llu headers_sent=%d err=\"%s\"",
              s->r->request_id, s->src.what, (unsigned long long)s->read_offset, (unsigned long long)s->src.size,
              s->started, why);
    if (!s->started) {
        s->finished = 1;
        http_reply_error(s->r, 500, NULL, "storage_error", "could not read %s; try again", s->src.what);
    } else if (s->sending >= 0) {
        s->failed = 1; /* h2o still holds a buffer: close once it is done with it */
    } else {
        stream_abort(s);
    }
}

static void stream_send_ready(struct stream *s) {
    int last = s->read_offset == s->src.size;
    h2o_iovec_t buf = h2o_iovec_init(s->buf[s->ready], s->ready_len);
    s->sending = s->ready;
    s->ready = -1;
    if (last) s->finished = 1;
    h2o_send(s->r->req, &buf, 1, last ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_IN_PROGRESS);
}

static void stream_read_done(struct gw_req *r, void *arg);

/* Starts reading the next chunk into the buffer that is neither sent nor waiting. */
static void stream_schedule_read(struct stream *s) {
    if (s->reading >= 0 || s->finished || s->failed || s->read_offset >= s->src.size) return;
    int i = s->sending != 0 && s->ready != 0 ? 0 : s->sending != 1 && s->ready != 1 ? 1 : -1;
    if (i < 0) return; /* both buffers are taken: the next proceed frees one */
    if (!s->buf[i]) s->buf[i] = xmalloc(s->cap);
    s->reading = i;
    if (http_run_blocking(s->r, stream_work, stream_read_done, s) != 0) {
        s->reading = -1;
        if (!s->started) {
            s->finished = 1;
            http_reply_unavailable(s->r, 1, "the gateway's workers are busy");
        } else {
            stream_fail(s, "the worker queue is full");
        }
    }
}

static void stream_proceed(h2o_generator_t *generator, h2o_req_t *req) {
    struct stream *s = (struct stream *)generator;
    s->busy++;
    s->sending = -1;
    if (s->failed) stream_abort(s);
    else if (s->ready >= 0) stream_send_ready(s);
    stream_schedule_read(s);
    s->busy--;
    stream_maybe_free(s);
}

static void stream_stop(h2o_generator_t *generator, h2o_req_t *req) {
    struct stream *s = (struct stream *)generator;
    s->stopped = 1; /* the pool is cleared next, which frees the stream when no read is in flight */
}

static void stream_read_done(struct gw_req *r, void *arg) {
    struct stream *s = arg;
    s->busy++;
    int i = s->reading;
    s->reading = -1;
    if (http_gone(r) || s->stopped || s->finished) {
        /* The client left (or the response already ended): the chunk is not wanted. */
    } else if (s->job_rc != 0) {
        stream_fail(s, s->job_err.msg);
    } else {
        s->ready = i;
        s->ready_len = s->job_len;
        s->read_offset += s->job_len;
        if (!s->started) {
            s->started = 1;
            if (reply_begin(r, s->status, s->src.content_type, s->src.size) == 0) {
                audit_stream_started(r, s->status);
                h2o_start_response(r->req, &s->generator);
                stream_send_ready(s);
            } else {
                s->finished = 1;
            }
        } else if (s->sending < 0) {
            stream_send_ready(s);
        }
        stream_schedule_read(s);
    }
    s->busy--;
    stream_maybe_free(s);
}

void http_reply_stream(struct gw_req *r, int status, const struct http_stream *src) {
    if (http_gone(r) || src->size == 0) {
        /* Nothing to read: an empty body goes out at once. */
        http_reply_raw(r, status, src->content_type, "", 0);
        if (src->release) src->release(src->source);
        return;
    }
    struct stream *s = xcalloc(1, sizeof *s);
    s->generator.proceed = stream_proceed;
    s->generator.stop = stream_stop;
    s->r = r;
    s->src = *src;
    s->src.what = xstrdup(src->what ? src->what : "the content");
    s->status = status;
    s->cap = src->size < HTTP_STREAM_CHUNK ? (size_t)src->size : HTTP_STREAM_CHUNK;
    s->reading = s->ready = s->sending = -1;
    gw_req_retain(r);
    struct stream **slot = h2o_mem_alloc_shared(&r->req->pool, sizeof *slot, stream_pool_cleared);
    *slot = s;
    s->busy++;
    stream_schedule_read(s);
    s->busy--;
    stream_maybe_free(s);
}

/* Reads a decimal number at *p (advancing it); -1 when there is none or it overflows. */
static int range_number(const char **p, uint64_t *out) {
    const char *s = *p;
    uint64_t v = 0;
    if (*s < '0' || *s > '9') return -1;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - 9) / 10) return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *p = s;
    *out = v;
    return 0;
}

int http_range(struct gw_req *r, uint64_t size, uint64_t *offset, uint64_t *length) {
    const char *h = http_header(r, "range");
    /* Objects are never rewritten under a key, but an If-Range names a validator we do not send. */
    if (!h || http_header(r, "if-range")) return 0;
    while (*h == ' ') h++;
    if (strncasecmp(h, "bytes=", 6) != 0 || strchr(h, ',')) return 0;
    const char *p = h + 6;
    while (*p == ' ') p++;
    uint64_t first, last = 0;
    if (*p == '-') { /* the last n bytes */
        p++;
        if (range_number(&p, &last) != 0) return 0;
        while (*p == ' ') p++;
        if (*p) return 0;
        if (last == 0 || size == 0) return -1;
        if (last > size) last = size;
        *offset = size - last;
        *length = last;
        return 1;
    }
    if (range_number(&p, &first) != 0 || *p++ != '-') return 0;
    int open_ended = *p == 0 || *p == ' ';
    if (!open_ended && range_number(&p, &last) != 0) return 0;
    while (*p == ' ') p++;
    if (*p || (!open_ended && last < first)) return 0;
    if (first >= size) return -1;
    if (open_ended || last >= size) last = size - 1;
    *offset = first;
    *length = last - first + 1;
    return 1;
}
