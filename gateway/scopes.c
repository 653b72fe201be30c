/* scopes.c - API key scopes (see scopes.h). A route's area comes from its path pattern, so a new route
 * under an existing prefix is covered without a line here; a route under no known prefix needs `all`
 * (or `read` for a GET). */
#include "scopes.h"

#include <string.h>

#include "budgets.h"
#include "buf.h"
#include "files_common.h"

static const struct {
    const char *name;
    unsigned bit;
} names[] = {{"all", SCOPE_ALL},
             {"read", SCOPE_READ},
             {"files", SCOPE_FILES},
             {"jobs", SCOPE_JOBS},
             {"inference", SCOPE_INFERENCE}};

static const struct {
    const char *prefix;   /* a pattern equal to it or under it ("/v1/files" and "/v1/files/{id}") */
    unsigned write, read; /* the scopes that allow other methods, and GET */
    const char *need_write, *need_read;
} areas[] = {
    {"/v1/files", SCOPE_FILES, SCOPE_FILES, "files", "read or files"},
    {"/v1/uploads", SCOPE_FILES, SCOPE_FILES, "files", "read or files"},
    {"/v1/fine_tuning", SCOPE_JOBS, SCOPE_JOBS, "jobs", "read or jobs"},
    {"/v1/models", SCOPE_JOBS, SCOPE_JOBS | SCOPE_INFERENCE, "jobs", "read, jobs or inference"},
    {"/v1/chat", SCOPE_INFERENCE, SCOPE_INFERENCE, "inference", "read or inference"},
    {"/v1/completions", SCOPE_INFERENCE, SCOPE_INFERENCE, "inference", "read or inference"},
    {"/v1/embeddings", SCOPE_INFERENCE, SCOPE_INFERENCE, "inference", "read or inference"},
    {"/v1/responses", SCOPE_INFERENCE, SCOPE_INFERENCE, "inference", "read or inference"},
    {"/v1/training_sessions", SCOPE_JOBS, SCOPE_JOBS, "jobs", "read or jobs"},
    {"/v1/tokenize", SCOPE_JOBS | SCOPE_INFERENCE, SCOPE_JOBS | SCOPE_INFERENCE, "jobs or inference",
     "read, jobs or inference"},
    {"/v1/whoami", ~0u, ~0u, NULL, NULL},
};

/* The bit of the scope named by the n characters at s, or 0. */
static unsigned scope_bit(const char *s, size_t n) {
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i].name) == n && !strncmp(s, names[i].name, n)) return names[i].bit;
    return 0;
}

unsigned scopes_parse(const char *text) {
    unsigned mask = 0;
    if (!text) return 0;
    for (const char *p = text; *p;) {
        while (*p == '{' || *p == ',' || *p == '}') p++;
        size_t n = strcspn(p, ",}");
        mask |= scope_bit(p, n);
        p += n;
    }
    return mask;
}

const char *scopes_needed(unsigned scopes, const char *method, const char *pattern) {
    int read = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (scopes & SCOPE_ALL || (read && scopes & SCOPE_READ)) return NULL;
    for (size_t i = 0; i < sizeof areas / sizeof areas[0]; i++) {
        size_t n = strlen(areas[i].prefix);
        if (strncmp(pattern, areas[i].prefix, n) || (pattern[n] && pattern[n] != '/')) continue;
        if (scopes & (read ? areas[i].read : areas[i].write)) return NULL;
        return read ? areas[i].need_read : areas[i].need_write;
    }
    return read ? "read or all" : "all";
}

json_t *scopes_json(unsigned scopes) {
    json_t *a = json_array();
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (scopes & names[i].bit) json_array_append_new(a, json_string(names[i].name));
    return a;
}

int scopes_key_fields(struct gw_req *r, const json_t *body, struct key_fields *f) {
    memset(f, 0, sizeof *f);
    static const char *const keys[] = {"scopes", "expires_at", "name", "monthly_limit", NULL};
    if (!body) return 0;
    if (http_body_keys_known(r, body, keys)) return -1;
    json_t *scopes = json_object_get(body, "scopes"), *expires = json_object_get(body, "expires_at"),
           *name = json_object_get(body, "name");
    if (scopes) {
        struct whet_buf a = {0};
        size_t i;
        json_t *s;
        int ok = json_is_array(scopes) && json_array_size(scopes) > 0;
        whet_buf_puts(&a, "{");
        json_array_foreach(scopes, i, s) {
            ok &= json_is_string(s) && scope_bit(json_string_value(s), json_string_length(s)) != 0;
            if (!ok) break;
            whet_buf_printf(&a, "%s%s", i ? "," : "", json_string_value(s));
        }
        whet_buf_puts(&a, "}");
        if (!ok) {
            whet_buf_free(&a);
            http_reply_error(r, 400, "scopes", "invalid_value",
                             "scopes: expected a non-empty array of all, read, files, jobs, inference");
            return -1;
        }
        f->scopes = http_strdup(r, a.data);
        whet_buf_free(&a);
    }
    if (expires) {
        if (!json_is_integer(expires) || json_integer_value(expires) <= whet_now_unix() ||
            json_integer_value(expires) > 253402300799LL) {
            http_reply_error(r, 400, "expires_at", "invalid_value", "expires_at: expected a Unix time in the future");
            return -1;
        }
        f->expires_at = http_printf(r, "%lld", (long long)json_integer_value(expires));
    }
    if (name) {
        if (!json_is_string(name) || json_string_length(name) > 200 ||
            !files_text_ok(json_string_value(name), json_string_length(name))) {
            http_reply_error(r, 400, "name", "invalid_value", "name: expected text of at most 200 characters");
            return -1;
        }
        f->name = http_strdup(r, json_string_value(name));
    }
    return budget_limit_field(r, body, "monthly_limit", &f->monthly_limit);
}
