/* session_sweep.h - the state of ended training sessions removed from the object store.
 *
 * A training session keeps its state (adapter, AdamW moments, step count) under sessions/ID/state in the object
 * store (gateway/training_sessions.c). Its worker removes it when the session is deleted while the worker holds
 * it; everything else is this sweep's: a session that expired (no call for WHET_SESSION_IDLE_S), one deleted
 * while its worker was gone, one whose worker failed to remove it. A thread of each gateway, every
 * WHET_SESSION_SWEEP_S seconds (default 300), reads with its own connection (the database owner's: every
 * tenant's sessions) the sessions that ended at least that long ago (a call still running at the end has had
 * that long to write its last state) and whose state was not swept yet (training_sessions.state_swept_at,
 * migration 0031), removes each one's sessions/ID/state/ objects with the gateway's store (files_store), and
 * records the ones done; a failure is logged and tried again at the next sweep. A live session's state is never
 * read: an expired session cannot come back (its calls are 404s) nor a deleted one. Only the state goes: a
 * session's saves (sessions/ID/save-*) are fine-tuned models and outlive it. Replicas sweeping the same session
 * at once remove the same objects, which is harmless. */
#ifndef WHET_GATEWAY_SESSION_SWEEP_H
#define WHET_GATEWAY_SESSION_SWEEP_H

struct session_sweep;

/* Starts the thread on `database_url` (copied), sessions expiring after idle_s; an unreachable database is
 * retried at the next sweep. NULL (logged) only when the thread cannot start. */
struct session_sweep *session_sweep_start(const char *database_url, int idle_s);
/* Stops the thread (once its sweep in progress, if any, is done) and frees everything. NULL is a no-op. */
void session_sweep_stop(struct session_sweep *s);

#endif
