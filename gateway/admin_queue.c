/* admin_queue.c - GET /admin/v1/queue: the operator's view of every job that has not ended, across tenants,
 * in placement order (queue_position, which the scheduler's cycle writes), with why each waits; the
 * running and paused ones after them with the node they run on. The console's operator queue page. */
#include "admin_queue.h"

#include <stdlib.h>

#include "db.h"

static void queue_done(struct gw_req *r, const struct db_result *res, void *arg) {
    (void)arg;
    if (db_reply_failed(r, res)) return;
    const PGresult *pr = res->res[0];
    json_t *data = json_array();
    for (int i = 0; i < PQntuples(pr); i++)
        json_array_append_new(data, json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "object",
                                              "queue.job", "id", db_json_string(pr, i, 0), "tenant_id",
                                              db_json_string(pr, i, 1), "tenant", db_json_string(pr, i, 2), "status",
                                              db_json_string(pr, i, 3), "model", db_json_string(pr, i, 4), "priority",
                                              db_json_integer(pr, i, 5), "queue_position", db_json_integer(pr, i, 6),
                                              "wait_reason", db_json_string(pr, i, 7), "node_id",
                                              db_json_string(pr, i, 8), "created_at", db_json_integer(pr, i, 9),
                                              "gpu_types", db_json_value(pr, i, 10)));
    http_reply_json(r, 200, json_pack("{s:s, s:o, s:b}", "object", "list", "data", data, "has_more", 0));
}

static void queue_list(struct gw_req *r) { db_query(r, "admin_queue", 0, NULL, queue_done, NULL); }

void admin_queue_routes(struct http_router *rt) {
    /* Waiting jobs first, in the order placement will consider them; at most 1000 (a queue longer
     * than that is an incident, and its head is what an operator acts on). */
    db_prepare("admin_queue",
               "SELECT j.id, j.tenant_id, t.name, j.status, j.model, j.priority, j.queue_position, j.wait_reason,"
               " j.node_id, j.created_at, coalesce(j.whet->'gpu_types', 'null'::jsonb)"
               " FROM jobs j JOIN tenants t ON t.id = j.tenant_id"
               " WHERE j.status IN ('validating_files', 'queued', 'running', 'paused')"
               " ORDER BY j.status NOT IN ('validating_files', 'queued'), j.queue_position NULLS LAST, j.seq"
               " LIMIT 1000");
    http_route(rt, "GET", "/admin/v1/queue", queue_list, HTTP_ROUTE_ADMIN, "admin_queue");
}
