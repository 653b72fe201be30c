/* test_job_request.c - `POST /v1/fine_tuning/jobs` bodies: every rule, and that each error names the
 * field in `param`. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "job_request.h"
#include "test.h"

static char last_param[JOB_PARAM_MAX];
static struct whet_err last_err;

/* Parses `text`; on success keeps the request in *req (caller frees), else returns the message and
 * leaves the param in last_param. */
static const char *parse(const char *text, struct job_request *req) {
    json_error_t jerr;
    json_t *body = json_loads(text, 0, &jerr);
    if (!body) {
        fprintf(stderr, "bad test JSON: %s: %s\n", text, jerr.text);
        return "bad test JSON";
    }
    last_err.msg[0] = 0;
    int rc = job_request_parse(body, req, last_param, &last_err);
    json_decref(body);
    return rc == 0 ? "" : last_err.msg;
}

/* Expects the body to be refused with `param` and a message containing `what`. */
#define REFUSED(text, want_param, what)                 \
    do {                                                \
        struct job_request req_;                        \
        CHECK_CONTAINS(parse(text, &req_), what);       \
        CHECK_STR(last_param, want_param);              \
    } while (0)

#define BASE "\"model\":\"whet-tiny\",\"training_file\":\"file-abc\""

TEST(minimal_body_defaults_to_supervised_auto) {
    struct job_request req;
    CHECK_STR(parse("{" BASE "}", &req), "");
    CHECK_STR(req.model, "whet-tiny");
    CHECK_STR(req.training_file, "file-abc");
    CHECK(req.validation_file == NULL && req.suffix == NULL && !req.has_seed && req.metadata == NULL);
    CHECK_STR(req.method_type, "supervised");
    char *m = json_dumps(req.method, JSON_SORT_KEYS | JSON_COMPACT);
    CHECK_STR(m, "{\"supervised\":{\"hyperparameters\":{\"batch_size\":\"auto\",\"learning_rate_multiplier\":\"auto\","
                 "\"n_epochs\":\"auto\"}},\"type\":\"supervised\"}");
    free(m);
    CHECK(json_is_object(req.whet) && json_object_size(req.whet) == 0);
    CHECK(req.priority == 0);
    job_request_free(&req);
}

TEST(full_body_is_kept) {
    struct job_request req;
    CHECK_STR(parse("{" BASE ",\"validation_file\":\"file-v\",\"suffix\":\"my-model_2.0\",\"seed\":42,"
                    "\"metadata\":{\"team\":\"nlp\"},\"integrations\":[],"
                    "\"method\":{\"type\":\"dpo\",\"dpo\":{\"hyperparameters\":{\"beta\":0.5,\"n_epochs\":2}}},"
                    "\"whet\":{\"priority\":5,\"lora\":{\"r\":8,\"alpha\":16,\"target_modules\":[\"q_proj\",\"v_proj\"]},"
                    "\"gpu_types\":[\"H100\"],\"regions\":[\"eu-west\"],\"max_gpus\":4}}",
                    &req),
              "");
    CHECK_STR(req.validation_file, "file-v");
    CHECK_STR(req.suffix, "my-model_2.0");
    CHECK(req.has_seed && req.seed == 42);
    CHECK_STR(json_string_value(json_object_get(req.metadata, "team")), "nlp");
    CHECK_STR(req.method_type, "dpo");
    json_t *hp = job_request_hyperparameters(&req);
    CHECK(json_number_value(json_object_get(hp, "beta")) == 0.5);
    CHECK(json_integer_value(json_object_get(hp, "n_epochs")) == 2);
    CHECK_STR(json_string_value(json_object_get(hp, "batch_size")), "auto");
    CHECK(req.priority == 5);
    CHECK(json_integer_value(json_object_get(req.whet, "max_gpus")) == 4);
    job_request_free(&req);
}

TEST(legacy_hyperparameters) {
    struct job_request req;
    CHECK_STR(parse("{" BASE ",\"hyperparameters\":{\"n_epochs\":4}}", &req), "");
    CHECK_STR(req.method_type, "supervised");
    CHECK(json_integer_value(json_object_get(job_request_hyperparameters(&req), "n_epochs")) == 4);
    job_request_free(&req);
    REFUSED("{" BASE ",\"hyperparameters\":{\"n_epochs\":4},\"method\":{\"type\":\"supervised\",\"supervised\":"
            "{\"hyperparameters\":{\"n_epochs\":3}}}}",
            "hyperparameters", "give either hyperparameters (deprecated) or method.supervised.hyperparameters");
    REFUSED("{" BASE ",\"hyperparameters\":{\"n_epochs\":4},\"method\":{\"type\":\"dpo\"}}", "hyperparameters",
            "are for supervised jobs");
    REFUSED("{" BASE ",\"hyperparameters\":{\"n_epochs\":0}}", "hyperparameters.n_epochs",
            "hyperparameters.n_epochs: 0 is out of range: expected 1..50");
}

TEST(required_fields_and_types) {
    REFUSED("{\"training_file\":\"f\"}", "model", "model: missing");
    REFUSED("{\"model\":\"m\"}", "training_file", "training_file: missing");
    REFUSED("{\"model\":5,\"training_file\":\"f\"}", "model", "model: expected a string, found an integer");
    REFUSED("{\"model\":\"\",\"training_file\":\"f\"}", "model", "model: must not be empty");
    REFUSED("{" BASE ",\"validation_file\":[]}", "validation_file", "expected a string, found an array");
    REFUSED("{" BASE ",\"foo\":1}", "foo", "foo: unrecognized request argument supplied");
    REFUSED("{" BASE ",\"seed\":-1}", "seed", "seed: -1 is out of range");
    REFUSED("{" BASE ",\"seed\":2147483648}", "seed", "out of range");
    REFUSED("{" BASE ",\"seed\":1.5}", "seed", "seed: expected an integer, found a number");
    REFUSED("{" BASE ",\"integrations\":[{\"type\":\"wandb\",\"wandb\":{\"project\":\"p\"}}]}", "integrations",
            "not supported by this server");
    REFUSED("{" BASE ",\"integrations\":\"wandb\"}", "integrations", "expected an array");
    struct job_request req;
    json_t *arr = json_array();
    CHECK(job_request_parse(arr, &req, last_param, &last_err) == -1);
    CHECK_STR(last_err.msg, "expected a JSON object, found an array");
    CHECK_STR(last_param, "");
    json_decref(arr);
}

TEST(suffix_and_metadata_limits) {
    struct job_request req;
    /* 64 characters pass, 65 do not. */
    char body[512];
    snprintf(body, sizeof body, "{" BASE ",\"suffix\":\"%064d\"}", 0);
    CHECK_STR(parse(body, &req), "");
    job_request_free(&req);
    snprintf(body, sizeof body, "{" BASE ",\"suffix\":\"%065d\"}", 0);
    REFUSED(body, "suffix", "suffix: longer than 64 characters");
    REFUSED("{" BASE ",\"suffix\":\"a:b\"}", "suffix", "expected letters, digits");
    REFUSED("{" BASE ",\"suffix\":\"a b\"}", "suffix", "expected letters, digits");
    CHECK_STR(parse("{" BASE ",\"suffix\":\"\"}", &req), "");
    CHECK(req.suffix == NULL);
    job_request_free(&req);

    /* 16 pairs pass, 17 do not. */
    char *meta = xstrdup("");
    for (int i = 0; i < 17; i++) {
        char *next = xasprintf("%s%s\"k%d\":\"v\"", meta, i ? "," : "", i);
        free(meta);
        meta = next;
        char *text = xasprintf("{" BASE ",\"metadata\":{%s}}", meta);
        if (i < 16) {
            CHECK_STR(parse(text, &req), "");
            job_request_free(&req);
        } else {
            REFUSED(text, "metadata", "metadata: at most 16 key-value pairs");
        }
        free(text);
    }
    free(meta);
    char key[80], value[600];
    memset(key, 'k', 65);
    key[65] = 0;
    char *text = xasprintf("{" BASE ",\"metadata\":{\"%s\":\"v\"}}", key);
    REFUSED(text, "metadata.kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk", "key longer than 64 characters");
    free(text);
    memset(value, 'v', 513);
    value[513] = 0;
    text = xasprintf("{" BASE ",\"metadata\":{\"k\":\"%s\"}}", value);
    REFUSED(text, "metadata.k", "metadata.k: value longer than 512 characters");
    free(text);
    value[512] = 0;
    text = xasprintf("{" BASE ",\"metadata\":{\"k\":\"%s\"}}", value);
    CHECK_STR(parse(text, &req), "");
    job_request_free(&req);
    free(text);
    REFUSED("{" BASE ",\"metadata\":{\"k\":1}}", "metadata.k", "expected a string, found an integer");
    REFUSED("{" BASE ",\"metadata\":[]}", "metadata", "expected an object, found an array");
}

TEST(method_rules) {
    REFUSED("{" BASE ",\"method\":{}}", "method.type", "method.type: missing");
    REFUSED("{" BASE ",\"method\":{\"type\":\"grpo\"}}", "method.type",
            "expected one of \"supervised\", \"dpo\", \"reinforcement\"");
    REFUSED("{" BASE ",\"method\":{\"type\":\"supervised\",\"dpo\":{}}}", "method.dpo",
            "does not match method.type \"supervised\"");
    REFUSED("{" BASE ",\"method\":{\"type\":\"supervised\",\"supervised\":{\"hyperparameters\":{\"beta\":0.1}}}}",
            "method.supervised.hyperparameters.beta", "not a hyperparameter of supervised fine-tuning");
    REFUSED("{" BASE ",\"method\":{\"type\":\"supervised\",\"supervised\":{\"grader\":{}}}}", "method.supervised.grader",
            "unknown field");
    REFUSED("{" BASE ",\"method\":{\"type\":\"dpo\",\"dpo\":{\"hyperparameters\":{\"beta\":0}}}}",
            "method.dpo.hyperparameters.beta", "0 is out of range: expected (0, 2]");
    REFUSED("{" BASE ",\"method\":{\"type\":\"dpo\",\"dpo\":{\"hyperparameters\":{\"beta\":\"high\"}}}}",
            "method.dpo.hyperparameters.beta", "expected \"auto\" or a number, found a string");
    REFUSED("{" BASE ",\"method\":{\"type\":\"supervised\",\"supervised\":{\"hyperparameters\":{\"batch_size\":257}}}}",
            "method.supervised.hyperparameters.batch_size", "257 is out of range: expected 1..256");
    REFUSED("{" BASE ",\"method\":{\"type\":\"supervised\",\"supervised\":{\"hyperparameters\":{\"batch_size\":2.5}}}}",
            "method.supervised.hyperparameters.batch_size", "expected \"auto\" or an integer, found a number");
    REFUSED("{" BASE ",\"method\":{\"type\":\"supervised\",\"supervised\":{\"hyperparameters\":{\"learning_rate_multiplier\":10.5}}}}",
            "method.supervised.hyperparameters.learning_rate_multiplier", "out of range");
    REFUSED("{" BASE ",\"method\":{\"type\":\"reinforcement\"}}", "method.reinforcement.grader",
            "missing: a reinforcement job needs a grader");
    REFUSED("{" BASE ",\"method\":[]}", "method", "method: expected an object, found an array");
}

#define RL(grader, hp) \
    "{" BASE ",\"method\":{\"type\":\"reinforcement\",\"reinforcement\":{\"grader\":" grader ",\"hyperparameters\":{" hp "}}}}"
#define STRING_CHECK "{\"type\":\"string_check\",\"name\":\"exact\",\"input\":\"{{sample.output_text}}\",\"reference\":\"{{item.answer}}\",\"operation\":\"eq\"}"

TEST(reinforcement_and_graders) {
    struct job_request req;
    CHECK_STR(parse(RL(STRING_CHECK, "\"eval_interval\":5,\"reasoning_effort\":\"low\",\"compute_multiplier\":2"), &req), "");
    CHECK_STR(req.method_type, "reinforcement");
    json_t *hp = job_request_hyperparameters(&req);
    CHECK(json_integer_value(json_object_get(hp, "eval_interval")) == 5);
    CHECK_STR(json_string_value(json_object_get(hp, "reasoning_effort")), "low");
    CHECK_STR(json_string_value(json_object_get(hp, "eval_samples")), "auto");
    CHECK_STR(json_string_value(json_object_get(json_object_get(json_object_get(req.method, "reinforcement"), "grader"), "name")),
              "exact");
    job_request_free(&req);

    REFUSED(RL(STRING_CHECK, "\"reasoning_effort\":\"max\""), "method.reinforcement.hyperparameters.reasoning_effort",
            "expected one of \"default\", \"low\", \"medium\", \"high\"");
    REFUSED(RL(STRING_CHECK, "\"eval_samples\":0"), "method.reinforcement.hyperparameters.eval_samples", "out of range");
    REFUSED(RL("{\"type\":\"string_check\",\"name\":\"x\",\"input\":\"a\",\"reference\":\"b\",\"operation\":\"contains\"}", ""),
            "method.reinforcement.grader.operation", "expected one of eq, ne, like, ilike, found \"contains\"");
    REFUSED(RL("{\"type\":\"string_check\",\"name\":\"x\",\"input\":\"a\",\"operation\":\"eq\"}", ""),
            "method.reinforcement.grader.reference", "missing");
    REFUSED(RL("{\"type\":\"regex\",\"name\":\"x\"}", ""), "method.reinforcement.grader.type",
            "expected one of string_check, text_similarity, multi, python, score_model, label_model");
    REFUSED(RL("{\"type\":\"python\",\"source\":\"def grade(s, i): return 1\"}", ""), "method.reinforcement.grader.name",
            "missing");
    CHECK_STR(parse(RL("{\"type\":\"python\",\"name\":\"p\",\"source\":\"def grade(s, i): return 1\"}", ""), &req), "");
    job_request_free(&req);
    REFUSED(RL("{\"type\":\"python\",\"name\":\"p\",\"source\":\"\"}", ""), "method.reinforcement.grader.source", "must not be empty");
    CHECK_STR(parse(RL("{\"type\":\"text_similarity\",\"name\":\"t\",\"input\":\"a\",\"reference\":\"b\",\"evaluation_metric\":\"bleu\"}", ""), &req), "");
    job_request_free(&req);
    REFUSED(RL("{\"type\":\"text_similarity\",\"name\":\"t\",\"input\":\"a\",\"reference\":\"b\",\"evaluation_metric\":\"wer\"}", ""),
            "method.reinforcement.grader.evaluation_metric", "expected one of fuzzy_match, bleu");
    CHECK_STR(parse(RL("{\"type\":\"score_model\",\"name\":\"s\",\"model\":\"whet-tiny\",\"range\":[0,1],"
                       "\"input\":[{\"role\":\"user\",\"content\":\"grade {{sample.output_text}}\"}]}", ""), &req), "");
    job_request_free(&req);
    REFUSED(RL("{\"type\":\"score_model\",\"name\":\"s\",\"model\":\"m\",\"range\":[1,0],\"input\":[{\"role\":\"user\",\"content\":\"x\"}]}", ""),
            "method.reinforcement.grader.range", "min must be below max");
    REFUSED(RL("{\"type\":\"score_model\",\"name\":\"s\",\"model\":\"m\",\"input\":[{\"role\":\"judge\",\"content\":\"x\"}]}", ""),
            "method.reinforcement.grader.input[0].role", "expected one of");
    REFUSED(RL("{\"type\":\"score_model\",\"name\":\"s\",\"model\":\"m\",\"input\":[]}", ""),
            "method.reinforcement.grader.input", "expected at least one message");
    CHECK_STR(parse(RL("{\"type\":\"label_model\",\"name\":\"l\",\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":\"x\"}],"
                       "\"labels\":[\"good\",\"bad\"],\"passing_labels\":[\"good\"]}", ""), &req), "");
    job_request_free(&req);
    REFUSED(RL("{\"type\":\"label_model\",\"name\":\"l\",\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":\"x\"}],"
               "\"labels\":[\"good\",\"bad\"],\"passing_labels\":[\"great\"]}", ""),
            "method.reinforcement.grader.passing_labels[0]", "\"great\" is not one of the labels");
    CHECK_STR(parse(RL("{\"type\":\"multi\",\"name\":\"m\",\"graders\":{\"a\":" STRING_CHECK "},\"calculate_output\":\"a\"}", ""), &req), "");
    job_request_free(&req);
    REFUSED(RL("{\"type\":\"multi\",\"name\":\"m\",\"graders\":{\"a\":{\"type\":\"multi\",\"name\":\"n\"}},\"calculate_output\":\"a\"}", ""),
            "method.reinforcement.grader.graders.a.type", "a multi grader cannot contain another");
    REFUSED(RL("{\"type\":\"multi\",\"name\":\"m\",\"graders\":{\"a\":" STRING_CHECK "}}", ""),
            "method.reinforcement.grader.calculate_output", "missing");
    REFUSED(RL("{\"type\":\"string_check\",\"name\":\"x\",\"input\":\"a\",\"reference\":\"b\",\"operation\":\"eq\",\"extra\":1}", ""),
            "method.reinforcement.grader.extra", "unknown field");
}

TEST(whet_extension) {
    struct job_request req;
    REFUSED("{" BASE ",\"whet\":{\"priority\":101}}", "whet.priority", "101 is out of range: expected -100..100");
    REFUSED("{" BASE ",\"whet\":{\"lora\":{\"r\":0}}}", "whet.lora.r", "out of range");
    REFUSED("{" BASE ",\"whet\":{\"lora\":{\"alpha\":0}}}", "whet.lora.alpha", "out of range: expected (0, 4096]");
    REFUSED("{" BASE ",\"whet\":{\"lora\":{\"target_modules\":[\"q_proj\",\"attn\"]}}}", "whet.lora.target_modules[1]",
            "expected one of \"q_proj\"");
    REFUSED("{" BASE ",\"whet\":{\"lora\":{\"target_modules\":[\"q_proj\",\"q_proj\"]}}}", "whet.lora.target_modules[1]",
            "given twice");
    CHECK_STR(parse("{" BASE ",\"whet\":{\"lora\":{\"target_modules\":\"all-linear\"}}}", &req), "");
    job_request_free(&req);
    REFUSED("{" BASE ",\"whet\":{\"full_finetune\":true,\"lora\":{\"r\":8}}}", "whet.lora", "a full fine-tune has no LoRA settings");
    REFUSED("{" BASE ",\"whet\":{\"full_finetune\":1}}", "whet.full_finetune", "expected a boolean");
    REFUSED("{" BASE ",\"whet\":{\"gpu_types\":[]}}", "whet.gpu_types", "expected 1 to 16 names");
    REFUSED("{" BASE ",\"whet\":{\"gpu_types\":[\"H100\",\"a b\"]}}", "whet.gpu_types[1]", "expected letters, digits");
    REFUSED("{" BASE ",\"whet\":{\"regions\":\"eu\"}}", "whet.regions", "expected an array of strings, found a string");
    REFUSED("{" BASE ",\"whet\":{\"max_gpus\":0}}", "whet.max_gpus", "out of range");
    REFUSED("{" BASE ",\"whet\":{\"group_size\":8}}", "whet.group_size", "only for reinforcement jobs");
    REFUSED("{" BASE ",\"whet\":{\"speed\":\"fast\"}}", "whet.speed", "unknown field");
    REFUSED("{" BASE ",\"whet\":[]}", "whet", "expected an object");
    CHECK_STR(parse(RL(STRING_CHECK, "") , &req), "");
    job_request_free(&req);
    const char *rl = "{" BASE ",\"method\":{\"type\":\"reinforcement\",\"reinforcement\":{\"grader\":" STRING_CHECK "}},"
                     "\"whet\":{\"group_size\":8,\"kl_coef\":0,\"clip_ratio_low\":0.2,\"clip_ratio_high\":0.28}}";
    CHECK_STR(parse(rl, &req), "");
    job_request_free(&req);
    REFUSED("{" BASE ",\"method\":{\"type\":\"reinforcement\",\"reinforcement\":{\"grader\":" STRING_CHECK "}},"
            "\"whet\":{\"clip_ratio_high\":0}}",
            "whet.clip_ratio_high", "out of range: expected (0, 1]");
    REFUSED("{" BASE ",\"method\":{\"type\":\"reinforcement\",\"reinforcement\":{\"grader\":" STRING_CHECK "}},"
            "\"whet\":{\"group_size\":1}}",
            "whet.group_size", "out of range: expected 2..256");
}

TEST(resolve_auto) {
    struct job_request req;
    CHECK_STR(parse("{" BASE "}", &req), "");
    job_request_resolve_auto(&req, 10); /* 10 examples: 10 epochs reach 100 */
    json_t *hp = job_request_hyperparameters(&req);
    CHECK(json_integer_value(json_object_get(hp, "n_epochs")) == 10);
    CHECK(json_integer_value(json_object_get(hp, "batch_size")) == 1);
    CHECK(json_number_value(json_object_get(hp, "learning_rate_multiplier")) == 1.0);
    job_request_free(&req);

    CHECK_STR(parse("{" BASE ",\"method\":{\"type\":\"dpo\",\"dpo\":{\"hyperparameters\":{\"n_epochs\":7}}}}", &req), "");
    job_request_resolve_auto(&req, 20000); /* 3 epochs would be 60,000: capped at 25,000 -> 1 */
    hp = job_request_hyperparameters(&req);
    CHECK(json_integer_value(json_object_get(hp, "n_epochs")) == 7); /* given: kept */
    CHECK(json_integer_value(json_object_get(hp, "batch_size")) == 40);
    CHECK_NEAR(json_number_value(json_object_get(hp, "beta")), 0.1, 1e-12);
    job_request_free(&req);

    CHECK_STR(parse("{" BASE "}", &req), "");
    job_request_resolve_auto(&req, 20000);
    CHECK(json_integer_value(json_object_get(job_request_hyperparameters(&req), "n_epochs")) == 1);
    job_request_free(&req);

    /* OpenAI's rule rounds down and caps at 25: 7 examples -> 100 / 7 = 14; 1 example -> 25; 10,000 ->
     * 25,000 / 10,000 = 2; 1,000 -> 3 (3,000 is within 100..25,000); batch 0.2%: 1,000 -> 2. */
    static const size_t examples[] = {7, 1, 10000, 1000};
    static const int epochs[] = {14, 25, 2, 3}, batches[] = {1, 1, 20, 2};
    for (size_t i = 0; i < 4; i++) {
        CHECK_STR(parse("{" BASE "}", &req), "");
        job_request_resolve_auto(&req, examples[i]);
        hp = job_request_hyperparameters(&req);
        CHECK(json_integer_value(json_object_get(hp, "n_epochs")) == epochs[i]);
        CHECK(json_integer_value(json_object_get(hp, "batch_size")) == batches[i]);
        job_request_free(&req);
    }

    CHECK_STR(parse(RL(STRING_CHECK, ""), &req), "");
    job_request_resolve_auto(&req, 500000);
    hp = job_request_hyperparameters(&req);
    CHECK(json_integer_value(json_object_get(hp, "batch_size")) == 256);
    CHECK(json_integer_value(json_object_get(hp, "eval_interval")) == 1);
    CHECK_STR(json_string_value(json_object_get(hp, "reasoning_effort")), "default");
    job_request_free(&req);
}

/* Field names come from the client: a long multibyte key cut to fit `param` stays valid UTF-8. */
TEST(long_multibyte_names_stay_utf8) {
    char key[200] = "";
    for (int i = 0; i < 60; i++) strcat(key, "\xc3\xa9"); /* 120 bytes of "é" */
    char *text = xasprintf("{" BASE ",\"whet\":{\"lora\":{\"%s\":1}}}", key);
    struct job_request req;
    CHECK_CONTAINS(parse(text, &req), "unknown field");
    json_t *p = json_string(last_param);
    CHECK(p != NULL); /* NULL when the cut left half a character */
    CHECK(strlen(last_param) < JOB_PARAM_MAX && strncmp(last_param, "whet.lora.", 10) == 0);
    json_decref(p);
    json_t *m = json_string(last_err.msg);
    CHECK(m != NULL);
    json_decref(m);
    free(text);
}

int main(void) {
    RUN(minimal_body_defaults_to_supervised_auto);
    RUN(full_body_is_kept);
    RUN(legacy_hyperparameters);
    RUN(required_fields_and_types);
    RUN(suffix_and_metadata_limits);
    RUN(method_rules);
    RUN(reinforcement_and_graders);
    RUN(whet_extension);
    RUN(resolve_auto);
    RUN(long_multibyte_names_stay_utf8);
    return test_summary();
}
