/* models.c - the Models resource (see models.h). One statement lists every kind of model; retrieving
 * one filters it by id, so another tenant's fine-tuned model is a 404 like a model that never was.
 * Deleting marks the job's model (or the session's save) deleted (migration 0015 says what happens to
 * its files). */
#include "models.h"

#include "db.h"
#include "files_common.h"

/* columns: id, created, owned_by */
static json_t *model_row_to_json(const PGresult *res, int row) {
    return json_pack("{s:o, s:s, s:o, s:o}", "id", db_json_string(res, row, 0), "object", "model", "created",
                     db_json_integer(res, row, 1), "owned_by", db_json_string(res, row, 2));
}

static void models_list_done(struct gw_req *r, const struct db_result *res, void *arg) {
    if (db_reply_failed(r, res)) return;
    json_t *data = db_rows_json(res->res[0], -1, model_row_to_json);
    http_reply_json(r, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

static void models_list(struct gw_req *r) {
    const char *params[] = {http_tenant_id(r), r->tenant_name};
    db_query(r, "models_list", 2, params, models_list_done, NULL);
}

static void models_get_done(struct gw_req *r, const struct db_result *res, void *arg) {
    if (db_reply_failed(r, res)) return;
    if (PQntuples(res->res[0]) == 0) {
        http_reply_error(r, 404, "model", "model_not_found", "model %s does not exist or you do not have access to it",
                         http_path_param(r, "id"));
        return;
    }
    http_reply_json(r, 200, model_row_to_json(res->res[0], 0));
}

static void models_get(struct gw_req *r) {
    const char *params[] = {http_tenant_id(r), r->tenant_name, http_path_param(r, "id")};
    db_query(r, "models_get", 3, params, models_get_done, NULL);
}

static void models_delete_done(struct gw_req *r, const struct db_result *res, void *arg) {
    if (db_reply_failed(r, res)) return;
    if (PQntuples(res->res[0]) == 0) {
        http_reply_error(r, 404, "model", "model_not_found",
                         "model %s does not exist or you do not have access to it (only your own fine-tuned models, "
                         "ft:…, can be deleted)",
                         http_path_param(r, "id"));
        return;
    }
    http_reply_json(
        r, 200, json_pack("{s:o, s:s, s:b}", "id", db_json_string(res->res[0], 0, 0), "object", "model", "deleted", 1));
}

static void models_delete(struct gw_req *r) {
    const char *params[] = {http_tenant_id(r), http_path_param(r, "id")};
    db_query(r, "models_delete", 2, params, models_delete_done, NULL);
}

#define MODELS_UNION                                                                                                   \
    "SELECT id, created_at AS created, 'whet' AS owned_by FROM base_models "                                           \
    "UNION ALL SELECT fine_tuned_model, coalesce(finished_at, created_at), $2::text FROM jobs "                        \
    "WHERE tenant_id = $1 AND status = 'succeeded' AND fine_tuned_model IS NOT NULL AND model_deleted_at IS NULL "    \
    "UNION ALL SELECT model, created_at, $2::text FROM session_models WHERE tenant_id = $1 AND deleted_at IS NULL"

void models_routes(struct http_router *rt) {
    db_prepare("models_list", "SELECT * FROM (" MODELS_UNION ") m ORDER BY created, id");
    db_prepare("models_get", "SELECT * FROM (" MODELS_UNION ") m WHERE id = $3 LIMIT 1");
    http_route(rt, "GET", "/v1/models", models_list, 0, "models.list");
    /* a model that was deleted is a 404, like one that never was (OpenAI's answer to a second delete) */
    db_prepare("models_delete",
               "WITH j AS (UPDATE jobs SET model_deleted_at = whet_now() WHERE tenant_id = $1 AND fine_tuned_model = $2"
               " AND status = 'succeeded' AND model_deleted_at IS NULL RETURNING fine_tuned_model),"
               " s AS (UPDATE session_models SET deleted_at = whet_now() WHERE tenant_id = $1 AND model = $2"
               " AND deleted_at IS NULL RETURNING model)"
               " SELECT fine_tuned_model FROM j UNION ALL SELECT model FROM s");
    http_route(rt, "GET", "/v1/models/{id}", models_get, 0, "models.retrieve");
    http_route(rt, "DELETE", "/v1/models/{id}", models_delete, HTTP_ROUTE_TENANT, "models.delete");
}
