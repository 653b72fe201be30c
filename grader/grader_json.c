/* grader_json.c - a grader result in the shape of OpenAI's /v1/fine_tuning/alpha/graders/run answer.
 *
 *   {"reward", "metadata": {"name", "type", "errors": {…flags…}, "execution_time", "scores",
 *    "token_usage", "sampled_model_name"}, "sub_rewards", "model_grader_token_usage_per_model"}
 *
 * metadata.errors carries OpenAI's flags (each kind of grader_error sets its own; the python and model
 * kinds also fill their *_details / *_type strings with the first message of that kind) and, as a
 * whet extension, "messages": every error text in order, so a tenant sees why, not only that. */
#include <string.h>

#include "grader.h"

static json_t *errors_json(const struct grader_result *res) {
    json_t *errors = json_pack("{s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:n, s:b, s:n, s:b, s:b, s:b, s:n}",
                               "formula_parse_error", 0, "sample_parse_error", 0, "truncated_observation_error", 0,
                               "unresponsive_reward_error", 0, "invalid_variable_error", 0, "other_error", 0,
                               "python_grader_server_error", 0, "python_grader_server_error_type",
                               "python_grader_runtime_error", 0, "python_grader_runtime_error_details",
                               "model_grader_server_error", 0, "model_grader_refusal_error", 0,
                               "model_grader_parse_error", 0, "model_grader_server_error_details");
    json_t *messages = json_array();
    for (size_t k = 0; k < res->n_errors; k++) {
        const struct grader_error *e = &res->errors[k];
        json_object_set_new(errors, grader_error_kind_name(e->kind), json_true());
        const char *detail_key = e->kind == GRADER_ERR_PYTHON_RUNTIME  ? "python_grader_runtime_error_details"
                                 : e->kind == GRADER_ERR_PYTHON_SERVER ? "python_grader_server_error_type"
                                 : e->kind == GRADER_ERR_MODEL_SERVER  ? "model_grader_server_error_details"
                                                                       : NULL;
        if (detail_key && json_is_null(json_object_get(errors, detail_key)))
            json_object_set_new(errors, detail_key, json_string(e->message));
        json_array_append_new(messages, json_string(e->message));
    }
    json_object_set_new(errors, "messages", messages);
    return errors;
}

json_t *grader_result_openai_json(const struct grader *g, const struct grader_result *res) {
    json_t *sub_rewards = json_object(), *scores = json_object();
    for (size_t k = 0; k < res->n_sub; k++) {
        json_object_set_new(sub_rewards, res->sub_names[k], json_real(res->sub_rewards[k]));
        json_object_set_new(scores, res->sub_names[k], json_real(res->sub_rewards[k]));
    }
    const char *metric = grader_metric_name(g);
    if (metric) json_object_set_new(scores, metric, json_real(res->reward));
    json_t *metadata = json_pack("{s:s, s:s, s:o, s:f, s:o, s:n, s:n}", "name", grader_name(g), "type",
                                 grader_type_name(grader_type_of(g)), "errors", errors_json(res), "execution_time",
                                 res->seconds, "scores", scores, "token_usage", "sampled_model_name");
    return json_pack("{s:f, s:o, s:o, s:o}", "reward", res->reward, "metadata", metadata, "sub_rewards", sub_rewards,
                     "model_grader_token_usage_per_model", json_object());
}
