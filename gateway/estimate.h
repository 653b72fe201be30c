/* estimate.h - a job's estimate before it runs, and the budget's hard cap (budgets.h). POST
 * /v1/fine_tuning/jobs runs its checks (jobs.c), then estimate_job(): the database estimates the job
 * (migration 0008, whet_job_estimate: steps, trained tokens, the device type, the expected duration from
 * the throughput finished jobs measured, the cost at the prices in effect) and reads the tenant's
 * budget (migration 0009). With `"whet": {"dry_run": true}` the answer is that estimate, with the
 * budget, and nothing is created; otherwise a job whose estimate would take the month's spend past the
 * tenant's monthly limit, or the calling API key's, is a 429 insufficient_quota, and any other goes on
 * to be created with its estimate. */
#ifndef WHET_GATEWAY_ESTIMATE_H
#define WHET_GATEWAY_ESTIMATE_H

#include <jansson.h>

#include "http.h"

/* Takes "dry_run" out of the body's "whet" object (so the rest is checked as for any create) and
 * returns 1 when it was true, 0 when absent or false, -1 having answered 400 when it is not a boolean. */
int estimate_take_dry_run(struct gw_req *r, json_t *body);

/* A checked create: the model as given, its base model, resolved method and whet object (JSON text). */
struct estimate_req {
    const char *model, *base_model, *method_json, *training_file, *whet_json;
    int dry_run;
};
/* Called when the job may be created: the estimate (JSON text, in the request's pool) and whether it
 * takes the month's spend past the soft limit (the job then gets a warning event). */
typedef void (*estimate_next_fn)(struct gw_req *r, const char *estimate_json, int soft_alert, void *arg);
/* Answers (the estimate of a dry run, a 429 over the hard cap, a database failure) or calls next. */
void estimate_job(struct gw_req *r, const struct estimate_req *q, estimate_next_fn next, void *arg);
void estimate_prepare(void);

#endif
