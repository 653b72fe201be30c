/* Unit tests for common/: errors, files, environment files, crypto encodings, the RNG, buffers. */
#include <stdlib.h>
#include <unistd.h>

#include "buf.h"
#include "crypto.h"
#include "env.h"
#include "json.h"
#include "rng.h"
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

/* The sequences below were printed by the code each caller had before common/rng.h replaced it (the
 * trainer's and the simulator's xoshiro256**, SFT's splitmix64 shuffle, GRPO's seed mixer, the tiny
 * tokenizer's xorshift64). They must never change: training results and simulator runs follow them. */
TEST(rng_xoshiro_sequence_pinned) {
    static const uint64_t seed42[] = {0x15780b2e0c2ec716ull, 0x6104d9866d113a7eull, 0xae17533239e499a1ull,
                                      0xecb8ad4703b360a1ull};
    struct rng r;
    rng_seed(&r, 42);
    for (size_t i = 0; i < WHET_ARRAY_LEN(seed42); i++) CHECK(rng_u64(&r) == seed42[i]);
    rng_seed(&r, 0);
    CHECK(rng_u64(&r) == 0x99ec5f36cb75f2b4ull);
    CHECK(rng_u64(&r) == 0xbf6e1f784956452aull);
    rng_seed(&r, 7);
    CHECK(rng_uniform(&r) == 0.7005764245986938f); /* 24 bits scaled by 2^-24: exact */
    CHECK_NEAR(rng_normal(&r), 0.8533023, 1e-6);   /* through libm's log and cos */
    CHECK(rng_below(&r, 1000) == 664);
    static const uint64_t below9[] = {0, 5, 7, 6, 7, 8}; /* the simulator's draws */
    rng_seed(&r, 9);
    for (size_t i = 0; i < WHET_ARRAY_LEN(below9); i++) CHECK(rng_below(&r, 10) == below9[i]);
}

TEST(rng_mixers_pinned) {
    uint64_t state = 123 ^ (0xd1b54a32d192ed03ull * 3); /* SFT's shuffle state for seed 123, epoch 2 */
    CHECK(rng_splitmix64(&state) == 0xf2e84f72f363b267ull);
    CHECK(rng_splitmix64(&state) == 0x46d20603f0170a95ull);
    CHECK(rng_splitmix64(&state) == 0x926cd7f3d7f68d55ull);
    CHECK(rng_mix64(5 + RNG_GOLDEN * 1) == 0x63033b0ca389c35aull); /* GRPO's mix(5, 0) */
    CHECK(rng_mix64(5 + RNG_GOLDEN * 8) == 0x82d78c130699ef2bull); /* and mix(5, 7) */
    uint64_t x = RNG_GOLDEN;
    CHECK(rng_xorshift64(&x) == 0xdc1b77ae0bf34dadull);
    CHECK(rng_xorshift64(&x) == 0x64f0eeb9026e6076ull);
    CHECK(rng_xorshift64(&x) == 0x7b07ce91e5906136ull);
    CHECK(x == 0x7b07ce91e5906136ull);
}

TEST(json_error_names_file_line_and_column) {
    json_error_t jerr;
    CHECK(json_loads("{\"a\": 1,\n  \"b\": }", 0, &jerr) == NULL);
    struct whet_err err;
    CHECK(whet_json_errf(&err, "job.json", &jerr) == -1);
    CHECK_CONTAINS(err.msg, "job.json: line 2: not valid JSON at column ");
    CHECK(whet_json_errf(&err, NULL, &jerr) == -1); /* one JSON Lines line: its reader adds "PATH: line N" */
    CHECK(strncmp(err.msg, "not valid JSON at column ", 25) == 0);
    CHECK(whet_json_load_file("/nonexistent/whet.json", 0, &err) == NULL);
    CHECK_CONTAINS(err.msg, "/nonexistent/whet.json: unable to open");
    CHECK(strstr(err.msg, "line -1") == NULL);
}

TEST(buf_grows_and_stays_terminated) {
    struct whet_buf b = {0};
    CHECK(b.data == NULL && b.len == 0);
    whet_buf_append(&b, "", 0); /* an empty text is still a C string */
    CHECK(b.data && b.data[0] == 0 && b.len == 0);
    char chunk[100];
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 50; i++) whet_buf_append(&b, chunk, sizeof chunk); /* 5000 bytes: many doublings */
    CHECK(b.len == 5000 && b.cap > b.len && b.data[b.len] == 0);
    CHECK(b.data[0] == 'x' && b.data[4999] == 'x');
    size_t cap = b.cap;
    whet_buf_reserve(&b, cap - b.len - 1); /* fits exactly, NUL included: no growth */
    CHECK(b.cap == cap);
    whet_buf_free(&b);
    CHECK(b.data == NULL && b.len == 0 && b.cap == 0);
    whet_buf_puts(&b, "step");
    for (int i = 0; i < 300; i++) whet_buf_printf(&b, ",%d", i); /* grows from inside printf */
    CHECK(b.len == strlen(b.data));
    CHECK(strncmp(b.data, "step,0,1,2,", 11) == 0);
    CHECK(strcmp(b.data + b.len - 4, ",299") == 0);
    whet_buf_free(&b);
    whet_buf_printf(&b, "%s", ""); /* a first printf on an empty buffer */
    CHECK(b.data && b.len == 0 && b.data[0] == 0);
    whet_buf_free(&b);
}

int main(void) {
    RUN(err_prefix_keeps_message);
    RUN(sha256_known_vector);
    RUN(base64url_no_padding);
    RUN(random_id_shape);
    RUN(env_file_does_not_override);
    RUN(read_file_limit);
    RUN(rng_xoshiro_sequence_pinned);
    RUN(rng_mixers_pinned);
    RUN(json_error_names_file_line_and_column);
    RUN(buf_grows_and_stays_terminated);
    return test_summary();
}
