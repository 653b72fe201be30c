/* json_text.c - see json_text.h. The compact writer was the gateway's (its answers are most of what it
 * writes): one growing buffer, integers written by hand (jansson formats each with snprintf, which the
 * gateway runs on glibc's slow path; see request_log in gateway/http.c), reals through whet_json_real. */
#include "json_text.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "util.h"

const char *whet_json_skip_bom(const char *text, size_t *len) {
    if (*len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) {
        *len -= 3;
        return text + 3;
    }
    return text;
}

/* ---- Numbers ----------------------------------------------------------------------------------- */

int whet_json_real(double v, char buf[WHET_JSON_REAL_MAX]) {
    if (!isfinite(v)) return -1;
    /* Every decimal of at most DBL_DIG (15) digits survives a trip through a normal double, so when
     * %.15g reads back it is the shortest form (%g drops trailing zeros); otherwise 16 or 17 digits
     * are needed, and 17 always read back. Subnormals hold fewer digits: 5e-324 needs only one. */
    int len = 0;
    for (int digits = fabs(v) < DBL_MIN ? 1 : DBL_DIG; digits <= DBL_DECIMAL_DIG; digits++) {
        len = snprintf(buf, WHET_JSON_REAL_MAX, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) break;
    }
    /* jansson's syntax, so that the text reads back as a real and matches what json_dumps writes. */
    if (!strchr(buf, '.') && !strchr(buf, 'e')) {
        memcpy(buf + len, ".0", 3);
        len += 2;
    }
    char *e = strchr(buf, 'e');
    if (e) {
        char *digits = e + 1 + (e[1] == '-'); /* where the exponent's digits belong */
        char *from = digits + (*digits == '+');
        while (*from == '0' && from[1]) from++;
        if (from > digits) {
            memmove(digits, from, strlen(from) + 1);
            len = (int)strlen(buf);
        }
    }
    return len;
}

/* ---- The compact writer ------------------------------------------------------------------------ */

void whet_json_put_string(struct whet_buf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789ABCDEF";
    whet_buf_reserve(b, n + 2);
    b->data[b->len++] = '"';
    size_t run = 0; /* bytes copied as they are, pending */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        whet_buf_append(b, s + run, i - run);
        run = i + 1;
        char esc[6] = {'\\', 0};
        size_t elen = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            elen = 6;
        }
        whet_buf_append(b, esc, elen);
    }
    whet_buf_append(b, s + run, n - run);
    whet_buf_append(b, "\"", 1);
}

static void json_put_integer(struct whet_buf *b, json_int_t v) {
    char d[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do {
        d[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) d[n++] = '-';
    whet_buf_reserve(b, (size_t)n);
    while (n) b->data[b->len++] = d[--n];
}

static int json_put_value(struct whet_buf *b, const json_t *v, int depth) {
    if (depth > 2048) return -1; /* jansson's own limit on nesting */
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        whet_buf_append(b, "{", 1);
        int first = 1;
        for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
            if (!first) whet_buf_append(b, ",", 1);
            first = 0;
            whet_json_put_string(b, json_object_iter_key(it), json_object_iter_key_len(it));
            whet_buf_append(b, ":", 1);
            if (json_put_value(b, json_object_iter_value(it), depth + 1) < 0) return -1;
        }
        whet_buf_append(b, "}", 1);
        return 0;
    }
    case JSON_ARRAY: {
        whet_buf_append(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) whet_buf_append(b, ",", 1);
            if (json_put_value(b, json_array_get(v, i), depth + 1) < 0) return -1;
        }
        whet_buf_append(b, "]", 1);
        return 0;
    }
    case JSON_STRING: whet_json_put_string(b, json_string_value(v), json_string_length(v)); return 0;
    case JSON_INTEGER: json_put_integer(b, json_integer_value(v)); return 0;
    case JSON_REAL: {
        char text[WHET_JSON_REAL_MAX];
        int n = whet_json_real(json_real_value(v), text);
        if (n < 0) return -1;
        whet_buf_append(b, text, (size_t)n);
        return 0;
    }
    case JSON_TRUE: whet_buf_append(b, "true", 4); return 0;
    case JSON_FALSE: whet_buf_append(b, "false", 5); return 0;
    case JSON_NULL: whet_buf_append(b, "null", 4); return 0;
    }
    return -1;
}

char *whet_json_compact(const json_t *v, size_t *len) {
    struct whet_buf b = {0};
    if (!v || json_put_value(&b, v, 0) < 0) {
        whet_buf_free(&b);
        return NULL;
    }
    whet_buf_reserve(&b, 0);
    b.data[b.len] = 0; /* the last value may have been written in place, after a reserve */
    if (len) *len = b.len;
    return b.data;
}
