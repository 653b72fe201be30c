/* graders.h - OpenAI's alpha graders resource:
 *   POST /v1/fine_tuning/alpha/graders/validate   {grader} -> {grader} when it is valid
 *   POST /v1/fine_tuning/alpha/graders/run        {grader, model_sample, item?} -> reward, metadata, sub_rewards
 * (python, score_model and label_model graders run in a `whet grade` child; see graders.c.) */
#ifndef WHET_GATEWAY_GRADERS_H
#define WHET_GATEWAY_GRADERS_H

struct http_router;

void graders_routes(struct http_router *rt);

#endif
