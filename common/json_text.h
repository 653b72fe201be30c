/* json_text.h - JSON as text, where jansson's own reading and writing fall short for what tenants send and
 * see: a byte-order mark before a JSON Lines file's first line, and numbers written in their shortest
 * form (jansson writes every real with %.17g: 8.601 comes out as 8.6010000000000009).
 *
 * whet_json_compact is the one writer of compact JSON that tenants read (gateway answers, the events,
 * metrics and checkpoint reports executors send on); files nobody reads by eye may keep json_dumps. */
#ifndef WHET_JSON_TEXT_H
#define WHET_JSON_TEXT_H

#include <jansson.h>
#include <stddef.h>

/* `text` past a UTF-8 byte-order mark (EF BB BF) at its start, which Windows editors write before a
 * file's first line; *len is shortened to match. Anything else comes back as it is. */
const char *whet_json_skip_bom(const char *text, size_t *len);

/* Room for any double whet_json_real writes ("-2.2250738585072014e-308" and its NUL, with margin). */
#define WHET_JSON_REAL_MAX 32

/* Writes the shortest decimal that reads back (strtod) as exactly `v`, in jansson's syntax: a whole
 * number keeps a ".0" so that it reads back as a real, an exponent has no '+' and no leading zeros
 * (0.1 -> "0.1", 3 -> "3.0", 1e-7 -> "1e-7", 1e300 -> "1e300", 5e-324 -> "5e-324"). `buf` holds
 * WHET_JSON_REAL_MAX bytes. Returns the length, or -1 when `v` is not finite (JSON has no such number). */
int whet_json_real(double v, char buf[WHET_JSON_REAL_MAX]);

struct whet_buf;
/* Appends s[0..n) to b as a JSON string: quoted, with the quote, the backslash and control characters
 * escaped (other bytes as they are: the caller passes UTF-8). For text built without jansson's objects. */
void whet_json_put_string(struct whet_buf *b, const char *s, size_t n);

/* The text of json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) but with reals in whet_json_real's shortest
 * form, malloc'd (the caller frees it); *len (when not NULL) gets its length. NULL when v is NULL or
 * nested deeper than jansson allows. */
char *whet_json_compact(const json_t *v, size_t *len);

#endif
