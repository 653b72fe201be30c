/* costs.h - what a tenant's usage cost, per day, shaped like OpenAI's organization costs API:
 *   GET /v1/costs?start_time=T&end_time=T&bucket_width=1d&group_by=line_item|job_id&limit=N&page=CURSOR
 * Buckets are UTC days (start_time is taken back to its midnight, end_time forward to the next one);
 * `limit` buckets a page, `next_page` the cursor of the next. Amounts are the sums of the database's
 * cost lines (migration 0006), the same lines the usage rows, whet.cost and the FOCUS export sum. */
#ifndef WHET_GATEWAY_COSTS_H
#define WHET_GATEWAY_COSTS_H

struct http_router;

void costs_routes(struct http_router *rt);

#endif
