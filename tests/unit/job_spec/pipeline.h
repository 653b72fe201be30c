/* pipeline.h - the pure path a job's settings take, for this folder's tests: the gateway's parser (and
 * "auto" resolution), the scheduler's mapping onto trainer settings, and the trainer's config parser. */
#ifndef WHET_TEST_MANIFEST_PIPELINE_H
#define WHET_TEST_MANIFEST_PIPELINE_H

#include <jansson.h>

#include "job_request.h"
#include "trainer_config.h"

/* The trainer settings of a job body; `examples` > 0 resolves "auto" as for a training file of that
 * many lines (0 leaves "auto" to the scheduler's defaults). NULL, with the gateway's message in `err`
 * and its field path in `param`, when the gateway refuses the body. */
json_t *pipeline_settings(const json_t *body, size_t examples, char param[JOB_PARAM_MAX], struct whet_err *err);

/* Adds what the executor adds (paths) to `settings` and parses the result with the trainer's parser: 0
 * when it takes the config (free cfg then), else -1 with the message in `err` (NULL: printed). */
int pipeline_trainer_parses(const json_t *settings, struct trainer_config *cfg, struct whet_err *err);

#endif
