/* training_sessions.h - POST /v1/training_sessions and its calls, POST /v1/tokenize: answered by model workers. */
#ifndef WHET_GATEWAY_TRAINING_SESSIONS_H
#define WHET_GATEWAY_TRAINING_SESSIONS_H

#include "http.h"

void training_sessions_routes(struct http_router *rt);

#endif
