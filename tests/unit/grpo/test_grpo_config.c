/* The grpo part of the trainer config: defaults, every field read, and bad values refused with the
 * field named (and GRPO-only fields refused for other methods). */
#include <stdlib.h>

#include "grader.h"
#include "test.h"
#include "trainer_config.h"

static int parse(struct trainer_config *cfg, const char *json, struct whet_err *err) {
    return trainer_config_parse(cfg, json, strlen(json), "job.json", err);
}

#define BASE "\"model\":\"m\",\"training_file\":\"t.jsonl\",\"output_dir\":\"out\""
#define GRADER                                                                                               \
    "\"grader\":{\"type\":\"string_check\",\"name\":\"exact\",\"input\":\"{{sample.output_text}}\","          \
    "\"reference\":\"{{item.answer}}\",\"operation\":\"eq\"}"

TEST(grpo_defaults) {
    struct trainer_config cfg;
    struct whet_err err = {0};
    CHECK_MSG(parse(&cfg, "{\"method\":\"grpo\"," BASE "," GRADER "}", &err) == 0, "%s", err.msg);
    CHECK(cfg.method == TRAINER_GRPO);
    CHECK(cfg.grader && grader_type_of(cfg.grader) == GRADER_STRING_CHECK);
    CHECK(cfg.rollout.n == 8 && cfg.rollout.max_tokens == 64 && cfg.rollout.top_k == 0 && cfg.rollout.n_stop == 0);
    CHECK_NEAR(cfg.rollout.temperature, 1.0, 0);
    CHECK_NEAR(cfg.rollout.top_p, 1.0, 0);
    CHECK_NEAR(cfg.hp.kl_coef, 0.001, 1e-15);
    CHECK_NEAR(cfg.hp.clip_ratio_low, 0.2, 1e-15);
    CHECK_NEAR(cfg.hp.clip_ratio_high, 0.2, 1e-15);
    CHECK(cfg.hp.ppo_epochs == 1 && cfg.hp.loss_agg == GRPO_TOKEN_MEAN && cfg.hp.norm_adv_by_std == 1 &&
          cfg.hp.dynamic_sampling == 0 && cfg.hp.max_gen_batches == 3 && cfg.eval_samples == 0);
    trainer_config_free(&cfg);
}

TEST(grpo_fields_are_read) {
    struct trainer_config cfg;
    struct whet_err err = {0};
    const char *json = "{\"method\":\"grpo\"," BASE "," GRADER ","
                       "\"rollout\":{\"n\":4,\"max_tokens\":16,\"temperature\":0.7,\"top_p\":0.9,\"top_k\":50,"
                       "\"stop\":[\"\\n\",\"END\"]},"
                       "\"hyperparameters\":{\"batch_size\":2,\"kl_coef\":0.05,\"clip_ratio_low\":0.1,"
                       "\"clip_ratio_high\":0.28,\"ppo_epochs\":3,\"loss_agg\":\"seq-mean-token-sum\","
                       "\"norm_adv_by_std\":false,\"dynamic_sampling\":true,\"max_gen_batches\":5},"
                       "\"eval_every_steps\":5,\"eval_samples\":12}";
    CHECK_MSG(parse(&cfg, json, &err) == 0, "%s", err.msg);
    CHECK(cfg.rollout.n == 4 && cfg.rollout.max_tokens == 16 && cfg.rollout.top_k == 50);
    CHECK_NEAR(cfg.rollout.temperature, 0.7, 1e-12);
    CHECK_NEAR(cfg.rollout.top_p, 0.9, 1e-12);
    CHECK(cfg.rollout.n_stop == 2);
    CHECK_STR(cfg.rollout.stop[0], "\n");
    CHECK_STR(cfg.rollout.stop[1], "END");
    CHECK(cfg.hp.batch_size == 2 && cfg.hp.ppo_epochs == 3);
    CHECK_NEAR(cfg.hp.kl_coef, 0.05, 1e-12);
    CHECK_NEAR(cfg.hp.clip_ratio_low, 0.1, 1e-12);
    CHECK_NEAR(cfg.hp.clip_ratio_high, 0.28, 1e-12);
    CHECK(cfg.hp.loss_agg == GRPO_SEQ_MEAN_TOKEN_SUM && !cfg.hp.norm_adv_by_std && cfg.hp.dynamic_sampling &&
          cfg.hp.max_gen_batches == 5);
    CHECK(cfg.eval_every_steps == 5 && cfg.eval_samples == 12);
    trainer_config_free(&cfg);

    CHECK(parse(&cfg, "{\"method\":\"grpo\"," BASE "," GRADER ",\"rollout\":{\"stop\":\"###\"},\"eval_samples\":\"auto\"}",
                &err) == 0);
    CHECK(cfg.rollout.n_stop == 1 && cfg.eval_samples == 0);
    CHECK_STR(cfg.rollout.stop[0], "###");
    trainer_config_free(&cfg);
}

/* Each bad config must fail with a message holding every fragment listed. */
#define GRPO "\"method\":\"grpo\"," BASE
static const struct {
    const char *json;
    const char *fragments[3];
} bad_configs[] = {
    {"{" GRPO "}", {"job.json: grader", "required"}},
    {"{" GRPO ",\"grader\":{\"type\":\"string_check\",\"name\":\"x\",\"input\":\"a\",\"reference\":\"b\","
     "\"operation\":\"equals\"}}",
     {"job.json: grader.operation", "eq"}},
    {"{" GRPO ",\"grader\":42}", {"job.json: grader"}},
    {"{" GRPO "," GRADER ",\"rollout\":{\"n\":0}}", {"rollout.n", "[1, 256]"}},
    {"{" GRPO "," GRADER ",\"rollout\":{\"n\":2.5}}", {"rollout.n", "integer"}},
    {"{" GRPO "," GRADER ",\"rollout\":{\"max_tokens\":0}}", {"rollout.max_tokens", "[1, 65536]"}},
    {"{" GRPO "," GRADER ",\"rollout\":{\"temperature\":-1}}", {"rollout.temperature", "[0, 10]"}},
    {"{" GRPO "," GRADER ",\"rollout\":{\"top_p\":0}}", {"rollout.top_p", "(0, 1]"}},
    {"{" GRPO "," GRADER ",\"rollout\":{\"top_k\":\"all\"}}", {"rollout.top_k"}},
    {"{" GRPO "," GRADER ",\"rollout\":{\"stop\":[\"a\",3]}}", {"rollout.stop[1]", "non-empty string"}},
    {"{" GRPO "," GRADER ",\"rollout\":{\"stop\":\"\"}}", {"rollout.stop", "empty"}},
    {"{" GRPO "," GRADER ",\"rollout\":{\"group_size\":8}}", {"rollout.group_size: unknown field", "max_tokens"}},
    {"{" GRPO "," GRADER ",\"rollout\":[8]}", {"rollout", "must be an object"}},
    {"{" GRPO "," GRADER ",\"hyperparameters\":{\"kl_coef\":-0.1}}", {"hyperparameters.kl_coef", "[0, 10]"}},
    {"{" GRPO "," GRADER ",\"hyperparameters\":{\"clip_ratio_low\":1}}", {"hyperparameters.clip_ratio_low", "[0, 1)"}},
    {"{" GRPO "," GRADER ",\"hyperparameters\":{\"clip_ratio_high\":11}}", {"hyperparameters.clip_ratio_high", "[0, 10]"}},
    {"{" GRPO "," GRADER ",\"hyperparameters\":{\"ppo_epochs\":0}}", {"hyperparameters.ppo_epochs", "[1, 100]"}},
    {"{" GRPO "," GRADER ",\"hyperparameters\":{\"max_gen_batches\":0}}", {"hyperparameters.max_gen_batches", "[1, 100]"}},
    {"{" BASE ",\"hyperparameters\":{\"max_gen_batches\":2}}", {"hyperparameters.max_gen_batches", "only method \"grpo\""}},
    {"{" GRPO "," GRADER ",\"hyperparameters\":{\"loss_agg\":\"sum\"}}", {"hyperparameters.loss_agg", "token-mean"}},
    {"{" GRPO "," GRADER ",\"hyperparameters\":{\"norm_adv_by_std\":1}}", {"hyperparameters.norm_adv_by_std", "true or false"}},
    {"{" GRPO "," GRADER ",\"hyperparameters\":{\"dynamic_sampling\":\"yes\"}}", {"hyperparameters.dynamic_sampling"}},
    {"{" GRPO "," GRADER ",\"hyperparameters\":{\"beta\":0.1}}", {"hyperparameters.beta", "only method \"dpo\""}},
    {"{" GRPO "," GRADER ",\"hyperparameters\":{\"kl\":0.1}}", {"hyperparameters.kl: unknown field", "kl_coef"}},
    {"{" GRPO "," GRADER ",\"eval_samples\":-1}", {"eval_samples", "[0, 100000000]"}},
    {"{" BASE ",\"hyperparameters\":{\"kl_coef\":0.1}}", {"hyperparameters.kl_coef", "only method \"grpo\""}},
    {"{" BASE ",\"method\":\"dpo\",\"hyperparameters\":{\"ppo_epochs\":2}}", {"hyperparameters.ppo_epochs", "only method \"grpo\""}},
    {"{" BASE "," GRADER "}", {"grader", "only method \"grpo\""}},
    {"{" BASE ",\"rollout\":{\"n\":4}}", {"rollout", "only method \"grpo\""}},
    {"{" BASE ",\"eval_samples\":4}", {"eval_samples", "only method \"grpo\""}},
};

TEST(bad_grpo_configs_name_the_field) {
    for (size_t i = 0; i < sizeof bad_configs / sizeof bad_configs[0]; i++) {
        struct trainer_config cfg;
        struct whet_err err = {0};
        int rc = parse(&cfg, bad_configs[i].json, &err);
        CHECK_MSG(rc == -1, "accepted: %s", bad_configs[i].json);
        if (rc == 0) {
            trainer_config_free(&cfg);
            continue;
        }
        for (int f = 0; f < 3 && bad_configs[i].fragments[f]; f++) CHECK_CONTAINS(err.msg, bad_configs[i].fragments[f]);
    }
}

int main(void) {
    RUN(grpo_defaults);
    RUN(grpo_fields_are_read);
    RUN(bad_grpo_configs_name_the_field);
    return test_summary();
}
