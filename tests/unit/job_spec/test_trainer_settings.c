/* test_trainer_settings.c - a job body as the API takes it, through the gateway's parser and "auto"
 * resolution, mapped by the scheduler onto trainer settings, and those read back by the trainer's own
 * config parser: the field names of the three agree, and each API field lands where it should. No
 * database: these are the pure parts of the path a job takes. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "test.h"

#define BASE "\"model\":\"whet-tiny\",\"training_file\":\"file-abc\""
#define STRING_CHECK                                                                                           \
    "{\"type\":\"string_check\",\"name\":\"yes\",\"input\":\"{{sample.output_text}}\",\"reference\":\"{{item.answer}}\"," \
    "\"operation\":\"eq\"}"
#define RL(hp, whet)                                                                                       \
    "{" BASE ",\"method\":{\"type\":\"reinforcement\",\"reinforcement\":{\"grader\":" STRING_CHECK            \
    ",\"hyperparameters\":{" hp "}}},\"whet\":{" whet "}}"

static char last_param[JOB_PARAM_MAX];
static struct whet_err last_err;

/* The trainer settings of a body, as the service makes them for a training file of `examples` lines;
 * NULL (and the message in last_err) when the gateway refuses the body. */
static json_t *settings_of(const char *text, size_t examples) {
    json_error_t jerr;
    json_t *body = json_loads(text, 0, &jerr);
    if (!body) {
        fprintf(stderr, "bad test JSON: %s: %s\n", text, jerr.text);
        return NULL;
    }
    json_t *t = pipeline_settings(body, examples, last_param, &last_err);
    json_decref(body);
    return t;
}

static int trainer_parses(const json_t *settings, struct trainer_config *cfg) {
    return pipeline_trainer_parses(settings, cfg, NULL);
}

static const json_t *at(const json_t *obj, const char *a, const char *b) {
    const json_t *v = json_object_get(obj, a);
    return b ? json_object_get(v, b) : v;
}
static double num(const json_t *obj, const char *a, const char *b) { return json_number_value(at(obj, a, b)); }

TEST(reinforcement_maps_every_field) {
    json_t *t = settings_of(RL("\"n_epochs\":2,\"batch_size\":3,\"learning_rate_multiplier\":2,\"eval_interval\":5,"
                               "\"eval_samples\":7,\"reasoning_effort\":\"high\"",
                               "\"group_size\":4,\"kl_coef\":0.05,\"clip_ratio_low\":0.1,\"clip_ratio_high\":0.28,"
                               "\"max_tokens\":16,\"temperature\":0.7,\"top_p\":0.9,\"top_k\":20,\"stop\":[\"\\n\"],"
                               "\"ppo_epochs\":2,\"loss_agg\":\"seq-mean-token-mean\",\"norm_adv_by_std\":false,"
                               "\"dynamic_sampling\":true,\"max_steps\":6,\"checkpoint_every_steps\":3"),
                            100);
    CHECK_MSG(t != NULL, "%s (%s)", last_err.msg, last_param);
    if (!t) return;
    CHECK_STR(json_string_value(at(t, "method", NULL)), "grpo");
    CHECK_STR(json_string_value(at(t, "grader", "type")), "string_check");
    CHECK_STR(json_string_value(at(t, "grader", "reference")), "{{item.answer}}");
    CHECK(num(t, "rollout", "n") == 4);
    CHECK(num(t, "rollout", "max_tokens") == 16);
    CHECK_NEAR(num(t, "rollout", "temperature"), 0.7, 1e-12);
    CHECK_NEAR(num(t, "rollout", "top_p"), 0.9, 1e-12);
    CHECK(num(t, "rollout", "top_k") == 20);
    CHECK(json_array_size(at(t, "rollout", "stop")) == 1);
    CHECK_STR(json_string_value(json_array_get(at(t, "rollout", "stop"), 0)), "\n");
    CHECK(num(t, "hyperparameters", "n_epochs") == 2);
    CHECK(num(t, "hyperparameters", "batch_size") == 3);
    CHECK_NEAR(num(t, "hyperparameters", "learning_rate"), 2 * 5e-5, 1e-15);
    CHECK_NEAR(num(t, "hyperparameters", "kl_coef"), 0.05, 1e-12);
    CHECK_NEAR(num(t, "hyperparameters", "clip_ratio_low"), 0.1, 1e-12);
    CHECK_NEAR(num(t, "hyperparameters", "clip_ratio_high"), 0.28, 1e-12);
    CHECK(num(t, "hyperparameters", "ppo_epochs") == 2);
    CHECK_STR(json_string_value(at(t, "hyperparameters", "loss_agg")), "seq-mean-token-mean");
    CHECK(json_is_false(at(t, "hyperparameters", "norm_adv_by_std")));
    CHECK(json_is_true(at(t, "hyperparameters", "dynamic_sampling")));
    CHECK(at(t, "hyperparameters", "beta") == NULL);
    CHECK(num(t, "eval_every_steps", NULL) == 5);
    CHECK(num(t, "eval_samples", NULL) == 7);
    CHECK(num(t, "max_steps", NULL) == 6);
    CHECK(num(t, "hyperparameters", "max_seq_len") == 512 + 16);
    CHECK(num(t, "checkpoint_every_steps", NULL) == 3);
    CHECK(num(t, "seed", NULL) == 42);
    CHECK(at(t, "reasoning_effort", NULL) == NULL);
    struct trainer_config cfg;
    if (trainer_parses(t, &cfg) == 0) {
        CHECK(cfg.method == TRAINER_GRPO);
        CHECK(cfg.hp.n_epochs == 2 && cfg.hp.batch_size == 3 && cfg.max_steps == 6 && cfg.eval_every_steps == 5);
        CHECK(cfg.eval_samples == 7 && cfg.checkpoint_every_steps == 3);
        CHECK(cfg.grader != NULL);
        CHECK(cfg.rollout.n == 4 && cfg.rollout.max_tokens == 16 && cfg.rollout.top_k == 20);
        CHECK_NEAR(cfg.rollout.temperature, 0.7, 1e-9);
        CHECK_NEAR(cfg.rollout.top_p, 0.9, 1e-9);
        CHECK(cfg.rollout.n_stop == 1 && strcmp(cfg.rollout.stop[0], "\n") == 0);
        CHECK_NEAR(cfg.hp.learning_rate, 1e-4, 1e-12);
        CHECK_NEAR(cfg.hp.kl_coef, 0.05, 1e-9);
        CHECK_NEAR(cfg.hp.clip_ratio_low, 0.1, 1e-9);
        CHECK_NEAR(cfg.hp.clip_ratio_high, 0.28, 1e-9);
        CHECK(cfg.hp.ppo_epochs == 2 && cfg.hp.loss_agg == GRPO_SEQ_MEAN_TOKEN_MEAN);
        CHECK(cfg.hp.norm_adv_by_std == 0 && cfg.hp.dynamic_sampling == 1);
        trainer_config_free(&cfg);
    } else {
        CHECK_MSG(0, "the trainer refuses the grpo settings");
    }
    json_decref(t);
}

TEST(reinforcement_defaults) {
    /* 10 examples: "auto" gives 10 epochs (100 examples seen) and batches of 1. */
    json_t *t = settings_of(RL("", ""), 10);
    CHECK(t != NULL);
    if (!t) return;
    CHECK(num(t, "rollout", "n") == 8);
    CHECK(num(t, "rollout", "max_tokens") == 64);
    CHECK(num(t, "rollout", "temperature") == 1.0 && num(t, "rollout", "top_p") == 1.0 && num(t, "rollout", "top_k") == 0);
    CHECK(json_is_array(at(t, "rollout", "stop")) && json_array_size(at(t, "rollout", "stop")) == 0);
    CHECK(num(t, "hyperparameters", "n_epochs") == 10 && num(t, "hyperparameters", "batch_size") == 1);
    CHECK_NEAR(num(t, "hyperparameters", "learning_rate"), 5e-5, 1e-15);
    CHECK_NEAR(num(t, "hyperparameters", "kl_coef"), 0.001, 1e-12);
    CHECK_NEAR(num(t, "hyperparameters", "clip_ratio_low"), 0.2, 1e-12);
    CHECK_NEAR(num(t, "hyperparameters", "clip_ratio_high"), 0.2, 1e-12);
    CHECK(num(t, "hyperparameters", "ppo_epochs") == 1);
    CHECK_STR(json_string_value(at(t, "hyperparameters", "loss_agg")), "token-mean");
    CHECK(json_is_true(at(t, "hyperparameters", "norm_adv_by_std")));
    CHECK(json_is_false(at(t, "hyperparameters", "dynamic_sampling")));
    CHECK(num(t, "eval_every_steps", NULL) == 1 && num(t, "eval_samples", NULL) == 0);
    CHECK(num(t, "lora", "r") == 16);
    CHECK(num(t, "hyperparameters", "max_seq_len") == 512 + 64);
    struct trainer_config cfg;
    int parsed = trainer_parses(t, &cfg) == 0;
    CHECK(parsed);
    if (parsed) trainer_config_free(&cfg);
    json_decref(t);

    /* One stop string, as OpenAI's API takes it, is a list of one. */
    t = settings_of(RL("", "\"stop\":\"END\""), 10);
    CHECK(t && json_array_size(at(t, "rollout", "stop")) == 1);
    if (t) CHECK_STR(json_string_value(json_array_get(at(t, "rollout", "stop"), 0)), "END");
    json_decref(t);

    /* A full fine-tune takes the smaller full-model rate. */
    t = settings_of(RL("\"learning_rate_multiplier\":3", "\"full_finetune\":true"), 10);
    CHECK(t && json_is_null(at(t, "lora", NULL)));
    if (t) CHECK_NEAR(num(t, "hyperparameters", "learning_rate"), 3e-6, 1e-18);
    json_decref(t);
}

TEST(compute_multiplier_scales_the_group_unless_it_is_pinned) {
    json_t *t = settings_of(RL("\"compute_multiplier\":2", ""), 10);
    CHECK(t && num(t, "rollout", "n") == 16);
    json_decref(t);
    t = settings_of(RL("\"compute_multiplier\":0.5", ""), 10);
    CHECK(t && num(t, "rollout", "n") == 4);
    json_decref(t);
    t = settings_of(RL("\"compute_multiplier\":0.01", ""), 10); /* a group needs two responses */
    CHECK(t && num(t, "rollout", "n") == 2);
    json_decref(t);
    t = settings_of(RL("\"compute_multiplier\":3", "\"group_size\":5"), 10);
    CHECK(t && num(t, "rollout", "n") == 5);
    json_decref(t);
}

/* The whet fields of a reinforcement job, refused where the gateway refuses them, with the path. */
TEST(grpo_extension_fields_are_checked) {
    static const struct {
        const char *whet, *param, *what;
    } cases[] = {
        {"\"max_tokens\":0", "whet.max_tokens", "out of range"},
        {"\"temperature\":2.5", "whet.temperature", "out of range"},
        {"\"top_p\":0", "whet.top_p", "out of range"},
        {"\"top_k\":-1", "whet.top_k", "out of range"},
        {"\"stop\":7", "whet.stop", "a string or an array of at most 4 strings"},
        {"\"clip_ratio_low\":1", "whet.clip_ratio_low", "expected (0, 1)"},
        {"\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]", "whet.stop", "at most 4 strings"},
        {"\"stop\":[\"a\",\"\"]", "whet.stop[1]", "must not be empty"},
        {"\"max_tokens\":64,\"max_seq_len\":64", "whet.max_tokens", "leaves no room for the prompt"},
        {"\"ppo_epochs\":0", "whet.ppo_epochs", "out of range"},
        {"\"loss_agg\":\"mean\"", "whet.loss_agg", "expected one of \"token-mean\""},
        {"\"norm_adv_by_std\":1", "whet.norm_adv_by_std", "expected a boolean"},
        {"\"dynamic_sampling\":\"yes\"", "whet.dynamic_sampling", "expected a boolean"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "{" BASE ",\"method\":{\"type\":\"reinforcement\",\"reinforcement\":{\"grader\":" STRING_CHECK
                 "}},\"whet\":{%s}}",
                 cases[i].whet);
        json_t *t = settings_of(body, 10);
        CHECK_MSG(t == NULL, "accepted %s", cases[i].whet);
        json_decref(t);
        CHECK_STR(last_param, cases[i].param);
        CHECK_CONTAINS(last_err.msg, cases[i].what);
    }
    /* Only reinforcement jobs sample. */
    json_t *t = settings_of("{" BASE ",\"whet\":{\"max_tokens\":8}}", 10);
    CHECK(t == NULL);
    CHECK_STR(last_param, "whet.max_tokens");
    CHECK_CONTAINS(last_err.msg, "only for reinforcement jobs");
}

/* The grader library's own check runs at create: a formula it cannot parse is a 400 now, not a failed
 * job later. */
TEST(a_grader_training_could_not_run_is_refused_with_its_path) {
    json_t *t = settings_of("{" BASE ",\"method\":{\"type\":\"reinforcement\",\"reinforcement\":{\"grader\":"
                            "{\"type\":\"multi\",\"name\":\"m\",\"graders\":{\"a\":" STRING_CHECK "},"
                            "\"calculate_output\":\"a +\"}}}}",
                            10);
    CHECK(t == NULL);
    json_decref(t);
    CHECK_STR(last_param, "method.reinforcement.grader.calculate_output");
}

TEST(supervised_and_dpo_are_unchanged) {
    json_t *t = settings_of("{" BASE ",\"method\":{\"type\":\"dpo\",\"dpo\":{\"hyperparameters\":{\"beta\":0.3,"
                            "\"batch_size\":2,\"n_epochs\":1}}},\"whet\":{\"lora\":{\"r\":8}}}",
                            10);
    CHECK(t != NULL);
    if (!t) return;
    CHECK_STR(json_string_value(at(t, "method", NULL)), "dpo");
    CHECK_NEAR(num(t, "hyperparameters", "beta"), 0.3, 1e-12);
    CHECK_NEAR(num(t, "hyperparameters", "learning_rate"), 2e-4, 1e-15);
    CHECK(at(t, "rollout", NULL) == NULL && at(t, "grader", NULL) == NULL && at(t, "hyperparameters", "kl_coef") == NULL);
    struct trainer_config cfg;
    if (trainer_parses(t, &cfg) == 0) {
        CHECK(cfg.method == TRAINER_DPO && cfg.lora.r == 8);
        CHECK_NEAR(cfg.hp.beta, 0.3, 1e-9);
        trainer_config_free(&cfg);
    } else {
        CHECK_MSG(0, "the trainer refuses the dpo settings");
    }
    json_decref(t);

    t = settings_of("{" BASE "}", 10);
    CHECK(t != NULL);
    if (!t) return;
    CHECK_STR(json_string_value(at(t, "method", NULL)), "sft");
    CHECK(at(t, "hyperparameters", "beta") == NULL && at(t, "eval_samples", NULL) == NULL);
    CHECK(num(t, "hyperparameters", "max_seq_len") == 512);
    if (trainer_parses(t, &cfg) == 0) {
        CHECK(cfg.method == TRAINER_SFT && cfg.hp.n_epochs == 10 && cfg.hp.batch_size == 1);
        trainer_config_free(&cfg);
    } else {
        CHECK_MSG(0, "the trainer refuses the sft settings");
    }
    json_decref(t);
}

int main(void) {
    RUN(reinforcement_maps_every_field);
    RUN(reinforcement_defaults);
    RUN(compute_multiplier_scales_the_group_unless_it_is_pinned);
    RUN(grpo_extension_fields_are_checked);
    RUN(a_grader_training_could_not_run_is_refused_with_its_path);
    RUN(supervised_and_dpo_are_unchanged);
    return test_summary();
}
