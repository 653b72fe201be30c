/* audit.h - the audit log of operator and security-relevant actions (migration 0014): every answer
 * passes audit_observe(), which records a row when it is the success of an audited route (tenants, API
 * keys, quotas, budgets, price books, checkpoint file downloads) or the failed authentication that
 * takes one client address to AUDIT_AUTH_FAILURES in a minute; GET /admin/v1/audit reads them. */
#ifndef WHET_GATEWAY_AUDIT_H
#define WHET_GATEWAY_AUDIT_H

#include <stddef.h>

#include "http.h"

#define AUDIT_AUTH_FAILURES 5 /* 401s from one address within AUDIT_AUTH_WINDOW_S that make one entry */
#define AUDIT_AUTH_WINDOW_S 60

/* Called by http_reply_raw() for every answer not yet sent. The success of an audited route is held:
 * its row is written first and the answer (`body` and `content_type` live in the request's pool) goes
 * out once the row is committed, so a client that has its answer finds the entry; returns 1 then. A
 * 401 is counted against its client address (and recorded at the threshold). Returns 0 when the
 * caller answers as usual. When the row cannot be written the answer still goes out (the action has
 * happened) and the gateway logs `audit entry not written`. */
int audit_reply(struct gw_req *r, int status, const char *content_type, const char *body, size_t len);
/* A streamed answer (a checkpoint file download) has started: its row is written alongside. */
void audit_stream_started(struct gw_req *r, int status);

void audit_routes(struct http_router *rt);

#endif
