/* pygrader.c - runs tenant `grade(sample, item)` code in sandboxes, batch by batch (see pygrader.h).
 *
 * Protocol on the python process's stdin: one header line {"source", "timeout"}, then one line per
 * pair {"i", "sample", "item"}. On its private result channel (the original stdout) the harness
 * answers {"ready": true} or {"load_error": "…"} once, then {"i", "score"} or {"i", "error"} per
 * pair, in order. Lines with an index outside the batch or already answered are ignored, so tenant
 * code that writes to the channel can at worst misreport its own batch. */
#include "pygrader.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox.h"

/* The harness. It must survive whatever grade() does short of killing the process: the alarm raises
 * a BaseException subclass (a tenant's `except Exception` cannot swallow it), every outcome is
 * reported, and the result channel is a private dup of stdout. */
static const char harness[] =
    "import sys, os, json, math, signal\n"
    "sys.path.append('/usr/lib/python3/dist-packages')\n"
    "_out = os.fdopen(os.dup(1), 'w')\n"
    "os.dup2(2, 1)\n"
    "sys.stdout = sys.stderr\n"
    "def _emit(obj):\n"
    "    _out.write(json.dumps(obj) + '\\n')\n"
    "    _out.flush()\n"
    "def _describe(e):\n"
    "    try:\n"
    "        text = ('%s: %s' % (type(e).__name__, e)).rstrip(': ')\n"
    "    except BaseException:\n"
    "        text = type(e).__name__\n"
    "    return text[:300]\n"
    "class GraderTimeout(BaseException):\n"
    "    pass\n"
    "def _on_alarm(signum, frame):\n"
    "    raise GraderTimeout()\n"
    "signal.signal(signal.SIGALRM, _on_alarm)\n"
    "_header = json.loads(sys.stdin.readline())\n"
    "_limit = float(_header['timeout'])\n"
    "_ns = {'__name__': 'grader'}\n"
    "try:\n"
    "    try:\n"
    "        signal.setitimer(signal.ITIMER_REAL, _limit)\n"
    "        exec(compile(_header['source'], 'grader.py', 'exec'), _ns)\n"
    "    finally:\n"
    "        signal.setitimer(signal.ITIMER_REAL, 0)\n"
    "    _grade = _ns.get('grade')\n"
    "    if not callable(_grade):\n"
    "        raise TypeError('source does not define grade(sample, item)')\n"
    "except GraderTimeout:\n"
    "    _emit({'load_error': 'loading the source took longer than %g s' % _limit})\n"
    "    sys.exit(0)\n"
    "except BaseException as e:\n"
    "    _emit({'load_error': _describe(e)})\n"
    "    sys.exit(0)\n"
    "del _header\n"
    "_emit({'ready': True})\n"
    "for _line in sys.stdin:\n"
    "    _req = json.loads(_line)\n"
    "    _i = _req['i']\n"
    "    try:\n"
    "        try:\n"
    "            signal.setitimer(signal.ITIMER_REAL, _limit)\n"
    "            _score = _grade(_req['sample'], _req['item'])\n"
    "        finally:\n"
    "            signal.setitimer(signal.ITIMER_REAL, 0)\n"
    "        if isinstance(_score, bool) or not isinstance(_score, (int, float)):\n"
    "            raise TypeError('grade() returned %s, expected a number' % type(_score).__name__)\n"
    "        _score = float(_score)\n"
    "        if not math.isfinite(_score):\n"
    "            raise ValueError('grade() returned %r, expected a finite number' % _score)\n"
    "        _emit({'i': _i, 'score': _score})\n"
    "    except GraderTimeout:\n"
    "        _emit({'i': _i, 'error': 'grade() took longer than %g s' % _limit})\n"
    "    except BaseException as e:\n"
    "        _emit({'i': _i, 'error': _describe(e)})\n"
    "    del _req\n";

void pygrader_opts_init(struct pygrader_opts *opts) {
    memset(opts, 0, sizeof *opts);
    opts->parallel = 4;
    opts->sample_timeout_s = 5;
    opts->startup_timeout_s = 10;
    opts->mem_bytes = 512ull << 20;
    opts->max_procs = 16;
    opts->python = "/usr/bin/python3";
}

/* A contiguous run of pairs graded by one sandbox. */
struct batch {
    size_t first, count;
};

static void set_error(struct pygrader_score *s, const char *fmt, const char *detail) {
    free(s->error);
    s->score = 0;
    s->error = xasprintf(fmt, detail);
}

/* Builds the stdin of one batch: the header line, then one line per pair. */
static char *batch_input(const char *source, double timeout_s, json_t *const *samples, json_t *const *items,
                         struct batch b, size_t *len) {
    json_t *header = json_pack("{s:s, s:f}", "source", source, "timeout", timeout_s);
    char *text = json_dumps(header, JSON_COMPACT);
    json_decref(header);
    size_t cap = strlen(text) + 2, used = 0;
    char *buf = xmalloc(cap);
    used = (size_t)snprintf(buf, cap, "%s\n", text);
    free(text);
    for (size_t k = 0; k < b.count; k++) {
        size_t i = b.first + k;
        json_t *req = json_pack("{s:I, s:O, s:O}", "i", (json_int_t)i, "sample", samples[i] ? samples[i] : json_null(),
                                "item", items[i] ? items[i] : json_null());
        char *line = json_dumps(req, JSON_COMPACT);
        json_decref(req);
        size_t need = strlen(line) + 2;
        if (used + need > cap) {
            cap = (used + need) * 2;
            buf = xrealloc(buf, cap);
        }
        used += (size_t)snprintf(buf + used, cap - used, "%s\n", line);
        free(line);
    }
    *len = used;
    return buf;
}

enum batch_state { BATCH_NOT_READY, BATCH_READY, BATCH_LOAD_ERROR };

/* Reads the harness's answers into scores; `answered[k]` marks pair first+k. A load error is put on
 * every pair of the batch. */
static enum batch_state batch_parse(const struct sandbox_job *job, struct batch b, struct pygrader_score *scores,
                                    unsigned char *answered) {
    enum batch_state state = BATCH_NOT_READY;
    double per_pair = job->result.wall_s / (double)(b.count ? b.count : 1);
    for (const char *line = job->out; line && *line;) {
        const char *end = strchr(line, '\n');
        if (!end) break; /* a partial last line: the process died while writing it */
        json_t *obj = json_loadb(line, (size_t)(end - line), 0, NULL);
        line = end + 1;
        if (!json_is_object(obj)) {
            json_decref(obj);
            continue;
        }
        const char *load_error = json_string_value(json_object_get(obj, "load_error"));
        json_t *ji = json_object_get(obj, "i");
        if (state == BATCH_NOT_READY && load_error) {
            state = BATCH_LOAD_ERROR;
            for (size_t k = 0; k < b.count; k++) {
                set_error(&scores[b.first + k], "grader failed to load: %s", load_error);
                answered[k] = 1;
            }
        } else if (state == BATCH_NOT_READY && json_is_true(json_object_get(obj, "ready"))) {
            state = BATCH_READY;
        } else if (state == BATCH_READY && json_is_integer(ji)) {
            json_int_t i = json_integer_value(ji);
            if (i >= (json_int_t)b.first && i < (json_int_t)(b.first + b.count) && !answered[i - b.first]) {
                struct pygrader_score *s = &scores[i];
                json_t *score = json_object_get(obj, "score");
                const char *error = json_string_value(json_object_get(obj, "error"));
                if (json_is_number(score)) {
                    free(s->error);
                    s->error = NULL;
                    s->score = json_number_value(score);
                } else {
                    set_error(s, "%s", error ? error : "grader answered neither a score nor an error");
                }
                s->seconds = per_pair;
                answered[i - b.first] = 1;
            }
        }
        json_decref(obj);
    }
    return state;
}

static void push_batch(struct batch **queue, size_t *n, size_t *cap, struct batch b) {
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 8;
        *queue = xrealloc(*queue, *cap * sizeof(**queue));
    }
    (*queue)[(*n)++] = b;
}

/* After a batch: pairs still unanswered were cut short by the sandbox's end. The first of them is
 * the one the process was on: it gets the sandbox's verdict. Later ones go back in the queue. */
static void batch_settle(const struct sandbox_job *job, struct batch b, enum batch_state state,
                         struct pygrader_score *scores, const unsigned char *answered, struct batch **queue,
                         size_t *n_queue, size_t *cap_queue) {
    const char *why = job->result.message;
    if (state == BATCH_NOT_READY) {
        for (size_t k = 0; k < b.count; k++) set_error(&scores[b.first + k], "grader sandbox: %s", why);
        return;
    }
    size_t k = 0;
    while (k < b.count && answered[k]) k++;
    if (k == b.count) return;
    set_error(&scores[b.first + k], "grader sandbox: %s", why);
    for (k++; k < b.count; k++) {
        if (answered[k]) continue;
        size_t start = k;
        while (k < b.count && !answered[k]) k++;
        push_batch(queue, n_queue, cap_queue, (struct batch){b.first + start, k - start});
    }
}

int pygrader_run(const struct pygrader_opts *opts_in, const char *source, json_t *const *samples,
                 json_t *const *items, size_t n, struct pygrader_score *scores, struct whet_err *err) {
    struct pygrader_opts opts;
    if (opts_in) opts = *opts_in;
    else pygrader_opts_init(&opts);
    if (!source) return whet_errf(err, "python grader: source is missing");
    if (opts.parallel < 1 || opts.sample_timeout_s <= 0 || opts.startup_timeout_s <= 0)
        return whet_errf(err, "python grader: parallel, sample_timeout_s and startup_timeout_s must be positive");
    for (size_t i = 0; i < n; i++) scores[i] = (struct pygrader_score){0, NULL, 0};
    if (n == 0) return 0;
    size_t batch_size = opts.batch_size ? opts.batch_size : (n + (size_t)opts.parallel - 1) / (size_t)opts.parallel;

    struct batch *queue = NULL;
    size_t n_queue = 0, cap_queue = 0, head = 0;
    for (size_t first = 0; first < n; first += batch_size)
        push_batch(&queue, &n_queue, &cap_queue, (struct batch){first, first + batch_size <= n ? batch_size : n - first});

    const char *python = opts.python ? opts.python : "/usr/bin/python3";
    const char *argv[] = {python, "-I", "-S", "-B", "-c", harness, NULL};
    struct sandbox_job *jobs = xcalloc((size_t)opts.parallel, sizeof *jobs);
    struct batch *wave = xcalloc((size_t)opts.parallel, sizeof *wave);
    int rc = 0;
    while (head < n_queue && rc == 0) {
        size_t w = 0;
        for (; w < (size_t)opts.parallel && head < n_queue; w++) {
            wave[w] = queue[head++];
            struct sandbox_job *job = &jobs[w];
            memset(job, 0, sizeof *job);
            sandbox_spec_init(&job->spec);
            job->spec.argv = argv;
            job->spec.mem_bytes = opts.mem_bytes;
            job->spec.max_procs = opts.max_procs;
            job->spec.file_bytes = 64ull << 20;
            double budget = opts.startup_timeout_s + opts.sample_timeout_s * (double)wave[w].count;
            job->spec.wall_timeout_s = budget + 1;
            job->spec.cpu_seconds = (uint64_t)ceil(budget) + 1;
            job->input = batch_input(source, opts.sample_timeout_s, samples, items, wave[w], &job->input_len);
        }
        if (sandbox_run_many(jobs, w, err) < 0) rc = whet_err_prefix(err, "python grader");
        for (size_t k = 0; k < w; k++) {
            unsigned char *answered = xcalloc(wave[k].count, 1);
            if (rc == 0) {
                enum batch_state state = batch_parse(&jobs[k], wave[k], scores, answered);
                batch_settle(&jobs[k], wave[k], state, scores, answered, &queue, &n_queue, &cap_queue);
            }
            free(answered);
            free((char *)jobs[k].input);
            sandbox_job_release(&jobs[k]);
        }
    }
    free(wave);
    free(jobs);
    free(queue);
    if (rc < 0) pygrader_scores_free(scores, n);
    return rc;
}

void pygrader_scores_free(struct pygrader_score *scores, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(scores[i].error);
        scores[i].error = NULL;
    }
}
