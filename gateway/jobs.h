/* jobs.h - the Fine-tuning jobs resource:
 *   POST /v1/fine_tuning/jobs                     create (Idempotency-Key honoured)
 *   GET  /v1/fine_tuning/jobs                     list (after, limit, metadata[k]=v), newest first
 *   GET  /v1/fine_tuning/jobs/{id}                retrieve
 *   POST /v1/fine_tuning/jobs/{id}/cancel|pause|resume
 *   GET  /v1/fine_tuning/jobs/{id}/events         newest first (after, limit)
 *   GET  /v1/fine_tuning/jobs/{id}/checkpoints    newest first (after, limit)
 *
 * Create checks the body (job_request.h), then in one query the model (a base model, or one of the
 * tenant's own fine-tuned models or checkpoints) and the files (the tenant's, purpose fine-tune, the
 * method's format), then writes the job, its "created" event and a NOTIFY on `whet_jobs` in one
 * transaction. Jobs wait in `queued` for the scheduler; cancel, pause and resume change `status` at
 * once when the job is not running, and otherwise set `desired` for the scheduler to carry out. */
#ifndef WHET_GATEWAY_JOBS_H
#define WHET_GATEWAY_JOBS_H

struct http_router;

void jobs_routes(struct http_router *rt);

#endif
