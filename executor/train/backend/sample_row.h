/* sample_row.h - how a token is drawn from one row of logits (the parameters the backend's `sample`
 * op takes per row, and the model's sampling calls pass through) and what the draw yields. */
#ifndef WHET_SAMPLE_ROW_H
#define WHET_SAMPLE_ROW_H

#include <stdint.h>

/* Hugging Face's warper order: temperature, top-k, then top-p over what top-k kept. The draw is a
 * pure function of (seed, counter): the row's uniform is rng_counter_uniform(seed, counter), so a
 * sequence is reproducible whatever else shares its batch, on every backend. */
struct sample_row {
    uint64_t seed;
    uint32_t counter;  /* e.g. the index of the token being drawn in its sequence */
    int top_k;         /* keep the k most likely tokens; 0: no cut */
    float temperature; /* 0 (or top_k 1): the argmax, ties to the lowest id */
    float top_p;       /* (0, 1]: the smallest most-likely set with this share of the mass left */
    int vocab;         /* only ids below this are drawn (a model's vocabulary may be padded past its
                        * tokenizer's); <= 0 or > V: all V */
    int top_logprobs;  /* 0..SAMPLE_TOP_MAX: the most likely tokens to report with their log-probs */
};

#define SAMPLE_TOP_MAX 20 /* top_logprobs at most (OpenAI's limit) */

/* What drawing yields, per row: all but ids may be NULL. Log-probs are log softmax(logits) at
 * temperature 1 (what the trainer's loss measures), whatever temperature drew the token. */
struct sample_out {
    int *ids;            /* [n] the tokens drawn */
    float *entropy;      /* [n] of softmax(logits), nats */
    float *logprob;      /* [n] of the token drawn */
    int *top_ids;        /* [n * SAMPLE_TOP_MAX] the row's top_logprobs most likely tokens, most likely first
                          * (ties: lower id first) */
    float *top_logprobs; /* [n * SAMPLE_TOP_MAX] their log-probs */
};

#endif
