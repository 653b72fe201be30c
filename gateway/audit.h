/* audit.h - the audit log of operator and security-relevant actions (migration 0014): every answer
 * passes audit_observe(), which records a row when it is the success of an audited route (tenants, API
 * keys, quotas, budgets, price books, checkpoint file downloads) or the failed authentication that
 * takes one client address past AUDIT_AUTH_FAILURES in a minute; GET /admin/v1/audit reads them. */
#ifndef WHET_GATEWAY_AUDIT_H
#define WHET_GATEWAY_AUDIT_H

#include <stddef.h>

#include "http.h"

#define AUDIT_AUTH_FAILURES 5 /* 401s from one address within AUDIT_AUTH_WINDOW_S that make one entry */
#define AUDIT_AUTH_WINDOW_S 60

/* Called once per answer, as it begins (http.c); `body` is the answer's body, NULL for a stream. The
 * row is written on the request's database pool after the answer has gone out, so a client reading
 * the log right after an action may have to wait a moment for it. */
void audit_observe(struct gw_req *r, int status, const char *body, size_t len);

void audit_routes(struct http_router *rt);

#endif
