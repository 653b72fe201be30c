/* util.h - allocation that never returns NULL, error values, small string helpers.
 *
 * Libraries in whet never exit() on bad input: they return -1 and describe the problem in a
 * `struct whet_err` the caller owns, in PostgreSQL's style (a short lower-case message that says where
 * and what: "tokenizer.json: model.merges: expected an array"). Only the allocation wrappers abort,
 * because running out of memory is not an error a caller can mend. */
#ifndef WHET_UTIL_H
#define WHET_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define WHET_ERR_MAX 512

struct whet_err {
    char msg[WHET_ERR_MAX];
};

/* Formats the error into `err` (which may be NULL) and returns -1, so `return whet_errf(err, …);`
 * reads as one step. */
int whet_errf(struct whet_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends "prefix: " to the message already in `err`; returns -1. */
int whet_err_prefix(struct whet_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Allocation wrappers: on failure they print where and abort. */
#define xmalloc(n) whet_xmalloc((n), __FILE__, __LINE__)
#define xcalloc(n, m) whet_xcalloc((n), (m), __FILE__, __LINE__)
#define xrealloc(p, n) whet_xrealloc((p), (n), __FILE__, __LINE__)
#define xstrdup(s) whet_xstrdup((s), __FILE__, __LINE__)
void *whet_xmalloc(size_t n, const char *file, int line);
void *whet_xcalloc(size_t n, size_t m, const char *file, int line);
void *whet_xrealloc(void *p, size_t n, const char *file, int line);
char *whet_xstrdup(const char *s, const char *file, int line);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Reads a whole file into a NUL-terminated buffer the caller frees; `max` bounds its size. */
int whet_read_file(const char *path, size_t max, char **out, size_t *len, struct whet_err *err);
/* Writes `len` bytes to `path` atomically (temp file in the same directory, fsync, rename), mode 0644;
 * the _mode variant sets the mode (0600 for files holding secrets). */
int whet_write_file_atomic(const char *path, const void *data, size_t len, struct whet_err *err);
int whet_write_file_atomic_mode(const char *path, const void *data, size_t len, int mode, struct whet_err *err);
/* Writes all `len` bytes to fd (retrying short writes and EINTR); -1 with errno set on failure. */
int whet_write_all(int fd, const void *data, size_t len);
/* mkdir -p */
int whet_mkdir_p(const char *path, struct whet_err *err);

/* Wall-clock and monotonic time. */
int64_t whet_now_unix(void);
double whet_now_mono(void);

#define WHET_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
