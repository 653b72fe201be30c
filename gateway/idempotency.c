/* idempotency.c - Idempotency-Key for the tenant API's POSTs (see idempotency.h). Sections: the
 * request's state, beginning (key check, fingerprint, lookup), the reservation and a lost race,
 * answering (store or release), statements. */
#include "idempotency.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crypto.h"
#include "json_text.h"
#include "log.h"

/* ---------------------------------------------------------------- the request's state */

/* Lives in the request's pool, pointed to by r->handler_data. */
struct idem {
    const char *key;   /* the header's value */
    const char *route; /* "POST /v1/files": method and path, the key's scope beside the tenant */
    char fingerprint[65];
    int reserve_index; /* the reservation's place in the transaction, -1 when none is pending */
    int races;         /* lost races so far: a few, then the unique violation is answered as such */
    idem_proceed_fn proceed;
    void *arg;
};

#define IDEM_MAX_RACES 3

static struct idem *idem_of(struct gw_req *r) { return r->handler_data; }

/* Keys are opaque to us but end up in SQL parameters and messages: printable ASCII only. */
static int key_ok(const char *key) {
    size_t n = strlen(key);
    if (n == 0 || n > IDEMPOTENCY_KEY_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (key[i] < 0x21 || key[i] > 0x7e) return 0;
    return 1;
}

/* The state for a request with a well-formed key; NULL when there is nothing left to do here: without
 * a key (proceed has run) or with a malformed one (answered 400). */
static struct idem *idem_new(struct gw_req *r, idem_proceed_fn proceed, void *arg) {
    r->handler_data = NULL;
    const char *key = http_header(r, "idempotency-key");
    if (!key) {
        proceed(r, arg);
        return NULL;
    }
    if (!key_ok(key)) {
        http_reply_error(r, 400, NULL, "invalid_request",
                         IDEMPOTENCY_HEADER " must be 1 to %d printable ASCII characters without spaces",
                         IDEMPOTENCY_KEY_MAX);
        return NULL;
    }
    struct idem *s = http_alloc(r, sizeof *s);
    memset(s, 0, sizeof *s);
    s->key = key;
    s->route = http_printf(r, "%.*s %.*s", (int)r->req->method.len, r->req->method.base,
                           (int)r->req->path_normalized.len, r->req->path_normalized.base);
    s->reserve_index = -1;
    s->proceed = proceed;
    s->arg = arg;
    r->handler_data = s;
    return s;
}

/* ---------------------------------------------------------------- beginning: the lookup */

static void lookup(struct gw_req *r, struct idem *s);

/* A stored answer for the key, or none yet. */
static void looked_up(struct gw_req *r, const struct db_result *res, void *arg) {
    struct idem *s = arg;
    if (db_reply_failed(r, res)) return;
    const PGresult *rows = res->res[0];
    if (PQntuples(rows) == 0) {
        s->proceed(r, s->arg);
        return;
    }
    /* columns: request_sha256, status, response */
    if (strcmp(PQgetvalue(rows, 0, 0), s->fingerprint) != 0) {
        http_reply_error_hint(r, 422, NULL, "idempotency_key_reused", "use a new key for a new request",
                              IDEMPOTENCY_HEADER " %s was already used for a different request to %s", s->key,
                              s->route);
        return;
    }
    int status = atoi(PQgetvalue(rows, 0, 1));
    if (status == 0) {
        http_reply_error(r, 409, NULL, "idempotency_key_in_use",
                         "a request with " IDEMPOTENCY_HEADER " %s is still being processed; retry shortly", s->key);
        return;
    }
    http_add_header(r, "idempotent-replayed", "true");
    const char *response = PQgetvalue(rows, 0, 2);
    http_reply_bytes(r, status, "application/json", xstrdup(response), strlen(response));
}

static void lookup(struct gw_req *r, struct idem *s) {
    const char *params[] = {http_tenant_id(r), s->route, s->key};
    db_query(r, "idem_get", 3, params, looked_up, s);
}

void idem_begin(struct gw_req *r, idem_proceed_fn proceed, void *arg) {
    struct idem *s = idem_new(r, proceed, arg);
    if (!s) return;
    h2o_iovec_t body = http_body(r);
    whet_sha256_hex(body.base, body.len, s->fingerprint);
    lookup(r, s);
}

/* A form's canonical bytes, copied out of the request body (which goes away with its client, while
 * the worker may still be hashing): per part, "name\0filename\0has_filename content_type\0length\0"
 * then the bytes, so no two different forms encode alike. */
struct form_hash {
    char *canonical;
    size_t len;
    char fingerprint[65];
};

static void form_hash_work(void *arg) {
    struct form_hash *h = arg;
    whet_sha256_hex(h->canonical, h->len, h->fingerprint);
}

static void form_hash_done(struct gw_req *r, void *arg) {
    struct form_hash *h = arg;
    if (!http_gone(r)) {
        struct idem *s = idem_of(r);
        memcpy(s->fingerprint, h->fingerprint, sizeof s->fingerprint);
        lookup(r, s);
    }
    free(h->canonical);
    free(h);
}

void idem_begin_form(struct gw_req *r, const struct multipart_form *form, idem_proceed_fn proceed, void *arg) {
    struct idem *s = idem_new(r, proceed, arg);
    if (!s) return;
    size_t cap = 0;
    for (size_t i = 0; i < form->count; i++) cap += sizeof form->parts[i].name + sizeof form->parts[i].filename +
                                                    sizeof form->parts[i].content_type + 32 + form->parts[i].len;
    struct form_hash *h = xcalloc(1, sizeof *h);
    h->canonical = xmalloc(cap ? cap : 1);
    for (size_t i = 0; i < form->count; i++) {
        const struct multipart_part *p = &form->parts[i];
        int n = snprintf(h->canonical + h->len, cap - h->len, "%s%c%s%c%d %s%c%zu%c", p->name, 0, p->filename, 0,
                         p->has_filename, p->content_type, 0, p->len, 0);
        h->len += (size_t)n;
        memcpy(h->canonical + h->len, p->data, p->len);
        h->len += p->len;
    }
    if (http_run_blocking_or_busy(r, form_hash_work, form_hash_done, h)) {
        free(h->canonical);
        free(h);
    }
}

/* ---------------------------------------------------------------- the reservation and a lost race */

int idem_reserve(struct gw_req *r, struct db_stmt *stmts, int n) {
    struct idem *s = idem_of(r);
    if (!s) return n;
    /* The parameters must outlive this call: db_transaction copies them when the caller submits. */
    const char **params = http_alloc(r, 4 * sizeof *params);
    params[0] = http_tenant_id(r);
    params[1] = s->route;
    params[2] = s->key;
    params[3] = s->fingerprint;
    stmts[n] = (struct db_stmt){"idem_reserve", NULL, 4, params};
    s->reserve_index = n;
    return n + 1;
}

int idem_lost_race(struct gw_req *r, const struct db_result *res) {
    struct idem *s = idem_of(r);
    if (!s || s->reserve_index < 0 || res->ok) return 0;
    int lost = res->failed == s->reserve_index && strcmp(res->sqlstate, "23505") == 0;
    /* The transaction rolled back: nothing of ours is reserved any more. */
    s->reserve_index = -1;
    if (!lost || s->races++ >= IDEM_MAX_RACES) return 0;
    lookup(r, s);
    return 1;
}

int idem_reply_failed(struct gw_req *r, const struct db_result *res) {
    return idem_lost_race(r, res) || db_reply_failed(r, res);
}

int idem_reply_unless_found(struct gw_req *r, const struct db_result *res, int stmt, const char *what) {
    if (idem_reply_failed(r, res)) return 1;
    if (PQntuples(res->res[stmt]) == 0) {
        idem_reply_error(r, 404, "id", "not_found", "no such %s: %s", what, http_path_param(r, "id"));
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- answering */

struct stored_answer {
    int status;
    const char *body;
};

static void answer_stored(struct gw_req *r, void *arg) {
    struct stored_answer *a = arg;
    http_reply_bytes(r, a->status, "application/json", xstrdup(a->body), strlen(a->body));
}

static void stored(struct gw_req *r, const struct db_result *res, void *arg) {
    /* The object exists either way; a retry then finds the key in progress (409) rather than a copy. */
    if (!res->ok) log_warn("msg=\"idempotent answer not stored\" request_id=%s err=\"%s\"", r->request_id, res->message);
    answer_stored(r, arg);
}

/* An answer decided before any reservation, from the state a concurrent request with the same key
 * may just have changed (a part that no longer fits because the first attempt's part was added):
 * the key is looked up once more, and a stored answer wins over `answer`. */
static void answer_unless_replayed(struct gw_req *r, struct idem *s, idem_proceed_fn answer, void *arg) {
    s->proceed = answer;
    s->arg = arg;
    lookup(r, s);
}

void idem_reply_json(struct gw_req *r, int status, json_t *body) {
    struct idem *s = idem_of(r);
    if (!s) {
        http_reply_json(r, status, body);
        return;
    }
    char *text = whet_json_compact(body, NULL);
    json_decref(body);
    struct stored_answer *a = http_alloc(r, sizeof *a);
    a->status = status;
    a->body = http_strdup(r, text);
    free(text);
    if (s->reserve_index < 0) {
        answer_unless_replayed(r, s, answer_stored, a);
        return;
    }
    if (status < 200 || status > 299) {
        idem_release_then(r, answer_stored, a);
        return;
    }
    s->reserve_index = -1;
    char *status_text = http_printf(r, "%d", status);
    const char *params[] = {http_tenant_id(r), s->route, s->key, status_text, a->body};
    db_query(r, "idem_store", 5, params, stored, a);
}

struct release_then {
    idem_proceed_fn answer;
    void *arg;
};

static void released(struct gw_req *r, const struct db_result *res, void *arg) {
    struct release_then *t = arg;
    if (!res->ok) log_warn("msg=\"idempotency key not released\" request_id=%s err=\"%s\"", r->request_id, res->message);
    t->answer(r, t->arg);
}

void idem_release_then(struct gw_req *r, idem_proceed_fn answer, void *arg) {
    struct idem *s = idem_of(r);
    if (!s || s->reserve_index < 0) {
        answer(r, arg);
        return;
    }
    s->reserve_index = -1;
    const char *params[] = {http_tenant_id(r), s->route, s->key};
    struct release_then *t = http_alloc(r, sizeof *t);
    t->answer = answer;
    t->arg = arg;
    db_query(r, "idem_release", 3, params, released, t);
}

struct error_answer {
    int status;
    const char *param, *code, *message;
};

static void answer_error(struct gw_req *r, void *arg) {
    struct error_answer *e = arg;
    http_reply_error(r, e->status, e->param, e->code, "%s", e->message);
}

void idem_reply_error(struct gw_req *r, int status, const char *param, const char *code, const char *fmt, ...) {
    struct error_answer *e = http_alloc(r, sizeof *e);
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    e->status = status;
    e->param = param ? http_strdup(r, param) : NULL;
    e->code = code ? http_strdup(r, code) : NULL;
    e->message = http_strdup(r, message);
    struct idem *s = idem_of(r);
    if (s && s->reserve_index < 0)
        answer_unless_replayed(r, s, answer_error, e);
    else
        idem_release_then(r, answer_error, e);
}

/* ---------------------------------------------------------------- statements */

void idem_prepare(void) {
    static int prepared; /* resources' route functions run on the main thread, one after another */
    if (prepared) return;
    prepared = 1;
    /* A key lives whet_idempotency_ttl_s() (24 h, migration 0039): an older row is no answer. */
    db_prepare("idem_get", "SELECT request_sha256, status, response FROM idempotency_keys "
                           "WHERE tenant_id = $1 AND route = $2 AND key = $3 "
                           "AND created_at > whet_now() - whet_idempotency_ttl_s()");
    /* Status 0: in progress. Inserted inside the transaction that does the work, so of two racing
     * requests with one key only one commits (the other fails on the primary key and rolls back); an
     * expired row of the key is replaced. */
    db_prepare("idem_reserve", "SELECT whet_idem_reserve($1, $2, $3, $4)");
    db_prepare("idem_store", "UPDATE idempotency_keys SET status = $4::integer, response = $5 "
                             "WHERE tenant_id = $1 AND route = $2 AND key = $3 AND status = 0");
    db_prepare("idem_release", "DELETE FROM idempotency_keys WHERE tenant_id = $1 AND route = $2 AND key = $3 "
                               "AND status = 0");
}
