/* Unit tests for common/json_text: the shortest form of a real (exact text for known values; for many
 * others, that it reads back as the same double with no fewer digits possible), the compact writer
 * (jansson's bytes for everything but reals, which read back exactly), and a byte-order mark skipped
 * before a JSON Lines file's first line only. */
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "json.h"
#include "json_text.h"
#include "test.h"

static void real_is(double v, const char *want) {
    char buf[WHET_JSON_REAL_MAX];
    int n = whet_json_real(v, buf);
    CHECK_MSG(n >= 0 && (size_t)n == strlen(buf) && !strcmp(buf, want), "%.17g: got \"%s\", want \"%s\"", v, buf, want);
}

TEST(real_known_values) {
    real_is(8.601, "8.601");
    real_is(0.1, "0.1");
    real_is(0.1 + 0.2, "0.30000000000000004"); /* 17 digits when nothing shorter reads back */
    real_is(1e-7, "1e-7");
    real_is(1e300, "1e300");
    real_is(1.5e300, "1.5e300");
    real_is(5e-324, "5e-324"); /* the smallest subnormal: one digit, where %.15g would write 15 */
    real_is(3.0, "3.0");       /* a whole number stays a real */
    real_is(0.0, "0.0");
    real_is(-0.0, "-0.0");
    real_is(-2.5, "-2.5");
    real_is(1e22, "1e22");
    real_is(123456.0, "123456.0");
    real_is(DBL_MAX, "1.7976931348623157e308");
    real_is(DBL_MIN, "2.2250738585072014e-308");
    real_is(1.0 / 3.0, "0.3333333333333333");
    char buf[WHET_JSON_REAL_MAX];
    CHECK(whet_json_real(INFINITY, buf) == -1);
    CHECK(whet_json_real(-INFINITY, buf) == -1);
    CHECK(whet_json_real(NAN, buf) == -1);
}

/* Significant digits of a real's text: the mantissa without sign, point, leading or trailing zeros. */
static int significant_digits(const char *text) {
    char digits[WHET_JSON_REAL_MAX];
    int n = 0;
    for (const char *p = text; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && (n > 0 || *p != '0')) digits[n++] = *p;
    while (n > 0 && digits[n - 1] == '0') n--;
    return n > 0 ? n : 1;
}

TEST(real_reads_back_and_is_shortest) {
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int failures = 0;
    for (int i = 0; i < 20000 && failures < 5; i++) {
        /* Bit patterns of every exponent (subnormals included), and everyday values: sums, thirds. */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double v;
        if (i % 2) {
            memcpy(&v, &x, sizeof v);
            if (!isfinite(v)) continue;
        } else {
            v = (double)(i % 1000) / 7.0 + (double)(i / 1000) * 0.1;
        }
        char buf[WHET_JSON_REAL_MAX], shorter[400]; /* %g of a huge value with a huge precision, as far as gcc knows */
        int n = whet_json_real(v, buf);
        int digits = significant_digits(buf);
        snprintf(shorter, sizeof shorter, "%.*g", digits - 1, v);
        int ok = n > 0 && strtod(buf, NULL) == v && (digits == 1 || strtod(shorter, NULL) != v);
        json_t *back = json_loads(buf, JSON_DECODE_ANY, NULL);
        ok = ok && json_is_real(back) && json_real_value(back) == v;
        json_decref(back);
        CHECK_MSG(ok, "%.17g written as \"%s\"", v, buf);
        failures += !ok;
    }
}

/* Without reals, the compact writer's text is json_dumps(JSON_COMPACT)'s, byte for byte. */
static void compact_matches_jansson(json_t *v) {
    size_t len = 0;
    char *mine = whet_json_compact(v, &len), *theirs = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    CHECK(mine != NULL && theirs != NULL);
    if (mine && theirs) {
        CHECK_STR(mine, theirs);
        CHECK(len == strlen(theirs));
    }
    free(mine);
    free(theirs);
    json_decref(v);
}

TEST(compact_as_jansson_without_reals) {
    compact_matches_jansson(json_pack("{s:s, s:i, s:I, s:I, s:b, s:b, s:n, s:[], s:{}, s:[i, s, [n]]}", "id",
                                      "ftjob-abc", "small", -7, "big", (json_int_t)9007199254740993LL, "min",
                                      (json_int_t)(-9223372036854775807LL - 1), "t", 1, "f", 0, "none", "empty", "obj",
                                      "mixed", 0, "x", "tail"));
    compact_matches_jansson(json_pack("{s:s}", "escapes",
                                      "quote\" back\\ slash/ nl\n cr\r tab\t bs\b ff\f bell\x07 del\x7f "
                                      "unicode \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 end"));
    json_t *keys = json_object();
    json_object_set_new(keys, "z\"key\n", json_integer(1));
    json_object_set_new(keys, "a", json_integer(0));
    json_object_set_new(keys, "", json_string(""));
    compact_matches_jansson(keys);
    compact_matches_jansson(json_string("bare"));
    compact_matches_jansson(json_integer(0));
    CHECK(whet_json_compact(NULL, NULL) == NULL);
}

TEST(compact_writes_reals_shortest) {
    json_t *v = json_pack("{s:f, s:[f, f, f, f]}", "device_seconds", 8.601, "more", 0.1, 3.0, 1e-7, 5e-324);
    char *text = whet_json_compact(v, NULL);
    CHECK_STR(text, "{\"device_seconds\":8.601,\"more\":[0.1,3.0,1e-7,5e-324]}");
    free(text);
    json_decref(v);
    /* Many reals in a deep document read back as exactly the same values. */
    json_t *deep = json_array();
    for (int i = 0; i < 300; i++) json_array_append_new(deep, json_pack("{s:i, s:[i, f]}", "i", i, "v", i * i, i / 7.0));
    size_t len = 0;
    text = whet_json_compact(deep, &len);
    json_t *back = text ? json_loadb(text, len, 0, NULL) : NULL;
    CHECK(back && json_equal(back, deep));
    json_decref(back);
    free(text);
    json_decref(deep);
}

TEST(bom_skipped_only_at_the_start) {
    size_t len = 5;
    CHECK_STR(whet_json_skip_bom("\xEF\xBB\xBF{}", &len), "{}");
    CHECK(len == 2);
    len = 2;
    const char *text = "{}";
    CHECK(whet_json_skip_bom(text, &len) == text && len == 2);
    len = 2;
    text = "\xEF\xBB"; /* a part of one is not one */
    CHECK(whet_json_skip_bom(text, &len) == text && len == 2);
    len = 0;
    CHECK(whet_json_skip_bom("", &len) != NULL && len == 0);
}

struct seen {
    int n;
    char first[64];
    int second_len;
};

static int remember(void *ctx, const char *line, size_t len, int lineno, struct whet_err *err) {
    (void)err;
    struct seen *s = ctx;
    if (lineno == 1) snprintf(s->first, sizeof s->first, "%.*s", (int)len, line);
    if (lineno == 2) s->second_len = (int)len;
    s->n++;
    return 0;
}

/* The one reader of JSON Lines files (SFT, DPO, RFT and score data) skips a BOM before line 1, and
 * only there; CRLF line ends reach the parsers, which take "\r" as whitespace. */
TEST(jsonl_each_skips_a_leading_bom) {
    char path[] = "/tmp/whet-jsonl-bom-XXXXXX";
    int fd = mkstemp(path);
    const char text[] = "\xEF\xBB\xBF{\"a\":1}\r\n\xEF\xBB\xBF{}\r\n";
    CHECK(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
    close(fd);
    struct seen s = {0};
    struct whet_err err;
    int n_lines = 0;
    CHECK(whet_jsonl_each(path, remember, &s, &n_lines, &err) == 0);
    CHECK(s.n == 2 && n_lines == 2);
    CHECK_STR(s.first, "{\"a\":1}\r\n");
    CHECK(s.second_len == 3 + 2 + 2); /* a BOM on a later line is the line's own (and invalid JSON there) */
    unlink(path);
}

int main(void) {
    RUN(real_known_values);
    RUN(real_reads_back_and_is_shortest);
    RUN(compact_as_jansson_without_reals);
    RUN(compact_writes_reals_shortest);
    RUN(bom_skipped_only_at_the_start);
    RUN(jsonl_each_skips_a_leading_bom);
    return test_summary();
}
