/* auth.h - who is calling: tenant API keys and JWTs (tenant and operator tokens).
 *
 * Pure logic, no I/O: the gateway looks API keys up in PostgreSQL by their prefix and compares the
 * SHA-256 here in constant time; JWTs are verified entirely here.
 *
 * JWT rules (DESIGN.md, "Security model"): the algorithm is pinned by configuration (WHET_JWT_ALG:
 * HS256, RS256 or ES256), a key is always passed to libjwt (never NULL, which would verify nothing),
 * the header's `alg` must equal the pinned one (so `none` and HS256-signed-with-the-RSA-public-key
 * algorithm confusion are refused before libjwt sees the token), `exp` is required and checked, `nbf`,
 * `iss` (WHET_JWT_ISSUER) and `aud` (WHET_JWT_AUDIENCE, string or array) are checked when configured.
 * The tenant comes from the `tenant` claim, else `sub`; an operator token carries `"admin": true`. */
#ifndef WHET_GATEWAY_AUTH_H
#define WHET_GATEWAY_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

enum auth_alg { AUTH_HS256, AUTH_RS256, AUTH_ES256 };

struct auth_config {
    enum auth_alg alg;
    unsigned char *key; /* HS256 secret, or the PEM public key (RS256/ES256); owned */
    size_t key_len;
    unsigned char *private_key; /* PEM private key to mint RS256/ES256 tokens (optional); owned */
    size_t private_key_len;
    char *issuer;   /* NULL: not checked; minted tokens carry it */
    char *audience; /* NULL: not checked; minted tokens carry it */
    int leeway_s;   /* clock skew allowed on exp/nbf */
};

/* Reads WHET_JWT_ALG, WHET_JWT_KEY (the HS256 secret, or a path to a PEM public key),
 * WHET_JWT_PRIVATE_KEY (optional PEM path, to mint RS256/ES256), WHET_JWT_ISSUER, WHET_JWT_AUDIENCE. */
int auth_config_from_env(struct auth_config *cfg, struct whet_err *err);
void auth_config_free(struct auth_config *cfg);

#define AUTH_TENANT_MAX 64

struct auth_identity {
    int admin;                        /* an operator token (for /admin/v1) */
    char tenant[AUTH_TENANT_MAX + 1]; /* tenant name (tenant tokens and API keys) */
    int64_t expires_at;
};

/* Verifies a JWT at time `now` (Unix seconds). On failure returns -1 with the reason in err (for the
 * log; clients get a plain 401). */
int auth_verify_jwt(const struct auth_config *cfg, const char *token, int64_t now, struct auth_identity *out,
                    struct whet_err *err);
/* Mints a token for `tenant` (NULL: an operator token) valid for ttl_s seconds from `now`; the caller
 * frees the result. Needs the HS256 secret or a private key. */
char *auth_mint_jwt(const struct auth_config *cfg, const char *tenant, int64_t now, int64_t ttl_s, struct whet_err *err);

/* API keys: "sk-whet-" followed by 43 base64url characters (32 random bytes). The first
 * AUTH_KEY_PREFIX_LEN characters are stored in clear to find the row; the SHA-256 of the whole key is
 * what is compared. */
#define AUTH_API_KEY_LEN 51
#define AUTH_KEY_PREFIX_LEN 16
void auth_api_key_new(char out[AUTH_API_KEY_LEN + 1]);
/* 1 when `bearer` has the shape of an API key (then it is looked up, not parsed as a JWT). */
int auth_is_api_key(const char *bearer);
void auth_api_key_hash(const char *key, uint8_t out[32]);
/* Constant-time comparison of a presented key against a stored SHA-256. */
int auth_api_key_matches(const char *key, const uint8_t stored_hash[32]);

#endif
