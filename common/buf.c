/* buf.c - see buf.h. */
#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void whet_buf_reserve(struct whet_buf *b, size_t extra) {
    if (b->len + extra < b->cap) return; /* strictly less: one byte stays for the NUL */
    size_t cap = b->cap ? b->cap : 64;
    while (cap <= b->len + extra) cap *= 2;
    b->data = xrealloc(b->data, cap);
    b->cap = cap;
}

void whet_buf_append(struct whet_buf *b, const void *p, size_t n) {
    whet_buf_reserve(b, n);
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
}

void whet_buf_puts(struct whet_buf *b, const char *s) { whet_buf_append(b, s, strlen(s)); }

void whet_buf_printf(struct whet_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->data ? b->data + b->len : NULL, b->data ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) abort(); /* only a bad format string gets here: a programming error */
    if (b->data && (size_t)n < b->cap - b->len) { /* it fitted, NUL included */
        b->len += (size_t)n;
        return;
    }
    whet_buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void whet_buf_free(struct whet_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
