/* admin_fleet.h - the operator's fleet and queue: GET /admin/v1/nodes, /admin/v1/queue and
 * /admin/v1/pools (admin_fleet.c). */
#ifndef WHET_GATEWAY_ADMIN_FLEET_H
#define WHET_GATEWAY_ADMIN_FLEET_H

#include "db.h"
#include "http.h"

void admin_fleet_routes(struct http_router *rt);

/* One of the operator's cursor pages (OpenAI's `after`, `limit` 1-1000 default 100, `has_more`, `first_id`,
 * `last_id`): runs `stmt`, whose $1 is `after` (params[0]) and whose last parameter is the LIMIT, after
 * `exists` (the cursor's lookup) when there is a cursor; an `after` that names no `what`, or a bad `limit`,
 * is a 400 naming it. */
void admin_page_run(struct gw_req *r, const char *what, json_t *(*to_json)(const PGresult *, int), const char *exists,
                    const char *stmt, const char *const *params, int nparams);

#endif
