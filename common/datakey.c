/* datakey.c - the operator keyring and the wrapping of tenant data keys (see datakey.h). */
#include "datakey.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crypto.h"

#define KEYRING_MAX 64

struct operator_key {
    char id[WHET_OPERATOR_KEY_ID_MAX + 1];
    uint8_t key[32];
};

struct whet_keyring {
    struct operator_key keys[KEYRING_MAX];
    int n; /* keys[n-1] is the current one */
};

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes exactly 2*len hex digits; -1 on anything else. */
static int hex_decode(const char *hex, size_t hex_len, uint8_t *out, size_t len) {
    if (hex_len != 2 * len) return -1;
    for (size_t i = 0; i < len; i++) {
        int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

static int id_valid(const char *id, size_t len) {
    if (len == 0 || len > WHET_OPERATOR_KEY_ID_MAX) return 0;
    for (size_t i = 0; i < len; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-", id[i])) return 0;
    return 1;
}

int whet_keyring_load(const char *path, struct whet_keyring **out, struct whet_err *err) {
    char *text = NULL;
    size_t len = 0;
    if (whet_read_file(path, 1 << 20, &text, &len, err) != 0) return whet_err_prefix(err, "operator keyring");
    struct whet_keyring *kr = xcalloc(1, sizeof *kr);
    int rc = 0, line_no = 0;
    for (char *line = text, *next; rc == 0 && line && *line; line = next) {
        line_no++;
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *id = line + strspn(line, " \t\r");
        size_t id_len = strcspn(id, " \t\r");
        if (id_len == 0) continue;
        char *hex = id + id_len + strspn(id + id_len, " \t");
        size_t hex_len = strcspn(hex, " \t\r");
        if (hex[hex_len + strspn(hex + hex_len, " \t\r")] != 0 || !id_valid(id, id_len) ||
            kr->n == KEYRING_MAX || hex_decode(hex, hex_len, kr->keys[kr->n].key, 32) != 0) {
            whet_errf(err, "%s:%d: expected \"ID HEX\": an id of 1-%d characters [A-Za-z0-9_.-] and 64 hex digits",
                      path, line_no, WHET_OPERATOR_KEY_ID_MAX);
            rc = whet_err_hint(err, "make a key with: echo \"$(date +%%Y%%m%%d) $(openssl rand -hex 32)\" >> %s", path);
            break;
        }
        memcpy(kr->keys[kr->n].id, id, id_len);
        for (int i = 0; i < kr->n; i++)
            if (strcmp(kr->keys[i].id, kr->keys[kr->n].id) == 0)
                rc = whet_errf(err, "%s:%d: operator key id \"%s\" appears twice", path, line_no, kr->keys[i].id);
        kr->n++;
    }
    OPENSSL_cleanse(text, len);
    free(text);
    if (rc == 0 && kr->n == 0) rc = whet_errf(err, "%s: no operator key in the keyring", path);
    if (rc != 0) {
        whet_keyring_free(kr);
        return -1;
    }
    *out = kr;
    return 0;
}

int whet_keyring_from_env(struct whet_keyring **out, struct whet_err *err) {
    *out = NULL;
    const char *path = getenv("WHET_DATA_KEY_FILE");
    if (!path || !*path) return 0;
    return whet_keyring_load(path, out, err) ? whet_err_prefix(err, "WHET_DATA_KEY_FILE") : 0;
}

void whet_keyring_free(struct whet_keyring *kr) {
    if (!kr) return;
    OPENSSL_cleanse(kr, sizeof *kr);
    free(kr);
}

const char *whet_keyring_current(const struct whet_keyring *kr) { return kr->keys[kr->n - 1].id; }

/* AES-256-GCM over `len` bytes in place, additional data "whet-data-key\0TENANT\0ID"; 0 or -1. */
static int wrap_crypt(int seal, const uint8_t key[32], const uint8_t nonce[12], const char *tenant_id, uint32_t key_id,
                      uint8_t *data, size_t len, uint8_t tag[16]) {
    char aad[256];
    int aad_len = snprintf(aad, sizeof aad, "whet-data-key%c%s%c%u", 0, tenant_id, 0, key_id);
    if (aad_len < 0 || (size_t)aad_len >= sizeof aad) return -1;
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int n = 0, ok = c && EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, key, nonce, seal) == 1 &&
                    EVP_CipherUpdate(c, NULL, &n, (const uint8_t *)aad, aad_len) == 1 &&
                    EVP_CipherUpdate(c, data, &n, data, (int)len) == 1;
    if (ok && !seal) ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, 16, tag) == 1;
    if (ok) ok = EVP_CipherFinal_ex(c, data + len, &n) == 1;
    if (ok && seal) ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, tag) == 1;
    EVP_CIPHER_CTX_free(c);
    return ok ? 0 : -1;
}

void whet_data_key_wrap(const struct whet_keyring *kr, const char *tenant_id, const struct whet_data_key *dk,
                        uint8_t out[WHET_WRAPPED_KEY_BYTES]) {
    whet_random_bytes(out, 12);
    memcpy(out + 12, dk->key, WHET_DATA_KEY_BYTES);
    if (wrap_crypt(1, kr->keys[kr->n - 1].key, out, tenant_id, dk->id, out + 12, WHET_DATA_KEY_BYTES,
                   out + 12 + WHET_DATA_KEY_BYTES) != 0) {
        fprintf(stderr, "whet: OpenSSL cannot wrap a data key\n");
        abort();
    }
}

int whet_data_key_unwrap(const struct whet_keyring *kr, const char *operator_key_id, const char *tenant_id,
                         uint32_t key_id, const uint8_t *wrapped, size_t len, struct whet_data_key *out,
                         struct whet_err *err) {
    const struct operator_key *op = NULL;
    for (int i = 0; i < kr->n; i++)
        if (strcmp(kr->keys[i].id, operator_key_id) == 0) op = &kr->keys[i];
    if (!op) {
        whet_errf(err, "tenant %s: data key %u is wrapped under operator key \"%s\", which the keyring no longer has",
                  tenant_id, key_id, operator_key_id);
        return whet_err_hint(err, "put that key back into WHET_DATA_KEY_FILE (before the current, last line) and run "
                                  "`whet migrate` to rewrap every data key under the current one");
    }
    if (len != WHET_WRAPPED_KEY_BYTES)
        return whet_errf(err, "tenant %s: wrapped data key %u has %zu bytes, not %d", tenant_id, key_id, len,
                         WHET_WRAPPED_KEY_BYTES);
    uint8_t buf[WHET_DATA_KEY_BYTES + 16], tag[16];
    memcpy(buf, wrapped + 12, WHET_DATA_KEY_BYTES);
    memcpy(tag, wrapped + 12 + WHET_DATA_KEY_BYTES, 16);
    int rc = wrap_crypt(0, op->key, wrapped, tenant_id, key_id, buf, WHET_DATA_KEY_BYTES, tag);
    if (rc == 0) {
        out->id = key_id;
        memcpy(out->key, buf, WHET_DATA_KEY_BYTES);
    }
    OPENSSL_cleanse(buf, sizeof buf);
    if (rc != 0)
        return whet_errf(err, "tenant %s: data key %u does not unwrap under operator key \"%s\" (a different key "
                              "with that id, or a row that was tampered with)", tenant_id, key_id, operator_key_id);
    return 0;
}

char *whet_data_key_wrap_text(const struct whet_keyring *kr, const char *tenant_id, const struct whet_data_key *dk) {
    uint8_t wrapped[WHET_WRAPPED_KEY_BYTES];
    char hex[2 * WHET_WRAPPED_KEY_BYTES + 1];
    whet_data_key_wrap(kr, tenant_id, dk, wrapped);
    whet_hex_encode(wrapped, sizeof wrapped, hex);
    return xasprintf("%s %u %s %s", tenant_id, dk->id, whet_keyring_current(kr), hex);
}

int whet_data_key_unwrap_text(const struct whet_keyring *kr, const char *text, char *tenant_id, size_t tenant_len,
                              struct whet_data_key *out, struct whet_err *err) {
    const char *field[4];
    size_t len[4];
    const char *p = text;
    for (int i = 0; i < 4; i++) {
        field[i] = p;
        len[i] = strcspn(p, " ");
        p += len[i];
        if (*p == ' ' && i < 3) p++;
    }
    char op_id[WHET_OPERATOR_KEY_ID_MAX + 1], *end = NULL;
    uint8_t wrapped[WHET_WRAPPED_KEY_BYTES];
    unsigned long key_id = len[1] && len[1] <= 10 ? strtoul(field[1], &end, 10) : 0;
    if (*p || !len[0] || len[0] >= tenant_len || !key_id || key_id > UINT32_MAX || end != field[1] + len[1] ||
        !id_valid(field[2], len[2]) || hex_decode(field[3], len[3], wrapped, sizeof wrapped) != 0)
        return whet_errf(err, "a wrapped data key: expected \"TENANT KEY_ID OPERATOR_KEY_ID HEX\" (%d hex digits)",
                         2 * WHET_WRAPPED_KEY_BYTES);
    memcpy(tenant_id, field[0], len[0]);
    tenant_id[len[0]] = 0;
    memcpy(op_id, field[2], len[2]);
    op_id[len[2]] = 0;
    return whet_data_key_unwrap(kr, op_id, tenant_id, (uint32_t)key_id, wrapped, sizeof wrapped, out, err);
}

void whet_data_key_hex(const struct whet_data_key *dk, char out[2 * WHET_DATA_KEY_BYTES + 1]) {
    whet_hex_encode(dk->key, WHET_DATA_KEY_BYTES, out);
}

int whet_data_key_from_hex(uint32_t id, const char *hex, struct whet_data_key *out, struct whet_err *err) {
    if (hex_decode(hex, strlen(hex), out->key, WHET_DATA_KEY_BYTES) != 0)
        return whet_errf(err, "a data key must be %d hex digits", 2 * WHET_DATA_KEY_BYTES);
    out->id = id;
    return 0;
}
