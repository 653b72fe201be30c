/* test_job_estimate.c - the estimate's numeric rounding (job_estimate.h), case by case as PostgreSQL's
 * round(x::numeric, s) answers them (psql: SELECT round(x::float8::numeric, s)), and one estimate's JSON.
 * tests/integration/api/estimate_sql.mjs compares whole estimates with whet_job_estimate's over a grid. */
#include <stdlib.h>

#include "buf.h"
#include "job_estimate.h"
#include "test.h"

static const char *rounded(double x, int scale) {
    static char buf[JOB_ESTIMATE_NUMERIC_MAX];
    job_estimate_round(x, scale, buf);
    return buf;
}

TEST(round_like_numeric) {
    CHECK_STR(rounded(0, 3), "0.000");
    CHECK_STR(rounded(1500, 3), "1500.000");
    CHECK_STR(rounded(1234.5678, 0), "1235");
    CHECK_STR(rounded(2.5, 0), "3"); /* half away from zero, not to even */
    CHECK_STR(rounded(-2.5, 0), "-3");
    CHECK_STR(rounded(0.0000005, 6), "0.000001");
    CHECK_STR(rounded(0.00000049, 6), "0.000000");
    CHECK_STR(rounded(-0.0000001, 6), "0.000000"); /* a rounded zero has no sign */
    CHECK_STR(rounded(999.9995, 3), "1000.000");   /* the carry through every digit */
    CHECK_STR(rounded(0.018419328, 6), "0.018419");
    CHECK_STR(rounded(1e20, 3), "100000000000000000000.000");
    /* 15 significant digits first: 0.1 + 0.2 is 0.30000000000000004, 0.3 once numeric */
    CHECK_STR(rounded(0.1 + 0.2, 17), "0.30000000000000000");
    CHECK_STR(rounded(1.0 / 3, 20), "0.33333333333333300000");
    CHECK_STR(rounded(123456789.123456789, 6), "123456789.123457");
}

TEST(estimate_json) {
    struct job_estimate_in in = {
        .method = "supervised",
        .epochs = 2,
        .batch = 3,
        .ppo_epochs = JOB_ESTIMATE_NULL,
        .tokenization = "{\"error\":\"x\"}",
        .count_examples = -1,
        .count_tokens = JOB_ESTIMATE_NULL,
        .count_prompt_tokens = JOB_ESTIMATE_NULL,
        .file_bytes = 1001,
        .file_lines = 10,
        .per_step = JOB_ESTIMATE_NULL,
        .sizing = NULL,
        .device = "A\"100",
        .device_source = "whet.gpu_types",
        .devices = 1,
        .rate = 1500.25,
        .rate_source = "model_device",
        .currency = "EUR",
        .device_hour = "2.5",
        .tokens_1m = "7",
    };
    struct whet_buf b = {0};
    CHECK(job_estimate_json(&in, &b) == 0);
    /* 8 steps of ceil(10 / 3); 250.25 tokens an epoch: 2 * 4 * 250.25 / 4 */
    CHECK_CONTAINS(b.data,
                   "\"training_examples\":10,\"n_epochs\":2,\"batch_size\":3,\"steps\":8,\"trained_tokens\":500,");
    CHECK_CONTAINS(b.data, "\"trained_tokens_source\":\"file_bytes\",\"tokenization\":{\"error\":\"x\"}");
    CHECK_CONTAINS(b.data, "\"tokens_per_device_s\":1500.250,");
    CHECK_CONTAINS(b.data, "\"line_items\":{\"device_hours:A\\\"100\":0.000232,\"trained_tokens\":0.003504}");
    CHECK_CONTAINS(b.data, "\"amount\":0.003735,");
    whet_buf_free(&b);
    in.rate = 0.0 / 0.0;
    CHECK(job_estimate_json(&in, &b) == -1 && b.len == 0);
    whet_buf_free(&b);
}

int main(void) {
    RUN(round_like_numeric);
    RUN(estimate_json);
    return test_summary();
}
