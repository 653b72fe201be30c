/* Unit tests for the object store (common/objstore/): the same behaviours checked against a file://
 * store in a temp directory and against the s3rver that tests/run.sh starts ($WHET_TEST_S3_ENDPOINT,
 * bucket whet-test). Without that variable the test fails: the S3 backend is never skipped. */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crypto.h"
#include "objstore.h"
#include "test.h"
#include "util.h"

static struct objstore *store; /* the store under test */
static int store_is_file;
static char file_root[256];    /* the file:// store's directory */
static char scratch[256];      /* local files the tests write */

/* ---------------------------------------------------------------------------------------------- */
/* Helpers                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

static char *random_bytes(size_t n) {
    char *buf = xmalloc(n);
    whet_random_bytes(buf, n);
    return buf;
}

static void write_local(const char *path, const void *data, size_t len) {
    struct whet_err err;
    if (whet_write_file_atomic(path, data, len, &err) != 0) {
        fprintf(stderr, "setup: %s\n", err.msg);
        abort();
    }
}

/* 1 when the local file holds exactly `len` bytes equal to `data`. */
static int local_equals(const char *path, const void *data, size_t len) {
    char *got;
    size_t got_len;
    struct whet_err err;
    if (whet_read_file(path, (size_t)1 << 32, &got, &got_len, &err) != 0) return 0;
    int same = got_len == len && memcmp(got, data, len) == 0;
    free(got);
    return same;
}

struct collected {
    char keys[32][128];
    uint64_t sizes[32];
    int n, stop_after;
};

static int collect(void *ctx, const char *key, uint64_t size) {
    struct collected *c = ctx;
    if (c->n < 32) {
        snprintf(c->keys[c->n], sizeof c->keys[c->n], "%s", key);
        c->sizes[c->n] = size;
    }
    c->n++;
    return c->stop_after && c->n >= c->stop_after;
}

struct chunks {
    char *data;
    size_t len, calls, stop_at;
};

static int chunk_sink(void *ctx, const void *chunk, size_t len) {
    struct chunks *c = ctx;
    c->data = xrealloc(c->data, c->len + len + 1);
    memcpy(c->data + c->len, chunk, len);
    c->len += len;
    c->calls++;
    return c->stop_at && c->len >= c->stop_at;
}

/* ---------------------------------------------------------------------------------------------- */
/* Tests                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

TEST(put_get_stat_roundtrip) {
    struct whet_err err;
    const char *text = "hello, object store";
    CHECK(objstore_put(store, "t/hello.txt", text, strlen(text), &err) == 0);
    char *data = NULL;
    size_t len = 0;
    CHECK_MSG(objstore_get(store, "t/hello.txt", &data, &len, 1024, &err) == 0, "%s", err.msg);
    CHECK(len == strlen(text) && data && memcmp(data, text, len) == 0 && data[len] == 0);
    free(data);
    struct objstore_info info;
    char sha[65];
    whet_sha256_hex(text, strlen(text), sha);
    CHECK(objstore_stat(store, "t/hello.txt", &info, &err) == 0);
    CHECK(info.size == strlen(text));
    CHECK_STR(info.sha256, sha);
    /* Replacing an object replaces its bytes and its checksum. */
    CHECK(objstore_put(store, "t/hello.txt", "bye", 3, &err) == 0);
    CHECK(objstore_get(store, "t/hello.txt", &data, &len, 1024, &err) == 0);
    CHECK(len == 3 && memcmp(data, "bye", 3) == 0);
    free(data);
    whet_sha256_hex("bye", 3, sha);
    CHECK(objstore_stat(store, "t/hello.txt", &info, &err) == 0 && strcmp(info.sha256, sha) == 0);
    /* An empty object is an object. */
    CHECK(objstore_put(store, "t/empty", "", 0, &err) == 0);
    CHECK(objstore_get(store, "t/empty", &data, &len, 10, &err) == 0 && len == 0);
    free(data);
}

TEST(missing_keys_are_not_found) {
    struct whet_err err;
    char *data = NULL;
    size_t len;
    struct objstore_info info;
    struct chunks c = {0};
    CHECK(objstore_get(store, "t/missing", &data, &len, 1024, &err) == OBJSTORE_NOT_FOUND);
    CHECK(data == NULL);
    CHECK(objstore_stat(store, "t/missing", &info, &err) == OBJSTORE_NOT_FOUND);
    CHECK(objstore_read(store, "t/missing", 0, 0, chunk_sink, &c, &err) == OBJSTORE_NOT_FOUND);
    CHECK(c.calls == 0);
    char path[300];
    snprintf(path, sizeof path, "%s/missing.out", scratch);
    CHECK(objstore_get_file(store, "t/missing", path, NULL, &err) == OBJSTORE_NOT_FOUND);
    CHECK(access(path, F_OK) != 0);
    CHECK(objstore_get_zstd(store, "t/missing", &data, &len, 10, &err) == OBJSTORE_NOT_FOUND);
    /* Deleting what is not there succeeds, as on S3. */
    CHECK(objstore_delete(store, "t/missing", &err) == 0);
}

TEST(delete_removes) {
    struct whet_err err;
    struct objstore_info info;
    CHECK(objstore_put(store, "t/del/x", "x", 1, &err) == 0);
    CHECK(objstore_stat(store, "t/del/x", &info, &err) == 0);
    CHECK_MSG(objstore_delete(store, "t/del/x", &err) == 0, "%s", err.msg);
    CHECK(objstore_stat(store, "t/del/x", &info, &err) == OBJSTORE_NOT_FOUND);
}

TEST(list_in_byte_order_by_prefix) {
    struct whet_err err;
    const char *keys[] = {"l/p/y/z", "l/pp", "l/p-q", "l/p/x", "l/other"};
    for (size_t i = 0; i < WHET_ARRAY_LEN(keys); i++)
        CHECK(objstore_put(store, keys[i], keys[i], strlen(keys[i]), &err) == 0);
    struct collected c = {0};
    CHECK_MSG(objstore_list(store, "l/p/", collect, &c, &err) == 0, "%s", err.msg);
    CHECK(c.n == 2);
    CHECK_STR(c.keys[0], "l/p/x");
    CHECK_STR(c.keys[1], "l/p/y/z");
    CHECK(c.sizes[1] == strlen("l/p/y/z"));
    /* A plain string prefix, not a directory: '-' < '/' < 'p' in byte order. */
    memset(&c, 0, sizeof c);
    CHECK(objstore_list(store, "l/p", collect, &c, &err) == 0);
    CHECK(c.n == 4);
    CHECK_STR(c.keys[0], "l/p-q");
    CHECK_STR(c.keys[1], "l/p/x");
    CHECK_STR(c.keys[2], "l/p/y/z");
    CHECK_STR(c.keys[3], "l/pp");
    /* The callback can stop the listing early. */
    memset(&c, 0, sizeof c);
    c.stop_after = 2;
    CHECK(objstore_list(store, "l/", collect, &c, &err) == 0);
    CHECK(c.n == 2);
    memset(&c, 0, sizeof c);
    CHECK(objstore_list(store, "nothing-here/", collect, &c, &err) == 0);
    CHECK(c.n == 0);
}

TEST(bad_keys_refused) {
    struct whet_err err;
    const char *bad[] = {"", "/etc/passwd", "..", "../escape", "a/../../escape", "a//b", "a/./b", "a/", "tab\there"};
    for (size_t i = 0; i < WHET_ARRAY_LEN(bad); i++) {
        err.msg[0] = 0;
        CHECK_MSG(objstore_put(store, bad[i], "x", 1, &err) == -1, "key \"%s\" was accepted", bad[i]);
        CHECK_CONTAINS(err.msg, "object key");
        char *data = NULL;
        size_t len;
        struct objstore_info info;
        CHECK(objstore_get(store, bad[i], &data, &len, 10, &err) == -1);
        CHECK(objstore_stat(store, bad[i], &info, &err) == -1);
        CHECK(objstore_delete(store, bad[i], &err) == -1);
    }
    CHECK(objstore_key_valid("ckpt/step-10/adapter_model.safetensors", &err) == 1);
    CHECK(objstore_key_valid("a/..b/c..", &err) == 1);
    CHECK(objstore_list(store, "/abs", collect, NULL, &err) == -1);
    /* Nothing escaped the store's directory. */
    char path[300];
    snprintf(path, sizeof path, "%s/../escape", file_root);
    CHECK(access(path, F_OK) != 0);
}

TEST(get_respects_max) {
    struct whet_err err;
    char *big = random_bytes(5000);
    CHECK(objstore_put(store, "t/big", big, 5000, &err) == 0);
    char *data = NULL;
    size_t len;
    CHECK(objstore_get(store, "t/big", &data, &len, 4999, &err) == -1);
    CHECK_CONTAINS(err.msg, "larger than the limit");
    CHECK(objstore_get(store, "t/big", &data, &len, 5000, &err) == 0 && len == 5000);
    free(data);
    free(big);
}

TEST(ranged_streaming_read) {
    struct whet_err err;
    size_t n = 3 << 20;
    char *bytes = random_bytes(n);
    CHECK(objstore_put(store, "t/range.bin", bytes, n, &err) == 0);
    struct chunks c = {0};
    CHECK_MSG(objstore_read(store, "t/range.bin", 1000, 200000, chunk_sink, &c, &err) == 0, "%s", err.msg);
    CHECK(c.len == 200000 && memcmp(c.data, bytes + 1000, 200000) == 0);
    free(c.data);
    memset(&c, 0, sizeof c);
    CHECK(objstore_read(store, "t/range.bin", n - 10, 0, chunk_sink, &c, &err) == 0);
    CHECK(c.len == 10 && memcmp(c.data, bytes + n - 10, 10) == 0);
    free(c.data);
    memset(&c, 0, sizeof c);
    CHECK(objstore_read(store, "t/range.bin", 0, 0, chunk_sink, &c, &err) == 0);
    CHECK(c.len == n && memcmp(c.data, bytes, n) == 0);
    free(c.data);
    memset(&c, 0, sizeof c);
    CHECK(objstore_read(store, "t/range.bin", n + 5, 10, chunk_sink, &c, &err) == -1);
    CHECK_CONTAINS(err.msg, "past its end");
    CHECK(objstore_read(store, "t/range.bin", n - 5, 10, chunk_sink, &c, &err) == -1);
    CHECK_CONTAINS(err.msg, "past its end");
    CHECK(objstore_read(store, "t/range.bin", n, 0, chunk_sink, &c, &err) == -1);
    free(c.data);
    /* A receiver that stops the stream (a client gone) ends the read with an error. */
    memset(&c, 0, sizeof c);
    c.stop_at = 1;
    CHECK(objstore_read(store, "t/range.bin", 0, 0, chunk_sink, &c, &err) == -1);
    CHECK_CONTAINS(err.msg, "stopped by the receiver");
    free(c.data);
    free(bytes);
}

/* A file larger than the part size: on s3 a multipart upload with parallel parts (5 MiB parts, 4
 * threads, 5 parts with a short last one). */
TEST(multipart_file_roundtrip) {
    struct whet_err err;
    size_t n = (size_t)(21.5 * (1 << 20));
    char *bytes = random_bytes(n);
    char src[300], dst[300], sha[65];
    snprintf(src, sizeof src, "%s/big.src", scratch);
    snprintf(dst, sizeof dst, "%s/deep/er/big.dst", scratch);
    write_local(src, bytes, n);
    whet_sha256_hex(bytes, n, sha);
    objstore_set_multipart(store, 5 << 20, 4);
    CHECK_MSG(objstore_put_file(store, "t/big.bin", src, &err) == 0, "%s", err.msg);
    struct objstore_info info;
    CHECK(objstore_stat(store, "t/big.bin", &info, &err) == 0);
    CHECK(info.size == n);
    CHECK_STR(info.sha256, sha);
    memset(&info, 0, sizeof info);
    CHECK_MSG(objstore_get_file(store, "t/big.bin", dst, &info, &err) == 0, "%s", err.msg);
    CHECK(info.size == n);
    CHECK_STR(info.sha256, sha);
    CHECK(local_equals(dst, bytes, n));
    /* A file of exactly one part goes up in one PUT and reads back the same. */
    write_local(src, bytes, 5 << 20);
    CHECK(objstore_put_file(store, "t/one-part.bin", src, &err) == 0);
    CHECK(objstore_get_file(store, "t/one-part.bin", dst, NULL, &err) == 0);
    CHECK(local_equals(dst, bytes, 5 << 20));
    CHECK(objstore_put_file(store, "t/nope", "/nonexistent/file", &err) == -1);
    CHECK_CONTAINS(err.msg, "/nonexistent/file");
    free(bytes);
}

TEST(zstd_objects) {
    struct whet_err err;
    size_t n = 1 << 20;
    char *plain = xmalloc(n);
    for (size_t i = 0; i < n; i++) plain[i] = (char)("optimizer state "[i % 16] + (i / 4096) % 3);
    CHECK_MSG(objstore_put_zstd(store, "t/state.zst", plain, n, 3, &err) == 0, "%s", err.msg);
    struct objstore_info info;
    CHECK(objstore_stat(store, "t/state.zst", &info, &err) == 0);
    CHECK_MSG(info.size < n / 20, "compressed to %llu bytes", (unsigned long long)info.size);
    char *raw = NULL;
    size_t raw_len = 0;
    CHECK(objstore_get(store, "t/state.zst", &raw, &raw_len, n, &err) == 0);
    CHECK(raw_len >= 4 && memcmp(raw, "\x28\xb5\x2f\xfd", 4) == 0); /* a zstd frame is what is stored */
    free(raw);
    char *back = NULL;
    size_t back_len = 0;
    CHECK_MSG(objstore_get_zstd(store, "t/state.zst", &back, &back_len, n, &err) == 0, "%s", err.msg);
    CHECK(back_len == n && back && memcmp(back, plain, n) == 0);
    free(back);
    CHECK(objstore_get_zstd(store, "t/state.zst", &back, &back_len, n - 1, &err) == -1);
    CHECK_CONTAINS(err.msg, "decompresses to more than");
    CHECK(objstore_put(store, "t/not-zstd", "plain text", 10, &err) == 0);
    CHECK(objstore_get_zstd(store, "t/not-zstd", &back, &back_len, n, &err) == -1);
    CHECK_CONTAINS(err.msg, "zstd");

    /* Files stream through libzstd both ways. */
    char src[300], dst[300];
    snprintf(src, sizeof src, "%s/state.bin", scratch);
    snprintf(dst, sizeof dst, "%s/state.back", scratch);
    write_local(src, plain, n);
    CHECK_MSG(objstore_put_file_zstd(store, "t/state-file.zst", src, 3, &err) == 0, "%s", err.msg);
    CHECK(objstore_stat(store, "t/state-file.zst", &info, &err) == 0 && info.size < n / 20);
    CHECK_MSG(objstore_get_file_zstd(store, "t/state-file.zst", dst, &err) == 0, "%s", err.msg);
    CHECK(local_equals(dst, plain, n));
    free(plain);
}

/* Builds DIR with a few files (one in a subfolder, one empty) for the checkpoint tests. */
static void make_checkpoint_dir(const char *dir, char **adapter, size_t adapter_len) {
    char path[400];
    *adapter = random_bytes(adapter_len);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    struct whet_err err;
    whet_mkdir_p(dir, &err);
    write_local(path, *adapter, adapter_len);
    snprintf(path, sizeof path, "%s/state/trainer.json", dir);
    whet_mkdir_p(path, &err);
    rmdir(path);
    write_local(path, "{\"step\":10}", 11);
    snprintf(path, sizeof path, "%s/empty", dir);
    write_local(path, "", 0);
}

TEST(checkpoint_dir_manifest_last) {
    struct whet_err err;
    char src[300], dst[300], path[400];
    snprintf(src, sizeof src, "%s/ckpt-src", scratch);
    snprintf(dst, sizeof dst, "%s/ckpt-dst", scratch);
    char *adapter;
    size_t adapter_len = 300000;
    make_checkpoint_dir(src, &adapter, adapter_len);
    CHECK_MSG(objstore_put_dir(store, "ckpt/step-10", src, &err) == 0, "%s", err.msg);
    struct collected c = {0};
    CHECK(objstore_list(store, "ckpt/step-10/", collect, &c, &err) == 0);
    CHECK(c.n == 4);
    CHECK_STR(c.keys[0], "ckpt/step-10/MANIFEST.json");
    CHECK_STR(c.keys[1], "ckpt/step-10/adapter_model.safetensors");

    /* The manifest names every file with its size and checksum. */
    char *manifest;
    size_t manifest_len;
    CHECK(objstore_get(store, "ckpt/step-10/MANIFEST.json", &manifest, &manifest_len, 1 << 20, &err) == 0);
    char sha[65];
    whet_sha256_hex(adapter, adapter_len, sha);
    CHECK_CONTAINS(manifest, sha);
    CHECK_CONTAINS(manifest, "\"state/trainer.json\"");
    CHECK_CONTAINS(manifest, "\"size\": 300000");
    free(manifest);

    CHECK_MSG(objstore_get_dir(store, "ckpt/step-10", dst, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dst);
    CHECK(local_equals(path, adapter, adapter_len));
    snprintf(path, sizeof path, "%s/state/trainer.json", dst);
    CHECK(local_equals(path, "{\"step\":10}", 11));
    snprintf(path, sizeof path, "%s/MANIFEST.json", dst);
    CHECK(access(path, F_OK) == 0);

    /* Files without a manifest are an unfinished upload: refused. */
    CHECK(objstore_put(store, "ckpt/step-20/adapter_model.safetensors", "half", 4, &err) == 0);
    CHECK(objstore_get_dir(store, "ckpt/step-20", dst, &err) == OBJSTORE_NOT_FOUND);
    CHECK_CONTAINS(err.msg, "incomplete");

    /* An object replaced after the manifest was written (same size, other bytes) is caught. */
    char *other = random_bytes(adapter_len);
    CHECK(objstore_put(store, "ckpt/step-10/adapter_model.safetensors", other, adapter_len, &err) == 0);
    snprintf(dst, sizeof dst, "%s/ckpt-dst2", scratch);
    CHECK(objstore_get_dir(store, "ckpt/step-10", dst, &err) == -1);
    CHECK_CONTAINS(err.msg, "adapter_model.safetensors");
    CHECK_CONTAINS(err.msg, "does not match the manifest");
    snprintf(path, sizeof path, "%s/MANIFEST.json", dst);
    CHECK(access(path, F_OK) != 0); /* the local copy is not marked complete */

    /* A listed file missing from the store is an error too. */
    CHECK(objstore_delete(store, "ckpt/step-10/empty", &err) == 0);
    CHECK(objstore_get_dir(store, "ckpt/step-10", dst, &err) == -1);

    /* Uploading again resumes: only what is missing or differs is sent (the replaced adapter and the
     * deleted file), and the checkpoint reads back whole. */
    int uploaded = -1;
    CHECK_MSG(objstore_put_dir_counted(store, "ckpt/step-10", src, &uploaded, &err) == 0, "%s", err.msg);
    CHECK_MSG(uploaded == 2, "uploaded %d", uploaded);
    snprintf(dst, sizeof dst, "%s/ckpt-dst3", scratch);
    CHECK_MSG(objstore_get_dir(store, "ckpt/step-10", dst, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dst);
    CHECK(local_equals(path, adapter, adapter_len));
    CHECK(objstore_put_dir_counted(store, "ckpt/step-10", src, &uploaded, &err) == 0 && uploaded == 0);

    /* Deleting a checkpoint removes the manifest and every file, leftovers of step-20 included. */
    CHECK_MSG(objstore_delete_dir(store, "ckpt/step-10", &err) == 0, "%s", err.msg);
    CHECK(objstore_delete_dir(store, "ckpt/step-20", &err) == 0);
    memset(&c, 0, sizeof c);
    CHECK(objstore_list(store, "ckpt/", collect, &c, &err) == 0);
    CHECK_MSG(c.n == 0, "%d keys left, first %s", c.n, c.keys[0]);
    free(other);
    free(adapter);
}

/* file:// only: bytes changed on disk behind the store's back fail the stored checksum. */
TEST(file_corruption_detected) {
    struct whet_err err;
    CHECK(objstore_put(store, "t/corrupt.bin", "0123456789", 10, &err) == 0);
    char path[400];
    snprintf(path, sizeof path, "%s/t/corrupt.bin", file_root);
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, "X", 1, 3) == 1);
    close(fd);
    char *data = NULL;
    size_t len;
    CHECK(objstore_get(store, "t/corrupt.bin", &data, &len, 100, &err) == -1);
    CHECK_CONTAINS(err.msg, "checksum mismatch");
    char dst[300];
    snprintf(dst, sizeof dst, "%s/corrupt.out", scratch);
    CHECK(objstore_get_file(store, "t/corrupt.bin", dst, NULL, &err) == -1);
    CHECK(access(dst, F_OK) != 0); /* never renamed into place */
    /* No temp files are left beside objects or listed. */
    struct collected c = {0};
    CHECK(objstore_list(store, "t/corrupt", collect, &c, &err) == 0 && c.n == 1);
}

struct worker_arg {
    int id;
    int failures;
};

static void *concurrent_worker(void *p) {
    struct worker_arg *w = p;
    struct whet_err err;
    for (int i = 0; i < 10; i++) {
        char key[64], value[64];
        snprintf(key, sizeof key, "conc/%d/%d", w->id, i);
        snprintf(value, sizeof value, "value %d %d", w->id, i);
        char *data = NULL;
        size_t len;
        if (objstore_put(store, key, value, strlen(value), &err) != 0 ||
            objstore_get(store, key, &data, &len, 100, &err) != 0 || len != strlen(value) ||
            memcmp(data, value, len) != 0) {
            fprintf(stderr, "worker %d: %s\n", w->id, err.msg);
            w->failures++;
        }
        free(data);
    }
    return NULL;
}

TEST(shared_between_threads) {
    pthread_t tids[8];
    struct worker_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (struct worker_arg){i, 0};
        pthread_create(&tids[i], NULL, concurrent_worker, &args[i]);
    }
    int failures = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(tids[i], NULL);
        failures += args[i].failures;
    }
    CHECK(failures == 0);
    struct collected c = {0};
    struct whet_err err;
    CHECK(objstore_list(store, "conc/", collect, &c, &err) == 0);
    CHECK(c.n == 80);
}

/* ---------------------------------------------------------------------------------------------- */

static void run_all(void) {
    RUN(put_get_stat_roundtrip);
    RUN(missing_keys_are_not_found);
    RUN(delete_removes);
    RUN(list_in_byte_order_by_prefix);
    RUN(bad_keys_refused);
    RUN(get_respects_max);
    RUN(ranged_streaming_read);
    RUN(multipart_file_roundtrip);
    RUN(zstd_objects);
    RUN(checkpoint_dir_manifest_last);
    RUN(shared_between_threads);
}

TEST(open_errors) {
    struct objstore *s = NULL;
    struct whet_err err;
    CHECK(objstore_open("ftp://x", &s, &err) == -1);
    CHECK_CONTAINS(err.msg, "unknown scheme");
    CHECK(objstore_open("file://relative/path", &s, &err) == -1);
    CHECK_CONTAINS(err.msg, "absolute");
    CHECK(objstore_open("s3:///prefix", &s, &err) == -1);
    CHECK_CONTAINS(err.msg, "bucket");
    CHECK(objstore_open("s3://b/../x", &s, &err) == -1);
    const char *saved = getenv("WHET_OBJECT_STORE");
    char *copy = saved ? xstrdup(saved) : NULL;
    unsetenv("WHET_OBJECT_STORE");
    CHECK(objstore_open_env(&s, &err) == -1);
    CHECK_CONTAINS(err.msg, "WHET_OBJECT_STORE");
    if (copy) setenv("WHET_OBJECT_STORE", copy, 1);
    free(copy);
}

/* Opens an s3 store at the test's s3rver named "localhost" with WHET_S3_RESOLVE pointing that name at
 * `address`, and stores an object there: 0 when that worked. */
static int put_resolved(const char *address) {
    const char *endpoint = getenv("WHET_S3_ENDPOINT"), *colon = strrchr(endpoint, ':');
    char named[128], resolve[128], *copy = xstrdup(endpoint);
    /* (s3rver takes a host name other than localhost for a bucket's) */
    snprintf(named, sizeof named, "http://localhost%s", colon ? colon : "");
    snprintf(resolve, sizeof resolve, "localhost%s:%s", colon ? colon : "", address);
    setenv("WHET_S3_ENDPOINT", named, 1);
    setenv("WHET_S3_RESOLVE", resolve, 1);
    struct objstore *s = NULL;
    struct whet_err err;
    int rc = objstore_open("s3://whet-test/unit-resolve", &s, &err) == 0 ? objstore_put(s, "r", "ok", 2, &err) : -1;
    if (s) objstore_close(s);
    setenv("WHET_S3_ENDPOINT", copy, 1);
    unsetenv("WHET_S3_RESOLVE");
    free(copy);
    return rc;
}

/* WHET_S3_RESOLVE (a sandboxed model worker has no DNS): the endpoint's name is reached at the address
 * given, here s3rver's own and one where nothing listens (s3rver listens on 127.0.0.1 alone). */
TEST(resolved_by_the_caller) {
    CHECK(put_resolved("127.0.0.1") == 0);
    CHECK(put_resolved("127.0.0.2") != 0);
}

int main(void) {
    struct whet_err err;
    char base[] = "/tmp/whet-objstore-test.XXXXXX";
    if (!mkdtemp(base)) return 1;
    snprintf(file_root, sizeof file_root, "%s/store", base);
    snprintf(scratch, sizeof scratch, "%s/scratch", base);
    whet_mkdir_p(scratch, &err);

    RUN(open_errors);

    fprintf(stderr, "-- file:// store at %s\n", file_root);
    char url[300];
    snprintf(url, sizeof url, "file://%s", file_root);
    setenv("WHET_OBJECT_STORE", url, 1);
    if (objstore_open_env(&store, &err) != 0) {
        fprintf(stderr, "open %s: %s\n", url, err.msg);
        return 1;
    }
    CHECK_STR(objstore_url(store), url);
    store_is_file = 1;
    run_all();
    RUN(file_corruption_detected);
    objstore_close(store);

    const char *endpoint = getenv("WHET_TEST_S3_ENDPOINT");
    if (!endpoint || !*endpoint) {
        fprintf(stderr, "FAIL WHET_TEST_S3_ENDPOINT is not set: run through tests/run.sh, or start s3rver with "
                        "bucket whet-test and export WHET_TEST_S3_ENDPOINT=http://127.0.0.1:PORT\n");
        test_tests_failed++;
    } else {
        setenv("WHET_S3_ENDPOINT", endpoint, 1);
        setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
        setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
        setenv("AWS_REGION", "us-east-1", 1);
        char id[32];
        whet_random_id("unit-", 12, id);
        snprintf(url, sizeof url, "s3://whet-test/%s", id);
        fprintf(stderr, "-- %s at %s\n", url, endpoint);
        if (objstore_open(url, &store, &err) != 0) {
            fprintf(stderr, "open %s: %s\n", url, err.msg);
            return 1;
        }
        store_is_file = 0;
        run_all();
        objstore_close(store);
        RUN(resolved_by_the_caller);
    }
    char *rm = xasprintf("rm -rf '%s'", base);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", base);
    free(rm);
    return test_summary();
}
