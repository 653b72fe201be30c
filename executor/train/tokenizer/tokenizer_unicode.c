/* tokenizer_unicode.c - the Unicode the tokenizer needs and nothing more: NFC and ECMAScript's idea
 * of whitespace (UTF-8 repair is common/utf8.h's utf8_repair).
 *
 * transformers.js sees text as a JS string, so invalid UTF-8 has already become U+FFFD (TextDecoder's
 * rule: one replacement per maximal ill-formed subsequence) and NFC is String.prototype.normalize. We
 * do the same on bytes. Most text is already NFC: a quick check (no code point that is not a "stable
 * starter") passes it through untouched; otherwise only the segments between stable starters are
 * decomposed, reordered and recomposed. The tables come from tokenizer_unicode_tables.h. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

struct nfc_range {
    uint32_t lo, hi;
    int value;
};
struct nfc_decomp {
    uint32_t cp, first, second; /* second 0 for a singleton */
};
struct nfc_comp {
    uint32_t first, second, composite;
};

#include "tokenizer_unicode_tables.h"

/* ---- ECMAScript whitespace --------------------------------------------------------------------- */

int js_is_space(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
    switch (cp) {
    case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

const char js_space_class[] =
    "\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}";

/* ---- NFC --------------------------------------------------------------------------------------- */

#define HANGUL_S 0xAC00
#define HANGUL_L 0x1100
#define HANGUL_V 0x1161
#define HANGUL_T 0x11A7
#define HANGUL_LCOUNT 19
#define HANGUL_VCOUNT 21
#define HANGUL_TCOUNT 28
#define HANGUL_SCOUNT (HANGUL_LCOUNT * HANGUL_VCOUNT * HANGUL_TCOUNT)

static int range_lookup(const struct nfc_range *r, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo) hi = mid;
        else if (cp > r[mid].hi) lo = mid + 1;
        else return r[mid].value;
    }
    return 0;
}

static int ccc_of(uint32_t cp) {
    return cp < 0x300 ? 0 : range_lookup(nfc_ccc, WHET_ARRAY_LEN(nfc_ccc), cp);
}

static int is_unstable(uint32_t cp) {
    return cp >= 0x300 && range_lookup(nfc_unstable, WHET_ARRAY_LEN(nfc_unstable), cp);
}

static const struct nfc_decomp *decomp_of(uint32_t cp) {
    size_t lo = 0, hi = WHET_ARRAY_LEN(nfc_decomp);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < nfc_decomp[mid].cp) hi = mid;
        else if (cp > nfc_decomp[mid].cp) lo = mid + 1;
        else return &nfc_decomp[mid];
    }
    return NULL;
}

/* The primary composite of (a, b), or 0. */
static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= HANGUL_L && a < HANGUL_L + HANGUL_LCOUNT && b >= HANGUL_V && b < HANGUL_V + HANGUL_VCOUNT)
        return HANGUL_S + ((a - HANGUL_L) * HANGUL_VCOUNT + (b - HANGUL_V)) * HANGUL_TCOUNT;
    if (a >= HANGUL_S && a < HANGUL_S + HANGUL_SCOUNT && (a - HANGUL_S) % HANGUL_TCOUNT == 0 && b > HANGUL_T &&
        b < HANGUL_T + HANGUL_TCOUNT)
        return a + (b - HANGUL_T);
    size_t lo = 0, hi = WHET_ARRAY_LEN(nfc_comp);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const struct nfc_comp *c = &nfc_comp[mid];
        if (a < c->first || (a == c->first && b < c->second)) hi = mid;
        else if (a > c->first || b > c->second) lo = mid + 1;
        else return c->composite;
    }
    return 0;
}

struct cp_list {
    uint32_t *cp;
    size_t n, cap;
};

static void cp_push(struct cp_list *l, uint32_t cp) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        l->cp = xrealloc(l->cp, l->cap * sizeof *l->cp);
    }
    l->cp[l->n++] = cp;
}

static void decompose(struct cp_list *l, uint32_t cp) {
    if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_SCOUNT) {
        uint32_t s = cp - HANGUL_S;
        cp_push(l, HANGUL_L + s / (HANGUL_VCOUNT * HANGUL_TCOUNT));
        cp_push(l, HANGUL_V + (s % (HANGUL_VCOUNT * HANGUL_TCOUNT)) / HANGUL_TCOUNT);
        if (s % HANGUL_TCOUNT) cp_push(l, HANGUL_T + s % HANGUL_TCOUNT);
        return;
    }
    const struct nfc_decomp *d = decomp_of(cp);
    if (!d) {
        cp_push(l, cp);
        return;
    }
    decompose(l, d->first);
    if (d->second) decompose(l, d->second);
}

/* NFC of one segment (decompose, canonical order, compose), appended to out as UTF-8. */
static void nfc_segment(const unsigned char *s, size_t len, struct cp_list *l, struct whet_buf *out) {
    l->n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += utf8_decode(s + i, len - i, &cp);
        decompose(l, cp);
    }
    /* Canonical ordering: a stable sort of each run of non-starters by combining class. */
    for (size_t i = 1; i < l->n; i++) {
        int c = ccc_of(l->cp[i]);
        if (c == 0) continue;
        for (size_t j = i; j > 0; j--) {
            int p = ccc_of(l->cp[j - 1]);
            if (p <= c) break;
            uint32_t t = l->cp[j - 1];
            l->cp[j - 1] = l->cp[j];
            l->cp[j] = t;
        }
    }
    /* Canonical composition (UAX #15's reference algorithm): a character composes with the last
     * starter unless a character of the same or higher class stands between them. A leading non-starter
     * gets class 256 so nothing composes with it. */
    size_t n_out = 0;
    if (l->n) {
        size_t starter = 0;
        int last_class = ccc_of(l->cp[0]) ? 256 : 0;
        n_out = 1;
        for (size_t i = 1; i < l->n; i++) {
            uint32_t cp = l->cp[i];
            int cls = ccc_of(cp);
            uint32_t composite = compose_pair(l->cp[starter], cp);
            if (composite && (last_class < cls || last_class == 0)) {
                l->cp[starter] = composite;
                continue;
            }
            if (cls == 0) starter = n_out;
            last_class = cls;
            l->cp[n_out++] = cp;
        }
    }
    whet_buf_reserve(out, 4 * n_out);
    for (size_t i = 0; i < n_out; i++) out->len += utf8_encode(l->cp[i], out->data + out->len);
}

int nfc_normalize(const char *text, size_t len, struct whet_buf *out) {
    const unsigned char *s = (const unsigned char *)text;
    /* Quick check: code points below U+0300 are all stable starters. */
    size_t i = 0;
    for (; i < len; i++) {
        if (s[i] < 0xCC) continue;
        uint32_t cp;
        utf8_decode(s + i, len - i, &cp);
        if (is_unstable(cp)) break;
    }
    if (i == len) return 1;

    out->len = 0;
    struct cp_list l = {0};
    size_t seg_start = 0;
    int dirty = 0;
    for (i = 0; i < len;) {
        uint32_t cp;
        int n = utf8_decode(s + i, len - i, &cp);
        if (is_unstable(cp)) {
            dirty = 1;
        } else if (ccc_of(cp) == 0 && i > seg_start) {
            /* A stable starter: nothing before it can interact with it or anything after it. */
            if (dirty) nfc_segment(s + seg_start, i - seg_start, &l, out);
            else whet_buf_append(out, s + seg_start, i - seg_start);
            seg_start = i;
            dirty = 0;
        }
        i += n;
    }
    if (dirty) nfc_segment(s + seg_start, len - seg_start, &l, out);
    else whet_buf_append(out, s + seg_start, len - seg_start);
    free(l.cp);
    return 0;
}
