/* router_table.c - every route set of the gateway, in one list: each resource file exports
 * `void <resource>_routes(struct http_router *rt)` (declared in its header) and gets one line here. */
#include "admin_fleet.h"
#include "api_keys.h"
#include "audit.h"
#include "budgets.h"
#include "checkpoint_files.h"
#include "costs.h"
#include "files.h"
#include "focus.h"
#include "graders.h"
#include "inference.h"
#include "jobs.h"
#include "metrics_series.h"
#include "models.h"
#include "prices.h"
#include "server.h"
#include "training_sessions.h"
#include "usage.h"
#include "uploads.h"

void router_register_all(struct http_router *rt) {
    health_routes(rt);
    openapi_routes(rt);
    console_routes(rt);
    admin_routes(rt);
    admin_fleet_routes(rt);
    auth_routes(rt);
    files_routes(rt);
    jobs_routes(rt);
    graders_routes(rt);
    models_routes(rt);
    checkpoint_files_routes(rt);
    usage_routes(rt);
    uploads_routes(rt);
    metrics_series_routes(rt);
    prices_routes(rt);
    costs_routes(rt);
    focus_routes(rt);
    api_keys_routes(rt);
    budgets_routes(rt);
    audit_routes(rt);
    inference_routes(rt);
    training_sessions_routes(rt);
}
