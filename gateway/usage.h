/* usage.h - metering routes: /v1/usage (a tenant's own) and /admin/v1/usage (billing export). */
#ifndef WHET_GATEWAY_USAGE_H
#define WHET_GATEWAY_USAGE_H

#include "http.h"

void usage_routes(struct http_router *rt);

#endif
