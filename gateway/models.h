/* models.h - the Models resource: `GET /v1/models` and `GET /v1/models/{id}`, OpenAI's model objects
 * for the base models in the catalog (owned_by "whet") and the tenant's own fine-tuned models (the
 * fine_tuned_model of its succeeded jobs and its training sessions' saves, owned_by the tenant's name);
 * `DELETE /v1/models/{id}` for a fine-tuned model, which is then neither listed nor served. */
#ifndef WHET_GATEWAY_MODELS_H
#define WHET_GATEWAY_MODELS_H

struct http_router;

void models_routes(struct http_router *rt);

#endif
