/* crypto.h - the few primitives whet needs, on OpenSSL: SHA-256, random bytes, encodings and a
 * constant-time comparison (for API-key hashes and executor tokens). */
#ifndef WHET_CRYPTO_H
#define WHET_CRYPTO_H

#include <stddef.h>
#include <stdint.h>

void whet_sha256(const void *data, size_t len, uint8_t out[32]);
/* Hex of SHA-256, 64 chars + NUL. */
void whet_sha256_hex(const void *data, size_t len, char out[65]);
/* Fills `buf` with cryptographically secure random bytes (getrandom); aborts if the kernel can't. */
void whet_random_bytes(void *buf, size_t len);
void whet_hex_encode(const uint8_t *in, size_t len, char *out /* 2*len+1 */);
/* URL-safe base64 without padding; `out` needs 4*ceil(len/3)+1 bytes. Returns the length written. */
size_t whet_base64url_encode(const uint8_t *in, size_t len, char *out);
/* 1 when equal; runs in time that depends only on `len`. */
int whet_ct_equal(const void *a, const void *b, size_t len);
/* A random identifier: `prefix` followed by `n` characters of [A-Za-z0-9] (OpenAI-style ids such as
 * "ftjob-…"). `out` needs strlen(prefix)+n+1 bytes. */
void whet_random_id(const char *prefix, size_t n, char *out);

#endif
