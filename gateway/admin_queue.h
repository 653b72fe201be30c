/* admin_queue.h - the operator's queue: GET /admin/v1/queue (admin_queue.c). */
#ifndef WHET_GATEWAY_ADMIN_QUEUE_H
#define WHET_GATEWAY_ADMIN_QUEUE_H

#include "http.h"

void admin_queue_routes(struct http_router *rt);

#endif
