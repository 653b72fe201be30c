/* json.c - see json.h. */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_text.h"

const char *whet_json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

int whet_json_errf(struct whet_err *err, const char *source, const json_error_t *jerr) {
    if (!source) return whet_errf(err, "not valid JSON at column %d: %s", jerr->column, jerr->text);
    if (jerr->line < 1) return whet_errf(err, "%s: %s", source, jerr->text);
    return whet_errf(err, "%s: line %d: not valid JSON at column %d: %s", source, jerr->line, jerr->column, jerr->text);
}

json_t *whet_json_load_file(const char *path, size_t flags, struct whet_err *err) {
    json_error_t jerr;
    json_t *root = json_load_file(path, flags, &jerr);
    if (!root) whet_json_errf(err, path, &jerr);
    return root;
}

int whet_jsonl_each(const char *path, whet_jsonl_fn fn, void *ctx, int *n_lines, struct whet_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return whet_errf(err, "%s: cannot open: %m", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, rc = 0;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t n = (size_t)len;
        const char *text = lineno == 1 ? whet_json_skip_bom(line, &n) : line;
        if (strspn(text, " \t\r\n") == n) continue; /* a trailing newline at the end, say */
        if (fn(ctx, text, n, lineno, err)) rc = whet_err_prefix(err, "%s: line %d", path, lineno);
    }
    if (!rc && ferror(f)) rc = whet_errf(err, "%s: line %d: cannot read: %m", path, lineno + 1);
    free(line);
    fclose(f);
    if (n_lines) *n_lines = lineno;
    return rc;
}
