/* grader_runner.h - running graders with what the pure grader library (grader/grader.h) leaves to a
 * runner: python graders in the sandbox (executor/sandbox/pygrader.h), and score_model / label_model
 * graders through the caller's judge (the trainer's judge models, executor/train/methods/judge.h).
 *
 * Only executors, the trainer and `whet grade` link this; the gateway does not (it runs a `whet grade`
 * child for graders that need a runner, gateway/graders.c), so tenant code never runs on API hosts'
 * worker threads. */
#ifndef WHET_GRADER_RUNNER_H
#define WHET_GRADER_RUNNER_H

#include "grader.h"

/* Options for running; zero means the default. */
struct grader_run_opts {
    grader_judge_fn judge;               /* score_model / label_model; NULL: not supported */
    void *judge_ctx;
    int python_parallel;                 /* python sandboxes at once (pygrader's default 4) */
    double python_timeout_s;             /* per grade() call (pygrader's default 5) */
    unsigned long long python_mem_bytes; /* per sandbox (pygrader's default) */
    const char *python;                  /* interpreter (default /usr/bin/python3) */
};

/* grader_eval_batch with the sandboxed python and the judge of `opts` (NULL: all defaults, no judge)
 * as its hooks: python graders (also inside multi) run once over the whole batch, spread over
 * parallel sandboxes. Returns -1 only when nothing could run (err); results are then untouched. */
int grader_run_batch(const struct grader *g, const struct grader_run_opts *opts, json_t *const *samples,
                     json_t *const *items, size_t n, struct grader_result *results, struct whet_err *err);

/* One sample of one item (`item` may be NULL: an empty object); the caller frees `res` with
 * grader_result_free. */
int grader_run(const struct grader *g, const struct grader_run_opts *opts, const json_t *sample, const json_t *item,
               struct grader_result *res, struct whet_err *err);

#endif
