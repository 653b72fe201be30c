/* tokenizer_pretokenize.c - pre-tokenization: GPT-2's byte-level alphabet and regex splitting.
 *
 * The Split pattern in a tokenizer.json is written for Oniguruma (the Rust tokenizers library), and
 * transformers.js rewrites it into a JS RegExp with flags "gu". To give the same pre-tokens we start
 * from transformers.js's rewrite (createPattern: drop the escapes in \# \& \~, replace the (?i:'s|…)
 * contraction group by ASCII-only classes) and then give PCRE2 the JS meaning of what differs:
 *   \s, \S   ECMAScript whitespace (includes U+FEFF, excludes U+0085; PCRE2's does the opposite)
 *   .        anything but \n \r U+2028 U+2029
 *   \uXXXX   \x{XXXX}
 *   [^] []   any character / nothing
 * \d \w \b stay ASCII as in JS because PCRE2_UCP is deliberately not set; \p{L}, \p{N} and caseless
 * matching are Unicode in PCRE2's UTF mode anyway. $ matches only at the very end, as in JS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

/* ---- byte-level alphabet ----------------------------------------------------------------------- */

/* Printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68, in byte order,
 * for U+0100..U+0143: 0x00..0x20 -> U+0100.., 0x7F..0xA0 -> U+0121.., 0xAD -> U+0143. */
uint32_t byte_to_unicode(unsigned char b) {
    if (b <= 0x20) return 0x100 + b;
    if (b >= 0x7F && b <= 0xA0) return b + 0xA2;
    if (b == 0xAD) return 0x143;
    return b;
}

int unicode_to_byte(uint32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp >= 0x100 && cp <= 0x120) return (int)(cp - 0x100);
    if (cp >= 0x121 && cp <= 0x142) return (int)(cp - 0xA2);
    if (cp == 0x143) return 0xAD;
    return -1;
}

int byte_level_decode(const char *s, size_t len, struct whet_buf *out) {
    const unsigned char *u = (const unsigned char *)s;
    whet_buf_reserve(out, len);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += utf8_decode(u + i, len - i, &cp);
        int b = unicode_to_byte(cp);
        if (b < 0) return -1;
        out->data[out->len++] = (char)b;
    }
    return 0;
}

/* ---- JS RegExp -> PCRE2 ------------------------------------------------------------------------ */

/* transformers.js's PROBLEMATIC_REGEX_MAP: JS has no (?i:…) groups, so the contraction group of the
 * GPT-4-style patterns becomes explicit ASCII case classes ('ſ' and 'K' do not match 's' and 'k'). */
static const char *const js_rewrites[][2] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)", "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))"},
    {" ?[^(\\s|[.,!?\xE2\x80\xA6\xE3\x80\x82\xEF\xBC\x8C\xE3\x80\x81\xE0\xA5\xA4\xDB\x94\xD8\x8C])]+",
     " ?[^\\s.,!?\xE2\x80\xA6\xE3\x80\x82\xEF\xBC\x8C\xE3\x80\x81\xE0\xA5\xA4\xDB\x94\xD8\x8C]+"},
};

static void replace_all(struct whet_buf *b, const char *from, const char *to) {
    size_t nf = strlen(from), nt = strlen(to);
    struct whet_buf r = {0};
    for (size_t i = 0; i < b->len;) {
        if (b->len - i >= nf && memcmp(b->data + i, from, nf) == 0) {
            whet_buf_append(&r, to, nt);
            i += nf;
        } else {
            whet_buf_append(&r, b->data + i, 1);
            i++;
        }
    }
    whet_buf_free(b);
    *b = r;
}

static int is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Rewrites the JS pattern `js` into PCRE2 syntax with the same meaning. */
static int js_to_pcre2(const char *js, size_t len, struct whet_buf *out, struct whet_err *err) {
    int in_class = 0;
    char tmp[32];
    for (size_t i = 0; i < len; i++) {
        char c = js[i];
        if (c == '\\' && i + 1 < len) {
            char e = js[i + 1];
            if (e == 's' || e == 'S') {
                if (in_class && e == 'S') return whet_errf(err, "\\S inside a character class is not supported");
                if (in_class) whet_buf_append(out, js_space_class, strlen(js_space_class));
                else {
                    whet_buf_append(out, e == 's' ? "[" : "[^", e == 's' ? 1 : 2);
                    whet_buf_append(out, js_space_class, strlen(js_space_class));
                    whet_buf_append(out, "]", 1);
                }
                i++;
            } else if (e == 'u' && i + 2 < len && js[i + 2] == '{') {
                size_t j = i + 3;
                while (j < len && is_hex(js[j])) j++;
                if (j >= len || js[j] != '}' || j == i + 3) return whet_errf(err, "bad \\u{…} escape");
                whet_buf_append(out, "\\x{", 3);
                whet_buf_append(out, js + i + 3, j - (i + 3));
                whet_buf_append(out, "}", 1);
                i = j;
            } else if (e == 'u' && i + 5 < len && is_hex(js[i + 2]) && is_hex(js[i + 3]) && is_hex(js[i + 4]) &&
                       is_hex(js[i + 5])) {
                snprintf(tmp, sizeof tmp, "\\x{%.4s}", js + i + 2);
                whet_buf_append(out, tmp, strlen(tmp));
                i += 5;
            } else {
                whet_buf_append(out, js + i, 2);
                i++;
            }
        } else if (in_class) {
            if (c == ']') in_class = 0;
            whet_buf_append(out, &c, 1);
        } else if (c == '[') {
            /* In JS `[]` matches nothing and `[^]` anything; PCRE2 would read the ']' as a literal. */
            if (i + 1 < len && js[i + 1] == ']') {
                whet_buf_append(out, "(?!)", 4);
                i++;
            } else if (i + 2 < len && js[i + 1] == '^' && js[i + 2] == ']') {
                whet_buf_append(out, "(?s:.)", 6);
                i += 2;
            } else {
                in_class = 1;
                whet_buf_append(out, "[", 1);
                if (i + 1 < len && js[i + 1] == '^') {
                    whet_buf_append(out, "^", 1);
                    i++;
                }
            }
        } else if (c == '.') {
            static const char js_dot[] = "[^\\n\\r\\x{2028}\\x{2029}]";
            whet_buf_append(out, js_dot, sizeof js_dot - 1);
        } else {
            whet_buf_append(out, &c, 1);
        }
    }
    return 0;
}

int split_compile(struct tok_split *s, const char *pattern, int is_regex, struct whet_err *err) {
    struct whet_buf js = {0}, pc = {0};
    size_t plen = strlen(pattern);
    if (is_regex) {
        /* createPattern: regex.replace(/\\([#&~])/g, "$1") */
        for (size_t i = 0; i < plen; i++) {
            if (pattern[i] == '\\' && i + 1 < plen && strchr("#&~", pattern[i + 1]) && pattern[i + 1]) continue;
            whet_buf_append(&js, pattern + i, 1);
        }
        for (size_t k = 0; k < WHET_ARRAY_LEN(js_rewrites); k++) replace_all(&js, js_rewrites[k][0], js_rewrites[k][1]);
        if (js_to_pcre2(js.data ? js.data : "", js.len, &pc, err) < 0) {
            whet_buf_free(&js);
            whet_buf_free(&pc);
            return -1;
        }
    } else {
        /* A literal: escape every ASCII punctuation character. */
        for (size_t i = 0; i < plen; i++) {
            unsigned char c = (unsigned char)pattern[i];
            if (c < 0x80 && !(c >= '0' && c <= '9') && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && c > ' ')
                whet_buf_append(&pc, "\\", 1);
            whet_buf_append(&pc, pattern + i, 1);
        }
    }
    int code;
    PCRE2_SIZE at;
    s->re = pcre2_compile((PCRE2_SPTR)(pc.data ? pc.data : ""), pc.len, PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &code, &at,
                          NULL);
    whet_buf_free(&js);
    whet_buf_free(&pc);
    if (!s->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return whet_errf(err, "regex does not compile: %s (at offset %zu of the translated pattern)", (char *)msg,
                         (size_t)at);
    }
    s->jit = pcre2_jit_compile(s->re, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

void split_free(struct tok_split *s) {
    pcre2_code_free(s->re);
    s->re = NULL;
}

int split_run(const struct tok_split *s, pcre2_match_data *md, struct split_scratch *sc, const char *text,
              size_t len, int (*piece)(void *ctx, const char *p, size_t n), void *ctx, struct whet_err *err) {
    size_t pos = 0, prev = 0;
    PCRE2_SPTR subject = (PCRE2_SPTR)text;
    while (pos <= len) {
        pcre2_match_context *mc = sc ? sc->mc : NULL;
        int rc = s->jit ? pcre2_jit_match(s->re, subject, len, pos, 0, md, mc)
                        : pcre2_match(s->re, subject, len, pos, PCRE2_NO_UTF_CHECK, md, mc);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && sc && !sc->jit_stack) {
            /* Only reserved, not touched, until a match needs it. */
            sc->jit_stack = pcre2_jit_stack_create(32 << 10, 64 << 20, NULL);
            pcre2_jit_stack_assign(sc->mc, NULL, sc->jit_stack);
            continue;
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return whet_errf(err, "pre-tokenizer regex failed at byte %zu: %s", pos, (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms > prev && piece(ctx, text + prev, ms - prev) < 0) return -1;
        if (me > ms && piece(ctx, text + ms, me - ms) < 0) return -1;
        prev = me;
        if (me > ms) {
            pos = me;
        } else {
            if (me >= len) break;
            uint32_t cp;
            pos = me + utf8_decode((const unsigned char *)text + me, len - me, &cp);
        }
    }
    if (prev < len && piece(ctx, text + prev, len - prev) < 0) return -1;
    return 0;
}
