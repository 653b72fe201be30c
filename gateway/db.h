/* db.h - PostgreSQL from inside the gateway's event loops: asynchronous, pipelined, per thread.
 *
 * Each event-loop thread owns two small pools of non-blocking libpq connections registered with its
 * loop (the technique of TechEmpower's h2o entry): the tenant pool, whose connections run
 * `SET ROLE whet_app` once at connect time so row-level security applies, and a smaller operator pool
 * for /admin/v1 (the migrating role, no row-level security). Connections run in pipeline mode: many
 * queries are in flight on one connection, and a query waits in the thread's queue only while every
 * connection has its pipeline full.
 *
 * Tenant scoping is automatic: a query submitted for a tenant request is preceded, on its
 * connection, by `set_config('whet.tenant_id', <tenant>, false)` whenever that connection last served
 * another tenant (cached per connection, so the common case costs nothing). Handlers still filter by
 * tenant_id in every WHERE clause; the database's policy is the second wall.
 *
 * Prepared statements are declared once, before the gateway starts, with db_prepare() (usually from a
 * resource's `<resource>_routes()` function, which runs before any connection opens); every
 * connection prepares all of them when it connects (and again after a reconnect). A statement that
 * does not prepare (a typo in its SQL) is logged once at startup ("statement does not prepare") and
 * only its own queries fail.
 *
 *     db_prepare("jobs_get", "SELECT id, status, ... FROM jobs WHERE tenant_id = $1 AND id = $2");
 *     ...
 *     const char *p[] = {http_tenant_id(r), http_path_param(r, "id")};
 *     db_query(r, "jobs_get", 2, p, jobs_get_done, NULL);
 *
 * Several statements that must succeed or fail together (a create that writes several rows) go in
 * one db_transaction(): they run in order between two pipeline syncs, which PostgreSQL executes as
 * one implicit transaction; when one fails, the later ones are not run (PGRES_PIPELINE_ABORTED) and
 * nothing is committed. The statements cannot see each other's results on the client side, so
 * generate ids up front (whet_random_id) and pass them as parameters, or chain with SQL (CTEs,
 * INSERT ... SELECT).
 *
 * Outages: when PostgreSQL is unreachable (a restart), queries fail fast with `unavailable` set and
 * the handler answers 503 (http_reply_db_error does it); connections are re-established in the
 * background (every 100 ms at first, then every 2 s) and every statement is prepared again. Nothing
 * crashes. A statement count outside 1..DB_TX_MAX is a programming error: nothing runs and the
 * callback sees a failure (SQLSTATE XX000), which http_reply_db_error answers as a 500. */
#ifndef WHET_GATEWAY_DB_H
#define WHET_GATEWAY_DB_H

#include <libpq-fe.h>

#include "http.h"

#define DB_TX_MAX 16 /* statements in one db_transaction */

/* Declares a prepared statement (name unique, SQL with $1..$n text parameters). Call before
 * gateway_run()/gateway_start(), from the main thread; the text must stay valid (a literal). */
void db_prepare(const char *name, const char *sql);
/* The same, for a statement that only reads (no row locks, no writes, nothing but STABLE functions). Requests
 * of every tenant share a transaction (db.c's segments); one taking write locks, such as the active-job
 * counter's row a create's commit updates, shares it only with others of its tenant, or with reads. */
void db_prepare_read(const char *name, const char *sql);

/* One statement of a transaction: either a prepared statement's `name` or plain `sql` (then `name`
 * is NULL). Parameters are text (NULL for SQL NULL) and are copied at submission: they may live on
 * the caller's stack. */
struct db_stmt {
    const char *name;
    const char *sql;
    int nparams;
    const char *const *params;
};

/* What a callback receives. The results belong to the database layer and are freed (PQclear) after
 * the callback returns: copy what you need (jansson copies strings). */
struct db_result {
    int ok;            /* every statement returned PGRES_COMMAND_OK or PGRES_TUPLES_OK */
    int unavailable;   /* the database could not be reached or the connection broke: answer 503 */
    int failed;        /* index of the first statement that failed, -1 when ok or unavailable; a failed
                          commit (a deferred trigger raised) is the last statement's failure */
    const char *sqlstate; /* SQLSTATE of the failure ("23505" unique violation, ...), "" otherwise */
    const char *message;  /* PostgreSQL's primary message of the failure, for logs, "" otherwise */
    int n;             /* number of statements */
    PGresult *const *res; /* res[i] for statement i: NULL when unavailable; after a failed statement the
                             later ones hold PGRES_PIPELINE_ABORTED results */
};

/* Called on the request's event loop with the outcome. Not called when the client went away in the
 * meantime (the results are simply dropped), so `arg` should come from the request's pool. */
typedef void (*db_callback)(struct gw_req *r, const struct db_result *res, void *arg);

/* Submits one statement for request `r`. `stmt` names a statement declared with db_prepare(); to run
 * plain SQL use db_query_sql(). The connection pool and tenant scope follow from the request: operator
 * requests use the operator pool, tenant requests the tenant pool scoped to http_tenant_id(r), and
 * unauthenticated requests (authentication itself) the tenant pool with no tenant set.
 * The callback always runs later, from the event loop, never inside this call. */
void db_query(struct gw_req *r, const char *stmt, int nparams, const char *const *params, db_callback cb, void *arg);
void db_query_sql(struct gw_req *r, const char *sql, int nparams, const char *const *params, db_callback cb, void *arg);
/* Runs 1..DB_TX_MAX statements as one transaction (see above); res->res[i] matches stmts[i]. */
void db_transaction(struct gw_req *r, const struct db_stmt *stmts, int n, db_callback cb, void *arg);

/* Answers a failed result: 503 (with retry-after) when the database is unavailable; 409 for a
 * unique violation (23505); 404 for a foreign key violation (23503: a referenced object does not
 * exist for this tenant); 400 for invalid input values (class 22, check violations 23514); otherwise
 * 500 "internal error" (logged with PostgreSQL's message and the request id). */
void http_reply_db_error(struct gw_req *r, const struct db_result *res);

/* The usual start of a callback: answers a failed result (http_reply_db_error) and returns 1; returns
 * 0 when res->ok. */
int db_reply_failed(struct gw_req *r, const struct db_result *res);

/* For the callback of a lookup: answers a failed result (http_reply_db_error) or one whose first
 * statement returned no row (http_reply_not_found: "no such WHAT: ID", ID the path parameter named
 * `param`). Returns 1 when it answered, 0 when res->res[0] holds a row to answer with. */
int db_reply_unless_found(struct gw_req *r, const struct db_result *res, const char *what, const char *param);

/* The JSON of a result's rows, in order, made by to_json; `max` of them at most (-1: all). */
json_t *db_rows_json(const PGresult *rows, int max, json_t *(*to_json)(const PGresult *res, int row));

/* Small accessors for result rows (row-major, text format). */
static inline const char *db_value(const PGresult *res, int row, int col) {
    return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}
/* The value as a JSON string, or JSON null for SQL NULL. */
json_t *db_json_string(const PGresult *res, int row, int col);
/* The value as a JSON integer (bigint text), or JSON null for SQL NULL. */
json_t *db_json_integer(const PGresult *res, int row, int col);
/* A jsonb/json column parsed into JSON, or JSON null for SQL NULL (and for unparsable text). */
json_t *db_json_value(const PGresult *res, int row, int col);
/* Column index by name, or -1. */
static inline int db_col(const PGresult *res, const char *name) { return PQfnumber(res, name); }

#endif
