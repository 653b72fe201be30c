/* test_judge.c - score_model and label_model graders over a judge model (executor/train/methods/judge.h).
 *
 * The parsers are checked on written replies. The tiny model's replies are random text, so the real
 * judge is checked for what does not depend on them: its greedy reply is exactly `whet sample`'s for
 * the same prompt (the sampler's code path), it is the same on every call, a seeded sampled reply
 * too, the reward is what the parser reads from the reply (inside the range), and the failures land
 * in the right metadata.errors flags. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grader_runner.h"
#include "judge.h"
#include "model_init.h"
#include "sampler.h"
#include "test.h"

static char model_dir[] = "/tmp/whet-judge-test.XXXXXX";

static struct grader *parse(const char *text) {
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    struct grader *g = NULL;
    struct whet_err err = {0};
    if (!j || grader_parse(j, "grader", &g, &err)) fprintf(stderr, "grader: %s %s\n", jerr.text, err.msg);
    json_decref(j);
    return g;
}

TEST(parse_score) {
    double s = -1;
    CHECK(judge_parse_score("7", 0, 10, &s) == 0 && s == 7);
    CHECK(judge_parse_score("Score: 7/10", 0, 10, &s) == 0 && s == 7);
    CHECK(judge_parse_score("I give it .5", 0, 1, &s) == 0 && s == 0.5);
    CHECK(judge_parse_score("-3", 0, 10, &s) == 0 && s == 0);   /* clamped below */
    CHECK(judge_parse_score("-3", -5, 10, &s) == 0 && s == -3); /* a sign is read */
    CHECK(judge_parse_score("12.5 points", 0, 10, &s) == 0 && s == 10);
    CHECK(judge_parse_score("1e3", 0, 10, &s) == 0 && s == 10);
    CHECK(judge_parse_score("<think>maybe 3, maybe 4</think>\nFinal: 8", 0, 10, &s) == 0 && s == 8);
    CHECK(judge_parse_score("well-written, 6", 0, 10, &s) == 0 && s == 6); /* a dash before a letter is no sign */
    s = 42;
    CHECK(judge_parse_score("no number here", 0, 10, &s) == -1 && s == 42);
    CHECK(judge_parse_score("", 0, 10, &s) == -1);
    CHECK(judge_parse_score("nan inf", 0, 10, &s) == -1);
    CHECK(judge_parse_score("<think>7</think> none", 0, 10, &s) == -1); /* only the answer counts */
}

TEST(parse_label) {
    json_t *labels = json_pack("[s, s, s]", "correct", "incorrect", "partially correct");
    CHECK(judge_parse_label("correct", labels) == 0);
    CHECK(judge_parse_label("  \"Incorrect.\" ", labels) == 1);
    CHECK(judge_parse_label("**partially correct**", labels) == 2);
    CHECK(judge_parse_label("This answer is incorrect because…", labels) == 1); /* not "correct" inside it */
    CHECK(judge_parse_label("It is partially correct, not correct", labels) == 2); /* earliest, longest */
    CHECK(judge_parse_label("Correct; the other was incorrect", labels) == 0);
    CHECK(judge_parse_label("<think>incorrect?</think>correct", labels) == 0);
    CHECK(judge_parse_label("uncorrectable", labels) == -1);
    CHECK(judge_parse_label("", labels) == -1);
    json_decref(labels);
}

/* A hook answering as judge_grade does, without a model: 1 for a parse failure, -1 for a failure. */
static int fake_judge(void *ctx, const struct grader *g, const json_t *sample, const json_t *item, double *reward,
                      struct whet_err *err) {
    (void)ctx, (void)g, (void)item;
    const char *text = json_string_value(json_object_get(sample, "output_text"));
    if (!strcmp(text, "unparsable")) return *reward = 0, whet_errf(err, "no number"), 1;
    if (!strcmp(text, "down")) return whet_errf(err, "the judge is down");
    *reward = atof(text);
    return 0;
}

TEST(hook_results) {
    struct grader *g = parse("{\"type\": \"score_model\", \"name\": \"s\", \"model\": \"m\", \"range\": [0, 10],"
                             " \"pass_threshold\": 5, \"input\": [{\"role\": \"user\", \"content\": \"x\"}]}");
    CHECK(g != NULL);
    if (!g) return;
    const char *texts[] = {"7", "3", "unparsable", "down"};
    json_t *samples[4], *items[4];
    struct grader_result res[4] = {0};
    for (int i = 0; i < 4; i++) samples[i] = grader_sample_from_text(texts[i]), items[i] = json_object();
    struct grader_run_opts opts = {.judge = fake_judge};
    struct whet_err err = {0};
    CHECK(grader_run_batch(g, &opts, samples, items, 4, res, &err) == 0);
    CHECK(res[0].reward == 7 && res[0].passed && res[0].n_errors == 0);
    CHECK(res[1].reward == 3 && !res[1].passed); /* below pass_threshold */
    const char *flags[] = {NULL, NULL, "model_grader_parse_error", "model_grader_server_error"};
    for (int i = 2; i < 4; i++) {
        CHECK(res[i].reward == 0 && res[i].n_errors == 1);
        json_t *o = grader_result_openai_json(g, &res[i]);
        json_t *errors = json_object_get(json_object_get(o, "metadata"), "errors");
        CHECK(json_is_true(json_object_get(errors, flags[i])));
        CHECK(json_is_false(json_object_get(errors, flags[5 - i])));
        json_decref(o);
    }
    for (int i = 0; i < 4; i++) grader_result_free(&res[i]), json_decref(samples[i]), json_decref(items[i]);
    grader_free(g);
}

static const char *SCORE_GRADER =
    "{\"type\": \"score_model\", \"name\": \"judge\", \"model\": \"tiny-judge\", \"range\": [0, 10],"
    " \"sampling_params\": {\"max_completions_tokens\": 12},"
    " \"input\": [{\"role\": \"developer\", \"content\": \"You grade answers.\"},"
    "             {\"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": \"Expected {{item.answer}}; "
    "got {{sample.output_text}}.\"}]}]}";

TEST(real_judge_is_the_sampler) {
    struct grader *g = parse(SCORE_GRADER);
    CHECK(g != NULL);
    if (!g) return;
    json_t *dirs = json_pack("{s:s}", "tiny-judge", model_dir);
    struct judge_pool *pool = NULL;
    struct whet_err err = {0};
    CHECK_MSG(judge_pool_new(&pool, g, dirs, NULL, 1, &err) == 0 && pool, "%s", err.msg);
    json_t *sample = grader_sample_from_text("blue"), *item = json_pack("{s:s}", "answer", "red");
    char *a = NULL, *b = NULL, *ref = NULL;
    CHECK_MSG(judge_reply(pool, g, sample, item, &a, &err) == 0, "%s", err.msg);
    CHECK_MSG(judge_reply(pool, g, sample, item, &b, &err) == 0, "%s", err.msg);
    CHECK_STR(a, b); /* greedy by default */
    /* with a single user message the judge's prompt is what `whet sample` renders for the same text
     * (the instruction appended): its reply must be sample_run's */
    struct grader *g2 = parse("{\"type\": \"score_model\", \"name\": \"judge\", \"model\": \"tiny-judge\", \"range\": [0, 10],"
                              " \"sampling_params\": {\"max_completions_tokens\": 12},"
                              " \"input\": [{\"role\": \"user\", \"content\": \"Expected {{item.answer}}; got {{sample.output_text}}.\"}]}");
    struct sample_opts so = {.model_dir = model_dir,
                             .prompt = "Expected red; got blue.\n\nReply with only a number from 0 to 10.",
                             .max_tokens = 12, .temperature = 0, .top_p = 1};
    int n_tokens = 0;
    char *c = NULL;
    CHECK_MSG(judge_reply(pool, g2, sample, item, &c, &err) == 0, "%s", err.msg);
    CHECK_MSG(sample_run(&so, &ref, &n_tokens, &err) == 0, "%s", err.msg);
    CHECK_STR(c, ref);
    CHECK(n_tokens >= 1 && n_tokens <= 12);

    /* the reward is what the parser reads from that reply */
    double reward = -1, parsed = -1;
    struct whet_err gerr = {0};
    int rc = judge_grade(pool, g, sample, item, &reward, &gerr);
    if (judge_parse_score(a, 0, 10, &parsed) == 0) {
        CHECK_MSG(rc == 0 && reward == parsed, "rc %d reward %g parsed %g", rc, reward, parsed);
    } else {
        CHECK(rc == 1 && reward == 0);
        CHECK_CONTAINS(gerr.msg, "holds no number");
    }
    CHECK(reward >= 0 && reward <= 10);
    free(a), free(b), free(c), free(ref);

    /* a seeded sampled reply is the same on every call */
    struct grader *g3 = parse("{\"type\": \"score_model\", \"name\": \"judge\", \"model\": \"tiny-judge\","
                              " \"sampling_params\": {\"temperature\": 1.0, \"seed\": 5, \"max_tokens\": 8},"
                              " \"input\": [{\"role\": \"user\", \"content\": \"{{sample.output_text}}\"}]}");
    CHECK_MSG(judge_reply(pool, g3, sample, item, &a, &err) == 0, "%s", err.msg);
    CHECK_MSG(judge_reply(pool, g3, sample, item, &b, &err) == 0, "%s", err.msg);
    CHECK_STR(a, b);
    free(a), free(b);

    /* a template path that is not there: the judge is not asked, -1 (model_grader_server_error) */
    json_t *empty = json_object();
    CHECK(judge_grade(pool, g, sample, empty, &reward, &gerr) == -1);
    CHECK_CONTAINS(gerr.msg, "item.answer");
    json_decref(empty);

    judge_pool_free(pool);
    grader_free(g), grader_free(g2), grader_free(g3);
    json_decref(sample), json_decref(item), json_decref(dirs);
}

TEST(real_label_judge_in_a_batch) {
    struct grader *g = parse("{\"type\": \"multi\", \"name\": \"m\", \"calculate_output\": \"lab + 0\", \"graders\": {\"lab\":"
                             " {\"type\": \"label_model\", \"name\": \"lab\", \"model\": \"tiny-judge\","
                             "  \"labels\": [\"good\", \"bad\"], \"passing_labels\": [\"good\"],"
                             "  \"input\": [{\"role\": \"user\", \"content\": \"Is {{sample.output_text}} {{item.answer}}?\"}]}}}");
    CHECK(g != NULL);
    if (!g) return;
    struct whet_err err = {0};
    struct judge_pool *pool = NULL;
    json_t *none = json_pack("{s:s}", "other", model_dir);
    CHECK(judge_pool_new(&pool, g, none, NULL, 1, &err) == -1 && pool == NULL);
    CHECK_CONTAINS(err.msg, "judge model \"tiny-judge\" is not in judge_models");
    json_t *dirs = json_pack("{s:s}", "tiny-judge", model_dir);
    CHECK_MSG(judge_pool_new(&pool, g, dirs, NULL, 1, &err) == 0 && pool, "%s", err.msg);
    enum { N = 4 };
    const char *texts[N] = {"red", "blue", "green", "red"};
    json_t *samples[N], *items[N];
    struct grader_result res[N] = {0};
    for (int i = 0; i < N; i++) samples[i] = grader_sample_from_text(texts[i]), items[i] = json_pack("{s:s}", "answer", "red");
    struct grader_run_opts opts = {.judge = judge_grade, .judge_ctx = pool};
    CHECK(grader_run_batch(g, &opts, samples, items, N, res, &err) == 0);
    for (int i = 0; i < N; i++) {
        CHECK(res[i].reward == 0 || res[i].reward == 1);
        for (size_t k = 0; k < res[i].n_errors; k++) CHECK(res[i].errors[k].kind == GRADER_ERR_MODEL_PARSE);
        /* the reward follows from the reply's label */
        char *reply = NULL;
        struct whet_err rerr = {0};
        json_t *labels = json_pack("[s, s]", "good", "bad");
        struct grader *sub = parse("{\"type\": \"label_model\", \"name\": \"lab\", \"model\": \"tiny-judge\","
                                   " \"labels\": [\"good\", \"bad\"], \"passing_labels\": [\"good\"],"
                                   " \"input\": [{\"role\": \"user\", \"content\": \"Is {{sample.output_text}} {{item.answer}}?\"}]}");
        CHECK(judge_reply(pool, sub, samples[i], items[i], &reply, &rerr) == 0);
        int k = reply ? judge_parse_label(reply, labels) : -2;
        CHECK_MSG(res[i].reward == (k == 0) && (res[i].n_errors == 1) == (k < 0), "reply \"%s\" label %d reward %g", reply,
                  k, res[i].reward);
        free(reply);
        json_decref(labels);
        grader_free(sub);
    }
    /* the same sample gives the same reward (greedy) */
    CHECK(res[0].reward == res[3].reward && res[0].n_errors == res[3].n_errors);
    for (int i = 0; i < N; i++) grader_result_free(&res[i]), json_decref(samples[i]), json_decref(items[i]);
    judge_pool_free(pool);
    grader_free(g);
    json_decref(dirs), json_decref(none);
}

int main(void) {
    struct model_init_opts o;
    struct whet_err err = {0};
    if (!mkdtemp(model_dir) || model_init_preset(&o, "tiny", &err) || model_init_write(model_dir, &o, &err)) {
        fprintf(stderr, "tiny model: %s\n", err.msg);
        return 1;
    }
    RUN(parse_score);
    RUN(parse_label);
    RUN(hook_results);
    RUN(real_judge_is_the_sampler);
    RUN(real_label_judge_in_a_batch);
    char *cmd = xasprintf("rm -rf '%s'", model_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", model_dir);
    free(cmd);
    return test_summary();
}
