/* cmd_tenant.c - `whet tenant`: operator commands for tenants (create prints the API key once, alone on
 * stdout). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "commands.h"
#include "crypto.h"
#include "env.h"
#include "pg.h"

static void tenant_usage(FILE *out) {
    fprintf(out,
            "usage: whet tenant create NAME [--weight W] [--data-dir DIR]\n"
            "       whet tenant list [--data-dir DIR]\n\n"
            "create  adds a tenant and prints its first API key alone on stdout, for KEY=$(whet tenant create NAME)\n"
            "        (shown once; only its SHA-256 is stored); what it did goes to stderr\n"
            "list    prints the tenants as JSON lines\n\n"
            "  --weight W      the tenant's share of idle capacity relative to others (default 1)\n"
            "  --data-dir DIR  read DIR/whet.env (written by `whet up`) for the database URL\n");
}

static int tenant_create(PGconn *conn, const char *name, const char *weight, struct whet_err *err) {
    char tenant_id[32], key_id[32], key[AUTH_API_KEY_LEN + 1], prefix[AUTH_KEY_PREFIX_LEN + 1];
    uint8_t hash[32];
    char hash_hex[65 + 2] = "\\x";
    whet_random_id("tenant-", 16, tenant_id);
    whet_random_id("key-", 16, key_id);
    auth_api_key_new(key);
    auth_api_key_hash(key, hash);
    whet_hex_encode(hash, 32, hash_hex + 2);
    memcpy(prefix, key, AUTH_KEY_PREFIX_LEN);
    prefix[AUTH_KEY_PREFIX_LEN] = 0;

    const char *tparams[] = {tenant_id, name, weight};
    const char *kparams[] = {key_id, tenant_id, hash_hex, prefix};
    if (whet_pg_exec(conn, "BEGIN", 0, NULL, err) < 0) return -1;
    PGresult *res = PQexecParams(conn, "INSERT INTO tenants (id, name, weight) VALUES ($1, $2, $3)", 3, NULL, tparams,
                                 NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        if (!strcmp(whet_pg_sqlstate(res), "23505")) {
            whet_errf(err, "tenant \"%s\" already exists", name);
            whet_err_hint(err, "create an API key for it with the admin API");
        } else if (!strcmp(whet_pg_sqlstate(res), "23514")) {
            whet_errf(err, "invalid tenant name \"%s\" or weight", name);
            whet_err_hint(err, "names are 1-64 of [A-Za-z0-9_.-] starting with a letter or digit, weights are "
                               "positive");
        } else {
            whet_pg_error(res, conn, err);
        }
        PQclear(res);
        PQclear(PQexec(conn, "ROLLBACK"));
        return -1;
    }
    PQclear(res);
    if (whet_pg_exec(conn, "INSERT INTO api_keys (id, tenant_id, key_hash, key_prefix) VALUES ($1, $2, $3, $4)", 4,
                     kparams, err) < 0 ||
        whet_pg_exec(conn, "COMMIT", 0, NULL, err) < 0) {
        PQclear(PQexec(conn, "ROLLBACK"));
        return -1;
    }
    /* The key alone on stdout, for KEY=$(whet tenant create NAME); what happened on stderr. */
    fprintf(stderr, "whet tenant: tenant %s (%s) created; its API key follows (shown once, only its SHA-256 is "
                    "stored)\n", name, tenant_id);
    printf("%s\n", key);
    fprintf(stderr, "hint: call the API with the header `Authorization: Bearer <the key>`\n");
    return 0;
}

static int tenant_list(PGconn *conn, struct whet_err *err) {
    PGresult *res = whet_pg_query(conn,
                                  "SELECT json_build_object('id', id, 'name', name, 'weight', weight, 'disabled', "
                                  "disabled, 'created_at', created_at) FROM tenants ORDER BY created_at, name",
                                  0, NULL, err);
    if (!res) return -1;
    for (int i = 0; i < PQntuples(res); i++) puts(PQgetvalue(res, i, 0));
    PQclear(res);
    return 0;
}

static int cmd_tenant(int argc, char **argv) {
    static const struct option opts[] = {{"data-dir", required_argument, 0, 'd'},
                                         {"weight", required_argument, 0, 'w'},
                                         {"help", no_argument, 0, 'h'},
                                         {0}};
    const char *data_dir = NULL, *weight = "1";
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': data_dir = optarg; break;
        case 'w': weight = optarg; break;
        case 'h': tenant_usage(stdout); return 0;
        default: tenant_usage(stderr); return 2;
        }
    }
    const char *sub = optind < argc ? argv[optind] : NULL;
    if (!sub || (!strcmp(sub, "create") && optind + 2 != argc) || (!strcmp(sub, "list") && optind + 1 != argc) ||
        (strcmp(sub, "create") && strcmp(sub, "list"))) {
        tenant_usage(stderr);
        return 2;
    }
    char *end;
    double w = strtod(weight, &end);
    if (*end || !(w > 0)) {
        fprintf(stderr, "whet tenant: --weight must be a positive number, got \"%s\"\n", weight);
        return 2;
    }
    struct whet_err err;
    const char *url;
    PGconn *conn = NULL;
    int rc = 1;
    if (whet_env_load_data_dir(data_dir, &err) < 0 || !(url = whet_database_url(&err)) ||
        !(conn = whet_pg_connect(url, &err)))
        goto out;
    rc = (!strcmp(sub, "create") ? tenant_create(conn, argv[optind + 1], weight, &err) : tenant_list(conn, &err)) < 0;
out:
    if (rc) whet_err_report("whet tenant", &err);
    PQfinish(conn);
    return rc;
}
WHET_COMMAND("tenant", cmd_tenant, "create and list tenants (operator)")
