/* sampler.h - what `whet sample` and `whet score` do with a model: generate with a KV cache, and
 * measure the loss of token sequences.
 *
 * Sampling renders the prompt as one user turn with the model's chat template and the assistant
 * header after it, prefills the KV cache, then draws one token at a time on the model's device
 * (temperature, top-k, top-p; token k's draw a function of the seed and k, so the same seed gives the
 * same text) until an end-of-turn token or max_tokens.
 * Scoring reads JSONL lines {"input_ids": […]} and writes {"index": i, "loss": L, "tokens": n}: L the
 * mean next-token negative log-likelihood over the n = len - 1 predicted positions. */
#ifndef WHET_SAMPLER_H
#define WHET_SAMPLER_H

#include <stdint.h>
#include <stdio.h>

#include "model_config.h"
#include "sample_row.h"
#include "util.h"

struct model;
struct tokenizer;
struct whet_buf;

struct sample_opts {
    const char *model_dir;
    const char *adapter_dir; /* PEFT adapter, or NULL */
    const char *prompt;
    int max_tokens;          /* >= 1 */
    float temperature;       /* 0: greedy */
    float top_p;             /* (0, 1]; 1: no nucleus cut */
    int top_k;               /* keep only the k most likely tokens; 0: no cut */
    uint64_t seed;
    const char *device;      /* "cpu" (NULL), "cuda", "cuda:N" */
};

/* Generates the reply to opts->prompt into a fresh NUL-terminated `*text` (without the end-of-turn
 * token) that the caller frees; `*n_tokens` generated tokens. */
int sample_run(const struct sample_opts *opts, char **text, int *n_tokens, struct whet_err *err);

/* Generates up to max_tokens after prompt[0..n_prompt) on a fresh KV cache, token k drawn on the
 * model's device as `row` says with its counter set to k (row.vocab <= 0: the tokenizer's size),
 * until an end-of-turn token (left out); the decoded reply into a fresh *text the caller frees. */
int sample_reply(struct model *m, const struct tokenizer *tok, const int32_t *prompt, int n_prompt, int max_tokens,
                 struct sample_row row, char **text, int *n_tokens, struct whet_err *err);

/* Appends the text of token `id` to *text, then cuts it before the earliest of stops[0..n_stops) that
 * the new text completes (none had ended before): 1 when one did, 0 when not, -1 (err) when the
 * token does not decode. What a sequence does with each token it draws (rollouts, serving). */
int sample_append_text(struct whet_buf *text, const struct tokenizer *tok, int id, char *const *stops, int n_stops,
                       struct whet_err *err);

/* Whether token `id` ends an assistant turn: the model's eos_token_id, or one of the end-of-turn
 * tokens of the families served (<|im_end|>, <|endoftext|>, <|eot_id|>, <|end_of_text|>, <|eom_id|>). */
int sample_is_end_token(const struct tokenizer *tok, const struct model_config *mc, int id);

/* Scores every line of `data_path` and prints one JSON line per example to `out`. */
int score_run(const char *model_dir, const char *adapter_dir, const char *device, const char *data_path, FILE *out,
              struct whet_err *err);

#endif
