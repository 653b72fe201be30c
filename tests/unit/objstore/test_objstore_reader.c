/* Unit tests for the object store's sequential verified reader (objstore_reader_*), the piece the
 * gateway streams downloads with: bounded chunks that reassemble to the object byte for byte, the
 * checksum checked before the last bytes come out (corruption on disk, an object replaced between
 * chunks, a wrong expected checksum), the edges (empty object, a size that is a multiple of the
 * chunk, a missing key), ranges and read-ahead. Run against a file:// store in a temp directory and
 * against the s3rver that tests/run.sh starts ($WHET_TEST_S3_ENDPOINT, bucket whet-test); without
 * that variable the test fails rather than skip the S3 backend. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crypto.h"
#include "objstore.h"
#include "test.h"
#include "util.h"

#define CHUNK ((size_t)1 << 20)

static struct objstore *store;
static char file_root[256];

static char *random_bytes(size_t n) {
    char *buf = xmalloc(n ? n : 1);
    whet_random_bytes(buf, n);
    return buf;
}

/* Reads the whole object through a reader in chunks of `cap` (read ahead when read_ahead_window is set); returns the rc of the first failing
 * call (0 when all went well) with the bytes got so far in *out (caller frees) and the chunk count. */
static size_t read_ahead_window; /* 0, or objstore_reader_read_ahead's window for every read_all */

static int read_all(const char *key, const char *expect, size_t cap, char **out, size_t *out_len, int *chunks,
                    struct whet_err *err) {
    struct objstore_reader *rd = NULL;
    *out = NULL;
    *out_len = 0;
    *chunks = 0;
    int rc = objstore_reader_open(store, key, expect, &rd, NULL, err);
    if (rc != 0) return rc;
    if (read_ahead_window) objstore_reader_read_ahead(rd, read_ahead_window);
    char *data = xmalloc(objstore_reader_size(rd) + 1);
    char *buf = xmalloc(cap);
    for (;;) {
        size_t n;
        rc = objstore_reader_next(rd, buf, cap, &n, err);
        if (rc != 0 || n == 0) break;
        if (n > cap) { /* never more than asked for */
            rc = whet_errf(err, "chunk of %zu bytes for a buffer of %zu", n, cap);
            break;
        }
        memcpy(data + *out_len, buf, n);
        *out_len += n;
        (*chunks)++;
    }
    free(buf);
    objstore_reader_close(rd);
    *out = data;
    return rc;
}

TEST(chunks_reassemble_the_object) {
    struct whet_err err;
    size_t n = 3 * CHUNK + 12345;
    char *obj = random_bytes(n);
    CHECK_MSG(objstore_put(store, "r/big.bin", obj, n, &err) == 0, "%s", err.msg);
    struct objstore_reader *rd = NULL;
    struct objstore_info info;
    CHECK_MSG(objstore_reader_open(store, "r/big.bin", NULL, &rd, &info, &err) == 0, "%s", err.msg);
    char want_sha[65];
    whet_sha256_hex(obj, n, want_sha);
    CHECK(info.size == n);
    CHECK_STR(info.sha256, want_sha);
    CHECK(objstore_reader_size(rd) == n && objstore_reader_offset(rd) == 0);
    objstore_reader_close(rd);

    char *got;
    size_t got_len;
    int chunks;
    CHECK_MSG(read_all("r/big.bin", NULL, CHUNK, &got, &got_len, &chunks, &err) == 0, "%s", err.msg);
    CHECK(got_len == n && memcmp(got, obj, n) == 0);
    CHECK(chunks == 4); /* three full chunks and the rest */
    free(got);
    /* The manifest's checksum, when the caller has one, is accepted when it agrees. */
    CHECK_MSG(read_all("r/big.bin", want_sha, CHUNK, &got, &got_len, &chunks, &err) == 0, "%s", err.msg);
    CHECK(got_len == n);
    free(got);
    /* An exact multiple of the chunk: no empty chunk before the end. */
    CHECK(objstore_put(store, "r/even.bin", obj, 2 * CHUNK, &err) == 0);
    CHECK_MSG(read_all("r/even.bin", NULL, CHUNK, &got, &got_len, &chunks, &err) == 0, "%s", err.msg);
    CHECK(got_len == 2 * CHUNK && chunks == 2 && memcmp(got, obj, 2 * CHUNK) == 0);
    free(got);
    /* Small odd chunks. */
    CHECK_MSG(read_all("r/big.bin", NULL, 65537, &got, &got_len, &chunks, &err) == 0, "%s", err.msg);
    CHECK(got_len == n && memcmp(got, obj, n) == 0 && chunks == (int)((n + 65536) / 65537));
    free(got);
    free(obj);
}

TEST(empty_and_missing) {
    struct whet_err err;
    CHECK(objstore_put(store, "r/empty", "", 0, &err) == 0);
    char *got;
    size_t got_len;
    int chunks;
    CHECK_MSG(read_all("r/empty", NULL, CHUNK, &got, &got_len, &chunks, &err) == 0, "%s", err.msg);
    CHECK(got_len == 0 && chunks == 0);
    free(got);
    struct objstore_reader *rd = NULL;
    CHECK(objstore_reader_open(store, "r/missing", NULL, &rd, NULL, &err) == OBJSTORE_NOT_FOUND);
    CHECK(rd == NULL);
    CHECK(objstore_reader_open(store, "../bad", NULL, &rd, NULL, &err) == -1);
    objstore_reader_close(NULL);
}

TEST(wrong_expected_checksum_refused_at_open) {
    struct whet_err err;
    CHECK(objstore_put(store, "r/small", "hello", 5, &err) == 0);
    struct objstore_reader *rd = NULL;
    CHECK(objstore_reader_open(store, "r/small", "00000000000000000000000000000000000000000000000000000000000000ff",
                               &rd, NULL, &err) == -1);
    CHECK_CONTAINS(err.msg, "expected");
    CHECK(rd == NULL);
}

/* The object is swapped for another of the same size after the first chunk: the reader hands out
 * the chunks it read but refuses the last one, so a forwarded download never completes. */
TEST(replaced_between_chunks_fails_before_the_end) {
    struct whet_err err;
    size_t n = 2 * CHUNK + 100;
    char *a = random_bytes(n), *b = random_bytes(n);
    CHECK(objstore_put(store, "r/swap.bin", a, n, &err) == 0);
    struct objstore_reader *rd = NULL;
    CHECK_MSG(objstore_reader_open(store, "r/swap.bin", NULL, &rd, NULL, &err) == 0, "%s", err.msg);
    char *buf = xmalloc(CHUNK);
    size_t got;
    CHECK(objstore_reader_next(rd, buf, CHUNK, &got, &err) == 0 && got == CHUNK);
    CHECK(memcmp(buf, a, CHUNK) == 0);
    CHECK(objstore_put(store, "r/swap.bin", b, n, &err) == 0);
    CHECK(objstore_reader_next(rd, buf, CHUNK, &got, &err) == 0 && got == CHUNK); /* not the end yet */
    CHECK(objstore_reader_next(rd, buf, CHUNK, &got, &err) == -1 && got == 0);
    CHECK_CONTAINS(err.msg, "checksum mismatch");
    CHECK(objstore_reader_next(rd, buf, CHUNK, &got, &err) == -1 && got == 0); /* and stays failed */
    CHECK(objstore_reader_offset(rd) == 2 * CHUNK);
    objstore_reader_close(rd);
    /* Shrunk behind the reader's back: the range past the new end is an error, not a short success. */
    CHECK_MSG(objstore_reader_open(store, "r/swap.bin", NULL, &rd, NULL, &err) == 0, "%s", err.msg);
    CHECK(objstore_reader_next(rd, buf, CHUNK, &got, &err) == 0 && got == CHUNK);
    CHECK(objstore_put(store, "r/swap.bin", b, CHUNK + 10, &err) == 0);
    CHECK(objstore_reader_next(rd, buf, CHUNK, &got, &err) == -1 && got == 0);
    objstore_reader_close(rd);
    free(buf);
    free(a);
    free(b);
}

/* file:// only: a byte flipped on disk (the stored checksum left as it was) is caught at the end. */
TEST(file_corruption_caught_at_the_end) {
    struct whet_err err;
    size_t n = CHUNK + 500;
    char *obj = random_bytes(n);
    CHECK(objstore_put(store, "r/corrupt.bin", obj, n, &err) == 0);
    char path[400];
    snprintf(path, sizeof path, "%s/r/corrupt.bin", file_root);
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    char flipped = (char)(obj[10] ^ 0x55);
    CHECK(pwrite(fd, &flipped, 1, 10) == 1);
    close(fd);
    char *got;
    size_t got_len;
    int chunks;
    CHECK(read_all("r/corrupt.bin", NULL, CHUNK, &got, &got_len, &chunks, &err) == -1);
    CHECK_CONTAINS(err.msg, "checksum mismatch");
    CHECK(got_len == CHUNK && chunks == 1); /* the first chunk came out, the last never did */
    free(got);
    free(obj);
}

/* A download's Range: only the bytes asked for, in bounded chunks; refused past the end or once reading
 * started; the whole object as a "range" is still checked. */
TEST(ranges) {
    struct whet_err err;
    size_t n = 3 * CHUNK + 99;
    char *obj = random_bytes(n);
    CHECK(objstore_put(store, "r/range.bin", obj, n, &err) == 0);
    struct objstore_reader *rd = NULL;
    char *buf = xmalloc(CHUNK), *got = xmalloc(n);
    size_t len, total = 0;
    int chunks = 0;
    CHECK_MSG(objstore_reader_open(store, "r/range.bin", NULL, &rd, NULL, &err) == 0, "%s", err.msg);
    CHECK_MSG(objstore_reader_range(rd, 1000, 2 * CHUNK + 5, &err) == 0, "%s", err.msg);
    CHECK(objstore_reader_offset(rd) == 1000);
    while (objstore_reader_next(rd, buf, CHUNK, &len, &err) == 0 && len) {
        memcpy(got + total, buf, len);
        total += len;
        chunks++;
    }
    CHECK(total == 2 * CHUNK + 5 && chunks == 3 && memcmp(got, obj + 1000, total) == 0);
    CHECK(objstore_reader_range(rd, 0, 10, &err) == -1); /* too late */
    objstore_reader_close(rd);
    /* The last bytes only. */
    CHECK(objstore_reader_open(store, "r/range.bin", NULL, &rd, NULL, &err) == 0);
    CHECK(objstore_reader_range(rd, n - 7, 7, &err) == 0);
    CHECK(objstore_reader_next(rd, buf, CHUNK, &len, &err) == 0 && len == 7 && memcmp(buf, obj + n - 7, 7) == 0);
    CHECK(objstore_reader_next(rd, buf, CHUNK, &len, &err) == 0 && len == 0);
    objstore_reader_close(rd);
    /* Past the end. */
    CHECK(objstore_reader_open(store, "r/range.bin", NULL, &rd, NULL, &err) == 0);
    CHECK(objstore_reader_range(rd, n - 7, 8, &err) == -1);
    CHECK_CONTAINS(err.msg, "past its end");
    CHECK(objstore_reader_range(rd, n + 1, 0, &err) == -1);
    objstore_reader_close(rd);
    /* The whole object as a range is read and checked as a whole: a swap mid-way is caught. */
    CHECK(objstore_reader_open(store, "r/range.bin", NULL, &rd, NULL, &err) == 0);
    CHECK(objstore_reader_range(rd, 0, n, &err) == 0);
    CHECK(objstore_reader_next(rd, buf, CHUNK, &len, &err) == 0 && len == CHUNK);
    char *other = random_bytes(n);
    CHECK(objstore_put(store, "r/range.bin", other, n, &err) == 0);
    int rc = 0;
    while ((rc = objstore_reader_next(rd, buf, CHUNK, &len, &err)) == 0 && len) {}
    CHECK(rc == -1);
    CHECK_CONTAINS(err.msg, "checksum mismatch");
    objstore_reader_close(rd);
    free(other);
    free(got);
    free(buf);
    free(obj);
}

/* Read-ahead: the same bytes through one streaming read with a window smaller than, equal to and
 * larger than the chunks, also for a range; a reader closed mid-way (its thread blocked on a full
 * window) leaves nothing behind (the sanitizer build checks); an object replaced mid-way. */
TEST(read_ahead) {
    struct whet_err err;
    size_t n = 3 * CHUNK + 4321;
    char *obj = random_bytes(n);
    CHECK(objstore_put(store, "r/ahead.bin", obj, n, &err) == 0);
    size_t windows[] = {100000, CHUNK, 3 * CHUNK};
    for (size_t w = 0; w < WHET_ARRAY_LEN(windows); w++) {
        read_ahead_window = windows[w];
        char *got;
        size_t got_len;
        int chunks;
        CHECK_MSG(read_all("r/ahead.bin", NULL, CHUNK, &got, &got_len, &chunks, &err) == 0, "window %zu: %s", windows[w],
                  err.msg);
        CHECK(got_len == n && chunks == 4 && memcmp(got, obj, n) == 0);
        free(got);
    }
    read_ahead_window = 0;
    struct objstore_reader *rd = NULL;
    char *buf = xmalloc(CHUNK);
    size_t len;
    /* A range, read ahead. */
    CHECK(objstore_reader_open(store, "r/ahead.bin", NULL, &rd, NULL, &err) == 0);
    CHECK(objstore_reader_range(rd, 777, CHUNK + 5, &err) == 0);
    objstore_reader_read_ahead(rd, 65536);
    CHECK(objstore_reader_next(rd, buf, CHUNK, &len, &err) == 0 && len == CHUNK && memcmp(buf, obj + 777, CHUNK) == 0);
    CHECK(objstore_reader_next(rd, buf, CHUNK, &len, &err) == 0 && len == 5 && memcmp(buf, obj + 777 + CHUNK, 5) == 0);
    CHECK(objstore_reader_next(rd, buf, CHUNK, &len, &err) == 0 && len == 0);
    objstore_reader_close(rd);
    /* Closed after one chunk, while the thread waits for room. */
    CHECK(objstore_reader_open(store, "r/ahead.bin", NULL, &rd, NULL, &err) == 0);
    objstore_reader_read_ahead(rd, 65536);
    CHECK(objstore_reader_next(rd, buf, 1000, &len, &err) == 0 && len == 1000 && memcmp(buf, obj, 1000) == 0);
    objstore_reader_close(rd);
    /* Swapped for another object after the first chunk: the one streaming read may go on with the
     * object it started on (both stores keep serving the open file), but never hands out a mix:
     * either every byte is the old object's, or the read fails. */
    CHECK(objstore_reader_open(store, "r/ahead.bin", NULL, &rd, NULL, &err) == 0);
    objstore_reader_read_ahead(rd, 65536);
    char *all = xmalloc(n);
    size_t total = 0;
    CHECK(objstore_reader_next(rd, all, CHUNK, &len, &err) == 0 && len == CHUNK);
    total += len;
    char *other = random_bytes(n);
    CHECK(objstore_put(store, "r/ahead.bin", other, n, &err) == 0);
    int rc;
    while ((rc = objstore_reader_next(rd, all + total, n - total < CHUNK ? n - total : CHUNK, &len, &err)) == 0 && len)
        total += len;
    CHECK(rc == -1 || (total == n && memcmp(all, obj, n) == 0));
    objstore_reader_close(rd);
    free(all);
    free(other);
    free(buf);
    free(obj);
}

/* file:// only: the object cut short in place (same file) under a read-ahead: the transfer breaks,
 * the read-ahead starts again from the first byte not returned, runs into the new end, and the
 * reader gives up with an error instead of hanging or returning short. */
TEST(read_ahead_restarts_then_gives_up) {
    struct whet_err err;
    size_t n = 3 * CHUNK;
    char *obj = random_bytes(n);
    CHECK(objstore_put(store, "r/cut.bin", obj, n, &err) == 0);
    struct objstore_reader *rd = NULL;
    char *buf = xmalloc(CHUNK);
    size_t len;
    CHECK(objstore_reader_open(store, "r/cut.bin", NULL, &rd, NULL, &err) == 0);
    objstore_reader_read_ahead(rd, 65536);
    CHECK(objstore_reader_next(rd, buf, CHUNK, &len, &err) == 0 && len == CHUNK && memcmp(buf, obj, CHUNK) == 0);
    char path[400];
    snprintf(path, sizeof path, "%s/r/cut.bin", file_root);
    CHECK(truncate(path, CHUNK + 10) == 0);
    int rc;
    while ((rc = objstore_reader_next(rd, buf, CHUNK, &len, &err)) == 0 && len) {}
    CHECK(rc == -1);
    CHECK_CONTAINS(err.msg, "past its end");
    objstore_reader_close(rd);
    free(buf);
    free(obj);
}

static void run_all(void) {
    RUN(chunks_reassemble_the_object);
    RUN(empty_and_missing);
    RUN(wrong_expected_checksum_refused_at_open);
    RUN(replaced_between_chunks_fails_before_the_end);
    RUN(ranges);
    RUN(read_ahead);
}

int main(void) {
    struct whet_err err;
    char base[] = "/tmp/whet-objstore-reader.XXXXXX";
    if (!mkdtemp(base)) return 1;
    snprintf(file_root, sizeof file_root, "%s/store", base);
    char url[300];
    snprintf(url, sizeof url, "file://%s", file_root);
    fprintf(stderr, "-- %s\n", url);
    if (objstore_open(url, &store, &err) != 0) {
        fprintf(stderr, "open %s: %s\n", url, err.msg);
        return 1;
    }
    run_all();
    RUN(file_corruption_caught_at_the_end);
    RUN(read_ahead_restarts_then_gives_up);
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
        whet_random_id("reader-", 12, id);
        snprintf(url, sizeof url, "s3://whet-test/%s", id);
        fprintf(stderr, "-- %s at %s\n", url, endpoint);
        if (objstore_open(url, &store, &err) != 0) {
            fprintf(stderr, "open %s: %s\n", url, err.msg);
            return 1;
        }
        run_all();
        objstore_close(store);
    }
    char *rm = xasprintf("rm -rf '%s'", base);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", base);
    free(rm);
    return test_summary();
}
