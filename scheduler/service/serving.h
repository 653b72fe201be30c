/* serving.h - model workers (`whet serve`) placed by the scheduler like 1-device jobs, scaled from zero
 * on demand and back to zero after an idle period (serving.c; the rows are migration 0021's).
 *
 * The gateway records demand on a base model (serving_deployments.last_request_at, and NOTIFY whet_jobs when no
 * worker of it is ready). Each cycle, before the jobs' placement: a deployment asked for within WHET_SERVE_IDLE_S
 * (default 300) wants one replica, one idle longer none, and one more (up to WHET_SERVE_MAX_REPLICAS, default 4)
 * while its ready replicas are busy and none is starting: every one has had requests waiting for a sequence slot
 * for a few seconds, or they generate on average WHET_SERVE_TOKENS_PER_S_PER_REPLICA tokens/s (default 2000: what
 * one replica is taken to sustain; the executor reads both from the worker's /metrics for each heartbeat, tokens/s
 * as the growth of its generated tokens since the previous read), until none was busy for WHET_SERVE_IDLE_S; a
 * wanted replica goes on a ready node of the deployment's pool with a device that no attempt and no other worker
 * holds (serving is placed before training, so a free device goes to a worker first); an unwanted one is marked
 * stopping. Training sessions live on a worker (the gateway pins each to one, migration 0030): a deployment never
 * wants fewer replicas than hold live sessions (a call within WHET_SESSION_IDLE_S, default 1800), so a worker
 * holding one is not idled out, and the replicas stopped are those holding none first. A worker stopped anyway
 * (lost with its node, killed, or stopped for the last of the replicas) does not take its sessions with it: their
 * state is in the object store and the gateway moves them to a ready worker. A worker's device is held in the placement snapshot (cycle.c, load_workers_held) so no job is placed on it. Each
 * heartbeat hands the node the list of workers it is to run and takes the executor's reports: ready at HOST:PORT,
 * or ended (the row goes). A wanted replica with no free device preempts a running 1-device job of the default
 * priority (below SERVE_PRIORITY, serving.c) for a base with no worker, one at a time, as the placement library's
 * preemptions do (STOP with a checkpoint; the job waits in the queue). */
#ifndef WHET_SCHEDULER_SERVING_H
#define WHET_SCHEDULER_SERVING_H

#include <libpq-fe.h>

#include "proto/whet.pb-c.h"
#include "util.h"

/* The cycle's part: workers of lost nodes forgotten, idle deployments scaled to zero, wanted replicas
 * placed. Returns 0, or -1 with err when the database failed. */
int scheduler_serving_cycle(PGconn *conn, struct whet_err *err);

/* The heartbeat's part for node `req->node_id`: records the executor's reports and sets the response's
 * serve_workers (freed by scheduler_serving_free). Returns 0, or -1 with err. */
int scheduler_serving_heartbeat(PGconn *conn, const Whet__V1__HeartbeatRequest *req, Whet__V1__HeartbeatResponse *resp,
                                struct whet_err *err);
void scheduler_serving_free(Whet__V1__HeartbeatResponse *resp);

#endif
