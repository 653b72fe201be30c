/* health.c - the unauthenticated operational endpoints: /healthz (the process answers), /readyz (and
 * its database does: one round trip on this loop's tenant pool) and /metrics (Prometheus text). */
#include <stdlib.h>

#include "db.h"
#include "server.h"

static void healthz(struct gw_req *r) { http_reply_json(r, 200, json_pack("{s:s}", "status", "ok")); }

static void readyz_done(struct gw_req *r, const struct db_result *res, void *arg) {
    if (!res->ok) {
        http_reply_unavailable(r, 1, "the database");
        return;
    }
    http_reply_json(r, 200, json_pack("{s:s, s:s}", "status", "ready", "database", "ok"));
}

static void readyz(struct gw_req *r) { db_query(r, "health_ping", 0, NULL, readyz_done, NULL); }

static void metrics(struct gw_req *r) {
    size_t len;
    char *text = metrics_render(r->thread->gw->router, &len);
    http_reply_bytes(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

void health_routes(struct http_router *rt) {
    db_prepare("health_ping", "SELECT 1");
    http_route(rt, "GET", "/healthz", healthz, HTTP_ROUTE_PUBLIC, NULL);
    http_route(rt, "GET", "/readyz", readyz, HTTP_ROUTE_PUBLIC, NULL);
    http_route(rt, "GET", "/metrics", metrics, HTTP_ROUTE_PUBLIC, NULL);
}
