/* Trainer config: defaults, every field read, and bad values refused with the field and its range. */
#include <stdlib.h>

#include "test.h"
#include "trainer_config.h"

static int parse(struct trainer_config *cfg, const char *json, struct whet_err *err) {
    return trainer_config_parse(cfg, json, strlen(json), "job.json", err);
}

#define BASE "\"model\":\"m\",\"training_file\":\"t.jsonl\",\"output_dir\":\"out\""

TEST(minimal_config_gets_defaults) {
    struct trainer_config cfg;
    struct whet_err err;
    CHECK(parse(&cfg, "{" BASE "}", &err) == 0);
    CHECK(cfg.method == TRAINER_SFT);
    CHECK_STR(cfg.model, "m");
    CHECK(cfg.lora.enabled && cfg.lora.r == 16 && cfg.lora.alpha == 32 && cfg.lora.n_target_modules == 0);
    CHECK(cfg.hp.n_epochs == 1 && cfg.hp.batch_size == 1 && cfg.hp.gradient_accumulation_steps == 1);
    CHECK_NEAR(cfg.hp.learning_rate, 1e-4, 1e-12);
    CHECK(cfg.hp.lr_scheduler == LR_LINEAR);
    CHECK(cfg.validation_file == NULL && cfg.resume_from == NULL && cfg.init_adapter == NULL);
    trainer_config_free(&cfg);
}

TEST(full_config_is_read) {
    struct trainer_config cfg;
    struct whet_err err = {0};
    const char *json = "{\"method\":\"sft\"," BASE ",\"validation_file\":\"v.jsonl\",\"resume_from\":\"out/checkpoints/step-4\","
                       "\"lora\":{\"r\":8,\"alpha\":16,\"target_modules\":[\"q_proj\",\"v_proj\"],\"use_rslora\":true},"
                       "\"hyperparameters\":{\"n_epochs\":3,\"batch_size\":4,\"learning_rate\":0.0003,"
                       "\"lr_scheduler\":\"cosine\",\"warmup_steps\":5,\"max_grad_norm\":0.5,\"weight_decay\":0.01,"
                       "\"max_seq_len\":256,\"gradient_accumulation_steps\":2},"
                       "\"seed\":7,\"checkpoint_every_steps\":10,\"eval_every_steps\":5,\"max_steps\":40}";
    CHECK_MSG(parse(&cfg, json, &err) == 0, "%s", err.msg);
    CHECK(cfg.lora.r == 8 && cfg.lora.alpha == 16 && cfg.lora.use_rslora);
    CHECK(cfg.lora.n_target_modules == 2);
    CHECK_STR(cfg.lora.target_modules[1], "v_proj");
    CHECK(cfg.hp.n_epochs == 3 && cfg.hp.batch_size == 4 && cfg.hp.warmup_steps == 5);
    CHECK(cfg.hp.max_seq_len == 256 && cfg.hp.gradient_accumulation_steps == 2);
    CHECK_NEAR(cfg.hp.learning_rate, 3e-4, 1e-12);
    CHECK_NEAR(cfg.hp.max_grad_norm, 0.5, 1e-12);
    CHECK(cfg.hp.lr_scheduler == LR_COSINE);
    CHECK(cfg.seed == 7 && cfg.checkpoint_every_steps == 10 && cfg.eval_every_steps == 5 && cfg.max_steps == 40);
    CHECK_STR(cfg.resume_from, "out/checkpoints/step-4");
    trainer_config_free(&cfg);
}

TEST(null_lora_is_full_finetuning_with_smaller_default_lr) {
    struct trainer_config cfg;
    struct whet_err err;
    CHECK(parse(&cfg, "{" BASE ",\"lora\":null,\"hyperparameters\":{\"n_epochs\":\"auto\"}}", &err) == 0);
    CHECK(!cfg.lora.enabled);
    CHECK_NEAR(cfg.hp.learning_rate, 1e-5, 1e-12);
    CHECK(cfg.hp.n_epochs == 1);
    trainer_config_free(&cfg);
}

/* Each bad config must fail with a message holding every fragment listed. */
static const struct {
    const char *json;
    const char *fragments[3];
} bad_configs[] = {
    {"[1,2]", {"job.json", "must be a JSON object"}},
    {"{\"model\":", {"job.json", "not valid JSON"}},
    {"{\"training_file\":\"t\",\"output_dir\":\"o\"}", {"job.json: model", "required"}},
    {"{" BASE ",\"method\":\"dpo\",\"hyperparameters\":{\"beta\":0}}", {"hyperparameters.beta", "(0, 2]"}},
    {"{" BASE ",\"hyperparameters\":{\"beta\":0.1}}", {"hyperparameters.beta", "only method \"dpo\""}},
    {"{" BASE ",\"method\":\"grpo\"}", {"grader", "required for method \"grpo\"", "string_check"}},
    {"{" BASE ",\"method\":\"ppo\"}", {"method", "\"sft\", \"dpo\", \"grpo\""}},
    {"{" BASE ",\"learning_rate\":1}", {"learning_rate: unknown field", "hyperparameters"}},
    {"{" BASE ",\"hyperparameters\":{\"learning_rate\":3}}", {"hyperparameters.learning_rate", "(0, 1]", "got 3"}},
    {"{" BASE ",\"hyperparameters\":{\"learning_rate\":0}}", {"hyperparameters.learning_rate", "(0, 1]"}},
    {"{" BASE ",\"hyperparameters\":{\"n_epochs\":0}}", {"hyperparameters.n_epochs", "[1, 1000]"}},
    {"{" BASE ",\"hyperparameters\":{\"batch_size\":2.5}}", {"hyperparameters.batch_size", "integer"}},
    {"{" BASE ",\"hyperparameters\":{\"max_seq_len\":4}}", {"hyperparameters.max_seq_len", "[8, 1048576]"}},
    {"{" BASE ",\"hyperparameters\":{\"weight_decay\":-0.1}}", {"hyperparameters.weight_decay", "[0, 1]"}},
    {"{" BASE ",\"hyperparameters\":{\"lr_scheduler\":\"step\"}}", {"hyperparameters.lr_scheduler", "cosine"}},
    {"{" BASE ",\"hyperparameters\":{\"warmup\":3}}", {"hyperparameters.warmup: unknown field", "warmup_steps"}},
    {"{" BASE ",\"hyperparameters\":{\"gradient_accumulation_steps\":0}}", {"gradient_accumulation_steps", "[1, 4096]"}},
    {"{" BASE ",\"lora\":{\"r\":0}}", {"lora.r", "[1, 1024]"}},
    {"{" BASE ",\"lora\":{\"alpha\":\"big\"}}", {"lora.alpha", "(0, 1000000]"}},
    {"{" BASE ",\"lora\":{\"target_modules\":[1]}}", {"lora.target_modules[0]", "string"}},
    {"{" BASE ",\"lora\":{\"rank\":8}}", {"lora.rank: unknown field", "r, alpha"}},
    {"{" BASE ",\"lora\":{\"dropout\":0.1}}", {"lora.dropout", "only 0"}},
    {"{" BASE ",\"lora\":5}", {"lora", "or null"}},
    {"{" BASE ",\"seed\":-1}", {"seed", "[0, "}},
    {"{" BASE ",\"max_steps\":1.5}", {"max_steps", "integer"}},
    {"{\"model\":\"\",\"training_file\":\"t\",\"output_dir\":\"o\"}", {"model", "non-empty string"}},
    {"{" BASE ",\"lora\":null,\"init_adapter\":\"a\"}", {"init_adapter", "full fine-tuning"}},
    {"{" BASE ",\"model\":\"a\"}", {"job.json", "duplicate"}},
    {"{" BASE ",\"distributed\":{\"world_size\":2,\"rank\":2,\"rendezvous\":\"h:1\"}}", {"distributed.rank", "[0, 1]"}},
    {"{" BASE ",\"distributed\":{\"world_size\":2,\"rank\":0}}", {"distributed", "rendezvous", "required"}},
    {"{" BASE ",\"distributed\":{\"world_size\":2,\"rank\":0,\"rendezvous\":\"h:1\",\"zero\":2}}", {"distributed.zero", "ZeRO-1", "ZeRO-3"}},
    {"{" BASE ",\"distributed\":{\"world\":2}}", {"distributed.world: unknown field", "world_size"}},
};

TEST(distributed_is_read_and_absent_means_alone) {
    struct trainer_config cfg;
    struct whet_err err = {0};
    CHECK(parse(&cfg, "{" BASE "}", &err) == 0);
    CHECK(cfg.dist.world_size == 1 && cfg.dist.rank == 0 && cfg.dist.rendezvous == NULL);
    trainer_config_free(&cfg);
    CHECK(parse(&cfg, "{" BASE ",\"distributed\":{\"world_size\":4,\"rank\":3,\"rendezvous\":\"10.0.0.5:29500\","
                      "\"host\":\"10.0.0.7\",\"generation\":2,\"timeout_s\":60,\"zero\":1}}", &err) == 0);
    CHECK(cfg.dist.world_size == 4 && cfg.dist.rank == 3 && cfg.dist.generation == 2 && cfg.dist.timeout_s == 60 &&
          cfg.dist.zero == 1);
    CHECK_STR(cfg.dist.rendezvous, "10.0.0.5:29500");
    CHECK_STR(cfg.dist.host, "10.0.0.7");
    trainer_config_free(&cfg);
    CHECK(parse(&cfg, "{" BASE ",\"lora\":null,\"distributed\":{\"world_size\":2,\"rank\":1,\"rendezvous\":\"h:1\","
                      "\"zero\":3}}", &err) == 0);
    CHECK(cfg.dist.zero == 3);
    trainer_config_free(&cfg);
    CHECK(parse(&cfg, "{" BASE ",\"method\":\"dpo\",\"distributed\":{\"world_size\":2,\"rank\":1,\"rendezvous\":\"h:1\","
                      "\"zero\":3}}", &err) == 0);
    CHECK(cfg.dist.zero == 3 && cfg.lora.enabled);
    trainer_config_free(&cfg);
}

TEST(bad_fields_name_the_field_and_range) {
    for (size_t i = 0; i < sizeof bad_configs / sizeof bad_configs[0]; i++) {
        struct trainer_config cfg;
        struct whet_err err = {0};
        int rc = parse(&cfg, bad_configs[i].json, &err);
        CHECK_MSG(rc == -1, "config %zu was accepted: %s", i, bad_configs[i].json);
        for (int k = 0; k < 3 && bad_configs[i].fragments[k]; k++) CHECK_CONTAINS(err.msg, bad_configs[i].fragments[k]);
        CHECK(cfg.model == NULL); /* a failed parse leaves nothing to free */
    }
}

TEST(load_reports_a_missing_file) {
    struct trainer_config cfg;
    struct whet_err err;
    CHECK(trainer_config_load(&cfg, "/nonexistent/job.json", &err) == -1);
    CHECK_CONTAINS(err.msg, "/nonexistent/job.json");
}

int main(void) {
    RUN(minimal_config_gets_defaults);
    RUN(full_config_is_read);
    RUN(null_lora_is_full_finetuning_with_smaller_default_lr);
    RUN(distributed_is_read_and_absent_means_alone);
    RUN(bad_fields_name_the_field_and_range);
    RUN(load_reports_a_missing_file);
    return test_summary();
}
