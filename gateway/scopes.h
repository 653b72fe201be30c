/* scopes.h - what an API key may do. A key holds one or more scopes (api_keys.scopes, migration 0007):
 *   all        every route (the default, and every tenant JWT)
 *   read       every GET
 *   files      /v1/files, /v1/uploads
 *   jobs       /v1/fine_tuning/... (jobs, events, checkpoints and their files, metrics, graders), GET /v1/models
 *   inference  /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses, GET /v1/models
 * Every tenant route is checked before its handler runs (server_auth.c): a key without the scope a
 * route needs gets a 403 that names it. Any key may call GET /v1/whoami. Keys that manage keys
 * (/v1/api_keys, POST and DELETE) need `all`. */
#ifndef WHET_GATEWAY_SCOPES_H
#define WHET_GATEWAY_SCOPES_H

#include <jansson.h>

#include "http.h"

enum scope {
    SCOPE_ALL = 1 << 0,
    SCOPE_READ = 1 << 1,
    SCOPE_FILES = 1 << 2,
    SCOPE_JOBS = 1 << 3,
    SCOPE_INFERENCE = 1 << 4
};

/* PostgreSQL's text[] output ("{files,jobs}") -> a mask of enum scope; unknown names count for nothing. */
unsigned scopes_parse(const char *array_text);
/* NULL when a key with `scopes` may call `method` on the route `pattern`; else the scope it needs, as
 * text for the 403 ("jobs", "read or jobs", "all"). */
const char *scopes_needed(unsigned scopes, const char *method, const char *pattern);
/* The mask as a JSON array of names. */
json_t *scopes_json(unsigned scopes);

/* A key create's optional fields: "scopes" (array of names, default ["all"]), "expires_at" (Unix
 * seconds, in the future), "name" (text), "monthly_limit" (the key's own budget: its jobs' spend a
 * month, budgets.h). Fills the statement parameters (text[] literal, bigint, text, numeric; NULL when
 * absent) in the request's pool; answers 400 naming the field and returns -1 on a bad one. */
struct key_fields {
    const char *scopes, *expires_at, *name, *monthly_limit;
};
int scopes_key_fields(struct gw_req *r, const json_t *body, struct key_fields *f);

#endif
