/* job_sizing.h - a fine-tuning job and its base model as sizing (scheduler/placement/sizing.h) takes
 * them: the scheduler sizes every queued job with these, and the gateway sizes a job's estimate before
 * it exists (gateway/estimate.h), so both choose the same gang.
 *
 * With trainer_settings.h, a library of pure logic (jansson, the job specification, sizing's types): no
 * database, no I/O. */
#ifndef WHET_SCHEDULER_JOB_SIZING_H
#define WHET_SCHEDULER_JOB_SIZING_H

#include <jansson.h>
#include <stdint.h>

#include "sizing.h"

/* v when it is an integer in [1, INT32_MAX], else fallback. */
int32_t job_sizing_int(json_t *v, int32_t fallback);

/* The base model's shape from its base_models row: its parameter count (text) and config.json (fields
 * missing stay 0: sizing estimates them). */
void job_sizing_model(struct sz_model *m, const char *parameters, const char *config_json);

/* The job's method, LoRA or full fine-tuning, batch, sequence length and group size exactly as the
 * manifest will give them to the trainer: trainer_settings maps the job, the job spec's defaults filling
 * what it leaves unset. */
void job_sizing_job(struct sz_job *j, json_t *method, json_t *whet);

#endif
