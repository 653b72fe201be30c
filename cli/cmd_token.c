/* cmd_token.c - `whet token`: mint a tenant or operator JWT with the configured key (development and
 * operations; production tenants usually get tokens from their own identity provider). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "auth.h"
#include "commands.h"
#include "env.h"

static void token_usage(FILE *out) {
    fprintf(out,
            "usage: whet token (--tenant NAME | --admin) [--ttl SECONDS] [--data-dir DIR]\n\n"
            "Prints a JWT signed with WHET_JWT_KEY (HS256 secret) or WHET_JWT_PRIVATE_KEY (RS256/ES256 PEM),\n"
            "carrying WHET_JWT_ISSUER and WHET_JWT_AUDIENCE when set.\n\n"
            "  --tenant NAME   a token for tenant NAME (the `tenant` claim)\n"
            "  --admin         an operator token for the /admin/v1 API\n"
            "  --ttl SECONDS   lifetime (default 3600)\n"
            "  --data-dir DIR  read DIR/whet.env (written by `whet up`) for the key\n");
}

static int cmd_token(int argc, char **argv) {
    static const struct option opts[] = {{"tenant", required_argument, 0, 't'}, {"admin", no_argument, 0, 'a'},
                                         {"ttl", required_argument, 0, 'l'},    {"data-dir", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},         {0}};
    const char *tenant = NULL, *data_dir = NULL;
    int admin = 0, c;
    long ttl = 3600;
    char *end;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 't': tenant = optarg; break;
        case 'a': admin = 1; break;
        case 'd': data_dir = optarg; break;
        case 'l':
            ttl = strtol(optarg, &end, 10);
            if (*end || ttl <= 0) {
                fprintf(stderr, "whet token: --ttl must be a positive number of seconds\n");
                return 2;
            }
            break;
        case 'h': token_usage(stdout); return 0;
        default: token_usage(stderr); return 2;
        }
    }
    if (!!tenant == admin || optind != argc) {
        token_usage(stderr);
        return 2;
    }
    struct whet_err err;
    struct auth_config cfg;
    if (whet_env_load_data_dir(data_dir, &err) < 0 || auth_config_from_env(&cfg, &err) < 0) {
        whet_err_report("whet token", &err);
        return 1;
    }
    char *token = auth_mint_jwt(&cfg, tenant, whet_now_unix(), ttl, &err);
    auth_config_free(&cfg);
    if (!token) {
        whet_err_report("whet token", &err);
        return 1;
    }
    puts(token);
    free(token);
    return 0;
}
WHET_COMMAND("token", cmd_token, "mint a tenant or operator JWT")
