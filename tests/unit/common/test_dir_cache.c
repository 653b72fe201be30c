/* The bounded directory cache (common/dir_cache.h): the policy alone (which entries go: the least recently
 * used, never one in use, never the latest), bounds as operators write them, entry names; then the cache on
 * a temp dir: an eviction, an entry in use held by another handle (another process's view) kept, a model
 * larger than the bound kept alone, recency read back after a restart, crash leftovers removed, a failed
 * fill leaving nothing, and threads racing for a missing entry filling it once. Use times are set on the
 * use files where order matters, so nothing depends on the clock's resolution. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dir_cache.h"
#include "test.h"

#define KB 1024ull

TEST(the_least_recently_used_idle_entries_go_until_the_rest_fit) {
    struct dir_cache_entry e[] = {
        {.name = "c", .bytes = 10 * KB, .last_used_ns = 300},
        {.name = "a", .bytes = 10 * KB, .last_used_ns = 100},
        {.name = "b", .bytes = 10 * KB, .last_used_ns = 200},
        {.name = "d", .bytes = 10 * KB, .last_used_ns = 400},
    };
    CHECK(dir_cache_choose(e, 4, 25 * KB) == 20 * KB);
    CHECK(e[1].evict && e[2].evict && !e[0].evict && !e[3].evict);
    CHECK(!strcmp(e[0].name, "c")); /* the caller's order is kept */
    /* within the bound: nothing goes; no bound: nothing goes */
    CHECK(dir_cache_choose(e, 4, 40 * KB) == 40 * KB);
    CHECK(dir_cache_choose(e, 4, 0) == 40 * KB);
    for (int i = 0; i < 4; i++) CHECK(!e[i].evict);
}

TEST(an_entry_in_use_is_passed_by) {
    struct dir_cache_entry e[] = {
        {.name = "old", .bytes = 10 * KB, .last_used_ns = 1, .in_use = 1},
        {.name = "mid", .bytes = 10 * KB, .last_used_ns = 2},
        {.name = "new", .bytes = 10 * KB, .last_used_ns = 3},
    };
    CHECK(dir_cache_choose(e, 3, 20 * KB) == 20 * KB);
    CHECK(!e[0].evict && e[1].evict && !e[2].evict);
    /* everything but the latest in use: over the bound, nothing to do */
    e[1].in_use = 1;
    CHECK(dir_cache_choose(e, 3, 10 * KB) == 30 * KB);
    CHECK(!e[0].evict && !e[1].evict && !e[2].evict);
}

TEST(the_latest_used_stays_even_when_it_alone_exceeds_the_bound) {
    struct dir_cache_entry e[] = {
        {.name = "big", .bytes = 50 * KB, .last_used_ns = 9},
        {.name = "small", .bytes = 1 * KB, .last_used_ns = 5},
    };
    CHECK(dir_cache_choose(e, 2, 10 * KB) == 50 * KB);
    CHECK(!e[0].evict && e[1].evict);
    CHECK(dir_cache_choose(e, 1, 10 * KB) == 50 * KB);
    CHECK(!e[0].evict);
    /* equal use times: the name decides, so the verdict is the same on every run */
    struct dir_cache_entry tie[] = {{.name = "y", .bytes = KB, .last_used_ns = 7},
                                    {.name = "x", .bytes = KB, .last_used_ns = 7}};
    dir_cache_choose(tie, 2, KB);
    CHECK(tie[1].evict && !tie[0].evict);
}

TEST(bounds_read_as_operators_write_them) {
    struct {
        const char *text;
        uint64_t bytes;
        unsigned percent;
    } good[] = {
        {"0", 0, 0},
        {"1234", 1234, 0},
        {"500M", 500ull << 20, 0},
        {"20G", 20ull << 30, 0},
        {"20g", 20ull << 30, 0},
        {"2T", 2ull << 40, 0},
        {"64K", 64 * KB, 0},
        {"1GiB", 1ull << 30, 0},
        {"1GB", 1ull << 30, 0},
        {"10B", 10, 0},
        {"50%", 0, 50},
        {"100%", 0, 100},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        struct dir_cache_bound b;
        struct whet_err err = {0};
        CHECK_MSG(dir_cache_parse_bound(good[i].text, &b, &err) == 0, "%s: %s", good[i].text, err.msg);
        CHECK_MSG(b.bytes == good[i].bytes && b.percent == good[i].percent, "%s", good[i].text);
    }
    const char *bad[] = {"", "-1", "G", "1.5G", "20X", "20 G", "0%", "101%", "5%%", "99999999999T", "20GG", NULL};
    struct whet_err err = {0};
    struct dir_cache_bound b;
    CHECK(dir_cache_parse_bound(NULL, &b, &err) == -1);
    for (size_t i = 0; bad[i]; i++) {
        CHECK_MSG(dir_cache_parse_bound(bad[i], &b, &err) == -1, "%s", bad[i]);
        CHECK_CONTAINS(err.msg, bad[i]);
        CHECK_CONTAINS(err.hint, "20G");
    }
}

TEST(entry_names_are_safe_file_names) {
    char *n = dir_cache_name("org/model v2", "0123456789abcdef", 12);
    CHECK_STR(n, "org_model_v2-0123456789ab");
    free(n);
    n = dir_cache_name(".hidden", NULL, 12);
    CHECK_STR(n, "_hidden-");
    free(n);
    n = dir_cache_name("whet-tiny", "ab", 16);
    CHECK_STR(n, "whet-tiny-ab");
    free(n);
}

/* ---- on a temp dir ---- */

struct filler {
    atomic_int fills;
    size_t bytes; /* of the one file each entry gets */
    int fail;
};

static int fill(void *ctx, const char *dir, struct whet_err *err) {
    struct filler *f = ctx;
    atomic_fetch_add(&f->fills, 1);
    if (f->fail) return whet_errf(err, "no such model");
    if (whet_mkdir_p(dir, err) < 0) return -1;
    char *path = xasprintf("%s/model.bin", dir);
    char *data = xcalloc(1, f->bytes);
    int rc = whet_write_file_atomic(path, data, f->bytes, err);
    free(data);
    free(path);
    usleep(1000); /* a fill takes a while: racing threads meet in it */
    return rc;
}

static char *temp_root(void) {
    char *root = xasprintf("%s/whet-dir-cache-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    CHECK(mkdtemp(root) != NULL);
    return root;
}

static int exists(const char *root, const char *name) {
    char *path = xasprintf("%s/%s", root, name);
    struct stat st;
    int ok = stat(path, &st) == 0;
    free(path);
    return ok;
}

/* Dates the entry's last use at Unix second t. */
static void used_at(const char *root, const char *name, time_t t) {
    char *path = xasprintf("%s/.%s.use", root, name);
    CHECK(utimensat(AT_FDCWD, path, (struct timespec[2]){{t, 0}, {t, 0}}, 0) == 0);
    free(path);
}

static struct dir_cache *open_bounded(const char *root, uint64_t bytes) {
    struct dir_cache_bound b = {.bytes = bytes};
    struct whet_err err;
    struct dir_cache *c = dir_cache_open(root, &b, "test cache", &err);
    CHECK_MSG(c != NULL, "%s", err.msg);
    return c;
}

static char *get(struct dir_cache *c, const char *name, struct filler *f) {
    struct whet_err err;
    char *dir = dir_cache_get(c, name, fill, f, &err);
    CHECK_MSG(dir != NULL, "%s: %s", name, err.msg);
    return dir;
}

static void put(struct dir_cache *c, char *dir) {
    dir_cache_release(c, dir);
    free(dir);
}

TEST(a_new_entry_evicts_the_least_recently_used) {
    char *root = temp_root();
    struct filler f = {.bytes = 10 * KB};
    struct dir_cache *c = open_bounded(root, 25 * KB);
    put(c, get(c, "a", &f));
    put(c, get(c, "b", &f));
    used_at(root, "a", 1000);
    used_at(root, "b", 2000);
    char *dir = get(c, "c", &f);
    CHECK(!exists(root, "a") && !exists(root, ".a.use") && exists(root, "b") && exists(root, "c/model.bin"));
    struct dir_cache_stats s;
    dir_cache_get_stats(c, &s);
    CHECK(s.evictions == 1 && s.bytes == 20 * KB && s.max_bytes == 25 * KB);
    /* a held entry is served again without a fill */
    char *again = get(c, "c", &f);
    CHECK_STR(again, dir);
    CHECK(f.fills == 3);
    put(c, again);
    put(c, dir);
    dir_cache_close(c);
    whet_rm_rf(root);
    free(root);
}

TEST(an_entry_another_process_uses_is_kept) {
    char *root = temp_root();
    struct filler f = {.bytes = 10 * KB};
    struct dir_cache *mine = open_bounded(root, 15 * KB), *theirs = open_bounded(root, 15 * KB);
    char *a = get(theirs, "a", &f);
    used_at(root, "a", 1000);
    char *b = get(mine, "b", &f); /* "a" is older, but in use */
    CHECK(exists(root, "a/model.bin") && exists(root, "b/model.bin"));
    struct dir_cache_stats s;
    dir_cache_get_stats(mine, &s);
    CHECK(s.evictions == 0 && s.bytes == 20 * KB);
    put(theirs, a);
    used_at(root, "a", 1000);
    used_at(root, "b", 2000);
    put(mine, get(mine, "c", &f)); /* "a" is free now; "b" is still held */
    CHECK(!exists(root, "a") && exists(root, "b/model.bin") && exists(root, "c/model.bin"));
    put(mine, b);
    dir_cache_close(mine);
    dir_cache_close(theirs);
    whet_rm_rf(root);
    free(root);
}

TEST(an_entry_larger_than_the_bound_is_kept_alone) {
    char *root = temp_root();
    struct filler f = {.bytes = 10 * KB};
    struct dir_cache *c = open_bounded(root, 1 * KB);
    put(c, get(c, "a", &f));
    used_at(root, "a", 1000);
    put(c, get(c, "b", &f)); /* the release prunes again (over the bound): "b" is the latest */
    CHECK(!exists(root, "a") && exists(root, "b/model.bin"));
    put(c, get(c, "b", &f));
    CHECK(f.fills == 2);
    dir_cache_close(c);
    whet_rm_rf(root);
    free(root);
}

TEST(recency_survives_a_restart_and_a_smaller_bound_applies_at_open) {
    char *root = temp_root();
    struct filler f = {.bytes = 10 * KB};
    struct dir_cache *c = open_bounded(root, 0);
    put(c, get(c, "a", &f));
    put(c, get(c, "b", &f));
    put(c, get(c, "c", &f));
    dir_cache_close(c);
    used_at(root, "a", 3000); /* "a" the latest, "b" the oldest */
    used_at(root, "b", 1000);
    used_at(root, "c", 2000);
    c = open_bounded(root, 15 * KB);
    CHECK(exists(root, "a/model.bin") && !exists(root, "b") && !exists(root, "c"));
    dir_cache_close(c);
    whet_rm_rf(root);
    free(root);
}

TEST(crash_leftovers_go_and_an_entry_from_before_use_files_counts) {
    char *root = temp_root();
    char *path[] = {xasprintf("%s/x.partial/sub", root), xasprintf("%s/.evict-y", root), xasprintf("%s/legacy", root)};
    for (int i = 0; i < 3; i++) CHECK(whet_mkdir_p(path[i], NULL) == 0);
    char *stale = xasprintf("%s/.gone.use", root);
    CHECK(whet_write_file_atomic(stale, "", 0, NULL) == 0);
    CHECK(utimensat(AT_FDCWD, path[2], (struct timespec[2]){{500, 0}, {500, 0}}, 0) == 0);
    struct dir_cache *c = open_bounded(root, 0);
    CHECK(!exists(root, "x.partial") && !exists(root, ".evict-y") && !exists(root, ".gone.use"));
    struct stat st;
    char *use = xasprintf("%s/.legacy.use", root);
    CHECK(stat(use, &st) == 0 && st.st_mtim.tv_sec == 500); /* dated as its dir: not made new by the scan */
    dir_cache_close(c);
    for (int i = 0; i < 3; i++) free(path[i]);
    free(stale);
    free(use);
    whet_rm_rf(root);
    free(root);
}

TEST(a_failed_fill_leaves_nothing) {
    char *root = temp_root();
    struct filler f = {.bytes = KB, .fail = 1};
    struct dir_cache *c = open_bounded(root, 0);
    struct whet_err err = {0};
    CHECK(dir_cache_get(c, "a", fill, &f, &err) == NULL);
    CHECK_CONTAINS(err.msg, "no such model");
    CHECK(!exists(root, "a") && !exists(root, "a.partial") && !exists(root, ".a.use"));
    dir_cache_close(c);
    whet_rm_rf(root);
    free(root);
}

struct racer {
    struct dir_cache *c;
    struct filler *f;
    int ok;
};

static void *race(void *arg) {
    struct racer *r = arg;
    struct whet_err err;
    char *dir = dir_cache_get(r->c, "m", fill, r->f, &err);
    r->ok = dir != NULL;
    if (dir) put(r->c, dir);
    return NULL;
}

TEST(threads_racing_for_a_missing_entry_fill_it_once) {
    char *root = temp_root();
    struct filler f = {.bytes = KB};
    struct dir_cache *c = open_bounded(root, 0);
    pthread_t t[8];
    struct racer r[8];
    for (int i = 0; i < 8; i++) {
        r[i] = (struct racer){.c = c, .f = &f};
        pthread_create(&t[i], NULL, race, &r[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        CHECK(r[i].ok);
    }
    CHECK(f.fills == 1);
    dir_cache_close(c);
    whet_rm_rf(root);
    free(root);
}

int main(void) {
    RUN(the_least_recently_used_idle_entries_go_until_the_rest_fit);
    RUN(an_entry_in_use_is_passed_by);
    RUN(the_latest_used_stays_even_when_it_alone_exceeds_the_bound);
    RUN(bounds_read_as_operators_write_them);
    RUN(entry_names_are_safe_file_names);
    RUN(a_new_entry_evicts_the_least_recently_used);
    RUN(an_entry_another_process_uses_is_kept);
    RUN(an_entry_larger_than_the_bound_is_kept_alone);
    RUN(recency_survives_a_restart_and_a_smaller_bound_applies_at_open);
    RUN(crash_leftovers_go_and_an_entry_from_before_use_files_counts);
    RUN(a_failed_fill_leaves_nothing);
    RUN(threads_racing_for_a_missing_entry_fill_it_once);
    return test_summary();
}
