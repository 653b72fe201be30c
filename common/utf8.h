/* utf8.h - the one set of UTF-8 helpers: checking, decoding, encoding, repairing, trimming.
 *
 * "Well-formed" is Unicode's definition (The Unicode Standard, table 3-7): no overlong forms, no
 * surrogates, nothing past U+10FFFF; it is also what jansson accepts in a JSON string. Callers choose
 * how to treat what is not: the tokenizer repairs text the WHATWG way (one U+FFFD per maximal
 * ill-formed subsequence, as transformers.js and browsers do: utf8_repair), the graders replace each
 * bad byte (utf8_seq_len, then their own U+FFFD), the gateway refuses it (utf8_seq_len in its text checks). */
#ifndef WHET_UTF8_H
#define WHET_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define UTF8_REPLACEMENT "\xef\xbf\xbd" /* U+FFFD in UTF-8 */

/* Length (1-4) of the well-formed sequence that starts at s[0], reading at most `len` bytes, or 0 when
 * none starts there (a stray byte, a forbidden form, or a sequence cut off by `len`). len > 0. */
size_t utf8_seq_len(const unsigned char *s, size_t len);
/* Whether s[0..len) is well-formed UTF-8 throughout. */
int utf8_valid(const char *s, size_t len);
/* Decodes the code point at s[0..len) (which must be well-formed UTF-8, len > 0: it does not check);
 * returns its length. */
int utf8_decode(const unsigned char *s, size_t len, uint32_t *cp);
/* Encodes cp (at most U+10FFFF) into out (4 bytes room); returns the length. */
int utf8_encode(uint32_t cp, char *out);
/* If text is well-formed returns 1 and touches nothing; otherwise sets `out` to the text with each
 * maximal ill-formed subsequence replaced by U+FFFD (the WHATWG decoder's rule) and returns 0. */
int utf8_repair(const char *text, size_t len, struct whet_buf *out);
/* Cuts a sequence that truncation left incomplete at the end of s[0..n) (text cut to fit a buffer
 * must stay valid where it ends up, in JSON for instance): writes a NUL where it starts and returns
 * the new length; n when nothing was cut. */
size_t utf8_trim_incomplete(char *s, size_t n);

#endif
