/* local_pg.h - the private PostgreSQL cluster `whet up` owns when WHET_DATABASE_URL is not set.
 *
 * The cluster lives in DIR/pg (data and unix socket), listens on 127.0.0.1 on a port remembered in
 * DIR/pg/whet.port, and holds one database, `whet`. PostgreSQL refuses to run as root, so when whet
 * runs as root the server programs run as the `postgres` user and the directory is handed to it. */
#ifndef WHET_CLI_LOCAL_PG_H
#define WHET_CLI_LOCAL_PG_H

#include "util.h"

struct local_pg {
    char *dir;      /* DIR/pg */
    char *bin;      /* /usr/lib/postgresql/N/bin */
    int port;
    char *url;      /* conninfo URI of the `whet` database */
    int started;    /* this process started the server (and stops it) */
};

/* initdb when needed, start the server (or find it already running), create the database. */
int local_pg_start(struct local_pg *pg, const char *data_dir, struct whet_err *err);
/* A TCP port free on 127.0.0.1 just now (-1 when none): for children `whet up` starts. */
int local_free_port(void);
/* Fast shutdown of a server this process started; frees the struct's strings. */
void local_pg_stop(struct local_pg *pg);

#endif
