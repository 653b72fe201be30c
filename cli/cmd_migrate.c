/* cmd_migrate.c - `whet migrate`: bring the database schema up to this binary's version. */
#include <getopt.h>
#include <stdio.h>

#include "commands.h"
#include "data_keys.h"
#include "env.h"
#include "migrate.h"
#include "pg.h"

static void migrate_usage(FILE *out) {
    fprintf(out,
            "usage: whet migrate [--data-dir DIR] [--status]\n\n"
            "Applies the missing migrations (each in a transaction, recorded in whet_schema_migrations) to\n"
            "the database in WHET_DATABASE_URL. A second run is a no-op; a database newer than this binary\n"
            "is refused. With WHET_DATA_KEY_FILE set it then rewraps every tenant data key that is not\n"
            "wrapped under the keyring's current (last) operator key (README: encryption at rest).\n\n"
            "  --data-dir DIR  read DIR/whet.env (written by `whet up`) for the database URL\n"
            "  --status        print the database's schema version and this binary's, change nothing\n");
}

static int cmd_migrate(int argc, char **argv) {
    static const struct option opts[] = {
        {"data-dir", required_argument, 0, 'd'}, {"status", no_argument, 0, 's'}, {"help", no_argument, 0, 'h'}, {0}};
    const char *data_dir = NULL;
    int status_only = 0, c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': data_dir = optarg; break;
        case 's': status_only = 1; break;
        case 'h': migrate_usage(stdout); return 0;
        default: migrate_usage(stderr); return 2;
        }
    }
    struct whet_err err;
    const char *url;
    if (whet_env_load_data_dir(data_dir, &err) < 0 || !(url = whet_database_url(&err))) {
        whet_err_report("whet migrate", &err);
        return 1;
    }
    PGconn *conn = whet_pg_connect(url, &err);
    if (!conn) {
        whet_err_report("whet migrate", &err);
        return 1;
    }
    int rc = 0, applied = 0;
    if (status_only) {
        int v = whet_schema_version(conn, &err);
        if (v < 0) rc = 1;
        else printf("database schema version %d; this binary knows up to %d\n", v, whet_schema_latest());
    } else if (whet_migrate(conn, &applied, &err) < 0) {
        rc = 1;
    } else {
        printf("whet migrate: %d migration%s applied; schema at version %d\n", applied, applied == 1 ? "" : "s",
               whet_schema_latest());
        struct whet_keyring *kr = NULL;
        int rewrapped = 0;
        if (whet_keyring_from_env(&kr, &err) < 0 || (kr && whet_data_keys_rewrap(conn, kr, &rewrapped, &err) < 0))
            rc = 1;
        else if (kr)
            printf("whet migrate: %d tenant data key%s rewrapped under operator key \"%s\"\n", rewrapped,
                   rewrapped == 1 ? "" : "s", whet_keyring_current(kr));
        whet_keyring_free(kr);
    }
    if (rc) whet_err_report("whet migrate", &err);
    PQfinish(conn);
    return rc;
}
WHET_COMMAND("migrate", cmd_migrate, "apply database migrations")
