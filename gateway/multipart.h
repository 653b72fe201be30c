/* multipart.h - a strict, bounded multipart/form-data parser (RFC 7578) for `POST /v1/files` and
 * `POST /v1/uploads/{id}/parts`.
 *
 * h2o hands the gateway whole request bodies, so the parser works on one buffer and copies nothing:
 * each part's bytes point into the body. Only what form uploads need is accepted: the body starts with
 * the first delimiter, every part has a `Content-Disposition: form-data; name="…"` header (and
 * optionally `filename="…"` and a Content-Type), parts end at CRLF + delimiter, the close delimiter
 * ends the body (only CRLFs may follow). Everything else — a preamble, a missing name, two parts with
 * the same name, header lines without CRLF, too many parts or headers — is an error that says what. */
#ifndef WHET_GATEWAY_MULTIPART_H
#define WHET_GATEWAY_MULTIPART_H

#include <stddef.h>

#include "util.h"

#define MULTIPART_BOUNDARY_MAX 70 /* RFC 2046 */
#define MULTIPART_MAX_PARTS 16
#define MULTIPART_MAX_HEADERS 8    /* per part */
#define MULTIPART_HEADER_BYTES 4096 /* per part, all header lines together */
#define MULTIPART_NAME_MAX 256     /* a field name or a file name */

struct multipart_part {
    char name[MULTIPART_NAME_MAX + 1];     /* the form field's name */
    char filename[MULTIPART_NAME_MAX + 1]; /* the file name, "" when the part is not a file */
    int has_filename;                      /* 1 when a filename parameter was given (even "") */
    char content_type[128];                /* the part's Content-Type, "" when none */
    const char *data;                      /* the part's bytes, inside the body */
    size_t len;
};

struct multipart_form {
    struct multipart_part parts[MULTIPART_MAX_PARTS];
    size_t count;
};

/* Takes the boundary out of a Content-Type header value (`multipart/form-data; boundary=…`, quoted
 * or not, 1..70 characters). `out` needs MULTIPART_BOUNDARY_MAX + 1 bytes. */
int multipart_boundary(const char *content_type, size_t len, char *out, struct whet_err *err);

/* Parses `body` into `form` (whose parts point into `body`). */
int multipart_parse(const char *body, size_t len, const char *boundary, struct multipart_form *form,
                    struct whet_err *err);

/* The part named `name`, or NULL. */
const struct multipart_part *multipart_get(const struct multipart_form *form, const char *name);

#endif
