/* buf.h - the one growable byte buffer: text being built (chat prompts, grader templates, CSV,
 * metrics pages) and byte strings (the tokenizer's pieces).
 *
 *   struct whet_buf b = {0};
 *   whet_buf_puts(&b, "step,loss\n");
 *   whet_buf_printf(&b, "%d,%.4f\n", step, loss);
 *   use(b.data, b.len);
 *   whet_buf_free(&b);        (or keep b.data: it is a plain malloc'd string the new owner frees)
 *
 * A zero-initialised buffer is empty and owns nothing. Every append leaves data[len] == 0, so text can
 * be used as a C string at once; whet_buf_reserve leaves room for that NUL too, so code that writes
 * into data directly (then bumps len) may add it itself. Capacity doubles: appends are amortised O(1).
 * Allocation failure aborts (xrealloc), like every allocation in whet. */
#ifndef WHET_BUF_H
#define WHET_BUF_H

#include <stddef.h>

struct whet_buf {
    char *data; /* NULL until the first append or reserve */
    size_t len, cap;
};

/* Makes room for `extra` more bytes and a NUL after them. */
void whet_buf_reserve(struct whet_buf *b, size_t extra);
void whet_buf_append(struct whet_buf *b, const void *p, size_t n);
void whet_buf_puts(struct whet_buf *b, const char *s);
void whet_buf_printf(struct whet_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Frees the bytes and leaves the buffer empty (reusable). */
void whet_buf_free(struct whet_buf *b);

#endif
