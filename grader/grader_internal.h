/* grader_internal.h - the parsed grader, shared by the parser (grader_parse.c) and the evaluator
 * (grader_eval.c). Nothing outside grader/ includes it. */
#ifndef WHET_GRADER_INTERNAL_H
#define WHET_GRADER_INTERNAL_H

#include "grader.h"

enum string_op { OP_EQ, OP_NE, OP_LIKE, OP_ILIKE };

enum similarity_metric {
    METRIC_FUZZY_MATCH,
    METRIC_BLEU,
    METRIC_GLEU,
    METRIC_METEOR,
    METRIC_ROUGE_1, /* rouge_1 .. rouge_5 follow in order */
    METRIC_ROUGE_2,
    METRIC_ROUGE_3,
    METRIC_ROUGE_4,
    METRIC_ROUGE_5,
    METRIC_ROUGE_L,
};

struct grader {
    enum grader_type type;
    char *name;
    /* string_check, text_similarity: templates */
    char *input, *reference;
    enum string_op op;
    enum similarity_metric metric;
    double pass_threshold;
    /* python */
    char *source;
    /* multi: the named graders in the order of the `graders` object, and the parsed formula */
    size_t n_sub;
    char **sub_names;
    struct grader **subs;
    struct grader_expr *formula;
    /* score_model, label_model: the validated object, for a judge hook */
    json_t *json;
};

#endif
