/* files_common.h - what the tenant-facing resource handlers (files.c, uploads.c, jobs.c, models.c)
 * share: the process-wide object store, OpenAI's list envelope and cursor-pagination parameters.
 *
 * The object store is opened on first use from $WHET_OBJECT_STORE (`whet up` sets it) and shared by
 * the worker threads (objstore.h is thread-safe); only blocking work (http_run_blocking) calls it. */
#ifndef WHET_GATEWAY_FILES_COMMON_H
#define WHET_GATEWAY_FILES_COMMON_H

#include <jansson.h>

#include "http.h"
#include "objstore.h"

/* The store, or NULL with the reason in err (unset or invalid $WHET_OBJECT_STORE). Thread-safe. */
struct objstore *files_store(struct whet_err *err);

/* {"object":"list","data":data,"first_id":…,"last_id":…,"has_more":…}; takes the reference to `data`,
 * whose items carry "id". */
json_t *files_list_object(json_t *data, int has_more);

/* The `limit` query parameter: `def` when absent, else an integer in 1..max. On a bad value answers
 * 400 (param "limit") and returns -1. */
int files_query_limit(struct gw_req *r, int def, int max, int *out);

/* The `order` query parameter: 1 for "asc", 0 for "desc" (`def` when absent). Answers 400 on anything
 * else and returns -1. */
int files_query_order(struct gw_req *r, int def_asc, int *asc);

/* A new OpenAI-style id: prefix + 24 random [A-Za-z0-9] characters, in the request's pool. */
char *files_new_id(struct gw_req *r, const char *prefix);

/* 1 when s[0..len) is valid UTF-8 without control characters (names stored as text and put in JSON). */
int files_text_ok(const char *s, size_t len);

/* Deletes `key` from the object store on a worker thread, logging a failure; for clean-up after a
 * request was refused or its client went away (nothing is answered). */
void files_delete_object_later(struct gw_req *r, const char *key);

#endif
