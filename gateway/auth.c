/* auth.c - API keys and JWTs (see auth.h): pure logic on top of libjwt 1.10.2 and OpenSSL.
 *
 * libjwt 1.10.2 takes the algorithm from the token's own header and checks no claim at all, so this
 * file does both jobs itself: it decodes the header and refuses any `alg` but the pinned one before
 * libjwt sees the token (this closes `alg: none` and HS256-with-the-RSA-public-key confusion), always
 * hands libjwt a key, checks that libjwt agreed on the algorithm, and then checks `exp` (required),
 * `nbf`, `iss` and `aud` on the verified payload. */
#include "auth.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>
#include <jwt.h>

#include "crypto.h"
#include "env.h"

#define AUTH_TOKEN_MAX 8192 /* longer bearer tokens are refused before any parsing */
#define AUTH_PEM_MAX (64 * 1024)

static const char *alg_name(enum auth_alg alg) {
    switch (alg) {
    case AUTH_HS256: return "HS256";
    case AUTH_RS256: return "RS256";
    case AUTH_ES256: return "ES256";
    }
    return "?";
}

static jwt_alg_t alg_jwt(enum auth_alg alg) {
    switch (alg) {
    case AUTH_HS256: return JWT_ALG_HS256;
    case AUTH_RS256: return JWT_ALG_RS256;
    case AUTH_ES256: return JWT_ALG_ES256;
    }
    return JWT_ALG_INVAL;
}

/* ---- Configuration ----------------------------------------------------------------------------- */

static int read_pem(const char *var, const char *path, unsigned char **out, size_t *len, struct whet_err *err) {
    char *data;
    if (whet_read_file(path, AUTH_PEM_MAX, &data, len, err) < 0) return whet_err_prefix(err, "%s", var);
    if (!strstr(data, "-----BEGIN ")) {
        free(data);
        whet_errf(err, "%s: %s: not a PEM file", var, path);
        return whet_err_hint(err, "give the path of a PEM-encoded key");
    }
    *out = (unsigned char *)data;
    return 0;
}

int auth_config_from_env(struct auth_config *cfg, struct whet_err *err) {
    memset(cfg, 0, sizeof(*cfg));
    const char *alg = whet_env("WHET_JWT_ALG", "HS256");
    if (!strcasecmp(alg, "HS256")) cfg->alg = AUTH_HS256;
    else if (!strcasecmp(alg, "RS256")) cfg->alg = AUTH_RS256;
    else if (!strcasecmp(alg, "ES256")) cfg->alg = AUTH_ES256;
    else {
        whet_errf(err, "WHET_JWT_ALG: unsupported algorithm \"%s\"", alg);
        return whet_err_hint(err, "use HS256, RS256 or ES256");
    }

    const char *key = whet_env("WHET_JWT_KEY", NULL);
    if (key) {
        if (cfg->alg == AUTH_HS256) {
            if (strlen(key) < 16) return whet_errf(err, "WHET_JWT_KEY: an HS256 secret needs at least 16 characters");
            cfg->key = (unsigned char *)xstrdup(key);
            cfg->key_len = strlen(key);
        } else if (read_pem("WHET_JWT_KEY", key, &cfg->key, &cfg->key_len, err) < 0) {
            return -1;
        }
    }
    const char *priv = whet_env("WHET_JWT_PRIVATE_KEY", NULL);
    if (priv && cfg->alg != AUTH_HS256 &&
        read_pem("WHET_JWT_PRIVATE_KEY", priv, &cfg->private_key, &cfg->private_key_len, err) < 0) {
        auth_config_free(cfg);
        return -1;
    }
    const char *iss = whet_env("WHET_JWT_ISSUER", NULL), *aud = whet_env("WHET_JWT_AUDIENCE", NULL);
    cfg->issuer = iss ? xstrdup(iss) : NULL;
    cfg->audience = aud ? xstrdup(aud) : NULL;
    cfg->leeway_s = atoi(whet_env("WHET_JWT_LEEWAY", "30"));
    if (cfg->leeway_s < 0 || cfg->leeway_s > 600) cfg->leeway_s = 30;
    return 0;
}

void auth_config_free(struct auth_config *cfg) {
    free(cfg->key);
    free(cfg->private_key);
    free(cfg->issuer);
    free(cfg->audience);
    memset(cfg, 0, sizeof(*cfg));
}

/* ---- JWT verification -------------------------------------------------------------------------- */

/* Decodes unpadded base64url; returns the length or -1 for a character outside the alphabet. */
static long base64url_decode(const char *in, size_t len, unsigned char *out) {
    unsigned acc = 0;
    int bits = 0;
    long n = 0;
    for (size_t i = 0; i < len; i++) {
        int c = (unsigned char)in[i], v;
        if (c >= 'A' && c <= 'Z') v = c - 'A';
        else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
        else if (c >= '0' && c <= '9') v = c - '0' + 52;
        else if (c == '-') v = 62;
        else if (c == '_') v = 63;
        else return -1;
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(acc >> bits);
        }
    }
    if (len % 4 == 1) return -1;
    return n;
}

/* Parses one base64url JSON segment into an object. */
static json_t *segment_json(const char *seg, size_t len) {
    unsigned char *buf = xmalloc(len + 1);
    long n = base64url_decode(seg, len, buf);
    json_t *obj = n < 0 ? NULL : json_loadb((const char *)buf, (size_t)n, JSON_REJECT_DUPLICATES, NULL);
    free(buf);
    if (obj && !json_is_object(obj)) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

/* A NumericDate claim; -1 when absent, -2 when not a number. */
static int64_t claim_time(json_t *claims, const char *name) {
    json_t *v = json_object_get(claims, name);
    if (!v) return -1;
    if (json_is_integer(v)) return json_integer_value(v);
    if (json_is_real(v)) return (int64_t)json_real_value(v);
    return -2;
}

static int audience_matches(json_t *aud, const char *want) {
    if (json_is_string(aud)) return !strcmp(json_string_value(aud), want);
    if (!json_is_array(aud)) return 0;
    size_t i;
    json_t *v;
    json_array_foreach(aud, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), want)) return 1;
    return 0;
}

/* Checks the registered claims of a verified payload and fills the identity. */
static int check_claims(const struct auth_config *cfg, json_t *claims, int64_t now, struct auth_identity *out,
                        struct whet_err *err) {
    int64_t exp = claim_time(claims, "exp"), nbf = claim_time(claims, "nbf");
    if (exp == -1) return whet_errf(err, "token has no exp claim");
    if (exp == -2 || nbf == -2) return whet_errf(err, "token has a non-numeric exp or nbf claim");
    if (now >= exp + cfg->leeway_s) return whet_errf(err, "token expired at %lld", (long long)exp);
    if (nbf >= 0 && now + cfg->leeway_s < nbf) return whet_errf(err, "token not valid before %lld", (long long)nbf);
    if (cfg->issuer) {
        json_t *iss = json_object_get(claims, "iss");
        if (!json_is_string(iss) || strcmp(json_string_value(iss), cfg->issuer))
            return whet_errf(err, "token has the wrong issuer");
    }
    if (cfg->audience && !audience_matches(json_object_get(claims, "aud"), cfg->audience))
        return whet_errf(err, "token has the wrong audience");

    memset(out, 0, sizeof(*out));
    out->expires_at = exp;
    out->admin = json_is_true(json_object_get(claims, "admin"));
    json_t *tenant = json_object_get(claims, "tenant");
    if (!tenant) tenant = json_object_get(claims, "sub");
    if (tenant && !json_is_string(tenant)) return whet_errf(err, "token's tenant claim is not a string");
    if (tenant) {
        const char *name = json_string_value(tenant);
        size_t len = strlen(name);
        if (len == 0 || len > AUTH_TENANT_MAX) return whet_errf(err, "token's tenant claim has a bad length");
        memcpy(out->tenant, name, len + 1);
    }
    if (!out->admin && !out->tenant[0]) return whet_errf(err, "token names no tenant (tenant or sub claim)");
    return 0;
}

int auth_verify_jwt(const struct auth_config *cfg, const char *token, int64_t now, struct auth_identity *out,
                    struct whet_err *err) {
    if (!cfg->key || !cfg->key_len) return whet_errf(err, "JWT authentication is not configured (WHET_JWT_KEY)");
    size_t len = strnlen(token, AUTH_TOKEN_MAX + 1);
    if (len > AUTH_TOKEN_MAX) return whet_errf(err, "token too long");
    const char *dot1 = memchr(token, '.', len);
    const char *dot2 = dot1 ? memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - token)) : NULL;
    if (!dot1 || !dot2 || memchr(dot2 + 1, '.', len - (size_t)(dot2 + 1 - token)))
        return whet_errf(err, "malformed token: expected three dot-separated parts");
    if (dot2 + 1 == token + len) return whet_errf(err, "token is unsigned");

    /* The header decides nothing: it must name exactly the pinned algorithm. */
    json_t *header = segment_json(token, (size_t)(dot1 - token));
    if (!header) return whet_errf(err, "malformed token header");
    json_t *alg = json_object_get(header, "alg");
    int alg_ok = json_is_string(alg) && !strcmp(json_string_value(alg), alg_name(cfg->alg));
    int has_crit = json_object_get(header, "crit") != NULL;
    json_decref(header);
    if (!alg_ok) return whet_errf(err, "token algorithm is not the configured %s", alg_name(cfg->alg));
    if (has_crit) return whet_errf(err, "token header has unsupported critical extensions");

    jwt_t *jwt = NULL;
    int rc = jwt_decode(&jwt, token, cfg->key, (int)cfg->key_len);
    if (rc != 0 || !jwt) {
        if (jwt) jwt_free(jwt);
        return whet_errf(err, "token signature does not verify");
    }
    if (jwt_get_alg(jwt) != alg_jwt(cfg->alg)) {
        jwt_free(jwt);
        return whet_errf(err, "token algorithm is not the configured %s", alg_name(cfg->alg));
    }
    jwt_free(jwt);

    /* The signature covers the payload verbatim, so read the claims from the token itself. */
    json_t *claims = segment_json(dot1 + 1, (size_t)(dot2 - dot1 - 1));
    if (!claims) return whet_errf(err, "malformed token payload");
    int result = check_claims(cfg, claims, now, out, err);
    json_decref(claims);
    return result;
}

char *auth_mint_jwt(const struct auth_config *cfg, const char *tenant, int64_t now, int64_t ttl_s,
                    struct whet_err *err) {
    const unsigned char *key = cfg->alg == AUTH_HS256 ? cfg->key : cfg->private_key;
    size_t key_len = cfg->alg == AUTH_HS256 ? cfg->key_len : cfg->private_key_len;
    if (!key || !key_len) {
        whet_errf(err, cfg->alg == AUTH_HS256 ? "no HS256 secret to sign with" : "no private key to sign with");
        whet_err_hint(err, "set %s", cfg->alg == AUTH_HS256 ? "WHET_JWT_KEY" : "WHET_JWT_PRIVATE_KEY");
        return NULL;
    }
    jwt_t *jwt = NULL;
    if (jwt_new(&jwt)) {
        whet_errf(err, "jwt_new: out of memory");
        return NULL;
    }
    int bad = 0;
    if (tenant) {
        bad |= jwt_add_grant(jwt, "tenant", tenant);
        bad |= jwt_add_grant(jwt, "sub", tenant);
    } else {
        bad |= jwt_add_grant(jwt, "sub", "admin");
        bad |= jwt_add_grant_bool(jwt, "admin", 1);
    }
    bad |= jwt_add_grant_int(jwt, "iat", (long)now);
    bad |= jwt_add_grant_int(jwt, "exp", (long)(now + ttl_s));
    if (cfg->issuer) bad |= jwt_add_grant(jwt, "iss", cfg->issuer);
    if (cfg->audience) bad |= jwt_add_grant(jwt, "aud", cfg->audience);
    bad |= jwt_set_alg(jwt, alg_jwt(cfg->alg), key, (int)key_len);
    char *token = bad ? NULL : jwt_encode_str(jwt);
    jwt_free(jwt);
    if (!token) {
        whet_errf(err, "cannot sign the token with %s: %s", alg_name(cfg->alg), strerror(errno ? errno : EINVAL));
        return NULL;
    }
    char *copy = xstrdup(token);
    free(token);
    return copy;
}

/* ---- API keys ---------------------------------------------------------------------------------- */

#define API_KEY_TAG "sk-whet-"

void auth_api_key_new(char out[AUTH_API_KEY_LEN + 1]) {
    uint8_t raw[32];
    char b64[48];
    whet_random_bytes(raw, sizeof(raw));
    size_t n = whet_base64url_encode(raw, sizeof(raw), b64);
    memcpy(out, API_KEY_TAG, strlen(API_KEY_TAG));
    memcpy(out + strlen(API_KEY_TAG), b64, n);
    out[strlen(API_KEY_TAG) + n] = 0;
}

int auth_is_api_key(const char *bearer) {
    if (strncmp(bearer, API_KEY_TAG, strlen(API_KEY_TAG)) || strlen(bearer) != AUTH_API_KEY_LEN) return 0;
    for (const char *p = bearer + strlen(API_KEY_TAG); *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '_'))
            return 0;
    return 1;
}

void auth_api_key_hash(const char *key, uint8_t out[32]) { whet_sha256(key, strlen(key), out); }

int auth_api_key_matches(const char *key, const uint8_t stored_hash[32]) {
    uint8_t hash[32];
    auth_api_key_hash(key, hash);
    return whet_ct_equal(hash, stored_hash, 32);
}
