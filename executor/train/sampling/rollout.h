/* rollout.h - batched sampling for GRPO: n responses to each of a batch of prompts.
 *
 * Each prompt (token ids, already chat-templated and ending with the assistant header) is prefilled
 * into the KV cache ONCE, and its cache copied into the n slots of its group; then every slot still
 * generating is decoded together, one token per slot per model_decode_step. A response ends on an
 * end-of-turn token (the tokens `whet sample` stops on: <|im_end|>, <|endoftext|>, <|eot_id|>, … and
 * the model's eos_token_id), on a stop string (found in the decoded text; the text is cut before it),
 * or after max_tokens. Tokens are drawn on the model's device (temperature, top-k, then top-p over
 * what top-k kept; sample_row.h), each slot from its own seed taken from the rng, so the same rng
 * state gives the same responses.
 *
 * Memory: a KV cache of n_prompts * n slots of (longest prompt + max_tokens) positions; logits never
 * leave the device. Generation reuses the model's activation buffers: call it between
 * training steps, never between a model_forward and its model_backward.
 *
 *     struct rollout_opts o = {.n = 8, .max_tokens = 64, .temperature = 1, .top_p = 1, .use_kv_cache = 1};
 *     struct rollout_batch b;
 *     if (rollout_generate(&b, m, tok, prompt_ids, prompt_lens, n_prompts, &o, &rng, &err)) …
 *     b.responses[i * b.n + j] is response j of prompt i
 *     rollout_batch_free(&b);
 *
 * Several requests, each with its own adapter view of one base, options and rng, generate together with
 * rollout_generate_many: one KV cache and one decode step for all their slots (co-training's GRPO runs).
 */
#ifndef WHET_ROLLOUT_H
#define WHET_ROLLOUT_H

#include "util.h"

struct model;
struct tokenizer;
struct rng;

struct rollout_opts {
    int n;             /* responses per prompt (group size), >= 1 */
    int max_tokens;    /* per response, >= 1 */
    float temperature; /* 0: greedy */
    float top_p;       /* (0, 1] */
    int top_k;         /* 0: off */
    int n_stop;        /* stop strings: a response ends at the first occurrence; text is cut before it */
    char **stop;
    int use_kv_cache;  /* 1 normally; 0 recomputes the whole sequence for each token (benchmark baseline) */
    /* Added to the contract (0/NULL: none): token ids that end a response like the end-of-turn token
     * (counted in n_tokens, left out of the text). */
    int n_stop_ids;
    const int *stop_ids;
    /* The index of slot 0 in a larger batch (0: none): a rank of a gang that generates its share of a
     * batch draws each response as the whole batch would (slot s of prompt i is first_slot + i*n + j). */
    int first_slot;
};

enum rollout_finish { ROLLOUT_FINISH_STOP, ROLLOUT_FINISH_LENGTH };

struct rollout_response {
    int prompt;   /* index of its prompt */
    int n_tokens; /* generated tokens that count as the response (incl. the end-of-turn token when one
                   * ended it; for a stop string, the tokens up to and including the one that
                   * completed it) */
    int *tokens;  /* [n_tokens] */
    char *text;   /* decoded response, without end-of-turn token / stop string */
    enum rollout_finish finish;
};

struct rollout_batch {
    int n_prompts, n;
    struct rollout_response *responses; /* [n_prompts * n], prompt-major: response j of prompt i at i*n+j */
    long long tokens;   /* generated tokens in all */
    double entropy_sum; /* sum over generated tokens of the entropy of softmax(logits) (temperature 1) */
    double seconds;     /* wall time */
};

/* Generates opts->n responses to each of the n_prompts prompts (prompt_ids[i][0..prompt_lens[i]),
 * each >= 1 token) into *out, which the caller frees with rollout_batch_free (also after a failure:
 * *out is then empty). It takes one draw of rng whatever the prompts, none included, so the ranks of
 * a gang, each generating its share, keep the same rng. */
int rollout_generate(struct rollout_batch *out, struct model *m, const struct tokenizer *tok,
                     const int *const *prompt_ids, const int *prompt_lens, int n_prompts,
                     const struct rollout_opts *opts, struct rng *rng, struct whet_err *err);
void rollout_batch_free(struct rollout_batch *b);

/* One request of a generation shared by several (rollout_generate_many): rollout_generate's arguments. */
struct rollout_request {
    struct model *model; /* a view of the shared base (model_load_adapter_view), or the base itself */
    const struct tokenizer *tok;
    const int *const *prompt_ids;
    const int *prompt_lens;
    int n_prompts;
    const struct rollout_opts *opts;
    struct rng *rng;
    struct rollout_batch *out;
};

/* Generates the rollouts of reqs[0..n_reqs) together (co-trained GRPO runs): each request's responses are
 * drawn as rollout_generate draws them alone (one draw of its rng for its slots' seeds, its own options,
 * into its out), but on `base`: each prompt's prefill through its request's adapter, then every decode step
 * once for all the requests' slots, each request's rows through its model's adapter (model_set_lora_runs;
 * base is left without runs after), in one KV cache of every request's slots (of the longest prompt and
 * max_tokens of any request). So a row's logits are those of its request alone up to the summation order of
 * the batched products: the same draws from the same seeds, a token flipped only where two were within
 * rounding of each other. Every request's use_kv_cache must be the same. base NULL: one request, on its own
 * model (rollout_generate). Each out->seconds is the generation's wall time split by the tokens each request
 * generated (they add up to it). On failure every out is empty. */
int rollout_generate_many(struct model *base, struct rollout_request *reqs, int n_reqs, struct whet_err *err);

#endif
