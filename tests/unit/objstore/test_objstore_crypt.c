/* Unit tests for encryption at rest (objstore_encrypted, common/objstore/objstore_crypt.c): objects
 * written through a sealed view read back byte for byte (whole, by range across chunk edges, through
 * the sequential reader, files and checkpoint directories), the stored bytes are not the plaintext,
 * and an attacker with write access to the bucket gets a clear refusal, never wrong bytes: a flipped
 * byte, a chunk dropped at a chunk edge, an object copied under another key, a plain object, another
 * data key. The tampered objects are written back through the plain store, so their stored SHA-256
 * matches and only the seal can catch them. Run against a file:// store and, when tests/run.sh
 * started one ($WHET_TEST_S3_ENDPOINT), the s3rver. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crypto.h"
#include "objstore.h"
#include "test.h"
#include "util.h"

static struct objstore *plain; /* the store itself: what a leaked bucket shows */
static struct objstore *sealed;
static struct whet_data_key data_key;
static char scratch[256];
static int on_file; /* the store under test is file:// */

/* Bytes that a leak would give away if they were stored as they are: a marker repeated. */
static char *marked_bytes(size_t n) {
    char *buf = xmalloc(n ? n : 1);
    whet_random_bytes(buf, n);
    for (size_t i = 0; i + 16 <= n; i += 4096) memcpy(buf + i, "TENANT-SECRET-42", 16);
    return buf;
}

static void put_sealed(const char *key, const void *data, size_t len) {
    struct whet_err err;
    int rc = objstore_put(sealed, key, data, len, &err);
    CHECK_MSG(rc == 0, "put %s: %s", key, err.msg);
}

/* The raw stored bytes (through the plain store). */
static char *raw(const char *key, size_t *len) {
    struct whet_err err;
    char *data = NULL;
    int rc = objstore_get(plain, key, &data, len, (size_t)1 << 30, &err);
    CHECK_MSG(rc == 0, "raw get %s: %s", key, err.msg);
    return data;
}

static void put_raw(const char *key, const void *data, size_t len) {
    struct whet_err err;
    int rc = objstore_put(plain, key, data, len, &err);
    CHECK_MSG(rc == 0, "raw put %s: %s", key, err.msg);
}

TEST(round_trip_and_stored_bytes_are_not_plaintext) {
    size_t sizes[] = {0, 1, 65535, 65536, 65537, 3 * 65536, 200001};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        char *data = marked_bytes(n), key[64];
        snprintf(key, sizeof key, "files/t1/obj-%zu", n);
        put_sealed(key, data, n);
        struct whet_err err;
        char *got = NULL;
        size_t got_len = 0;
        int rc = objstore_get(sealed, key, &got, &got_len, (size_t)1 << 30, &err);
        CHECK_MSG(rc == 0, "get %s: %s", key, err.msg);
        CHECK(rc == 0 && got_len == n && memcmp(got, data, n) == 0);
        struct objstore_info info;
        CHECK(objstore_stat(sealed, key, &info, &err) == 0 && info.size == n && info.sha256[0] == 0);
        size_t raw_len = 0;
        char *stored = raw(key, &raw_len);
        CHECK(stored && raw_len > n && memcmp(stored, "WHETSEAL", 8) == 0);
        CHECK(stored && (n < 16 || !memmem(stored, raw_len, "TENANT-SECRET-42", 16)));
        free(stored);
        free(got);
        free(data);
    }
}

struct collect {
    char *buf;
    size_t len;
};

static int collect_sink(void *ctx, const void *chunk, size_t len) {
    struct collect *c = ctx;
    memcpy(c->buf + c->len, chunk, len);
    c->len += len;
    return 0;
}

TEST(ranges_across_chunk_edges) {
    size_t n = 5 * 65536 + 123;
    char *data = marked_bytes(n), *buf = xmalloc(n);
    put_sealed("files/t1/ranged", data, n);
    uint64_t ranges[][2] = {{0, 1}, {65535, 2}, {65536, 65536}, {100, 3 * 65536}, {n - 1, 1}, {70000, 0}, {0, 0}};
    for (size_t i = 0; i < sizeof ranges / sizeof *ranges; i++) {
        struct collect c = {buf, 0};
        struct whet_err err;
        uint64_t off = ranges[i][0], len = ranges[i][1], want = len ? len : n - off;
        int rc = objstore_read(sealed, "files/t1/ranged", off, len, collect_sink, &c, &err);
        CHECK_MSG(rc == 0, "range %llu+%llu: %s", (unsigned long long)off, (unsigned long long)len, err.msg);
        CHECK(c.len == want && memcmp(buf, data + off, want) == 0);
    }
    struct whet_err err;
    struct collect c = {buf, 0};
    CHECK(objstore_read(sealed, "files/t1/ranged", n, 1, collect_sink, &c, &err) == -1);
    CHECK_CONTAINS(err.msg, "past its end");

    /* The sequential reader (the gateway's downloads), checked against the plaintext's checksum. */
    char sha[65];
    whet_sha256_hex(data, n, sha);
    struct objstore_reader *rd = NULL;
    struct objstore_info info;
    CHECK(objstore_reader_open(sealed, "files/t1/ranged", sha, &rd, &info, &err) == 0 && info.size == n);
    size_t total = 0, got = 0;
    while (rd && objstore_reader_next(rd, buf + total, 100000, &got, &err) == 0 && got) total += got;
    CHECK(total == n && memcmp(buf, data, n) == 0);
    objstore_reader_close(rd);
    free(buf);
    free(data);
}

TEST(files_and_checkpoint_dirs) {
    char *dir = xasprintf("%s/ckpt", scratch), *out = xasprintf("%s/ckpt-out", scratch);
    struct whet_err err;
    CHECK(whet_mkdir_p(dir, &err) == 0);
    size_t n = 300000;
    char *data = marked_bytes(n);
    CHECK(whet_write_file_in(dir, "adapter_model.safetensors", data, n, &err) == 0);
    CHECK(whet_write_file_in(dir, "adapter_config.json", "{\"r\":8}", 7, &err) == 0);
    int rc = objstore_put_dir(sealed, "jobs/ftjob-1/checkpoints/step-2", dir, &err);
    CHECK_MSG(rc == 0, "put_dir: %s", err.msg);
    rc = objstore_get_dir(sealed, "jobs/ftjob-1/checkpoints/step-2", out, &err);
    CHECK_MSG(rc == 0, "get_dir: %s", err.msg);
    char *got = NULL;
    size_t got_len = 0;
    char *path = xasprintf("%s/adapter_model.safetensors", out);
    CHECK(whet_read_file(path, n + 1, &got, &got_len, &err) == 0 && got_len == n && memcmp(got, data, n) == 0);
    free(got);
    /* The manifest is tenant data too (names, sizes, checksums): sealed like the rest. */
    size_t raw_len = 0;
    char *stored = raw("jobs/ftjob-1/checkpoints/step-2/MANIFEST.json", &raw_len);
    CHECK(stored && !memmem(stored, raw_len, "adapter_model", 13));
    free(stored);
    /* objstore_put_file / objstore_get_file of a file over several chunks. */
    char *src = xasprintf("%s/adapter_model.safetensors", dir), *dst = xasprintf("%s/copy", scratch);
    CHECK(objstore_put_file(sealed, "files/t1/big", src, &err) == 0);
    struct objstore_info info;
    rc = objstore_get_file(sealed, "files/t1/big", dst, &info, &err);
    CHECK_MSG(rc == 0, "get_file: %s", err.msg);
    CHECK(whet_read_file(dst, n + 1, &got, &got_len, &err) == 0 && got_len == n && memcmp(got, data, n) == 0);
    CHECK(info.size == n);
    free(got);
    /* A file over the part size is sealed through a temp file (on file:// only: s3rver would get
     * multipart parts under S3's 5 MiB minimum). */
    if (on_file) {
        objstore_set_multipart(plain, 2 * 65536, 0);
        CHECK(objstore_put_file(sealed, "files/t1/big-temp", src, &err) == 0);
        objstore_set_multipart(plain, (size_t)16 << 20, 0);
        rc = objstore_get_file(sealed, "files/t1/big-temp", dst, &info, &err);
        CHECK_MSG(rc == 0, "get_file: %s", err.msg);
        CHECK(whet_read_file(dst, n + 1, &got, &got_len, &err) == 0 && got_len == n && memcmp(got, data, n) == 0);
        free(got);
        char *sealed_bytes = raw("files/t1/big-temp", &raw_len);
        CHECK(sealed_bytes && raw_len > n && !memmem(sealed_bytes, raw_len, "TENANT-SECRET-42", 16));
        free(sealed_bytes);
    }
    free(src);
    free(dst);
    free(path);
    free(data);
    free(dir);
    free(out);
}

/* Reads `key` through the sealed view; returns the error message (static) when it fails, NULL when
 * it succeeds. */
static const char *sealed_get_error(const char *key) {
    static struct whet_err err;
    char *data = NULL;
    size_t len;
    int rc = objstore_get(sealed, key, &data, &len, (size_t)1 << 30, &err);
    free(data);
    return rc == 0 ? NULL : err.msg;
}

TEST(tampering_is_refused) {
    size_t n = 3 * 65536 + 10, raw_len = 0;
    char *data = marked_bytes(n);
    put_sealed("files/t1/victim", data, n);
    char *stored = raw("files/t1/victim", &raw_len);
    if (!stored) return;

    /* Each tampered version replaces the object under its own key: the key is sealed in too. */
    char *copy = xmalloc(raw_len);
    memcpy(copy, stored, raw_len);
    copy[32 + (65536 + 16) + 8] ^= 1; /* a ciphertext byte of chunk 1 (after the header and frame 0) */
    put_raw("files/t1/victim", copy, raw_len);
    CHECK_CONTAINS(sealed_get_error("files/t1/victim"), "chunk 1 fails authentication");
    /* A range read of the flipped chunk fails too; one of an intact chunk still works. */
    struct whet_err err;
    char *buf = xmalloc(n);
    struct collect c = {buf, 0};
    CHECK(objstore_read(sealed, "files/t1/victim", 65536 + 5, 10, collect_sink, &c, &err) == -1);
    c.len = 0;
    CHECK(objstore_read(sealed, "files/t1/victim", 2 * 65536, 100, collect_sink, &c, &err) == 0 &&
          memcmp(buf, data + 2 * 65536, 100) == 0);

    put_raw("files/t1/victim", stored, 32 + 2 * (65536 + 16)); /* the last chunks dropped at a chunk edge */
    CHECK_CONTAINS(sealed_get_error("files/t1/victim"), "chunk 1 fails authentication");
    memcpy(copy, stored, raw_len);
    copy[20] ^= 1; /* the nonce, in the header */
    put_raw("files/t1/victim", copy, raw_len);
    CHECK_CONTAINS(sealed_get_error("files/t1/victim"), "chunk 0 fails authentication");
    put_raw("files/t1/victim", data, n);
    const char *e = sealed_get_error("files/t1/victim");
    CHECK(e && (strstr(e, "is not encrypted") || strstr(e, "not a sealed object")));
    put_raw("files/t1/victim-moved", stored, raw_len); /* intact bytes under another key */
    CHECK_CONTAINS(sealed_get_error("files/t1/victim-moved"), "chunk 0 fails authentication");
    put_raw("files/t1/victim", stored, raw_len);
    CHECK(sealed_get_error("files/t1/victim") == NULL);

    /* Another data key: one with another id is named as such; one that claims the same id fails. */
    struct whet_data_key other = {.id = data_key.id + 1};
    whet_random_bytes(other.key, sizeof other.key);
    struct objstore *wrong = objstore_encrypted(plain, &other);
    char *out = NULL;
    size_t out_len;
    CHECK(objstore_get(wrong, "files/t1/victim", &out, &out_len, (size_t)1 << 30, &err) == -1);
    CHECK_CONTAINS(err.msg, "sealed with data key");
    objstore_close(wrong);
    other.id = data_key.id;
    wrong = objstore_encrypted(plain, &other);
    CHECK(objstore_get(wrong, "files/t1/victim", &out, &out_len, (size_t)1 << 30, &err) == -1);
    CHECK_CONTAINS(err.msg, "chunk 0 fails authentication");
    objstore_close(wrong);
    free(buf);
    free(copy);
    free(stored);
    free(data);
}

static void run_all(void) {
    RUN(round_trip_and_stored_bytes_are_not_plaintext);
    RUN(ranges_across_chunk_edges);
    RUN(files_and_checkpoint_dirs);
    RUN(tampering_is_refused);
}

static int run_on(const char *url) {
    struct whet_err err;
    if (objstore_open(url, &plain, &err) != 0) {
        fprintf(stderr, "open %s: %s\n", url, err.msg);
        return -1;
    }
    fprintf(stderr, "-- %s\n", url);
    on_file = strncmp(url, "file://", 7) == 0;
    sealed = objstore_encrypted(plain, &data_key);
    run_all();
    objstore_close(sealed);
    objstore_close(plain);
    return 0;
}

int main(void) {
    data_key.id = 7;
    whet_random_bytes(data_key.key, sizeof data_key.key);
    char base[] = "/tmp/whet-crypt-test.XXXXXX";
    if (!mkdtemp(base)) return 1;
    snprintf(scratch, sizeof scratch, "%s/scratch", base);
    struct whet_err err;
    if (whet_mkdir_p(scratch, &err) != 0) return 1;
    char url[300];
    snprintf(url, sizeof url, "file://%s/objects", base);
    if (run_on(url) != 0) return 1;
    const char *endpoint = getenv("WHET_TEST_S3_ENDPOINT");
    if (endpoint && *endpoint) {
        setenv("WHET_S3_ENDPOINT", endpoint, 1);
        setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
        setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
        setenv("AWS_REGION", "us-east-1", 1);
        char id[32];
        whet_random_id("crypt-", 12, id);
        snprintf(url, sizeof url, "s3://whet-test/%s", id);
        if (run_on(url) != 0) return 1;
    }
    char *rm = xasprintf("rm -rf '%s'", base);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", base);
    free(rm);
    return test_summary();
}
