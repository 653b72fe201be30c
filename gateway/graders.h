/* graders.h - OpenAI's alpha graders resource:
 *   POST /v1/fine_tuning/alpha/graders/validate   {grader} -> {grader} when it is valid
 *   POST /v1/fine_tuning/alpha/graders/run        {grader, model_sample, item?} -> reward, metadata, sub_rewards
 * (python, score_model and label_model graders run in a `whet grade` child; see graders.c.) */
#ifndef WHET_GATEWAY_GRADERS_H
#define WHET_GATEWAY_GRADERS_H

#include "util.h"

struct http_router;

/* The judge cache's bound when WHET_JUDGE_CACHE_MAX is unset: judges run on the gateway's CPUs, so they
 * are small models; ten GiB holds several without filling a gateway's disk. */
#define GRADERS_JUDGE_CACHE_MAX_DEFAULT "10G"

void graders_routes(struct http_router *rt);
/* Checks WHET_JUDGE_CACHE_MAX (dir_cache_parse_bound), so that a bad one stops the gateway at its start
 * rather than failing the first judged run; 0, or -1 with err. */
int graders_check_settings(struct whet_err *err);

#endif
