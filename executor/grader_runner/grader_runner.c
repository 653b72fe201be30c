/* grader_runner.c - the python hook of the grader library: tenant code in pygrader's sandboxes, with
 * the limits of grader_run_opts. See grader_runner.h. */
#include <stdlib.h>

#include "grader_runner.h"
#include "pygrader.h"

static int run_python(void *ctx, const char *source, json_t *const *samples, json_t *const *items, size_t n,
                      struct grader_python_score *scores, struct whet_err *err) {
    const struct grader_run_opts *opts = ctx;
    struct pygrader_opts py;
    pygrader_opts_init(&py);
    if (opts->python_parallel > 0) py.parallel = opts->python_parallel;
    if (opts->python_timeout_s > 0) py.sample_timeout_s = opts->python_timeout_s;
    if (opts->python_mem_bytes > 0) py.mem_bytes = opts->python_mem_bytes;
    if (opts->python) py.python = opts->python;
    struct pygrader_score *py_scores = xcalloc(n ? n : 1, sizeof *py_scores);
    int rc = pygrader_run(&py, source, samples, items, n, py_scores, err);
    /* The error texts change owner: grader_eval_batch frees them, so no pygrader_scores_free here. */
    for (size_t i = 0; rc == 0 && i < n; i++)
        scores[i] = (struct grader_python_score){py_scores[i].score, py_scores[i].error, py_scores[i].seconds};
    free(py_scores);
    return rc;
}

int grader_run_batch(const struct grader *g, const struct grader_run_opts *opts, json_t *const *samples,
                     json_t *const *items, size_t n, struct grader_result *results, struct whet_err *err) {
    struct grader_run_opts defaults = {0};
    if (!opts) opts = &defaults;
    struct grader_hooks hooks = {run_python, (void *)opts, opts->judge, opts->judge_ctx};
    return grader_eval_batch(g, &hooks, samples, items, n, results, err);
}

int grader_run(const struct grader *g, const struct grader_run_opts *opts, const json_t *sample, const json_t *item,
               struct grader_result *res, struct whet_err *err) {
    json_t *s = (json_t *)sample, *it = (json_t *)item;
    return grader_run_batch(g, opts, &s, &it, 1, res, err);
}
