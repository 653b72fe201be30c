/* fuzz_gateway.c - libFuzzer entry for the gateway's parsers of untrusted bytes: the first byte picks
 * the parser, the rest is its input.
 *   0: the JSONL validator, fed in chunks whose size the second byte sets (so line splitting across
 *      chunk boundaries is exercised), in each expected format, and checked against the parallel
 *      path (slices of the same size), which must answer identically;
 *   1: multipart/form-data: the first line is the Content-Type header, the rest the body;
 *   2: a fine-tuning job request body, then "auto" resolution. */
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "job_request.h"
#include "multipart.h"
#include "validate.h"

static void fuzz_validate(const uint8_t *data, size_t size) {
    if (size < 1) return;
    size_t chunk = (size_t)data[0] + 1;
    enum validate_format expect = (enum validate_format)(data[0] % VALIDATE_FORMAT_COUNT);
    data++;
    size--;
    struct validate_limits limits = {.max_line_bytes = 4096, .max_lines = 64, .max_total_bytes = 1 << 20};
    struct validate_stream *s = validate_stream_new(expect, &limits);
    struct whet_err err;
    int rc = 0;
    for (size_t off = 0; off < size && rc == 0; off += chunk)
        rc = validate_stream_feed(s, data + off, off + chunk > size ? size - off : chunk, &err);
    struct validate_summary sum;
    if (rc == 0) rc = validate_stream_finish(s, &sum, &err);
    /* A valid file has as many lines of its format as lines. */
    if (rc == 0 && sum.per_format[sum.format] != sum.lines) __builtin_trap();
    validate_stream_free(s);
    /* The parallel path answers exactly as the stream did, errors included. */
    struct validate_summary psum;
    struct whet_err perr;
    int prc = validate_jsonl_parallel(data, size, expect, &limits, 3, chunk, &psum, &perr);
    if (prc != rc) __builtin_trap();
    if (rc == 0 && (psum.lines != sum.lines || psum.format != sum.format || psum.bytes != sum.bytes)) __builtin_trap();
    if (rc != 0 && strcmp(perr.msg, err.msg) != 0) __builtin_trap();
}

static void fuzz_multipart(const uint8_t *data, size_t size) {
    const uint8_t *nl = memchr(data, '\n', size);
    if (!nl) return;
    char boundary[MULTIPART_BOUNDARY_MAX + 1];
    struct whet_err err;
    if (multipart_boundary((const char *)data, (size_t)(nl - data), boundary, &err)) return;
    const char *body = (const char *)nl + 1;
    size_t len = size - (size_t)(nl + 1 - data);
    static struct multipart_form form;
    if (multipart_parse(body, len, boundary, &form, &err) == 0) {
        for (size_t i = 0; i < form.count; i++) {
            const struct multipart_part *p = &form.parts[i];
            /* Parts lie inside the body. */
            if (p->data < body || p->data + p->len > body + len) __builtin_trap();
            if (multipart_get(&form, p->name) != p) __builtin_trap();
        }
    }
}

static void fuzz_job_request(const uint8_t *data, size_t size) {
    json_t *body = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!body) return;
    struct job_request req;
    char param[JOB_PARAM_MAX];
    struct whet_err err;
    if (job_request_parse(body, &req, param, &err) == 0) {
        job_request_resolve_auto(&req, size);
        job_request_free(&req);
    }
    json_decref(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    switch (data[0] % 3) {
    case 0: fuzz_validate(data + 1, size - 1); break;
    case 1: fuzz_multipart(data + 1, size - 1); break;
    default: fuzz_job_request(data + 1, size - 1); break;
    }
    return 0;
}
