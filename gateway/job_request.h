/* job_request.h - the body of `POST /v1/fine_tuning/jobs`, parsed and checked the way OpenAI does it.
 *
 * Pure logic, no I/O: what needs the database (the model exists, the files belong to the tenant and
 * suit the method) is checked by the handler (jobs.c) afterwards. Everything here is about the body:
 *
 *   model, training_file        required strings
 *   validation_file             string or null
 *   suffix                      null or up to 64 characters of [A-Za-z0-9._-]
 *   seed                        null or an integer in 0..2147483647
 *   metadata                    null or an object of at most 16 string values (key <= 64, value <= 512
 *                               characters)
 *   hyperparameters             (deprecated) n_epochs, batch_size, learning_rate_multiplier for a
 *                               supervised job; not together with method.*.hyperparameters
 *   method                      {type: supervised|dpo|reinforcement, <type>: {hyperparameters, grader}}
 *                               hyperparameters each "auto" or a number in range:
 *                                 n_epochs 1..50, batch_size 1..256, learning_rate_multiplier (0, 10],
 *                                 beta (dpo) (0, 2], eval_interval and eval_samples (reinforcement)
 *                                 1..1000, compute_multiplier (0, 10], reasoning_effort
 *                                 default|low|medium|high
 *                               the grader (reinforcement, required) is validated by the grader
 *                               library (grader_validate), so what training could not run is refused
 *   integrations                null or []: integrations (Weights & Biases) are refused clearly
 *   whet                        the extension object: priority -100..100, lora {r 1..256, alpha (0, 4096],
 *                               target_modules}, full_finetune, gpu_types, regions, max_gpus 1..1024, and
 *                               for reinforcement group_size 2..256, kl_coef [0, 10], clip_ratio_low and
 *                               clip_ratio_high (0, 1] (clip_ratio_low below 1), ppo_epochs 1..16, loss_agg token-mean|
 *                               seq-mean-token-mean|seq-mean-token-sum, norm_adv_by_std and
 *                               dynamic_sampling (booleans), and the rollout sampling: max_tokens
 *                               1..32768, temperature [0, 2], top_p (0, 1], top_k 0..1000000, stop (a string or
 *                               at most 4)
 *
 * Unknown fields are refused ("unrecognized request argument supplied: x", as OpenAI says). Every
 * error carries the path of the field in `param` ("method.dpo.hyperparameters.beta"). */
#ifndef WHET_GATEWAY_JOB_REQUEST_H
#define WHET_GATEWAY_JOB_REQUEST_H

#include <jansson.h>
#include <stdint.h>

#include "util.h"

#define JOB_PARAM_MAX 128
#define JOB_SUFFIX_MAX 64
#define JOB_METADATA_PAIRS_MAX 16
#define JOB_METADATA_KEY_MAX 64
#define JOB_METADATA_VALUE_MAX 512

/* A checked request. Strings and JSON values are owned (job_request_free). */
struct job_request {
    char *model;
    char *training_file;
    char *validation_file;  /* NULL when none */
    char *suffix;           /* NULL when none */
    int has_seed;
    int64_t seed;
    json_t *metadata;       /* an object, or NULL */
    char method_type[16];   /* "supervised", "dpo" or "reinforcement" */
    json_t *method;         /* OpenAI's method object with every hyperparameter present ("auto" where not
                               given): {"type": t, t: {"hyperparameters": {…}[, "grader": {…}]}} */
    json_t *whet;           /* the extension object as given (checked), {} when absent */
    int priority;           /* whet.priority, 0 by default */
};

/* Checks `body` (a JSON object) and fills `out`. On error returns -1 with the message in `err` and the
 * field path in `param` ("" when the body as a whole is wrong); `out` then holds nothing to free. */
int job_request_parse(const json_t *body, struct job_request *out, char param[JOB_PARAM_MAX], struct whet_err *err);
void job_request_free(struct job_request *req);

/* Replaces every "auto" hyperparameter by the value chosen for a training file of `examples` lines
 * (OpenAI's heuristics: about 3 epochs but at least 100 and at most 25,000 examples seen in total,
 * batch size about 0.2% of the examples within 1..256; learning-rate multiplier 1, DPO beta 0.1,
 * eval_interval 1, eval_samples 1, compute_multiplier 1). */
void job_request_resolve_auto(struct job_request *req, size_t examples);

/* The hyperparameters object inside req->method (borrowed). */
json_t *job_request_hyperparameters(const struct job_request *req);

#endif
