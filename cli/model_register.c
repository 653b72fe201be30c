/* model_register.c - see model_register.h. The model is checked with the training engine's own
 * loaders, so a model that registers is one the trainer can load. */
#include "model_register.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "crypto.h"
#include "env.h"
#include "model_config.h"
#include "objstore.h"
#include "pg.h"
#include "safetensors.h"
#include "tokenizer.h"

static int valid_model_name(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > 64 || !strncmp(name, "ft:", 3)) return 0;
    for (const char *p = name; *p; p++)
        if (!(('a' <= *p && *p <= 'z') || ('A' <= *p && *p <= 'Z') || ('0' <= *p && *p <= '9') || strchr("._-", *p)))
            return 0;
    return 1;
}

/* Everything the trainer will need to load: config, weights (every header), tokenizer. */
static int validate_model_dir(const char *dir, struct model_config *cfg, struct whet_err *err) {
    char *path = xasprintf("%s/config.json", dir);
    int rc = model_config_load(cfg, path, err);
    free(path);
    if (rc < 0) return -1;
    struct st_set set;
    memset(&set, 0, sizeof set);
    if (st_open_dir(&set, dir, err) < 0) return -1;
    int has_embed = st_find(&set, "model.embed_tokens.weight") != NULL;
    st_close(&set);
    if (!has_embed) return whet_errf(err, "%s: no model.embed_tokens.weight tensor; is this a decoder-only LM in Hugging Face layout?", dir);
    struct tokenizer *tok;
    path = xasprintf("%s/tokenizer.json", dir);
    rc = tokenizer_load(path, &tok, err);
    free(path);
    if (rc < 0) return -1;
    tokenizer_free(tok);
    return 0;
}

int model_register(const char *database_url, const char *name, const char *dir, struct whet_err *err) {
    if (!valid_model_name(name)) {
        whet_errf(err, "invalid model name \"%s\"", name);
        return whet_err_hint(err, "1-64 of [A-Za-z0-9._-], not starting with \"ft:\"");
    }
    struct model_config cfg;
    if (validate_model_dir(dir, &cfg, err) < 0) return -1;

    struct objstore *store = NULL;
    PGconn *conn = NULL;
    char *prefix = xasprintf("models/%s", name), *manifest_key = xasprintf("models/%s/" OBJSTORE_MANIFEST, name);
    char *manifest = NULL, *config_json = NULL;
    size_t manifest_len = 0;
    int rc = -1;
    if (objstore_open_env(&store, err) < 0 || objstore_put_dir(store, prefix, dir, err) < 0 ||
        objstore_get(store, manifest_key, &manifest, &manifest_len, 16 << 20, err) != 0)
        goto out;
    char sha[65], params[32];
    whet_sha256_hex(manifest, manifest_len, sha);
    snprintf(params, sizeof params, "%lld", model_config_num_params(&cfg));
    char *config_path = xasprintf("%s/config.json", dir);
    rc = whet_read_file(config_path, 1 << 20, &config_json, NULL, err);
    free(config_path);
    if (rc < 0 || !(conn = whet_pg_connect(database_url, err))) {
        rc = -1;
        goto out;
    }
    const char *p[] = {name, model_arch_name(cfg.arch), params, prefix, sha, config_json};
    rc = whet_pg_exec(conn,
                      "INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)"
                      " VALUES ($1, $2, $3::bigint, $4, $5, $6::jsonb) ON CONFLICT (id) DO UPDATE SET"
                      " architecture = $2, parameters = $3::bigint, object_prefix = $4, sha256 = $5, config = $6::jsonb",
                      6, p, err);
    if (rc == 0) printf("model %s registered: %s, %s parameters, %s\n", name, model_arch_name(cfg.arch), params, prefix);
out:
    PQfinish(conn);
    objstore_close(store);
    free(prefix);
    free(manifest_key);
    free(manifest);
    free(config_json);
    return rc;
}

int cmd_model_register(int argc, char **argv) {
    static const struct option opts[] = {{"data-dir", required_argument, 0, 'd'}, {"help", no_argument, 0, 'h'}, {0}};
    const char *data_dir = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': data_dir = optarg; break;
        case 'h':
            printf("usage: whet model register NAME DIR [--data-dir DIR]\n\n"
                   "Checks the Hugging Face model dir DIR (config.json architecture, every safetensors header,\n"
                   "tokenizer.json), copies it to the object store (WHET_OBJECT_STORE) under models/NAME and adds\n"
                   "it to the catalog (WHET_DATABASE_URL) as base model NAME. Registering a name again replaces it.\n");
            return 0;
        default: return 2;
        }
    }
    if (argc - optind != 2) {
        fprintf(stderr, "usage: whet model register NAME DIR [--data-dir DIR]\n");
        return 2;
    }
    struct whet_err err;
    const char *url;
    if (whet_env_load_data_dir(data_dir, &err) < 0 || !(url = whet_database_url(&err)) ||
        model_register(url, argv[optind], argv[optind + 1], &err) < 0) {
        whet_err_report("whet model register", &err);
        return 1;
    }
    return 0;
}
