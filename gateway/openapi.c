/* openapi.c - GET /v1/openapi.json: the REST API's OpenAPI 3.1 document (gateway/openapi.json, compiled
 * in by cmake/embed_file.cmake), public like /healthz so clients and API tools can read the contract
 * before they hold a key. The integration tests validate every answer against the same file. */
#include <stddef.h>
#include <string.h>

#include "server.h"

extern const char whet_openapi_json[];
extern const size_t whet_openapi_json_len;

static void openapi(struct gw_req *r) {
    char *copy = xmalloc(whet_openapi_json_len); /* http_reply_bytes frees what it sends */
    memcpy(copy, whet_openapi_json, whet_openapi_json_len);
    http_reply_bytes(r, 200, "application/json", copy, whet_openapi_json_len);
}

void openapi_routes(struct http_router *rt) {
    http_route(rt, "GET", "/v1/openapi.json", openapi, HTTP_ROUTE_PUBLIC, "openapi");
}
