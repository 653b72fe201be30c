/* crypto.c - see crypto.h. */
#include "crypto.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

void whet_sha256(const void *data, size_t len, uint8_t out[32]) { SHA256(data, len, out); }

void whet_sha256_hex(const void *data, size_t len, char out[65]) {
    uint8_t d[32];
    whet_sha256(data, len, d);
    whet_hex_encode(d, 32, out);
}

void whet_random_bytes(void *buf, size_t len) {
    uint8_t *p = buf;
    while (len) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            perror("whet: getrandom");
            abort();
        }
        p += n;
        len -= (size_t)n;
    }
}

void whet_hex_encode(const uint8_t *in, size_t len, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * len] = 0;
}

size_t whet_base64url_encode(const uint8_t *in, size_t len, char *out) {
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0, i = 0;
    for (; i + 2 < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = tbl[v >> 18 & 63];
        out[o++] = tbl[v >> 12 & 63];
        out[o++] = tbl[v >> 6 & 63];
        out[o++] = tbl[v & 63];
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = tbl[v >> 18 & 63];
        out[o++] = tbl[v >> 12 & 63];
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = tbl[v >> 18 & 63];
        out[o++] = tbl[v >> 12 & 63];
        out[o++] = tbl[v >> 6 & 63];
    }
    out[o] = 0;
    return o;
}

int whet_ct_equal(const void *a, const void *b, size_t len) { return CRYPTO_memcmp(a, b, len) == 0; }

void whet_random_id(const char *prefix, size_t n, char *out) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    size_t plen = strlen(prefix);
    memcpy(out, prefix, plen);
    uint8_t rnd[64];
    for (size_t i = 0; i < n; i++) {
        if (i % sizeof rnd == 0) whet_random_bytes(rnd, sizeof rnd);
        /* 62 does not divide 256; the bias (4/256 on a few letters) is irrelevant for ids. */
        out[plen + i] = alphabet[rnd[i % sizeof rnd] % 62];
    }
    out[plen + n] = 0;
}
