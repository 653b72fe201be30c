/* job_sizing.h - a fine-tuning job and its base model as sizing (scheduler/placement/sizing.h) takes
 * them: the scheduler sizes every queued job with this, and the gateway a job's estimate before the job
 * exists (gateway/estimate.h), so both choose the same gang.
 *
 * With trainer_settings.h, a library of pure logic (jansson, the job specification, sizing): no database,
 * no I/O. */
#ifndef WHET_SCHEDULER_JOB_SIZING_H
#define WHET_SCHEDULER_JOB_SIZING_H

#include <jansson.h>
#include <stdint.h>

#include "sizing.h"

/* Sizes the job over the pools it may use and returns its gang: the choice of sz_choose (whet.max_gpus
 * the cap) for the base model (its parameter count as text and config.json, whose missing shape fields
 * sizing estimates) and the job's method, LoRA or full fine-tuning, batch, sequence length and group size
 * exactly as the manifest will give them to the trainer (trainer_settings maps the job, the job spec's
 * defaults filling what it leaves unset); at least 1 and at least whet.min_gpus. `e` (NULL: not wanted)
 * gets sizing's estimate. */
int32_t job_sizing_gang(struct sz_choice *out, struct sz_estimate *e, const char *parameters, const char *config_json,
                        json_t *method, json_t *whet, const struct sz_pool *pools, int32_t n_pools);

#endif
