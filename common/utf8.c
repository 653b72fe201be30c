/* utf8.c - see utf8.h. */
#include "utf8.h"

/* How many bytes the sequence a lead byte starts has (2-4; 0 for a byte no sequence starts with), and
 * the range its second byte must lie in (table 3-7: that is where overlongs, surrogates and values
 * past U+10FFFF are excluded); later bytes are plain continuation bytes, 80..BF. */
static size_t lead_byte(unsigned c, unsigned *lo, unsigned *hi) {
    *lo = 0x80, *hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) return 2;
    if (c >= 0xe0 && c <= 0xef) {
        if (c == 0xe0) *lo = 0xa0;
        if (c == 0xed) *hi = 0x9f;
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if (c == 0xf0) *lo = 0x90;
        if (c == 0xf4) *hi = 0x8f;
        return 4;
    }
    return 0;
}

size_t utf8_seq_len(const unsigned char *s, size_t len) {
    if (s[0] < 0x80) return 1;
    unsigned lo, hi;
    size_t n = lead_byte(s[0], &lo, &hi);
    if (!n || len < n || s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k < n; k++)
        if ((s[k] & 0xc0) != 0x80) return 0;
    return n;
}

int utf8_valid(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        size_t n = utf8_seq_len(p, (size_t)(end - p));
        if (!n) return 0;
        p += n;
    }
    return 1;
}

int utf8_decode(const unsigned char *s, size_t len, uint32_t *cp) {
    unsigned char c = s[0];
    if (c < 0x80 || len < 2) {
        *cp = c;
        return 1;
    }
    if (c < 0xE0) {
        *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (c < 0xF0 || len < 4) {
        *cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
          (s[3] & 0x3F);
    return 4;
}

int utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The length of the maximal ill-formed subsequence at s, where no well-formed sequence starts: the
 * longest prefix of one, at least a byte. One U+FFFD replaces it in the WHATWG decoder (Unicode's
 * "substitution of maximal subparts"); the byte after it starts afresh. */
static size_t maximal_subpart(const unsigned char *s, size_t len) {
    unsigned lo, hi;
    size_t want = lead_byte(s[0], &lo, &hi), n = 1;
    while (n < want && n < len && s[n] >= lo && s[n] <= hi) {
        n++;
        lo = 0x80, hi = 0xbf;
    }
    return n;
}

int utf8_repair(const char *text, size_t len, struct whet_buf *out) {
    if (utf8_valid(text, len)) return 1;
    const unsigned char *p = (const unsigned char *)text, *end = p + len;
    out->len = 0;
    whet_buf_reserve(out, len);
    while (p < end) {
        const unsigned char *run = p; /* well-formed bytes are copied in runs */
        size_t n;
        while (p < end && (n = utf8_seq_len(p, (size_t)(end - p))) != 0) p += n;
        whet_buf_append(out, run, (size_t)(p - run));
        if (p < end) {
            whet_buf_append(out, UTF8_REPLACEMENT, 3);
            p += maximal_subpart(p, (size_t)(end - p));
        }
    }
    return 0;
}

size_t utf8_trim_incomplete(char *s, size_t n) {
    size_t i = n;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xc0) == 0x80) i--; /* continuation bytes */
    if (i == 0 || (unsigned char)s[i - 1] < 0x80) return n;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t want = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
    if (n - (i - 1) < want) {
        s[i - 1] = 0;
        return i - 1;
    }
    return n;
}
