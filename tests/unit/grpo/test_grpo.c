/* GRPO math (grpo.h) against PyTorch: advantages, the clipped policy loss with the k3 KL, its gradient
 * with respect to the policy log-probs for each aggregation mode, clip fraction and KL, from
 * tests/fixtures/grpo/reference.json (make_grpo_reference.py); plus cases worked by hand, and the
 * loss without a reference (kl_coef 0) equal bit for bit to the one with a reference and kl_coef 0. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "grpo.h"
#include "test.h"

static json_t *fixture;

static double num(const json_t *obj, const char *key) {
    return json_number_value(json_object_get(obj, key));
}

static void load_fixture(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/grpo/reference.json", getenv("WHET_FIXTURES") ? getenv("WHET_FIXTURES") : "tests/fixtures");
    json_error_t jerr;
    fixture = json_load_file(path, 0, &jerr);
    if (!fixture) {
        fprintf(stderr, "%s: %s\n", path, jerr.text);
        exit(1);
    }
}

TEST(advantages_match_torch) {
    json_t *rw = json_object_get(fixture, "rewards"), *adv = json_object_get(fixture, "advantages");
    int n = (int)json_array_size(rw), G = (int)num(fixture, "group_size");
    double *r = malloc(sizeof(double) * n), *a = malloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) r[i] = json_number_value(json_array_get(rw, i));
    grpo_advantages(a, r, n / G, G, 1);
    for (int i = 0; i < n; i++) CHECK_NEAR(a[i], json_number_value(json_array_get(json_object_get(adv, "std"), i)), 1e-9);
    grpo_advantages(a, r, n / G, G, 0);
    for (int i = 0; i < n; i++)
        CHECK_NEAR(a[i], json_number_value(json_array_get(json_object_get(adv, "no_std"), i)), 1e-12);
    double single[2] = {0.7, 0.2};
    grpo_advantages(a, single, 2, 1, 1);
    for (int i = 0; i < 2; i++)
        CHECK_NEAR(a[i], json_number_value(json_array_get(json_object_get(adv, "single"), i)), 1e-12);
    free(r);
    free(a);
}

TEST(advantages_by_hand) {
    /* An all-equal group teaches nothing: zeros, with or without the std division. */
    double r[8] = {1, 1, 1, 1, 0, 1, 0, 1}, a[8];
    grpo_advantages(a, r, 2, 4, 1);
    for (int i = 0; i < 4; i++) CHECK(a[i] == 0);
    /* {0, 1, 0, 1}: mean 0.5, unbiased std sqrt(1/3): ±0.5·sqrt(3) */
    CHECK_NEAR(a[4], -0.5 * sqrt(3.0) / (1 + 1e-6 * sqrt(3.0)), 1e-12);
    CHECK_NEAR(a[5], 0.5 * sqrt(3.0) / (1 + 1e-6 * sqrt(3.0)), 1e-12);
    grpo_advantages(a, r, 2, 4, 0); /* Dr. GRPO: r − mean */
    CHECK(a[0] == 0 && a[4] == -0.5 && a[5] == 0.5);
    int keep[2];
    CHECK(grpo_filter_groups(keep, r, 2, 4) == 1);
    CHECK(keep[0] == 0 && keep[1] == 1);
}

TEST(token_coefficients) {
    CHECK_NEAR(grpo_token_coef(GRPO_TOKEN_MEAN, 3, 20, 4), 1.0 / 20, 1e-15);
    CHECK_NEAR(grpo_token_coef(GRPO_SEQ_MEAN_TOKEN_MEAN, 5, 20, 4), 1.0 / 20, 1e-15);
    CHECK_NEAR(grpo_token_coef(GRPO_SEQ_MEAN_TOKEN_MEAN, 2, 20, 4), 1.0 / 8, 1e-15);
    CHECK_NEAR(grpo_token_coef(GRPO_SEQ_MEAN_TOKEN_SUM, 2, 20, 4), 1.0 / 4, 1e-15);
    enum grpo_loss_agg agg;
    CHECK(grpo_loss_agg_parse("seq-mean-token-mean", &agg) == 0 && agg == GRPO_SEQ_MEAN_TOKEN_MEAN);
    CHECK(grpo_loss_agg_parse("token-sum", &agg) == -1);
    CHECK_STR(grpo_loss_agg_name(GRPO_SEQ_MEAN_TOKEN_SUM), "seq-mean-token-sum");
}

static void row(float *out, const json_t *matrix, int i, int n) {
    for (int t = 0; t < n; t++) out[t] = (float)json_number_value(json_array_get(json_array_get(matrix, i), t));
}

TEST(loss_and_gradient_match_torch) {
    struct grpo_loss_opts o = {num(fixture, "clip_ratio_low"), num(fixture, "clip_ratio_high"), num(fixture, "clip_ratio_c"),
                               num(fixture, "kl_coef")};
    json_t *lens = json_object_get(fixture, "lens"), *advs = json_object_get(fixture, "seq_advantages");
    int B = (int)json_array_size(lens);
    long long total = 0;
    for (int i = 0; i < B; i++) total += json_integer_value(json_array_get(lens, i));
    static const enum grpo_loss_agg modes[] = {GRPO_TOKEN_MEAN, GRPO_SEQ_MEAN_TOKEN_MEAN, GRPO_SEQ_MEAN_TOKEN_SUM};
    for (size_t m = 0; m < 3; m++) {
        json_t *c = json_object_get(json_object_get(fixture, "cases"), grpo_loss_agg_name(modes[m]));
        CHECK(c != NULL);
        struct grpo_loss_stats st = {0};
        for (int i = 0; i < B; i++) {
            int n = (int)json_integer_value(json_array_get(lens, i));
            float logp[16], old[16], ref[16];
            double g[16];
            row(logp, json_object_get(fixture, "logp"), i, n);
            row(old, json_object_get(fixture, "old_logp"), i, n);
            row(ref, json_object_get(fixture, "ref_logp"), i, n);
            double coef = grpo_token_coef(modes[m], n, total, B);
            grpo_response_loss(g, &st, logp, old, ref, n, json_number_value(json_array_get(advs, i)), coef, &o);
            for (int t = 0; t < n; t++) {
                double want = json_number_value(json_array_get(json_array_get(json_object_get(c, "grad"), i), t));
                CHECK_MSG(fabs(g[t] - want) <= 1e-5, "%s: response %d token %d: grad %.9g, torch %.9g",
                          grpo_loss_agg_name(modes[m]), i, t, g[t], want);
            }
        }
        CHECK_NEAR(st.loss, num(c, "loss"), 1e-5);
        CHECK_NEAR(st.pg_loss, num(c, "pg_loss"), 1e-5);
        CHECK_NEAR(st.kl, num(c, "kl"), 1e-5);
        CHECK_NEAR((double)st.n_clipped / (double)st.n_tokens, num(c, "pg_clipfrac"), 1e-12);
        CHECK_NEAR(st.ppo_kl / (double)st.n_tokens, num(c, "ppo_kl"), 1e-5);
        CHECK(st.n_tokens == total);
    }
}

TEST(on_policy_gradient_is_the_policy_gradient) {
    /* ratio 1 (old = logp) and no KL: d loss/d logp = −A·coef for every token, clipped or not. */
    float logp[3] = {-1, -2, -0.5f};
    double g[3];
    struct grpo_loss_opts o = {0.2, 0.2, 3, 0};
    struct grpo_loss_stats st = {0};
    grpo_response_loss(g, &st, logp, logp, logp, 3, 0.75, 0.5, &o);
    for (int t = 0; t < 3; t++) CHECK_NEAR(g[t], -0.375, 1e-15);
    CHECK(st.n_clipped == 0 && st.kl == 0);
    CHECK_NEAR(st.loss, 3 * 0.5 * -0.75, 1e-15);
}

TEST(no_reference_is_kl_coef_zero) {
    /* kl_coef 0 with a reference, and no reference at all: the same loss and gradient bit for bit, and
     * without a reference no KL is added; with a reference and kl_coef > 0 the gradient differs. */
    struct grpo_loss_opts o = {num(fixture, "clip_ratio_low"), num(fixture, "clip_ratio_high"), num(fixture, "clip_ratio_c"), 0};
    json_t *lens = json_object_get(fixture, "lens"), *advs = json_object_get(fixture, "seq_advantages");
    int differing_with_kl = 0;
    for (int i = 0; i < (int)json_array_size(lens); i++) {
        int n = (int)json_integer_value(json_array_get(lens, i));
        float logp[16], old[16], ref[16];
        double with_ref[16], without[16], with_kl[16];
        row(logp, json_object_get(fixture, "logp"), i, n);
        row(old, json_object_get(fixture, "old_logp"), i, n);
        row(ref, json_object_get(fixture, "ref_logp"), i, n);
        double A = json_number_value(json_array_get(advs, i));
        struct grpo_loss_stats a = {0}, b = {0}, c = {0};
        o.kl_coef = 0;
        grpo_response_loss(with_ref, &a, logp, old, ref, n, A, 0.1, &o);
        grpo_response_loss(without, &b, logp, old, NULL, n, A, 0.1, &o);
        CHECK(memcmp(with_ref, without, sizeof(double) * (size_t)n) == 0);
        CHECK(a.loss == b.loss && a.pg_loss == b.pg_loss && a.n_clipped == b.n_clipped && a.ppo_kl == b.ppo_kl);
        CHECK(a.kl > 0 && b.kl == 0);
        o.kl_coef = 0.1;
        grpo_response_loss(with_kl, &c, logp, old, ref, n, A, 0.1, &o);
        differing_with_kl += memcmp(with_kl, without, sizeof(double) * (size_t)n) != 0;
    }
    CHECK(differing_with_kl == (int)json_array_size(lens));
}

int main(void) {
    load_fixture();
    RUN(advantages_match_torch);
    RUN(advantages_by_hand);
    RUN(token_coefficients);
    RUN(loss_and_gradient_match_torch);
    RUN(on_policy_gradient_is_the_policy_gradient);
    RUN(no_reference_is_kl_coef_zero);
    json_decref(fixture);
    return test_summary();
}
