/* Multipart uploads that resume after a crash, against the s3rver that tests/run.sh starts
 * ($WHET_TEST_S3_ENDPOINT, bucket whet-test). A child process uploads a large file in 5 MiB parts and
 * SIGKILLs itself from the progress callback after a few parts; the parent then uploads the same file
 * again and checks that only the missing parts were sent (bytes counted by libcurl), that the object's
 * bytes and SHA-256 are right, and, for a checkpoint directory, that the manifest appeared only after
 * every file. Journals that no longer fit (file changed, a part's bytes differ, the upload is gone on
 * the server) must lead to a correct object too. Without WHET_TEST_S3_ENDPOINT the test fails. */
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "crypto.h"
#include "objstore.h"
#include "rng.h"
#include "test.h"
#include "util.h"

#define PART (5u << 20)

static char url[300];        /* s3://whet-test/<random prefix> */
static char scratch[256];    /* local files */
static struct objstore *store;

/* ---------------------------------------------------------------------------------------------- */
/* Helpers                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

/* `size` pseudo-random bytes (xorshift64 from `seed`) written to `path`. */
static void write_pattern(const char *path, size_t size, uint64_t seed) {
    char *buf = xmalloc(size);
    uint64_t x = seed * RNG_GOLDEN + 1;
    for (size_t i = 0; i < size; i += 8) {
        rng_xorshift64(&x);
        memcpy(buf + i, &x, size - i < 8 ? size - i : 8);
    }
    struct whet_err err;
    if (whet_write_file_atomic(path, buf, size, &err) != 0) {
        fprintf(stderr, "setup: %s\n", err.msg);
        abort();
    }
    free(buf);
}

static struct objstore *open_store(void) {
    struct objstore *s;
    struct whet_err err;
    if (objstore_open(url, &s, &err) != 0) {
        fprintf(stderr, "open %s: %s\n", url, err.msg);
        abort();
    }
    objstore_set_multipart(s, PART, 2);
    return s;
}

/* What the progress callback saw; in the parent it also checks that the manifest is not there yet. */
struct progress {
    uint64_t done, reused, total;
    int calls;
    uint64_t kill_at;          /* child: SIGKILL itself once this many bytes are stored (0: never) */
    const char *manifest_key;  /* parent: must not exist while parts are still going up */
    int manifest_seen_early;
};

static void on_progress(void *ctx, const char *key, uint64_t done, uint64_t reused, uint64_t total) {
    (void)key;
    struct progress *p = ctx;
    p->done = done;
    p->reused = reused;
    p->total = total;
    p->calls++;
    if (p->kill_at && done >= p->kill_at) raise(SIGKILL); /* a crash, with parts in flight on the other thread */
    if (p->manifest_key) {
        struct objstore_info info;
        struct whet_err err;
        if (objstore_stat(store, p->manifest_key, &info, &err) != OBJSTORE_NOT_FOUND) p->manifest_seen_early = 1;
    }
}

/* Runs an upload in a child that dies by SIGKILL once `kill_at` bytes are stored: objstore_put_dir of
 * `dir` when `dir` is set, else objstore_put_file of `path`. Returns 1 when the child died that way. */
static int upload_and_crash(const char *key, const char *path, const char *dir, uint64_t kill_at) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct objstore *s = open_store();
        struct progress p = {.kill_at = kill_at};
        objstore_set_progress(s, on_progress, &p);
        struct whet_err err;
        int rc = dir ? objstore_put_dir(s, key, dir, &err) : objstore_put_file(s, key, path, &err);
        fprintf(stderr, "child: the upload ended (rc %d) instead of crashing\n", rc);
        _exit(3);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return 0;
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

static json_t *load_journal(const char *path) {
    char *journal = xasprintf("%s/.%s" OBJSTORE_UPLOAD_JOURNAL_SUFFIX, scratch, path);
    json_error_t jerr;
    json_t *doc = json_load_file(journal, 0, &jerr);
    free(journal);
    return doc;
}

static int journal_exists(const char *dir, const char *name) {
    char *journal = xasprintf("%s/.%s" OBJSTORE_UPLOAD_JOURNAL_SUFFIX, dir, name);
    int exists = access(journal, F_OK) == 0;
    free(journal);
    return exists;
}

/* SHA-256 and size of a local file. */
static int file_sha256(const char *path, char hex[65], uint64_t *size, struct whet_err *err) {
    char *data;
    size_t len;
    if (whet_read_file(path, (size_t)1 << 32, &data, &len, err) != 0) return -1;
    whet_sha256_hex(data, len, hex);
    *size = len;
    free(data);
    return 0;
}

/* Downloads `key` and checks its bytes and stored SHA-256 against the local file `path`. */
static int object_matches(const char *key, const char *path) {
    char want[65] = "", got[65] = "";
    uint64_t want_size, got_size;
    struct whet_err err;
    char *dst = xasprintf("%s/download.bin", scratch);
    struct objstore_info info = {0};
    int ok = file_sha256(path, want, &want_size, &err) == 0 && objstore_get_file(store, key, dst, &info, &err) == 0 &&
             file_sha256(dst, got, &got_size, &err) == 0 && got_size == want_size &&
             strcmp(got, want) == 0 && info.size == want_size && strcmp(info.sha256, want) == 0;
    if (!ok) fprintf(stderr, "object %s: %s (want %s, got %s)\n", key, err.msg, want, got);
    unlink(dst);
    free(dst);
    return ok;
}

/* ---------------------------------------------------------------------------------------------- */
/* Tests                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

/* A 40 MiB checkpoint file (8 parts) killed after 3 parts: the retry sends the other 5 and the small
 * file, the manifest comes last, and the object reads back whole. */
TEST(crashed_checkpoint_upload_resumes) {
    struct whet_err err;
    char *dir = xasprintf("%s/ckpt", scratch);
    char *big = xasprintf("%s/big.bin", dir), *small = xasprintf("%s/small.txt", dir);
    whet_mkdir_p(dir, &err);
    const size_t big_size = 40u << 20;
    write_pattern(big, big_size, 1);
    write_pattern(small, 1000, 2);
    uint64_t total = big_size + 1000;

    CHECK(upload_and_crash("ckpt-crash", NULL, dir, 3 * PART));
    /* The journal beside the file records at least the 3 parts, not all 8; nothing is readable yet. */
    char *journal_path = xasprintf("%s/.big.bin" OBJSTORE_UPLOAD_JOURNAL_SUFFIX, dir);
    json_error_t jerr;
    json_t *journal = json_load_file(journal_path, 0, &jerr);
    CHECK_MSG(journal != NULL, "%s: %s", journal_path, jerr.text);
    size_t journaled = journal ? json_array_size(json_object_get(journal, "parts")) : 0;
    CHECK_MSG(journaled >= 3 && journaled < 8, "%zu parts journaled", journaled);
    CHECK(journal && json_integer_value(json_object_get(journal, "part_size")) == PART);
    CHECK(journal && json_string_value(json_object_get(journal, "upload_id")) != NULL);
    json_decref(journal);
    struct objstore_info info;
    CHECK(objstore_stat(store, "ckpt-crash/big.bin", &info, &err) == OBJSTORE_NOT_FOUND);
    CHECK(objstore_stat(store, "ckpt-crash/" OBJSTORE_MANIFEST, &info, &err) == OBJSTORE_NOT_FOUND);
    char *out = xasprintf("%s/ckpt-out", scratch);
    CHECK(objstore_get_dir(store, "ckpt-crash", out, &err) == OBJSTORE_NOT_FOUND);

    /* Resume. */
    struct progress p = {.manifest_key = "ckpt-crash/" OBJSTORE_MANIFEST};
    objstore_set_progress(store, on_progress, &p);
    uint64_t before = objstore_bytes_sent(store);
    int uploaded = 0;
    int rc = objstore_put_dir_counted(store, "ckpt-crash", dir, &uploaded, &err);
    uint64_t resumed_sent = objstore_bytes_sent(store) - before;
    objstore_set_progress(store, NULL, NULL);
    CHECK_MSG(rc == 0, "%s", err.msg);
    CHECK(uploaded == 2);
    CHECK(p.calls > 0 && p.total == big_size && p.done == big_size);
    CHECK_MSG(p.reused >= 3 * (uint64_t)PART && p.reused == journaled * PART, "reused %llu of %zu journaled parts",
              (unsigned long long)p.reused, journaled);
    CHECK(!p.manifest_seen_early);
    /* (a) fewer bytes: everything but the reused parts, plus small requests (completion XML, manifest). */
    CHECK_MSG(resumed_sent >= total - p.reused && resumed_sent < total - p.reused + (64u << 10),
              "sent %llu, total %llu, reused %llu", (unsigned long long)resumed_sent, (unsigned long long)total,
              (unsigned long long)p.reused);
    CHECK(!journal_exists(dir, "big.bin"));

    /* The same directory from scratch, for comparison. */
    before = objstore_bytes_sent(store);
    CHECK(objstore_put_dir(store, "ckpt-fresh", dir, &err) == 0);
    uint64_t fresh_sent = objstore_bytes_sent(store) - before;
    CHECK(fresh_sent >= total);
    CHECK_MSG(resumed_sent + 3 * (uint64_t)PART <= fresh_sent, "resumed %llu, fresh %llu",
              (unsigned long long)resumed_sent, (unsigned long long)fresh_sent);
    fprintf(stderr, "     resumed upload sent %llu bytes, a fresh one %llu (ratio %.3f; %llu bytes saved)\n",
            (unsigned long long)resumed_sent, (unsigned long long)fresh_sent, (double)resumed_sent / (double)fresh_sent,
            (unsigned long long)(fresh_sent - resumed_sent));

    /* (b) the bytes and SHA-256, (c) a manifest that lists the two files (not the journal). */
    CHECK(object_matches("ckpt-crash/big.bin", big));
    CHECK_MSG(objstore_get_dir(store, "ckpt-crash", out, &err) == 0, "%s", err.msg);
    char *manifest_path = xasprintf("%s/" OBJSTORE_MANIFEST, out);
    json_t *manifest = json_load_file(manifest_path, 0, &jerr);
    CHECK(manifest && json_array_size(json_object_get(manifest, "files")) == 2);
    json_decref(manifest);
    free(manifest_path);
    free(out);
    free(journal_path);
    free(dir);
    free(big);
    free(small);
}

/* A file that changed after the crash must not be completed from the old version's parts. */
TEST(changed_file_starts_over) {
    struct whet_err err;
    char *path = xasprintf("%s/changing.bin", scratch);
    size_t size = 3 * PART - 12345;
    write_pattern(path, size, 3);
    CHECK(upload_and_crash("changing.bin", path, NULL, PART));
    json_t *journal = load_journal("changing.bin");
    CHECK(journal && json_array_size(json_object_get(journal, "parts")) >= 1);
    json_decref(journal);
    write_pattern(path, size, 4); /* same size, other bytes */
    struct progress p = {0};
    objstore_set_progress(store, on_progress, &p);
    uint64_t before = objstore_bytes_sent(store);
    int rc = objstore_put_file(store, "changing.bin", path, &err);
    uint64_t sent = objstore_bytes_sent(store) - before;
    objstore_set_progress(store, NULL, NULL);
    CHECK_MSG(rc == 0, "%s", err.msg);
    CHECK(p.reused == 0);
    CHECK(sent >= size);
    CHECK(object_matches("changing.bin", path));
    CHECK(!journal_exists(scratch, "changing.bin"));
    free(path);
}

/* A journaled part whose recorded SHA-256 no longer matches the file's bytes is sent again; the
 * others are reused. */
TEST(mismatched_part_is_sent_again) {
    struct whet_err err;
    char *path = xasprintf("%s/partial.bin", scratch);
    size_t size = 4 * PART;
    write_pattern(path, size, 5);
    CHECK(upload_and_crash("partial.bin", path, NULL, 2 * PART));
    json_t *journal = load_journal("partial.bin");
    size_t journaled = journal ? json_array_size(json_object_get(journal, "parts")) : 0;
    CHECK(journaled >= 2);
    if (journaled >= 2) {
        json_object_set_new(json_array_get(json_object_get(journal, "parts"), 0), "sha256",
                            json_string("0000000000000000000000000000000000000000000000000000000000000000"));
        char *journal_path = xasprintf("%s/.partial.bin" OBJSTORE_UPLOAD_JOURNAL_SUFFIX, scratch);
        CHECK(json_dump_file(journal, journal_path, 0) == 0);
        free(journal_path);
    }
    json_decref(journal);
    struct progress p = {0};
    objstore_set_progress(store, on_progress, &p);
    uint64_t before = objstore_bytes_sent(store);
    int rc = objstore_put_file(store, "partial.bin", path, &err);
    uint64_t sent = objstore_bytes_sent(store) - before;
    objstore_set_progress(store, NULL, NULL);
    CHECK_MSG(rc == 0, "%s", err.msg);
    CHECK_MSG(p.reused == (journaled - 1) * PART, "reused %llu, journaled %zu", (unsigned long long)p.reused,
              journaled);
    CHECK(sent >= size - p.reused && sent < size - p.reused + (64u << 10));
    CHECK(object_matches("partial.bin", path));
    free(path);
}

/* The journal's upload is gone from the server (here: an id it never issued). s3rver has no ListParts
 * and accepts parts for any id, so this shows only at completion; the upload then starts over and
 * still produces the right object. */
TEST(gone_upload_starts_over) {
    struct whet_err err;
    char *path = xasprintf("%s/gone.bin", scratch);
    size_t size = 3 * PART + 777;
    write_pattern(path, size, 6);
    CHECK(upload_and_crash("gone.bin", path, NULL, PART));
    json_t *journal = load_journal("gone.bin");
    CHECK(journal != NULL);
    if (journal) {
        json_object_set_new(journal, "upload_id", json_string("00000000000000000000000000000000"));
        char *journal_path = xasprintf("%s/.gone.bin" OBJSTORE_UPLOAD_JOURNAL_SUFFIX, scratch);
        CHECK(json_dump_file(journal, journal_path, 0) == 0);
        free(journal_path);
    }
    json_decref(journal);
    struct progress p = {0};
    objstore_set_progress(store, on_progress, &p);
    uint64_t before = objstore_bytes_sent(store);
    int rc = objstore_put_file(store, "gone.bin", path, &err);
    uint64_t sent = objstore_bytes_sent(store) - before;
    objstore_set_progress(store, NULL, NULL);
    CHECK_MSG(rc == 0, "%s", err.msg);
    CHECK(p.reused == 0); /* the last try was a fresh upload */
    CHECK(sent >= size);
    CHECK(object_matches("gone.bin", path));
    CHECK(!journal_exists(scratch, "gone.bin"));
    free(path);
}

int main(void) {
    const char *endpoint = getenv("WHET_TEST_S3_ENDPOINT");
    if (!endpoint || !*endpoint) {
        fprintf(stderr, "FAIL WHET_TEST_S3_ENDPOINT is not set: run through tests/run.sh, or start s3rver with "
                        "bucket whet-test and export WHET_TEST_S3_ENDPOINT=http://127.0.0.1:PORT\n");
        return 1;
    }
    setenv("WHET_S3_ENDPOINT", endpoint, 1);
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    setenv("AWS_REGION", "us-east-1", 1);
    char base[] = "/tmp/whet-objstore-resume.XXXXXX";
    if (!mkdtemp(base)) return 1;
    snprintf(scratch, sizeof scratch, "%s", base);
    char id[32];
    whet_random_id("resume-", 12, id);
    snprintf(url, sizeof url, "s3://whet-test/%s", id);
    fprintf(stderr, "-- %s at %s\n", url, endpoint);
    store = open_store();
    RUN(crashed_checkpoint_upload_resumes);
    RUN(changed_file_starts_over);
    RUN(mismatched_part_is_sent_again);
    RUN(gone_upload_starts_over);
    objstore_close(store);
    char *rm = xasprintf("rm -rf '%s'", base);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", base);
    free(rm);
    return test_summary();
}
