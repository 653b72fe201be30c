/* prices.h - the operator's price book (versioned, with effective times) and a tenant's view of it:
 *   POST /admin/v1/prices            a new version: {"effective_from", "currency", "note", "prices": {…}}
 *   GET  /admin/v1/prices            every version, newest first
 *   GET  /v1/prices                  the version in effect now (?at=T: at Unix time T), for estimates
 * The SKUs: device_hour (per device type, "*" for the types not listed), trained_tokens_1m,
 * rollout_prompt_tokens_1m, rollout_completion_tokens_1m, inference_prompt_tokens_1m,
 * inference_completion_tokens_1m, storage_gb_month. What usage costs under the book is computed in the
 * database (migration 0006, whet_cost_lines), for costs.c, usage.c, jobs.c and focus.c alike. */
#ifndef WHET_GATEWAY_PRICES_H
#define WHET_GATEWAY_PRICES_H

struct http_router;

void prices_routes(struct http_router *rt);

#endif
