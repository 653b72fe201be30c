/* grader.h - OpenAI's reinforcement fine-tuning graders as a pure library: parse, validate, grade.
 *
 * A grader is the JSON object a `reinforcement` job or `/v1/fine_tuning/alpha/graders/run` carries:
 *
 *   string_check     {name, input, reference, operation: eq|ne|like|ilike}       -> 1 or 0
 *   text_similarity  {name, input, reference, evaluation_metric, pass_threshold}  -> the metric, 0..1
 *                    (fuzzy_match, bleu, gleu, meteor, rouge_1..rouge_5, rouge_l; "cosine" needs an
 *                    embedding model and is refused at validation)
 *   multi            {name, graders: {key: grader, …}, calculate_output: "0.5 * a + min(b, 1)"}
 *                    -> the expression's value over the sub-graders' rewards
 *   python           {name, source, image_tag (ignored)} -> grade(sample, item), tenant code
 *   score_model, label_model  a judge model's answer
 *
 * `input` and `reference` are templates: `{{item.answer}}`, `{{item.a.b}}`, `{{item.list.0}}`,
 * `{{sample.output_text}}`, `{{sample.output_json.field}}` are replaced by the value at that path
 * of the dataset row (item) or the model's sample (a string as it is, anything else as compact
 * JSON). A path that is not there is an `invalid_variable` error; `sample.output_json` when the
 * sample's text is not JSON is a `sample_parse` error.
 *
 * Everything here is computation on JSON values: no I/O, no processes. python graders and model
 * graders need what only a runner has (a sandbox, judge models): they run through hooks
 * (struct grader_hooks), which executor/grader_runner fills for executors, the trainer and `whet
 * grade`; the gateway validates with this library and runs only the pure graders itself. A run never
 * fails as a call because of the sample or the tenant's code: such failures are reward 0 with an
 * entry in `errors` (OpenAI's metadata.errors). Validation errors name the field path the way OpenAI
 * does, in the message and as the `param` of an API error: `grader.graders.accuracy.operation`. */
#ifndef WHET_GRADER_H
#define WHET_GRADER_H

#include <jansson.h>
#include <stddef.h>

#include "util.h"

enum grader_type {
    GRADER_STRING_CHECK,
    GRADER_TEXT_SIMILARITY,
    GRADER_MULTI,
    GRADER_PYTHON,
    GRADER_SCORE_MODEL,
    GRADER_LABEL_MODEL,
};

struct grader; /* parsed and validated; immutable, so one grader may run on many threads */

/* Parses and validates `json`. `path` names it in error messages ("grader"; NULL means "grader").
 * Returns 0 and a grader the caller frees with grader_free, or -1 with err naming the field:
 * "grader.graders.accuracy.operation: expected one of eq, ne, like, ilike, found \"equals\"". */
int grader_parse(const json_t *json, const char *path, struct grader **out, struct whet_err *err);
void grader_free(struct grader *g);
/* grader_parse that also names the field at fault: on -1, `param` (param_size bytes, cut on a UTF-8
 * boundary) gets its path, OpenAI's error `param` ("method.reinforcement.grader.graders.x.type" for
 * path "method.reinforcement.grader"). `out` may be NULL: validate only. */
int grader_validate(const json_t *json, const char *path, struct grader **out, char *param, size_t param_size,
                    struct whet_err *err);

enum grader_type grader_type_of(const struct grader *g);
const char *grader_type_name(enum grader_type type); /* "string_check", … */
const char *grader_name(const struct grader *g);
/* text_similarity's evaluation_metric ("bleu", …); NULL for the other types. */
const char *grader_metric_name(const struct grader *g);
/* score_model and label_model: the validated object as given (for a judge hook); NULL otherwise. */
const json_t *grader_json(const struct grader *g);
/* Calls fn on g and, for multi, on every sub-grader (depth first, in the order of `graders`). */
void grader_each(const struct grader *g, void (*fn)(void *ctx, const struct grader *g), void *ctx);

/* Why a sample got no real score. The kinds are OpenAI's metadata.errors flags. */
enum grader_error_kind {
    GRADER_ERR_FORMULA,          /* formula_parse_error: calculate_output failed (x/0, log(0), …) */
    GRADER_ERR_SAMPLE_PARSE,     /* sample_parse_error: output_json asked for, the text is not JSON */
    GRADER_ERR_INVALID_VARIABLE, /* invalid_variable_error: a template path that is not there */
    GRADER_ERR_PYTHON_RUNTIME,   /* python_grader_runtime_error: the tenant's code failed */
    GRADER_ERR_PYTHON_SERVER,    /* python_grader_server_error: the sandbox could not run at all */
    GRADER_ERR_MODEL_SERVER,     /* model_grader_server_error: no judge, or it could not answer */
    GRADER_ERR_MODEL_PARSE,      /* model_grader_parse_error: the judge's reply holds no score or label */
    GRADER_ERR_OTHER,            /* other_error */
};
const char *grader_error_kind_name(enum grader_error_kind kind); /* "formula_parse_error", … */

struct grader_error {
    enum grader_error_kind kind;
    char *message; /* "accuracy: ZeroDivisionError: division by zero" (sub-grader's key first) */
};

struct grader_result {
    double reward;          /* 0..1 for the simple graders; the expression's value for multi */
    int passed;             /* text_similarity: reward >= pass_threshold; others: reward > 0 */
    size_t n_sub;           /* multi: one entry per named sub-grader, in the order of `graders` */
    char **sub_names;       /* the keys of `graders` */
    double *sub_rewards;    /* their rewards */
    size_t n_errors;
    struct grader_error *errors;
    double seconds;         /* time spent on this sample */
};
void grader_result_free(struct grader_result *res);

/* Adds an error of `kind` to res; inside a multi, `prefix` is the sub-grader's key ("accuracy: …"). */
void grader_result_add_error(struct grader_result *res, enum grader_error_kind kind, const char *prefix,
                             const char *message);

/* One python grade() call's outcome, as a python hook reports it. */
struct grader_python_score {
    double score;   /* 0 when error is set */
    char *error;    /* NULL when graded; else why not (malloc'd; grader_eval_batch frees it) */
    double seconds; /* time spent on this sample */
};

/* Runs the tenant's `source` on (samples[i], items[i]), i < n, into scores[i]. Returns -1 with err
 * only when nothing could run at all (python_grader_server_error on every sample). */
typedef int (*grader_python_fn)(void *ctx, const char *source, json_t *const *samples, json_t *const *items,
                                size_t n, struct grader_python_score *scores, struct whet_err *err);

/* Grades one sample with a score_model or label_model grader (`grader_json` gives its object;
 * grader_template_render fills its messages). Returns 0 with *reward; 1 with err when the judge
 * answered something that is no score or label (reward 0, model_grader_parse_error); -1 with err when
 * it could not answer (model_grader_server_error). */
typedef int (*grader_judge_fn)(void *ctx, const struct grader *g, const json_t *sample, const json_t *item,
                               double *reward, struct whet_err *err);

/* What the library cannot grade by itself. A NULL hook (or NULL hooks): those graders answer reward 0
 * with a "not supported here" server error. */
struct grader_hooks {
    grader_python_fn python;
    void *python_ctx;
    grader_judge_fn judge;
    void *judge_ctx;
};

/* Whether g or one of its sub-graders is python, score_model or label_model: needs a runner's hooks. */
int grader_needs_runner(const struct grader *g);

/* Grades samples[i] against items[i] for i < n into results[i] (the caller frees each with
 * grader_result_free). `sample` is OpenAI's sample object ({"output_text": …, optional "output_json":
 * …}; see grader_sample_from_text), `item` the dataset row (NULL items or entries read as empty
 * objects). A python grader (also inside multi) is one hooks->python call over the whole batch; the
 * pure graders run in the calling thread. Returns -1 only when nothing could run (err); results are
 * then untouched. */
int grader_eval_batch(const struct grader *g, const struct grader_hooks *hooks, json_t *const *samples,
                      json_t *const *items, size_t n, struct grader_result *results, struct whet_err *err);

/* The result as OpenAI's graders/run answer: {"reward", "metadata": {"name", "type", "errors": {the
 * flags, plus "messages": every error text}, "execution_time", "scores", "token_usage",
 * "sampled_model_name"}, "sub_rewards", "model_grader_token_usage_per_model"}. The caller owns it. */
json_t *grader_result_openai_json(const struct grader *g, const struct grader_result *res);

/* OpenAI's sample for a plain model answer: {"output_text": text, "output_json": the text parsed
 * when it is a JSON value, else absent}. The caller owns the result. */
json_t *grader_sample_from_text(const char *text);

/* ---- The parts, exposed for tests and the fuzzer ------------------------------------------------ */

/* Renders `tmpl` against `sample` and `item` into a malloc'd string. Unknown paths render as "" and
 * add an error (kind and message) through `on_error`, which may be NULL. */
typedef void (*grader_error_fn)(void *ctx, enum grader_error_kind kind, const char *message);
char *grader_template_render(const char *tmpl, const json_t *sample, const json_t *item, grader_error_fn on_error,
                             void *ctx);

/* calculate_output: parsed into an AST once, evaluated per sample. `names` are the variables the
 * expression may use (the sub-graders' keys); variable k evaluates to values[k]. */
struct grader_expr;
int grader_expr_parse(const char *text, const char *const *names, size_t n_names, struct grader_expr **out,
                      struct whet_err *err);
/* Returns 0 and *out, or -1 with err ("division by zero", "log of a non-positive number", …). */
int grader_expr_eval(const struct grader_expr *e, const double *values, double *out, struct whet_err *err);
void grader_expr_free(struct grader_expr *e);

/* The text_similarity metrics, on UTF-8 text; `hyp` is the grader's input, `ref` its reference.
 * Each returns a value in 0..1. See grader_metrics.c for the reference implementations they follow
 * and where they depart from them. */
double grader_fuzzy_match(const char *hyp, const char *ref);
double grader_bleu(const char *hyp, const char *ref);
double grader_gleu(const char *hyp, const char *ref);
double grader_meteor(const char *hyp, const char *ref);
double grader_rouge_n(const char *hyp, const char *ref, int n);
double grader_rouge_l(const char *hyp, const char *ref);

#endif
