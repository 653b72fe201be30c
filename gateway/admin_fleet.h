/* admin_fleet.h - the operator's fleet and queue: GET /admin/v1/nodes, /admin/v1/queue and
 * /admin/v1/pools (admin_fleet.c). */
#ifndef WHET_GATEWAY_ADMIN_FLEET_H
#define WHET_GATEWAY_ADMIN_FLEET_H

#include "http.h"

void admin_fleet_routes(struct http_router *rt);

#endif
