/* admin.c - the operator API under /admin/v1 (operator JWTs only, see server_auth.c): tenants
 * (create, which returns the first API key once; list; get; update; disable and enable), their API
 * keys (create, list, revoke) and their guaranteed GPU quotas (replace, get). Queries run on the
 * operator pool, as the table owner, so row-level security does not apply; a path's {id} may be a
 * tenant's id or its name. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "admin_fleet.h"
#include "api_keys.h"
#include "auth.h"
#include "crypto.h"
#include "db.h"
#include "scopes.h"
#include "server.h"

#define TENANT_COLS "id, name, weight, rate_per_s, rate_burst, max_active_jobs, disabled, created_at"
#define TENANT_BY_ID "(id = $1 OR name = $1)"

static json_t *tenant_json(const PGresult *res, int row) {
    return json_pack("{s:s, s:o, s:o, s:f, s:f, s:o, s:o, s:b, s:o}", "object", "tenant", "id", db_json_string(res, row, 0),
                     "name", db_json_string(res, row, 1), "weight", strtod(db_value(res, row, 2), NULL), "rate_per_s",
                     strtod(db_value(res, row, 3), NULL), "rate_burst", db_json_integer(res, row, 4),
                     "max_active_jobs", db_json_integer(res, row, 5), "disabled", !strcmp(db_value(res, row, 6), "t"),
                     "created_at", db_json_integer(res, row, 7));
}

static json_t *list_json(json_t *data) { return json_pack("{s:s, s:o, s:b}", "object", "list", "data", data, "has_more", 0); }

/* ---- Numeric fields of tenant bodies ----------------------------------------------------------- */

struct tenant_fields {
    const char *weight, *rate_per_s, *rate_burst, *max_active_jobs; /* text parameters, NULL: unchanged/default */
};

/* Reads the optional numeric fields; answers 400 and returns -1 on a bad one. */
static int tenant_fields_read(struct gw_req *r, json_t *body, struct tenant_fields *f, const char *const *allowed) {
    memset(f, 0, sizeof(*f));
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        int known = 0;
        for (const char *const *a = allowed; *a; a++) known |= !strcmp(*a, key);
        if (!known) {
            http_reply_error(r, 400, key, "unknown_parameter", "unknown field \"%s\"", key);
            return -1;
        }
        int is_positive_number = json_is_number(v) && json_number_value(v) > 0 && isfinite(json_number_value(v));
        if (!strcmp(key, "weight") || !strcmp(key, "rate_per_s")) {
            if (!is_positive_number) {
                http_reply_error(r, 400, key, "invalid_value", "\"%s\" must be a positive number", key);
                return -1;
            }
            const char *text = http_printf(r, "%.17g", json_number_value(v));
            if (!strcmp(key, "weight")) f->weight = text;
            else f->rate_per_s = text;
        } else if (!strcmp(key, "rate_burst") || !strcmp(key, "max_active_jobs")) {
            int min = !strcmp(key, "rate_burst") ? 1 : 0;
            if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > 1000000000) {
                http_reply_error(r, 400, key, "invalid_value", "\"%s\" must be an integer of at least %d", key, min);
                return -1;
            }
            const char *text = http_printf(r, "%lld", (long long)json_integer_value(v));
            if (!strcmp(key, "rate_burst")) f->rate_burst = text;
            else f->max_active_jobs = text;
        }
    }
    return 0;
}

/* ---- Tenants ----------------------------------------------------------------------------------- */

static void tenant_create_done(struct gw_req *r, const struct db_result *res, void *arg) {
    struct new_key *k = arg;
    if (!res->ok) {
        if (res->failed == 0 && !strcmp(res->sqlstate, "23505"))
            http_reply_error(r, 409, "name", "tenant_exists", "a tenant with this name already exists");
        else http_reply_db_error(r, res);
        return;
    }
    json_t *t = tenant_json(res->res[0], 0);
    json_object_set_new(t, "api_key", json_string(k->key));
    json_object_set_new(t, "api_key_id", json_string(k->id));
    http_reply_json(r, 200, t);
}

static int tenant_name_valid(const char *name) {
    size_t len = strlen(name);
    if (len == 0 || len > 64) return 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-'))) return 0;
    }
    return 1;
}

static void tenant_create(struct gw_req *r) {
    json_t *body = http_body_json(r);
    if (!body) return;
    static const char *const allowed[] = {"name", "weight", "rate_per_s", "rate_burst", "max_active_jobs", NULL};
    struct tenant_fields f;
    json_t *name = json_object_get(body, "name");
    if (tenant_fields_read(r, body, &f, allowed) < 0) goto done;
    if (!json_is_string(name) || !tenant_name_valid(json_string_value(name))) {
        http_reply_error(r, 400, "name", "invalid_value",
                         "\"name\" must be 1-64 characters of [A-Za-z0-9_.-] starting with a letter or digit");
        goto done;
    }
    struct new_key *k = http_alloc(r, sizeof(*k));
    new_key_make(k);
    char tenant_id[32];
    whet_random_id("tenant-", 16, tenant_id);
    const char *tp[] = {tenant_id, json_string_value(name), f.weight, f.rate_per_s, f.rate_burst, f.max_active_jobs};
    const char *kp[] = {k->id, tenant_id, k->hash_text, k->prefix};
    struct db_stmt stmts[] = {{.name = "admin_tenant_insert", .nparams = 6, .params = tp},
                              {.name = "admin_key_insert", .nparams = 4, .params = kp}};
    db_transaction(r, stmts, 2, tenant_create_done, k);
done:
    json_decref(body);
}

/* A page of tenants in the order they were made (a keyset on (created_at, id): migration 0048). */
static void tenant_list(struct gw_req *r) {
    const char *params[] = {http_query_param(r, "after")};
    admin_page_run(r, "tenant", tenant_json, "admin_tenant_exists", "admin_tenant_list", params, 1);
}

static void tenant_one_done(struct gw_req *r, const struct db_result *res, void *arg) {
    if (db_reply_unless_found(r, res, "tenant", "id")) return;
    if (arg) atomic_fetch_add(&gw_auth_epoch, 1); /* a disable or update: forget cached credentials */
    http_reply_json(r, 200, tenant_json(res->res[0], 0));
}

static void tenant_get(struct gw_req *r) {
    const char *p[] = {http_path_param(r, "id")};
    db_query(r, "admin_tenant_get", 1, p, tenant_one_done, NULL);
}

static void tenant_update_with(struct gw_req *r, const struct tenant_fields *f, const char *disabled) {
    const char *p[] = {http_path_param(r, "id"), f->weight, f->rate_per_s, f->rate_burst, f->max_active_jobs, disabled};
    db_query(r, "admin_tenant_update", 6, p, tenant_one_done, r /* non-NULL: bump the auth epoch */);
}

static void tenant_update(struct gw_req *r) {
    json_t *body = http_body_json(r);
    if (!body) return;
    static const char *const allowed[] = {"weight", "rate_per_s", "rate_burst", "max_active_jobs", "disabled", NULL};
    struct tenant_fields f;
    json_t *disabled = json_object_get(body, "disabled");
    if (tenant_fields_read(r, body, &f, allowed) == 0) {
        if (disabled && !json_is_boolean(disabled))
            http_reply_error(r, 400, "disabled", "invalid_value", "\"disabled\" must be true or false");
        else tenant_update_with(r, &f, disabled ? (json_is_true(disabled) ? "true" : "false") : NULL);
    }
    json_decref(body);
}

static void tenant_disable(struct gw_req *r) {
    struct tenant_fields f = {0};
    tenant_update_with(r, &f, "true");
}

static void tenant_enable(struct gw_req *r) {
    struct tenant_fields f = {0};
    tenant_update_with(r, &f, "false");
}

/* ---- API keys ---------------------------------------------------------------------------------- */

static void key_create_done(struct gw_req *r, const struct db_result *res, void *arg) {
    struct new_key *k = arg;
    if (db_reply_unless_found(r, res, "tenant", "id")) return;
    json_t *j = api_key_json(res->res[0], 0);
    json_object_set_new(j, "key", json_string(k->key));
    http_reply_json(r, 200, j);
}

/* The body is optional: {"scopes", "expires_at", "name"} (scopes.h). */
static void key_create(struct gw_req *r) {
    struct key_fields f;
    struct new_key *k = api_key_begin(r, &f);
    if (!k) return;
    const char *p[] = {k->id,   http_path_param(r, "id"), k->hash_text, k->prefix, f.scopes, f.expires_at,
                       f.name, f.monthly_limit};
    db_query(r, "admin_key_create", 8, p, key_create_done, k);
}

static void key_list_done(struct gw_req *r, const struct db_result *res, void *arg) {
    if (db_reply_unless_found(r, res, "tenant", "id")) return;
    http_reply_json(r, 200, list_json(db_rows_json(res->res[1], -1, api_key_json)));
}

static void key_list(struct gw_req *r) {
    const char *p[] = {http_path_param(r, "id")};
    struct db_stmt stmts[] = {{.name = "admin_tenant_get", .nparams = 1, .params = p},
                              {.name = "admin_key_list", .nparams = 1, .params = p}};
    db_transaction(r, stmts, 2, key_list_done, NULL);
}

static void key_revoke_done(struct gw_req *r, const struct db_result *res, void *arg) {
    if (db_reply_unless_found(r, res, "API key", "key_id")) return;
    atomic_fetch_add(&gw_auth_epoch, 1);
    http_reply_json(r, 200, api_key_json(res->res[0], 0));
}

static void key_revoke(struct gw_req *r) {
    const char *p[] = {http_path_param(r, "id"), http_path_param(r, "key_id")};
    db_query(r, "admin_key_revoke", 2, p, key_revoke_done, NULL);
}

/* ---- Quotas ------------------------------------------------------------------------------------ */

static void quotas_done(struct gw_req *r, const struct db_result *res, void *arg) {
    if (db_reply_unless_found(r, res, "tenant", "id")) return;
    const PGresult *rows = res->res[res->n - 1];
    json_t *quotas = json_object();
    for (int i = 0; i < PQntuples(rows); i++)
        json_object_set_new(quotas, db_value(rows, i, 0), db_json_integer(rows, i, 1));
    http_reply_json(r, 200, json_pack("{s:s, s:o, s:o}", "object", "tenant.quotas", "tenant_id",
                                      db_json_string(res->res[0], 0, 0), "quotas", quotas));
}

static void quotas_get(struct gw_req *r) {
    const char *p[] = {http_path_param(r, "id")};
    struct db_stmt stmts[] = {{.name = "admin_tenant_get", .nparams = 1, .params = p},
                              {.name = "admin_quota_list", .nparams = 1, .params = p}};
    db_transaction(r, stmts, 2, quotas_done, NULL);
}

/* PUT {"quotas": {"GPU_TYPE": gpus, ...}} replaces every quota of the tenant. */
static void quotas_put(struct gw_req *r) {
    json_t *body = http_body_json(r);
    if (!body) return;
    json_t *quotas = json_object_get(body, "quotas");
    const char *key;
    json_t *v;
    if (!json_is_object(quotas) || json_object_size(body) != 1) {
        http_reply_error(r, 400, "quotas", "invalid_value",
                         "the body must be {\"quotas\": {\"GPU_TYPE\": GPUS, ...}}");
        goto done;
    }
    json_object_foreach(quotas, key, v) {
        if (!*key || strlen(key) > 64 || !json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > 1000000) {
            http_reply_error(r, 400, http_printf(r, "quotas.%s", key), "invalid_value",
                             "quota for \"%s\" must be a GPU type of 1-64 characters and a count of 0 or more GPUs", key);
            goto done;
        }
    }
    char *text = json_dumps(quotas, JSON_COMPACT);
    http_free_later(r, text);
    const char *p1[] = {http_path_param(r, "id")};
    const char *p2[] = {http_path_param(r, "id"), text};
    struct db_stmt stmts[] = {{.name = "admin_tenant_get", .nparams = 1, .params = p1},
                              {.name = "admin_quota_delete", .nparams = 1, .params = p1},
                              {.name = "admin_quota_insert", .nparams = 2, .params = p2},
                              {.name = "admin_quota_list", .nparams = 1, .params = p1}};
    db_transaction(r, stmts, 4, quotas_done, NULL);
done:
    json_decref(body);
}

void admin_routes(struct http_router *rt) {
    db_prepare("admin_tenant_insert",
               "INSERT INTO tenants (id, name, weight, rate_per_s, rate_burst, max_active_jobs) VALUES ($1, $2, "
               "coalesce($3::float8, 1), coalesce($4::float8, 50), coalesce($5::int, 100), coalesce($6::int, 16)) "
               "RETURNING " TENANT_COLS);
    db_prepare("admin_key_insert", "INSERT INTO api_keys (id, tenant_id, key_hash, key_prefix) VALUES ($1, $2, "
                                   "$3::bytea, $4) RETURNING id");
    db_prepare("admin_tenant_exists", "SELECT 1 FROM tenants WHERE id = $1");
    db_prepare("admin_tenant_list",
               "SELECT " TENANT_COLS " FROM tenants WHERE (created_at, id) > "
               "(coalesce((SELECT c.created_at FROM tenants c WHERE c.id = $1), -1), coalesce($1, '')) "
               "ORDER BY created_at, id LIMIT $2");
    db_prepare("admin_tenant_get", "SELECT " TENANT_COLS " FROM tenants WHERE " TENANT_BY_ID);
    db_prepare("admin_tenant_update",
               "UPDATE tenants SET weight = coalesce($2::float8, weight), rate_per_s = coalesce($3::float8, rate_per_s), "
               "rate_burst = coalesce($4::int, rate_burst), max_active_jobs = coalesce($5::int, max_active_jobs), "
               "disabled = coalesce($6::bool, disabled) WHERE " TENANT_BY_ID " RETURNING " TENANT_COLS);
    db_prepare("admin_key_create",
               "INSERT INTO api_keys AS k (id, tenant_id, key_hash, key_prefix, scopes, expires_at, name, "
               "monthly_limit) "
               "SELECT $1, id, $3::bytea, $4, coalesce($5::text[], '{all}'), $6::bigint, $7, $8::numeric FROM tenants "
               "WHERE (id = $2 OR name = $2) RETURNING " API_KEY_COLUMNS);
    db_prepare(
        "admin_key_list",
        API_KEY_LIST_FROM("(SELECT id FROM tenants WHERE id = $1 OR name = $1 LIMIT 1)") "ORDER BY k.created_at, k.id");
    db_prepare("admin_key_revoke",
               "UPDATE api_keys k SET revoked_at = coalesce(k.revoked_at, whet_now()) FROM tenants t WHERE k.id = $2 "
               "AND t.id = k.tenant_id AND (t.id = $1 OR t.name = $1) RETURNING " API_KEY_COLUMNS);
    db_prepare("admin_quota_list", "SELECT q.gpu_type, q.gpus FROM quotas q JOIN tenants t ON t.id = q.tenant_id "
                                   "WHERE (t.id = $1 OR t.name = $1) ORDER BY q.gpu_type");
    db_prepare("admin_quota_delete",
               "DELETE FROM quotas WHERE tenant_id = (SELECT id FROM tenants WHERE " TENANT_BY_ID ")");
    db_prepare("admin_quota_insert", "INSERT INTO quotas (tenant_id, gpu_type, gpus) SELECT t.id, q.key, q.value::int "
                                     "FROM tenants t, jsonb_each_text($2::jsonb) q WHERE (t.id = $1 OR t.name = $1)");

    http_route(rt, "POST", "/admin/v1/tenants", tenant_create, HTTP_ROUTE_ADMIN, NULL);
    http_route(rt, "GET", "/admin/v1/tenants", tenant_list, HTTP_ROUTE_ADMIN, NULL);
    http_route(rt, "GET", "/admin/v1/tenants/{id}", tenant_get, HTTP_ROUTE_ADMIN, NULL);
    http_route(rt, "POST", "/admin/v1/tenants/{id}", tenant_update, HTTP_ROUTE_ADMIN, NULL);
    http_route(rt, "POST", "/admin/v1/tenants/{id}/disable", tenant_disable, HTTP_ROUTE_ADMIN, NULL);
    http_route(rt, "POST", "/admin/v1/tenants/{id}/enable", tenant_enable, HTTP_ROUTE_ADMIN, NULL);
    http_route(rt, "POST", "/admin/v1/tenants/{id}/api_keys", key_create, HTTP_ROUTE_ADMIN, NULL);
    http_route(rt, "GET", "/admin/v1/tenants/{id}/api_keys", key_list, HTTP_ROUTE_ADMIN, NULL);
    http_route(rt, "DELETE", "/admin/v1/tenants/{id}/api_keys/{key_id}", key_revoke, HTTP_ROUTE_ADMIN, NULL);
    http_route(rt, "PUT", "/admin/v1/tenants/{id}/quotas", quotas_put, HTTP_ROUTE_ADMIN, NULL);
    http_route(rt, "GET", "/admin/v1/tenants/{id}/quotas", quotas_get, HTTP_ROUTE_ADMIN, NULL);
}
