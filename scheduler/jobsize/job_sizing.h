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

/* The same in parts, for a caller that sizes the same jobs again and again (the scheduler, each cycle):
 * the base model's shape (its parameter count as text and config.json) and the job's settings are read
 * once, then job_sizing_choose sizes them over the pools of the moment. */
struct job_sizing_spec {
    struct sz_job job;          /* the settings the trainer will run with */
    int32_t max_gpus, min_gpus; /* whet.max_gpus, whet.min_gpus; 0: unset */
};
void job_sizing_model(struct sz_model *m, const char *parameters, const char *config_json);
void job_sizing_spec(struct job_sizing_spec *spec, json_t *method, json_t *whet);
int32_t job_sizing_choose(struct sz_choice *out, struct sz_estimate *e, const struct sz_model *model,
                          const struct job_sizing_spec *spec, const struct sz_pool *pools, int32_t n_pools);

#endif
