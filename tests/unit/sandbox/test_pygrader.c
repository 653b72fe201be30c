/* test_pygrader.c - python graders run sandboxed: good graders score, hostile ones score 0 with an error.
 *
 * One grader source dispatches on item["mode"], so a single batch holds well-behaved samples next
 * to ones that open a socket, read another tenant's file, fork without end, allocate without end,
 * loop forever, raise, return a string, or kill their own process, and the test checks that each
 * hostile sample gets score 0 and its own error while the good samples around it, including those
 * after a sample that took the sandbox down, get their real scores. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pygrader.h"
#include "test.h"

static char base[64], secret_path[160];

static const char hostile_source[] =
    "import os, socket, json\n"
    "def grade(sample, item):\n"
    "    mode = item.get('mode', 'ok')\n"
    "    if mode == 'ok':\n"
    "        print(json.dumps({'i': 0, 'score': 99}))  # must not reach the result channel\n"
    "        return 1.0 if sample['output_text'].strip() == item['answer'] else 0.25\n"
    "    if mode == 'socket':\n"
    "        socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(('10.0.0.1', 80))\n"
    "        return 1.0\n"
    "    if mode == 'read_other':\n"
    "        return float(len(open(item['path']).read()) > 0)\n"
    "    if mode == 'write_outside':\n"
    "        open(item['path'], 'w').write('x')\n"
    "        return 1.0\n"
    "    if mode == 'fork':\n"
    "        while True:\n"
    "            try:\n"
    "                os.fork()\n"
    "            except OSError:\n"
    "                pass\n"
    "    if mode == 'alloc':\n"
    "        hoard = []\n"
    "        while True:\n"
    "            hoard.append(bytearray(10**7))\n"
    "    if mode == 'loop':\n"
    "        while True:\n"
    "            pass\n"
    "    if mode == 'exception':\n"
    "        return 1 / 0\n"
    "    if mode == 'string':\n"
    "        return '1.0'\n"
    "    if mode == 'exit':\n"
    "        os._exit(3)\n"
    "    raise ValueError('unknown mode ' + mode)\n";

static json_t *sample(const char *text) { return json_pack("{s:s, s:n}", "output_text", text, "output_json"); }

TEST(hostile_samples_score_zero_with_their_own_error) {
    char outside[200];
    snprintf(outside, sizeof outside, "%s/tenant-b/planted.txt", base);
    struct {
        const char *mode, *output, *path;
    } cases[] = {
        {"ok", "42", NULL},            /* 0: 1.0 */
        {"ok", "41", NULL},            /* 1: 0.25 */
        {"socket", "", NULL},          /* 2 */
        {"read_other", "", secret_path}, /* 3 */
        {"fork", "", NULL},            /* 4: takes its sandbox down */
        {"ok", "42", NULL},            /* 5: retried in a fresh sandbox: 1.0 */
        {"alloc", "", NULL},           /* 6 */
        {"loop", "", NULL},            /* 7 */
        {"exception", "", NULL},       /* 8 */
        {"string", "", NULL},          /* 9 */
        {"exit", "", NULL},            /* 10: takes its sandbox down */
        {"ok", "42", NULL},            /* 11: 1.0 */
        {"write_outside", "", outside}, /* 12 */
    };
    size_t n = WHET_ARRAY_LEN(cases);
    json_t *samples[16], *items[16];
    for (size_t i = 0; i < n; i++) {
        samples[i] = sample(cases[i].output);
        items[i] = json_pack("{s:s, s:s}", "mode", cases[i].mode, "answer", "42");
        if (cases[i].path) json_object_set_new(items[i], "path", json_string(cases[i].path));
    }
    struct pygrader_opts opts;
    pygrader_opts_init(&opts);
    opts.parallel = 2;
    opts.batch_size = 7;
    opts.sample_timeout_s = 3; /* room for the allocation loop to reach the limit on a busy machine */
    opts.mem_bytes = 192ull << 20;
    opts.max_procs = 16;
    struct pygrader_score scores[16];
    struct whet_err err;
    double t0 = whet_now_mono();
    CHECK(pygrader_run(&opts, hostile_source, samples, items, n, scores, &err) == 0);
    double wall = whet_now_mono() - t0;
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "  %2zu %-13s score=%.2f error=%s\n", i, cases[i].mode, scores[i].score,
                scores[i].error ? scores[i].error : "-");
    CHECK_NEAR(scores[0].score, 1.0, 0);
    CHECK(scores[0].error == NULL);
    CHECK_NEAR(scores[1].score, 0.25, 0);
    CHECK_NEAR(scores[5].score, 1.0, 0);
    CHECK(scores[5].error == NULL);
    CHECK_NEAR(scores[11].score, 1.0, 0);
    CHECK(scores[11].error == NULL);
    size_t hostile[] = {2, 3, 4, 6, 7, 8, 9, 10, 12};
    for (size_t k = 0; k < WHET_ARRAY_LEN(hostile); k++) {
        CHECK_MSG(scores[hostile[k]].score == 0 && scores[hostile[k]].error, "sample %zu", hostile[k]);
    }
    CHECK_CONTAINS(scores[2].error, "PermissionError");
    CHECK_CONTAINS(scores[3].error, "FileNotFoundError");
    CHECK_CONTAINS(scores[4].error, "process limit");
    CHECK_CONTAINS(scores[6].error, "MemoryError");
    CHECK_CONTAINS(scores[7].error, "took longer than 3 s");
    CHECK_CONTAINS(scores[8].error, "ZeroDivisionError");
    CHECK_CONTAINS(scores[9].error, "returned str, expected a number");
    CHECK_CONTAINS(scores[10].error, "exited with status 3");
    CHECK_CONTAINS(scores[12].error, "Error"); /* absent dir or read-only file system */
    CHECK(access(outside, F_OK) != 0);
    CHECK(wall < 30);
    pygrader_scores_free(scores, n);
    for (size_t i = 0; i < n; i++) {
        json_decref(samples[i]);
        json_decref(items[i]);
    }
}

TEST(a_grader_that_cannot_load_fails_every_sample) {
    json_t *samples[3], *items[3];
    for (int i = 0; i < 3; i++) {
        samples[i] = sample("x");
        items[i] = json_object();
    }
    struct pygrader_opts opts;
    pygrader_opts_init(&opts);
    opts.startup_timeout_s = 2;
    struct pygrader_score scores[3];
    struct whet_err err;
    CHECK(pygrader_run(&opts, "def grade(:\n", samples, items, 3, scores, &err) == 0);
    for (int i = 0; i < 3; i++) {
        CHECK(scores[i].score == 0);
        CHECK_CONTAINS(scores[i].error, "grader failed to load: SyntaxError");
    }
    pygrader_scores_free(scores, 3);
    CHECK(pygrader_run(&opts, "x = 1\n", samples, items, 3, scores, &err) == 0);
    CHECK_CONTAINS(scores[2].error, "source does not define grade(sample, item)");
    pygrader_scores_free(scores, 3);
    /* a top-level infinite loop hits the alarm while loading */
    opts.sample_timeout_s = 1;
    CHECK(pygrader_run(&opts, "while True:\n    pass\n", samples, items, 3, scores, &err) == 0);
    CHECK_CONTAINS(scores[0].error, "loading the source took longer than 1 s");
    pygrader_scores_free(scores, 3);
    for (int i = 0; i < 3; i++) {
        json_decref(samples[i]);
        json_decref(items[i]);
    }
}

TEST(batches_run_in_parallel) {
    /* Four samples of 1.5 s each: one after another that is 6 s; four sandboxes at once take about
     * 1.5 s plus python's start-up (the machine has 2 cores, sleeping needs none). */
    static const char source[] =
        "import time\n"
        "def grade(sample, item):\n"
        "    time.sleep(1.5)\n"
        "    return item['weight'] * len(sample['output_text'])\n";
    json_t *samples[4], *items[4];
    for (int i = 0; i < 4; i++) {
        samples[i] = sample("abcd");
        items[i] = json_pack("{s:f}", "weight", 0.25 * (i + 1));
    }
    struct pygrader_opts opts;
    pygrader_opts_init(&opts);
    opts.parallel = 4;
    opts.batch_size = 1;
    struct pygrader_score scores[4];
    struct whet_err err;
    double t0 = whet_now_mono();
    CHECK(pygrader_run(&opts, source, samples, items, 4, scores, &err) == 0);
    double wall = whet_now_mono() - t0;
    fprintf(stderr, "  4 x 1.5 s graders in %.2f s (sequential: >= 6 s)\n", wall);
    for (int i = 0; i < 4; i++) {
        CHECK(scores[i].error == NULL);
        CHECK_NEAR(scores[i].score, 1.0 * (i + 1), 1e-12);
    }
    CHECK(wall < 5.0); /* python start-up on a loaded 2-core machine; sequential is >= 6 s */
    pygrader_scores_free(scores, 4);
    for (int i = 0; i < 4; i++) {
        json_decref(samples[i]);
        json_decref(items[i]);
    }
}

int main(void) {
    snprintf(base, sizeof base, "/tmp/whet-pygrader-test-XXXXXX");
    if (!mkdtemp(base)) return 2;
    char other[128];
    snprintf(other, sizeof other, "%s/tenant-b", base);
    mkdir(other, 0755);
    snprintf(secret_path, sizeof secret_path, "%s/secret.txt", other);
    int fd = open(secret_path, O_WRONLY | O_CREAT, 0644);
    if (fd < 0 || write(fd, "tenant-b-secret\n", 16) != 16) return 2;
    close(fd);
    RUN(hostile_samples_score_zero_with_their_own_error);
    RUN(a_grader_that_cannot_load_fails_every_sample);
    RUN(batches_run_in_parallel);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", base);
    return test_summary();
}
