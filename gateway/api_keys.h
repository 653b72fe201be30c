/* api_keys.h - API keys as objects: making one, its JSON, and a tenant's own key routes:
 *   POST   /v1/api_keys          {"scopes": [...], "expires_at": T, "name": "..."}  (the key is shown once)
 *   GET    /v1/api_keys          the tenant's keys
 *   DELETE /v1/api_keys/{id}     revoke
 * Operators make keys for any tenant with POST /admin/v1/tenants/{id}/api_keys (admin.c), same body.
 * A scoped key cannot make keys (scopes.h: POST and DELETE here need `all`). */
#ifndef WHET_GATEWAY_API_KEYS_H
#define WHET_GATEWAY_API_KEYS_H

#include <libpq-fe.h>

#include "auth.h"
#include "http.h"

/* A new key: its id, the key itself (shown once), its stored hash as bytea text and its prefix. */
struct new_key {
    char id[32];
    char key[AUTH_API_KEY_LEN + 1];
    char hash_text[2 + 64 + 1];
    char prefix[AUTH_KEY_PREFIX_LEN + 1];
};
void new_key_make(struct new_key *k);
/* A key create's start: reads the optional body ({"scopes", "expires_at", "name"}, scopes.h) into f and
 * makes the key (in the request's pool); NULL having answered 400. */
struct key_fields;
struct new_key *api_key_begin(struct gw_req *r, struct key_fields *f);

/* The columns every key query returns, in this order (table alias k); the last is the month's spend of
 * the key (migration 0009): of one key, whet_key_spend; of a tenant's keys, API_KEY_LIST_FROM's (0043), which
 * makes the tenant's month of cost lines once instead of once a key. */
#define API_KEY_FIELDS                                                                                                 \
    "k.id, k.tenant_id, k.key_prefix, k.created_at, k.revoked_at, k.scopes, k.expires_at, k.name, k.monthly_limit"
#define API_KEY_COLUMNS API_KEY_FIELDS ", whet_key_spend(k.id)"
/* The keys of the tenant whose id is TENANT (an SQL expression), with their spends as s.spent. */
#define API_KEY_LIST_FROM(TENANT)                                                                                      \
    "SELECT " API_KEY_FIELDS ", s.spent FROM whet_tenant_key_spends(" TENANT ") s JOIN api_keys k ON k.id = s.key_id "
json_t *api_key_json(const PGresult *res, int row);

void api_keys_routes(struct http_router *rt);

#endif
