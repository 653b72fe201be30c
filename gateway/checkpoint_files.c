/* checkpoint_files.c - downloading what a job produced (a whet extension in OpenAI's style):
 *
 *   GET /v1/fine_tuning/jobs/{job}/checkpoints/{checkpoint}/files          the files of a checkpoint
 *   GET /v1/fine_tuning/jobs/{job}/checkpoints/{checkpoint}/files/{name}   one file's bytes
 *
 * {checkpoint} is a checkpoint id (ftckpt-…) or `final`, the finished model of a succeeded job. Only
 * complete checkpoints exist for the API: the object store's MANIFEST.json (written last) lists the
 * files, and only names it lists are served. A file (a full model's weights can be gigabytes) is
 * streamed a chunk at a time (object_stream.h) and checked against the manifest's size and SHA-256 on
 * the way: a mismatch closes the connection before the last byte. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_files.h"
#include "db.h"
#include "files_common.h"
#include "log.h"
#include "object_stream.h"
#include "server.h"

#define MANIFEST_MAX (4 << 20)

struct download {
    char *tenant_id;
    char *prefix;
    char *name;     /* NULL: list the files */
    int rc;         /* 0, OBJSTORE_NOT_FOUND (no such file or no manifest) or -1 */
    struct whet_err err;
    json_t *files;  /* the manifest's entries */
    uint64_t size;  /* the named file's, from the manifest */
    char sha256[65];
};

/* The manifest's file entries; a missing manifest is an incomplete checkpoint. */
static int read_manifest(struct objstore *store, struct download *d) {
    char *key = xasprintf("%s/" OBJSTORE_MANIFEST, d->prefix), *text = NULL;
    size_t len;
    int rc = objstore_get(store, key, &text, &len, MANIFEST_MAX, &d->err);
    free(key);
    if (rc != 0) return rc;
    json_t *m = json_loadb(text, len, 0, NULL);
    free(text);
    json_t *files = json_object_get(m, "files");
    if (!json_is_array(files)) {
        json_decref(m);
        return whet_errf(&d->err, "%s: manifest without a files array", d->prefix);
    }
    d->files = json_incref(files);
    json_decref(m);
    return 0;
}

static void download_work(void *arg) {
    struct download *d = arg;
    struct objstore *store = files_tenant_store(d->tenant_id, &d->err);
    if (!store) {
        d->rc = -1;
        return;
    }
    if ((d->rc = read_manifest(store, d)) != 0 || !d->name) return;
    size_t i;
    json_t *f;
    json_array_foreach(d->files, i, f) {
        const char *fname = json_string_value(json_object_get(f, "name"));
        if (!fname || strcmp(fname, d->name)) continue;
        json_t *size = json_object_get(f, "size");
        const char *sha = json_string_value(json_object_get(f, "sha256"));
        if (!json_is_integer(size) || json_integer_value(size) < 0) {
            d->rc = whet_errf(&d->err, "%s: manifest entry \"%s\" without a size", d->prefix, d->name);
            return;
        }
        d->size = (uint64_t)json_integer_value(size);
        snprintf(d->sha256, sizeof d->sha256, "%s", sha ? sha : "");
        return;
    }
    d->rc = OBJSTORE_NOT_FOUND;
}

static void download_done(struct gw_req *r, void *arg) {
    struct download *d = arg;
    if (http_gone(r)) {
        /* nothing to answer */
    } else if (d->rc == OBJSTORE_NOT_FOUND) {
        if (d->name) http_reply_error(r, 404, "name", "not_found", "no file named \"%s\" in this checkpoint", d->name);
        else http_reply_error(r, 404, "checkpoint", "not_found", "this checkpoint has not finished uploading");
    } else if (d->rc != 0) {
        log_error("msg=\"checkpoint unreadable\" prefix=%s err=\"%s\"", d->prefix, d->err.msg);
        http_reply_error(r, 500, NULL, "storage_error", "could not read the checkpoint; try again");
    } else if (d->name) {
        http_add_header(r, "content-disposition", http_printf(r, "attachment; filename=\"%s\"", d->name));
        object_stream_reply(r, http_printf(r, "%s/%s", d->prefix, d->name), d->size, d->sha256,
                            "application/octet-stream",
                            http_printf(r, "checkpoint file %s/%s", d->prefix, d->name));
    } else {
        json_t *data = json_array();
        size_t i;
        json_t *f;
        json_array_foreach(d->files, i, f)
            json_array_append_new(data, json_pack("{s:s, s:O, s:O, s:O}", "object", "fine_tuning.job.checkpoint.file",
                                                  "name", json_object_get(f, "name"), "bytes", json_object_get(f, "size"),
                                                  "sha256", json_object_get(f, "sha256")));
        http_reply_json(r, 200, json_pack("{s:s, s:o, s:b}", "object", "list", "data", data, "has_more", 0));
    }
    json_decref(d->files);
    free(d->tenant_id);
    free(d->prefix);
    free(d->name);
    free(d);
}

static void located(struct gw_req *r, const struct db_result *res, void *arg) {
    const char *name = arg;
    if (db_reply_unless_found(r, res, "checkpoint", "checkpoint")) return;
    struct download *d = xcalloc(1, sizeof *d);
    d->tenant_id = xstrdup(http_tenant_id(r));
    d->prefix = xstrdup(PQgetvalue(res->res[0], 0, 0));
    d->name = name ? xstrdup(name) : NULL;
    if (http_run_blocking_or_busy(r, download_work, download_done, d)) {
        free(d->tenant_id);
        free(d->prefix);
        free(d->name);
        free(d);
    }
}

static void locate(struct gw_req *r, const char *name) {
    const char *params[] = {http_tenant_id(r), http_path_param(r, "job"), http_path_param(r, "checkpoint")};
    db_query(r, "checkpoint_prefix", 3, params, located, (void *)name);
}

static void checkpoint_files_list(struct gw_req *r) { locate(r, NULL); }
static void checkpoint_file_get(struct gw_req *r) { locate(r, http_path_param(r, "name")); }

void checkpoint_files_routes(struct http_router *rt) {
    db_prepare("checkpoint_prefix",
               "SELECT object_prefix FROM checkpoints WHERE tenant_id = $1 AND job_id = $2 AND id = $3"
               " UNION ALL SELECT final_object_prefix FROM jobs WHERE tenant_id = $1 AND id = $2 AND $3 = 'final'"
               " AND final_object_prefix IS NOT NULL");
    http_route(rt, "GET", "/v1/fine_tuning/jobs/{job}/checkpoints/{checkpoint}/files", checkpoint_files_list,
               HTTP_ROUTE_TENANT, "checkpoint_files");
    http_route(rt, "GET", "/v1/fine_tuning/jobs/{job}/checkpoints/{checkpoint}/files/{name}", checkpoint_file_get,
               HTTP_ROUTE_TENANT, "checkpoint_file");
}
