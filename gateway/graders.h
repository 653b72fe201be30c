/* graders.h - running a grader on one sample, OpenAI's alpha graders resource:
 *   POST /v1/fine_tuning/alpha/graders/run   {grader, model_sample, item?} -> reward, metadata, sub_rewards
 * (score_model / label_model: the catalog's judge models, cached locally, run in a `whet grade` child;
 * see graders.c.)
 * (`/validate` lives with the jobs resource, jobs.h, as the create's grader check on its own.) */
#ifndef WHET_GATEWAY_GRADERS_H
#define WHET_GATEWAY_GRADERS_H

struct http_router;

void graders_routes(struct http_router *rt);

#endif
