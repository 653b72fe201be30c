/* serve_api.h - OpenAI's chat completions and completions as the model worker speaks them: request
 * bodies checked and turned into prompt tokens and sampling settings, and the response objects and
 * stream chunks built. No I/O: serve_http.c moves the bytes.
 *
 * Parameters follow OpenAI's: model, messages (chat) or prompt (completions, a string), max_tokens or
 * max_completion_tokens (default: the rest of the sequence for chat, 16 for completions), temperature
 * [0, 2] (default 1), top_p (0, 1], n [1, the worker's batch], stop (a string or up to 4), seed, stream,
 * stream_options.include_usage, logprobs (chat: true with top_logprobs [0, 20]; completions: an integer
 * [0, 5]), user (accepted, unused). whet adds top_k. Log-probs are log softmax of the logits at
 * temperature 1, the trainer's measure (`whet score`), whatever temperature drew the token. Anything
 * this worker would silently ignore (tools, response_format, …) is refused with its name. */
#ifndef WHET_SERVE_API_H
#define WHET_SERVE_API_H

#include <stddef.h>

#include "sample_row.h"
#include "serve_engine.h"
#include "util.h"

struct tokenizer;
struct chat_template;

enum serve_api_kind { SERVE_API_CHAT, SERVE_API_COMPLETION };

struct serve_api_request {
    enum serve_api_kind kind;
    char *model;
    int *prompt, n_prompt;
    int n, max_tokens;
    struct sample_row sampling; /* seed set from `seed`, or drawn at random */
    char **stop;
    int n_stop;
    int stream, include_usage;
    int logprobs; /* report the drawn tokens' log-probs (and sampling.top_logprobs of the likeliest) */
};

/* One drawn token with its log-probs. */
struct serve_api_token {
    int id;
    float logprob;
    int n_top;
    int top_ids[SAMPLE_TOP_MAX];
    float top_logprobs[SAMPLE_TOP_MAX];
};

/* A choice's answer (so far). */
struct serve_api_choice {
    const char *text;
    size_t text_len;
    enum serve_finish finish;
    const struct serve_api_token *tokens; /* with logprobs: every token of the choice (or of the chunk) */
    int n_tokens;
};

/* The limits the worker puts on a request. */
struct serve_api_limits {
    int max_n;   /* the worker's batch */
    int max_len; /* prompt + completion */
};

/* Parses and checks a request body. On failure returns -1 with err's message naming the problem and
 * `param` (param_len bytes) the OpenAI parameter it is about ("" when none). */
int serve_api_parse(struct serve_api_request *out, enum serve_api_kind kind, const char *body, size_t len,
                    const struct tokenizer *tok, const struct chat_template *tpl, const struct serve_api_limits *lim,
                    char *param, size_t param_len, struct whet_err *err);
void serve_api_request_free(struct serve_api_request *r);
/* The prompt tokens of body `root` into r->prompt and r->n_prompt, as r->kind says: messages rendered
 * with the chat template (and the assistant's turn opened), or the prompt string encoded. */
struct json_t;
int serve_api_prompt(struct serve_api_request *r, const struct json_t *root, const struct tokenizer *tok,
                     const struct chat_template *tpl, char *param, size_t param_len, struct whet_err *err);
/* The stop strings of body `root` (`stop`: a string or up to 4) into r->stop and r->n_stop. */
int serve_api_stops(struct serve_api_request *r, const struct json_t *root, char *param, size_t param_len,
                    struct whet_err *err);

/* The engine's request of a parsed one (borrowing its prompt and stop strings), for the adapter the
 * caller sets and events to emit(ctx). */
struct serve_request serve_api_engine_request(const struct serve_api_request *r, serve_emit_fn emit, void *ctx);

/* OpenAI's finish_reason of an engine finish: "stop", "length" (cancelled and failed choices never
 * reach a client). */
const char *serve_api_finish_reason(enum serve_finish f);

/* The whole response of a request that did not stream, choices[0..r->n). Returns a fresh JSON text the
 * caller frees. tok decodes the tokens of log-probs. */
char *serve_api_response(const struct serve_api_request *r, const struct tokenizer *tok, const char *id,
                         long long created, const struct serve_api_choice *choices, int prompt_tokens,
                         int completion_tokens);
/* One stream chunk ("data: {...}\n\n") for choice `index`: its text piece and the log-probs of its
 * tokens in c (role "assistant" on a chat choice's first chunk), or its finish reason (finish non-NULL).
 * The caller frees it. */
char *serve_api_chunk(const struct serve_api_request *r, const struct tokenizer *tok, const char *id,
                      long long created, int index, int first, const struct serve_api_choice *c, const char *finish);
char *serve_api_usage_chunk(const struct serve_api_request *r, const char *id, long long created, int prompt_tokens,
                            int completion_tokens);
/* How much of s[0..len) can be sent now: all but a trailing multi-byte character whose last bytes
 * are still to come (the next token completes it). */
size_t serve_api_complete_prefix(const char *s, size_t len);
/* OpenAI's error body {"error": {message, type, param, code}}; param and code may be NULL. */
char *serve_api_error(const char *message, const char *type, const char *param, const char *code);

#endif
