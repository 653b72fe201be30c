/* Unit tests for the keys of encryption at rest (common/datakey.c): the operator keyring file (the last
 * line is current; bad lines, duplicate ids and an empty file are errors that say where), and data
 * keys wrapped and unwrapped: bound to their tenant and key id, unwrappable by an older operator key
 * after a rotation, refused with a hint once the keyring lost the key they are wrapped under; and the text
 * form a gateway hands a model worker. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crypto.h"
#include "datakey.h"
#include "test.h"
#include "util.h"

static char dir[] = "/tmp/whet-datakey-test.XXXXXX";

/* Writes `text` as a keyring file and loads it; NULL (err filled) when loading fails. */
static struct whet_keyring *load(const char *text, struct whet_err *err) {
    char *path = xasprintf("%s/keys", dir);
    if (whet_write_file_atomic(path, text, strlen(text), err) != 0) abort();
    struct whet_keyring *kr = NULL;
    int rc = whet_keyring_load(path, &kr, err);
    free(path);
    return rc == 0 ? kr : NULL;
}

static const char *K1 = "k1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n";
static const char *K2 = "k2 ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100\n";

TEST(keyring_file) {
    struct whet_err err;
    char *both = xasprintf("# operator keys\n%s\n  %s", K1, K2);
    struct whet_keyring *kr = load(both, &err);
    CHECK_MSG(kr != NULL, "%s", err.msg);
    if (kr) CHECK_STR(whet_keyring_current(kr), "k2");
    whet_keyring_free(kr);
    free(both);
    CHECK(load("k1 00ff\n", &err) == NULL);
    CHECK_CONTAINS(err.msg, "keys:1: expected \"ID HEX\"");
    CHECK_CONTAINS(err.hint, "openssl rand -hex 32");
    char *dup = xasprintf("%s%s", K1, K1);
    CHECK(load(dup, &err) == NULL);
    CHECK_CONTAINS(err.msg, "keys:2: operator key id \"k1\" appears twice");
    free(dup);
    CHECK(load("# nothing\n", &err) == NULL);
    CHECK_CONTAINS(err.msg, "no operator key");
    CHECK(load("bad/id 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n", &err) == NULL);
}

TEST(wrap_unwrap_and_rotation) {
    struct whet_err err;
    struct whet_keyring *old = load(K1, &err);
    char *both_text = xasprintf("%s%s", K1, K2);
    struct whet_keyring *both = load(both_text, &err), *rotated = load(K2, &err);
    free(both_text);
    if (!old || !both || !rotated) {
        CHECK(0);
        return;
    }
    struct whet_data_key dk = {.id = 3}, got;
    whet_random_bytes(dk.key, sizeof dk.key);
    uint8_t wrapped[WHET_WRAPPED_KEY_BYTES];
    whet_data_key_wrap(old, "tenant-a", &dk, wrapped);
    CHECK(!memmem(wrapped, sizeof wrapped, dk.key, 8)); /* not stored as it is */
    CHECK(whet_data_key_unwrap(old, "k1", "tenant-a", 3, wrapped, sizeof wrapped, &got, &err) == 0);
    CHECK(got.id == 3 && memcmp(got.key, dk.key, sizeof dk.key) == 0);
    /* After a new key was appended, the old one still unwraps what it wrapped; the new one wraps. */
    memset(&got, 0, sizeof got);
    CHECK(whet_data_key_unwrap(both, "k1", "tenant-a", 3, wrapped, sizeof wrapped, &got, &err) == 0);
    CHECK(memcmp(got.key, dk.key, sizeof dk.key) == 0);
    uint8_t rewrapped[WHET_WRAPPED_KEY_BYTES];
    whet_data_key_wrap(both, "tenant-a", &got, rewrapped);
    CHECK(whet_data_key_unwrap(rotated, "k2", "tenant-a", 3, rewrapped, sizeof rewrapped, &got, &err) == 0);
    CHECK(memcmp(got.key, dk.key, sizeof dk.key) == 0);
    /* Once the old key is gone, what is still wrapped under it is refused, saying what to do. */
    CHECK(whet_data_key_unwrap(rotated, "k1", "tenant-a", 3, wrapped, sizeof wrapped, &got, &err) == -1);
    CHECK_CONTAINS(err.msg, "operator key \"k1\", which the keyring no longer has");
    CHECK_CONTAINS(err.hint, "whet migrate");
    /* Bound to the tenant and the key id: a row moved to another tenant or id does not unwrap. */
    CHECK(whet_data_key_unwrap(old, "k1", "tenant-b", 3, wrapped, sizeof wrapped, &got, &err) == -1);
    CHECK_CONTAINS(err.msg, "does not unwrap");
    CHECK(whet_data_key_unwrap(old, "k1", "tenant-a", 4, wrapped, sizeof wrapped, &got, &err) == -1);
    wrapped[20] ^= 1;
    CHECK(whet_data_key_unwrap(old, "k1", "tenant-a", 3, wrapped, sizeof wrapped, &got, &err) == -1);
    CHECK(whet_data_key_unwrap(old, "k1", "tenant-a", 3, wrapped, 10, &got, &err) == -1);
    /* The hex form a START manifest carries. */
    char hex[2 * WHET_DATA_KEY_BYTES + 1];
    whet_data_key_hex(&dk, hex);
    CHECK(whet_data_key_from_hex(3, hex, &got, &err) == 0 && memcmp(got.key, dk.key, sizeof dk.key) == 0);
    CHECK(whet_data_key_from_hex(3, "abc", &got, &err) == -1);
    whet_keyring_free(old);
    whet_keyring_free(both);
    whet_keyring_free(rotated);
}

/* The text a gateway hands a model worker: it unwraps with the same keyring into the same key and
 * tenant, and not once altered, for another tenant, or with a keyring that lacks the key. */
TEST(wrapped_text) {
    struct whet_err err;
    struct whet_keyring *kr = load(K1, &err), *other = load(K2, &err);
    if (!kr || !other) {
        CHECK(0);
        return;
    }
    struct whet_data_key dk = {.id = 7}, got;
    whet_random_bytes(dk.key, sizeof dk.key);
    char *text = whet_data_key_wrap_text(kr, "tenant-a", &dk), tenant[64];
    CHECK(!strncmp(text, "tenant-a 7 k1 ", 14) && strlen(text) == 14 + 2 * WHET_WRAPPED_KEY_BYTES);
    CHECK_MSG(whet_data_key_unwrap_text(kr, text, tenant, sizeof tenant, &got, &err) == 0, "%s", err.msg);
    CHECK_STR(tenant, "tenant-a");
    CHECK(got.id == 7 && memcmp(got.key, dk.key, sizeof dk.key) == 0);
    CHECK(whet_data_key_unwrap_text(kr, text, tenant, 8, &got, &err) == -1); /* no room for the tenant */
    CHECK(whet_data_key_unwrap_text(other, text, tenant, sizeof tenant, &got, &err) == -1);
    CHECK_CONTAINS(err.msg, "which the keyring no longer has");
    char *moved = xasprintf("tenant-b%s", text + 8);
    CHECK(whet_data_key_unwrap_text(kr, moved, tenant, sizeof tenant, &got, &err) == -1);
    CHECK_CONTAINS(err.msg, "does not unwrap");
    free(moved);
    static const char *const bad[] = {"",
                                      "tenant-a",
                                      "tenant-a 7 k1",
                                      "tenant-a 0 k1 00",
                                      "tenant-a x k1 00",
                                      "tenant-a 7 k/1 00",
                                      "tenant-a 7 k1 0g"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(whet_data_key_unwrap_text(kr, bad[i], tenant, sizeof tenant, &got, &err) == -1);
        CHECK_CONTAINS(err.msg, "expected \"TENANT KEY_ID OPERATOR_KEY_ID HEX\"");
    }
    char *extra = xasprintf("%s x", text);
    CHECK(whet_data_key_unwrap_text(kr, extra, tenant, sizeof tenant, &got, &err) == -1);
    free(extra);
    free(text);
    whet_keyring_free(kr);
    whet_keyring_free(other);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    RUN(keyring_file);
    RUN(wrap_unwrap_and_rotation);
    RUN(wrapped_text);
    char *rm = xasprintf("rm -rf '%s'", dir);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", dir);
    free(rm);
    return test_summary();
}
