/* test_scopes.c - API key scopes against every route the gateway registers (router_register_all): every
 * tenant route but the ones listed here belongs to an area a scope names, so a route added later under
 * a new prefix fails this test until its scope is decided; read-only keys may call every GET and
 * nothing else; each area's scope opens its routes and no other's; `all` opens everything. Also the
 * text[] parsing and JSON of scopes. */
#include <stdlib.h>
#include <string.h>

#include "scopes.h"
#include "server.h"
#include "test.h"

/* Tenant routes with no area of their own: only `all` (or `read`, for a GET) may call them. */
static const char *const need_all[] = {"/v1/usage",    "/v1/costs",         "/v1/prices",
                                       "/v1/api_keys", "/v1/api_keys/{id}", "/v1/budget"};

static int in_need_all(const char *pattern) {
    for (size_t i = 0; i < sizeof need_all / sizeof *need_all; i++)
        if (!strcmp(pattern, need_all[i])) return 1;
    return 0;
}

TEST(every_route_is_scoped) {
    struct http_router *rt = router_new();
    router_register_all(rt);
    int tenant_routes = 0;
    for (int i = 0; i < router_count(rt); i++) {
        const struct http_route *route = router_at(rt, i);
        if (route->flags & (HTTP_ROUTE_PUBLIC | HTTP_ROUTE_ADMIN)) continue;
        tenant_routes++;
        const char *m = route->method, *p = route->pattern;
        int get = !strcmp(m, "GET");
        CHECK_MSG(scopes_needed(SCOPE_ALL, m, p) == NULL, "all: %s %s", m, p);
        CHECK_MSG((scopes_needed(SCOPE_READ, m, p) == NULL) == (get || !strcmp(p, "/v1/whoami")), "read: %s %s", m, p);
        if (!strcmp(p, "/v1/whoami")) continue;
        unsigned area = !strncmp(p, "/v1/files", 9) || !strncmp(p, "/v1/uploads", 11) ? SCOPE_FILES
                        : !strncmp(p, "/v1/fine_tuning", 15)                          ? SCOPE_JOBS
                        : !strncmp(p, "/v1/models", 10) ? (get ? SCOPE_JOBS | SCOPE_INFERENCE : SCOPE_JOBS)
                        : !strncmp(p, "/v1/chat", 8) || !strncmp(p, "/v1/completions", 15) ? SCOPE_INFERENCE
                        : !strncmp(p, "/v1/training_sessions", 21)                          ? SCOPE_JOBS
                        : !strcmp(p, "/v1/tokenize")                                        ? SCOPE_JOBS | SCOPE_INFERENCE
                                                                                             : 0;
        CHECK_MSG(area || in_need_all(p), "route %s %s has no scope area: add it to scopes.c (and here)", m, p);
        for (unsigned bit = SCOPE_FILES; bit <= SCOPE_INFERENCE; bit <<= 1) {
            const char *needed = scopes_needed(bit, m, p);
            CHECK_MSG((needed == NULL) == ((area & bit) != 0), "scope %u: %s %s", bit, m, p);
            CHECK_MSG(!needed || strlen(needed) > 0, "a refusal names the scope: %s %s", m, p);
        }
    }
    CHECK(tenant_routes >= 30);
    router_free(rt);
}

TEST(refusals_name_the_scope) {
    CHECK_STR(scopes_needed(SCOPE_READ, "POST", "/v1/fine_tuning/jobs"), "jobs");
    CHECK_STR(scopes_needed(SCOPE_FILES, "GET", "/v1/fine_tuning/jobs/{id}"), "read or jobs");
    CHECK_STR(scopes_needed(SCOPE_JOBS, "POST", "/v1/files"), "files");
    CHECK_STR(scopes_needed(SCOPE_INFERENCE, "GET", "/v1/usage"), "read or all");
    CHECK_STR(scopes_needed(SCOPE_JOBS | SCOPE_FILES, "POST", "/v1/api_keys"), "all");
    CHECK(scopes_needed(SCOPE_INFERENCE, "POST", "/v1/chat/completions") == NULL);
    CHECK(scopes_needed(SCOPE_JOBS, "POST", "/v1/chat/completions") != NULL);
    CHECK(scopes_needed(SCOPE_FILES, "GET", "/v1/filesystem") != NULL); /* a prefix is a whole segment */
}

TEST(parse_and_json) {
    CHECK(scopes_parse("{all}") == SCOPE_ALL);
    CHECK(scopes_parse("{files,jobs}") == (SCOPE_FILES | SCOPE_JOBS));
    CHECK(scopes_parse("{read,bogus}") == SCOPE_READ);
    CHECK(scopes_parse("{}") == 0 && scopes_parse(NULL) == 0);
    json_t *j = scopes_json(SCOPE_INFERENCE | SCOPE_READ);
    char *text = json_dumps(j, JSON_COMPACT);
    CHECK_STR(text, "[\"read\",\"inference\"]");
    free(text);
    json_decref(j);
}

int main(void) {
    RUN(every_route_is_scoped);
    RUN(refusals_name_the_scope);
    RUN(parse_and_json);
    return test_summary();
}
