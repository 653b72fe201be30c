/* sampler.h - what `whet sample` and `whet score` do with a model: generate with a KV cache, and
 * measure the loss of token sequences.
 *
 * Sampling renders the prompt as one user turn with the model's chat template and the assistant
 * header after it, prefills the KV cache, then draws one token at a time (temperature, top-k, top-p,
 * a seeded RNG: the same seed gives the same text) until an end-of-turn token or max_tokens.
 * Scoring reads JSONL lines {"input_ids": […]} and writes {"index": i, "loss": L, "tokens": n}: L the
 * mean next-token negative log-likelihood over the n = len - 1 predicted positions. */
#ifndef WHET_SAMPLER_H
#define WHET_SAMPLER_H

#include <stdint.h>
#include <stdio.h>

#include "model_config.h"
#include "util.h"

struct rng;
struct tokenizer;

struct sample_opts {
    const char *model_dir;
    const char *adapter_dir; /* PEFT adapter, or NULL */
    const char *prompt;
    int max_tokens;          /* >= 1 */
    float temperature;       /* 0: greedy */
    float top_p;             /* (0, 1]; 1: no nucleus cut */
    int top_k;               /* keep only the k most likely tokens; 0: no cut */
    uint64_t seed;
};

/* Generates the reply to opts->prompt into a fresh NUL-terminated `*text` (without the end-of-turn
 * token) that the caller frees; `*n_tokens` generated tokens. */
int sample_run(const struct sample_opts *opts, char **text, int *n_tokens, struct whet_err *err);

/* Picks the next token from logits[V] (overwritten with scratch values): argmax when temperature is
 * 0 or top_k is 1, otherwise a draw from softmax(logits / temperature) cut to its top_k most likely
 * tokens (top_k > 0), then to the smallest set of most likely tokens whose share of the mass left
 * reaches top_p (Hugging Face's warper order: temperature, top-k, top-p). Ties rank the lower id
 * first. `order` is scratch for V ints. */
int sample_pick_k(float *logits, int *order, int V, float temperature, float top_p, int top_k, struct rng *rng);
/* sample_pick_k without a top-k cut. */
int sample_pick(float *logits, int *order, int V, float temperature, float top_p, struct rng *rng);

/* Whether token `id` ends an assistant turn: the model's eos_token_id, or one of the end-of-turn
 * tokens of the families served (<|im_end|>, <|endoftext|>, <|eot_id|>, <|end_of_text|>, <|eom_id|>). */
int sample_is_end_token(const struct tokenizer *tok, const struct model_config *mc, int id);

/* Scores every line of `data_path` and prints one JSON line per example to `out`. */
int score_run(const char *model_dir, const char *adapter_dir, const char *data_path, FILE *out, struct whet_err *err);

#endif
