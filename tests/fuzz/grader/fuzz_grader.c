/* fuzz_grader.c - libFuzzer target for the grader library: grader_validate (and grading what parses),
 * the calculate_output parser and evaluator, templates and the text_similarity metrics.
 *
 * The first byte picks what the rest is:
 *   0  a grader JSON object: validated; one that is valid is graded on a fixed sample and item (the
 *      pure library: python and model graders answer "not supported" without a runner's hooks)
 *   1  a calculate_output formula over the names a, b, c: parsed and evaluated
 *   2  "hyp\nref": every metric, each of which must land in [0, 1], and hyp rendered as a template
 * Anything else is answered with an error, never a crash, a leak or undefined behaviour. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grader.h"

static void fuzz_grader_json(const char *text) {
    json_t *j = json_loads(text, 0, NULL);
    if (!j) return;
    struct grader *g;
    struct whet_err err;
    char param[256];
    if (grader_validate(j, NULL, &g, param, sizeof param, &err) == 0) {
        json_t *sample = grader_sample_from_text("{\"answer\": \"42\", \"list\": [1, 2]}");
        json_t *item = json_pack("{s:s, s:{s:s}}", "answer", "42", "nested", "field", "the cat sat");
        struct grader_result res;
        if (grader_eval_batch(g, NULL, &sample, &item, 1, &res, &err) == 0) {
            json_decref(grader_result_openai_json(g, &res));
            grader_result_free(&res);
        }
        json_decref(sample);
        json_decref(item);
        grader_free(g);
    } else if (!param[0] || strncmp(err.msg, param, strlen(param)) != 0) {
        abort(); /* every validation error names the field it is about, in its message and as its param */
    }
    json_decref(j);
}

static void fuzz_formula(const char *text) {
    static const char *const names[] = {"a", "b", "c"};
    static const double values[] = {0.5, 0, -2};
    struct grader_expr *e;
    struct whet_err err;
    if (grader_expr_parse(text, names, 3, &e, &err) < 0) return;
    double out;
    if (grader_expr_eval(e, values, &out, &err) == 0 && !isfinite(out)) abort();
    grader_expr_free(e);
}

static void check_unit(double v) {
    if (!(v >= 0 && v <= 1)) abort();
}

static void fuzz_metrics(char *text) {
    char *newline = strchr(text, '\n');
    const char *hyp = text, *ref = "";
    if (newline) {
        *newline = 0;
        ref = newline + 1;
    }
    check_unit(grader_fuzzy_match(hyp, ref));
    check_unit(grader_bleu(hyp, ref));
    check_unit(grader_gleu(hyp, ref));
    check_unit(grader_meteor(hyp, ref));
    for (int n = 1; n <= 5; n++) check_unit(grader_rouge_n(hyp, ref, n));
    check_unit(grader_rouge_l(hyp, ref));
    json_t *item = json_pack("{s:s, s:[i]}", "a", ref, "list", 7);
    json_t *sample = grader_sample_from_text(ref);
    free(grader_template_render(hyp, sample, item, NULL, NULL));
    json_decref(item);
    json_decref(sample);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    switch (data[0] % 3) {
    case 0: fuzz_grader_json(text); break;
    case 1: fuzz_formula(text); break;
    default: fuzz_metrics(text); break;
    }
    free(text);
    return 0;
}
