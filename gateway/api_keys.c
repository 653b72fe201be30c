/* api_keys.c - API keys as objects and a tenant's own key routes (see api_keys.h). The tenant role may
 * only read api_keys; writes go through whet_tenant_key_create/revoke (migration 0007), which touch
 * nothing but the rows of the tenant the database session is scoped to. */
#include "api_keys.h"

#include <stdlib.h>
#include <string.h>

#include "crypto.h"
#include "db.h"
#include "scopes.h"
#include "server.h"

void new_key_make(struct new_key *k) {
    uint8_t hash[32];
    whet_random_id("key-", 16, k->id);
    auth_api_key_new(k->key);
    auth_api_key_hash(k->key, hash);
    k->hash_text[0] = '\\';
    k->hash_text[1] = 'x';
    whet_hex_encode(hash, 32, k->hash_text + 2);
    memcpy(k->prefix, k->key, AUTH_KEY_PREFIX_LEN);
    k->prefix[AUTH_KEY_PREFIX_LEN] = 0;
}

json_t *api_key_json(const PGresult *res, int row) {
    json_t *limit = db_value(res, row, 8) ? json_real(strtod(db_value(res, row, 8), NULL)) : json_null();
    return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:f}", "object", "api_key", "id",
                     db_json_string(res, row, 0), "tenant_id", db_json_string(res, row, 1), "prefix",
                     db_json_string(res, row, 2), "created_at", db_json_integer(res, row, 3), "revoked_at",
                     db_json_integer(res, row, 4), "scopes", scopes_json(scopes_parse(db_value(res, row, 5))),
                     "expires_at", db_json_integer(res, row, 6), "name", db_json_string(res, row, 7), "monthly_limit",
                     limit, "spent_this_month", strtod(db_value(res, row, 9), NULL));
}

static void key_create_done(struct gw_req *r, const struct db_result *res, void *arg) {
    struct new_key *k = arg;
    if (db_reply_failed(r, res)) return;
    json_t *j = api_key_json(res->res[0], 0);
    json_object_set_new(j, "key", json_string(k->key));
    http_reply_json(r, 200, j);
}

struct new_key *api_key_begin(struct gw_req *r, struct key_fields *f) {
    json_t *body = http_body(r).len ? http_body_json(r) : NULL;
    if (http_body(r).len && !body) return NULL;
    int bad = scopes_key_fields(r, body, f);
    json_decref(body);
    if (bad) return NULL;
    struct new_key *k = http_alloc(r, sizeof(*k));
    new_key_make(k);
    return k;
}

static void key_create(struct gw_req *r) {
    struct key_fields f;
    struct new_key *k = api_key_begin(r, &f);
    if (!k) return;
    const char *p[] = {k->id,        k->hash_text, k->prefix,      f.scopes ? f.scopes : "{all}",
                       f.expires_at, f.name,       f.monthly_limit};
    db_query(r, "tenant_key_create", 7, p, key_create_done, k);
}

static void key_list_done(struct gw_req *r, const struct db_result *res, void *arg) {
    (void)arg;
    if (db_reply_failed(r, res)) return;
    http_reply_json(r, 200,
                    json_pack("{s:s, s:o, s:b}", "object", "list", "data", db_rows_json(res->res[0], -1, api_key_json),
                              "has_more", 0));
}

static void key_list(struct gw_req *r) {
    const char *p[] = {http_tenant_id(r)};
    db_query(r, "tenant_key_list", 1, p, key_list_done, NULL);
}

static void key_revoke_done(struct gw_req *r, const struct db_result *res, void *arg) {
    (void)arg;
    if (db_reply_unless_found(r, res, "API key", "id")) return;
    atomic_fetch_add(&gw_auth_epoch, 1);
    http_reply_json(r, 200, api_key_json(res->res[0], 0));
}

static void key_revoke(struct gw_req *r) {
    const char *p[] = {http_path_param(r, "id")};
    db_query(r, "tenant_key_revoke", 1, p, key_revoke_done, NULL);
}

void api_keys_routes(struct http_router *rt) {
    db_prepare("tenant_key_create", "SELECT " API_KEY_COLUMNS " FROM whet_tenant_key_create($1, $2::bytea, $3, "
                                    "$4::text[], $5::bigint, $6, $7::numeric) k");
    db_prepare("tenant_key_list", API_KEY_LIST_FROM("$1") "ORDER BY k.created_at, k.id");
    db_prepare("tenant_key_revoke", "SELECT " API_KEY_COLUMNS " FROM whet_tenant_key_revoke($1) k");
    http_route(rt, "POST", "/v1/api_keys", key_create, HTTP_ROUTE_TENANT, "api_keys.create");
    http_route(rt, "GET", "/v1/api_keys", key_list, HTTP_ROUTE_TENANT, "api_keys.list");
    http_route(rt, "DELETE", "/v1/api_keys/{id}", key_revoke, HTTP_ROUTE_TENANT, "api_keys.revoke");
}
