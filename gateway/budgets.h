/* budgets.h - a tenant's monthly spending limits (migration 0009):
 *   PUT /admin/v1/tenants/{id}/budget     {"monthly_limit": AMOUNT|null, "soft_limit": AMOUNT|null}
 *   GET /admin/v1/tenants/{id}/budget     the tenant's budget and this month's spend
 *   GET /v1/budget                        the same, for the tenant itself (also on /v1/usage as "budget")
 * The hard cap is applied on job create (estimate.h): a job whose estimate would take the month past
 * monthly_limit is a 429 insufficient_quota. */
#ifndef WHET_GATEWAY_BUDGETS_H
#define WHET_GATEWAY_BUDGETS_H

struct http_router;

void budgets_routes(struct http_router *rt);

#endif
