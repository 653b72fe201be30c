/* training_sessions.h - POST /v1/training_sessions and its calls, POST /v1/tokenize: answered by model workers. */
#ifndef WHET_GATEWAY_TRAINING_SESSIONS_H
#define WHET_GATEWAY_TRAINING_SESSIONS_H

#include "http.h"

void training_sessions_routes(struct http_router *rt);
/* How long a session may be idle before it expires (WHET_SESSION_IDLE_S, seconds), as the routes read it. */
int training_sessions_idle_s(void);

#endif
