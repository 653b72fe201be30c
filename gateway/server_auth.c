/* server_auth.c - the authenticating middleware: `Authorization: Bearer` with an API key or a JWT,
 * then the tenant's rate limit, then the route's handler.
 *
 * API keys are looked up by their clear prefix (api_keys joined to tenants), the presented key is
 * compared against the stored SHA-256 in constant time (auth_api_key_matches), and revoked keys and
 * disabled tenants are refused. JWTs are verified by auth.c without I/O; a tenant token's tenant name
 * is then resolved to its row. Successful lookups are cached per event loop for a short time
 * (gateway_options.auth_cache_ttl_ms); an operator revoking a key or disabling a tenant bumps
 * gw_auth_epoch, which empties every loop's cache at once. Failures are never cached. A key revoked
 * or a tenant disabled anywhere else (SQL, another gateway replica) is refused once the notification
 * on whet_auth arrives (replica.h; test scale_gateways), and at the latest after the cache TTL
 * (WHET_GATEWAY_AUTH_CACHE_MS, default 5000 ms; test gateway_auth_cache). Cache entries are keyed by
 * the SHA-256 of the key, so the cache holds no secret.
 *
 * Every failure is a 401 whose message says what is wrong with the caller's own credentials and
 * nothing about other tenants. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "crypto.h"
#include "db.h"
#include "log.h"
#include "scopes.h"
#include "server.h"

#define AUTH_CACHE_SLOTS 256

struct auth_entry {
    int used;
    uint8_t key[32]; /* SHA-256 of the API key, or of "tenant:" + name for tenant tokens */
    char tenant_id[HTTP_TENANT_ID_MAX + 1];
    char tenant_name[HTTP_TENANT_ID_MAX + 1];
    double rate_per_s, burst;
    char key_id[HTTP_TENANT_ID_MAX + 1]; /* the API key's id, "" for tenant tokens */
    unsigned scopes;        /* enum scope (scopes.h) */
    long long key_expires;  /* the API key's expires_at (Unix seconds), 0: never */
    double expires; /* whet_now_mono() */
    unsigned epoch;
};

struct auth_cache {
    struct auth_entry slots[AUTH_CACHE_SLOTS];
};

struct auth_cache *auth_cache_new(void) { return xcalloc(1, sizeof(struct auth_cache)); }
void auth_cache_free(struct auth_cache *c) { free(c); }

static struct auth_entry *cache_slot(struct auth_cache *c, const uint8_t key[32]) {
    unsigned idx = ((unsigned)key[0] | (unsigned)key[1] << 8) % AUTH_CACHE_SLOTS;
    return &c->slots[idx];
}

static const struct auth_entry *cache_get(struct gw_req *r, const uint8_t key[32]) {
    struct auth_entry *e = cache_slot(r->thread->auth_cache, key);
    if (!e->used || !whet_ct_equal(e->key, key, 32)) return NULL;
    if (e->epoch != atomic_load(&gw_auth_epoch) || e->expires < whet_now_mono()) {
        e->used = 0;
        return NULL;
    }
    return e;
}

/* `epoch` is gw_auth_epoch as it was when the lookup started: a row read before an operator's change
 * may reach here after it, and must not be cached as current. */
static void cache_put(struct gw_req *r, const uint8_t key[32], unsigned epoch, const char *tenant_id,
                      const char *tenant_name, const char *key_id, double rate_per_s, double burst, unsigned scopes,
                      long long key_expires) {
    struct auth_entry *e = cache_slot(r->thread->auth_cache, key);
    e->used = 1;
    memcpy(e->key, key, 32);
    snprintf(e->tenant_id, sizeof(e->tenant_id), "%s", tenant_id);
    snprintf(e->tenant_name, sizeof(e->tenant_name), "%s", tenant_name);
    e->rate_per_s = rate_per_s;
    e->burst = burst;
    snprintf(e->key_id, sizeof(e->key_id), "%s", key_id);
    e->scopes = scopes;
    e->key_expires = key_expires;
    e->expires = whet_now_mono() + r->thread->gw->opts.auth_cache_ttl_ms / 1000.0;
    e->epoch = epoch;
}

void auth_prepare_statements(void) {
    db_prepare("auth_api_key", "SELECT k.key_hash, k.revoked_at IS NOT NULL, t.id, t.name, t.rate_per_s, t.rate_burst, "
                               "t.disabled, k.scopes, k.expires_at, k.id "
                               "FROM api_keys k JOIN tenants t ON t.id = k.tenant_id "
                               "WHERE k.key_prefix = $1");
    db_prepare("auth_tenant", "SELECT id, name, rate_per_s, rate_burst, disabled FROM tenants WHERE name = $1");
}

/* 401 with the message fmt (one %s: arg) and a hint (NULL: none). */
static void reply_unauthorized(struct gw_req *r, const char *code, const char *hint, const char *fmt, const char *arg) {
    http_add_header(r, "www-authenticate", "Bearer");
    http_reply_error_hint(r, 401, NULL, code, hint, fmt, arg);
}

static void copy_bounded(char *dst, size_t size, const char *src) {
    size_t n = strnlen(src, size - 1);
    memcpy(dst, src, n);
    dst[n] = 0;
}

/* Identity known: check the key's expiry and scopes (scopes.h), apply the tenant's rate limit and run
 * the handler. */
static void tenant_admitted(struct gw_req *r, const char *tenant_id, const char *tenant_name, const char *key_id,
                            double rate_per_s, double burst, unsigned scopes, long long key_expires) {
    if (key_expires && whet_now_unix() >= key_expires) {
        reply_unauthorized(r, "api_key_expired", "ask for a new key", "%s", "this API key has expired");
        return;
    }
    const char *needed = scopes_needed(scopes, r->route->method, r->route->pattern);
    if (needed) {
        http_reply_error(r, 403, NULL, "insufficient_scope", "this API key may not call %s %s: it needs the scope %s",
                         r->route->method, r->route->pattern, needed);
        return;
    }
    /* Bounded copies, not snprintf: this runs on every request, and printf is slow in this process
     * (see request_log in http.c). */
    copy_bounded(r->tenant_id, sizeof(r->tenant_id), tenant_id);
    copy_bounded(r->tenant_name, sizeof(r->tenant_name), tenant_name);
    copy_bounded(r->api_key_id, sizeof(r->api_key_id), key_id);
    /* This replica's share of the tenant's limits (replica.h): the replicas together enforce them. */
    double retry = 0, replicas = atomic_load(&gw_replicas), share_burst = burst / replicas;
    if (!ratelimit_take(tenant_id, rate_per_s / replicas, share_burst < 1 ? 1 : share_burst, whet_now_mono(), &retry)) {
        http_reply_rate_limited(r, retry, "retry after the time in the retry-after header",
                                "rate limit exceeded: %g requests per second, bursts of %g", rate_per_s, burst);
        return;
    }
    gw_req_dispatch(r);
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* bytea in hex output format ("\x" + 64 hex digits) -> 32 bytes. */
static int bytea_hash(const char *text, uint8_t out[32]) {
    if (!text || strlen(text) != 66 || text[0] != '\\' || text[1] != 'x') return -1;
    for (int i = 0; i < 32; i++) {
        int hi = hex_digit(text[2 + 2 * i]), lo = hex_digit(text[3 + 2 * i]);
        if (hi < 0 || lo < 0) return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

struct key_lookup {
    char key[AUTH_API_KEY_LEN + 1];
    uint8_t hash[32];
    unsigned epoch; /* gw_auth_epoch when the lookup started */
};

static void on_api_key_rows(struct gw_req *r, const struct db_result *res, void *arg) {
    struct key_lookup *kl = arg;
    if (db_reply_failed(r, res)) return;
    const PGresult *rows = res->res[0];
    for (int i = 0; i < PQntuples(rows); i++) {
        uint8_t stored[32];
        if (bytea_hash(db_value(rows, i, 0), stored) < 0 || !auth_api_key_matches(kl->key, stored)) continue;
        if (!strcmp(db_value(rows, i, 1), "t")) {
            reply_unauthorized(r, "invalid_api_key", "ask your operator for a new one", "API key %s has been revoked",
                               http_printf(r, "%.*s...", AUTH_KEY_PREFIX_LEN, kl->key));
            return;
        }
        if (!strcmp(db_value(rows, i, 6), "t")) {
            reply_unauthorized(r, "tenant_disabled", "contact your operator", "%s", "this tenant is disabled");
            return;
        }
        const char *tenant_id = db_value(rows, i, 2), *name = db_value(rows, i, 3);
        double rate = strtod(db_value(rows, i, 4), NULL), burst = strtod(db_value(rows, i, 5), NULL);
        unsigned scopes = scopes_parse(db_value(rows, i, 7));
        long long expires = db_value(rows, i, 8) ? strtoll(db_value(rows, i, 8), NULL, 10) : 0;
        const char *key_id = db_value(rows, i, 9);
        cache_put(r, kl->hash, kl->epoch, tenant_id, name, key_id, rate, burst, scopes, expires);
        tenant_admitted(r, tenant_id, name, key_id, rate, burst, scopes, expires);
        return;
    }
    reply_unauthorized(r, "invalid_api_key", "check the key, it is shown once at creation", "%s", "invalid API key");
}

static void on_tenant_row(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct key_lookup *kl = arg; /* only hash and epoch: a token has no key */
    if (db_reply_failed(r, res)) return;
    const PGresult *rows = res->res[0];
    if (PQntuples(rows) != 1) {
        reply_unauthorized(r, "invalid_token", NULL, "%s", "invalid token: the tenant it names does not exist");
        return;
    }
    if (!strcmp(db_value(rows, 0, 4), "t")) {
        reply_unauthorized(r, "tenant_disabled", "contact your operator", "%s", "this tenant is disabled");
        return;
    }
    const char *tenant_id = db_value(rows, 0, 0), *name = db_value(rows, 0, 1);
    double rate = strtod(db_value(rows, 0, 2), NULL), burst = strtod(db_value(rows, 0, 3), NULL);
    cache_put(r, kl->hash, kl->epoch, tenant_id, name, "", rate, burst, SCOPE_ALL, 0);
    tenant_admitted(r, tenant_id, name, "", rate, burst, SCOPE_ALL, 0);
}

static void authenticate_api_key(struct gw_req *r, const char *key) {
    if (r->route->flags & HTTP_ROUTE_ADMIN) {
        reply_unauthorized(r, "operator_token_required", "mint one with `whet token --admin`", "%s",
                           "the operator API needs an operator token");
        return;
    }
    r->auth_kind = "key";
    struct key_lookup *kl = http_alloc(r, sizeof(*kl));
    memcpy(kl->key, key, AUTH_API_KEY_LEN + 1);
    auth_api_key_hash(key, kl->hash);
    kl->epoch = atomic_load(&gw_auth_epoch);
    const struct auth_entry *e = cache_get(r, kl->hash);
    if (e) {
        tenant_admitted(r, e->tenant_id, e->tenant_name, e->key_id, e->rate_per_s, e->burst, e->scopes,
                        e->key_expires);
        return;
    }
    char prefix[AUTH_KEY_PREFIX_LEN + 1];
    memcpy(prefix, key, AUTH_KEY_PREFIX_LEN);
    prefix[AUTH_KEY_PREFIX_LEN] = 0;
    const char *params[] = {prefix};
    db_query(r, "auth_api_key", 1, params, on_api_key_rows, kl);
}

static void authenticate_jwt(struct gw_req *r, const char *token) {
    struct auth_identity id;
    struct whet_err err;
    r->auth_kind = "jwt";
    if (auth_verify_jwt(&r->thread->gw->auth, token, whet_now_unix(), &id, &err) < 0) {
        reply_unauthorized(r, "invalid_token", NULL, "invalid token: %s", err.msg);
        return;
    }
    if (r->route->flags & HTTP_ROUTE_ADMIN) {
        if (!id.admin) {
            reply_unauthorized(r, "operator_token_required", NULL, "%s",
                               "the operator API needs an operator token, not a tenant's");
            return;
        }
        r->admin = 1;
        gw_req_dispatch(r);
        return;
    }
    if (id.admin) {
        reply_unauthorized(r, "tenant_credentials_required", "use a tenant's API key or token", "%s",
                           "operator tokens are for /admin/v1");
        return;
    }
    struct key_lookup *kl = http_alloc(r, sizeof(*kl));
    kl->key[0] = 0;
    char *material = http_printf(r, "tenant:%s", id.tenant);
    whet_sha256(material, strlen(material), kl->hash);
    kl->epoch = atomic_load(&gw_auth_epoch);
    const struct auth_entry *e = cache_get(r, kl->hash);
    if (e) {
        tenant_admitted(r, e->tenant_id, e->tenant_name, e->key_id, e->rate_per_s, e->burst, e->scopes,
                        e->key_expires);
        return;
    }
    const char *params[] = {id.tenant};
    db_query(r, "auth_tenant", 1, params, on_tenant_row, kl);
}

void gw_authenticate(struct gw_req *r) {
    ssize_t i = h2o_find_header(&r->req->headers, H2O_TOKEN_AUTHORIZATION, -1);
    if (i < 0) {
        reply_unauthorized(r, "missing_authorization", "send `Authorization: Bearer <API key or token>`", "%s",
                           "missing Authorization header");
        return;
    }
    h2o_iovec_t v = r->req->headers.entries[i].value;
    if (v.len < 7 || strncasecmp(v.base, "Bearer ", 7)) {
        reply_unauthorized(r, "invalid_authorization", NULL, "%s",
                           "the Authorization header must be `Bearer <API key or token>`");
        return;
    }
    size_t start = 7, end = v.len;
    while (start < end && v.base[start] == ' ') start++;
    while (end > start && v.base[end - 1] == ' ') end--;
    if (start == end || end - start > 8192) {
        reply_unauthorized(r, "invalid_authorization", NULL, "%s", "the bearer credential is empty or too long");
        return;
    }
    char *credential = http_strndup(r, v.base + start, end - start);
    if (auth_is_api_key(credential)) authenticate_api_key(r, credential);
    else if (!strncmp(credential, "sk-", 3))
        reply_unauthorized(r, "invalid_api_key", "check the key, it is shown once at creation", "%s",
                           "invalid API key");
    else authenticate_jwt(r, credential);
}

/* ---- GET /v1/whoami ---------------------------------------------------------------------------- */

/* A whet extension: who the credentials belong to, and the tenant the database session is scoped to
 * for this request (row-level security's whet.tenant_id), so a client can check its key and an
 * operator can check the scoping end to end. */
static void whoami_done(struct gw_req *r, const struct db_result *res, void *arg) {
    if (db_reply_failed(r, res)) return;
    http_reply_json(r, 200, json_pack("{s:s, s:s, s:s, s:s, s:o}", "object", "identity", "tenant_id", r->tenant_id,
                                      "tenant", r->tenant_name, "auth", r->auth_kind ? r->auth_kind : "",
                                      "database_tenant", db_json_string(res->res[0], 0, 0)));
}

static void whoami(struct gw_req *r) { db_query(r, "auth_whoami", 0, NULL, whoami_done, NULL); }

void auth_routes(struct http_router *rt) {
    db_prepare("auth_whoami", "SELECT whet_current_tenant()");
    http_route(rt, "GET", "/v1/whoami", whoami, HTTP_ROUTE_TENANT, NULL);
}
