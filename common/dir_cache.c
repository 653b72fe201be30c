/* dir_cache.c - see dir_cache.h: the policy (pure), then the cache over the file system: the entries a
 * process holds, filling an entry, and pruning. */
#include "dir_cache.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "log.h"

/* ---- The policy ---- */

static int by_last_use(const void *x, const void *y, void *arg) {
    const struct dir_cache_entry *e = arg;
    const struct dir_cache_entry *a = &e[*(const size_t *)x], *b = &e[*(const size_t *)y];
    if (a->last_used_ns != b->last_used_ns) return a->last_used_ns < b->last_used_ns ? -1 : 1;
    return strcmp(a->name, b->name);
}

uint64_t dir_cache_choose(struct dir_cache_entry *e, size_t n, uint64_t max_bytes) {
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        e[i].evict = 0;
        total += e[i].bytes;
    }
    if (!max_bytes || total <= max_bytes || n < 2) return total;
    size_t *order = xmalloc(n * sizeof *order);
    for (size_t i = 0; i < n; i++) order[i] = i;
    qsort_r(order, n, sizeof *order, by_last_use, e);
    /* the most recently used (order[n - 1]) stays: whoever just fetched it needs it */
    for (size_t k = 0; k + 1 < n && total > max_bytes; k++) {
        struct dir_cache_entry *x = &e[order[k]];
        if (x->in_use) continue;
        x->evict = 1;
        total -= x->bytes;
    }
    free(order);
    return total;
}

int dir_cache_parse_bound(const char *text, struct dir_cache_bound *out, struct whet_err *err) {
    memset(out, 0, sizeof *out);
    if (text && isdigit((unsigned char)*text)) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(text, &end, 10);
        if (!errno && *end == '%' && !end[1] && n >= 1 && n <= 100) {
            out->percent = (unsigned)n;
            return 0;
        }
        static const char units[] = "KMGT";
        const char *unit = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
        unsigned shift = unit ? 10u * (unsigned)(unit - units + 1) : 0;
        if (unit) {
            end++;
            if (*end == 'i') end++;
        }
        if (*end == 'B' || *end == 'b') end++;
        if (!errno && !*end && n <= (UINT64_MAX >> shift)) {
            out->bytes = (uint64_t)n << shift;
            return 0;
        }
    }
    whet_errf(err, "\"%s\" is not a cache bound", text ? text : "");
    return whet_err_hint(err, "bytes with an optional K, M, G or T suffix (\"20G\", \"500M\"), 0 for no bound, or a "
                              "share of the file system that holds the cache (\"50%%\")");
}

char *dir_cache_name(const char *id, const char *version, int version_len) {
    char *name = xasprintf("%s-%.*s", id, version_len, version ? version : "");
    for (char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._-", *p)) *p = '_';
    if (name[0] == '.') name[0] = '_'; /* hidden names are the cache's own files */
    return name;
}

/* ---- The cache ---- */

/* An entry this process holds: its use file's shared lock, and how many hold it. */
struct held {
    char *dir;
    int fd;
    int refs;
    struct held *next;
};

struct dir_cache {
    char *root, *what;
    uint64_t max_bytes;
    pthread_mutex_t lock; /* guards held */
    struct held *held;
    _Atomic uint64_t bytes, evictions;
    atomic_int over; /* the last prune left more than max_bytes (entries in use) */
};

static char *use_path(const struct dir_cache *c, const char *name) { return xasprintf("%s/.%s.use", c->root, name); }

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int flock_retry(int fd, int op) {
    int rc;
    while ((rc = flock(fd, op)) != 0 && errno == EINTR) {}
    return rc;
}

/* ROOT/.lock, held exclusively (wait: block for it; else -1 when another holds it). */
static int lock_root(const struct dir_cache *c, int wait, struct whet_err *err) {
    char *path = xasprintf("%s/.lock", c->root);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) whet_errf(err, "%s: %s", path, strerror(errno));
    else if (flock_retry(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) != 0) {
        whet_errf(err, "%s: lock: %s", path, strerror(errno));
        close(fd);
        fd = -1;
    }
    free(path);
    return fd;
}

/* The use file of entry `name` with a shared lock on it (made when `create`), or -1. An eviction that
 * held it while we waited has removed it: then it is no longer the entry's, and -1 too. */
static int take_use(const struct dir_cache *c, const char *name, int create) {
    char *path = use_path(c, name);
    int fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
    struct stat locked, now;
    if (fd >= 0 && (flock_retry(fd, LOCK_SH) != 0 || fstat(fd, &locked) != 0 || stat(path, &now) != 0 ||
                    locked.st_ino != now.st_ino || locked.st_dev != now.st_dev)) {
        close(fd);
        fd = -1;
    }
    free(path);
    return fd;
}

static struct held *held_find(struct dir_cache *c, const char *dir) {
    struct held *h = c->held;
    while (h && strcmp(h->dir, dir)) h = h->next;
    return h;
}

/* Another reference to `dir` when this process holds it already (1), else 0. Marks it used. */
static int held_ref(struct dir_cache *c, const char *dir) {
    pthread_mutex_lock(&c->lock);
    struct held *h = held_find(c, dir);
    if (h) {
        h->refs++;
        futimens(h->fd, NULL);
    }
    pthread_mutex_unlock(&c->lock);
    return h != NULL;
}

/* Records `dir` held through fd (its use file, locked shared); another thread may have done so
 * meanwhile, whose lock then serves both. Marks it used. */
static void held_add(struct dir_cache *c, const char *dir, int fd) {
    pthread_mutex_lock(&c->lock);
    struct held *h = held_find(c, dir);
    if (h) {
        close(fd);
    } else {
        h = xcalloc(1, sizeof *h);
        h->dir = xstrdup(dir);
        h->fd = fd;
        h->next = c->held;
        c->held = h;
    }
    h->refs++;
    futimens(h->fd, NULL);
    pthread_mutex_unlock(&c->lock);
}

/* The use file of an entry locked exclusively when no one uses the entry (its fd), else -1 and *in_use.
 * *last_used_ns: the file's mtime; an entry without one yet (made before use files) gets one dated
 * as the entry's dir. */
static int lock_idle(const struct dir_cache *c, const char *name, const struct stat *dir_st, int64_t *last_used_ns,
                     int *in_use) {
    char *path = use_path(c, name);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && (fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) >= 0)
        futimens(fd, (struct timespec[2]){dir_st->st_mtim, dir_st->st_mtim});
    free(path);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) st = *dir_st;
    *last_used_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    *in_use = fd < 0 || flock_retry(fd, LOCK_EX | LOCK_NB) != 0; /* a use file we cannot open: keep it */
    if (*in_use && fd >= 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Removes an idle entry (its use file locked exclusively by fd): renamed first, so that no one finds it
 * half removed; 0, or -1 when it could not be. */
static int evict(struct dir_cache *c, const char *name, int fd) {
    char *dir = xasprintf("%s/%s", c->root, name), *gone = xasprintf("%s/.evict-%s", c->root, name);
    char *use = use_path(c, name);
    int rc = rename(dir, gone);
    if (rc != 0)
        log_warn("msg=\"cannot evict a cache entry\" cache=\"%s\" entry=%s error=\"%s\"", c->what, name,
                 strerror(errno));
    else unlink(use);
    close(fd); /* a user waiting for the lock now finds the use file gone (take_use) */
    if (rc == 0) whet_rm_rf(gone);
    free(dir);
    free(gone);
    free(use);
    return rc;
}

/* Whether `name` is what a crash leaves: a fill's NAME.partial, an eviction's .evict-NAME. */
static int leftover(const char *name) {
    size_t n = strlen(name);
    return (n > 8 && !strcmp(name + n - 8, ".partial")) || !strncmp(name, ".evict-", 7);
}

/* A use file whose entry is gone (an eviction that crashed, a fill that failed). */
static int stale_use(const struct dir_cache *c, const char *name) {
    size_t n = strlen(name);
    if (name[0] != '.' || n < 6 || strcmp(name + n - 4, ".use")) return 0;
    char *dir = xasprintf("%s/%.*s", c->root, (int)(n - 5), name + 1);
    int stale = !is_dir(dir);
    free(dir);
    return stale;
}

static void warn_over(const struct dir_cache *c, const struct dir_cache_entry *e, size_t n, uint64_t kept) {
    const struct dir_cache_entry *newest = &e[0];
    for (size_t i = 1; i < n; i++)
        if (e[i].last_used_ns > newest->last_used_ns ||
            (e[i].last_used_ns == newest->last_used_ns && strcmp(e[i].name, newest->name) > 0))
            newest = &e[i];
    if (newest->bytes > c->max_bytes)
        log_warn("msg=\"an entry alone is larger than the cache's bound; kept, as it is the latest used\" cache=\"%s\" "
                 "entry=%s bytes=%llu max_bytes=%llu",
                 c->what, newest->name, (unsigned long long)newest->bytes, (unsigned long long)c->max_bytes);
    else
        log_warn("msg=\"the cache is over its bound: its other entries are in use\" cache=\"%s\" bytes=%llu "
                 "max_bytes=%llu",
                 c->what, (unsigned long long)kept, (unsigned long long)c->max_bytes);
}

/* Removes crash leftovers and evicts what the policy says. Called with ROOT/.lock held. */
static void prune(struct dir_cache *c) {
    DIR *d = opendir(c->root);
    if (!d) {
        log_warn("msg=\"cannot read the cache\" cache=\"%s\" root=%s error=\"%s\"", c->what, c->root, strerror(errno));
        return;
    }
    struct dir_cache_entry *e = NULL;
    int *fds = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *name = de->d_name;
        char *path = xasprintf("%s/%s", c->root, name);
        struct stat st;
        if (leftover(name)) {
            log_info("msg=\"removing a crash's leftover\" cache=\"%s\" path=%s", c->what, path);
            whet_rm_rf(path);
        } else if (stale_use(c, name)) {
            unlink(path);
        } else if (name[0] != '.' && lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                e = xrealloc(e, cap * sizeof *e);
                fds = xrealloc(fds, cap * sizeof *fds);
            }
            e[n] = (struct dir_cache_entry){.name = xstrdup(name), .bytes = whet_dir_bytes(path)};
            fds[n] = lock_idle(c, name, &st, &e[n].last_used_ns, &e[n].in_use);
            n++;
        }
        free(path);
    }
    closedir(d);
    uint64_t kept = dir_cache_choose(e, n, c->max_bytes);
    /* the kept ones first: a user waiting for one of them waits for no removal */
    for (size_t i = 0; i < n; i++)
        if (!e[i].evict && fds[i] >= 0) close(fds[i]);
    for (size_t i = 0; i < n; i++) {
        if (!e[i].evict) continue;
        if (evict(c, e[i].name, fds[i]) == 0) {
            atomic_fetch_add(&c->evictions, 1);
            log_info("msg=\"evicted the least recently used entry\" cache=\"%s\" entry=%s bytes=%llu", c->what,
                     e[i].name, (unsigned long long)e[i].bytes);
        } else {
            kept += e[i].bytes;
        }
    }
    int over = c->max_bytes && kept > c->max_bytes;
    if (over) warn_over(c, e, n, kept);
    atomic_store(&c->bytes, kept);
    atomic_store(&c->over, over);
    for (size_t i = 0; i < n; i++) free((char *)e[i].name);
    free(e);
    free(fds);
}

struct dir_cache *dir_cache_open(const char *root, const struct dir_cache_bound *bound, const char *what,
                                 struct whet_err *err) {
    if (whet_mkdir_p(root, err) < 0) return NULL;
    uint64_t max = bound->bytes;
    if (bound->percent) {
        struct statvfs v;
        if (statvfs(root, &v) != 0) {
            whet_errf(err, "%s: %s", root, strerror(errno));
            return NULL;
        }
        max = (uint64_t)v.f_blocks * v.f_frsize / 100 * bound->percent;
    }
    struct dir_cache *c = xcalloc(1, sizeof *c);
    c->root = xstrdup(root);
    c->what = xstrdup(what);
    c->max_bytes = max;
    pthread_mutex_init(&c->lock, NULL);
    int lock = lock_root(c, 1, err);
    if (lock < 0) {
        dir_cache_close(c);
        return NULL;
    }
    prune(c);
    close(lock);
    log_info("msg=\"cache opened\" cache=\"%s\" root=%s bytes=%llu max_bytes=%llu", what, root,
             (unsigned long long)atomic_load(&c->bytes), (unsigned long long)max);
    return c;
}

void dir_cache_close(struct dir_cache *c) {
    if (!c) return;
    while (c->held) {
        struct held *h = c->held;
        c->held = h->next;
        close(h->fd);
        free(h->dir);
        free(h);
    }
    pthread_mutex_destroy(&c->lock);
    free(c->root);
    free(c->what);
    free(c);
}

/* Fills the missing entry at dir (ROOT/.lock held): into DIR.partial, then renamed. */
static int fill_entry(const char *dir, dir_cache_fill_fn fill, void *ctx, struct whet_err *err) {
    char *partial = xasprintf("%s.partial", dir);
    whet_rm_rf(partial);
    int rc = fill(ctx, partial, err);
    if (rc == 0 && rename(partial, dir) != 0) rc = whet_errf(err, "rename %s: %s", partial, strerror(errno));
    if (rc != 0) whet_rm_rf(partial);
    free(partial);
    return rc;
}

char *dir_cache_get(struct dir_cache *c, const char *name, dir_cache_fill_fn fill, void *ctx, struct whet_err *err) {
    char *dir = xasprintf("%s/%s", c->root, name);
    if (held_ref(c, dir)) return dir;
    /* there and not being evicted: ours without the root lock, so a long fill of another entry waits for none */
    int fd = take_use(c, name, 0);
    if (fd >= 0 && !is_dir(dir)) {
        close(fd);
        fd = -1;
    }
    if (fd >= 0) {
        held_add(c, dir, fd);
        return dir;
    }
    int lock = lock_root(c, 1, err), rc = -1;
    if (lock >= 0) {
        /* no eviction runs now (they hold the root lock), so the use file we take stays the entry's */
        fd = take_use(c, name, 1);
        int filled = fd >= 0 && !is_dir(dir);
        rc = fd < 0   ? whet_errf(err, "%s: cannot take its use file: %s", dir, strerror(errno))
             : filled ? fill_entry(dir, fill, ctx, err)
                      : 0;
        if (rc == 0) {
            held_add(c, dir, fd);
            if (filled) prune(c);
        } else if (fd >= 0) {
            char *use = use_path(c, name);
            unlink(use);
            free(use);
            close(fd);
        }
        close(lock);
    }
    if (rc != 0) {
        free(dir);
        return NULL;
    }
    return dir;
}

void dir_cache_hold(struct dir_cache *c, const char *dir) {
    pthread_mutex_lock(&c->lock);
    struct held *h = held_find(c, dir);
    if (h) h->refs++;
    pthread_mutex_unlock(&c->lock);
}

void dir_cache_release(struct dir_cache *c, const char *dir) {
    pthread_mutex_lock(&c->lock);
    struct held **p = &c->held;
    while (*p && strcmp((*p)->dir, dir)) p = &(*p)->next;
    struct held *h = *p;
    if (h) futimens(h->fd, NULL);
    if (h && --h->refs == 0) {
        *p = h->next;
        close(h->fd);
        free(h->dir);
        free(h);
    }
    pthread_mutex_unlock(&c->lock);
    if (!h || !atomic_load(&c->over)) return;
    int lock = lock_root(c, 0, NULL);
    if (lock >= 0) {
        prune(c);
        close(lock);
    }
}

void dir_cache_get_stats(struct dir_cache *c, struct dir_cache_stats *out) {
    out->bytes = atomic_load(&c->bytes);
    out->max_bytes = c->max_bytes;
    out->evictions = atomic_load(&c->evictions);
}
