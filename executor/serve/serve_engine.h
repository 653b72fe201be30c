/* serve_engine.h - the model worker's engine: one copy of a base model, many adapters, continuous
 * batching of many requests' sequences.
 *
 * What `whet serve` runs (and, later, co-training on the same worker). The engine holds a base model
 * loaded for inference, an LRU cache of adapters (views of the base: model_load_adapter_view), and a
 * KV cache of n_slots sequences of max_len tokens. Requests are submitted at any time; every
 * serve_engine_step first admits waiting requests while there are free slots (a prefill of the prompt
 * under the request's adapter, drawing the first token of each of its n choices, the prompt's cache
 * copied to the other n-1 slots), then decodes every running sequence in ONE pass, the rows grouped
 * by adapter into LoRA runs (model_set_lora_runs). A sequence ends on an end-of-turn token, a stop
 * string (the text is cut before it), max_tokens, or a full slot; its slot is free for the next
 * request at once. Token k of choice c is drawn from (the request's seed mixed with c, k), so a
 * request's output does not depend on what else shares its batches: greedy or seeded, it equals the
 * same request run alone (`whet sample`).
 *
 * Events reach the caller through its emit callback, on the thread that calls serve_engine_step: one
 * per token (its text piece; empty when the token only completes a multi-byte character or a stop
 * string, or ends the turn), and a final one per choice with the finish reason and token counts.
 *
 * Thread safety: none; the caller serialises calls (the worker's one engine thread). */
#ifndef WHET_SERVE_ENGINE_H
#define WHET_SERVE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "sample_row.h"
#include "util.h"

struct serve_engine;
struct model;
struct tokenizer;
struct chat_template;

struct serve_engine_opts {
    const char *model_dir;  /* the base model (Hugging Face dir with tokenizer files) */
    const char *device;     /* "cpu" (NULL), "cuda", "cuda:N" */
    int n_slots;            /* sequences decoded at once (the batch) */
    int max_len;            /* tokens per sequence, prompt included */
    int max_adapters;       /* adapters kept loaded (LRU); one in use is never evicted */
    int training;           /* the base is loaded frozen for training (model_opts.frozen_base): training
                             * sessions' adapter views train on it (serve_session.h) */
};

enum serve_finish { SERVE_RUNNING, SERVE_STOP, SERVE_LENGTH, SERVE_CANCELLED, SERVE_ERROR };

struct serve_event {
    uint64_t request;
    int choice;
    int token;             /* the token drawn (-1 on the final event) */
    float logprob;         /* its log-prob (log softmax of the logits, temperature 1) */
    int n_top;             /* the request's top_logprobs: the most likely tokens at this position */
    const int *top_ids;    /* [n_top], most likely first (valid during the callback) */
    const float *top_logprobs;
    const char *text;      /* its text, text_len bytes (valid during the callback) */
    size_t text_len;
    enum serve_finish finish; /* SERVE_RUNNING on token events */
    int prompt_tokens, completion_tokens; /* on the final event */
};
typedef void (*serve_emit_fn)(void *ctx, const struct serve_event *ev);

struct serve_request {
    const char *adapter;   /* a PEFT adapter dir, or NULL for the base model */
    struct model *view;    /* instead of adapter: a view of the base the caller owns and keeps until the
                            * request's last final event (a training session's current weights) */
    const int *prompt;     /* token ids, already chat-templated */
    int n_prompt;
    int n;                 /* choices, 1 <= n <= n_slots */
    int max_tokens;        /* >= 1; prompt + max_tokens <= max_len */
    struct sample_row sampling; /* seed, temperature, top_p, top_k, top_logprobs (counter and vocab are the
                                 * engine's) */
    char *const *stop;     /* stop strings (copied) */
    int n_stop;
    serve_emit_fn emit;
    void *ctx;
};

int serve_engine_open(struct serve_engine **out, const struct serve_engine_opts *o, struct whet_err *err);
void serve_engine_close(struct serve_engine *e);
/* The base model, for callers that run their own passes on it between steps (training sessions). */
struct model *serve_engine_base(const struct serve_engine *e);
/* The engine's tokenizer and chat template, for callers that render and tokenize prompts. */
const struct tokenizer *serve_engine_tokenizer(const struct serve_engine *e);
const struct chat_template *serve_engine_chat_template(const struct serve_engine *e);

/* Queues a request (checked now: an error is the caller's 400); *id names it in its events. */
int serve_engine_submit(struct serve_engine *e, const struct serve_request *r, uint64_t *id, struct whet_err *err);
/* Stops a request: its sequences end with SERVE_CANCELLED at the next step. */
void serve_engine_cancel(struct serve_engine *e, uint64_t id);
/* Admits what fits and decodes one token of every running sequence. Returns the number of requests
 * still waiting or running (0: idle), or -1 when the device failed (err); a request whose adapter
 * cannot be loaded ends with final events of finish SERVE_ERROR whose text is the error. */
int serve_engine_step(struct serve_engine *e, struct whet_err *err);

struct serve_stats {
    long long steps, decoded_tokens, prefill_tokens;
    int running, waiting, adapters_loaded;
    long long adapter_loads, adapter_evictions;
};
struct serve_stats serve_engine_stats(const struct serve_engine *e);

#endif
