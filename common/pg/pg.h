/* pg.h - blocking PostgreSQL helpers for the command-line tools and the scheduler.
 *
 * The gateway talks to PostgreSQL asynchronously inside its event loops (gateway/db.h); everything
 * else is a short-lived command or a single-threaded service loop, for which these plain calls,
 * with errors turned into whet_err messages, are the right tool. */
#ifndef WHET_PG_H
#define WHET_PG_H

#include <libpq-fe.h>

#include "background.h"
#include "util.h"

/* The conninfo in WHET_DATABASE_URL, or NULL with an error that says how to set it. */
const char *whet_database_url(struct whet_err *err);
/* Connects (and checks the connection); NULL on failure. */
PGconn *whet_pg_connect(const char *conninfo, struct whet_err *err);
/* Connects without blocking the thread's stop (background.h): NULL with *stopping set when it was told to
 * stop, NULL with err set when the connection failed. */
PGconn *whet_pg_connect_stoppable(const char *conninfo, const struct background *b, int *stopping,
                                  struct whet_err *err);
/* whet_pg_query() on a background thread (background.h): a statement that waits (on a lock) is cancelled when
 * the thread is told to stop, returning NULL with *stopping set. */
PGresult *whet_pg_query_stoppable(PGconn *conn, const char *sql, int nparams, const char *const *params,
                                  const struct background *b, int *stopping, struct whet_err *err);
/* Has whet_pg_query() prepare each distinct SQL text it runs with parameters on this connection on its
 * first use, and execute it by name after: PostgreSQL then parses, analyzes and plans it once a session
 * (taking the generic plan after five runs when it costs no more, as PL/pgSQL and the gateway's statements
 * do) instead of on every call. For a long-lived connection whose statements repeat (the scheduler's
 * handlers). 0, or -1 when libpq could not attach the cache. */
int whet_pg_prepare_statements(PGconn *conn);
/* Runs SQL with text parameters; returns the result (free with PQclear) when the command succeeded,
 * else NULL with PostgreSQL's primary message (and detail) in err. */
PGresult *whet_pg_query(PGconn *conn, const char *sql, int nparams, const char *const *params, struct whet_err *err);
/* Same, for commands whose result is not needed (several statements allowed when nparams is 0). */
int whet_pg_exec(PGconn *conn, const char *sql, int nparams, const char *const *params, struct whet_err *err);
/* Copies PostgreSQL's error out of a failed result. */
int whet_pg_error(const PGresult *res, PGconn *conn, struct whet_err *err);
/* The SQLSTATE of a failed result ("23505" for unique violations), or "" */
const char *whet_pg_sqlstate(const PGresult *res);

#endif
