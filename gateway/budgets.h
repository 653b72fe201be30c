/* budgets.h - a tenant's monthly spending limits (migration 0009):
 *   PUT /admin/v1/tenants/{id}/budget     {"monthly_limit": AMOUNT|null, "soft_limit": AMOUNT|null}
 *   GET /admin/v1/tenants/{id}/budget     the tenant's budget and this month's spend
 *   GET /v1/budget                        the same, for the tenant itself (also on /v1/usage as "budget")
 * The hard cap is applied on job create (estimate.h): a job whose estimate would take the month past
 * monthly_limit is a 429 insufficient_quota. What is used as it goes (chat completions, completions,
 * training-session passes) has no estimate: it is refused (budget_gate) once the month's spend reached
 * the tenant's monthly_limit, or the calling API key's spend reached the key's own monthly_limit. */
#ifndef WHET_GATEWAY_BUDGETS_H
#define WHET_GATEWAY_BUDGETS_H

#include <jansson.h>

#include "http.h"

void budgets_routes(struct http_router *rt);
/* A limit field of `body`: an amount of 0 to 1e15 in the price book's currency, or null or absent (no
 * limit; *text NULL). Sets *text to its decimal text; answers 400 naming it and returns -1 on a bad one. */
int budget_limit_field(struct gw_req *r, const json_t *body, const char *name, const char **text);
/* Answers 429 insufficient_quota (OpenAI's shape) when the tenant's month's spend reached its monthly
 * limit, or the calling API key's reached the key's; else calls next(r, arg). One query; a tenant and
 * key without a monthly limit read no usage. */
void budget_gate(struct gw_req *r, void (*next)(struct gw_req *r, void *arg), void *arg);

#endif
