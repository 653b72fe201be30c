/* migrate.c - see migrate.h. */
#include "migrate.h"

#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "pg.h"

/* Any constant unique to whet; migrators of the same database wait for each other on it. */
#define MIGRATE_LOCK_KEY "7265746877"

int whet_schema_latest(void) { return whet_migrations_count ? whet_migrations[whet_migrations_count - 1].version : 0; }

int whet_schema_version(PGconn *conn, struct whet_err *err) {
    PGresult *res = whet_pg_query(conn, "SELECT to_regclass('whet_schema_migrations') IS NOT NULL", 0, NULL, err);
    if (!res) return -1;
    int exists = PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    if (!exists) return 0;
    res = whet_pg_query(conn, "SELECT coalesce(max(version), 0) FROM whet_schema_migrations", 0, NULL, err);
    if (!res) return -1;
    int v = atoi(PQgetvalue(res, 0, 0));
    PQclear(res);
    return v;
}

static int apply_one(PGconn *conn, const struct whet_migration *m, struct whet_err *err) {
    char version[16];
    snprintf(version, sizeof version, "%d", m->version);
    const char *params[] = {version, m->name};
    if (whet_pg_exec(conn, "BEGIN", 0, NULL, err) < 0) return -1;
    if (whet_pg_exec(conn, m->sql, 0, NULL, err) < 0 ||
        whet_pg_exec(conn, "INSERT INTO whet_schema_migrations (version, name) VALUES ($1, $2)", 2, params, err) < 0 ||
        whet_pg_exec(conn, "COMMIT", 0, NULL, err) < 0) {
        whet_err_prefix(err, "migration %04d_%s", m->version, m->name);
        PQclear(PQexec(conn, "ROLLBACK"));
        return -1;
    }
    return 0;
}

int whet_migrate(PGconn *conn, int *applied, struct whet_err *err) {
    *applied = 0;
    if (whet_pg_exec(conn, "SELECT pg_advisory_lock(" MIGRATE_LOCK_KEY ")", 0, NULL, err) < 0) return -1;
    int rc = -1;
    if (whet_pg_exec(conn,
                     "CREATE TABLE IF NOT EXISTS whet_schema_migrations ("
                     " version integer PRIMARY KEY, name text NOT NULL,"
                     " applied_at timestamptz NOT NULL DEFAULT now())",
                     0, NULL, err) < 0)
        goto out;
    int current = whet_schema_version(conn, err);
    if (current < 0) goto out;
    int latest = whet_schema_latest();
    if (current > latest) {
        whet_errf(err, "database schema is at version %d, newer than this binary knows (%d)", current, latest);
        whet_err_hint(err, "run a whet binary at least as new as the one that migrated this database");
        goto out;
    }
    for (int i = 0; i < whet_migrations_count; i++) {
        const struct whet_migration *m = &whet_migrations[i];
        if (m->version <= current) continue;
        if (apply_one(conn, m, err) < 0) goto out;
        log_info("msg=\"migration applied\" version=%d name=%s", m->version, m->name);
        (*applied)++;
    }
    rc = 0;
out:
    PQclear(PQexec(conn, "SELECT pg_advisory_unlock(" MIGRATE_LOCK_KEY ")"));
    return rc;
}
