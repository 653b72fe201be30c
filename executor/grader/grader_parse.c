/* grader_parse.c - a grader JSON object to a struct grader, validated field by field.
 *
 * The rules match the gateway's shape check (gateway/job_request.c), so what a job create accepts
 * parses here, plus what only a runner can check: the calculate_output formula parses and names
 * only sub-graders, and `cosine` is refused because it needs an embedding model. Every error names
 * the field path, OpenAI style: "grader.graders.accuracy.operation: expected one of eq, ne, like,
 * ilike, found \"equals\"". */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grader_internal.h"
#include "json.h"

#define GRADER_SOURCE_MAX (256 * 1024)
#define GRADER_TEXT_MAX (64 * 1024)
#define GRADER_NAME_MAX 256
#define GRADER_FORMULA_MAX 4096
#define GRADER_MULTI_MAX 16
#define PATH_MAX_LEN 400

static const char *const type_names[] = {
    [GRADER_STRING_CHECK] = "string_check", [GRADER_TEXT_SIMILARITY] = "text_similarity",
    [GRADER_MULTI] = "multi",               [GRADER_PYTHON] = "python",
    [GRADER_SCORE_MODEL] = "score_model",   [GRADER_LABEL_MODEL] = "label_model",
};

static const char *const op_names[] = {[OP_EQ] = "eq", [OP_NE] = "ne", [OP_LIKE] = "like", [OP_ILIKE] = "ilike"};

static const char *const metric_names[] = {
    [METRIC_FUZZY_MATCH] = "fuzzy_match", [METRIC_BLEU] = "bleu",       [METRIC_GLEU] = "gleu",
    [METRIC_METEOR] = "meteor",           [METRIC_ROUGE_1] = "rouge_1", [METRIC_ROUGE_2] = "rouge_2",
    [METRIC_ROUGE_3] = "rouge_3",         [METRIC_ROUGE_4] = "rouge_4", [METRIC_ROUGE_5] = "rouge_5",
    [METRIC_ROUGE_L] = "rouge_l",
};

const char *grader_type_name(enum grader_type type) {
    return (size_t)type < WHET_ARRAY_LEN(type_names) ? type_names[type] : "unknown";
}
enum grader_type grader_type_of(const struct grader *g) { return g->type; }
const char *grader_name(const struct grader *g) { return g->name; }
const json_t *grader_json(const struct grader *g) { return g->json; }

/* ---------------------------------------------------------------- helpers */

static int bad(struct whet_err *err, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(struct whet_err *err, const char *path, const char *fmt, ...) {
    char what[WHET_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return whet_errf(err, "%s: %s", path, what);
}


/* Field paths are cut at PATH_MAX_LEN; the error message stays readable either way. */
static void path_printf(char out[PATH_MAX_LEN], const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void path_printf(char out[PATH_MAX_LEN], const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, PATH_MAX_LEN, fmt, ap);
    va_end(ap);
}

static void join(char out[PATH_MAX_LEN], const char *path, const char *key) { path_printf(out, "%s.%.64s", path, key); }

/* Every key of `obj` must be in `keys` (NULL-terminated). */
static int known_keys(const json_t *obj, const char *const *keys, const char *path, struct whet_err *err) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        int found = 0;
        for (const char *const *k = keys; *k && !found; k++) found = strcmp(*k, key) == 0;
        if (!found) {
            char p[PATH_MAX_LEN], names[256] = "";
            for (const char *const *k = keys; *k; k++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k == keys ? "" : ", ", *k);
            join(p, path, key);
            return bad(err, p, "unknown field (expected %s)", names);
        }
    }
    return 0;
}

/* A required string field of at most `max` bytes, copied into *out. */
static int want_string(const json_t *obj, const char *key, size_t max, const char *path, char **out,
                       struct whet_err *err) {
    char p[PATH_MAX_LEN];
    join(p, path, key);
    const json_t *v = json_object_get(obj, key);
    if (!v) return bad(err, p, "missing");
    if (!json_is_string(v)) return bad(err, p, "expected a string, found %s", whet_json_kind(v));
    if (json_string_length(v) > max) return bad(err, p, "longer than %zu bytes", max);
    if (strlen(json_string_value(v)) != json_string_length(v)) return bad(err, p, "contains a NUL character");
    if (out) *out = xstrdup(json_string_value(v));
    return 0;
}

/* A required string field that must be one of names[0..n); *out gets its index. */
static int want_enum(const json_t *obj, const char *key, const char *const *names, size_t n, const char *path,
                     int *out, struct whet_err *err) {
    char p[PATH_MAX_LEN], list[256] = "";
    join(p, path, key);
    const json_t *v = json_object_get(obj, key);
    if (!v) return bad(err, p, "missing");
    for (size_t i = 0; i < n; i++) {
        if (json_is_string(v) && strcmp(json_string_value(v), names[i]) == 0) {
            *out = (int)i;
            return 0;
        }
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
    }
    if (json_is_string(v)) return bad(err, p, "expected one of %s, found \"%.64s\"", list, json_string_value(v));
    return bad(err, p, "expected one of %s, found %s", list, whet_json_kind(v));
}

/* ---------------------------------------------------------------- per type */

static int parse_string_check(const json_t *j, const char *path, struct grader *g, struct whet_err *err) {
    static const char *const keys[] = {"type", "name", "input", "reference", "operation", NULL};
    int op;
    if (known_keys(j, keys, path, err) || want_string(j, "input", GRADER_TEXT_MAX, path, &g->input, err) ||
        want_string(j, "reference", GRADER_TEXT_MAX, path, &g->reference, err) ||
        want_enum(j, "operation", op_names, WHET_ARRAY_LEN(op_names), path, &op, err))
        return -1;
    g->op = (enum string_op)op;
    return 0;
}

static int parse_text_similarity(const json_t *j, const char *path, struct grader *g, struct whet_err *err) {
    static const char *const keys[] = {"type", "name", "input", "reference", "evaluation_metric", "pass_threshold", NULL};
    if (known_keys(j, keys, path, err) || want_string(j, "input", GRADER_TEXT_MAX, path, &g->input, err) ||
        want_string(j, "reference", GRADER_TEXT_MAX, path, &g->reference, err))
        return -1;
    char p[PATH_MAX_LEN];
    join(p, path, "evaluation_metric");
    const char *metric = json_string_value(json_object_get(j, "evaluation_metric"));
    if (metric && strcmp(metric, "cosine") == 0)
        return bad(err, p, "\"cosine\" is not supported in this build (it needs an embedding model); use fuzzy_match, "
                           "bleu, gleu, meteor, rouge_1 to rouge_5 or rouge_l");
    int m = 0;
    if (want_enum(j, "evaluation_metric", metric_names, WHET_ARRAY_LEN(metric_names), path, &m, err)) return -1;
    g->metric = (enum similarity_metric)m;
    /* OpenAI lists pass_threshold as required; the gateway's shape check lets it be left out, and
     * then only an exact match (1.0) passes. */
    g->pass_threshold = 1.0;
    const json_t *threshold = json_object_get(j, "pass_threshold");
    join(p, path, "pass_threshold");
    if (threshold) {
        if (!json_is_number(threshold)) return bad(err, p, "expected a number, found %s", whet_json_kind(threshold));
        g->pass_threshold = json_number_value(threshold); /* outside 0..1 it always or never passes */
    }
    return 0;
}

static int parse_python(const json_t *j, const char *path, struct grader *g, struct whet_err *err) {
    static const char *const keys[] = {"type", "name", "source", "image_tag", NULL};
    if (known_keys(j, keys, path, err) || want_string(j, "source", GRADER_SOURCE_MAX, path, &g->source, err)) return -1;
    /* image_tag picks OpenAI's grader image; there is one python here, so it is only checked. */
    if (json_object_get(j, "image_tag") && want_string(j, "image_tag", GRADER_NAME_MAX, path, NULL, err)) return -1;
    return 0;
}

/* The messages a model grader sends: [{role, content[, type: "message"]}, …]. */
static int check_model_input(const json_t *j, const char *path, struct whet_err *err) {
    static const char *const roles[] = {"system", "developer", "user", "assistant"};
    static const char *const keys[] = {"role", "content", "type", NULL};
    char p[PATH_MAX_LEN];
    join(p, path, "input");
    const json_t *input = json_object_get(j, "input");
    if (!input) return bad(err, p, "missing");
    if (!json_is_array(input) || json_array_size(input) == 0)
        return bad(err, p, "expected a non-empty array of messages, found %s", whet_json_kind(input));
    for (size_t i = 0; i < json_array_size(input); i++) {
        const json_t *m = json_array_get(input, i);
        char mp[PATH_MAX_LEN], cp[PATH_MAX_LEN];
        path_printf(mp, "%s[%zu]", p, i);
        if (!json_is_object(m)) return bad(err, mp, "expected an object, found %s", whet_json_kind(m));
        int role;
        if (known_keys(m, keys, mp, err) || want_enum(m, "role", roles, WHET_ARRAY_LEN(roles), mp, &role, err))
            return -1;
        const json_t *type = json_object_get(m, "type");
        join(cp, mp, "type");
        if (type && !(json_is_string(type) && strcmp(json_string_value(type), "message") == 0))
            return bad(err, cp, "expected \"message\"");
        const json_t *content = json_object_get(m, "content");
        join(cp, mp, "content");
        if (!content) return bad(err, cp, "missing");
        if (!json_is_string(content) && !json_is_object(content) && !json_is_array(content))
            return bad(err, cp, "expected a string, an object or an array, found %s", whet_json_kind(content));
    }
    return 0;
}

static int parse_model(const json_t *j, const char *path, struct grader *g, struct whet_err *err) {
    static const char *const score_keys[] = {"type", "name", "input", "model", "range", "sampling_params",
                                             "pass_threshold", NULL};
    static const char *const label_keys[] = {"type", "name", "input", "model", "labels", "passing_labels", NULL};
    int score = g->type == GRADER_SCORE_MODEL;
    char p[PATH_MAX_LEN];
    if (known_keys(j, score ? score_keys : label_keys, path, err) ||
        want_string(j, "model", GRADER_NAME_MAX, path, NULL, err) || check_model_input(j, path, err))
        return -1;
    if (score) {
        const json_t *range = json_object_get(j, "range"), *sampling = json_object_get(j, "sampling_params"),
                     *threshold = json_object_get(j, "pass_threshold");
        join(p, path, "range");
        if (range && (!json_is_array(range) || json_array_size(range) != 2 || !json_is_number(json_array_get(range, 0)) ||
                      !json_is_number(json_array_get(range, 1))))
            return bad(err, p, "expected [min, max]");
        if (range && json_number_value(json_array_get(range, 0)) >= json_number_value(json_array_get(range, 1)))
            return bad(err, p, "min must be below max");
        join(p, path, "sampling_params");
        if (sampling && !json_is_object(sampling)) return bad(err, p, "expected an object, found %s", whet_json_kind(sampling));
        join(p, path, "pass_threshold");
        if (threshold && !json_is_number(threshold)) return bad(err, p, "expected a number, found %s", whet_json_kind(threshold));
    } else {
        static const char *const lists[] = {"labels", "passing_labels"};
        for (size_t k = 0; k < 2; k++) {
            const json_t *list = json_object_get(j, lists[k]);
            join(p, path, lists[k]);
            if (!list) return bad(err, p, "missing");
            if (!json_is_array(list) || json_array_size(list) == 0)
                return bad(err, p, "expected a non-empty array of strings");
            for (size_t i = 0; i < json_array_size(list); i++)
                if (!json_is_string(json_array_get(list, i))) {
                    char ip[PATH_MAX_LEN];
                    path_printf(ip, "%s[%zu]", p, i);
                    return bad(err, ip, "expected a string, found %s", whet_json_kind(json_array_get(list, i)));
                }
        }
        const json_t *labels = json_object_get(j, "labels"), *passing = json_object_get(j, "passing_labels");
        for (size_t i = 0; i < json_array_size(passing); i++) {
            const char *label = json_string_value(json_array_get(passing, i));
            int found = 0;
            for (size_t k = 0; k < json_array_size(labels) && !found; k++)
                found = strcmp(label, json_string_value(json_array_get(labels, k))) == 0;
            path_printf(p, "%s.passing_labels[%zu]", path, i);
            if (!found) return bad(err, p, "\"%.64s\" is not one of the labels", label);
        }
    }
    g->json = json_deep_copy(j);
    return 0;
}

static int parse_at(const json_t *j, const char *path, int allow_multi, struct grader **out, struct whet_err *err);

static int parse_multi(const json_t *j, const char *path, struct grader *g, struct whet_err *err) {
    static const char *const keys[] = {"type", "name", "graders", "calculate_output", NULL};
    if (known_keys(j, keys, path, err)) return -1;
    char p[PATH_MAX_LEN];
    join(p, path, "graders");
    const json_t *graders = json_object_get(j, "graders");
    if (!graders) return bad(err, p, "missing");
    if (!json_is_object(graders) || json_object_size(graders) == 0)
        return bad(err, p, "expected an object of named graders, found %s", whet_json_kind(graders));
    if (json_object_size(graders) > GRADER_MULTI_MAX) return bad(err, p, "at most %d graders", GRADER_MULTI_MAX);
    size_t n = json_object_size(graders);
    g->sub_names = xcalloc(n, sizeof *g->sub_names);
    g->subs = xcalloc(n, sizeof *g->subs);
    const char *key;
    json_t *sub;
    json_object_foreach((json_t *)graders, key, sub) {
        char sp[PATH_MAX_LEN];
        join(sp, p, key);
        g->sub_names[g->n_sub] = xstrdup(key);
        g->n_sub++; /* counted before parsing, so grader_free releases the name on failure */
        if (parse_at(sub, sp, 0, &g->subs[g->n_sub - 1], err)) return -1;
    }
    char *formula;
    if (want_string(j, "calculate_output", GRADER_FORMULA_MAX, path, &formula, err)) return -1;
    int rc = grader_expr_parse(formula, (const char *const *)g->sub_names, g->n_sub, &g->formula, err);
    free(formula);
    if (rc) {
        join(p, path, "calculate_output");
        return whet_err_prefix(err, "%s", p);
    }
    return 0;
}

static int parse_at(const json_t *j, const char *path, int allow_multi, struct grader **out, struct whet_err *err) {
    *out = NULL;
    if (!json_is_object(j)) return bad(err, path, "expected an object, found %s", whet_json_kind(j));
    int type = 0;
    if (want_enum(j, "type", type_names, WHET_ARRAY_LEN(type_names), path, &type, err)) return -1;
    char p[PATH_MAX_LEN];
    join(p, path, "type");
    if (type == GRADER_MULTI && !allow_multi) return bad(err, p, "a multi grader cannot contain another");
    struct grader *g = xcalloc(1, sizeof *g);
    g->type = (enum grader_type)type;
    int rc = want_string(j, "name", GRADER_NAME_MAX, path, &g->name, err);
    if (rc == 0) {
        switch (g->type) {
        case GRADER_STRING_CHECK: rc = parse_string_check(j, path, g, err); break;
        case GRADER_TEXT_SIMILARITY: rc = parse_text_similarity(j, path, g, err); break;
        case GRADER_MULTI: rc = parse_multi(j, path, g, err); break;
        case GRADER_PYTHON: rc = parse_python(j, path, g, err); break;
        case GRADER_SCORE_MODEL:
        case GRADER_LABEL_MODEL: rc = parse_model(j, path, g, err); break;
        }
    }
    if (rc) {
        grader_free(g);
        return -1;
    }
    *out = g;
    return 0;
}

int grader_parse(const json_t *json, const char *path, struct grader **out, struct whet_err *err) {
    return parse_at(json, path ? path : "grader", 1, out, err);
}

void grader_free(struct grader *g) {
    if (!g) return;
    for (size_t k = 0; k < g->n_sub; k++) {
        free(g->sub_names[k]);
        grader_free(g->subs[k]);
    }
    free(g->sub_names);
    free(g->subs);
    grader_expr_free(g->formula);
    json_decref(g->json);
    free(g->name);
    free(g->input);
    free(g->reference);
    free(g->source);
    free(g);
}

const char *grader_metric_name(const struct grader *g) {
    return g->type == GRADER_TEXT_SIMILARITY ? metric_names[g->metric] : NULL;
}
