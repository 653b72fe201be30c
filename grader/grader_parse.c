/* grader_parse.c - a grader JSON object to a struct grader, validated field by field.
 *
 * The one set of rules for graders: the gateway validates job creates and graders/validate with it
 * (grader_validate), and executors parse what it accepted. Besides OpenAI's shape, the
 * calculate_output formula must parse and name only sub-graders, and `cosine` is refused because it
 * needs an embedding model. Every error names the field path, OpenAI style, in the message and in
 * `param`: "grader.graders.accuracy.operation: expected one of eq, ne, like, ilike, found \"equals\"". */
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

/* Where a parse reports: the message, and the path of the field at fault (the API's `param`). */
struct parse_ctx {
    struct whet_err *err;
    char param[PATH_MAX_LEN];
};

/* The length of `s` cut to at most `max` bytes without splitting a UTF-8 sequence (paths and values
 * go into JSON strings, which must be valid UTF-8). */
static int utf8_cut(const char *s, size_t max) {
    size_t n = strnlen(s, max);
    if (n == max)
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) n--;
    return (int)n;
}

static int bad(struct parse_ctx *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(struct parse_ctx *c, const char *path, const char *fmt, ...) {
    snprintf(c->param, sizeof c->param, "%s", path);
    va_list ap;
    va_start(ap, fmt);
    int rc = whet_verrf_at(c->err, path, fmt, ap);
    va_end(ap);
    return rc;
}


/* Field paths are cut at PATH_MAX_LEN; the error message stays readable either way. */
static void path_printf(char out[PATH_MAX_LEN], const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void path_printf(char out[PATH_MAX_LEN], const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, PATH_MAX_LEN, fmt, ap);
    va_end(ap);
}

static void join(char out[PATH_MAX_LEN], const char *path, const char *key) {
    path_printf(out, "%s.%.*s", path, utf8_cut(key, 64), key);
}

/* Every key of `obj` must be in `keys` (NULL-terminated). */
static int known_keys(const json_t *obj, const char *const *keys, const char *path, struct parse_ctx *c) {
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
            return bad(c, p, "unknown field (expected %s)", names);
        }
    }
    return 0;
}

/* `v` (at `p`) is a string of 1..max bytes without NUL characters. */
static int check_string(const json_t *v, size_t max, const char *p, struct parse_ctx *c) {
    if (!json_is_string(v)) return bad(c, p, "expected a string, found %s", whet_json_kind(v));
    if (json_string_length(v) == 0) return bad(c, p, "must not be empty");
    if (json_string_length(v) > max) return bad(c, p, "longer than %zu bytes", max);
    if (strlen(json_string_value(v)) != json_string_length(v)) return bad(c, p, "contains a NUL character");
    return 0;
}

/* A required string field (check_string), copied into *out. */
static int want_string(const json_t *obj, const char *key, size_t max, const char *path, char **out,
                       struct parse_ctx *c) {
    char p[PATH_MAX_LEN];
    join(p, path, key);
    const json_t *v = json_object_get(obj, key);
    if (!v) return bad(c, p, "missing");
    if (check_string(v, max, p, c)) return -1;
    if (out) *out = xstrdup(json_string_value(v));
    return 0;
}

/* A required string field that must be one of names[0..n); *out gets its index. */
static int want_enum(const json_t *obj, const char *key, const char *const *names, size_t n, const char *path,
                     int *out, struct parse_ctx *c) {
    char p[PATH_MAX_LEN], list[256] = "";
    join(p, path, key);
    const json_t *v = json_object_get(obj, key);
    if (!v) return bad(c, p, "missing");
    for (size_t i = 0; i < n; i++) {
        if (json_is_string(v) && strcmp(json_string_value(v), names[i]) == 0) {
            *out = (int)i;
            return 0;
        }
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
    }
    if (json_is_string(v))
        return bad(c, p, "expected one of %s, found \"%.*s\"", list, utf8_cut(json_string_value(v), 64),
                   json_string_value(v));
    return bad(c, p, "expected one of %s, found %s", list, whet_json_kind(v));
}

/* ---------------------------------------------------------------- per type */

static int parse_string_check(const json_t *j, const char *path, struct grader *g, struct parse_ctx *c) {
    static const char *const keys[] = {"type", "name", "input", "reference", "operation", NULL};
    int op;
    if (known_keys(j, keys, path, c) || want_string(j, "input", GRADER_TEXT_MAX, path, &g->input, c) ||
        want_string(j, "reference", GRADER_TEXT_MAX, path, &g->reference, c) ||
        want_enum(j, "operation", op_names, WHET_ARRAY_LEN(op_names), path, &op, c))
        return -1;
    g->op = (enum string_op)op;
    return 0;
}

static int parse_text_similarity(const json_t *j, const char *path, struct grader *g, struct parse_ctx *c) {
    static const char *const keys[] = {"type", "name", "input", "reference", "evaluation_metric", "pass_threshold", NULL};
    if (known_keys(j, keys, path, c) || want_string(j, "input", GRADER_TEXT_MAX, path, &g->input, c) ||
        want_string(j, "reference", GRADER_TEXT_MAX, path, &g->reference, c))
        return -1;
    char p[PATH_MAX_LEN];
    join(p, path, "evaluation_metric");
    const char *metric = json_string_value(json_object_get(j, "evaluation_metric"));
    if (metric && strcmp(metric, "cosine") == 0)
        return bad(c, p, "\"cosine\" is not supported in this build (it needs an embedding model); use fuzzy_match, "
                           "bleu, gleu, meteor, rouge_1 to rouge_5 or rouge_l");
    int m = 0;
    if (want_enum(j, "evaluation_metric", metric_names, WHET_ARRAY_LEN(metric_names), path, &m, c)) return -1;
    g->metric = (enum similarity_metric)m;
    /* OpenAI lists pass_threshold as required; the gateway's shape check lets it be left out, and
     * then only an exact match (1.0) passes. */
    g->pass_threshold = 1.0;
    const json_t *threshold = json_object_get(j, "pass_threshold");
    join(p, path, "pass_threshold");
    if (threshold) {
        if (!json_is_number(threshold)) return bad(c, p, "expected a number, found %s", whet_json_kind(threshold));
        g->pass_threshold = json_number_value(threshold); /* outside 0..1 it always or never passes */
    }
    return 0;
}

static int parse_python(const json_t *j, const char *path, struct grader *g, struct parse_ctx *c) {
    static const char *const keys[] = {"type", "name", "source", "image_tag", NULL};
    if (known_keys(j, keys, path, c) || want_string(j, "source", GRADER_SOURCE_MAX, path, &g->source, c)) return -1;
    /* image_tag picks OpenAI's grader image; there is one python here, so it is only checked. */
    if (json_object_get(j, "image_tag") && want_string(j, "image_tag", GRADER_NAME_MAX, path, NULL, c)) return -1;
    return 0;
}

/* The messages a model grader sends: [{role, content[, type: "message"]}, …]. */
static int check_model_input(const json_t *j, const char *path, struct parse_ctx *c) {
    static const char *const roles[] = {"system", "developer", "user", "assistant"};
    static const char *const keys[] = {"role", "content", "type", NULL};
    char p[PATH_MAX_LEN];
    join(p, path, "input");
    const json_t *input = json_object_get(j, "input");
    if (!input) return bad(c, p, "missing");
    if (!json_is_array(input)) return bad(c, p, "expected an array of messages, found %s", whet_json_kind(input));
    if (json_array_size(input) == 0) return bad(c, p, "expected at least one message");
    for (size_t i = 0; i < json_array_size(input); i++) {
        const json_t *m = json_array_get(input, i);
        char mp[PATH_MAX_LEN], cp[PATH_MAX_LEN];
        path_printf(mp, "%s[%zu]", p, i);
        if (!json_is_object(m)) return bad(c, mp, "expected an object, found %s", whet_json_kind(m));
        int role;
        if (known_keys(m, keys, mp, c) || want_enum(m, "role", roles, WHET_ARRAY_LEN(roles), mp, &role, c))
            return -1;
        const json_t *type = json_object_get(m, "type");
        join(cp, mp, "type");
        if (type && !(json_is_string(type) && strcmp(json_string_value(type), "message") == 0))
            return bad(c, cp, "expected \"message\"");
        const json_t *content = json_object_get(m, "content");
        join(cp, mp, "content");
        if (!content) return bad(c, cp, "missing");
        if (!json_is_string(content) && !json_is_object(content) && !json_is_array(content))
            return bad(c, cp, "expected a string, an object or an array, found %s", whet_json_kind(content));
    }
    return 0;
}

static int parse_model(const json_t *j, const char *path, struct grader *g, struct parse_ctx *c) {
    static const char *const score_keys[] = {"type", "name", "input", "model", "range", "sampling_params",
                                             "pass_threshold", NULL};
    static const char *const label_keys[] = {"type", "name", "input", "model", "labels", "passing_labels", NULL};
    int score = g->type == GRADER_SCORE_MODEL;
    char p[PATH_MAX_LEN];
    if (known_keys(j, score ? score_keys : label_keys, path, c) ||
        want_string(j, "model", GRADER_NAME_MAX, path, NULL, c) || check_model_input(j, path, c))
        return -1;
    if (score) {
        const json_t *range = json_object_get(j, "range"), *sampling = json_object_get(j, "sampling_params"),
                     *threshold = json_object_get(j, "pass_threshold");
        join(p, path, "range");
        if (range && (!json_is_array(range) || json_array_size(range) != 2 || !json_is_number(json_array_get(range, 0)) ||
                      !json_is_number(json_array_get(range, 1))))
            return bad(c, p, "expected [min, max]");
        if (range && json_number_value(json_array_get(range, 0)) >= json_number_value(json_array_get(range, 1)))
            return bad(c, p, "min must be below max");
        join(p, path, "sampling_params");
        if (sampling && !json_is_object(sampling)) return bad(c, p, "expected an object, found %s", whet_json_kind(sampling));
        join(p, path, "pass_threshold");
        if (threshold && !json_is_number(threshold)) return bad(c, p, "expected a number, found %s", whet_json_kind(threshold));
    } else {
        static const char *const lists[] = {"labels", "passing_labels"};
        for (size_t k = 0; k < 2; k++) {
            const json_t *list = json_object_get(j, lists[k]);
            join(p, path, lists[k]);
            if (!list) return bad(c, p, "missing");
            if (!json_is_array(list) || json_array_size(list) == 0)
                return bad(c, p, "expected a non-empty array of strings");
            for (size_t i = 0; i < json_array_size(list); i++) {
                char ip[PATH_MAX_LEN];
                path_printf(ip, "%s[%zu]", p, i);
                if (check_string(json_array_get(list, i), GRADER_NAME_MAX, ip, c)) return -1;
            }
        }
        const json_t *labels = json_object_get(j, "labels"), *passing = json_object_get(j, "passing_labels");
        for (size_t i = 0; i < json_array_size(passing); i++) {
            const char *label = json_string_value(json_array_get(passing, i));
            int found = 0;
            for (size_t k = 0; k < json_array_size(labels) && !found; k++)
                found = strcmp(label, json_string_value(json_array_get(labels, k))) == 0;
            path_printf(p, "%s.passing_labels[%zu]", path, i);
            if (!found) return bad(c, p, "\"%.*s\" is not one of the labels", utf8_cut(label, 64), label);
        }
    }
    g->json = json_deep_copy(j);
    return 0;
}

static int parse_at(const json_t *j, const char *path, int allow_multi, struct grader **out, struct parse_ctx *c);

static int parse_multi(const json_t *j, const char *path, struct grader *g, struct parse_ctx *c) {
    static const char *const keys[] = {"type", "name", "graders", "calculate_output", NULL};
    if (known_keys(j, keys, path, c)) return -1;
    char p[PATH_MAX_LEN];
    join(p, path, "graders");
    const json_t *graders = json_object_get(j, "graders");
    if (!graders) return bad(c, p, "missing");
    if (!json_is_object(graders) || json_object_size(graders) == 0)
        return bad(c, p, "expected an object of named graders, found %s", whet_json_kind(graders));
    if (json_object_size(graders) > GRADER_MULTI_MAX) return bad(c, p, "at most %d graders", GRADER_MULTI_MAX);
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
        if (parse_at(sub, sp, 0, &g->subs[g->n_sub - 1], c)) return -1;
    }
    char *formula;
    if (want_string(j, "calculate_output", GRADER_FORMULA_MAX, path, &formula, c)) return -1;
    int rc = grader_expr_parse(formula, (const char *const *)g->sub_names, g->n_sub, &g->formula, c->err);
    free(formula);
    if (rc) {
        join(p, path, "calculate_output");
        snprintf(c->param, sizeof c->param, "%s", p);
        return whet_err_prefix(c->err, "%s", p);
    }
    return 0;
}

static int parse_at(const json_t *j, const char *path, int allow_multi, struct grader **out, struct parse_ctx *c) {
    *out = NULL;
    if (!json_is_object(j)) return bad(c, path, "expected an object, found %s", whet_json_kind(j));
    int type = 0;
    if (want_enum(j, "type", type_names, WHET_ARRAY_LEN(type_names), path, &type, c)) return -1;
    char p[PATH_MAX_LEN];
    join(p, path, "type");
    if (type == GRADER_MULTI && !allow_multi) return bad(c, p, "a multi grader cannot contain another");
    struct grader *g = xcalloc(1, sizeof *g);
    g->type = (enum grader_type)type;
    int rc = want_string(j, "name", GRADER_NAME_MAX, path, &g->name, c);
    if (rc == 0) {
        switch (g->type) {
        case GRADER_STRING_CHECK: rc = parse_string_check(j, path, g, c); break;
        case GRADER_TEXT_SIMILARITY: rc = parse_text_similarity(j, path, g, c); break;
        case GRADER_MULTI: rc = parse_multi(j, path, g, c); break;
        case GRADER_PYTHON: rc = parse_python(j, path, g, c); break;
        case GRADER_SCORE_MODEL:
        case GRADER_LABEL_MODEL: rc = parse_model(j, path, g, c); break;
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
    struct parse_ctx c = {err, ""};
    return parse_at(json, path ? path : "grader", 1, out, &c);
}

int grader_validate(const json_t *json, const char *path, struct grader **out, char *param, size_t param_size,
                    struct whet_err *err) {
    struct parse_ctx c = {err, ""};
    struct grader *g;
    if (parse_at(json, path ? path : "grader", 1, &g, &c)) {
        if (param_size) snprintf(param, param_size, "%.*s", utf8_cut(c.param, param_size - 1), c.param);
        return -1;
    }
    if (out) *out = g;
    else grader_free(g);
    return 0;
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
