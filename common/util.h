/* util.h - allocation that never returns NULL, error values, small string helpers.
 *
 * Libraries in whet never exit() on bad input: they return -1 and describe the problem in a
 * `struct whet_err` the caller owns, in PostgreSQL's style: a short lower-case primary message that
 * says where and what ("tokenizer.json: model.merges: expected an array"), and when useful a detail
 * (what was found, in full sentences) and a hint (what to do), each its own part:
 *
 *     whet_errf(err, "cannot listen on %s", addr);
 *     return whet_err_hint(err, "pick another address with --http");
 *
 * Whoever shows the error composes the parts: the CLI prints the hint on a line of its own
 * (whet_err_report), the gateway puts the one-line form (whet_err_text) in OpenAI's error body. Only
 * the allocation wrappers abort, because running out of memory is not an error a caller can mend. */
#ifndef WHET_UTIL_H
#define WHET_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define WHET_ERR_MAX 512 /* per part: a longer part is cut (at a character boundary) */

struct whet_err {
    char msg[WHET_ERR_MAX];    /* the primary message */
    char detail[WHET_ERR_MAX]; /* "" or what was found, in full sentences */
    char hint[WHET_ERR_MAX];   /* "" or what to do about it */
};

/* Formats the primary message into `err` (which may be NULL), clears its detail and hint, and returns
 * -1, so `return whet_errf(err, …);` reads as one step. */
int whet_errf(struct whet_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int whet_verrf(struct whet_err *err, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* whet_errf with the message prefixed by where it applies: "WHERE: MESSAGE" ("input.messages[3]: …"). */
int whet_errf_at(struct whet_err *err, const char *where, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int whet_verrf_at(struct whet_err *err, const char *where, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* Set the detail / the hint of the error already in `err` (NULL is fine); return -1. */
int whet_err_detail(struct whet_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int whet_err_hint(struct whet_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends "prefix: " to the primary message already in `err`; returns -1. */
int whet_err_prefix(struct whet_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The error as one line, "MESSAGE; DETAIL; hint: HINT" without the parts that are empty, into out
 * (cut to `size`, at a character boundary); returns out. For one-line sinks: API error bodies, logs. */
const char *whet_err_text(const struct whet_err *err, char *out, size_t size);
/* Prints the error to stderr for a person at a terminal: "WHO: MESSAGE", then "detail: …" and
 * "hint: …" lines for the parts that are set. */
void whet_err_report(const char *who, const struct whet_err *err);

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

/* Opens `path` for reading (close-on-exec) and returns the descriptor, with the file's size in *size;
 * -1, with the reason in err, when it cannot be opened or is not a regular file. */
int whet_open_regular(const char *path, uint64_t *size, struct whet_err *err);
/* Reads a whole file into a NUL-terminated buffer the caller frees; `max` bounds its size. */
int whet_read_file(const char *path, size_t max, char **out, size_t *len, struct whet_err *err);
/* Writes `len` bytes to `path` atomically (temp file in the same directory, fsync, rename), mode 0644;
 * the _mode variant sets the mode (0600 for files holding secrets). */
int whet_write_file_atomic(const char *path, const void *data, size_t len, struct whet_err *err);
int whet_write_file_atomic_mode(const char *path, const void *data, size_t len, int mode, struct whet_err *err);
/* whet_write_file_atomic of the file `name` in the directory `dir`. */
int whet_write_file_in(const char *dir, const char *name, const void *data, size_t len, struct whet_err *err);
/* Writes all `len` bytes to fd (retrying short writes and EINTR); -1 with errno set on failure. */
int whet_write_all(int fd, const void *data, size_t len);
/* mkdir -p */
int whet_mkdir_p(const char *path, struct whet_err *err);
/* rm -rf: removes path and, when it is a directory, everything under it, without following symbolic
 * links (a link is removed, never what it points to). A path that does not exist is no error. Returns
 * 0, or -1 with errno set by the first removal that failed (the walk goes on past it). */
int whet_rm_rf(const char *path);
/* The bytes of the regular files under `dir` (their sizes; links are not followed), 0 when it cannot
 * be read. */
uint64_t whet_dir_bytes(const char *dir);

/* 64-bit FNV-1a of a NUL-terminated string: for hash tables and for remembering a text by its hash. */
uint64_t whet_hash_text(const char *s);

/* Wall-clock and monotonic time. */
int64_t whet_now_unix(void);
double whet_now_mono(void);

/* A qsort/bsearch comparator of char * elements, in strcmp order. */
int whet_cmp_strp(const void *a, const void *b);

#define WHET_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
