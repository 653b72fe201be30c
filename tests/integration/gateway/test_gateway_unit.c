/* test_gateway_unit.c - the gateway's pure parts, without a database: JWT verification against the
 * rules of auth.h (the header's alg must be the pinned one; exp required; nbf, iss, aud checked with
 * the configured leeway; tenant from `tenant` else `sub`; operator tokens), minting, API-key shape and
 * constant-time matching, and the router (literal segments win, 405 against 404, decoded parameters,
 * a control character in one refused, a trailing slash). The answers' JSON writer is common's
 * (tests/unit/common/test_json_text.c). */
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth.h"
#include "crypto.h"
#include "server.h"
#include "test.h"

#define SECRET "unit-test-secret-0123456789"
#define NOW 1800000000

static void config(struct auth_config *cfg, const char *iss, const char *aud) {
    setenv("WHET_JWT_ALG", "HS256", 1);
    setenv("WHET_JWT_KEY", SECRET, 1);
    if (iss) setenv("WHET_JWT_ISSUER", iss, 1);
    else unsetenv("WHET_JWT_ISSUER");
    if (aud) setenv("WHET_JWT_AUDIENCE", aud, 1);
    else unsetenv("WHET_JWT_AUDIENCE");
    unsetenv("WHET_JWT_LEEWAY");
    struct whet_err err;
    CHECK(auth_config_from_env(cfg, &err) == 0);
}

static char *b64(const char *s) {
    char *out = xmalloc(strlen(s) * 2 + 8);
    whet_base64url_encode((const uint8_t *)s, strlen(s), out);
    return out;
}

/* header.payload.signature, HMAC-SHA256 under `key`. */
static char *token(const char *header, const char *payload, const char *key) {
    char *h = b64(header), *p = b64(payload);
    char *input = xasprintf("%s.%s", h, p);
    unsigned char mac[32];
    unsigned int len = sizeof(mac);
    HMAC(EVP_sha256(), key, (int)strlen(key), (const unsigned char *)input, strlen(input), mac, &len);
    char sig[64];
    whet_base64url_encode(mac, len, sig);
    char *t = xasprintf("%s.%s", input, sig);
    free(h);
    free(p);
    free(input);
    return t;
}

/* Verifies a token built from `payload` under the HS256 header; returns 0/-1, the reason in err. */
static int verify(const struct auth_config *cfg, const char *payload, struct auth_identity *id, struct whet_err *err) {
    char *t = token("{\"alg\":\"HS256\",\"typ\":\"JWT\"}", payload, SECRET);
    int rc = auth_verify_jwt(cfg, t, NOW, id, err);
    free(t);
    return rc;
}

TEST(jwt_claims) {
    struct auth_config cfg;
    config(&cfg, NULL, NULL);
    struct auth_identity id;
    struct whet_err err;
    CHECK(verify(&cfg, "{\"tenant\":\"acme\",\"exp\":1800000100}", &id, &err) == 0);
    CHECK_STR(id.tenant, "acme");
    CHECK(!id.admin && id.expires_at == 1800000100);
    CHECK(verify(&cfg, "{\"sub\":\"globex\",\"exp\":1800000100}", &id, &err) == 0);
    CHECK_STR(id.tenant, "globex");
    CHECK(verify(&cfg, "{\"tenant\":\"acme\"}", &id, &err) < 0);
    CHECK_CONTAINS(err.msg, "exp");
    CHECK(verify(&cfg, "{\"tenant\":\"acme\",\"exp\":1799999000}", &id, &err) < 0);
    CHECK_CONTAINS(err.msg, "expired");
    CHECK(verify(&cfg, "{\"tenant\":\"acme\",\"exp\":1799999990}", &id, &err) == 0); /* within the 30 s leeway */
    CHECK(verify(&cfg, "{\"tenant\":\"acme\",\"exp\":1800000100,\"nbf\":1800000500}", &id, &err) < 0);
    CHECK_CONTAINS(err.msg, "not valid before");
    CHECK(verify(&cfg, "{\"tenant\":\"acme\",\"exp\":\"soon\"}", &id, &err) < 0);
    CHECK(verify(&cfg, "{\"exp\":1800000100}", &id, &err) < 0);
    CHECK_CONTAINS(err.msg, "no tenant");
    CHECK(verify(&cfg, "{\"tenant\":7,\"exp\":1800000100}", &id, &err) < 0);
    CHECK(verify(&cfg, "{\"admin\":true,\"exp\":1800000100}", &id, &err) == 0);
    CHECK(id.admin);
    auth_config_free(&cfg);
}

TEST(jwt_issuer_audience) {
    struct auth_config cfg;
    config(&cfg, "issuer-a", "api-b");
    struct auth_identity id;
    struct whet_err err;
    CHECK(verify(&cfg, "{\"tenant\":\"t\",\"exp\":1800000100,\"iss\":\"issuer-a\",\"aud\":\"api-b\"}", &id, &err) == 0);
    CHECK(verify(&cfg, "{\"tenant\":\"t\",\"exp\":1800000100,\"iss\":\"issuer-a\",\"aud\":[\"x\",\"api-b\"]}", &id, &err) == 0);
    CHECK(verify(&cfg, "{\"tenant\":\"t\",\"exp\":1800000100,\"iss\":\"issuer-z\",\"aud\":\"api-b\"}", &id, &err) < 0);
    CHECK_CONTAINS(err.msg, "issuer");
    CHECK(verify(&cfg, "{\"tenant\":\"t\",\"exp\":1800000100,\"aud\":\"api-b\"}", &id, &err) < 0);
    CHECK(verify(&cfg, "{\"tenant\":\"t\",\"exp\":1800000100,\"iss\":\"issuer-a\",\"aud\":[\"x\"]}", &id, &err) < 0);
    CHECK_CONTAINS(err.msg, "audience");
    CHECK(verify(&cfg, "{\"tenant\":\"t\",\"exp\":1800000100,\"iss\":\"issuer-a\"}", &id, &err) < 0);
    auth_config_free(&cfg);
}

TEST(jwt_header_and_signature) {
    struct auth_config cfg;
    config(&cfg, NULL, NULL);
    struct auth_identity id;
    struct whet_err err;
    const char *claims = "{\"tenant\":\"acme\",\"exp\":1800000100}";
    char *t = token("{\"alg\":\"none\"}", claims, SECRET);
    CHECK(auth_verify_jwt(&cfg, t, NOW, &id, &err) < 0);
    CHECK_CONTAINS(err.msg, "HS256");
    free(t);
    t = token("{\"alg\":\"HS512\"}", claims, SECRET);
    CHECK(auth_verify_jwt(&cfg, t, NOW, &id, &err) < 0);
    free(t);
    t = token("{\"alg\":\"HS256\",\"crit\":[\"exp\"]}", claims, SECRET);
    CHECK(auth_verify_jwt(&cfg, t, NOW, &id, &err) < 0);
    free(t);
    t = token("{\"alg\":\"HS256\"}", claims, "some-other-secret-value");
    CHECK(auth_verify_jwt(&cfg, t, NOW, &id, &err) < 0);
    CHECK_CONTAINS(err.msg, "signature");
    free(t);
    t = token("{\"alg\":\"HS256\"}", claims, SECRET);
    CHECK(auth_verify_jwt(&cfg, t, NOW, &id, &err) == 0);
    t[strlen(t) - 2] = t[strlen(t) - 2] == 'A' ? 'B' : 'A'; /* flip the signature */
    CHECK(auth_verify_jwt(&cfg, t, NOW, &id, &err) < 0);
    *strrchr(t, '.') = 0; /* no signature part */
    CHECK(auth_verify_jwt(&cfg, t, NOW, &id, &err) < 0);
    free(t);
    CHECK(auth_verify_jwt(&cfg, "a.b.c.d", NOW, &id, &err) < 0);
    CHECK(auth_verify_jwt(&cfg, "e30.e30.", NOW, &id, &err) < 0);
    CHECK(auth_verify_jwt(&cfg, "!!!.e30.c2ln", NOW, &id, &err) < 0);
    auth_config_free(&cfg);
    /* without a configured key nothing verifies */
    struct auth_config none = {0};
    CHECK(auth_verify_jwt(&none, "e30.e30.c2ln", NOW, &id, &err) < 0);
}

TEST(jwt_mint_roundtrip) {
    struct auth_config cfg;
    config(&cfg, "iss-1", "aud-1");
    struct whet_err err;
    struct auth_identity id;
    char *t = auth_mint_jwt(&cfg, "acme", NOW, 60, &err);
    CHECK(t != NULL);
    CHECK(t && auth_verify_jwt(&cfg, t, NOW + 10, &id, &err) == 0);
    CHECK_STR(id.tenant, "acme");
    CHECK(t && auth_verify_jwt(&cfg, t, NOW + 60 + 31, &id, &err) < 0);
    free(t);
    t = auth_mint_jwt(&cfg, NULL, NOW, 60, &err);
    CHECK(t && auth_verify_jwt(&cfg, t, NOW, &id, &err) == 0 && id.admin);
    free(t);
    auth_config_free(&cfg);
}

TEST(api_keys) {
    char key[AUTH_API_KEY_LEN + 1], other[AUTH_API_KEY_LEN + 1];
    auth_api_key_new(key);
    auth_api_key_new(other);
    CHECK(strlen(key) == AUTH_API_KEY_LEN && !strncmp(key, "sk-whet-", 8));
    CHECK(strcmp(key, other) != 0);
    CHECK(auth_is_api_key(key));
    CHECK(!auth_is_api_key("sk-whet-short"));
    char bad[AUTH_API_KEY_LEN + 1];
    memcpy(bad, key, sizeof(bad));
    bad[20] = '!';
    CHECK(!auth_is_api_key(bad));
    uint8_t hash[32];
    auth_api_key_hash(key, hash);
    CHECK(auth_api_key_matches(key, hash));
    CHECK(!auth_api_key_matches(other, hash));
}

static void handler_a(struct gw_req *r) { (void)r; }
static void handler_b(struct gw_req *r) { (void)r; }

TEST(router) {
    struct http_router *rt = router_new();
    http_route(rt, "GET", "/v1/files/{id}", handler_a, 0, "files.get");
    http_route(rt, "GET", "/v1/files/{id}/content", handler_a, 0, NULL);
    http_route(rt, "POST", "/v1/uploads/{id}/parts", handler_a, 0, NULL);
    http_route(rt, "POST", "/v1/{kind}/{id}/parts", handler_b, 0, NULL);
    http_route(rt, "DELETE", "/v1/files/{id}", handler_b, 0, NULL);
    h2o_req_t req;
    memset(&req, 0, sizeof(req));
    h2o_mem_init_pool(&req.pool);
    struct gw_req r;
    memset(&r, 0, sizeof(r));
    r.req = &req;
    int status;
#define MATCH(m, p) router_match(rt, &r, m, strlen(m), p, strlen(p), &status)
    const struct http_route *route = MATCH("GET", "/v1/files/file%2Dab%20c");
    CHECK(route && route->handler == handler_a && !strcmp(route->name, "files.get"));
    CHECK_STR(http_path_param(&r, "id"), "file-ab c");
    route = MATCH("GET", "/v1/files/abc/");
    CHECK(route && !strcmp(http_path_param(&r, "id"), "abc"));
    route = MATCH("GET", "/v1/files/abc/content");
    CHECK(route && !strcmp(route->pattern, "/v1/files/{id}/content"));
    route = MATCH("POST", "/v1/uploads/u1/parts");
    CHECK(route && route->handler == handler_a); /* literal "uploads" wins over {kind} */
    route = MATCH("POST", "/v1/jobs/j1/parts");
    CHECK(route && route->handler == handler_b && !strcmp(http_path_param(&r, "kind"), "jobs"));
    CHECK(MATCH("PUT", "/v1/files/abc") == NULL && status == 405);
    CHECK(MATCH("GET", "/v1/nothing/here/at/all") == NULL && status == 404);
    CHECK(MATCH("GET", "/v1/files//content") == NULL && status == 404); /* empty parameter */
    CHECK(MATCH("GET", "") == NULL && status == 404);
    /* A control character in a decoded parameter is refused, however it was written: handlers compare
     * names as C strings, and "x%00.json" must not read as "x". */
    const char *const refused[] = {"/v1/files/model.safetensors%00.json", "/v1/files/a%0Ab", "/v1/files/a%7f",
                                   "/v1/files/%1f", "/v1/files/ab\tc/content"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        CHECK_MSG(MATCH("GET", refused[i]) == NULL && status == 400, "%s", refused[i]);
        CHECK(r.npath >= 1 && !strcmp(r.path_names[r.npath - 1], "id") && r.path_values[r.npath - 1] == NULL);
    }
    route = MATCH("GET", "/v1/files/caf%C3%A9%20%7e");
    CHECK(route && !strcmp(http_path_param(&r, "id"), "caf\xc3\xa9 ~")); /* UTF-8 and printable ASCII pass */
#undef MATCH
    h2o_mem_clear_pool(&req.pool);
    router_free(rt);
}

TEST(rate_limit_changes_apply_at_once) {
    double retry = 0;
    int ok = 0;
    for (int i = 0; i < 8; i++) ok += ratelimit_take("t-raise", 2, 5, 100.0, &retry);
    CHECK(ok == 5 && retry > 0.4 && retry <= 0.5);
    /* The operator raises the limit: the burst's increase is there at once, not over time. */
    ok = 0;
    for (int i = 0; i < 20; i++) ok += ratelimit_take("t-raise", 1000, 1000, 100.0, &retry);
    CHECK(ok == 20);
    /* ... and lowers it: the tokens are capped at once. */
    ok = 0;
    for (int i = 0; i < 5; i++) ok += ratelimit_take("t-raise", 1, 2, 100.0, &retry);
    CHECK(ok == 2);
    CHECK(ratelimit_take("t-raise", 1, 2, 101.0, &retry) == 1); /* refills at the new rate */
    CHECK(ratelimit_take("t-other", 1, 1, 101.0, &retry) == 1);  /* tenants are separate */
}

int main(void) {
    RUN(rate_limit_changes_apply_at_once);
    RUN(jwt_claims);
    RUN(jwt_issuer_audience);
    RUN(jwt_header_and_signature);
    RUN(jwt_mint_roundtrip);
    RUN(api_keys);
    RUN(router);
    return test_summary();
}
