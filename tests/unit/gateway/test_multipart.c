/* test_multipart.c - the multipart/form-data parser: what curl and the OpenAI SDK send parses into the
 * right fields and bytes; every malformed shape is refused with a message that says what. */
#include <stdlib.h>
#include <string.h>

#include "multipart.h"
#include "test.h"

#define B "----formdata-undici-0123456789"

static const char *boundary_error(const char *ct) {
    static struct whet_err err;
    char out[MULTIPART_BOUNDARY_MAX + 1];
    err.msg[0] = 0;
    if (multipart_boundary(ct, strlen(ct), out, &err) == 0) return "";
    return err.msg;
}

/* Parses `body` with boundary B; returns the error message ("" on success). */
static const char *parse_error(const char *body, size_t len, struct multipart_form *form) {
    static struct whet_err err;
    err.msg[0] = 0;
    if (multipart_parse(body, len, B, form, &err) == 0) return "";
    return err.msg;
}

TEST(boundary_from_content_type) {
    char out[MULTIPART_BOUNDARY_MAX + 1];
    const char *ct = "multipart/form-data; boundary=" B;
    CHECK(multipart_boundary(ct, strlen(ct), out, NULL) == 0);
    CHECK_STR(out, B);
    ct = "Multipart/Form-Data;boundary=\"a b'c\"; charset=utf-8";
    CHECK(multipart_boundary(ct, strlen(ct), out, NULL) == 0);
    CHECK_STR(out, "a b'c");
    CHECK_STR(boundary_error("application/json"), "expected Content-Type multipart/form-data");
    CHECK_STR(boundary_error("multipart/form-data"), "Content-Type: missing boundary parameter");
    CHECK_STR(boundary_error("multipart/form-data; boundary=\"\""), "Content-Type: boundary must have 1 to 70 characters");
    CHECK_STR(boundary_error("multipart/form-data; boundary=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
              "Content-Type: boundary must have 1 to 70 characters");
    CHECK_STR(boundary_error("multipart/form-data; boundary=\"ab<c\""), "Content-Type: invalid character in boundary");
    CHECK_STR(boundary_error("multipart/form-data; boundary=a; boundary=b"), "Content-Type: parameter boundary given twice");
    CHECK_STR(boundary_error("multipart/form-data; boundary=\"abc"), "Content-Type: parameter boundary: unterminated quoted string");
}

TEST(parses_an_sdk_upload) {
    /* The body Node's FormData writes for openai.files.create({file, purpose}). */
    static const char body[] =
        "--" B "\r\n"
        "Content-Disposition: form-data; name=\"purpose\"\r\n\r\n"
        "fine-tune\r\n"
        "--" B "\r\n"
        "Content-Disposition: form-data; name=\"file\"; filename=\"train \\\"v2\\\".jsonl\"\r\n"
        "Content-Type: application/jsonl\r\n\r\n"
        "{\"a\":1}\r\n{\"b\":\"--" B "x\"}\n"
        "\r\n--" B "--\r\n";
    struct multipart_form form;
    CHECK_STR(parse_error(body, sizeof body - 1, &form), "");
    CHECK(form.count == 2);
    const struct multipart_part *purpose = multipart_get(&form, "purpose");
    CHECK(purpose && purpose->len == 9 && memcmp(purpose->data, "fine-tune", 9) == 0);
    CHECK(purpose && !purpose->has_filename);
    const struct multipart_part *file = multipart_get(&form, "file");
    CHECK(file && file->has_filename);
    if (file) {
        CHECK_STR(file->filename, "train \"v2\".jsonl");
        CHECK_STR(file->content_type, "application/jsonl");
        /* The boundary text inside the data (without a leading CRLF) is data. */
        const char *want = "{\"a\":1}\r\n{\"b\":\"--" B "x\"}\n";
        CHECK(file->len == strlen(want) && memcmp(file->data, want, file->len) == 0);
    }
    CHECK(multipart_get(&form, "nope") == NULL);
}

TEST(empty_part_and_binary_data) {
    char body[256];
    size_t n = 0;
    n += (size_t)sprintf(body + n, "--" B "\r\nContent-Disposition: form-data; name=file; filename=\"\"\r\n\r\n");
    memcpy(body + n, "\0\r\n\0", 4);
    n += 4;
    n += (size_t)sprintf(body + n, "\r\n--" B "\r\ncontent-disposition: FORM-DATA; name=\"empty\"\r\n\r\n\r\n--" B "--");
    struct multipart_form form;
    CHECK_STR(parse_error(body, n, &form), "");
    CHECK(form.count == 2);
    CHECK(form.parts[0].has_filename && form.parts[0].filename[0] == 0);
    CHECK(form.parts[0].len == 4 && memcmp(form.parts[0].data, "\0\r\n\0", 4) == 0);
    CHECK(form.parts[1].len == 0);
}

static const char *parse_str(const char *body) {
    struct multipart_form form;
    return parse_error(body, strlen(body), &form);
}

TEST(refuses_malformed_bodies) {
    CHECK_STR(parse_str("preamble\r\n--" B "\r\n"), "body does not start with the boundary");
    CHECK_STR(parse_str("--" B "\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nxx"),
              "part 1: no closing boundary (truncated body?)");
    CHECK_STR(parse_str("--" B "\r\nContent-Type: text/plain\r\n\r\nxx\r\n--" B "--"),
              "part 1: missing Content-Disposition header");
    CHECK_STR(parse_str("--" B "\r\n\r\nxx\r\n--" B "--"), "part 1: missing Content-Disposition header");
    CHECK_STR(parse_str("--" B "\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nxx\r\n--" B "--"),
              "part 1: Content-Disposition: expected form-data");
    CHECK_STR(parse_str("--" B "\r\nContent-Disposition: form-data; filename=\"a\"\r\n\r\nxx\r\n--" B "--"),
              "part 1: Content-Disposition: missing name parameter");
    CHECK_STR(parse_str("--" B "\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--" B
                        "\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\ny\r\n--" B "--"),
              "part 2: field \"a\" given twice");
    CHECK_STR(parse_str("--" B "\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--" B "--junk"),
              "data after the closing boundary");
    CHECK_STR(parse_str("--" B "\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--" B "xx"),
              "part 2: expected CRLF after the boundary");
    CHECK_STR(parse_str("--" B "\r\nContent-Disposition: form-data; name=\"a\"\r\n X: y\r\n\r\nx\r\n--" B "--"),
              "part 1: folded header lines are not allowed");
    CHECK_STR(parse_str("--" B "\r\nContent-Disposition: form-data; name=\"a\"\nX: y\r\n\r\nx\r\n--" B "--"),
              "part 1: control character in a header");
    CHECK_STR(parse_str("--" B "\r\nContent-Disposition: form-data; name=\"a\r\n\r\nx\r\n--" B "--"),
              "part 1: Content-Disposition: parameter name: unterminated quoted string");
    CHECK_STR(parse_str("--" B "\r\nContent-Disposition: form-data; name=\"a\"; filename*=UTF-8''x\r\n\r\nx\r\n--" B "--"),
              "part 1: Content-Disposition: filename* is not supported in form data (RFC 7578)");
    CHECK_STR(parse_str("--" B "\r\nContent-Disposition: form-data; name=\"a\"\r\nbad header\r\n\r\nx\r\n--" B "--"),
              "part 1: malformed header line");
}

TEST(bounds) {
    /* Too many parts. */
    char *body = xstrdup("");
    for (int i = 0; i <= MULTIPART_MAX_PARTS; i++) {
        char *next = xasprintf("%s--" B "\r\nContent-Disposition: form-data; name=\"f%d\"\r\n\r\nv\r\n", body, i);
        free(body);
        body = next;
    }
    char *closed = xasprintf("%s--" B "--", body);
    /* The parts above end with CRLF, so each next delimiter starts right after the data's CRLF. */
    CHECK_STR(parse_str(closed), "more than 16 parts");
    free(closed);
    free(body);

    /* Headers longer than the limit. */
    char *long_value = malloc(MULTIPART_HEADER_BYTES + 10);
    memset(long_value, 'x', MULTIPART_HEADER_BYTES + 9);
    long_value[MULTIPART_HEADER_BYTES + 9] = 0;
    body = xasprintf("--" B "\r\nContent-Disposition: form-data; name=\"a\"\r\nX-Pad: %s\r\n\r\nv\r\n--" B "--", long_value);
    CHECK_STR(parse_str(body), "part 1: headers longer than 4096 bytes");
    free(body);
    free(long_value);

    /* Too many headers. */
    body = xstrdup("--" B "\r\nContent-Disposition: form-data; name=\"a\"\r\n");
    for (int i = 0; i < MULTIPART_MAX_HEADERS; i++) {
        char *next = xasprintf("%sX-%d: y\r\n", body, i);
        free(body);
        body = next;
    }
    char *full = xasprintf("%s\r\nv\r\n--" B "--", body);
    CHECK_STR(parse_str(full), "part 1: more than 8 headers");
    free(full);
    free(body);

    /* A file name longer than the limit. */
    char name[MULTIPART_NAME_MAX + 2];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = 0;
    body = xasprintf("--" B "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n\r\nv\r\n--" B "--", name);
    CHECK_STR(parse_str(body), "part 1: Content-Disposition: parameter filename: longer than 256 bytes");
    free(body);
}

int main(void) {
    RUN(boundary_from_content_type);
    RUN(parses_an_sdk_upload);
    RUN(empty_part_and_binary_data);
    RUN(refuses_malformed_bodies);
    RUN(bounds);
    return test_summary();
}
