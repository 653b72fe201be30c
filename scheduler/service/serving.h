/* serving.h - model workers (`whet serve`) placed by the scheduler like 1-device jobs, scaled from zero
 * on demand and back to zero after an idle period (serving.c; the rows are migration 0021's).
 *
 * The gateway records demand on a base model (serving_deployments.last_request_at, and NOTIFY whet_jobs
 * when no worker of it is ready). Each cycle, before the jobs' placement: a deployment asked for within
 * WHET_SERVE_IDLE_S (default 300) wants one replica, one idle longer none; a wanted replica goes on a
 * ready node of the deployment's pool with a device that no attempt and no other worker holds (serving
 * is placed before training, so a free device goes to a worker first); an unwanted one is marked
 * stopping. A worker's device is held in the placement snapshot (SERVING_HELD_SQL) so no job is placed
 * on it. Each heartbeat hands the node the list of workers it is to run and takes the executor's
 * reports: ready at HOST:PORT, or ended (the row goes). A wanted replica with no free device preempts
 * a running 1-device job of the default priority (below SERVE_PRIORITY, serving.c), one at a time, as
 * the placement library's preemptions do (STOP with a checkpoint; the job waits in the queue).
 * Missing: more than one replica by load, the sandbox (a worker runs in its own process group, not in
 * the trainers' sandbox). */
#ifndef WHET_SCHEDULER_SERVING_H
#define WHET_SCHEDULER_SERVING_H

#include <libpq-fe.h>

#include "proto/whet.pb-c.h"
#include "util.h"

/* The devices a node's workers hold, as a mask: a column of the snapshot's query of `nodes`. */
#define SERVING_HELD_SQL \
    "(SELECT coalesce(bit_or(1 << w.device_index), 0) FROM model_workers w WHERE w.node_id = nodes.id)"

/* The cycle's part: workers of lost nodes forgotten, idle deployments scaled to zero, wanted replicas
 * placed. Returns 0, or -1 with err when the database failed. */
int scheduler_serving_cycle(PGconn *conn, struct whet_err *err);

/* The heartbeat's part for node `req->node_id`: records the executor's reports and sets the response's
 * serve_workers (freed by scheduler_serving_free). Returns 0, or -1 with err. */
int scheduler_serving_heartbeat(PGconn *conn, const Whet__V1__HeartbeatRequest *req, Whet__V1__HeartbeatResponse *resp,
                                struct whet_err *err);
void scheduler_serving_free(Whet__V1__HeartbeatResponse *resp);

#endif
