/* multipart.c - see multipart.h. The parts: header parameters (`; name="value"`, shared by
 * Content-Type and Content-Disposition), the boundary, one part's header block, then the body walk. */
#include "multipart.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- header parameters */

#define PARAMS_MAX 8

struct header_param {
    char name[32];
    char value[MULTIPART_NAME_MAX + 1];
};

static int is_tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static const char *skip_ows(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p;
}

/* Reads a token at p (at least one character); returns the end of it. */
static const char *scan_token(const char *p, const char *end) {
    while (p < end && *p && is_tchar((unsigned char)*p)) p++;
    return p;
}

/* Parses `; name=value` pairs from p to end (value: token or quoted-string). */
static int parse_params(const char *p, const char *end, struct header_param *params, size_t *count,
                        struct whet_err *err) {
    *count = 0;
    for (;;) {
        p = skip_ows(p, end);
        if (p == end) return 0;
        if (*p != ';') return whet_errf(err, "expected ';' between parameters");
        p = skip_ows(p + 1, end);
        if (p == end) return 0; /* a trailing ';' is harmless */
        const char *name_end = scan_token(p, end);
        size_t name_len = (size_t)(name_end - p);
        if (name_len == 0 || name_end == end || *name_end != '=') return whet_errf(err, "expected a parameter name=value");
        if (*count == PARAMS_MAX) return whet_errf(err, "more than %d parameters", PARAMS_MAX);
        struct header_param *param = &params[(*count)++];
        if (name_len >= sizeof param->name) return whet_errf(err, "parameter name too long");
        memcpy(param->name, p, name_len);
        param->name[name_len] = 0;
        p = name_end + 1;
        size_t n = 0;
        if (p < end && *p == '"') {
            p++;
            for (;;) {
                if (p == end) return whet_errf(err, "parameter %s: unterminated quoted string", param->name);
                unsigned char c = (unsigned char)*p++;
                if (c == '"') break;
                if (c == '\\') {
                    if (p == end) return whet_errf(err, "parameter %s: unterminated quoted string", param->name);
                    c = (unsigned char)*p++;
                }
                if (c < 0x20 || c == 0x7f) return whet_errf(err, "parameter %s: control character in value", param->name);
                if (n == MULTIPART_NAME_MAX) return whet_errf(err, "parameter %s: longer than %d bytes", param->name, MULTIPART_NAME_MAX);
                param->value[n++] = (char)c;
            }
        } else {
            const char *value_end = scan_token(p, end);
            n = (size_t)(value_end - p);
            if (n == 0) return whet_errf(err, "parameter %s: empty value", param->name);
            if (n > MULTIPART_NAME_MAX) return whet_errf(err, "parameter %s: longer than %d bytes", param->name, MULTIPART_NAME_MAX);
            memcpy(param->value, p, n);
            p = value_end;
        }
        param->value[n] = 0;
        for (size_t i = 0; i + 1 < *count; i++)
            if (strcasecmp(params[i].name, param->name) == 0) return whet_errf(err, "parameter %s given twice", param->name);
    }
}

static const struct header_param *find_param(const struct header_param *params, size_t count, const char *name) {
    for (size_t i = 0; i < count; i++)
        if (strcasecmp(params[i].name, name) == 0) return &params[i];
    return NULL;
}

/* ---------------------------------------------------------------- the boundary */

static int is_bchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("'()+_,-./:=? ", c) != NULL;
}

int multipart_boundary(const char *content_type, size_t len, char *out, struct whet_err *err) {
    static const char media[] = "multipart/form-data";
    const char *p = content_type, *end = content_type + len;
    p = skip_ows(p, end);
    if ((size_t)(end - p) < sizeof media - 1 || strncasecmp(p, media, sizeof media - 1) != 0)
        return whet_errf(err, "expected Content-Type multipart/form-data");
    p += sizeof media - 1;
    struct header_param params[PARAMS_MAX];
    size_t count;
    if (parse_params(p, end, params, &count, err)) return whet_err_prefix(err, "Content-Type");
    const struct header_param *b = find_param(params, count, "boundary");
    if (!b) return whet_errf(err, "Content-Type: missing boundary parameter");
    size_t n = strlen(b->value);
    if (n == 0 || n > MULTIPART_BOUNDARY_MAX)
        return whet_errf(err, "Content-Type: boundary must have 1 to %d characters", MULTIPART_BOUNDARY_MAX);
    for (size_t i = 0; i < n; i++)
        if (!is_bchar((unsigned char)b->value[i]) || (i == n - 1 && b->value[i] == ' '))
            return whet_errf(err, "Content-Type: invalid character in boundary");
    memcpy(out, b->value, n + 1);
    return 0;
}

/* ---------------------------------------------------------------- one part's headers */

/* Parses the header block [p, end) (lines ending in CRLF, without the blank line) into `part`. */
static int parse_part_headers(const char *p, const char *end, struct multipart_part *part, struct whet_err *err) {
    int headers = 0, has_disposition = 0;
    while (p < end) {
        const char *eol = memchr(p, '\r', (size_t)(end - p));
        if (!eol || eol + 1 >= end || eol[1] != '\n') return whet_errf(err, "header line without CRLF");
        if (++headers > MULTIPART_MAX_HEADERS) return whet_errf(err, "more than %d headers", MULTIPART_MAX_HEADERS);
        if (*p == ' ' || *p == '\t') return whet_errf(err, "folded header lines are not allowed");
        const char *name_end = scan_token(p, eol);
        if (name_end == p || name_end == eol || *name_end != ':') return whet_errf(err, "malformed header line");
        for (const char *c = name_end; c < eol; c++)
            if ((unsigned char)*c < 0x20 && *c != '\t') return whet_errf(err, "control character in a header");
        size_t name_len = (size_t)(name_end - p);
        const char *value = skip_ows(name_end + 1, eol), *value_end = eol;
        while (value_end > value && (value_end[-1] == ' ' || value_end[-1] == '\t')) value_end--;

        if (name_len == 19 && strncasecmp(p, "Content-Disposition", 19) == 0) {
            if (has_disposition) return whet_errf(err, "Content-Disposition given twice");
            has_disposition = 1;
            static const char form_data[] = "form-data";
            size_t fl = sizeof form_data - 1;
            if ((size_t)(value_end - value) < fl || strncasecmp(value, form_data, fl) != 0 ||
                (value + fl < value_end && value[fl] != ';' && value[fl] != ' ' && value[fl] != '\t'))
                return whet_errf(err, "Content-Disposition: expected form-data");
            struct header_param params[PARAMS_MAX];
            size_t count;
            if (parse_params(value + fl, value_end, params, &count, err))
                return whet_err_prefix(err, "Content-Disposition");
            const struct header_param *name = find_param(params, count, "name");
            if (!name || !name->value[0]) return whet_errf(err, "Content-Disposition: missing name parameter");
            memcpy(part->name, name->value, strlen(name->value) + 1);
            const struct header_param *filename = find_param(params, count, "filename");
            if (filename) {
                part->has_filename = 1;
                memcpy(part->filename, filename->value, strlen(filename->value) + 1);
            }
            if (find_param(params, count, "filename*"))
                return whet_errf(err, "Content-Disposition: filename* is not supported in form data (RFC 7578)");
        } else if (name_len == 12 && strncasecmp(p, "Content-Type", 12) == 0) {
            size_t n = (size_t)(value_end - value);
            if (part->content_type[0]) return whet_errf(err, "Content-Type given twice");
            if (n == 0 || n >= sizeof part->content_type) return whet_errf(err, "Content-Type: empty or too long");
            memcpy(part->content_type, value, n);
            part->content_type[n] = 0;
        }
        /* Other headers (Content-Transfer-Encoding is deprecated by RFC 7578) are ignored. */
        p = eol + 2;
    }
    if (!has_disposition) return whet_errf(err, "missing Content-Disposition header");
    return 0;
}

/* ---------------------------------------------------------------- the body */

int multipart_parse(const char *body, size_t len, const char *boundary, struct multipart_form *form,
                    struct whet_err *err) {
    memset(form, 0, sizeof *form);
    char delim[MULTIPART_BOUNDARY_MAX + 5]; /* "\r\n--" boundary */
    size_t blen = strlen(boundary);
    if (blen == 0 || blen > MULTIPART_BOUNDARY_MAX) return whet_errf(err, "invalid boundary");
    memcpy(delim, "\r\n--", 4);
    memcpy(delim + 4, boundary, blen);
    size_t dlen = blen + 4;

    /* The body opens with the first delimiter (without the leading CRLF): no preamble. */
    if (len < dlen - 2 || memcmp(body, delim + 2, dlen - 2) != 0)
        return whet_errf(err, "body does not start with the boundary");
    const char *p = body + dlen - 2, *end = body + len;
    for (;;) {
        /* After a delimiter: "--" closes the body, CRLF opens a part. */
        if (end - p >= 2 && p[0] == '-' && p[1] == '-') {
            p += 2;
            while (p < end && (*p == '\r' || *p == '\n')) p++;
            if (p != end) return whet_errf(err, "data after the closing boundary");
            return 0;
        }
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
            return whet_errf(err, "part %zu: expected CRLF after the boundary", form->count + 1);
        p += 2;
        if (form->count == MULTIPART_MAX_PARTS) return whet_errf(err, "more than %d parts", MULTIPART_MAX_PARTS);
        struct multipart_part *part = &form->parts[form->count++];

        /* The header block ends at the first empty line, within MULTIPART_HEADER_BYTES. */
        size_t window = (size_t)(end - p);
        if (window > MULTIPART_HEADER_BYTES + 4) window = MULTIPART_HEADER_BYTES + 4;
        const char *headers_end;
        if (window >= 2 && p[0] == '\r' && p[1] == '\n') {
            headers_end = p; /* no headers at all */
        } else {
            const char *blank = memmem(p, window, "\r\n\r\n", 4);
            if (!blank) {
                return whet_errf(err, "part %zu: %s", form->count,
                                 window > MULTIPART_HEADER_BYTES ? "headers longer than 4096 bytes" : "headers not terminated");
            }
            headers_end = blank + 2;
        }
        if (parse_part_headers(p, headers_end, part, err)) return whet_err_prefix(err, "part %zu", form->count);
        for (size_t i = 0; i + 1 < form->count; i++)
            if (strcmp(form->parts[i].name, part->name) == 0)
                return whet_errf(err, "part %zu: field \"%s\" given twice", form->count, part->name);

        p = headers_end + 2;
        const char *next = memmem(p, (size_t)(end - p), delim, dlen);
        if (!next) return whet_errf(err, "part %zu: no closing boundary (truncated body?)", form->count);
        part->data = p;
        part->len = (size_t)(next - p);
        p = next + dlen;
    }
}

const struct multipart_part *multipart_get(const struct multipart_form *form, const char *name) {
    for (size_t i = 0; i < form->count; i++)
        if (strcmp(form->parts[i].name, name) == 0) return &form->parts[i];
    return NULL;
}
