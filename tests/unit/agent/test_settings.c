/* The executor's settings checked at its start (executor/agent/agent.c): a bad co-training pass bound
 * (WHET_COTRAIN_PASS_TOKENS, which the scheduler sizes groups by) or model cache bound
 * (--model-cache-max, WHET_MODEL_CACHE_MAX) stops it with the setting named, before it makes its work dir
 * or calls the scheduler; a good one gets past that check. */
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "test.h"

TEST(a_bad_pass_token_setting_stops_the_executor_at_start) {
    /* a work dir no one can make (under a file): the executor stops there at the latest, before it calls the
     * scheduler */
    struct executor_options o = {.scheduler = "127.0.0.1:1", .token = "t", .dc = "a", .pool = "a", .devices = "cpu:1",
                                 .work_dir = "/dev/null/whet-work", .object_store = "file:///dev/null/whet-store",
                                 .trainer = "/bin/true"};
    const char *bad[] = {"0", "-1", "abc", "1024x", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct whet_err err = {0};
        setenv("WHET_COTRAIN_PASS_TOKENS", bad[i], 1);
        CHECK(executor_run(&o, &err) == -1);
        CHECK_CONTAINS(err.msg, "WHET_COTRAIN_PASS_TOKENS");
        CHECK_CONTAINS(err.msg, bad[i]);
    }
    /* a good value passes the check: the executor goes on to its work dir */
    struct whet_err err = {0};
    setenv("WHET_COTRAIN_PASS_TOKENS", "512", 1);
    CHECK(executor_run(&o, &err) == -1);
    CHECK(!strstr(err.msg, "WHET_COTRAIN_PASS_TOKENS"));
    CHECK_CONTAINS(err.msg, "/dev/null/whet-work");
}

TEST(a_bad_model_cache_bound_stops_the_executor_at_start) {
    struct executor_options o = {.scheduler = "127.0.0.1:1",
                                 .token = "t",
                                 .dc = "a",
                                 .pool = "a",
                                 .devices = "cpu:1",
                                 .work_dir = "/dev/null/whet-work",
                                 .object_store = "file:///dev/null/whet-store",
                                 .trainer = "/bin/true"};
    setenv("WHET_COTRAIN_PASS_TOKENS", "512", 1);
    const char *bad[] = {"20X", "-1", "150%", "lots"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct whet_err err = {0};
        o.model_cache_max = bad[i];
        CHECK(executor_run(&o, &err) == -1);
        CHECK_CONTAINS(err.msg, "WHET_MODEL_CACHE_MAX");
        CHECK_CONTAINS(err.msg, bad[i]);
    }
    const char *good[] = {"20G", "50%", "0", NULL}; /* NULL: the default */
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        struct whet_err err = {0};
        o.model_cache_max = good[i];
        CHECK(executor_run(&o, &err) == -1);
        CHECK(!strstr(err.msg, "WHET_MODEL_CACHE_MAX"));
        CHECK_CONTAINS(err.msg, "/dev/null/whet-work");
    }
}

int main(void) {
    RUN(a_bad_pass_token_setting_stops_the_executor_at_start);
    RUN(a_bad_model_cache_bound_stops_the_executor_at_start);
    return test_summary();
}
