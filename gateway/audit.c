/* audit.c - the audit log (see audit.h): which routes are audited and how their rows are made, the
 * count of failed authentications per client address, and GET /admin/v1/audit. */
#include "audit.h"

#include <pthread.h>
#include <string.h>
#include <netdb.h>
#include <sys/socket.h>

#include "db.h"
#include "log.h"
#include "query_params.h"
#include "server.h"

/* An audited route: its success makes one row. The target is the path parameter `target`, else the
 * field `answer_key` of the answer's body (creates), else (a download) the path itself; the tenant is
 * the path parameter "id" of operator routes, else the calling tenant. */
struct audited {
    const char *method, *pattern, *action, *target, *answer_key;
};

static const struct audited audited_routes[] = {
    {"POST", "/admin/v1/tenants", "tenant.create", NULL, "id"},
    {"POST", "/admin/v1/tenants/{id}", "tenant.update", "id", NULL},
    {"POST", "/admin/v1/tenants/{id}/disable", "tenant.disable", "id", NULL},
    {"POST", "/admin/v1/tenants/{id}/enable", "tenant.enable", "id", NULL},
    {"POST", "/admin/v1/tenants/{id}/api_keys", "api_key.create", NULL, "id"},
    {"DELETE", "/admin/v1/tenants/{id}/api_keys/{key_id}", "api_key.revoke", "key_id", NULL},
    {"PUT", "/admin/v1/tenants/{id}/quotas", "quota.set", "id", NULL},
    {"PUT", "/admin/v1/tenants/{id}/budget", "budget.set", "id", NULL},
    {"POST", "/admin/v1/prices", "price_book.create", NULL, "version"},
    {"POST", "/v1/api_keys", "api_key.create", NULL, "id"},
    {"DELETE", "/v1/api_keys/{id}", "api_key.revoke", "id", NULL},
    {"GET", "/v1/fine_tuning/jobs/{job}/checkpoints/{checkpoint}/files/{name}", "checkpoint_file.download", NULL, NULL},
};

/* An answer held until its row is written (audit_reply). */
struct held {
    int status;
    const char *content_type, *body;
    size_t len;
};

static void insert_done(struct gw_req *r, const struct db_result *res, void *arg) {
    struct held *h = arg;
    if (!res->ok)
        log_error("msg=\"audit entry not written\" request_id=%s error=\"%s\"", r->request_id, res->message);
    if (h) http_reply_now(r, h->status, h->content_type, h->body, h->len);
}

static void record(struct gw_req *r, const char *action, const char *tenant, const char *target, json_t *detail,
                   struct held *h) {
    const char *actor = r->admin             ? "operator"
                        : r->api_key_id[0]  ? r->api_key_id
                        : r->tenant_name[0] ? http_printf(r, "tenant-token:%s", r->tenant_name)
                                            : "anonymous";
    char *text = json_dumps(detail, JSON_COMPACT);
    json_decref(detail);
    http_free_later(r, text);
    const char *p[] = {actor, action, tenant, target, r->request_id, text};
    db_query(r, "audit_insert", 6, p, insert_done, h);
}

/* The request's body as JSON when it is a small object (operator bodies: fields and limits, never a
 * secret), else NULL. */
static json_t *small_body(struct gw_req *r) {
    h2o_iovec_t b = http_body(r);
    if (!b.len || b.len > 4096) return NULL;
    json_t *j = json_loadb(b.base, b.len, 0, NULL);
    if (j && !json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static void observe_success(struct gw_req *r, const struct audited *a, int status, const char *body, size_t len,
                            struct held *h) {
    json_t *detail = json_pack("{s:i}", "status", status);
    json_t *req_body = small_body(r);
    if (req_body) json_object_set_new(detail, "request", req_body);
    const char *target = a->target ? http_path_param(r, a->target) : NULL;
    if (a->answer_key && body) {
        /* Only this field of the answer is kept: a create's answer also holds the new API key. */
        json_t *answer = json_loadb(body, len, 0, NULL), *v = json_object_get(answer, a->answer_key);
        if (json_is_string(v)) target = http_strdup(r, json_string_value(v));
        else if (json_is_integer(v)) target = http_printf(r, "%lld", (long long)json_integer_value(v));
        json_decref(answer);
    } else if (!a->target && !a->answer_key) { /* a checkpoint file */
        target = http_printf(r, "%s/%s/%s", http_path_param(r, "job"), http_path_param(r, "checkpoint"),
                             http_path_param(r, "name"));
    }
    const char *tenant = r->admin ? http_path_param(r, "id") : r->tenant_id;
    if (r->admin && !strcmp(a->action, "tenant.create")) tenant = target;
    record(r, a->action, tenant && *tenant ? tenant : NULL, target, detail, h);
}

/* ---- Failed authentications per client address ------------------------------------------------- */

#define AUTH_SLOTS 256

struct auth_slot {
    char address[64]; /* the last address hashed here: another one takes the slot over */
    long window_start;
    int failures;
};

static struct {
    pthread_mutex_t lock;
    struct auth_slot slot[AUTH_SLOTS];
} auth_failures = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* 1 when this failure is the one that takes `address` to AUDIT_AUTH_FAILURES in its window. */
static int auth_failure_counts(const char *address) {
    unsigned h = 2166136261u;
    for (const char *c = address; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
    long now = (long)whet_now_unix();
    pthread_mutex_lock(&auth_failures.lock);
    struct auth_slot *s = &auth_failures.slot[h % AUTH_SLOTS];
    if (strcmp(s->address, address) || now - s->window_start >= AUDIT_AUTH_WINDOW_S) {
        snprintf(s->address, sizeof(s->address), "%s", address);
        s->window_start = now;
        s->failures = 0;
    }
    int reached = ++s->failures == AUDIT_AUTH_FAILURES;
    pthread_mutex_unlock(&auth_failures.lock);
    return reached;
}

static void observe_auth_failure(struct gw_req *r) {
    struct sockaddr_storage ss;
    char address[NI_MAXHOST] = "unknown";
    socklen_t sslen = r->req->conn->callbacks->get_peername(r->req->conn, (struct sockaddr *)&ss);
    if (sslen == 0 || h2o_socket_getnumerichost((struct sockaddr *)&ss, sslen, address) == SIZE_MAX)
        snprintf(address, sizeof(address), "unknown");
    if (!auth_failure_counts(address)) return;
    record(r, "auth.failures", NULL, http_strdup(r, address),
           json_pack("{s:i, s:i, s:s}", "failures", AUDIT_AUTH_FAILURES, "window_s", AUDIT_AUTH_WINDOW_S, "route",
                     r->route->name),
           NULL);
}

static const struct audited *audited_route(struct gw_req *r, int status) {
    if (!r->route || status < 200 || status > 299) return NULL;
    for (size_t i = 0; i < sizeof(audited_routes) / sizeof(audited_routes[0]); i++) {
        const struct audited *a = &audited_routes[i];
        if (!strcmp(a->pattern, r->route->pattern) && !strcmp(a->method, r->route->method)) return a;
    }
    return NULL;
}

int audit_reply(struct gw_req *r, int status, const char *content_type, const char *body, size_t len) {
    if (status == 401 && r->route) observe_auth_failure(r);
    const struct audited *a = audited_route(r, status);
    if (!a) return 0;
    struct held *h = http_alloc(r, sizeof(*h));
    *h = (struct held){.status = status, .content_type = content_type, .body = body, .len = len};
    observe_success(r, a, status, body, len, h);
    return 1;
}

void audit_stream_started(struct gw_req *r, int status) {
    const struct audited *a = audited_route(r, status);
    if (a) observe_success(r, a, status, NULL, 0, NULL);
}

/* ---- GET /admin/v1/audit ----------------------------------------------------------------------- */

static json_t *entry_json(const PGresult *res, int row) {
    return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "object", "audit_entry", "id",
                     db_json_integer(res, row, 0), "at", db_json_integer(res, row, 1), "actor",
                     db_json_string(res, row, 2), "action", db_json_string(res, row, 3), "tenant_id",
                     db_json_string(res, row, 4), "target", db_json_string(res, row, 5), "request_id",
                     db_json_string(res, row, 6), "detail", db_json_value(res, row, 7));
}

static void audit_list_done(struct gw_req *r, const struct db_result *res, void *arg) {
    long long limit = *(long long *)arg;
    if (db_reply_failed(r, res)) return;
    const PGresult *rows = res->res[0];
    int n = PQntuples(rows), more = n > limit;
    json_t *data = db_rows_json(rows, more ? (int)limit : n, entry_json);
    json_t *last = json_array_size(data) ? json_incref(json_object_get(json_array_get(data, json_array_size(data) - 1), "id"))
                                         : json_null();
    http_reply_json(r, 200, json_pack("{s:s, s:o, s:b, s:o}", "object", "list", "data", data, "has_more", more,
                                      "last_id", last));
}

/* Newest first; `after` is the last id of the previous page. */
static void audit_list(struct gw_req *r) {
    long long *limit = http_alloc(r, sizeof(*limit)), since, until, after;
    int has_since, has_until, has_after;
    if (query_int(r, "limit", 1, 1000, 100, limit) < 0 || (has_since = query_int(r, "since", 0, 1LL << 40, 0, &since)) < 0 ||
        (has_until = query_int(r, "until", 0, 1LL << 40, 0, &until)) < 0 ||
        (has_after = query_int(r, "after", 1, 1LL << 62, 0, &after)) < 0)
        return;
    const char *p[] = {http_query_param(r, "tenant"),
                       http_query_param(r, "action"),
                       http_query_param(r, "actor"),
                       query_int_text(r, has_since, since),
                       query_int_text(r, has_until, until),
                       query_int_text(r, has_after, after),
                       http_printf(r, "%lld", *limit + 1)};
    db_query(r, "audit_list", 7, p, audit_list_done, limit);
}

void audit_routes(struct http_router *rt) {
    db_prepare("audit_insert", "INSERT INTO audit_log (actor, action, tenant_id, target, request_id, detail) VALUES "
                               "($1, $2, coalesce((SELECT id FROM tenants WHERE id = $3 OR name = $3), $3), $4, $5, "
                               "$6::jsonb)");
    db_prepare("audit_list",
               "SELECT id, at, actor, action, tenant_id, target, request_id, detail FROM audit_log WHERE "
               "($1::text IS NULL OR tenant_id = $1 OR tenant_id = (SELECT id FROM tenants WHERE name = $1)) "
               "AND ($2::text IS NULL OR action = $2) AND ($3::text IS NULL OR actor = $3) "
               "AND ($4::bigint IS NULL OR at >= $4) AND ($5::bigint IS NULL OR at < $5) "
               "AND ($6::bigint IS NULL OR id < $6) ORDER BY id DESC LIMIT $7::int");
    http_route(rt, "GET", "/admin/v1/audit", audit_list, HTTP_ROUTE_ADMIN, "admin_audit.list");
}
