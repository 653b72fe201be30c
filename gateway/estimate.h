/* estimate.h - POST /v1/fine_tuning/jobs with `"whet": {"dry_run": true}`: the create's checks run as for
 * a real job (jobs.c), then instead of the job the answer is its estimate (steps, trained tokens, the
 * device type, the expected duration from the throughput finished jobs measured, the cost at the prices
 * in effect), computed by the database (migration 0008, whet_job_estimate). Nothing is created. */
#ifndef WHET_GATEWAY_ESTIMATE_H
#define WHET_GATEWAY_ESTIMATE_H

#include <jansson.h>

#include "http.h"

/* Takes "dry_run" out of the body's "whet" object (so the rest is checked as for any create) and
 * returns 1 when it was true, 0 when absent or false, -1 having answered 400 when it is not a boolean. */
int estimate_take_dry_run(struct gw_req *r, json_t *body);
/* Answers the estimate of a checked create: its base model, resolved method and whet object (JSON
 * text), training file and model as given. */
void estimate_reply(struct gw_req *r, const char *model, const char *base_model, const char *method_json,
                    const char *training_file, const char *whet_json);
void estimate_prepare(void);

#endif
