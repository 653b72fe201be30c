/* Unit tests for common/: errors, files, environment files, crypto encodings, the RNG, buffers, UTF-8. */
#include <stdlib.h>
#include <unistd.h>

#include "buf.h"
#include "crypto.h"
#include "env.h"
#include "json.h"
#include "rng.h"
#include "test.h"
#include "utf8.h"
#include "util.h"

TEST(err_prefix_keeps_message) {
    struct whet_err err;
    CHECK(whet_errf(&err, "line %d: bad", 3) == -1);
    whet_err_prefix(&err, "train.jsonl");
    CHECK_STR(err.msg, "train.jsonl: line 3: bad");
}

TEST(err_parts_compose_into_one_line) {
    struct whet_err err;
    char text[3 * WHET_ERR_MAX];
    whet_errf(&err, "cannot listen on %s", "127.0.0.1:80");
    CHECK(whet_err_hint(&err, "pick another address with --%s", "http") == -1);
    CHECK_STR(err.msg, "cannot listen on 127.0.0.1:80"); /* the primary message stays apart */
    CHECK_STR(err.hint, "pick another address with --http");
    CHECK_STR(whet_err_text(&err, text, sizeof text),
              "cannot listen on 127.0.0.1:80; hint: pick another address with --http");
    whet_err_detail(&err, "Port 80 is taken by pid %d.", 42);
    whet_err_prefix(&err, "gateway"); /* a prefix goes on the primary message only */
    CHECK_STR(whet_err_text(&err, text, sizeof text),
              "gateway: cannot listen on 127.0.0.1:80; Port 80 is taken by pid 42.; "
              "hint: pick another address with --http");
    whet_errf(&err, "fresh"); /* a new error clears the parts of the old one */
    CHECK_STR(whet_err_text(&err, text, sizeof text), "fresh");
    CHECK(whet_err_hint(NULL, "x") == -1); /* no error wanted: no crash */
    /* Parts cut to fit their bound, and the composed text cut to its buffer, end on a whole character. */
    char big[2 * WHET_ERR_MAX];
    for (size_t i = 0; i + 2 < sizeof big; i += 2) memcpy(big + i, "\xc3\xa9", 2); /* é, 2 bytes each */
    big[sizeof big - 2] = 0;
    whet_errf(&err, "%s", big); /* 511 bytes fit: the cut falls inside an é */
    CHECK(strlen(err.msg) == WHET_ERR_MAX - 2 && utf8_valid(err.msg, strlen(err.msg)));
    char small[8];
    whet_err_text(&err, small, sizeof small);
    CHECK(strlen(small) == 6 && utf8_valid(small, 6));
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

TEST(utf8_seq_len_follows_table_3_7) {
    CHECK(utf8_seq_len((const unsigned char *)"A", 1) == 1);
    CHECK(utf8_seq_len((const unsigned char *)"\xc3\xa9", 2) == 2);
    CHECK(utf8_seq_len((const unsigned char *)"\xe2\x82\xac", 3) == 3);
    CHECK(utf8_seq_len((const unsigned char *)"\xf4\x8f\xbf\xbf", 4) == 4);  /* U+10FFFF, the last */
    CHECK(utf8_seq_len((const unsigned char *)"\xe2\x82\xac", 2) == 0);      /* cut off by len */
    CHECK(utf8_seq_len((const unsigned char *)"\xc0\xaf", 2) == 0);          /* overlong '/' */
    CHECK(utf8_seq_len((const unsigned char *)"\xe0\x80\xaf", 3) == 0);      /* overlong, 3 bytes */
    CHECK(utf8_seq_len((const unsigned char *)"\xed\xa0\x80", 3) == 0);      /* a surrogate */
    CHECK(utf8_seq_len((const unsigned char *)"\xf4\x90\x80\x80", 4) == 0); /* past U+10FFFF */
    CHECK(utf8_seq_len((const unsigned char *)"\x80", 1) == 0);              /* a stray continuation */
    CHECK(utf8_valid("caf\xc3\xa9 \xf0\x9f\x98\x80", 10));
    CHECK(!utf8_valid("caf\xc3", 4));
    CHECK(utf8_valid("", 0));
    uint32_t cp;
    CHECK(utf8_decode((const unsigned char *)"\xf0\x9f\x98\x80", 4, &cp) == 4 && cp == 0x1f600);
    char enc[4];
    CHECK(utf8_encode(0x20ac, enc) == 3 && memcmp(enc, "\xe2\x82\xac", 3) == 0);
    CHECK(utf8_encode(0x1f600, enc) == 4 && memcmp(enc, "\xf0\x9f\x98\x80", 4) == 0);
}

/* Expected outputs printed by the tokenizer's own repair before it moved here: transformers.js
 * decodes the same way, and token ids follow the repaired text. */
TEST(utf8_repair_matches_the_whatwg_decoder) {
    static const struct {
        const char *in;
        size_t len;
        int valid;
        const char *out;
    } cases[] = {
        {"\x61\xc3\xa9\x7a", 4, 1, ""}, /* valid: "aéz" */
        {"\xe2\x82\xac", 3, 1, ""}, /* valid: € */
        {"\xf0\x9f\x98\x80", 4, 1, ""}, /* valid: an emoji */
        {"\xe2\x82\x41", 3, 0, "\xef\xbf\xbd\x41"}, /* a cut € before "A": one U+FFFD */
        {"\xc0\xaf", 2, 0, "\xef\xbf\xbd\xef\xbf\xbd"}, /* an overlong "/": C0 starts nothing */
        {"\xed\xa0\x80", 3, 0, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* a surrogate: ED A0 is no prefix */
        {"\xf4\x90\x80\x80", 4, 0, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* past U+10FFFF */
        {"\xf0\x9f\x98", 3, 0, "\xef\xbf\xbd"}, /* an emoji cut at the end */
        {"\xe0\x80\xaf", 3, 0, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* an overlong in 3 bytes */
        {"\xff\x62", 2, 0, "\xef\xbf\xbd\x62"}, /* FF is never UTF-8 */
        {"\x80\x80", 2, 0, "\xef\xbf\xbd\xef\xbf\xbd"}, /* stray continuation bytes */
        {"\xf0\x90\x80\xe2", 4, 0, "\xef\xbf\xbd\xef\xbf\xbd"}, /* a cut sequence, then a cut lead */
        {"\x6f\x6b\xe2\x82", 4, 0, "\x6f\x6b\xef\xbf\xbd"}, /* text, then a cut € */
    };
    struct whet_buf out = {0};
    for (size_t i = 0; i < WHET_ARRAY_LEN(cases); i++) {
        int valid = utf8_repair(cases[i].in, cases[i].len, &out);
        CHECK_MSG(valid == cases[i].valid, "case %zu", i);
        if (!valid)
            CHECK_MSG(out.len == strlen(cases[i].out) && !memcmp(out.data, cases[i].out, out.len), "case %zu", i);
    }
    /* 200000 random short strings, biased to continuation and lead bytes, hashed (FNV-1a) together
     * with their validity and repair: the same digest the old code gave. */
    uint64_t x = 12345, h = 1469598103934665603ull;
    unsigned char buf[16];
    for (int it = 0; it < 200000; it++) {
        size_t n = 1 + (x % 15);
        for (size_t i = 0; i < n; i++) {
            unsigned v = (unsigned)(rng_xorshift64(&x) >> 24) & 0xff;
            buf[i] = (unsigned char)(v < 0x40 ? 0x80 + (v & 0x3f) : v < 0x60 ? 'a' : v);
        }
        out.len = 0;
        int valid = utf8_repair((const char *)buf, n, &out);
        h = (h ^ (uint64_t)valid) * 1099511628211ull;
        for (size_t i = 0; !valid && i < out.len; i++) h = (h ^ (unsigned char)out.data[i]) * 1099511628211ull;
        h = (h ^ 0xff) * 1099511628211ull;
    }
    CHECK(h == 0x2997a639439f8136ull);
    whet_buf_free(&out);
}

TEST(utf8_trim_incomplete_cuts_only_a_cut_sequence) {
    char s[16];
    strcpy(s, "ab\xe2\x82");
    CHECK(utf8_trim_incomplete(s, strlen(s)) == 2 && strcmp(s, "ab") == 0);
    strcpy(s, "ab\xe2\x82\xac");
    CHECK(utf8_trim_incomplete(s, strlen(s)) == 5 && strcmp(s, "ab\xe2\x82\xac") == 0);
    strcpy(s, "abc");
    CHECK(utf8_trim_incomplete(s, 3) == 3);
}

TEST(rm_rf_removes_a_tree_but_not_what_links_point_to) {
    char base[] = "/tmp/whet-rmrf-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char *tree = xasprintf("%s/tree", base), *deep = xasprintf("%s/tree/a/b", base);
    char *file = xasprintf("%s/tree/a/b/f.txt", base), *kept = xasprintf("%s/kept.txt", base);
    char *link = xasprintf("%s/tree/link", base);
    struct whet_err err;
    CHECK(whet_mkdir_p(deep, &err) == 0);
    CHECK(whet_write_file_atomic(file, "x", 1, &err) == 0);
    CHECK(whet_write_file_atomic(kept, "y", 1, &err) == 0);
    CHECK(symlink(base, link) == 0); /* a link back up: following it would delete kept.txt */
    CHECK(whet_rm_rf(tree) == 0);
    CHECK(access(tree, F_OK) != 0);
    CHECK(access(kept, F_OK) == 0);
    CHECK(whet_rm_rf(tree) == 0); /* gone already: no error */
    CHECK(whet_rm_rf(base) == 0);
    CHECK(access(base, F_OK) != 0);
    free(tree), free(deep), free(file), free(kept), free(link);
}

int main(void) {
    RUN(err_prefix_keeps_message);
    RUN(err_parts_compose_into_one_line);
    RUN(sha256_known_vector);
    RUN(base64url_no_padding);
    RUN(random_id_shape);
    RUN(env_file_does_not_override);
    RUN(read_file_limit);
    RUN(rng_xoshiro_sequence_pinned);
    RUN(rng_mixers_pinned);
    RUN(json_error_names_file_line_and_column);
    RUN(buf_grows_and_stays_terminated);
    RUN(utf8_seq_len_follows_table_3_7);
    RUN(utf8_repair_matches_the_whatwg_decoder);
    RUN(utf8_trim_incomplete_cuts_only_a_cut_sequence);
    RUN(rm_rf_removes_a_tree_but_not_what_links_point_to);
    return test_summary();
}
