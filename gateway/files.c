/* files.c - the Files resource (see files.h). Sections: statements and the JSON shape, upload (parse ->
 * Idempotency-Key, see idempotency.h -> worker: validate, hash, store -> row), list, retrieve, delete,
 * content. */
#include "files.h"

#include <stdlib.h>
#include <string.h>

#include "crypto.h"
#include "db.h"
#include "files_common.h"
#include "idempotency.h"
#include "log.h"
#include "multipart.h"
#include "object_stream.h"
#include "validate.h"

const char *const files_purposes[] = {"fine-tune", "user_data", "evals", "batch", "vision", "assistants", NULL};

int files_purpose_ok(const char *purpose) {
    for (const char *const *p = files_purposes; *p; p++)
        if (strcmp(*p, purpose) == 0) return 1;
    return 0;
}

json_t *files_row_to_json_at(const PGresult *res, int row, int col) {
    return json_pack("{s:o, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:n}", "id", db_json_string(res, row, col), "object",
                     "file", "bytes", db_json_integer(res, row, col + 3), "created_at",
                     db_json_integer(res, row, col + 4), "expires_at", db_json_integer(res, row, col + 5), "filename",
                     db_json_string(res, row, col + 2), "purpose", db_json_string(res, row, col + 1), "status",
                     db_json_string(res, row, col + 6), "status_details");
}

json_t *files_row_to_json(const PGresult *res, int row) { return files_row_to_json_at(res, row, 0); }

/* ---------------------------------------------------------------- upload */

/* A large fine-tune file is checked by several threads (the JSON parsing dominates an upload's cost). */
#define VALIDATE_THREADS 4
#define VALIDATE_SLICE_MIN ((size_t)4 << 20)

struct upload_job {
    /* in */
    char *data; /* files_part_copy of the file part */
    size_t len;
    int is_fine_tune;
    char *key;
    /* out */
    int invalid;  /* the JSONL check failed (err says where) */
    int store_failed;
    struct whet_err err;
    struct validate_summary summary;
    char sha256[65];
    /* for the row */
    const char *id, *purpose, *filename, *tenant_id;
};

static void upload_work(void *arg) {
    struct upload_job *u = arg;
    if (u->is_fine_tune && validate_jsonl_parallel(u->data, u->len, VALIDATE_FORMAT_AUTO, NULL, VALIDATE_THREADS,
                                                   VALIDATE_SLICE_MIN, &u->summary, &u->err)) {
        u->invalid = 1;
        return;
    }
    whet_sha256_hex(u->data, u->len, u->sha256);
    struct objstore *store = files_tenant_store(u->tenant_id, &u->err);
    if (!store || objstore_put(store, u->key, u->data, u->len, &u->err)) u->store_failed = 1;
}

static void upload_free(struct upload_job *u) {
    free(u->data);
    free(u->key);
    free(u);
}

static void upload_row_done(struct gw_req *r, const struct db_result *res, void *arg) {
    struct upload_job *u = arg;
    if (!res->ok) {
        files_delete_object_later(r, u->key);
        if (!idem_lost_race(r, res)) http_reply_db_error(r, res);
    } else {
        idem_reply_json(r, 200, files_row_to_json(res->res[0], 0));
    }
    upload_free(u);
}

static void upload_stored(struct gw_req *r, void *arg) {
    struct upload_job *u = arg;
    if (files_stored_answered(r, u->key, u->invalid, u->store_failed, &u->err, "file")) {
        upload_free(u);
        return;
    }
    if (u->store_failed) {
        log_error("msg=\"object store write failed\" key=%s err=\"%s\"", u->key, u->err.msg);
        http_reply_error(r, 500, NULL, "storage_error", "could not store the file; try again");
        upload_free(u);
        return;
    }
    char bytes[32], now[32], lines[32];
    snprintf(bytes, sizeof bytes, "%zu", u->len);
    snprintf(now, sizeof now, "%lld", (long long)whet_now_unix());
    snprintf(lines, sizeof lines, "%zu", u->summary.lines);
    const char *params[] = {u->id, http_tenant_id(r), u->purpose, u->filename, bytes, u->sha256, u->key,
                            u->is_fine_tune ? validate_format_name(u->summary.format) : NULL,
                            u->is_fine_tune ? lines : NULL, now};
    struct db_stmt stmts[2] = {{"files_insert", NULL, 10, params}};
    db_transaction(r, stmts, idem_reserve(r, stmts, 1), upload_row_done, u);
}

/* The last path component of a client's file name ("C:\data\train.jsonl" -> "train.jsonl"). */
static const char *base_name(const char *name) {
    const char *slash = strrchr(name, '/'), *backslash = strrchr(name, '\\');
    const char *last = slash > backslash ? slash : backslash;
    return last ? last + 1 : name;
}

/* A checked upload request, waiting for its Idempotency-Key to be looked up (in the request's pool). */
struct upload_form {
    const struct multipart_part *file; /* points into the request body */
    const char *purpose, *filename;
};

static void upload_start(struct gw_req *r, void *arg) {
    const struct upload_form *f = arg;
    struct upload_job *u = xcalloc(1, sizeof *u);
    u->data = files_part_copy(f->file);
    u->len = f->file->len;
    u->is_fine_tune = strcmp(f->purpose, "fine-tune") == 0;
    u->id = files_new_id(r, "file-");
    u->key = xasprintf("files/%s/%s", http_tenant_id(r), u->id);
    u->tenant_id = http_tenant_id(r);
    u->purpose = f->purpose;
    u->filename = f->filename;
    if (http_run_blocking_or_busy(r, upload_work, upload_stored, u)) upload_free(u);
}

static void files_create(struct gw_req *r) {
    struct multipart_form *form = files_form(r, "fields purpose and file");
    if (!form) return;
    for (size_t i = 0; i < form->count; i++) {
        if (strcmp(form->parts[i].name, "purpose") && strcmp(form->parts[i].name, "file")) {
            http_reply_error(r, 400, form->parts[i].name, "invalid_request", "%s: unrecognized form field",
                             form->parts[i].name);
            return;
        }
    }
    const struct multipart_part *purpose = multipart_get(form, "purpose");
    if (!purpose) {
        http_reply_error(r, 400, "purpose", "invalid_request", "purpose: missing");
        return;
    }
    char *purpose_s = http_strndup(r, purpose->data, purpose->len);
    if (strlen(purpose_s) != purpose->len || !files_purpose_ok(purpose_s)) {
        http_reply_error(r, 400, "purpose", "invalid_value",
                         "purpose: expected one of \"fine-tune\", \"user_data\", \"evals\", \"batch\", \"vision\", "
                         "\"assistants\"");
        return;
    }
    const struct multipart_part *file = multipart_get(form, "file");
    if (!file || !file->has_filename) {
        http_reply_error(r, 400, "file", "invalid_request", "file: missing (a form part named file, with a filename)");
        return;
    }
    const char *filename = base_name(file->filename);
    if (!filename[0] || !files_text_ok(filename, strlen(filename))) {
        http_reply_error(r, 400, "file", "invalid_request",
                         "file: the filename must be non-empty UTF-8 without control characters");
        return;
    }
    struct upload_form *f = http_alloc(r, sizeof *f);
    f->file = file;
    f->purpose = purpose_s;
    f->filename = http_strdup(r, filename);
    idem_begin_form(r, form, upload_start, f);
}

/* ---------------------------------------------------------------- list */

static void files_list(struct gw_req *r) {
    int asc;
    struct files_page *p = files_page_new(r, 10000, 10000, NULL, files_row_to_json);
    if (!p || files_query_order(r, 0, &asc)) return;
    const char *params[] = {http_tenant_id(r), http_query_param(r, "purpose"), http_query_param(r, "after"), p->fetch};
    db_query(r, asc ? "files_list_asc" : "files_list_desc", 4, params, files_page_done, p);
}

/* ---------------------------------------------------------------- retrieve */

static void files_get(struct gw_req *r) { files_retrieve(r, "files_get", "file", files_row_to_json); }

/* ---------------------------------------------------------------- delete */

struct delete_job {
    char *key;
    int failed;
    struct whet_err err;
};

static void delete_work(void *arg) {
    struct delete_job *d = arg;
    struct objstore *store = files_store(&d->err);
    if (!store || objstore_delete(store, d->key, &d->err)) d->failed = 1;
}

static void delete_stored(struct gw_req *r, void *arg) {
    struct delete_job *d = arg;
    /* The row is gone, so the file is deleted for the tenant; an object the store kept is only logged. */
    if (d->failed) log_warn("msg=\"object of a deleted file left behind\" key=%s err=\"%s\"", d->key, d->err.msg);
    if (!http_gone(r))
        http_reply_json(r, 200, json_pack("{s:s, s:s, s:b}", "id", http_path_param(r, "id"), "object", "file", "deleted", 1));
    free(d->key);
    free(d);
}

static void files_delete_done(struct gw_req *r, const struct db_result *res, void *arg) {
    if (!res->ok && strcmp(res->sqlstate, "23503") == 0) {
        http_reply_error(r, 409, "id", "file_in_use", "file %s is used by a fine-tuning job and cannot be deleted",
                         http_path_param(r, "id"));
        return;
    }
    if (db_reply_unless_found(r, res, "file", "id")) return;
    struct delete_job *d = xcalloc(1, sizeof *d);
    d->key = xstrdup(PQgetvalue(res->res[0], 0, 0));
    if (http_run_blocking(r, delete_work, delete_stored, d)) {
        d->failed = 1;
        whet_errf(&d->err, "worker queue full");
        delete_stored(r, d);
    }
}

static void files_delete(struct gw_req *r) {
    const char *params[] = {http_tenant_id(r), http_path_param(r, "id")};
    db_query(r, "files_delete", 2, params, files_delete_done, NULL);
}

/* ---------------------------------------------------------------- content */

/* Streamed from the store a chunk at a time (object_stream.h): a file may be hundreds of MiB. */
static void files_content_done(struct gw_req *r, const struct db_result *res, void *arg) {
    if (db_reply_unless_found(r, res, "file", "id")) return;
    const char *key = PQgetvalue(res->res[0], 0, FILES_NCOLUMNS);
    uint64_t bytes = strtoull(PQgetvalue(res->res[0], 0, 3), NULL, 10);
    object_stream_reply(r, key, bytes, NULL, "application/octet-stream",
                        http_printf(r, "the content of file %s", PQgetvalue(res->res[0], 0, 0)));
}

static void files_content(struct gw_req *r) {
    const char *params[] = {http_tenant_id(r), http_path_param(r, "id")};
    db_query(r, "files_get", 2, params, files_content_done, NULL);
}

/* ---------------------------------------------------------------- routes */

void files_routes(struct http_router *rt) {
    idem_prepare();
    db_prepare("files_insert",
               "INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key, format, line_count, "
               "created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING " FILES_COLUMNS);
    /* Cursor pagination: `after` is a file id; an unknown one yields an empty page. The bound is one
     * expression (no OR), so that even a generic plan starts the index scan at the cursor. */
    db_prepare_read("files_list_desc",
                    "SELECT " FILES_COLUMNS " FROM files WHERE tenant_id = $1 AND ($2::text IS NULL OR purpose = $2) "
                    "AND seq < CASE WHEN $3::text IS NULL THEN 9223372036854775807 "
                    "ELSE (SELECT seq FROM files WHERE tenant_id = $1 AND id = $3) END "
                    "ORDER BY seq DESC LIMIT $4");
    db_prepare_read("files_list_asc",
                    "SELECT " FILES_COLUMNS " FROM files WHERE tenant_id = $1 AND ($2::text IS NULL OR purpose = $2) "
                    "AND seq > CASE WHEN $3::text IS NULL THEN 0 "
                    "ELSE (SELECT seq FROM files WHERE tenant_id = $1 AND id = $3) END "
                    "ORDER BY seq ASC LIMIT $4");
    db_prepare_read("files_get", "SELECT " FILES_COLUMNS ", object_key FROM files WHERE tenant_id = $1 AND id = $2");
    db_prepare("files_delete", "DELETE FROM files WHERE tenant_id = $1 AND id = $2 RETURNING object_key");

    http_route(rt, "POST", "/v1/files", files_create, HTTP_ROUTE_LARGE_BODY, "files.create");
    http_route(rt, "GET", "/v1/files", files_list, 0, "files.list");
    http_route(rt, "GET", "/v1/files/{id}", files_get, 0, "files.retrieve");
    http_route(rt, "DELETE", "/v1/files/{id}", files_delete, 0, "files.delete");
    http_route(rt, "GET", "/v1/files/{id}/content", files_content, 0, "files.content");
}
