/* inference.h - OpenAI's POST /v1/chat/completions and /v1/completions, answered by model workers. */
#ifndef WHET_GATEWAY_INFERENCE_H
#define WHET_GATEWAY_INFERENCE_H

#include "http.h"

void inference_routes(struct http_router *rt);
/* Resolves `model` for the request's tenant (a catalog base model, one of the tenant's fine-tuned models
 * or one of their checkpoints) and calls done with its base model and adapter prefix (NULL: the base
 * alone); a name the tenant has no model of is a 404 model_not_found. */
typedef void (*inference_resolved_fn)(struct gw_req *r, const char *model, const char *base, const char *prefix);
void inference_resolve(struct gw_req *r, const char *model, inference_resolved_fn done);
/* Calls next with the tenant's data key wrapped for a model worker (files_tenant_wrapped_key: the text
 * a worker gets in x-whet-data-key to open the tenant's sealed objects), NULL when encryption at rest
 * is off. The first lookup of a tenant reads PostgreSQL on a gateway worker thread; a key that cannot
 * be had is a 503. */
typedef void (*inference_keyed_fn)(struct gw_req *r, const char *data_key, void *arg);
void inference_data_key(struct gw_req *r, inference_keyed_fn next, void *arg);

#endif
