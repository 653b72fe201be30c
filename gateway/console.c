/* console.c - GET /console and /console/{asset}: the web console, a single-page app (console/ in the
 * source tree, its charting library uPlot from npm) compiled into the binary by cmake/embed_file.cmake,
 * so `whet up` serves it with no files beside the binary. Public like /v1/openapi.json: the page holds
 * no data; it signs in with an API key or a JWT kept in the browser tab and calls the REST API. */
#include <stddef.h>
#include <string.h>

#include "server.h"

extern const char whet_console_index_html[], whet_console_app_js[], whet_console_app_css[], whet_console_uplot_js[],
    whet_console_uplot_css[];
extern const size_t whet_console_index_html_len, whet_console_app_js_len, whet_console_app_css_len,
    whet_console_uplot_js_len, whet_console_uplot_css_len;

struct console_asset {
    const char *name; /* the last path segment; "" for /console itself */
    const char *type;
    const char *bytes;
    const size_t *len;
};

static const struct console_asset assets[] = {
    {"", "text/html; charset=utf-8", whet_console_index_html, &whet_console_index_html_len},
    {"app.js", "text/javascript; charset=utf-8", whet_console_app_js, &whet_console_app_js_len},
    {"app.css", "text/css; charset=utf-8", whet_console_app_css, &whet_console_app_css_len},
    {"uplot.js", "text/javascript; charset=utf-8", whet_console_uplot_js, &whet_console_uplot_js_len},
    {"uplot.css", "text/css; charset=utf-8", whet_console_uplot_css, &whet_console_uplot_css_len},
};

static void console_serve(struct gw_req *r, const char *name) {
    for (size_t i = 0; i < sizeof assets / sizeof assets[0]; i++) {
        if (strcmp(assets[i].name, name) != 0) continue;
        /* The page talks to this origin only and is never framed: a key typed into it stays in it. */
        http_add_header(r, "content-security-policy",
                        "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "
                        "frame-ancestors 'none'");
        http_add_header(r, "x-content-type-options", "nosniff");
        http_add_header(r, "cache-control", "no-cache"); /* a new binary's console shows at the next load */
        char *copy = xmalloc(*assets[i].len);            /* http_reply_bytes frees what it sends */
        memcpy(copy, assets[i].bytes, *assets[i].len);
        http_reply_bytes(r, 200, assets[i].type, copy, *assets[i].len);
        return;
    }
    http_reply_not_found(r, "console asset", name);
}

static void console_index(struct gw_req *r) { console_serve(r, ""); }

static void console_asset(struct gw_req *r) { console_serve(r, http_path_param(r, "asset")); }

void console_routes(struct http_router *rt) {
    http_route(rt, "GET", "/console", console_index, HTTP_ROUTE_PUBLIC, "console");
    http_route(rt, "GET", "/console/{asset}", console_asset, HTTP_ROUTE_PUBLIC, "console.asset");
}
