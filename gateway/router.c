/* router.c - method + path pattern -> handler. Patterns are '/'-separated segments, literal or
 * `{name}`; a request path matches a pattern with as many segments, literal segments equal, and the
 * route with the most literal segments wins ("/v1/uploads/{id}/parts" over "/v1/{x}/{id}/parts").
 * The table is small (tens of routes) and read-only once the loops start, so a linear scan it is. */
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "server.h"
#include "util.h"

struct http_router {
    struct http_route **routes;
    int n, cap;
};

struct http_router *router_new(void) { return xcalloc(1, sizeof(struct http_router)); }

void router_free(struct http_router *rt) {
    for (int i = 0; i < rt->n; i++) {
        struct http_route *route = rt->routes[i];
        for (int j = 0; j < route->nsegments; j++) {
            free(route->segments[j]);
            free(route->param_names[j]);
        }
        free(route->segments);
        free(route->param_names);
        free(route);
    }
    free(rt->routes);
    free(rt);
}

int router_count(const struct http_router *rt) { return rt->n; }
const struct http_route *router_at(const struct http_router *rt, int i) { return rt->routes[i]; }

void http_route(struct http_router *rt, const char *method, const char *pattern, http_handler handler, int flags,
                const char *name) {
    struct http_route *route = xcalloc(1, sizeof(*route));
    route->method = method;
    route->pattern = pattern;
    route->name = name ? name : pattern;
    route->handler = handler;
    route->flags = flags;
    route->index = rt->n;
    for (const char *p = pattern; *p; p++) route->nsegments += *p == '/';
    route->segments = xcalloc((size_t)route->nsegments, sizeof(char *));
    route->param_names = xcalloc((size_t)route->nsegments, sizeof(char *));
    const char *p = pattern;
    for (int i = 0; i < route->nsegments; i++) {
        p++; /* the '/' */
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char *seg = xmalloc(len + 1);
        memcpy(seg, p, len);
        seg[len] = 0;
        if (len >= 2 && seg[0] == '{' && seg[len - 1] == '}') {
            seg[len - 1] = 0;
            route->param_names[i] = xstrdup(seg + 1);
            free(seg);
        } else {
            route->segments[i] = seg;
            route->literal_count++;
        }
        p += len;
    }
    int params = route->nsegments - route->literal_count;
    if (pattern[0] != '/' || params > HTTP_PATH_PARAMS_MAX)
        log_error("msg=\"bad route pattern (must start with / and have at most %d parameters)\" pattern=\"%s\"",
                  HTTP_PATH_PARAMS_MAX, pattern);
    if (rt->n == rt->cap) {
        rt->cap = rt->cap ? rt->cap * 2 : 32;
        rt->routes = xrealloc(rt->routes, (size_t)rt->cap * sizeof(*rt->routes));
    }
    rt->routes[rt->n++] = route;
}

/* Splits `path` into at most `max` segments (after each '/'); returns the count, or -1. */
static int split_path(const char *path, size_t len, const char **seg, size_t *seglen, int max) {
    if (len == 0 || path[0] != '/') return -1;
    int n = 0;
    size_t i = 0;
    while (i < len) {
        if (n == max) return -1;
        size_t start = ++i;
        while (i < len && path[i] != '/') i++;
        seg[n] = path + start;
        seglen[n] = i - start;
        n++;
    }
    return n;
}

#define MAX_SEGMENTS 16

const struct http_route *router_match(const struct http_router *rt, struct gw_req *r, const char *method,
                                      size_t method_len, const char *path, size_t path_len, int *status) {
    const char *seg[MAX_SEGMENTS];
    size_t seglen[MAX_SEGMENTS];
    int n = split_path(path, path_len, seg, seglen, MAX_SEGMENTS);
    /* A trailing slash ("/v1/files/") names the same resource. */
    if (n > 1 && seglen[n - 1] == 0) n--;
    *status = 404;
    if (n < 0) return NULL;
    const struct http_route *best = NULL;
    for (int i = 0; i < rt->n; i++) {
        const struct http_route *route = rt->routes[i];
        if (route->nsegments != n) continue;
        int ok = 1;
        for (int j = 0; j < n && ok; j++) {
            if (route->segments[j])
                ok = strlen(route->segments[j]) == seglen[j] && !memcmp(route->segments[j], seg[j], seglen[j]);
            else
                ok = seglen[j] > 0;
        }
        if (!ok) continue;
        if (strlen(route->method) != method_len || memcmp(route->method, method, method_len)) {
            *status = 405;
            continue;
        }
        if (!best || route->literal_count > best->literal_count) best = route;
    }
    if (!best) return NULL;
    r->npath = 0;
    for (int j = 0; j < n; j++) {
        if (best->segments[j]) continue;
        r->path_names[r->npath] = best->param_names[j];
        r->path_values[r->npath] = http_path_decode(r, seg[j], seglen[j]);
        if (!r->path_values[r->npath++]) {
            *status = 400;
            return NULL;
        }
    }
    return best;
}
