/* judge.h - score_model and label_model graders in the trainer: a judge model from the catalog,
 * loaded next to the policy, answers the grader's messages and its reply becomes the reward.
 *
 * The judge goes the way `whet sample` does (sampler.h): the grader's `input` messages, their
 * templates filled with grader_template_render, are rendered with the judge's chat template and the
 * assistant header, prefilled into a KV cache and decoded one token at a time until an end-of-turn
 * token. `sampling_params` may set temperature (default 0: greedy), top_p, top_k, seed and
 * max_completions_tokens (or max_tokens; default JUDGE_DEFAULT_MAX_TOKENS). An instruction saying what
 * to answer ("Reply with only a number from 0 to 1.", "Reply with only one of these labels: …") ends
 * the last user message (or is a user message of its own when the input ends otherwise).
 *
 *   score_model  the first number of the reply, clamped to `range` (default [0, 1]); no number:
 *                reward 0 and a model_grader_parse_error
 *   label_model  the label the reply names (judge_parse_label); 1 when it is one of passing_labels,
 *                else 0; no label: reward 0 and a model_grader_parse_error
 *
 * A `<think>…</think>` block the judge writes first is skipped before reading the answer. The models
 * are the trainer config's `judge_models` ({"name the grader uses": "/model/dir"}), every one a grader
 * names loaded once per run (a GRPO run's own judge_pool, also when co-trained); calls are serialised
 * (one KV cache per model). */
#ifndef WHET_JUDGE_H
#define WHET_JUDGE_H

#include <jansson.h>
#include <stdint.h>

#include "grader_runner.h"
#include "util.h"

#define JUDGE_DEFAULT_MAX_TOKENS 32

struct judge_pool;

/* Loads the judge of every score_model / label_model grader in `g` (inside multi too) from
 * `judge_models` ({"name": "/dir"}) onto `device` (NULL: the CPU; the trainer passes its own, so the
 * judges answer on the policy's GPU). *out is NULL when g names no judge. Returns -1 with err when a
 * named model has no dir ("score_model grader \"x\": judge model \"m\" is not in judge_models") or
 * does not load. */
int judge_pool_new(struct judge_pool **out, const struct grader *g, const json_t *judge_models, const char *device,
                   uint64_t seed, struct whet_err *err);
void judge_pool_free(struct judge_pool *p);

/* The grader_judge_fn over a judge_pool (ctx): 0 with *reward; 1 with err when the reply holds no
 * score or label (model_grader_parse_error); -1 with err when the judge could not answer. */
int judge_grade(void *ctx, const struct grader *g, const json_t *sample, const json_t *item, double *reward,
                struct whet_err *err);

/* The judge's reply for one sample: *reply (caller frees) is what judge_grade reads. */
int judge_reply(struct judge_pool *p, const struct grader *g, const json_t *sample, const json_t *item, char **reply,
                struct whet_err *err);

/* ---- The parsers, exposed for tests -------------------------------------------------------------- */

/* The first number of `reply` (after a <think>…</think> block) clamped to [lo, hi] into *score;
 * -1 when there is none. "7/10" reads 7, "-0.5" -0.5, "1e3" 1000. */
int judge_parse_score(const char *reply, double lo, double hi, double *score);
/* The label `reply` names (after a <think>…</think> block): the whole reply, trimmed of spaces, quotes
 * and trailing punctuation, equal to a label (ignoring case); otherwise the label found earliest as a
 * whole word (the longest on a tie). Returns its index in `labels` (an array of strings), -1 when none. */
int judge_parse_label(const char *reply, const json_t *labels);

#endif
