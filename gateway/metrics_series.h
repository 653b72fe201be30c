/* metrics_series.h - a fine-tuning job's metric series, every step, for curves:
 *   GET /v1/fine_tuning/jobs/{id}/metrics?after_step=N&limit=N&max_points=N
 * Each point is one step's figures as the executor reported them (loss, lr, grad_norm, tokens/s, valid
 * loss; reward, pass rate, KL for GRPO; margins for DPO), oldest step first. With `max_points` the
 * steps are cut into at most that many buckets of consecutive steps; each bucket answers its last
 * step's figures plus every figure's min and max over the bucket, so a spike is never averaged away. */
#ifndef WHET_GATEWAY_METRICS_SERIES_H
#define WHET_GATEWAY_METRICS_SERIES_H

struct http_router;

void metrics_series_routes(struct http_router *rt);

#endif
