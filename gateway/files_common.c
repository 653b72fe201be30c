/* files_common.c - see files_common.h. */
#include "files_common.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "crypto.h"
#include "data_keys.h"
#include "env.h"
#include "log.h"
#include "pg.h"
#include "utf8.h"

static pthread_once_t store_once = PTHREAD_ONCE_INIT;
static struct objstore *store;
static struct whet_err store_err;
static struct whet_keyring *keyring; /* NULL: encryption at rest is off */

static void store_open(void) {
    if (objstore_open_env(&store, &store_err) || whet_keyring_from_env(&keyring, &store_err)) {
        objstore_close(store);
        store = NULL;
        log_error("msg=\"object store unavailable\" err=\"%s\"", store_err.msg);
    }
}

/* Sealed views of the store, one per tenant served since the start, each with its data key wrapped for
 * model workers, and the one blocking connection (the database owner's, $WHET_DATABASE_URL: the
 * application role cannot read tenant_data_keys) that reads their keys; all under views_lock. */
struct tenant_view {
    char *tenant_id;
    struct objstore *view;
    char *wrapped; /* whet_data_key_wrap_text */
    struct tenant_view *next;
};
static pthread_mutex_t views_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tenant_view *views;
static PGconn *keys_conn;

struct objstore *files_store(struct whet_err *err) {
    pthread_once(&store_once, store_open);
    if (!store && err) *err = store_err;
    return store;
}

/* The tenant's view (the store is open and encryption at rest is on); NULL with err. */
static struct tenant_view *tenant_view(struct objstore *s, const char *tenant_id, struct whet_err *err) {
    pthread_mutex_lock(&views_lock);
    struct tenant_view *v = views;
    while (v && strcmp(v->tenant_id, tenant_id) != 0) v = v->next;
    if (!v) {
        struct whet_data_key dk;
        if (!keys_conn) keys_conn = whet_pg_connect(whet_env("WHET_DATABASE_URL", ""), err);
        if (keys_conn && whet_tenant_data_key(keys_conn, keyring, tenant_id, &dk, err) == 0) {
            v = xcalloc(1, sizeof *v);
            v->tenant_id = xstrdup(tenant_id);
            v->view = objstore_encrypted(s, &dk);
            v->wrapped = whet_data_key_wrap_text(keyring, tenant_id, &dk);
            v->next = views;
            views = v;
        } else if (keys_conn && PQstatus(keys_conn) != CONNECTION_OK) {
            PQfinish(keys_conn); /* reconnect on the next call */
            keys_conn = NULL;
        }
        explicit_bzero(&dk, sizeof dk);
        if (!v) log_error("msg=\"tenant data key unavailable\" tenant=%s err=\"%s\"", tenant_id, err->msg);
    }
    pthread_mutex_unlock(&views_lock);
    return v;
}

struct objstore *files_tenant_store(const char *tenant_id, struct whet_err *err) {
    struct objstore *s = files_store(err);
    if (!s || !keyring) return s;
    struct tenant_view *v = tenant_view(s, tenant_id, err);
    return v ? v->view : NULL;
}

int files_encryption_on(void) { return whet_env("WHET_DATA_KEY_FILE", NULL) != NULL; }

int files_tenant_wrapped_key(const char *tenant_id, const char **out, struct whet_err *err) {
    struct objstore *s = files_store(err);
    struct tenant_view *v = s && keyring ? tenant_view(s, tenant_id, err) : NULL;
    *out = v ? v->wrapped : NULL;
    return s && (v || !keyring) ? 0 : -1;
}

json_t *files_list_object(json_t *data, int has_more) {
    size_t n = json_array_size(data);
    json_t *first = n ? json_object_get(json_array_get(data, 0), "id") : NULL;
    json_t *last = n ? json_object_get(json_array_get(data, n - 1), "id") : NULL;
    return json_pack("{s:s, s:o, s:O?, s:O?, s:b}", "object", "list", "data", data, "first_id", first, "last_id", last,
                     "has_more", has_more);
}

/* The `limit` query parameter: `def` when absent, else an integer in 1..max. On a bad value answers
 * 400 (param "limit") and returns -1. */
static int query_limit(struct gw_req *r, int def, int max, int *out) {
    const char *s = http_query_param(r, "limit");
    if (!s) {
        *out = def;
        return 0;
    }
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < 1 || v > max) {
        http_reply_error(r, 400, "limit", "invalid_value", "limit: expected an integer in 1..%d, got \"%s\"", max, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

struct files_page *files_page_new(struct gw_req *r, int def, int max, const char *parent,
                                  json_t *(*to_json)(const PGresult *res, int row)) {
    struct files_page *p = http_alloc(r, sizeof *p);
    if (query_limit(r, def, max, &p->limit)) return NULL;
    p->fetch = http_printf(r, "%d", p->limit + 1);
    p->parent = parent;
    p->to_json = to_json;
    return p;
}

void files_page_done(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct files_page *p = arg;
    if (p->parent ? db_reply_unless_found(r, res, p->parent, "id") : db_reply_failed(r, res)) return;
    const PGresult *rows = res->res[res->n - 1];
    json_t *data = db_rows_json(rows, p->limit, p->to_json);
    http_reply_json(r, 200, files_list_object(data, PQntuples(rows) > p->limit));
}

struct retrieve {
    const char *what;
    json_t *(*to_json)(const PGresult *res, int row);
};

static void retrieve_done(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct retrieve *q = arg;
    if (db_reply_unless_found(r, res, q->what, "id")) return;
    http_reply_json(r, 200, q->to_json(res->res[0], 0));
}

void files_retrieve(struct gw_req *r, const char *stmt, const char *what,
                    json_t *(*to_json)(const PGresult *res, int row)) {
    struct retrieve *q = http_alloc(r, sizeof *q);
    q->what = what;
    q->to_json = to_json;
    const char *params[] = {http_tenant_id(r), http_path_param(r, "id")};
    db_query(r, stmt, 2, params, retrieve_done, q);
}

int files_query_order(struct gw_req *r, int def_asc, int *asc) {
    const char *s = http_query_param(r, "order");
    if (!s) {
        *asc = def_asc;
        return 0;
    }
    if (strcmp(s, "asc") == 0 || strcmp(s, "desc") == 0) {
        *asc = s[0] == 'a';
        return 0;
    }
    http_reply_error(r, 400, "order", "invalid_value", "order: expected \"asc\" or \"desc\", got \"%s\"", s);
    return -1;
}

char *files_new_id(struct gw_req *r, const char *prefix) {
    size_t n = strlen(prefix) + 24 + 1;
    char *id = http_alloc(r, n);
    whet_random_id(prefix, 24, id);
    return id;
}

int files_text_ok(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        if (*p < 0x20 || *p == 0x7f) return 0;
        size_t n = utf8_seq_len(p, (size_t)(end - p));
        if (!n) return 0;
        p += n;
    }
    return 1;
}

int files_stored_answered(struct gw_req *r, const char *key, int invalid, int failed, const struct whet_err *err,
                          const char *param) {
    if (http_gone(r)) {
        if (!invalid && !failed) files_delete_object_later(r, key);
        return 1;
    }
    if (invalid) {
        http_reply_error(r, 400, param, "invalid_file", "invalid fine-tune file: %s", err->msg);
        return 1;
    }
    return 0;
}

struct multipart_form *files_form(struct gw_req *r, const char *expected) {
    const char *ct = http_header(r, "content-type");
    char boundary[MULTIPART_BOUNDARY_MAX + 1];
    struct whet_err err;
    if (!ct || multipart_boundary(ct, strlen(ct), boundary, &err)) {
        http_reply_error(r, 400, NULL, "invalid_request", "%s",
                         ct ? err.msg : http_printf(r, "expected Content-Type multipart/form-data with %s", expected));
        return NULL;
    }
    h2o_iovec_t body = http_body(r);
    struct multipart_form *form = http_alloc(r, sizeof *form);
    if (multipart_parse(body.base, body.len, boundary, form, &err)) {
        http_reply_error(r, 400, NULL, "invalid_request", "malformed multipart body: %s", err.msg);
        return NULL;
    }
    return form;
}

char *files_part_copy(const struct multipart_part *part) {
    char *copy = xmalloc(part->len ? part->len : 1);
    memcpy(copy, part->data, part->len);
    return copy;
}

struct delete_later {
    char *key;
};

static void delete_later_work(void *arg) {
    struct delete_later *d = arg;
    struct whet_err err;
    struct objstore *s = files_store(&err);
    if (!s || objstore_delete(s, d->key, &err))
        log_warn("msg=\"could not delete an object left by a refused request\" key=%s err=\"%s\"", d->key, err.msg);
}

static void delete_later_done(struct gw_req *r, void *arg) {
    struct delete_later *d = arg;
    free(d->key);
    free(d);
}

void files_delete_object_later(struct gw_req *r, const char *key) {
    struct delete_later *d = xmalloc(sizeof *d);
    d->key = xstrdup(key);
    if (http_run_blocking(r, delete_later_work, delete_later_done, d)) {
        log_warn("msg=\"worker queue full; object left behind\" key=%s", key);
        free(d->key);
        free(d);
    }
}
