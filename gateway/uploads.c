/* uploads.c - the Uploads resource (see uploads.h). Sections: the JSON shape, create, add a part,
 * complete (checks -> worker: assemble, validate, hash, store -> rows), cancel, routes. Every POST
 * honours Idempotency-Key (idempotency.h): the key is looked up once the request is known to be
 * well-formed, and reserved in the transaction that writes the rows. */
#include "uploads.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crypto.h"
#include "db.h"
#include "files.h"
#include "files_common.h"
#include "idempotency.h"
#include "log.h"
#include "multipart.h"
#include "validate.h"

#define UPLOAD_MAX_BYTES ((uint64_t)8 << 30)
#define UPLOAD_PART_MAX_BYTES ((size_t)64 << 20)
#define UPLOAD_DEFAULT_TTL_S 3600
#define UPLOAD_MAX_TTL_S (30 * 24 * 3600)

/* ---------------------------------------------------------------- JSON shape */

/* The upload's columns, then the file's (NULL until completed). */
#define UPLOAD_COLUMNS                                                                                        \
    "u.id, u.filename, u.purpose, u.bytes, u.status, u.created_at, u.expires_at, "                          \
    "f.id, f.purpose, f.filename, f.bytes, f.created_at, f.expires_at, f.status"
#define UPLOAD_FROM "uploads u LEFT JOIN files f ON f.id = u.file_id"

static json_t *upload_row_to_json(const PGresult *res, int row) {
    /* The file's columns follow FILES_COLUMNS' order from column 7 on. */
    json_t *file = db_value(res, row, 7) ? files_row_to_json_at(res, row, 7) : json_null();
    return json_pack("{s:o, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "id", db_json_string(res, row, 0), "object",
                     "upload", "bytes", db_json_integer(res, row, 3), "created_at", db_json_integer(res, row, 5),
                     "filename", db_json_string(res, row, 1), "purpose", db_json_string(res, row, 2), "status",
                     db_json_string(res, row, 4), "expires_at", db_json_integer(res, row, 6), "file", file);
}

/* 1 when the row (UPLOAD_COLUMNS) can still take parts; otherwise answers 409 and returns 0. */
static int upload_open(struct gw_req *r, const PGresult *res, int row) {
    const char *status = PQgetvalue(res, row, 4);
    if (strcmp(status, "pending") != 0) {
        idem_reply_error(r, 409, "id", "invalid_upload_state", "upload %s is %s", PQgetvalue(res, row, 0), status);
        return 0;
    }
    if (strtoll(PQgetvalue(res, row, 6), NULL, 10) < whet_now_unix()) {
        http_reply_error_hint(r, 409, "id", "upload_expired", "create a new upload", "upload %s has expired",
                              PQgetvalue(res, row, 0));
        return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- create */

static const char *const jsonl_mime_types[] = {"text/jsonl", "application/jsonl", "application/x-ndjson",
                                               "application/json", "text/plain", NULL};

static void uploads_created(struct gw_req *r, const struct db_result *res, void *arg) {
    if (idem_reply_failed(r, res)) return;
    idem_reply_json(r, 200, upload_row_to_json(res->res[1], 0));
}

/* A checked create: the uploads_insert parameters, in the request's pool. */
struct create_ctx {
    const char *insert[8];
};

static void uploads_create_start(struct gw_req *r, void *arg) {
    struct create_ctx *c = arg;
    const char *get[] = {http_tenant_id(r), c->insert[0]};
    struct db_stmt stmts[3] = {{"uploads_insert", NULL, 8, c->insert}, {"uploads_get", NULL, 2, get}};
    db_transaction(r, stmts, idem_reserve(r, stmts, 2), uploads_created, NULL);
}

static void uploads_create(struct gw_req *r) {
    json_t *body = http_body_json(r);
    if (!body) return;
    static const char *const fields[] = {"filename", "purpose", "bytes", "mime_type", "expires_after", NULL};
    if (http_body_keys_known(r, body, fields)) goto out;
    json_t *filename = json_object_get(body, "filename"), *purpose = json_object_get(body, "purpose");
    json_t *bytes = json_object_get(body, "bytes"), *mime = json_object_get(body, "mime_type");
    if (!json_is_string(filename) || json_string_length(filename) == 0 || json_string_length(filename) > MULTIPART_NAME_MAX ||
        !files_text_ok(json_string_value(filename), json_string_length(filename))) {
        http_reply_error(r, 400, "filename", "invalid_request", "filename: expected a name of 1 to %d characters",
                         MULTIPART_NAME_MAX);
        goto out;
    }
    if (!json_is_string(purpose) || !files_purpose_ok(json_string_value(purpose))) {
        http_reply_error(r, 400, "purpose", "invalid_value",
                         "purpose: expected one of \"fine-tune\", \"user_data\", \"evals\", \"batch\", \"vision\", "
                         "\"assistants\"");
        goto out;
    }
    if (!json_is_integer(bytes) || json_integer_value(bytes) < 0 || (uint64_t)json_integer_value(bytes) > UPLOAD_MAX_BYTES) {
        http_reply_error(r, 400, "bytes", "invalid_value", "bytes: expected an integer from 0 to %llu",
                         (unsigned long long)UPLOAD_MAX_BYTES);
        goto out;
    }
    if (!json_is_string(mime) || json_string_length(mime) == 0 || json_string_length(mime) > 128 ||
        !files_text_ok(json_string_value(mime), json_string_length(mime))) {
        http_reply_error(r, 400, "mime_type", "invalid_value", "mime_type: expected a MIME type");
        goto out;
    }
    if (strcmp(json_string_value(purpose), "fine-tune") == 0) {
        int ok = 0;
        for (const char *const *m = jsonl_mime_types; *m; m++)
            if (strcmp(*m, json_string_value(mime)) == 0) ok = 1;
        if (!ok) {
            http_reply_error(r, 400, "mime_type", "invalid_value",
                             "mime_type: a fine-tune upload is JSONL: expected \"text/jsonl\" or \"application/jsonl\"");
            goto out;
        }
    }
    long long ttl = UPLOAD_DEFAULT_TTL_S;
    json_t *expires = json_object_get(body, "expires_after");
    if (expires && !json_is_null(expires)) {
        json_t *anchor = json_object_get(expires, "anchor"), *seconds = json_object_get(expires, "seconds");
        if (!json_is_object(expires) || json_object_size(expires) != 2 || !json_is_string(anchor) ||
            strcmp(json_string_value(anchor), "created_at") != 0 || !json_is_integer(seconds) ||
            json_integer_value(seconds) < 3600 || json_integer_value(seconds) > UPLOAD_MAX_TTL_S) {
            http_reply_error(r, 400, "expires_after", "invalid_value",
                             "expires_after: expected {\"anchor\": \"created_at\", \"seconds\": 3600..%d}", UPLOAD_MAX_TTL_S);
            goto out;
        }
        ttl = json_integer_value(seconds);
    }
    long long now = whet_now_unix();
    const char *id = files_new_id(r, "upload_");
    char *size = http_printf(r, "%lld", (long long)json_integer_value(bytes));
    char *created = http_printf(r, "%lld", now), *expires_at = http_printf(r, "%lld", now + ttl);
    struct create_ctx *c = http_alloc(r, sizeof *c);
    const char *insert[] = {id,   http_tenant_id(r), http_strdup(r, json_string_value(filename)),
                            http_strdup(r, json_string_value(purpose)), http_strdup(r, json_string_value(mime)),
                            size, created, expires_at};
    memcpy(c->insert, insert, sizeof c->insert);
    idem_begin(r, uploads_create_start, c);
out:
    json_decref(body);
}

/* ---------------------------------------------------------------- add a part */

struct part_job {
    char *data; /* a copy of the part: the request body may go away with its client */
    size_t len;
    char *key;
    const char *part_id, *tenant_id;
    int failed;
    struct whet_err err;
};

static void part_free(struct part_job *p) {
    free(p->data);
    free(p->key);
    free(p);
}

static void part_work(void *arg) {
    struct part_job *p = arg;
    struct objstore *store = files_tenant_store(p->tenant_id, &p->err);
    if (!store || objstore_put(store, p->key, p->data, p->len, &p->err)) p->failed = 1;
}

/* For a transaction that records an object already stored under `key`: when it failed, or wrote no row
 * in statement `stmt` because the upload stopped being pending meanwhile (409 "upload ID `why`"), the
 * object goes (no row, no object) and the request is answered; returns 1 then. */
static int rows_refused(struct gw_req *r, const struct db_result *res, int stmt, const char *key, const char *why) {
    if (res->ok && PQntuples(res->res[stmt]) > 0) return 0;
    files_delete_object_later(r, key);
    if (res->ok)
        idem_reply_error(r, 409, "id", "invalid_upload_state", "upload %s %s", http_path_param(r, "id"), why);
    else if (!idem_lost_race(r, res))
        http_reply_db_error(r, res);
    return 1;
}

static void part_inserted(struct gw_req *r, const struct db_result *res, void *arg) {
    struct part_job *p = arg;
    if (!rows_refused(r, res, 0, p->key, "no longer takes parts")) {
        const PGresult *row = res->res[0];
        idem_reply_json(r, 200, json_pack("{s:o, s:s, s:o, s:o}", "id", db_json_string(row, 0, 0), "object",
                                          "upload.part", "created_at", db_json_integer(row, 0, 1), "upload_id",
                                          db_json_string(row, 0, 2)));
    }
    part_free(p);
}

static void part_stored(struct gw_req *r, void *arg) {
    struct part_job *p = arg;
    if (http_gone(r) || p->failed) {
        if (!p->failed) files_delete_object_later(r, p->key);
        if (!http_gone(r)) {
            log_error("msg=\"object store write failed\" key=%s err=\"%s\"", p->key, p->err.msg);
            http_reply_error(r, 500, NULL, "storage_error", "could not store the part; try again");
        }
        part_free(p);
        return;
    }
    char *size = http_printf(r, "%zu", p->len), *now = http_printf(r, "%lld", (long long)whet_now_unix());
    const char *params[] = {p->part_id, http_path_param(r, "id"), http_tenant_id(r), size, p->key, now};
    struct db_stmt stmts[2] = {{"uploads_part_insert", NULL, 6, params}};
    db_transaction(r, stmts, idem_reserve(r, stmts, 1), part_inserted, p);
}

/* The upload is checked before the bytes are stored, so a part for a closed upload costs nothing. */
static void part_checked(struct gw_req *r, const struct db_result *res, void *arg);

static void part_check(struct gw_req *r, void *arg) {
    const char *params[] = {http_tenant_id(r), http_path_param(r, "id")};
    struct db_stmt stmts[] = {{"uploads_get", NULL, 2, params}, {"uploads_parts_bytes", NULL, 2, params}};
    db_transaction(r, stmts, 2, part_checked, arg);
}

static void part_checked(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct multipart_part *data = arg;
    if (db_reply_unless_found(r, res, "upload", "id")) return;
    const PGresult *up = res->res[0];
    if (!upload_open(r, up, 0)) return;
    uint64_t declared = strtoull(PQgetvalue(up, 0, 3), NULL, 10);
    uint64_t so_far = strtoull(PQgetvalue(res->res[1], 0, 0), NULL, 10);
    if (so_far + data->len > declared) {
        idem_reply_error(r, 400, "data", "invalid_value",
                         "data: the parts would hold %llu bytes; the upload declared %llu",
                         (unsigned long long)(so_far + data->len), (unsigned long long)declared);
        return;
    }
    struct part_job *p = xcalloc(1, sizeof *p);
    p->data = files_part_copy(data);
    p->len = data->len;
    p->part_id = files_new_id(r, "part_");
    p->key = xasprintf("uploads/%s/%s/%s", http_tenant_id(r), http_path_param(r, "id"), p->part_id);
    p->tenant_id = http_tenant_id(r);
    if (http_run_blocking_or_busy(r, part_work, part_stored, p)) part_free(p);
}

static void uploads_add_part(struct gw_req *r) {
    struct multipart_form *form = files_form(r, "the field data");
    if (!form) return;
    const struct multipart_part *data = multipart_get(form, "data");
    if (!data || form->count != 1) {
        http_reply_error(r, 400, "data", "invalid_request", "data: expected exactly one form field, named data");
        return;
    }
    if (data->len > UPLOAD_PART_MAX_BYTES) {
        http_reply_error(r, 413, "data", "part_too_large", "data: a part holds at most %zu bytes",
                         UPLOAD_PART_MAX_BYTES);
        return;
    }
    idem_begin_form(r, form, part_check, (void *)data);
}

/* ---------------------------------------------------------------- complete */

struct assemble_part {
    char *key;
};

struct assemble_job {
    /* in */
    struct assemble_part *parts;
    size_t nparts;
    int is_fine_tune;
    char *file_key;
    char md5_want[33]; /* "" when not given */
    uint64_t declared;
    /* while reading */
    FILE *out;
    struct validate_stream *validator;
    EVP_MD_CTX *sha, *md5;
    int invalid;
    /* out */
    int failed;
    struct whet_err err;
    struct validate_summary summary;
    char sha256[65];
    uint64_t bytes;
    /* the rows */
    const char *file_id, *filename, *purpose, *tenant_id;
};

static void assemble_free(struct assemble_job *a) {
    for (size_t i = 0; i < a->nparts; i++) free(a->parts[i].key);
    free(a->parts);
    free(a->file_key);
    free(a);
}

static int assemble_sink(void *ctx, const void *chunk, size_t len) {
    struct assemble_job *a = ctx;
    if (a->validator && validate_stream_feed(a->validator, chunk, len, &a->err)) {
        a->invalid = 1;
        return 1;
    }
    EVP_DigestUpdate(a->sha, chunk, len);
    EVP_DigestUpdate(a->md5, chunk, len);
    a->bytes += len;
    if (fwrite(chunk, 1, len, a->out) != len) {
        whet_errf(&a->err, "writing the assembled file: short write");
        return 1;
    }
    return 0;
}

static void assemble_work(void *arg) {
    struct assemble_job *a = arg;
    struct objstore *store = files_tenant_store(a->tenant_id, &a->err);
    if (!store) {
        a->failed = 1;
        return;
    }
    const char *tmpdir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char *path = xasprintf("%s/whet-upload-XXXXXX", tmpdir);
    int fd = mkstemp(path);
    if (fd < 0 || !(a->out = fdopen(fd, "wb"))) {
        whet_errf(&a->err, "cannot create a temporary file in %s", tmpdir);
        if (fd >= 0) close(fd);
        a->failed = 1;
        goto out;
    }
    a->validator = a->is_fine_tune ? validate_stream_new(VALIDATE_FORMAT_AUTO, NULL) : NULL;
    a->sha = EVP_MD_CTX_new();
    a->md5 = EVP_MD_CTX_new();
    EVP_DigestInit_ex(a->sha, EVP_sha256(), NULL);
    EVP_DigestInit_ex(a->md5, EVP_md5(), NULL);
    for (size_t i = 0; i < a->nparts && !a->failed && !a->invalid; i++) {
        /* When the validator stops the read, its message (already in a->err) is the one to keep. */
        struct whet_err read_err = {0};
        if (objstore_read(store, a->parts[i].key, 0, 0, assemble_sink, a, &read_err) != 0 && !a->invalid) {
            if (!a->err.msg[0]) a->err = read_err;
            a->failed = 1;
        }
    }
    if (fclose(a->out) != 0 && !a->failed && !a->invalid) {
        whet_errf(&a->err, "writing the assembled file failed");
        a->failed = 1;
    }
    if (!a->failed && !a->invalid && a->validator && validate_stream_finish(a->validator, &a->summary, &a->err))
        a->invalid = 1;
    uint8_t digest[32];
    unsigned dlen = 0;
    EVP_DigestFinal_ex(a->sha, digest, &dlen);
    whet_hex_encode(digest, 32, a->sha256);
    char md5[33];
    EVP_DigestFinal_ex(a->md5, digest, &dlen);
    whet_hex_encode(digest, 16, md5);
    if (!a->failed && !a->invalid && a->md5_want[0] && strcmp(md5, a->md5_want) != 0) {
        whet_errf(&a->err, "md5: the assembled file's MD5 is %s, not %s", md5, a->md5_want);
        a->invalid = 1;
    }
    if (!a->failed && !a->invalid && objstore_put_file(store, a->file_key, path, &a->err)) a->failed = 1;
    unlink(path);
out:
    free(path);
    validate_stream_free(a->validator);
    EVP_MD_CTX_free(a->sha);
    EVP_MD_CTX_free(a->md5);
}

static void complete_rows_done(struct gw_req *r, const struct db_result *res, void *arg) {
    struct assemble_job *a = arg;
    if (rows_refused(r, res, 2, a->file_key, "was completed or cancelled meanwhile")) {
        assemble_free(a);
        return;
    }
    /* The parts served their purpose; their rows stay with the upload, their bytes go. */
    for (size_t i = 0; i < a->nparts; i++) files_delete_object_later(r, a->parts[i].key);
    idem_reply_json(r, 200, upload_row_to_json(res->res[3], 0));
    assemble_free(a);
}

/* After a failed assembly: a concurrent complete of the same upload may have finished first and
 * removed the parts this one was reading. Then the answer is what a complete sent after it gets (the
 * completed upload, or 409); only a failure with the upload still pending is the storage's. */
static void complete_failed_recheck(struct gw_req *r, const struct db_result *res, void *arg) {
    struct assemble_job *a = arg;
    const PGresult *up = res->ok ? res->res[0] : NULL;
    if (up && PQntuples(up) == 1 && strcmp(PQgetvalue(up, 0, 4), "completed") == 0) {
        idem_reply_json(r, 200, upload_row_to_json(up, 0));
    } else if (up && PQntuples(up) == 1 && !upload_open(r, up, 0)) {
        /* upload_open answered 409 */
    } else {
        log_error("msg=\"assembling an upload failed\" upload=%s err=\"%s\"", http_path_param(r, "id"), a->err.msg);
        http_reply_error(r, 500, NULL, "storage_error", "could not assemble the upload; try again");
    }
    assemble_free(a);
}

static void complete_assembled(struct gw_req *r, void *arg) {
    struct assemble_job *a = arg;
    if (!http_gone(r) && a->invalid && strncmp(a->err.msg, "md5:", 4) == 0) {
        http_reply_error(r, 400, "md5", "md5_mismatch", "%s", a->err.msg);
        assemble_free(a);
        return;
    }
    if (files_stored_answered(r, a->file_key, a->invalid, a->failed, &a->err, NULL)) {
        assemble_free(a);
        return;
    }
    if (a->failed) {
        const char *params[] = {http_tenant_id(r), http_path_param(r, "id")};
        db_query(r, "uploads_get", 2, params, complete_failed_recheck, a);
        return;
    }
    char *bytes = http_printf(r, "%llu", (unsigned long long)a->bytes);
    char *now = http_printf(r, "%lld", (long long)whet_now_unix());
    char *lines = http_printf(r, "%zu", a->summary.lines);
    const char *lock[] = {http_tenant_id(r), http_path_param(r, "id")};
    const char *file[] = {a->file_id, http_tenant_id(r), a->purpose, a->filename, bytes, a->sha256, a->file_key,
                          a->is_fine_tune ? validate_format_name(a->summary.format) : NULL,
                          a->is_fine_tune ? lines : NULL, now, http_path_param(r, "id")};
    const char *done[] = {http_tenant_id(r), http_path_param(r, "id"), a->file_id};
    const char *get[] = {http_tenant_id(r), http_path_param(r, "id")};
    struct db_stmt stmts[5] = {
        {"uploads_lock", NULL, 2, lock},
        {"uploads_file_insert", NULL, 11, file},
        {"uploads_complete", NULL, 3, done},
        {"uploads_get", NULL, 2, get},
    };
    db_transaction(r, stmts, idem_reserve(r, stmts, 4), complete_rows_done, a);
}

/* A checked complete, in the request's pool (it may run twice: see idem_lost_race). */
struct complete_ctx {
    const char **part_ids;
    size_t nparts;
    char md5[33];
};

static void complete_checked(struct gw_req *r, const struct db_result *res, void *arg) {
    struct complete_ctx *c = arg;
    if (db_reply_unless_found(r, res, "upload", "id")) return;
    const PGresult *up = res->res[0], *parts = res->res[1];
    /* A retried complete answers like the first. */
    if (strcmp(PQgetvalue(up, 0, 4), "completed") == 0) {
        idem_reply_json(r, 200, upload_row_to_json(up, 0));
        return;
    }
    if (!upload_open(r, up, 0)) return;
    struct assemble_job *a = xcalloc(1, sizeof *a);
    a->nparts = c->nparts;
    a->parts = xcalloc(a->nparts, sizeof *a->parts);
    uint64_t total = 0;
    for (size_t i = 0; i < a->nparts; i++) {
        const char *want = c->part_ids[i];
        int row = -1;
        for (int k = 0; k < PQntuples(parts); k++)
            if (strcmp(PQgetvalue(parts, k, 0), want) == 0) row = k;
        if (row < 0) {
            http_reply_error(r, 400, http_printf(r, "part_ids[%zu]", i), "invalid_value",
                             "part_ids[%zu]: upload %s has no part %s", i, http_path_param(r, "id"), want);
            assemble_free(a);
            return;
        }
        a->parts[i].key = xstrdup(PQgetvalue(parts, row, 2));
        total += strtoull(PQgetvalue(parts, row, 1), NULL, 10);
    }
    a->declared = strtoull(PQgetvalue(up, 0, 3), NULL, 10);
    if (total != a->declared) {
        http_reply_error(r, 400, "part_ids", "invalid_value", "part_ids: the parts hold %llu bytes; the upload declared %llu",
                         (unsigned long long)total, (unsigned long long)a->declared);
        assemble_free(a);
        return;
    }
    a->purpose = http_strdup(r, PQgetvalue(up, 0, 2));
    a->filename = http_strdup(r, PQgetvalue(up, 0, 1));
    a->is_fine_tune = strcmp(a->purpose, "fine-tune") == 0;
    memcpy(a->md5_want, c->md5, sizeof a->md5_want);
    a->file_id = files_new_id(r, "file-");
    a->file_key = xasprintf("files/%s/%s", http_tenant_id(r), a->file_id);
    a->tenant_id = http_tenant_id(r);
    if (http_run_blocking_or_busy(r, assemble_work, complete_assembled, a)) assemble_free(a);
}

static void complete_start(struct gw_req *r, void *arg) {
    const char *params[] = {http_tenant_id(r), http_path_param(r, "id")};
    struct db_stmt stmts[] = {{"uploads_get", NULL, 2, params}, {"uploads_parts", NULL, 2, params}};
    db_transaction(r, stmts, 2, complete_checked, arg);
}

static void uploads_complete(struct gw_req *r) {
    json_t *body = http_body_json(r);
    if (!body) return;
    if (http_body_keys_known(r, body, (const char *const[]){"part_ids", "md5", NULL})) goto fail;
    json_t *ids = json_object_get(body, "part_ids");
    if (!json_is_array(ids) || json_array_size(ids) == 0 || json_array_size(ids) > 10000) {
        http_reply_error(r, 400, "part_ids", "invalid_value", "part_ids: expected an array of 1 to 10000 part ids");
        goto fail;
    }
    for (size_t i = 0; i < json_array_size(ids); i++) {
        json_t *id = json_array_get(ids, i);
        if (!json_is_string(id)) {
            http_reply_error(r, 400, http_printf(r, "part_ids[%zu]", i), "invalid_value", "part_ids[%zu]: expected a string", i);
            goto fail;
        }
        for (size_t k = 0; k < i; k++)
            if (json_equal(id, json_array_get(ids, k))) {
                http_reply_error(r, 400, http_printf(r, "part_ids[%zu]", i), "invalid_value",
                                 "part_ids[%zu]: part %s is listed twice", i, json_string_value(id));
                goto fail;
            }
    }
    struct complete_ctx *c = http_alloc(r, sizeof *c);
    c->nparts = json_array_size(ids);
    c->part_ids = http_alloc(r, c->nparts * sizeof *c->part_ids);
    for (size_t i = 0; i < c->nparts; i++) c->part_ids[i] = http_strdup(r, json_string_value(json_array_get(ids, i)));
    c->md5[0] = 0;
    json_t *md5 = json_object_get(body, "md5");
    if (md5 && !json_is_null(md5)) {
        const char *s = json_string_value(md5);
        int ok = s && strlen(s) == 32;
        for (int i = 0; ok && i < 32; i++) ok = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f');
        if (!ok) {
            http_reply_error(r, 400, "md5", "invalid_value", "md5: expected 32 lower-case hex digits");
            goto fail;
        }
        memcpy(c->md5, s, 33);
    }
    json_decref(body);
    idem_begin(r, complete_start, c);
    return;
fail:
    json_decref(body);
}

/* ---------------------------------------------------------------- cancel */

static void cancel_done(struct gw_req *r, const struct db_result *res, void *arg) {
    if (idem_reply_unless_found(r, res, 1, "upload")) return;
    const PGresult *up = res->res[1];
    const char *status = PQgetvalue(up, 0, 4);
    if (strcmp(status, "cancelled") != 0) {
        idem_reply_error(r, 409, "id", "invalid_upload_state", "upload %s is %s and cannot be cancelled",
                         http_path_param(r, "id"), status);
        return;
    }
    const PGresult *parts = res->res[2];
    for (int i = 0; i < PQntuples(parts); i++) files_delete_object_later(r, PQgetvalue(parts, i, 2));
    idem_reply_json(r, 200, upload_row_to_json(up, 0));
}

static void cancel_start(struct gw_req *r, void *arg) {
    const char *params[] = {http_tenant_id(r), http_path_param(r, "id")};
    struct db_stmt stmts[4] = {
        {"uploads_cancel", NULL, 2, params},
        {"uploads_get", NULL, 2, params},
        {"uploads_parts", NULL, 2, params},
    };
    db_transaction(r, stmts, idem_reserve(r, stmts, 3), cancel_done, arg);
}

static void uploads_cancel(struct gw_req *r) { idem_begin(r, cancel_start, NULL); }

/* ---------------------------------------------------------------- routes */

void uploads_routes(struct http_router *rt) {
    idem_prepare();
    db_prepare("uploads_insert", "INSERT INTO uploads (id, tenant_id, filename, purpose, mime_type, bytes, created_at, "
                                 "expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)");
    db_prepare("uploads_get", "SELECT " UPLOAD_COLUMNS " FROM " UPLOAD_FROM " WHERE u.tenant_id = $1 AND u.id = $2");
    db_prepare("uploads_parts_bytes",
               "SELECT coalesce(sum(bytes), 0) FROM upload_parts WHERE tenant_id = $1 AND upload_id = $2");
    db_prepare("uploads_parts", "SELECT id, bytes, object_key FROM upload_parts WHERE tenant_id = $1 AND upload_id = $2 "
                                "ORDER BY seq");
    db_prepare("uploads_part_insert",
               "INSERT INTO upload_parts (id, upload_id, tenant_id, bytes, object_key, created_at) "
               "SELECT $1, $2, $3, $4::bigint, $5, $6::bigint WHERE EXISTS (SELECT 1 FROM uploads WHERE tenant_id = $3 "
               "AND id = $2 AND status = 'pending') RETURNING id, created_at, upload_id");
    /* Completing: lock the upload so two completes cannot both write a file, then write the file only
     * while the upload is still pending, then close the upload. */
    db_prepare("uploads_lock", "SELECT status FROM uploads WHERE tenant_id = $1 AND id = $2 FOR UPDATE");
    db_prepare("uploads_file_insert",
               "INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key, format, line_count, "
               "created_at) SELECT $1, $2, $3, $4, $5::bigint, $6, $7, $8, $9::integer, $10::bigint "
               "WHERE EXISTS (SELECT 1 FROM uploads WHERE tenant_id = $2 AND id = $11 AND status = 'pending') "
               "RETURNING id");
    db_prepare("uploads_complete", "UPDATE uploads SET status = 'completed', file_id = $3 WHERE tenant_id = $1 AND "
                                   "id = $2 AND status = 'pending' AND EXISTS (SELECT 1 FROM files WHERE id = $3) "
                                   "RETURNING id");
    db_prepare("uploads_cancel",
               "UPDATE uploads SET status = 'cancelled' WHERE tenant_id = $1 AND id = $2 AND status = 'pending'");

    http_route(rt, "POST", "/v1/uploads", uploads_create, 0, "uploads.create");
    http_route(rt, "POST", "/v1/uploads/{id}/parts", uploads_add_part, HTTP_ROUTE_LARGE_BODY, "uploads.parts");
    http_route(rt, "POST", "/v1/uploads/{id}/complete", uploads_complete, 0, "uploads.complete");
    http_route(rt, "POST", "/v1/uploads/{id}/cancel", uploads_cancel, 0, "uploads.cancel");
}
