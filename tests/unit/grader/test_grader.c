/* test_grader.c - the grader language: metrics against their reference implementations, templates,
 * the calculate_output formula, validation errors with field paths, and every grader type run.
 *
 * The metric values below were printed by reference_values.py (beside this file) from NLTK 3.8 and
 * python-Levenshtein under Debian's python3; ROUGE comes from that script's restatement of Google's
 * rouge-score, which Debian does not package, and is also checked on hand-worked examples here. */
#include <stdlib.h>
#include <string.h>

#include "grader_runner.h"
#include "test.h"

/* ---------------------------------------------------------------- metrics */

static const struct {
    const char *hyp, *ref;
    double v[10]; /* fuzzy, bleu, gleu, meteor, rouge_1..rouge_5, rouge_l */
} reference[] = {
    {"the cat sat on the mat", "the cat is on the mat", {0.930232558140, 0.254066374077, 0.500000000000, 0.806666666667, 0.833333333333, 0.600000000000, 0.250000000000, 0.000000000000, 0.000000000000, 0.833333333333}},
    {"It is a guide to action which ensures that the military always obeys the commands of the party", "It is a guide to action that ensures that the military will forever heed Party commands", {0.751381215470, 0.411803763569, 0.439393939394, 0.694444444444, 0.705882352941, 0.500000000000, 0.400000000000, 0.285714285714, 0.153846153846, 0.647058823529}},
    {"the the the the the the the", "the cat is on the mat", {0.541666666667, 0.039281465090, 0.090909090909, 0.163934426230, 0.307692307692, 0.000000000000, 0.000000000000, 0.000000000000, 0.000000000000, 0.307692307692}},
    {"Paris", "The capital of France is Paris.", {0.277777777778, 0.000000000000, 0.000000000000, 0.000000000000, 0.285714285714, 0.000000000000, 0.000000000000, 0.000000000000, 0.000000000000, 0.285714285714}},
    {"kitten sitting", "sitting kitten", {0.642857142857, 0.177827941004, 0.666666666667, 0.500000000000, 1.000000000000, 0.000000000000, 0.000000000000, 0.000000000000, 0.000000000000, 0.500000000000}},
    {"Héllo wörld, ça va?", "hello world ca va", {0.722222222222, 0.000000000000, 0.000000000000, 0.000000000000, 0.200000000000, 0.000000000000, 0.000000000000, 0.000000000000, 0.000000000000, 0.200000000000}},
    {"a b c d e f", "f e d c b a", {0.454545454545, 0.063894310425, 0.333333333333, 0.500000000000, 1.000000000000, 0.000000000000, 0.000000000000, 0.000000000000, 0.000000000000, 0.166666666667}},
    {"completely different words", "nothing matches here", {0.347826086957, 0.000000000000, 0.000000000000, 0.000000000000, 0.000000000000, 0.000000000000, 0.000000000000, 0.000000000000, 0.000000000000, 0.000000000000}},
};

TEST(metrics_match_nltk_levenshtein_and_rouge_score) {
    for (size_t i = 0; i < WHET_ARRAY_LEN(reference); i++) {
        const char *h = reference[i].hyp, *r = reference[i].ref;
        const double *v = reference[i].v;
        CHECK_NEAR(grader_fuzzy_match(h, r), v[0], 1e-9);
        CHECK_NEAR(grader_bleu(h, r), v[1], 1e-9);
        CHECK_NEAR(grader_gleu(h, r), v[2], 1e-9);
        CHECK_NEAR(grader_meteor(h, r), v[3], 1e-9);
        for (int n = 1; n <= 5; n++) CHECK_NEAR(grader_rouge_n(h, r, n), v[3 + n], 1e-9);
        CHECK_NEAR(grader_rouge_l(h, r), v[9], 1e-9);
    }
}

/* 200 words drawn by an LCG, as reference_values.py's lcg_text draws them. */
static char *lcg_text(unsigned long long seed, int n) {
    static const char *const words[] = {"the", "a", "cat", "dog", "sat", "on", "mat", "is", "was", "and",
                                        "of", "to", "in", "it", "that", "quick", "brown", "fox", "jumps", "over",
                                        "lazy"};
    char *out = calloc((size_t)n * 8 + 1, 1);
    for (int i = 0; i < n; i++) {
        seed = (1103515245ull * seed + 12345ull) % (1ull << 31);
        strcat(out, words[(seed >> 16) % WHET_ARRAY_LEN(words)]);
        if (i + 1 < n) strcat(out, " ");
    }
    return out;
}

TEST(metrics_on_long_texts_match_the_references) {
    const double v[10] = {0.529230769231, 0.037190797411, 0.287153652393, 0.427318916437, 0.825000000000,
                          0.301507537688, 0.015151515152, 0.000000000000, 0.000000000000, 0.335000000000};
    char *h = lcg_text(1, 200), *r = lcg_text(2, 200);
    CHECK_NEAR(grader_fuzzy_match(h, r), v[0], 1e-9);
    CHECK_NEAR(grader_bleu(h, r), v[1], 1e-9);
    CHECK_NEAR(grader_gleu(h, r), v[2], 1e-9);
    CHECK_NEAR(grader_meteor(h, r), v[3], 1e-9);
    for (int n = 1; n <= 5; n++) CHECK_NEAR(grader_rouge_n(h, r, n), v[3 + n], 1e-9);
    CHECK_NEAR(grader_rouge_l(h, r), v[9], 1e-9);
    free(h);
    free(r);
}

TEST(metrics_on_hand_worked_examples) {
    /* kitten/sitting: LCS "ittn" = 4 code points, ratio 2*4/(6+7) */
    CHECK_NEAR(grader_fuzzy_match("kitten", "sitting"), 8.0 / 13.0, 1e-12);
    CHECK_NEAR(grader_fuzzy_match("", ""), 1.0, 0);
    CHECK_NEAR(grader_fuzzy_match("abc", ""), 0.0, 0);
    /* code points, not bytes: "é" vs "e" share nothing, "née"/"nee" share "ne" */
    CHECK_NEAR(grader_fuzzy_match("née", "nee"), 4.0 / 6.0, 1e-12);
    /* identical texts score 1 on every metric */
    const char *same = "the quick brown fox jumps over the lazy dog";
    CHECK_NEAR(grader_bleu(same, same), 1.0, 1e-12);
    CHECK_NEAR(grader_gleu(same, same), 1.0, 1e-12);
    /* METEOR of a perfect match: one chunk of 9 words, penalty 0.5 * (1/9)^3 */
    CHECK_NEAR(grader_meteor(same, same), 1.0 - 0.5 / 729.0, 1e-12);
    CHECK_NEAR(grader_rouge_l(same, same), 1.0, 1e-12);
    /* rouge tokenization: case and punctuation do not matter */
    CHECK_NEAR(grader_rouge_n("The FOX, jumps!", "the fox jumps", 2), 1.0, 1e-12);
    /* rouge-2: hyp bigrams {a b, b c}, ref {a b, b d}: P = R = 1/2 */
    CHECK_NEAR(grader_rouge_n("a b c", "a b d", 2), 0.5, 1e-12);
    /* empty sides */
    CHECK_NEAR(grader_bleu("", "a b"), 0.0, 0);
    CHECK_NEAR(grader_gleu("", ""), 0.0, 0);
    CHECK_NEAR(grader_meteor("", "a"), 0.0, 0);
    CHECK_NEAR(grader_rouge_l("", "a"), 0.0, 0);
    CHECK_NEAR(grader_rouge_n("a", "", 1), 0.0, 0);
}

/* The bit-parallel LCS behind fuzzy_match against the textbook table, on strings long enough for the
 * carry to cross 64-bit words. */
static size_t lcs_table(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    size_t *t = calloc((na + 1) * (nb + 1), sizeof *t);
    for (size_t i = 1; i <= na; i++)
        for (size_t j = 1; j <= nb; j++) {
            size_t up = t[(i - 1) * (nb + 1) + j], left = t[i * (nb + 1) + j - 1];
            t[i * (nb + 1) + j] = a[i - 1] == b[j - 1] ? t[(i - 1) * (nb + 1) + j - 1] + 1 : (up > left ? up : left);
        }
    size_t out = t[na * (nb + 1) + nb];
    free(t);
    return out;
}

TEST(fuzzy_match_lcs_agrees_with_the_table_across_words) {
    unsigned seed = 12345;
    char a[400], b[400];
    for (int round = 0; round < 40; round++) {
        size_t na = 1 + (size_t)(rand_r(&seed) % 390), nb = 1 + (size_t)(rand_r(&seed) % 390);
        int alphabet = 2 + round % 6;
        for (size_t i = 0; i < na; i++) a[i] = (char)('a' + rand_r(&seed) % alphabet);
        for (size_t i = 0; i < nb; i++) b[i] = (char)('a' + rand_r(&seed) % alphabet);
        a[na] = b[nb] = 0;
        double want = 2.0 * (double)lcs_table(a, b) / (double)(na + nb);
        CHECK_NEAR(grader_fuzzy_match(a, b), want, 1e-12);
        CHECK_NEAR(grader_fuzzy_match(b, a), want, 1e-12);
    }
}

/* Appends code point cp (below U+10000) as UTF-8. */
static char *put_utf8(char *p, unsigned cp) {
    if (cp < 0x800) {
        *p++ = (char)(0xc0 | cp >> 6);
    } else {
        *p++ = (char)(0xe0 | cp >> 12);
        *p++ = (char)(0x80 | ((cp >> 6) & 0x3f));
    }
    *p++ = (char)(0x80 | (cp & 0x3f));
    return p;
}

TEST(fuzzy_match_on_many_distinct_characters_takes_the_table_path) {
    /* 16,400 distinct CJK characters make the bit-parallel masks larger than their cap; b keeps every
     * other one of a and swaps the rest for Hangul that a lacks (8,200 syllables from U+AC00, all
     * within the Hangul block: past U+D7FF lie the surrogates, which are not UTF-8): LCS 8,200, ratio
     * 2*8200/32800. */
    enum { N = 16400 };
    char *a = malloc(N * 3 + 1), *b = malloc(N * 3 + 1), *pa = a, *pb = b;
    for (unsigned i = 0; i < N; i++) {
        pa = put_utf8(pa, 0x4e00 + i);
        pb = put_utf8(pb, i % 2 ? 0xac00 + i / 2 : 0x4e00 + i);
    }
    *pa = *pb = 0;
    CHECK_NEAR(grader_fuzzy_match(a, b), 0.5, 1e-12);
    /* the same pairs, few enough for the bit-parallel path */
    a[300] = b[300] = 0; /* 100 characters each, 50 shared */
    CHECK_NEAR(grader_fuzzy_match(a, b), 0.5, 1e-12);
    free(a);
    free(b);
}

/* ---------------------------------------------------------------- helpers */

static struct grader *parse_ok(const char *text) {
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    if (!j) {
        fprintf(stderr, "bad test JSON: %s: %s\n", jerr.text, text);
        return NULL;
    }
    struct grader *g = NULL;
    struct whet_err err = {0};
    if (grader_parse(j, NULL, &g, &err) < 0) fprintf(stderr, "unexpected parse error: %s\n", err.msg);
    json_decref(j);
    return g;
}

/* Validates text expecting an error; returns it (static buffer). The error's param must be the path
 * its message starts with. */
static const char *parse_error(const char *text) {
    static struct whet_err err;
    char param[256] = "";
    json_t *j = json_loads(text, 0, NULL);
    err.msg[0] = 0;
    if (!j) return "bad test JSON";
    if (grader_validate(j, NULL, NULL, param, sizeof param, &err) == 0) {
        snprintf(err.msg, sizeof err.msg, "(parsed without error)");
    } else {
        size_t n = strlen(param);
        CHECK(n > 0 && strncmp(err.msg, param, n) == 0 && err.msg[n] == ':');
    }
    json_decref(j);
    return err.msg;
}

/* Runs g on the sample text and the item JSON. */
static void run_text(const struct grader *g, const char *output, const char *item_json, struct grader_result *res) {
    json_t *sample = grader_sample_from_text(output);
    json_t *item = json_loads(item_json, 0, NULL);
    struct whet_err err;
    CHECK(grader_run(g, NULL, sample, item, res, &err) == 0);
    json_decref(sample);
    json_decref(item);
}

static int has_error(const struct grader_result *res, enum grader_error_kind kind, const char *text) {
    for (size_t k = 0; k < res->n_errors; k++)
        if (res->errors[k].kind == kind && strstr(res->errors[k].message, text)) return 1;
    for (size_t k = 0; k < res->n_errors; k++)
        fprintf(stderr, "  error %s: %s\n", grader_error_kind_name(res->errors[k].kind), res->errors[k].message);
    return 0;
}

/* ---------------------------------------------------------------- string_check, text_similarity */

TEST(string_check_operations) {
    static const struct {
        const char *op, *output;
        double want;
    } cases[] = {
        {"eq", "Paris", 1}, {"eq", "paris", 0}, {"ne", "Paris", 0}, {"ne", "Lyon", 1},
        {"like", "It is Paris.", 1}, {"like", "it is paris.", 0}, {"ilike", "IT IS PARIS.", 1}, {"ilike", "Lyon", 0},
    };
    for (size_t i = 0; i < WHET_ARRAY_LEN(cases); i++) {
        char text[256];
        snprintf(text, sizeof text,
                 "{\"type\":\"string_check\",\"name\":\"s\",\"input\":\"{{sample.output_text}}\","
                 "\"reference\":\"{{item.answer}}\",\"operation\":\"%s\"}", cases[i].op);
        struct grader *g = parse_ok(text);
        CHECK(g != NULL);
        if (!g) continue;
        struct grader_result res;
        run_text(g, cases[i].output, "{\"answer\":\"Paris\"}", &res);
        CHECK_MSG(res.reward == cases[i].want, "%s on \"%s\": %g", cases[i].op, cases[i].output, res.reward);
        CHECK(res.n_errors == 0);
        grader_result_free(&res);
        grader_free(g);
    }
}

TEST(samples_that_are_not_utf8_are_graded_with_replacement_characters) {
    /* A sampled response can end inside a character or hold stray bytes: each bad byte reads as
     * U+FFFD (overlong forms, surrogates and a cut-off sequence included); the rest is kept. */
    static const struct {
        const char *output, *want;
    } cases[] = {
        {"Paris \xe2\x82", "Paris \xef\xbf\xbd\xef\xbf\xbd"},
        {"\xc0\xafParis", "\xef\xbf\xbd\xef\xbf\xbdParis"},
        {"a\xed\xa0\x80" "b", "a\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" "b"},
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"caf\xc3\xa9 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xf0\x9f\x98\x80"},
        {"", ""},
    };
    for (size_t i = 0; i < WHET_ARRAY_LEN(cases); i++) {
        json_t *sample = grader_sample_from_text(cases[i].output);
        CHECK_MSG(sample != NULL, "case %zu: no sample", i);
        if (!sample) continue;
        CHECK_STR(json_string_value(json_object_get(sample, "output_text")), cases[i].want);
        json_decref(sample);
    }
    struct grader *g = parse_ok("{\"type\":\"string_check\",\"name\":\"s\",\"input\":\"{{sample.output_text}}\","
                                "\"reference\":\"Paris\",\"operation\":\"like\"}");
    CHECK(g != NULL);
    if (g) {
        struct grader_result res;
        run_text(g, "It is Paris\xff", "{}", &res);
        CHECK(res.reward == 1 && res.n_errors == 0);
        grader_result_free(&res);
        grader_free(g);
    }
}

TEST(text_similarity_reward_and_pass_threshold) {
    struct grader *g = parse_ok("{\"type\":\"text_similarity\",\"name\":\"t\",\"input\":\"{{sample.output_text}}\","
                                "\"reference\":\"{{item.ref}}\",\"evaluation_metric\":\"bleu\",\"pass_threshold\":0.25}");
    CHECK(g != NULL);
    if (!g) return;
    CHECK_STR(grader_metric_name(g), "bleu");
    struct grader_result res;
    run_text(g, "the cat sat on the mat", "{\"ref\":\"the cat is on the mat\"}", &res);
    CHECK_NEAR(res.reward, reference[0].v[1], 1e-9);
    CHECK(res.passed == 1); /* 0.254 >= 0.25 */
    grader_result_free(&res);
    run_text(g, "the the the the the the the", "{\"ref\":\"the cat is on the mat\"}", &res);
    CHECK_NEAR(res.reward, reference[2].v[1], 1e-9);
    CHECK(res.passed == 0);
    grader_result_free(&res);
    grader_free(g);
    /* every metric name parses and runs */
    const char *metrics[] = {"fuzzy_match", "bleu", "gleu", "meteor", "rouge_1", "rouge_2", "rouge_3", "rouge_4",
                             "rouge_5", "rouge_l"};
    for (size_t m = 0; m < WHET_ARRAY_LEN(metrics); m++) {
        char text[300];
        snprintf(text, sizeof text,
                 "{\"type\":\"text_similarity\",\"name\":\"t\",\"input\":\"{{sample.output_text}}\","
                 "\"reference\":\"{{item.ref}}\",\"evaluation_metric\":\"%s\",\"pass_threshold\":0.5}", metrics[m]);
        g = parse_ok(text);
        CHECK(g != NULL);
        if (!g) continue;
        run_text(g, reference[1].hyp, "{\"ref\":\"It is a guide to action that ensures that the military will "
                                      "forever heed Party commands\"}", &res);
        CHECK_NEAR(res.reward, reference[1].v[m], 1e-9);
        grader_result_free(&res);
        grader_free(g);
    }
}

/* ---------------------------------------------------------------- templates */

struct collected {
    int n;
    enum grader_error_kind kind;
    char message[256];
};

static void collect(void *ctx, enum grader_error_kind kind, const char *message) {
    struct collected *c = ctx;
    c->n++;
    c->kind = kind;
    snprintf(c->message, sizeof c->message, "%s", message);
}

TEST(templates_render_item_and_sample_paths) {
    json_t *item = json_loads("{\"a\":{\"b\":\"deep\"},\"list\":[\"x\",\"y\"],\"n\":3,\"obj\":{\"k\":[1,true]},\"r\":0.1}",
                              0, NULL);
    json_t *sample = grader_sample_from_text("{\"answer\": 42, \"why\": \"because\"}");
    struct collected c = {0};
    char *out = grader_template_render("[{{item.a.b}}|{{ item.list.1 }}|{{item.n}}|{{item.obj}}|{{item.r}}|"
                                       "{{sample.output_json.answer}}|{{sample.output_json.why}}]",
                                       sample, item, collect, &c);
    CHECK_STR(out, "[deep|y|3|{\"k\":[1,true]}|0.1|42|because]"); /* a real in its shortest form */
    CHECK(c.n == 0);
    free(out);
    /* no closing braces: literal text */
    out = grader_template_render("{{item.a.b} and {{", sample, item, collect, &c);
    CHECK_STR(out, "{{item.a.b} and {{");
    free(out);
    /* a missing path is an invalid_variable error and renders empty */
    out = grader_template_render("<{{item.a.c}}>", sample, item, collect, &c);
    CHECK_STR(out, "<>");
    CHECK(c.n == 1 && c.kind == GRADER_ERR_INVALID_VARIABLE);
    CHECK_CONTAINS(c.message, "{{item.a.c}}: no such field");
    out = (free(out), grader_template_render("{{answer}}", sample, item, collect, &c));
    CHECK(c.n == 2 && c.kind == GRADER_ERR_INVALID_VARIABLE);
    free(out);
    json_decref(sample);
    /* output_json filled lazily from output_text; a non-JSON text is a sample_parse error */
    sample = json_pack("{s:s}", "output_text", "{\"x\": [5]}");
    out = grader_template_render("{{sample.output_json.x.0}}", sample, item, collect, &c);
    CHECK_STR(out, "5");
    free(out);
    json_decref(sample);
    sample = grader_sample_from_text("not json");
    CHECK(json_object_get(sample, "output_json") == NULL);
    out = grader_template_render("{{sample.output_json.x}}", sample, item, collect, &c);
    CHECK(c.n == 3 && c.kind == GRADER_ERR_SAMPLE_PARSE);
    free(out);
    json_decref(sample);
    json_decref(item);
}

TEST(a_template_error_scores_zero_with_the_error) {
    struct grader *g = parse_ok("{\"type\":\"string_check\",\"name\":\"s\",\"input\":\"{{sample.output_text}}\","
                                "\"reference\":\"{{item.missing}}\",\"operation\":\"ne\"}");
    CHECK(g != NULL);
    if (!g) return;
    struct grader_result res;
    run_text(g, "anything", "{}", &res); /* "ne" against "" would be 1 without the error */
    CHECK(res.reward == 0);
    CHECK(has_error(&res, GRADER_ERR_INVALID_VARIABLE, "{{item.missing}}"));
    grader_result_free(&res);
    grader_free(g);
}

/* ---------------------------------------------------------------- calculate_output */

static double eval(const char *formula, const double *values, int *ok, char *why) {
    static const char *const names[] = {"a", "b", "c_2"};
    struct grader_expr *e;
    struct whet_err err = {0};
    double out = -999;
    *ok = 0;
    if (grader_expr_parse(formula, names, 3, &e, &err) == 0) {
        *ok = grader_expr_eval(e, values, &out, &err) == 0;
        grader_expr_free(e);
    }
    if (why) snprintf(why, WHET_ERR_MAX, "%s", err.msg);
    return out;
}

TEST(formula_precedence_functions_and_errors) {
    const double v[] = {1.0, 0.5, 4.0};
    static const struct {
        const char *formula;
        double want;
    } cases[] = {
        {"a + b * 2", 2.0},         {"(a + b) * 2", 3.0},     {"a - b - 0.25", 0.25}, {"a / b / 4", 0.5},
        {"-a - -b", -0.5},          {"+a * -c_2", -4.0},       {"2 * 3 + 4 * 5", 26},  {"1e1 / .5", 20},
        {"min(a, b, c_2)", 0.5},    {"max(a, b, c_2)", 4},     {"abs(b - a)", 0.5},    {"sqrt(c_2)", 2},
        {"log(exp(2))", 2},         {"floor(2.7) + ceil(0.2)", 3}, {" 0.5*a+0.5*b ", 0.75}, {"min(a)", 1},
    };
    for (size_t i = 0; i < WHET_ARRAY_LEN(cases); i++) {
        int ok;
        char why[WHET_ERR_MAX];
        double got = eval(cases[i].formula, v, &ok, why);
        CHECK_MSG(ok && fabs(got - cases[i].want) < 1e-12, "%s = %g (%s)", cases[i].formula, got, why);
    }
    static const struct {
        const char *formula, *error;
    } bad[] = {
        {"a / (b - 0.5)", "division by zero"},
        {"log(b - b)", "log of a non-positive number"},
        {"sqrt(-a)", "square root of a negative number"},
        {"exp(1000)", "not finite"},
        {"a + d", "at character 5: unknown name \"d\""},
        {"a +", "unexpected end"},
        {"(a + b", "expected ')'"},
        {"a b", "unexpected text after the formula"},
        {"pow(a, 2)", "unknown function"},
        {"sqrt(a, b)", "exactly one argument"},
        {"a ** 2", "expected a number"},
        {"min()", "expected a number"},
        {"1e", "exponent"},
        {"__import__('os')", "unknown"},
    };
    for (size_t i = 0; i < WHET_ARRAY_LEN(bad); i++) {
        int ok;
        char why[WHET_ERR_MAX];
        eval(bad[i].formula, v, &ok, why);
        CHECK_MSG(!ok, "%s should fail", bad[i].formula);
        CHECK_CONTAINS(why, bad[i].error);
    }
    /* nesting is bounded: 200 parentheses or minus signs fail cleanly instead of recursing on */
    char deep[512];
    memset(deep, '(', 200);
    strcpy(deep + 200, "a");
    int ok;
    char why[WHET_ERR_MAX];
    eval(deep, v, &ok, why);
    CHECK(!ok);
    CHECK_CONTAINS(why, "nested too deeply");
    memset(deep, '-', 300);
    strcpy(deep + 300, "a");
    eval(deep, v, &ok, why);
    CHECK(!ok);
    CHECK_CONTAINS(why, "nested too deeply");
}

TEST(multi_grader_combines_sub_rewards) {
    struct grader *g = parse_ok(
        "{\"type\":\"multi\",\"name\":\"m\",\"calculate_output\":\"0.75 * exact + 0.25 * sim\",\"graders\":{"
        "\"exact\":{\"type\":\"string_check\",\"name\":\"e\",\"input\":\"{{sample.output_json.answer}}\","
        "\"reference\":\"{{item.answer}}\",\"operation\":\"eq\"},"
        "\"sim\":{\"type\":\"text_similarity\",\"name\":\"t\",\"input\":\"{{sample.output_json.why}}\","
        "\"reference\":\"{{item.why}}\",\"evaluation_metric\":\"rouge_1\",\"pass_threshold\":0.5}}}");
    CHECK(g != NULL);
    if (!g) return;
    CHECK(grader_type_of(g) == GRADER_MULTI);
    struct grader_result res;
    run_text(g, "{\"answer\":\"4\",\"why\":\"two plus two\"}", "{\"answer\":\"4\",\"why\":\"two and two\"}", &res);
    /* rouge_1: {two, plus, two} vs {two, and, two}: overlap 2 of 3 each way */
    CHECK(res.n_sub == 2);
    if (res.n_sub == 2) {
        CHECK_STR(res.sub_names[0], "exact");
        CHECK_STR(res.sub_names[1], "sim");
        CHECK_NEAR(res.sub_rewards[0], 1.0, 0);
        CHECK_NEAR(res.sub_rewards[1], 2.0 / 3.0, 1e-12);
    }
    CHECK_NEAR(res.reward, 0.75 + 0.25 * 2.0 / 3.0, 1e-12);
    CHECK(res.n_errors == 0);
    grader_result_free(&res);
    /* a sub-grader's error carries its key; the formula still runs on its 0 */
    run_text(g, "not json", "{\"answer\":\"4\",\"why\":\"x\"}", &res);
    CHECK(res.reward == 0);
    CHECK(has_error(&res, GRADER_ERR_SAMPLE_PARSE, "exact: {{sample.output_json.answer}}"));
    CHECK(has_error(&res, GRADER_ERR_SAMPLE_PARSE, "sim: {{sample.output_json.why}}"));
    grader_result_free(&res);
    grader_free(g);
    /* division by zero at run time: reward 0 and a formula error */
    g = parse_ok("{\"type\":\"multi\",\"name\":\"m\",\"calculate_output\":\"1 / x\",\"graders\":{"
                 "\"x\":{\"type\":\"string_check\",\"name\":\"e\",\"input\":\"{{sample.output_text}}\","
                 "\"reference\":\"yes\",\"operation\":\"eq\"}}}");
    CHECK(g != NULL);
    if (!g) return;
    run_text(g, "yes", "{}", &res);
    CHECK_NEAR(res.reward, 1.0, 0);
    grader_result_free(&res);
    run_text(g, "no", "{}", &res);
    CHECK(res.reward == 0);
    CHECK(has_error(&res, GRADER_ERR_FORMULA, "calculate_output: division by zero"));
    grader_result_free(&res);
    grader_free(g);
}

TEST(results_in_openai_graders_run_shape) {
    struct grader *g = parse_ok("{\"type\":\"multi\",\"name\":\"combo\",\"calculate_output\":\"ok / 0 + ok\",\"graders\":{"
                                "\"ok\":{\"type\":\"string_check\",\"name\":\"e\",\"input\":\"{{sample.output_text}}\","
                                "\"reference\":\"{{item.x}}\",\"operation\":\"eq\"}}}");
    CHECK(g != NULL);
    if (!g) return;
    struct grader_result res;
    run_text(g, "yes", "{\"x\":\"yes\"}", &res);
    json_t *j = grader_result_openai_json(g, &res);
    json_t *meta = json_object_get(j, "metadata"), *errors = json_object_get(meta, "errors");
    CHECK(json_real_value(json_object_get(j, "reward")) == 0);
    CHECK_STR(json_string_value(json_object_get(meta, "name")), "combo");
    CHECK_STR(json_string_value(json_object_get(meta, "type")), "multi");
    CHECK(json_is_number(json_object_get(meta, "execution_time")));
    CHECK(json_is_null(json_object_get(meta, "token_usage")) && json_is_null(json_object_get(meta, "sampled_model_name")));
    CHECK(json_is_true(json_object_get(errors, "formula_parse_error")));
    CHECK(json_is_false(json_object_get(errors, "python_grader_runtime_error")));
    CHECK(json_is_null(json_object_get(errors, "python_grader_runtime_error_details")));
    CHECK(json_object_size(errors) == 15); /* OpenAI's 14 fields and "messages" */
    CHECK_CONTAINS(json_string_value(json_array_get(json_object_get(errors, "messages"), 0)), "division by zero");
    CHECK(json_real_value(json_object_get(json_object_get(j, "sub_rewards"), "ok")) == 1.0);
    CHECK(json_is_object(json_object_get(j, "model_grader_token_usage_per_model")));
    json_decref(j);
    grader_result_free(&res);
    grader_free(g);
    /* a python runtime error fills its details */
    g = parse_ok("{\"type\":\"python\",\"name\":\"p\",\"source\":\"def grade(s, i):\\n    return 1 / 0\\n\"}");
    CHECK(g != NULL);
    if (!g) return;
    run_text(g, "x", "{}", &res);
    j = grader_result_openai_json(g, &res);
    errors = json_object_get(json_object_get(j, "metadata"), "errors");
    CHECK(json_is_true(json_object_get(errors, "python_grader_runtime_error")));
    CHECK_CONTAINS(json_string_value(json_object_get(errors, "python_grader_runtime_error_details")), "ZeroDivisionError");
    json_decref(j);
    grader_result_free(&res);
    grader_free(g);
}

/* ---------------------------------------------------------------- validation */

TEST(validation_errors_name_the_field_path) {
    static const struct {
        const char *json, *error;
    } cases[] = {
        {"[]", "grader: expected an object, found an array"},
        {"{\"name\":\"x\"}", "grader.type: missing"},
        {"{\"type\":\"regex\",\"name\":\"x\"}", "grader.type: expected one of string_check, text_similarity, multi, python"},
        {"{\"type\":\"string_check\",\"input\":\"a\",\"reference\":\"b\",\"operation\":\"eq\"}", "grader.name: missing"},
        {"{\"type\":\"string_check\",\"name\":\"x\",\"reference\":\"b\",\"operation\":\"eq\"}", "grader.input: missing"},
        {"{\"type\":\"string_check\",\"name\":\"x\",\"input\":3,\"reference\":\"b\",\"operation\":\"eq\"}",
         "grader.input: expected a string, found an integer"},
        {"{\"type\":\"string_check\",\"name\":\"x\",\"input\":\"a\",\"reference\":\"b\",\"operation\":\"equals\"}",
         "grader.operation: expected one of eq, ne, like, ilike, found \"equals\""},
        {"{\"type\":\"string_check\",\"name\":\"x\",\"input\":\"a\",\"reference\":\"b\",\"operation\":\"eq\",\"extra\":1}",
         "grader.extra: unknown field"},
        {"{\"type\":\"text_similarity\",\"name\":\"x\",\"input\":\"a\",\"reference\":\"b\",\"evaluation_metric\":\"cosine\","
         "\"pass_threshold\":0.5}", "grader.evaluation_metric: \"cosine\" is not supported in this build"},
        {"{\"type\":\"text_similarity\",\"name\":\"x\",\"input\":\"a\",\"reference\":\"b\",\"evaluation_metric\":\"rouge_6\"}",
         "grader.evaluation_metric: expected one of fuzzy_match, bleu"},
        {"{\"type\":\"text_similarity\",\"name\":\"x\",\"input\":\"a\",\"reference\":\"b\",\"evaluation_metric\":\"bleu\","
         "\"pass_threshold\":\"high\"}", "grader.pass_threshold: expected a number, found a string"},
        {"{\"type\":\"python\",\"name\":\"x\"}", "grader.source: missing"},
        {"{\"type\":\"python\",\"name\":\"x\",\"source\":\"x = 1\",\"image_tag\":7}", "grader.image_tag: expected a string"},
        {"{\"type\":\"python\",\"name\":\"x\",\"source\":\"\"}", "grader.source: must not be empty"},
        {"{\"type\":\"string_check\",\"name\":\"\",\"input\":\"a\",\"reference\":\"b\",\"operation\":\"eq\"}",
         "grader.name: must not be empty"},
        {"{\"type\":\"multi\",\"name\":\"m\",\"calculate_output\":\"a\",\"graders\":{\"accuracy\":{\"type\":\"string_check\","
         "\"name\":\"x\",\"input\":\"a\",\"reference\":\"b\",\"operation\":\"equals\"}}}",
         "grader.graders.accuracy.operation: expected one of eq, ne, like, ilike, found \"equals\""},
        {"{\"type\":\"multi\",\"name\":\"m\",\"calculate_output\":\"a\",\"graders\":{\"inner\":{\"type\":\"multi\",\"name\":\"n\","
         "\"calculate_output\":\"1\",\"graders\":{}}}}", "grader.graders.inner.type: a multi grader cannot contain another"},
        {"{\"type\":\"multi\",\"name\":\"m\",\"calculate_output\":\"a + b\",\"graders\":{\"a\":{\"type\":\"string_check\","
         "\"name\":\"x\",\"input\":\"a\",\"reference\":\"b\",\"operation\":\"eq\"}}}",
         "grader.calculate_output: at character 5: unknown name \"b\""},
        {"{\"type\":\"multi\",\"name\":\"m\",\"graders\":{}}", "grader.graders: expected an object of named graders"},
        {"{\"type\":\"score_model\",\"name\":\"j\",\"input\":[{\"role\":\"user\",\"content\":\"rate\"}]}", "grader.model: missing"},
        {"{\"type\":\"score_model\",\"name\":\"j\",\"model\":\"m\",\"input\":[{\"role\":\"robot\",\"content\":\"x\"}]}",
         "grader.input[0].role: expected one of system, developer, user, assistant"},
        {"{\"type\":\"score_model\",\"name\":\"j\",\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"range\":[1,0]}", "grader.range: min must be below max"},
        {"{\"type\":\"score_model\",\"name\":\"j\",\"model\":\"m\",\"input\":[]}", "grader.input: expected at least one message"},
        {"{\"type\":\"label_model\",\"name\":\"j\",\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"labels\":[\"good\",\"\"],\"passing_labels\":[\"good\"]}", "grader.labels[1]: must not be empty"},
        {"{\"type\":\"label_model\",\"name\":\"j\",\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"labels\":[\"good\",\"bad\"],\"passing_labels\":[\"great\"]}",
         "grader.passing_labels[0]: \"great\" is not one of the labels"},
    };
    for (size_t i = 0; i < WHET_ARRAY_LEN(cases); i++) CHECK_CONTAINS(parse_error(cases[i].json), cases[i].error);
    /* the caller's path prefix is used */
    json_t *j = json_loads("{\"type\":\"python\",\"name\":\"x\"}", 0, NULL);
    struct grader *g;
    struct whet_err err;
    CHECK(grader_parse(j, "method.reinforcement.grader", &g, &err) < 0);
    CHECK_CONTAINS(err.msg, "method.reinforcement.grader.source: missing");
    json_decref(j);
}

TEST(validate_names_the_field_in_param) {
    /* A sub-grader's key may hold ": " and multibyte characters: param is the exact path, not a guess
     * from the message, and a short param buffer is cut between characters. */
    json_t *j = json_loads("{\"type\":\"multi\",\"name\":\"m\",\"calculate_output\":\"1\",\"graders\":{\"a: \u00e9\u00e9\":"
                           "{\"type\":\"string_check\",\"name\":\"x\",\"input\":\"a\",\"reference\":\"b\",\"operation\":\"is\"}}}",
                           0, NULL);
    char param[128];
    struct whet_err err;
    struct grader *g = NULL;
    CHECK(grader_validate(j, "method.reinforcement.grader", &g, param, sizeof param, &err) < 0 && g == NULL);
    CHECK_STR(param, "method.reinforcement.grader.graders.a: \u00e9\u00e9.operation");
    /* "method.reinforcement.grader.graders.a: " is 39 bytes; 41 bytes leave room for 40 and an é is 2 */
    char short_param[41];
    CHECK(grader_validate(j, "method.reinforcement.grader", NULL, short_param, sizeof short_param, &err) < 0);
    CHECK_STR(short_param, "method.reinforcement.grader.graders.a: ");
    json_decref(j);
    /* a formula error is the calculate_output field's */
    j = json_loads("{\"type\":\"multi\",\"name\":\"m\",\"calculate_output\":\"a +\",\"graders\":{\"a\":{\"type\":"
                   "\"string_check\",\"name\":\"x\",\"input\":\"a\",\"reference\":\"b\",\"operation\":\"eq\"}}}",
                   0, NULL);
    CHECK(grader_validate(j, NULL, NULL, param, sizeof param, &err) < 0);
    CHECK_STR(param, "grader.calculate_output");
    json_decref(j);
    /* valid: out gets the grader */
    j = json_loads("{\"type\":\"python\",\"name\":\"p\",\"source\":\"x = 1\"}", 0, NULL);
    CHECK(grader_validate(j, NULL, &g, param, sizeof param, &err) == 0 && g && grader_needs_runner(g));
    grader_free(g);
    json_decref(j);
}

/* ---------------------------------------------------------------- model graders */

static int stub_judge(void *ctx, const struct grader *g, const json_t *sample, const json_t *item, double *reward,
                      struct whet_err *err) {
    (*(int *)ctx)++;
    const char *text = json_string_value(json_object_get(sample, "output_text"));
    if (!text) return whet_errf(err, "judge: no text");
    *reward = strlen(text) > 3 ? 0.9 : 0.1;
    return grader_json(g) && json_object_get(grader_json(g), "model") ? 0 : -1;
}

TEST(model_graders_answer_not_supported_unless_a_judge_is_plugged_in) {
    struct grader *g = parse_ok("{\"type\":\"score_model\",\"name\":\"judge\",\"model\":\"whet-tiny\",\"range\":[0,1],"
                                "\"input\":[{\"role\":\"user\",\"content\":\"Rate {{sample.output_text}}\"}]}");
    CHECK(g != NULL);
    if (!g) return;
    struct grader_result res;
    run_text(g, "hello", "{}", &res);
    CHECK(res.reward == 0);
    CHECK(has_error(&res, GRADER_ERR_MODEL_SERVER, "score_model graders are not supported here"));
    grader_result_free(&res);
    int calls = 0;
    struct grader_run_opts opts = {.judge = stub_judge, .judge_ctx = &calls};
    json_t *sample = grader_sample_from_text("hello");
    struct whet_err err;
    CHECK(grader_run(g, &opts, sample, NULL, &res, &err) == 0);
    CHECK(calls == 1);
    CHECK_NEAR(res.reward, 0.9, 0);
    CHECK(res.n_errors == 0);
    grader_result_free(&res);
    json_decref(sample);
    grader_free(g);
}

/* ---------------------------------------------------------------- python graders */

TEST(the_pure_library_grades_python_only_through_a_hook) {
    struct grader *g = parse_ok("{\"type\":\"multi\",\"name\":\"m\",\"calculate_output\":\"py + exact\",\"graders\":{"
                                "\"py\":{\"type\":\"python\",\"name\":\"p\",\"source\":\"def grade(s, i):\\n    return 1\\n\"},"
                                "\"exact\":{\"type\":\"string_check\",\"name\":\"e\",\"input\":\"{{sample.output_text}}\","
                                "\"reference\":\"ab\",\"operation\":\"eq\"}}}");
    CHECK(g != NULL && grader_needs_runner(g));
    if (!g) return;
    json_t *sample = grader_sample_from_text("ab");
    struct grader_result res;
    struct whet_err err;
    CHECK(grader_eval_batch(g, NULL, &sample, NULL, 1, &res, &err) == 0);
    CHECK_NEAR(res.reward, 1.0, 0); /* exact's 1, py's 0 */
    CHECK(has_error(&res, GRADER_ERR_PYTHON_SERVER, "py: python graders are not supported here"));
    grader_result_free(&res);
    json_decref(sample);
    grader_free(g);
}

static const char python_source[] =
    "import socket\n"
    "def grade(sample, item):\n"
    "    mode = item['mode']\n"
    "    if mode == 'good':\n"
    "        return 1.0 if sample['output_text'].strip() == item['answer'] else 0.5\n"
    "    if mode == 'raise':\n"
    "        raise ValueError('no answer here')\n"
    "    if mode == 'string':\n"
    "        return 'high'\n"
    "    if mode == 'socket':\n"
    "        socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
    "        return 1.0\n";

TEST(python_graders_good_raising_non_number_and_socket) {
    char text[1024];
    json_t *src = json_string(python_source);
    char *quoted = json_dumps(src, JSON_ENCODE_ANY);
    snprintf(text, sizeof text, "{\"type\":\"python\",\"name\":\"py\",\"image_tag\":\"2025-05-08\",\"source\":%s}", quoted);
    free(quoted);
    json_decref(src);
    struct grader *g = parse_ok(text);
    CHECK(g != NULL);
    if (!g) return;
    const char *modes[] = {"good", "good", "raise", "string", "socket", "good"};
    const char *outputs[] = {"42", "41", "42", "42", "42", " 42 "};
    enum { N = 6 };
    json_t *samples[N], *items[N];
    for (int i = 0; i < N; i++) {
        samples[i] = grader_sample_from_text(outputs[i]);
        items[i] = json_pack("{s:s, s:s}", "mode", modes[i], "answer", "42");
    }
    struct grader_run_opts opts = {.python_parallel = 2, .python_timeout_s = 5};
    struct grader_result res[N];
    struct whet_err err;
    double t0 = whet_now_mono();
    CHECK(grader_run_batch(g, &opts, samples, items, N, res, &err) == 0);
    fprintf(stderr, "  6 python samples in %.2f s\n", whet_now_mono() - t0);
    CHECK_NEAR(res[0].reward, 1.0, 0);
    CHECK(res[0].n_errors == 0);
    CHECK_NEAR(res[1].reward, 0.5, 0);
    CHECK_NEAR(res[5].reward, 1.0, 0);
    CHECK(res[2].reward == 0);
    CHECK(has_error(&res[2], GRADER_ERR_PYTHON_RUNTIME, "ValueError: no answer here"));
    CHECK(res[3].reward == 0);
    CHECK(has_error(&res[3], GRADER_ERR_PYTHON_RUNTIME, "returned str, expected a number"));
    CHECK(res[4].reward == 0);
    CHECK(has_error(&res[4], GRADER_ERR_PYTHON_RUNTIME, "PermissionError")); /* no network: seccomp refuses socket() */
    for (int i = 0; i < N; i++) {
        grader_result_free(&res[i]);
        json_decref(samples[i]);
        json_decref(items[i]);
    }
    grader_free(g);
}

TEST(python_inside_multi_runs_once_per_batch) {
    const char *text =
        "{\"type\":\"multi\",\"name\":\"m\",\"calculate_output\":\"(py + exact) / 2\",\"graders\":{"
        "\"py\":{\"type\":\"python\",\"name\":\"p\",\"source\":\"def grade(s, i):\\n    return len(s['output_text']) / 10\\n\"},"
        "\"exact\":{\"type\":\"string_check\",\"name\":\"e\",\"input\":\"{{sample.output_text}}\",\"reference\":\"{{item.a}}\","
        "\"operation\":\"eq\"}}}";
    struct grader *g = parse_ok(text);
    CHECK(g != NULL);
    if (!g) return;
    json_t *samples[3] = {grader_sample_from_text("abcd"), grader_sample_from_text("ab"), grader_sample_from_text("")};
    json_t *items[3] = {json_pack("{s:s}", "a", "abcd"), json_pack("{s:s}", "a", "x"), NULL};
    struct grader_result res[3];
    struct whet_err err;
    CHECK(grader_run_batch(g, NULL, samples, items, 3, res, &err) == 0);
    CHECK_NEAR(res[0].reward, (0.4 + 1) / 2, 1e-12);
    CHECK_NEAR(res[1].reward, 0.2 / 2, 1e-12);
    CHECK_NEAR(res[2].reward, 0, 0);
    CHECK(has_error(&res[2], GRADER_ERR_INVALID_VARIABLE, "exact: {{item.a}}")); /* a NULL item is {} */
    CHECK(res[0].n_sub == 2 && res[0].sub_rewards && res[0].sub_rewards[0] == 0.4);
    for (int i = 0; i < 3; i++) {
        grader_result_free(&res[i]);
        json_decref(samples[i]);
        json_decref(items[i]);
    }
    grader_free(g);
}

int main(void) {
    RUN(metrics_match_nltk_levenshtein_and_rouge_score);
    RUN(metrics_on_long_texts_match_the_references);
    RUN(metrics_on_hand_worked_examples);
    RUN(fuzzy_match_lcs_agrees_with_the_table_across_words);
    RUN(fuzzy_match_on_many_distinct_characters_takes_the_table_path);
    RUN(string_check_operations);
    RUN(samples_that_are_not_utf8_are_graded_with_replacement_characters);
    RUN(text_similarity_reward_and_pass_threshold);
    RUN(templates_render_item_and_sample_paths);
    RUN(a_template_error_scores_zero_with_the_error);
    RUN(formula_precedence_functions_and_errors);
    RUN(multi_grader_combines_sub_rewards);
    RUN(results_in_openai_graders_run_shape);
    RUN(validation_errors_name_the_field_path);
    RUN(validate_names_the_field_in_param);
    RUN(model_graders_answer_not_supported_unless_a_judge_is_plugged_in);
    RUN(the_pure_library_grades_python_only_through_a_hook);
    RUN(python_graders_good_raising_non_number_and_socket);
    RUN(python_inside_multi_runs_once_per_batch);
    return test_summary();
}
