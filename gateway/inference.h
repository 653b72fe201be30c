/* inference.h - OpenAI's POST /v1/chat/completions and /v1/completions, answered by model workers. */
#ifndef WHET_GATEWAY_INFERENCE_H
#define WHET_GATEWAY_INFERENCE_H

#include "http.h"

void inference_routes(struct http_router *rt);

#endif
