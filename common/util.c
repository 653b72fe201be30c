/* util.c - see util.h. */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "utf8.h"

/* One part of an error; text cut to fit loses no more than the character it cut into, so the part
 * stays valid UTF-8 (it ends up in JSON). */
static void err_part(char part[WHET_ERR_MAX], const char *fmt, va_list ap) {
    int n = vsnprintf(part, WHET_ERR_MAX, fmt, ap);
    if (n >= WHET_ERR_MAX) utf8_trim_incomplete(part, WHET_ERR_MAX - 1);
}

int whet_verrf(struct whet_err *err, const char *fmt, va_list ap) {
    if (err) {
        err_part(err->msg, fmt, ap);
        err->detail[0] = err->hint[0] = 0;
    }
    return -1;
}

int whet_errf(struct whet_err *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    whet_verrf(err, fmt, ap);
    va_end(ap);
    return -1;
}

int whet_verrf_at(struct whet_err *err, const char *where, const char *fmt, va_list ap) {
    whet_verrf(err, fmt, ap);
    return whet_err_prefix(err, "%s", where);
}

int whet_errf_at(struct whet_err *err, const char *where, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    whet_verrf_at(err, where, fmt, ap);
    va_end(ap);
    return -1;
}

int whet_err_detail(struct whet_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err_part(err->detail, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int whet_err_hint(struct whet_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err_part(err->hint, fmt, ap);
        va_end(ap);
    }
    return -1;
}

const char *whet_err_text(const struct whet_err *err, char *out, size_t size) {
    int n = snprintf(out, size, "%s%s%s%s%s", err->msg, err->detail[0] ? "; " : "", err->detail,
                     err->hint[0] ? "; hint: " : "", err->hint);
    if (n >= 0 && (size_t)n >= size && size > 0) utf8_trim_incomplete(out, size - 1);
    return out;
}

void whet_err_report(const char *who, const struct whet_err *err) {
    fprintf(stderr, "%s: %s\n", who, err->msg);
    if (err->detail[0]) fprintf(stderr, "detail: %s\n", err->detail);
    if (err->hint[0]) fprintf(stderr, "hint: %s\n", err->hint);
}

int whet_err_prefix(struct whet_err *err, const char *fmt, ...) {
    if (err) {
        char prefix[WHET_ERR_MAX], old[WHET_ERR_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof prefix, fmt, ap);
        va_end(ap);
        memcpy(old, err->msg, sizeof old);
        /* Truncation is acceptable: the message stays NUL-terminated and the prefix comes first. */
        size_t n = strnlen(prefix, sizeof prefix - 1);
        memcpy(err->msg, prefix, n);
        size_t left = sizeof err->msg - n;
        if (left > 2) {
            err->msg[n] = ':';
            err->msg[n + 1] = ' ';
            size_t m = strnlen(old, left - 3);
            memcpy(err->msg + n + 2, old, m);
            err->msg[n + 2 + m] = 0;
        } else {
            err->msg[sizeof err->msg - 1] = 0;
        }
        /* A cut may fall inside a character: messages become JSON strings, which must be valid UTF-8. */
        utf8_trim_incomplete(err->msg, strlen(err->msg));
    }
    return -1;
}

static void die_oom(size_t n, const char *file, int line) {
    fprintf(stderr, "whet: out of memory allocating %zu bytes at %s:%d\n", n, file, line);
    abort();
}

void *whet_xmalloc(size_t n, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) die_oom(n, file, line);
    return p;
}

void *whet_xcalloc(size_t n, size_t m, const char *file, int line) {
    void *p = calloc(n ? n : 1, m ? m : 1);
    if (!p) die_oom(n * m, file, line);
    return p;
}

void *whet_xrealloc(void *p, size_t n, const char *file, int line) {
    void *q = realloc(p, n ? n : 1);
    if (!q) die_oom(n, file, line);
    return q;
}

char *whet_xstrdup(const char *s, const char *file, int line) {
    size_t n = strlen(s) + 1;
    char *p = whet_xmalloc(n, file, line);
    memcpy(p, s, n);
    return p;
}

char *xasprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *out = NULL;
    int n = vasprintf(&out, fmt, ap);
    va_end(ap);
    if (n < 0) die_oom(0, __FILE__, __LINE__);
    return out;
}

int whet_open_regular(const char *path, uint64_t *size, struct whet_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return whet_errf(err, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return whet_errf(err, "%s: not a regular file", path);
    }
    *size = (uint64_t)st.st_size;
    return fd;
}

int whet_read_file(const char *path, size_t max, char **out, size_t *len, struct whet_err *err) {
    uint64_t size;
    int fd = whet_open_regular(path, &size, err);
    if (fd < 0) return -1;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return whet_errf(err, "%s: %s", path, strerror(e));
    }
    if (size > max) {
        fclose(f);
        return whet_errf(err, "%s: file is %llu bytes, over the limit of %zu", path, (unsigned long long)size, max);
    }
    size_t n = (size_t)size;
    char *buf = xmalloc(n + 1);
    if (n && fread(buf, 1, n, f) != n) {
        int e = errno;
        fclose(f);
        free(buf);
        return whet_errf(err, "%s: short read: %s", path, strerror(e));
    }
    fclose(f);
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return 0;
}

int whet_write_file_atomic(const char *path, const void *data, size_t len, struct whet_err *err) {
    return whet_write_file_atomic_mode(path, data, len, 0644, err);
}

int whet_write_file_in(const char *dir, const char *name, const void *data, size_t len, struct whet_err *err) {
    char *path = xasprintf("%s/%s", dir, name);
    int rc = whet_write_file_atomic(path, data, len, err);
    free(path);
    return rc;
}

int whet_write_all(int fd, const void *data, size_t len) {
    const char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int whet_write_file_atomic_mode(const char *path, const void *data, size_t len, int mode, struct whet_err *err) {
    char *tmp = xasprintf("%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) {
        whet_errf(err, "%s: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    if (whet_write_all(fd, data, len) != 0) {
        whet_errf(err, "%s: %s", tmp, strerror(errno));
        goto fail;
    }
    if (fchmod(fd, (mode_t)mode) != 0 || fsync(fd) != 0) {
        whet_errf(err, "%s: chmod/fsync: %s", tmp, strerror(errno));
        goto fail;
    }
    close(fd);
    fd = -1;
    if (rename(tmp, path) != 0) {
        whet_errf(err, "%s: rename: %s", path, strerror(errno));
        goto fail;
    }
    free(tmp);
    return 0;
fail:
    if (fd >= 0) close(fd);
    unlink(tmp);
    free(tmp);
    return -1;
}

int whet_mkdir_p(const char *path, struct whet_err *err) {
    char *buf = xstrdup(path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                whet_errf(err, "mkdir %s: %s", buf, strerror(errno));
                free(buf);
                return -1;
            }
            *p = c;
            if (!c) break;
        }
    }
    free(buf);
    return 0;
}

/* nftw passes no context: the first failure of this thread's walk. */
static _Thread_local int rm_rf_errno;

static int rm_rf_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    if (remove(path) != 0 && !rm_rf_errno) rm_rf_errno = errno;
    return 0;
}

int whet_rm_rf(const char *path) {
    rm_rf_errno = 0;
    if (nftw(path, rm_rf_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) return errno == ENOENT ? 0 : -1;
    if (rm_rf_errno) {
        errno = rm_rf_errno;
        return -1;
    }
    return 0;
}

/* nftw passes no context: this thread's running total. */
static _Thread_local uint64_t dir_bytes_total;

static int dir_bytes_add(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)path, (void)ftw;
    if (type == FTW_F) dir_bytes_total += (uint64_t)st->st_size;
    return 0;
}

uint64_t whet_hash_text(const char *s) {
    uint64_t h = 14695981039346656037ull;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) h = (h ^ *p) * 1099511628211ull;
    return h;
}

uint64_t whet_dir_bytes(const char *dir) {
    dir_bytes_total = 0;
    nftw(dir, dir_bytes_add, 16, FTW_PHYS);
    return dir_bytes_total;
}

int64_t whet_now_unix(void) { return (int64_t)time(NULL); }

int whet_cmp_strp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

double whet_now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
