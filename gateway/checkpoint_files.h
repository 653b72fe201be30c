/* checkpoint_files.h - downloads of a job's checkpoints and final model
 * (/v1/fine_tuning/jobs/{job}/checkpoints/{checkpoint}/files[/{name}]). */
#ifndef WHET_GATEWAY_CHECKPOINT_FILES_H
#define WHET_GATEWAY_CHECKPOINT_FILES_H

#include "http.h"

void checkpoint_files_routes(struct http_router *rt);

#endif
