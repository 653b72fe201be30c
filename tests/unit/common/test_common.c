/* Unit tests for common/: errors, files, environment files, crypto encodings. */
#include <stdlib.h>
#include <unistd.h>

#include "crypto.h"
#include "env.h"
#include "test.h"
#include "util.h"

TEST(err_prefix_keeps_message) {
    struct whet_err err;
    CHECK(whet_errf(&err, "line %d: bad", 3) == -1);
    whet_err_prefix(&err, "train.jsonl");
    CHECK_STR(err.msg, "train.jsonl: line 3: bad");
}

TEST(sha256_known_vector) {
    char hex[65];
    whet_sha256_hex("abc", 3, hex);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(base64url_no_padding) {
    char out[16];
    CHECK(whet_base64url_encode((const uint8_t *)"\xfb\xff", 2, out) == 3);
    CHECK_STR(out, "-_8");
    whet_base64url_encode((const uint8_t *)"abc", 3, out);
    CHECK_STR(out, "YWJj");
}

TEST(random_id_shape) {
    char a[32], b[32];
    whet_random_id("ftjob-", 24, a);
    whet_random_id("ftjob-", 24, b);
    CHECK(strlen(a) == 30);
    CHECK(strncmp(a, "ftjob-", 6) == 0);
    CHECK(strcmp(a, b) != 0);
}

TEST(env_file_does_not_override) {
    char dir[] = "/tmp/whet-env-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *path = xasprintf("%s/whet.env", dir);
    struct whet_err err;
    const char *text = "# comment\nWHET_TEST_A=from-file\n\nWHET_TEST_B=x=y\n";
    CHECK(whet_write_file_atomic(path, text, strlen(text), &err) == 0);
    setenv("WHET_TEST_A", "from-env", 1);
    unsetenv("WHET_TEST_B");
    CHECK(whet_env_load_data_dir(dir, &err) == 0);
    CHECK_STR(whet_env("WHET_TEST_A", NULL), "from-env");
    CHECK_STR(whet_env("WHET_TEST_B", NULL), "x=y");
    const char *bad = "NOEQUALS\n";
    CHECK(whet_write_file_atomic(path, bad, strlen(bad), &err) == 0);
    CHECK(whet_env_load(path, 0, &err) == -1);
    CHECK_CONTAINS(err.msg, ":1: expected KEY=VALUE");
    unlink(path);
    rmdir(dir);
    free(path);
}

TEST(read_file_limit) {
    struct whet_err err;
    char *buf;
    size_t len;
    CHECK(whet_read_file("/etc/hostname", 1, &buf, &len, &err) == -1 || len <= 1);
    CHECK(whet_read_file("/nonexistent/x", 100, &buf, &len, &err) == -1);
    CHECK_CONTAINS(err.msg, "/nonexistent/x");
}

int main(void) {
    RUN(err_prefix_keeps_message);
    RUN(sha256_known_vector);
    RUN(base64url_no_padding);
    RUN(random_id_shape);
    RUN(env_file_does_not_override);
    RUN(read_file_limit);
    return test_summary();
}
