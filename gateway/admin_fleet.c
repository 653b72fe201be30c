/* admin_fleet.c - the operator's view of the fleet and the queue (the console polls it every 5 s):
 *
 *   GET /admin/v1/nodes  ?dc=&pool=&state=&after=&limit=  the executors by (dc, pool, id), with their
 *                                                          devices, lease and running jobs
 *   GET /admin/v1/queue  ?tenant=&status=&after=&limit=   every job not ended, across tenants: the
 *                                                          waiting ones in placement order with why they
 *                                                          wait, then the running and paused ones with
 *                                                          their node
 *   GET /admin/v1/pools                                    per dc, pool and device type: nodes by state,
 *                                                          devices and free devices, running jobs; and
 *                                                          the jobs not ended: waiting, running, paused
 *
 * The lists are OpenAI's cursor pages (`after` the last id of the previous page, `limit`, `has_more`,
 * `first_id`, `last_id`; admin_page_run, which the tenant list uses too) read by keyset on the indexes of
 * migration 0045: a page is the `limit` rows
 * after the key the cursor's row holds now, so its cost does not grow with the fleet or the queue. An
 * `after` that names no node or job is a 400.
 *
 * The queue's key is the place the scheduler stored (queue_position, rewritten only when it moved by
 * more than a tenth, see scheduler/service/public_state.c), those without one after them, ties by seq:
 * the order the list always had, now an index. A queue moves while an operator pages it, so a job may
 * show twice or not at all across pages (a cursor job that started running continues the walk among
 * the running ones); each page is in order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin_fleet.h"
#include "db.h"
#include "files_common.h"
#include "server.h"

#define PAGE_DEFAULT 100
#define PAGE_MAX 1000

/* ---- Pages ------------------------------------------------------------------------------------- */

struct fleet_page {
    struct files_page *page;
    const char *what; /* "node", "job": what `after` names */
};

/* An `after` that names nothing is a 400 naming the parameter; the rest is files_page_done's. */
static void fleet_page_done(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct fleet_page *p = arg;
    if (res->ok && res->n == 2 && PQntuples(res->res[0]) == 0) {
        http_reply_error(r, 400, "after", "invalid_value", "after: no such %s: %s", p->what,
                         http_query_param(r, "after"));
        return;
    }
    files_page_done(r, res, p->page);
}

void admin_page_run(struct gw_req *r, const char *what, json_t *(*to_json)(const PGresult *, int), const char *exists,
                    const char *stmt, const char *const *params, int nparams) {
    struct fleet_page *p = http_alloc(r, sizeof *p);
    p->page = files_page_new(r, PAGE_DEFAULT, PAGE_MAX, NULL, to_json);
    if (!p->page) return;
    p->what = what;
    const char **with_fetch = http_alloc(r, (size_t)(nparams + 1) * sizeof *with_fetch);
    memcpy(with_fetch, params, (size_t)nparams * sizeof *params);
    with_fetch[nparams] = p->page->fetch; /* the statement's last parameter: its LIMIT */
    struct db_stmt stmts[] = {{exists, NULL, 1, params}, {stmt, NULL, nparams + 1, with_fetch}};
    int cursor = params[0] != NULL;
    db_transaction(r, stmts + !cursor, 1 + cursor, fleet_page_done, p);
}

/* The query parameter `name`: absent (NULL), or one of `allowed` (NULL-terminated); else answers 400 and
 * returns -1. */
static int enum_param(struct gw_req *r, const char *name, const char *const *allowed, const char **out) {
    *out = http_query_param(r, name);
    if (!*out) return 0;
    char list[128];
    size_t n = 0;
    for (const char *const *a = allowed; *a; a++) {
        if (!strcmp(*a, *out)) return 0;
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", n ? ", " : "", *a);
    }
    http_reply_error(r, 400, name, "invalid_value", "%s: expected one of %s, got \"%s\"", name, list, *out);
    return -1;
}

/* ---- Nodes ------------------------------------------------------------------------------------- */

static json_t *node_json(const PGresult *res, int i) {
    return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:f, s:o}", "object", "node", "id",
                     db_json_string(res, i, 0), "dc", db_json_string(res, i, 1), "pool", db_json_string(res, i, 2),
                     "devices", db_json_value(res, i, 3), "state", db_json_string(res, i, 4), "running_jobs",
                     db_json_value(res, i, 5), "version", db_json_string(res, i, 6), "last_heartbeat",
                     atof(PQgetvalue(res, i, 7)), "registered_at", db_json_integer(res, i, 8));
}

/* A page of nodes after the cursor node $1 (by dc, pool, id; without one after ('', '', ''), before
 * every node, whose id is never empty), filtered by dc $2, pool $3, state $4. RANGE repeats the dc (and
 * pool) filter as equalities the index starts from and stops at: three statements. */
#define NODES_SQL(RANGE)                                                                                               \
    "SELECT n.id, n.dc, n.pool, n.devices, n.state,"                                                                   \
    " coalesce((SELECT json_agg(a.job_id ORDER BY a.job_id) FROM job_attempts a"                                       \
    "   WHERE a.node_id = n.id AND a.ended_at IS NULL), '[]'::json),"                                                  \
    " n.version, n.last_heartbeat, n.registered_at FROM nodes n"                                                       \
    " WHERE (n.dc, n.pool, n.id) > (coalesce((SELECT c.dc FROM nodes c WHERE c.id = $1), ''),"                         \
    "   coalesce((SELECT c.pool FROM nodes c WHERE c.id = $1), ''), coalesce($1, ''))" RANGE                           \
    " AND ($2::text IS NULL OR n.dc = $2) AND ($3::text IS NULL OR n.pool = $3)"                                       \
    " AND ($4::text IS NULL OR n.state = $4) ORDER BY n.dc, n.pool, n.id LIMIT $5"

static void nodes_list(struct gw_req *r) {
    static const char *const states[] = {"ready", "cordoned", "lost", NULL};
    const char *state, *dc = http_query_param(r, "dc"), *pool = http_query_param(r, "pool");
    if (enum_param(r, "state", states, &state) < 0) return;
    const char *params[] = {http_query_param(r, "after"), dc, pool, state};
    admin_page_run(r, "node", node_json, "admin_node_exists",
                   dc && pool ? "admin_nodes_dc_pool"
                   : dc       ? "admin_nodes_dc"
                              : "admin_nodes",
                   params, 4);
}

/* ---- Queue ------------------------------------------------------------------------------------- */

static json_t *queue_json(const PGresult *res, int i) {
    return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "object", "queue.job", "id",
                     db_json_string(res, i, 0), "tenant_id", db_json_string(res, i, 1), "tenant",
                     db_json_string(res, i, 2), "status", db_json_string(res, i, 3), "model", db_json_string(res, i, 4),
                     "priority", db_json_integer(res, i, 5), "queue_position", db_json_integer(res, i, 6),
                     "wait_reason", db_json_string(res, i, 7), "node_id", db_json_string(res, i, 8), "created_at",
                     db_json_integer(res, i, 9), "gpu_types", db_json_value(res, i, 10));
}

/* The queue's key, of the jobs row alias P: started (false first: the waiting ones), the stored place
 * (none last), seq. Migration 0045's indexes hold these expressions, over the jobs not ended. */
#define Q_STARTED(P) "(" P "status IN ('running', 'paused'))"
#define Q_PLACE(P) "coalesce(" P "queue_position, 2147483647)"
#define Q_KEY(P) Q_STARTED(P) ", " Q_PLACE(P) ", " P "seq"
#define Q_CURSOR(EXPR, NONE) "coalesce((SELECT " EXPR " FROM jobs c WHERE c.id = $1), " NONE ")"
/* The key of the cursor job $1; without one, the first of the half $3 (started or not). */
#define Q_AFTER                                                                                                        \
    "(" Q_CURSOR(Q_STARTED("c."), "$3::bool") ", " Q_CURSOR(Q_PLACE("c."), "0") ", " Q_CURSOR("c.seq", "0") ")"
/* The tenant $5 names, by id or name. */
#define Q_TENANT "(SELECT id FROM tenants WHERE id = $5 OR name = $5 ORDER BY id = $5 DESC LIMIT 1)"
#define Q_JOB_ACTIVE "j.status IN ('validating_files', 'queued', 'running', 'paused')"
#define Q_JOB_KEY Q_KEY("j.")
#define Q_JOB_STARTED Q_STARTED("j.")

/* A page of the queue after Q_AFTER, of status $2 (then no further than its half, $4), of tenant $5.
 * RANGE repeats the tenant filter as the equality the tenant index starts from, ORDER leads with it.
 * The bound $4 is one inequality, not a BETWEEN with $3: the generic plan guesses a range of two
 * parameters to hold 0.5% of the rows, and then read every row of the tenant and sorted them (16 ms
 * for a page of 2,100 jobs) rather than walk the index. */
#define QUEUE_SQL(RANGE, ORDER)                                                                                        \
    "SELECT j.id, j.tenant_id, t.name, j.status, j.model, j.priority, j.queue_position, j.wait_reason,"                \
    " j.node_id, j.created_at, coalesce(j.whet->'gpu_types', 'null'::jsonb)"                                           \
    " FROM jobs j JOIN tenants t ON t.id = j.tenant_id WHERE " Q_JOB_ACTIVE RANGE " AND (" Q_JOB_KEY ") > " Q_AFTER    \
    " AND " Q_JOB_STARTED " <= $4::bool"                                                                               \
    " AND ($2::text IS NULL OR j.status = $2) AND ($5::text IS NULL OR j.tenant_id = " Q_TENANT ")"                    \
    " ORDER BY " ORDER Q_JOB_KEY " LIMIT $6"

static void queue_list(struct gw_req *r) {
    static const char *const statuses[] = {"validating_files", "queued", "running", "paused", NULL};
    const char *status, *tenant = http_query_param(r, "tenant");
    if (enum_param(r, "status", statuses, &status) < 0) return;
    int started = status && (!strcmp(status, "running") || !strcmp(status, "paused"));
    /* $3 and $4: the halves of the queue the status is in, started or not */
    const char *params[] = {http_query_param(r, "after"), status, status && started ? "true" : "false",
                            status && !started ? "false" : "true", tenant};
    admin_page_run(r, "job", queue_json, "admin_job_exists", tenant ? "admin_queue_tenant" : "admin_queue", params, 5);
}

/* ---- Pools ------------------------------------------------------------------------------------- */

/* Per dc, pool and device type, grouped over the fleet in one pass: nodes by state, their devices,
 * the ready nodes' devices that no running attempt holds (by its device mask), and running attempts.
 * 15 ms at 10,000 nodes and 5,000 running jobs (psql), for a summary the console reads every 5 s. A
 * kept summary, as sizing_pools (migration 0037) is, would have to follow every attempt's start and end
 * for the free devices: writes on the scheduler's path, on a few hot rows, to save that read. */
#define POOLS_SQL                                                                                                      \
    "SELECT n.dc, n.pool, n.device_type, count(*) FILTER (WHERE n.state = 'ready'),"                                   \
    " count(*) FILTER (WHERE n.state = 'cordoned'), count(*) FILTER (WHERE n.state = 'lost'), sum(n.gpus),"            \
    " coalesce(sum(greatest(n.gpus - coalesce(a.held, 0), 0)) FILTER (WHERE n.state = 'ready'), 0),"                   \
    " coalesce(sum(a.jobs), 0)"                                                                                        \
    " FROM nodes n LEFT JOIN (SELECT node_id, count(*) AS jobs, sum(bit_count(gpu_mask::bit(32))) AS held"             \
    "   FROM job_attempts WHERE ended_at IS NULL GROUP BY node_id) a ON a.node_id = n.id"                              \
    " GROUP BY n.dc, n.pool, n.device_type ORDER BY n.dc, n.pool, n.device_type"

/* The jobs not ended: waiting (validating_files or queued), running, paused. Every tenant's active jobs
 * are kept counted (migration 0010), so only the started ones are read (jobs_active), not the queue:
 * 35 ms to count 105,000 jobs by status at 100,000 waiting, against 5 ms. */
#define JOB_COUNTS_SQL                                                                                                 \
    "SELECT (SELECT coalesce(sum(active), 0) FROM tenant_active_jobs) - count(*),"                                     \
    " count(*) FILTER (WHERE status = 'running'), count(*) FILTER (WHERE status = 'paused')"                           \
    " FROM jobs WHERE status IN ('running', 'paused')"

static json_t *pool_json(const PGresult *res, int i) {
    return json_pack("{s:s, s:o, s:o, s:o, s:{s:o, s:o, s:o}, s:o, s:o, s:o}", "object", "pool", "dc",
                     db_json_string(res, i, 0), "pool", db_json_string(res, i, 1), "device_type",
                     db_json_string(res, i, 2), "nodes", "ready", db_json_integer(res, i, 3), "cordoned",
                     db_json_integer(res, i, 4), "lost", db_json_integer(res, i, 5), "devices",
                     db_json_integer(res, i, 6), "free_devices", db_json_integer(res, i, 7), "running_jobs",
                     db_json_integer(res, i, 8));
}

static void pools_done(struct gw_req *r, const struct db_result *res, void *arg) {
    (void)arg;
    if (db_reply_failed(r, res)) return;
    const PGresult *jobs = res->res[1];
    json_t *counts = json_pack("{s:o, s:o, s:o}", "waiting", db_json_integer(jobs, 0, 0), "running",
                               db_json_integer(jobs, 0, 1), "paused", db_json_integer(jobs, 0, 2));
    http_reply_json(r, 200,
                    json_pack("{s:s, s:o, s:o, s:b}", "object", "list", "data",
                              db_rows_json(res->res[0], -1, pool_json), "jobs", counts, "has_more", 0));
}

static void pools_list(struct gw_req *r) {
    struct db_stmt stmts[] = {{"admin_pools", NULL, 0, NULL}, {"admin_job_counts", NULL, 0, NULL}};
    db_transaction(r, stmts, 2, pools_done, NULL);
}

void admin_fleet_routes(struct http_router *rt) {
    db_prepare("admin_node_exists", "SELECT 1 FROM nodes WHERE id = $1");
    db_prepare("admin_nodes", NODES_SQL(""));
    db_prepare("admin_nodes_dc", NODES_SQL(" AND n.dc = $2"));
    db_prepare("admin_nodes_dc_pool", NODES_SQL(" AND n.dc = $2 AND n.pool = $3"));
    db_prepare("admin_job_exists", "SELECT 1 FROM jobs WHERE id = $1");
    db_prepare("admin_queue", QUEUE_SQL("", ""));
    db_prepare("admin_queue_tenant", QUEUE_SQL(" AND j.tenant_id = " Q_TENANT, "j.tenant_id, "));
    db_prepare("admin_pools", POOLS_SQL);
    db_prepare("admin_job_counts", JOB_COUNTS_SQL);
    http_route(rt, "GET", "/admin/v1/nodes", nodes_list, HTTP_ROUTE_ADMIN, "admin_nodes");
    http_route(rt, "GET", "/admin/v1/queue", queue_list, HTTP_ROUTE_ADMIN, "admin_queue");
    http_route(rt, "GET", "/admin/v1/pools", pools_list, HTTP_ROUTE_ADMIN, "admin_pools");
}
