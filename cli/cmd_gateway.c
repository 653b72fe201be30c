/* cmd_gateway.c - `whet gateway`: run the HTTP gateway (gateway/gateway.h) until SIGINT/SIGTERM. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "commands.h"
#include "env.h"
#include "gateway.h"
#include "graders.h"
#include "log.h"

static void gateway_usage(FILE *out) {
    fprintf(out,
            "usage: whet gateway [--http HOST:PORT] [--threads N] [--data-dir DIR]\n\n"
            "Serves the OpenAI-compatible tenant API (/v1), the operator API (/admin/v1), /healthz, /readyz and\n"
            "/metrics until SIGINT or SIGTERM, then stops gracefully. The database comes from WHET_DATABASE_URL;\n"
            "JWT settings from WHET_JWT_ALG, WHET_JWT_KEY, WHET_JWT_ISSUER, WHET_JWT_AUDIENCE.\n\n"
            "  --http HOST:PORT  address to listen on (default $WHET_HTTP, else 127.0.0.1:8080; port 0 picks one)\n"
            "  --threads N       event-loop threads (default $WHET_GATEWAY_THREADS, else one per core)\n"
            "  --db-conns N      tenant-pool database connections per thread (default 2)\n"
            "  --data-dir DIR    read DIR/whet.env (written by `whet up`) for the settings above\n\n"
            "Other settings: WHET_GATEWAY_BODY_LIMIT (bytes, uploads; default 512 MiB),\n"
            "WHET_GATEWAY_JSON_BODY_LIMIT (bytes, other requests; default 1 MiB), WHET_GATEWAY_LOG_REQUESTS=0\n"
            "(no per-request log lines), WHET_LOG_LEVEL, WHET_JUDGE_CACHE_MAX (the bound of the judge models\n"
            "graders/run downloads into DIR/judge-cache: bytes with a K, M, G or T suffix, a share of its file\n"
            "system as 50%%, or 0 for none; default %s; the least recently used judges not in use go first).\n",
            GRADERS_JUDGE_CACHE_MAX_DEFAULT);
}

static int cmd_gateway(int argc, char **argv) {
    static const struct option opts[] = {{"http", required_argument, 0, 'H'},     {"threads", required_argument, 0, 't'},
                                         {"db-conns", required_argument, 0, 'c'}, {"data-dir", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},           {0}};
    const char *http = NULL, *data_dir = NULL;
    int threads = -1, db_conns = -1, c;
    char *end;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'H': http = optarg; break;
        case 'd': data_dir = optarg; break;
        case 't':
        case 'c': {
            long n = strtol(optarg, &end, 10);
            if (*end || n < 1 || n > 256) {
                fprintf(stderr, "whet gateway: --%s must be a number from 1 to 256\n", c == 't' ? "threads" : "db-conns");
                return 2;
            }
            if (c == 't') threads = (int)n;
            else db_conns = (int)n;
            break;
        }
        case 'h': gateway_usage(stdout); return 0;
        default: gateway_usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        gateway_usage(stderr);
        return 2;
    }
    struct whet_err err;
    if (whet_env_load_data_dir(data_dir, &err) < 0) {
        whet_err_report("whet gateway", &err);
        return 1;
    }
    whet_log_component("gateway");
    if (graders_check_settings(&err) < 0) {
        whet_err_report("whet gateway", &err);
        return 1;
    }
    struct gateway_options o;
    gateway_options_default(&o);
    if (http) o.http = http;
    if (threads > 0) o.threads = threads;
    if (db_conns > 0) o.db_conns_per_thread = db_conns;
    if (gateway_run(&o, &err) < 0) {
        whet_err_report("whet gateway", &err);
        return 1;
    }
    return 0;
}
WHET_COMMAND("gateway", cmd_gateway, "run the HTTP gateway (tenant API, operator API, health, metrics)")
