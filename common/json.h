/* json.h - small helpers around jansson shared by every parser of tenant JSON. */
#ifndef WHET_JSON_H
#define WHET_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "util.h"

/* What a value is, for error messages in OpenAI's wording: "an object", "an array", "a string",
 * "an integer", "a number", "a boolean" or "null". */
const char *whet_json_kind(const json_t *v);

/* The one wording of a jansson parse error, in the "FILE: line N: what" shape every whet parser uses:
 * "SOURCE: line N: not valid JSON at column C: TEXT" (SOURCE names the file or the thing parsed), or,
 * with SOURCE NULL, "not valid JSON at column C: TEXT" for one line of JSON Lines, whose reader
 * prefixes "PATH: line N". An error that is no parse error (jansson could not open the file) reads
 * "SOURCE: TEXT". Returns -1. */
int whet_json_errf(struct whet_err *err, const char *source, const json_error_t *jerr);
/* json_load_file(path, flags) that reports failure through whet_json_errf; NULL with err set. */
json_t *whet_json_load_file(const char *path, size_t flags, struct whet_err *err);

/* Reads a JSON Lines file: calls fn(ctx, line, len, lineno, err) for each line that is not blank,
 * numbered from 1 as an editor counts them (a UTF-8 byte-order mark before line 1 is skipped). Stops at the first line fn fails on and prefixes its
 * error with "PATH: line N". *n_lines (when not NULL) gets the number of lines read, blank ones too.
 * Returns 0, or -1 with err. */
typedef int (*whet_jsonl_fn)(void *ctx, const char *line, size_t len, int lineno, struct whet_err *err);
int whet_jsonl_each(const char *path, whet_jsonl_fn fn, void *ctx, int *n_lines, struct whet_err *err);

#endif
