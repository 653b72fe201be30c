/* files_common.h - what the tenant-facing resource handlers (files.c, uploads.c, jobs.c, models.c,
 * checkpoint_files.c) share: the process-wide object store, retrieving one row, OpenAI's list envelope
 * and cursor pagination, multipart forms, and the answer to a new file's stored object.
 *
 * The object store is opened on first use from $WHET_OBJECT_STORE (`whet up` sets it) and shared by
 * the worker threads (objstore.h is thread-safe); only blocking work (http_run_blocking) calls it. */
#ifndef WHET_GATEWAY_FILES_COMMON_H
#define WHET_GATEWAY_FILES_COMMON_H

#include <jansson.h>

#include "db.h"
#include "http.h"
#include "multipart.h"
#include "objstore.h"

/* The store, or NULL with the reason in err (unset or invalid $WHET_OBJECT_STORE). Thread-safe. */
struct objstore *files_store(struct whet_err *err);
/* The store a tenant's data (files, upload parts, checkpoints) goes through: files_store, or with
 * encryption at rest on ($WHET_DATA_KEY_FILE) a view of it sealed with the tenant's data key (made on
 * first use, kept for the process). Blocking (it may read the key from PostgreSQL): worker threads
 * only. NULL with err when the store or the key is unavailable. */
struct objstore *files_tenant_store(const char *tenant_id, struct whet_err *err);
/* Whether encryption at rest is on ($WHET_DATA_KEY_FILE is set); no I/O. */
int files_encryption_on(void);
/* The tenant's data key wrapped for a model worker that holds the same operator keyring
 * (whet_data_key_wrap_text; made with the tenant's view and kept as long) into *out, NULL when
 * encryption at rest is off. Blocking like files_tenant_store; -1 with err when the store or the key
 * is unavailable. */
int files_tenant_wrapped_key(const char *tenant_id, const char **out, struct whet_err *err);

/* {"object":"list","data":data,"first_id":…,"last_id":…,"has_more":…}; takes the reference to `data`,
 * whose items carry "id". */
json_t *files_list_object(json_t *data, int has_more);

/* One page of a cursor-paginated list (OpenAI's `limit` and `after`), in the request's pool. */
struct files_page {
    int limit;
    const char *fetch;  /* limit + 1 as text, the statement's LIMIT: the extra row tells whether there are more */
    const char *parent; /* NULL, or what the listed rows belong to ("fine-tuning job"): then the transaction's
                           first statement looks that up by the path parameter "id", and no row answers 404 */
    json_t *(*to_json)(const PGresult *res, int row);
};

/* A page whose limit is the `limit` query parameter (`def` when absent, at most `max`); NULL, having answered 400, on a bad one. */
struct files_page *files_page_new(struct gw_req *r, int def, int max, const char *parent,
                                  json_t *(*to_json)(const PGresult *res, int row));

/* The db_callback that answers a page (arg: its struct files_page) with the rows of the transaction's
 * last statement, as files_list_object. */
void files_page_done(struct gw_req *r, const struct db_result *res, void *arg);

/* A retrieve: runs the prepared statement `stmt` with (tenant, path parameter "id") and answers its
 * row as to_json makes it, or 404 "no such WHAT: ID" when there is none. */
void files_retrieve(struct gw_req *r, const char *stmt, const char *what,
                    json_t *(*to_json)(const PGresult *res, int row));

/* The `order` query parameter: 1 for "asc", 0 for "desc" (`def` when absent). Answers 400 on anything
 * else and returns -1. */
int files_query_order(struct gw_req *r, int def_asc, int *asc);

/* A new OpenAI-style id: prefix + 24 random [A-Za-z0-9] characters, in the request's pool. */
char *files_new_id(struct gw_req *r, const char *prefix);

/* 1 when s[0..len) is valid UTF-8 without control characters (names stored as text and put in JSON). */
int files_text_ok(const char *s, size_t len);

/* After a worker checked (`invalid`, the reason in err) and stored (`failed` when not) a new file's
 * object under `key`: answers when the request ends here, because its client went away (the stored
 * object is deleted) or the file is invalid (400 "invalid fine-tune file: …", naming `param`, the
 * field that carried the file, or none), and returns 1; returns 0 to go on. */
int files_stored_answered(struct gw_req *r, const char *key, int invalid, int failed, const struct whet_err *err,
                          const char *param);

/* The request's multipart/form-data body, parsed into a form in the request's pool; NULL, having
 * answered 400, without a Content-Type ("expected Content-Type multipart/form-data with EXPECTED"),
 * with a bad boundary or with a malformed body. */
struct multipart_form *files_form(struct gw_req *r, const char *expected);

/* A copy of a form part's bytes (never NULL, even for none) that the caller frees: a worker may still
 * read them after the request body went away with its client. */
char *files_part_copy(const struct multipart_part *part);

/* Deletes `key` from the object store on a worker thread, logging a failure; for clean-up after a
 * request was refused or its client went away (nothing is answered). */
void files_delete_object_later(struct gw_req *r, const char *key);

#endif
