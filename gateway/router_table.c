/* router_table.c - every route set of the gateway, in one list: each resource file exports
 * `void <resource>_routes(struct http_router *rt)` (declared in its header) and gets one line here. */
#include "server.h"

void router_register_all(struct http_router *rt) {
    health_routes(rt);
    admin_routes(rt);
    auth_routes(rt);
}
