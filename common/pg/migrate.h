/* migrate.h - the database schema, versioned.
 *
 * migrations/NNNN_name.sql are compiled into the binary (cmake/embed_migrations.cmake). whet_migrate
 * applies the missing ones in order, each in its own transaction, recording each in
 * whet_schema_migrations; concurrent migrators serialize on an advisory lock. A database whose schema
 * is newer than the binary is refused, so an old binary never writes into a schema it does not know. */
#ifndef WHET_MIGRATE_H
#define WHET_MIGRATE_H

#include <libpq-fe.h>

#include "util.h"

struct whet_migration {
    int version;
    const char *name;
    const char *sql;
};

extern const struct whet_migration whet_migrations[];
extern const int whet_migrations_count;

/* Applies what is missing; *applied receives how many were applied (0 on a current database). */
int whet_migrate(PGconn *conn, int *applied, struct whet_err *err);
/* The schema version the database is at (0 when none), or -1 with err. */
int whet_schema_version(PGconn *conn, struct whet_err *err);
/* The newest version this binary knows. */
int whet_schema_latest(void);

#endif
