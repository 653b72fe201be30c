/* cmd_grade.c - `whet grade [--judge NAME=DIR]... [REQUEST.json]`: one grader on one sample, judge
 * models included, printing OpenAI's graders/run answer.
 *
 * The gateway's POST /v1/fine_tuning/alpha/graders/run runs this as a child process for python,
 * score_model and label_model graders: the gateway links neither the sandbox nor a model runtime, and
 * a grader that crashes or runs long takes only this process down. Thin: the grader language is
 * grader/, running it executor/grader_runner (python in the sandbox), the judges executor/train/judge. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "grader_runner.h"
#include "json.h"
#include "json_text.h"
#include "judge.h"

#define GRADE_REQUEST_MAX (16u << 20)

static void usage(FILE *out) {
    fprintf(out,
            "usage: whet grade [--judge NAME=DIR]... [REQUEST.json]\n\n"
            "Reads a graders/run request {\"grader\": {...}, \"model_sample\": \"text\", \"item\": {...}} from\n"
            "REQUEST.json (standard input when absent or \"-\"), runs the grader on the sample and prints\n"
            "OpenAI's answer {\"reward\", \"metadata\", \"sub_rewards\", ...} as one JSON line. python graders\n"
            "run in the sandbox; score_model and label_model graders ask the judge model they name, loaded\n"
            "from its --judge dir.\n\n"
            "options:\n"
            "  --judge NAME=DIR  the Hugging Face model dir of the judge model NAME (repeatable)\n"
            "  --seed N          the judges' sampling seed (default 0)\n"
            "  -h, --help        this text\n");
}

/* Parses the request and grades it into *answer. */
static int grade(const char *path, const json_t *judges, unsigned long long seed, json_t **answer,
                 struct whet_err *err) {
    char *text = NULL;
    size_t len = 0;
    if (whet_read_file(path, GRADE_REQUEST_MAX, &text, &len, err)) return -1;
    json_error_t jerr;
    json_t *req = json_loadb(text, len, 0, &jerr);
    free(text);
    if (!req) return whet_json_errf(err, path, &jerr);
    const json_t *sample_text = json_object_get(req, "model_sample"), *item = json_object_get(req, "item");
    struct grader *g = NULL;
    struct judge_pool *pool = NULL;
    int rc = -1;
    if (!json_is_string(sample_text)) {
        whet_errf(err, "%s: model_sample: expected a string", path);
    } else if (grader_parse(json_object_get(req, "grader"), "grader", &g, err) == 0 &&
               judge_pool_new(&pool, g, judges, NULL, seed, err) == 0) {
        struct grader_run_opts opts = {0};
        if (pool) {
            opts.judge = judge_grade;
            opts.judge_ctx = pool;
        }
        json_t *sample = grader_sample_from_text(json_string_value(sample_text));
        struct grader_result res;
        if (grader_run(g, &opts, sample, json_is_object(item) ? item : NULL, &res, err) == 0) {
            *answer = grader_result_openai_json(g, &res);
            grader_result_free(&res);
            rc = 0;
        }
        json_decref(sample);
    }
    judge_pool_free(pool);
    grader_free(g);
    json_decref(req);
    return rc;
}

static int cmd_grade(int argc, char **argv) {
    static const struct option options[] = {{"judge", required_argument, 0, 'j'},
                                            {"seed", required_argument, 0, 's'},
                                            {"help", no_argument, 0, 'h'},
                                            {0}};
    json_t *judges = json_object();
    unsigned long long seed = 0;
    int c, status = 2;
    while ((c = getopt_long(argc, argv, "j:s:h", options, NULL)) != -1) {
        const char *eq = c == 'j' ? strchr(optarg, '=') : NULL;
        switch (c) {
        case 'j':
            if (!eq || eq == optarg || !eq[1]) {
                fprintf(stderr, "whet grade: --judge %s: expected NAME=DIR\n", optarg);
                goto out;
            }
            json_object_setn_new(judges, optarg, (size_t)(eq - optarg), json_string(eq + 1));
            break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        case 'h': usage(stdout); status = 0; goto out;
        default: usage(stderr); goto out;
        }
    }
    if (argc - optind > 1) {
        usage(stderr);
        goto out;
    }
    const char *path = optind < argc && strcmp(argv[optind], "-") ? argv[optind] : "/dev/stdin";
    struct whet_err err;
    json_t *answer = NULL;
    if (grade(path, judges, seed, &answer, &err)) {
        whet_err_report("whet grade", &err);
        status = 1;
        goto out;
    }
    char *line = whet_json_compact(answer, NULL);
    puts(line);
    free(line);
    json_decref(answer);
    status = fflush(stdout) == 0 ? 0 : 1;
out:
    json_decref(judges);
    return status;
}
WHET_COMMAND("grade", cmd_grade, "run a grader (judge models included) on one sample, print OpenAI's answer")
