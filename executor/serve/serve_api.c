/* serve_api.c - OpenAI request bodies in, response objects and stream chunks out (see serve_api.h). */
#include "serve_api.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "crypto.h"
#include "json_text.h"
#include "tokenizer.h"
#include "utf8.h"

#define MAX_STOP 4

/* Fails with "NAME: PROBLEM" and the parameter named. */
static int bad(char *param, size_t param_len, const char *name, struct whet_err *err, const char *problem) {
    snprintf(param, param_len, "%s", name);
    return whet_errf(err, "%s: %s", name, problem);
}

/* A number field in [lo, hi] (absent or null: keeps *out). */
static int number_in(const json_t *root, const char *name, double lo, double hi, int integer, double *out, char *param,
                     size_t param_len, struct whet_err *err) {
    const json_t *v = json_object_get(root, name);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v) || (integer && !json_is_integer(v)))
        return bad(param, param_len, name, err, integer ? "expected an integer" : "expected a number");
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        snprintf(param, param_len, "%s", name);
        return whet_errf(err, "%s: %g is outside [%g, %g]", name, d, lo, hi);
    }
    *out = d;
    return 0;
}

int serve_api_prompt(struct serve_api_request *r, const json_t *root, const struct tokenizer *tok,
                     const struct chat_template *tpl, char *param, size_t param_len, struct whet_err *err) {
    int32_t *ids = NULL;
    if (r->kind == SERVE_API_COMPLETION) {
        const json_t *p = json_object_get(root, "prompt");
        if (!json_is_string(p)) return bad(param, param_len, "prompt", err, "expected a string");
        size_t n;
        if (tokenizer_encode(tok, json_string_value(p), json_string_length(p), &ids, &n, err)) return -1;
        r->n_prompt = (int)n;
    } else {
        const json_t *msgs = json_object_get(root, "messages");
        if (!json_is_array(msgs) || json_array_size(msgs) == 0)
            return bad(param, param_len, "messages", err, "expected a non-empty array");
        size_t n = json_array_size(msgs);
        struct chat_message *m = calloc(n, sizeof *m);
        for (size_t i = 0; i < n; i++) {
            const json_t *msg = json_array_get(msgs, i);
            const json_t *role = json_object_get(msg, "role"), *content = json_object_get(msg, "content");
            if (!json_is_string(role) || !json_is_string(content)) {
                free(m);
                snprintf(param, param_len, "messages[%zu]", i);
                return whet_errf(err, "messages[%zu]: expected {\"role\": string, \"content\": string}", i);
            }
            /* OpenAI's "developer" role is the system prompt of newer models */
            m[i].role = strcmp(json_string_value(role), "developer") ? json_string_value(role) : "system";
            m[i].content = json_string_value(content);
        }
        uint8_t *mask = NULL;
        int rc = chat_tokenize(&ids, &mask, &r->n_prompt, tpl, tok, m, (int)n, 1, err);
        free(m);
        free(mask);
        if (rc) {
            snprintf(param, param_len, "messages");
            return whet_err_prefix(err, "messages");
        }
    }
    r->prompt = malloc(sizeof(int) * (size_t)(r->n_prompt > 0 ? r->n_prompt : 1));
    for (int i = 0; i < r->n_prompt; i++) r->prompt[i] = ids[i];
    free(ids);
    if (r->n_prompt == 0) return bad(param, param_len, "prompt", err, "the prompt has no tokens");
    return 0;
}

int serve_api_stops(struct serve_api_request *r, const json_t *root, char *param, size_t param_len,
                    struct whet_err *err) {
    const json_t *s = json_object_get(root, "stop");
    if (!s || json_is_null(s)) return 0;
    size_t n = json_is_string(s) ? 1 : json_is_array(s) ? json_array_size(s) : MAX_STOP + 1;
    if (n > MAX_STOP) return bad(param, param_len, "stop", err, "expected a string or up to 4 strings");
    r->stop = calloc(n + 1, sizeof *r->stop);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_is_string(s) ? s : json_array_get(s, i);
        if (!json_is_string(v) || json_string_length(v) == 0)
            return bad(param, param_len, "stop", err, "stop strings must be non-empty strings");
        r->stop[r->n_stop++] = strdup(json_string_value(v));
    }
    return 0;
}

/* Chat: logprobs true|false and top_logprobs [0, 20] (only with logprobs); completions: logprobs an
 * integer [0, 5], the top tokens to report (so 0 reports the drawn token's alone). */
static int logprobs_of(struct serve_api_request *r, const json_t *root, double *top, char *param, size_t param_len,
                       struct whet_err *err) {
    const json_t *lp = json_object_get(root, "logprobs"), *tl = json_object_get(root, "top_logprobs");
    if (r->kind == SERVE_API_COMPLETION) {
        if (tl && !json_is_null(tl)) return bad(param, param_len, "top_logprobs", err, "not a completions parameter");
        if (!lp || json_is_null(lp)) return 0;
        r->logprobs = 1;
        return number_in(root, "logprobs", 0, 5, 1, top, param, param_len, err);
    }
    if (lp && !json_is_null(lp) && !json_is_boolean(lp))
        return bad(param, param_len, "logprobs", err, "expected true or false");
    r->logprobs = json_is_true(lp);
    if (tl && !json_is_null(tl) && !r->logprobs)
        return bad(param, param_len, "top_logprobs", err, "needs logprobs: true");
    return number_in(root, "top_logprobs", 0, SAMPLE_TOP_MAX, 1, top, param, param_len, err);
}

int serve_api_parse(struct serve_api_request *out, enum serve_api_kind kind, const char *body, size_t len,
                    const struct tokenizer *tok, const struct chat_template *tpl, const struct serve_api_limits *lim,
                    char *param, size_t param_len, struct whet_err *err) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    *param = 0;
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (!json_is_object(root)) {
        json_decref(root);
        return whet_errf(err, "the body must be a JSON object (%s)", root ? "got another JSON value" : jerr.text);
    }
    static const char *const unsupported[] = {"tools",      "functions", "response_format", "logit_bias", "audio",
                                              "modalities", "echo",      "best_of",         "suffix"};
    int rc = -1;
    for (size_t i = 0; i < WHET_ARRAY_LEN(unsupported); i++) {
        const json_t *v = json_object_get(root, unsupported[i]);
        if (v && !json_is_null(v) && !json_is_false(v)) {
            bad(param, param_len, unsupported[i], err, "not supported by this model worker yet");
            goto out;
        }
    }
    const json_t *model = json_object_get(root, "model");
    if (!json_is_string(model)) {
        bad(param, param_len, "model", err, "expected the name of a model");
        goto out;
    }
    out->model = strdup(json_string_value(model));
    double n = 1, temperature = 1, top_p = 1, top_k = 0, max_tokens = -1, seed = -1;
    const char *max_name = json_object_get(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (number_in(root, "n", 1, lim->max_n, 1, &n, param, param_len, err) ||
        number_in(root, "temperature", 0, 2, 0, &temperature, param, param_len, err) ||
        number_in(root, "top_p", 1e-9, 1, 0, &top_p, param, param_len, err) ||
        number_in(root, "top_k", 0, 1 << 20, 1, &top_k, param, param_len, err) ||
        number_in(root, max_name, 1, lim->max_len, 1, &max_tokens, param, param_len, err) ||
        number_in(root, "seed", -9.2e18, 9.2e18, 1, &seed, param, param_len, err) ||
        serve_api_stops(out, root, param, param_len, err) || serve_api_prompt(out, root, tok, tpl, param, param_len, err))
        goto out;
    const json_t *stream = json_object_get(root, "stream");
    if (stream && !json_is_null(stream) && !json_is_boolean(stream)) {
        bad(param, param_len, "stream", err, "expected true or false");
        goto out;
    }
    out->stream = json_is_true(stream);
    out->include_usage = json_is_true(json_object_get(json_object_get(root, "stream_options"), "include_usage"));
    int room = lim->max_len - out->n_prompt;
    if (room < 1) {
        snprintf(param, param_len, "%s", kind == SERVE_API_CHAT ? "messages" : "prompt");
        whet_errf(err, "the prompt has %d tokens; this model worker takes at most %d tokens in all", out->n_prompt,
                  lim->max_len);
        goto out;
    }
    if (max_tokens < 0) max_tokens = kind == SERVE_API_CHAT ? room : (room < 16 ? room : 16);
    if (max_tokens > room) {
        snprintf(param, param_len, "%s", max_name);
        whet_errf(err, "%s: %d tokens after a prompt of %d exceed the %d this model worker takes", max_name,
                  (int)max_tokens, out->n_prompt, lim->max_len);
        goto out;
    }
    out->n = (int)n, out->max_tokens = (int)max_tokens;
    double top = 0;
    if (logprobs_of(out, root, &top, param, param_len, err)) goto out;
    uint64_t s;
    if (seed == -1 && !json_object_get(root, "seed")) whet_random_bytes(&s, sizeof s);
    else s = (uint64_t)(int64_t)seed;
    out->sampling = (struct sample_row){.seed = s,
                                        .temperature = (float)temperature,
                                        .top_p = (float)top_p,
                                        .top_k = (int)top_k,
                                        .top_logprobs = (int)top};
    rc = 0;
out:
    json_decref(root);
    if (rc) serve_api_request_free(out);
    return rc;
}

void serve_api_request_free(struct serve_api_request *r) {
    free(r->model);
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    memset(r, 0, sizeof *r);
}

struct serve_request serve_api_engine_request(const struct serve_api_request *r, serve_emit_fn emit, void *ctx) {
    return (struct serve_request){.prompt = r->prompt,
                                  .n_prompt = r->n_prompt,
                                  .n = r->n,
                                  .max_tokens = r->max_tokens,
                                  .sampling = r->sampling,
                                  .stop = r->stop,
                                  .n_stop = r->n_stop,
                                  .emit = emit,
                                  .ctx = ctx};
}

const char *serve_api_finish_reason(enum serve_finish f) { return f == SERVE_LENGTH ? "length" : "stop"; }

static const char *object_name(const struct serve_api_request *r, int chunk) {
    if (r->kind == SERVE_API_CHAT) return chunk ? "chat.completion.chunk" : "chat.completion";
    return "text_completion";
}

static json_t *usage_of(int prompt_tokens, int completion_tokens) {
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", prompt_tokens, "completion_tokens", completion_tokens,
                     "total_tokens", prompt_tokens + completion_tokens);
}

/* A JSON string of text that may hold bytes a token split or a model made up: invalid sequences become
 * U+FFFD, so the body stays UTF-8. */
static json_t *text_json(const char *s, size_t n) {
    struct whet_buf fixed = {0};
    if (utf8_repair(s ? s : "", s ? n : 0, &fixed)) return json_stringn_nocheck(s ? s : "", s ? n : 0);
    json_t *v = json_stringn_nocheck(fixed.data, fixed.len);
    whet_buf_free(&fixed);
    return v;
}

size_t serve_api_complete_prefix(const char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        size_t k = utf8_seq_len((const unsigned char *)s + i, len - i);
        if (k == 0) {
            /* the start of a sequence whose rest has not been drawn yet waits for it; a byte that can
             * start nothing passes (and is replaced when sent) */
            unsigned char c = (unsigned char)s[i];
            size_t need = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 0;
            int prefix = need > len - i;
            for (size_t j = i + 1; prefix && j < len; j++) prefix = ((unsigned char)s[j] & 0xc0) == 0x80;
            if (prefix) break;
            k = 1;
        }
        i += k;
    }
    return i;
}

static char *dump(json_t *v) {
    char *s = whet_json_compact(v, NULL);
    json_decref(v);
    return s;
}

/* A token's text as OpenAI reports it: the string (invalid bytes as U+FFFD) and its bytes. */
static void token_text(const struct tokenizer *tok, int id, json_t **text, json_t **bytes) {
    char *piece = NULL;
    size_t len = 0;
    int32_t id32 = id;
    struct whet_err err;
    if (tokenizer_decode(tok, &id32, 1, &piece, &len, &err)) len = 0;
    *text = text_json(piece, len);
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < len; i++) json_array_append_new(*bytes, json_integer((unsigned char)piece[i]));
    }
    free(piece);
}

/* Chat's logprobs: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}. */
static json_t *chat_logprobs(const struct tokenizer *tok, const struct serve_api_choice *c) {
    json_t *content = json_array();
    for (int t = 0; t < c->n_tokens; t++) {
        const struct serve_api_token *k = &c->tokens[t];
        json_t *text, *bytes, *tops = json_array();
        for (int j = 0; j < k->n_top; j++) {
            json_t *tt, *tb;
            token_text(tok, k->top_ids[j], &tt, &tb);
            json_array_append_new(
                tops, json_pack("{s:o, s:f, s:o}", "token", tt, "logprob", (double)k->top_logprobs[j], "bytes", tb));
        }
        token_text(tok, k->id, &text, &bytes);
        json_array_append_new(content, json_pack("{s:o, s:f, s:o, s:o}", "token", text, "logprob", (double)k->logprob,
                                                 "bytes", bytes, "top_logprobs", tops));
    }
    return json_pack("{s:o, s:n}", "content", content, "refusal");
}

/* Completions' logprobs: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}. */
static json_t *completion_logprobs(const struct tokenizer *tok, const struct serve_api_choice *c) {
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offsets = json_array();
    size_t offset = 0;
    for (int t = 0; t < c->n_tokens; t++) {
        const struct serve_api_token *k = &c->tokens[t];
        json_t *text;
        token_text(tok, k->id, &text, NULL);
        json_array_append_new(offsets, json_integer((json_int_t)offset));
        offset += json_string_length(text);
        json_array_append_new(tokens, text);
        json_array_append_new(lps, json_real(k->logprob));
        json_t *top = json_object();
        for (int j = 0; j < k->n_top; j++) {
            json_t *tt;
            token_text(tok, k->top_ids[j], &tt, NULL);
            json_object_set_new(top, json_string_value(tt), json_real(k->top_logprobs[j]));
            json_decref(tt);
        }
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offsets);
}

static json_t *logprobs_json(const struct serve_api_request *r, const struct tokenizer *tok,
                             const struct serve_api_choice *c) {
    if (!r->logprobs) return json_null();
    return r->kind == SERVE_API_CHAT ? chat_logprobs(tok, c) : completion_logprobs(tok, c);
}

char *serve_api_response(const struct serve_api_request *r, const struct tokenizer *tok, const char *id,
                         long long created, const struct serve_api_choice *choices, int prompt_tokens,
                         int completion_tokens) {
    json_t *array = json_array();
    for (int i = 0; i < r->n; i++) {
        json_t *text = text_json(choices[i].text, choices[i].text_len);
        json_t *c =
            json_pack("{s:i, s:s, s:o}", "index", i, "finish_reason", serve_api_finish_reason(choices[i].finish),
                      "logprobs", logprobs_json(r, tok, &choices[i]));
        if (r->kind == SERVE_API_CHAT)
            json_object_set_new(c, "message",
                                json_pack("{s:s, s:o, s:n}", "role", "assistant", "content", text, "refusal"));
        else json_object_set_new(c, "text", text);
        json_array_append_new(array, c);
    }
    return dump(json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", id, "object", object_name(r, 0), "created",
                          (json_int_t)created, "model", r->model, "choices", array, "usage",
                          usage_of(prompt_tokens, completion_tokens)));
}

/* "data: JSON\n\n" */
static char *sse(json_t *v) {
    char *body = dump(v);
    char *out = xasprintf("data: %s\n\n", body);
    free(body);
    return out;
}

char *serve_api_chunk(const struct serve_api_request *r, const struct tokenizer *tok, const char *id, long long created,
                      int index, int first, const struct serve_api_choice *c, const char *finish) {
    json_t *ch = json_pack("{s:i, s:o}", "index", index, "logprobs", finish ? json_null() : logprobs_json(r, tok, c));
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_t *piece = text_json(c ? c->text : NULL, c ? c->text_len : 0);
    if (r->kind == SERVE_API_CHAT) {
        json_t *delta = json_object();
        if (first) json_object_set_new(delta, "role", json_string("assistant"));
        if (!finish) json_object_set_new(delta, "content", piece);
        else json_decref(piece);
        json_object_set_new(ch, "delta", delta);
    } else {
        json_object_set_new(ch, "text", piece);
    }
    json_t *chunk = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", id, "object", object_name(r, 1), "created",
                              (json_int_t)created, "model", r->model, "choices", ch);
    if (r->include_usage) json_object_set_new(chunk, "usage", json_null());
    return sse(chunk);
}

char *serve_api_usage_chunk(const struct serve_api_request *r, const char *id, long long created, int prompt_tokens,
                            int completion_tokens) {
    return sse(json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", id, "object", object_name(r, 1), "created",
                         (json_int_t)created, "model", r->model, "choices", "usage",
                         usage_of(prompt_tokens, completion_tokens)));
}

char *serve_api_error(const char *message, const char *type, const char *param, const char *code) {
    json_t *e = json_pack("{s:s, s:s}", "message", message, "type", type);
    json_object_set_new(e, "param", param && *param ? json_string(param) : json_null());
    json_object_set_new(e, "code", code ? json_string(code) : json_null());
    return dump(json_pack("{s:o}", "error", e));
}
