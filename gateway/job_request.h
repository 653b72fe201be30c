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
 *   hyperparameters             (deprecated) the supervised hyperparameters; not together with
 *                               method.*.hyperparameters
 *   method                      {type: supervised|dpo|reinforcement, <type>: {hyperparameters, grader}}
 *                               hyperparameters each "auto" or a value in the range the job
 *                               specification gives (common/job_spec.c: n_epochs, batch_size,
 *                               learning_rate_multiplier; beta for dpo; eval_interval, eval_samples,
 *                               compute_multiplier, reasoning_effort for reinforcement)
 *                               the grader (reinforcement, required) is validated by the grader
 *                               library (grader_validate), so what training could not run is refused
 *   integrations                null or []: integrations (Weights & Biases) are refused clearly
 *   whet                        the extension object, its fields, ranges and methods those of the job
 *                               specification (priority, lora {r, alpha, target_modules}, full_finetune,
 *                               gpu_types, regions, max_gpus, max_steps, checkpoint_every_steps,
 *                               max_seq_len, and the GRPO settings of reinforcement jobs); stop is a
 *                               string or at most 4, max_tokens must leave room in max_seq_len
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
 * (OpenAI's heuristics: 3 epochs, raised toward 100 examples seen (rounded down, at most 25 epochs) and
 * lowered to at most 25,000 seen; batch size about 0.2% of the examples within 1..256); the others take the job specification's
 * service default (eval_samples stays "auto": every validation prompt). */
void job_request_resolve_auto(struct job_request *req, size_t examples);

/* The hyperparameters object inside req->method (borrowed). */
json_t *job_request_hyperparameters(const struct job_request *req);

#endif
