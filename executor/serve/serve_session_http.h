/* serve_session_http.h - the model worker's training sessions over HTTP (`whet serve --training`), and its
 * tokenizer (POST /v1/tokenize).
 *
 *   POST   /v1/training_sessions                       {lora: {r, alpha, target_modules, seed}} -> {id}
 *   POST   /v1/training_sessions/{id}/forward_backward {loss_fn, data: [datum…], loss_fn_config}
 *                                                       -> {loss, logprobs: [[…] per datum]}
 *   POST   /v1/training_sessions/{id}/optim_step       {adam_params: {learning_rate, beta1, beta2, eps,
 *                                                       weight_decay, grad_clip_norm}} -> {step, grad_norm}
 *   POST   /v1/training_sessions/{id}/sample           {prompt: [ids] | messages, max_tokens, temperature,
 *                                                       top_p, top_k, n, seed, stop} -> {sequences: [{tokens, text,
 *                                                       logprobs, stop_reason}]}
 *   POST   /v1/training_sessions/{id}/save             {} -> {checkpoint: PREFIX, step, model}
 *   DELETE /v1/training_sessions/{id}
 *   POST   /v1/tokenize                                {text | messages} -> {tokens}
 * (serve_session.h says what the losses compute.) The gateway, which owns sessions' tenants, may name a
 * new session (header x-whet-session), its initial adapter by object-store prefix (x-whet-adapter, as for
 * completions) and where a save goes (x-whet-save-prefix; by default sessions/ID/step-N, N the session's
 * optimiser steps) and the model name it answers (x-whet-save-model: the gateway's name for the save, a
 * fine-tuned model of the tenant; none without it). A save writes the PEFT adapter there as a checkpoint
 * (objstore_put_dir), which any worker of the base can serve. With encryption at rest the gateway adds the
 * tenant's wrapped data key (x-whet-data-key, serve_store.h) to a create with an initial adapter and to a save:
 * the initial adapter is read and the save written sealed with it. With x-whet-usage in the request (the
 * gateway meters the call), a forward_backward or sample answered 200 reports the tokens of its `usage` in the
 * header x-whet-usage: "TRAIN PREFILL SAMPLE".
 * Durable sessions: with x-whet-session-state: PREFIX (the gateway sends it with every call of a session, and
 * the tenant's data key with it) the session's state — adapter, AdamW moments and step count, not gradients —
 * is written to PREFIX/step-N after the create and after each optim_step (N its steps; PREFIX/LATEST names the
 * last whole one; sealed with the data key when one came), before the call is answered. A call with PREFIX on
 * a session this worker does not hold (its worker ended, or this one freed it when idle) first restores the
 * session from there: exactly where its last optim_step left it, gradients accumulated since then lost (a 404
 * when PREFIX has no state). A DELETE removes the state too, held here or not. A worker without an object
 * store ignores PREFIX: its sessions live in its memory alone.
 *
 * Threads: requests are checked on the HTTP loop (400 at once) and queued for the engine thread, which
 * runs them between engine steps: a session's calls in the order they came, the forward_backward calls
 * of different sessions waiting at the same time as one pass (serve_session_forward_backward) while they
 * fit in max_pass_tokens (a call that alone does not is refused), a sample as a request of the engine's
 * continuous batching with the session's adapter (the session's other calls wait for it, so its weights
 * do not change under it). Answers come back to the loop through
 * h2o's multithread queue. Fetching an initial adapter and uploading a save run on the engine thread
 * too, and so do writing and restoring a session's state: decoding pauses meanwhile (adapters are a few
 * MB). Sessions idle for the idle timeout are freed (a later call is a 404, unless it carries PREFIX: then it
 * restores the session; the gateway decides when a session has expired), and without PREFIX sessions live in
 * the worker's memory alone: a restart ends them. */
#ifndef WHET_SERVE_SESSION_HTTP_H
#define WHET_SERVE_SESSION_HTTP_H

#include <h2o.h>

#include "serve_engine.h"
#include "util.h"

struct serve_sessions;

struct serve_sessions_opts {
    int max_sessions;
    double idle_timeout_s;
    const char *object_store; /* where saves go and initial adapters come from (NULL: neither) */
    const char *cache_dir;    /* fetched initial adapters (a sessions/ dir in it) */
    int max_len;              /* the longest datum and sample (the engine's max_len) */
    int max_n;                /* a sample's sequences at most (the engine's n_slots) */
    int max_pass_tokens;      /* a forward_backward pass's padded batch (data × the longest) at most: its
                               * activations, which the base keeps at their largest */
};

/* On the loop thread, before the engine thread starts; wake(wake_ctx) makes the engine thread call
 * serve_sessions_run (it takes the lock that thread waits under). */
int serve_sessions_open(struct serve_sessions **out, const struct serve_sessions_opts *o, struct serve_engine *engine,
                        h2o_context_t *ctx, void (*wake)(void *), void *wake_ctx, struct whet_err *err);
/* After the engine thread ended. */
void serve_sessions_close(struct serve_sessions *ss);

/* Loop thread: answers or queues a request under /v1/training_sessions (1), or leaves it (0). */
int serve_sessions_on_req(struct serve_sessions *ss, h2o_req_t *req);
/* Loop thread, now and then: idle sessions are due to expire. */
void serve_sessions_tick(struct serve_sessions *ss);

/* Engine thread: whether there is work (checked under the wake lock); the work. */
int serve_sessions_pending(struct serve_sessions *ss);
void serve_sessions_run(struct serve_sessions *ss);

/* The value of the request's header `name` (a fresh string), NULL when it has none. */
char *serve_header(h2o_req_t *req, const char *name);

/* POST /v1/tokenize on the loop thread (1 when it was that route). */
int serve_tokenize_on_req(struct serve_engine *engine, h2o_req_t *req);

#endif
