/* grader_eval.c - grading samples: one grader over a batch of (sample, item) pairs.
 *
 * The evaluator walks the grader tree once per batch, not once per sample, so that every python
 * grader (at the top or inside a multi) is one python hook call over the whole batch (the runner
 * spreads it across parallel sandboxes and pays python's start-up once per sandbox), and a model
 * grader one judge hook call per sample. The pure graders (string_check, text_similarity) take
 * microseconds a sample and run in the calling thread. A multi grader first runs each named
 * sub-grader over the batch, then evaluates its formula per sample.
 *
 * Failures of the sample or of tenant code never fail the call: the sample's reward for that grader
 * is 0 and an error with OpenAI's kind goes to its result, prefixed with the sub-grader's key inside
 * a multi ("accuracy: {{item.answer}}: no such field"). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "grader_internal.h"

static const char *const error_kind_names[] = {
    [GRADER_ERR_FORMULA] = "formula_parse_error",
    [GRADER_ERR_SAMPLE_PARSE] = "sample_parse_error",
    [GRADER_ERR_INVALID_VARIABLE] = "invalid_variable_error",
    [GRADER_ERR_PYTHON_RUNTIME] = "python_grader_runtime_error",
    [GRADER_ERR_PYTHON_SERVER] = "python_grader_server_error",
    [GRADER_ERR_MODEL_SERVER] = "model_grader_server_error",
    [GRADER_ERR_MODEL_PARSE] = "model_grader_parse_error",
    [GRADER_ERR_OTHER] = "other_error",
};

const char *grader_error_kind_name(enum grader_error_kind kind) {
    return (size_t)kind < WHET_ARRAY_LEN(error_kind_names) ? error_kind_names[kind] : "other_error";
}

void grader_result_add_error(struct grader_result *res, enum grader_error_kind kind, const char *prefix,
                             const char *message) {
    res->errors = xrealloc(res->errors, (res->n_errors + 1) * sizeof *res->errors);
    res->errors[res->n_errors].kind = kind;
    res->errors[res->n_errors].message = prefix ? xasprintf("%s: %s", prefix, message) : xstrdup(message);
    res->n_errors++;
}

void grader_each(const struct grader *g, void (*fn)(void *ctx, const struct grader *g), void *ctx) {
    fn(ctx, g);
    for (size_t k = 0; k < g->n_sub; k++) grader_each(g->subs[k], fn, ctx);
}

void grader_result_free(struct grader_result *res) {
    for (size_t k = 0; k < res->n_sub; k++) free(res->sub_names[k]);
    free(res->sub_names);
    free(res->sub_rewards);
    for (size_t k = 0; k < res->n_errors; k++) free(res->errors[k].message);
    free(res->errors);
    memset(res, 0, sizeof *res);
}

/* ---------------------------------------------------------------- pure graders */

struct template_ctx {
    struct grader_result *res;
    const char *prefix;
    int failed;
};

static void on_template_error(void *ctx, enum grader_error_kind kind, const char *message) {
    struct template_ctx *t = ctx;
    grader_result_add_error(t->res, kind, t->prefix, message);
    t->failed = 1;
}

/* strstr with ASCII case folding (ilike). */
static int contains_ignoring_case(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0) return 1;
    return n == 0;
}

static double similarity(enum similarity_metric metric, const char *hyp, const char *ref) {
    switch (metric) {
    case METRIC_FUZZY_MATCH: return grader_fuzzy_match(hyp, ref);
    case METRIC_BLEU: return grader_bleu(hyp, ref);
    case METRIC_GLEU: return grader_gleu(hyp, ref);
    case METRIC_METEOR: return grader_meteor(hyp, ref);
    case METRIC_ROUGE_L: return grader_rouge_l(hyp, ref);
    default: return grader_rouge_n(hyp, ref, (int)(metric - METRIC_ROUGE_1) + 1);
    }
}

/* string_check or text_similarity on one sample: the reward, and *passed. */
static double run_pure(const struct grader *g, const json_t *sample, const json_t *item, struct grader_result *res,
                       const char *prefix, int *passed) {
    struct template_ctx t = {res, prefix, 0};
    char *input = grader_template_render(g->input, sample, item, on_template_error, &t);
    char *reference = grader_template_render(g->reference, sample, item, on_template_error, &t);
    double reward = 0;
    if (!t.failed && g->type == GRADER_STRING_CHECK) {
        switch (g->op) {
        case OP_EQ: reward = strcmp(input, reference) == 0; break;
        case OP_NE: reward = strcmp(input, reference) != 0; break;
        case OP_LIKE: reward = strstr(input, reference) != NULL; break;
        case OP_ILIKE: reward = contains_ignoring_case(input, reference); break;
        }
        *passed = reward > 0;
    } else if (!t.failed) {
        reward = similarity(g->metric, input, reference);
        *passed = reward >= g->pass_threshold;
    }
    free(input);
    free(reference);
    return reward;
}

/* ---------------------------------------------------------------- the tree */

static void run_python(const struct grader *g, const struct grader_hooks *hooks, json_t *const *samples,
                       json_t *const *items, size_t n, double *rewards, int *passed, struct grader_result *results,
                       const char *prefix) {
    struct grader_python_score *scores = xcalloc(n ? n : 1, sizeof *scores);
    struct whet_err err = {0};
    int rc = hooks->python ? hooks->python(hooks->python_ctx, g->source, samples, items, n, scores, &err)
                           : whet_errf(&err, "python graders are not supported here: they need the sandbox");
    for (size_t i = 0; i < n; i++) {
        rewards[i] = rc < 0 || scores[i].error ? 0 : scores[i].score;
        passed[i] = rewards[i] > 0;
        if (rc < 0) {
            grader_result_add_error(&results[i], GRADER_ERR_PYTHON_SERVER, prefix, err.msg);
        } else {
            results[i].seconds += scores[i].seconds;
            if (scores[i].error) grader_result_add_error(&results[i], GRADER_ERR_PYTHON_RUNTIME, prefix, scores[i].error);
        }
        free(scores[i].error);
    }
    free(scores);
}

static void run_model(const struct grader *g, const struct grader_hooks *hooks, json_t *const *samples,
                      json_t *const *items, size_t n, double *rewards, int *passed, struct grader_result *results,
                      const char *prefix) {
    for (size_t i = 0; i < n; i++) {
        rewards[i] = 0;
        passed[i] = 0;
        struct whet_err err = {0};
        double t0 = whet_now_mono();
        int rc;
        if (!hooks->judge) {
            char *message = xasprintf("%s graders are not supported here: a judge model needs the sampler",
                                      grader_type_name(g->type));
            grader_result_add_error(&results[i], GRADER_ERR_MODEL_SERVER, prefix, message);
            free(message);
        } else if ((rc = hooks->judge(hooks->judge_ctx, g, samples[i], items[i], &rewards[i], &err)) != 0) {
            rewards[i] = 0;
            grader_result_add_error(&results[i], rc > 0 ? GRADER_ERR_MODEL_PARSE : GRADER_ERR_MODEL_SERVER, prefix, err.msg);
        } else {
            const json_t *threshold = json_object_get(g->json, "pass_threshold");
            passed[i] = threshold ? rewards[i] >= json_number_value(threshold) : rewards[i] > 0;
        }
        results[i].seconds += whet_now_mono() - t0;
    }
}

/* Runs g over the batch into rewards[i] and passed[i]; errors and time go to results[i]. `top` is
 * set for the grader the caller asked for, whose multi sub-rewards are reported. */
static void run_node(const struct grader *g, const struct grader_hooks *hooks, json_t *const *samples,
                     json_t *const *items, size_t n, double *rewards, int *passed, struct grader_result *results,
                     const char *prefix, int top) {
    switch (g->type) {
    case GRADER_STRING_CHECK:
    case GRADER_TEXT_SIMILARITY:
        for (size_t i = 0; i < n; i++) {
            double t0 = whet_now_mono();
            rewards[i] = run_pure(g, samples[i], items[i], &results[i], prefix, &passed[i]);
            results[i].seconds += whet_now_mono() - t0;
        }
        return;
    case GRADER_PYTHON: run_python(g, hooks, samples, items, n, rewards, passed, results, prefix); return;
    case GRADER_SCORE_MODEL:
    case GRADER_LABEL_MODEL: run_model(g, hooks, samples, items, n, rewards, passed, results, prefix); return;
    case GRADER_MULTI: break;
    }
    /* multi: sub[k * n + i] is sub-grader k's reward for sample i */
    double *sub = xcalloc(g->n_sub * n, sizeof *sub);
    int *sub_passed = xcalloc(n, sizeof *sub_passed);
    for (size_t k = 0; k < g->n_sub; k++)
        run_node(g->subs[k], hooks, samples, items, n, sub + k * n, sub_passed, results, g->sub_names[k], 0);
    double *values = xcalloc(g->n_sub, sizeof *values);
    for (size_t i = 0; i < n; i++) {
        double t0 = whet_now_mono();
        for (size_t k = 0; k < g->n_sub; k++) values[k] = sub[k * n + i];
        struct whet_err err = {0};
        if (grader_expr_eval(g->formula, values, &rewards[i], &err) < 0) {
            rewards[i] = 0;
            grader_result_add_error(&results[i], GRADER_ERR_FORMULA, "calculate_output", err.msg);
        }
        passed[i] = rewards[i] > 0;
        if (top) {
            results[i].n_sub = g->n_sub;
            results[i].sub_names = xcalloc(g->n_sub, sizeof *results[i].sub_names);
            results[i].sub_rewards = xcalloc(g->n_sub, sizeof *results[i].sub_rewards);
            for (size_t k = 0; k < g->n_sub; k++) {
                results[i].sub_names[k] = xstrdup(g->sub_names[k]);
                results[i].sub_rewards[k] = values[k];
            }
        }
        results[i].seconds += whet_now_mono() - t0;
    }
    free(values);
    free(sub_passed);
    free(sub);
}

static void is_runner_type(void *ctx, const struct grader *g) {
    if (g->type == GRADER_PYTHON || g->type == GRADER_SCORE_MODEL || g->type == GRADER_LABEL_MODEL) *(int *)ctx = 1;
}

int grader_needs_runner(const struct grader *g) {
    int needs = 0;
    grader_each(g, is_runner_type, &needs);
    return needs;
}

int grader_eval_batch(const struct grader *g, const struct grader_hooks *hooks, json_t *const *samples,
                      json_t *const *items, size_t n, struct grader_result *results, struct whet_err *err) {
    if (!g) return whet_errf(err, "no grader");
    struct grader_hooks none = {0};
    if (!hooks) hooks = &none;
    /* A missing sample or item reads as an empty object, for the templates and for grade(). */
    json_t *empty = json_object();
    json_t **s = xcalloc(n ? n : 1, sizeof *s), **it = xcalloc(n ? n : 1, sizeof *it);
    for (size_t i = 0; i < n; i++) {
        s[i] = samples[i] ? samples[i] : empty;
        it[i] = items && items[i] ? items[i] : empty;
        memset(&results[i], 0, sizeof results[i]);
    }
    double *rewards = xcalloc(n ? n : 1, sizeof *rewards);
    int *passed = xcalloc(n ? n : 1, sizeof *passed);
    run_node(g, hooks, s, it, n, rewards, passed, results, NULL, 1);
    for (size_t i = 0; i < n; i++) {
        results[i].reward = rewards[i];
        results[i].passed = passed[i];
    }
    free(passed);
    free(rewards);
    free(s);
    free(it);
    json_decref(empty);
    return 0;
}
