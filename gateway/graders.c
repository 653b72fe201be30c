/* graders.c - OpenAI's alpha graders resource: validate a grader, run one on one model sample.
 *
 *   POST /v1/fine_tuning/alpha/graders/validate  {grader}  -> {grader} when it is valid
 *   POST /v1/fine_tuning/alpha/graders/run       {grader, model_sample, item?} -> reward, metadata, …
 *
 * Both validate with the grader library (grader/grader.h), the same check a reinforcement job's grader
 * gets at create: a bad field is a 400 whose `param` is its path, as "grader.graders.accuracy.operation".
 * For run, `model_sample` becomes the `sample` namespace (output_text, and output_json when the text is
 * JSON) and `item` the `item` namespace. The answer has OpenAI's shape (grader_result_openai_json);
 * failures of the sample or of the tenant's code are reward 0 with metadata.errors set, never an HTTP
 * error.
 *
 * The pure graders (string_check, text_similarity, multi over them) run on the gateway's worker
 * threads, never on the event loop. Graders that need a runner (python: tenant code in the sandbox;
 * score_model and label_model: judge models) never run in the gateway, which links neither the
 * sandbox nor a model runtime: the whole request runs in a child `whet grade [--judge NAME=DIR …]
 * REQUEST` (cli/cmd_grade.c), whose stdout is the answer, with the runner's default limits (python:
 * pygrader's per-sample timeout, memory and parallelism). Every judge model must be in the catalog
 * (base_models; else 400 naming the grader's `model` field) and is downloaded once from the object
 * store into a local cache (common/dir_cache: filled under a temp name renamed into place, so requests
 * never see half a model; bounded by WHET_JUDGE_CACHE_MAX, the least recently used judges not in use
 * removed past it). A child that fails or runs past GRADERS_CHILD_TIMEOUT_S answers reward 0 with a
 * server error (model_grader_server_error with judges, else python_grader_server_error), as OpenAI does
 * when its grader cannot answer. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "db.h"
#include "dir_cache.h"
#include "env.h"
#include "files_common.h"
#include "grader.h"
#include "graders.h"
#include "http.h"
#include "utf8.h"

#define GRADERS_CHILD_TIMEOUT_S 60.0
#define GRADERS_ANSWER_MAX (4u << 20)
#define GRADERS_PARAM_MAX 256

extern char **environ;

/* A judge model a grader names, with where the catalog keeps it. */
struct judge_ref {
    char *name, *param; /* "whet-tiny", "grader.graders.quality.model" */
    char *object_prefix, *sha256;
};

struct grader_job {
    struct grader *grader;
    json_t *request; /* {grader, model_sample, item}: what a `whet grade` child reads */
    json_t *sample, *item;
    size_t n_judges;
    struct judge_ref *judges;
    json_t *answer; /* filled by the worker */
    struct whet_err err;
};

static void result_with_server_error(struct grader_job *job, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Reward 0 with a server error and `fmt` as its details: the child (a judge, or the python grader)
 * could not answer. */
static void result_with_server_error(struct grader_job *job, const char *fmt, ...) {
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof message) utf8_trim_incomplete(message, sizeof message - 1);
    struct grader_result res = {0};
    grader_result_add_error(&res, job->n_judges ? GRADER_ERR_MODEL_SERVER : GRADER_ERR_PYTHON_SERVER, NULL, message);
    job->answer = grader_result_openai_json(job->grader, &res);
    grader_result_free(&res);
}

/* The judge cache (dir_cache.h): $WHET_DATA_DIR/judge-cache, or a per-user dir under $TMPDIR without a
 * data dir, bounded by WHET_JUDGE_CACHE_MAX; opened by the first judged run and kept for the process's
 * life. A judge is held from its fetch until its child has answered. */
static pthread_mutex_t judge_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dir_cache *judge_cache;

static int judge_cache_bound(struct dir_cache_bound *bound, struct whet_err *err) {
    if (dir_cache_parse_bound(whet_env("WHET_JUDGE_CACHE_MAX", GRADERS_JUDGE_CACHE_MAX_DEFAULT), bound, err) < 0)
        return whet_err_prefix(err, "WHET_JUDGE_CACHE_MAX");
    return 0;
}

int graders_check_settings(struct whet_err *err) {
    struct dir_cache_bound bound;
    return judge_cache_bound(&bound, err);
}

static struct dir_cache *judge_cache_open(struct whet_err *err) {
    pthread_mutex_lock(&judge_cache_lock);
    struct dir_cache_bound bound;
    if (!judge_cache && judge_cache_bound(&bound, err) == 0) {
        const char *data_dir = whet_env("WHET_DATA_DIR", "");
        char *root = *data_dir ? xasprintf("%s/judge-cache", data_dir)
                               : xasprintf("%s/whet-judge-cache-%d", whet_env("TMPDIR", "/tmp"), (int)getuid());
        judge_cache = dir_cache_open(root, &bound, "judge cache", err);
        free(root);
    }
    struct dir_cache *c = judge_cache;
    pthread_mutex_unlock(&judge_cache_lock);
    return c;
}

static int fetch_judge(void *ctx, const char *dir, struct whet_err *err) {
    const struct judge_ref *j = ctx;
    struct objstore *store = files_store(err);
    return store ? objstore_get_dir(store, j->object_prefix, dir, err) : -1;
}

/* The local dir of judge `j` in the cache (<name>-<sha256 prefix>: a new sha256, the model registered
 * again, is a new dir), downloaded when it is not there yet, held until judge_release. Returns the path
 * (judge_release frees it) or NULL with err. */
static char *judge_local_dir(struct dir_cache *cache, struct judge_ref *j, struct whet_err *err) {
    char *name = dir_cache_name(j->name, j->sha256, 16);
    char *dir = dir_cache_get(cache, name, fetch_judge, j, err);
    free(name);
    if (!dir) whet_err_prefix(err, "judge model \"%s\"", j->name);
    return dir;
}

/* What the child is called in server errors. */
static const char *child_name(const struct grader_job *job) { return job->n_judges ? "the judge" : "the grader"; }

/* The end of the child's stderr (its last message; a long report is cut at the front), without the
 * final newlines, into why[size]. */
static void stderr_tail(const char *path, char *why, size_t size) {
    why[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long end = ftell(f);
        long from = end > (long)size - 1 ? end - ((long)size - 1) : 0;
        fseek(f, from, SEEK_SET);
        size_t n = fread(why, 1, size - 1, f), cut = 0;
        /* A cut at the front may fall inside a character: start at the next one. */
        while (from && cut < n && ((unsigned char)why[cut] & 0xc0) == 0x80) cut++;
        memmove(why, why + cut, n - cut);
        n -= cut;
        why[n] = 0;
        while (n && why[n - 1] == '\n') why[--n] = 0;
    }
    fclose(f);
}

/* Runs `whet grade` on the job's request with its judges (if any) in dirs[] and reads its answer. */
static void run_child(struct grader_job *job, char **dirs) {
    char *work_dir = xasprintf("%s/whet-grade-XXXXXX", whet_env("TMPDIR", "/tmp"));
    if (!mkdtemp(work_dir)) {
        free(work_dir);
        result_with_server_error(job, "cannot create a temp dir: %s", strerror(errno));
        return;
    }
    char *req_path = xasprintf("%s/request.json", work_dir), *out_path = xasprintf("%s/answer.json", work_dir),
         *err_path = xasprintf("%s/stderr.txt", work_dir);
    char **argv = xcalloc(2 * job->n_judges + 4, sizeof *argv);
    size_t argc = 0;
    argv[argc++] = "whet";
    argv[argc++] = "grade";
    for (size_t k = 0; k < job->n_judges; k++) {
        argv[argc++] = "--judge";
        argv[argc++] = xasprintf("%s=%s", job->judges[k].name, dirs[k]);
    }
    argv[argc++] = req_path;
    char *text = json_dumps(job->request, JSON_COMPACT);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3); /* not the gateway's sockets */
    pid_t pid;
    int status = 0, spawned = -1;
    if (whet_write_file_atomic(req_path, text, strlen(text), &job->err) == 0)
        spawned = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
    free(text);
    posix_spawn_file_actions_destroy(&fa);
    if (spawned != 0) {
        result_with_server_error(job, "cannot start %s: %s", child_name(job),
                                 spawned > 0 ? strerror(spawned) : job->err.msg);
        goto out;
    }
    double deadline = whet_now_mono() + GRADERS_CHILD_TIMEOUT_S;
    pid_t got;
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && whet_now_mono() < deadline)
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        result_with_server_error(job, "%s did not answer within %.0f s", child_name(job), GRADERS_CHILD_TIMEOUT_S);
        goto out;
    }
    char *answer = NULL;
    size_t len = 0;
    json_t *parsed = NULL;
    if (got == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
        whet_read_file(out_path, GRADERS_ANSWER_MAX, &answer, &len, &job->err) == 0)
        parsed = json_loadb(answer, len, 0, NULL);
    free(answer);
    if (json_is_object(parsed)) {
        job->answer = parsed;
    } else {
        json_decref(parsed);
        char why[512];
        stderr_tail(err_path, why, sizeof why);
        result_with_server_error(job, "%s failed (%s %d): %s", child_name(job),
                                 WIFSIGNALED(status) ? "signal" : "exit status",
                                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
                                 *why ? why : "no message");
    }
out:
    for (size_t k = 0; k < job->n_judges; k++) free(argv[3 + 2 * k]);
    free(argv);
    free(req_path);
    free(out_path);
    free(err_path);
    whet_rm_rf(work_dir);
    free(work_dir);
}

static void run_work(void *arg) {
    struct grader_job *job = arg;
    if (!grader_needs_runner(job->grader)) {
        struct grader_result res;
        if (grader_eval_batch(job->grader, NULL, &job->sample, &job->item, 1, &res, &job->err) == 0) {
            job->answer = grader_result_openai_json(job->grader, &res);
            grader_result_free(&res);
        }
        return;
    }
    char **dirs = xcalloc(job->n_judges, sizeof *dirs);
    size_t k = 0;
    struct whet_err err;
    struct dir_cache *cache = job->n_judges ? judge_cache_open(&err) : NULL;
    if (cache)
        for (; k < job->n_judges; k++)
            if (!(dirs[k] = judge_local_dir(cache, &job->judges[k], &err))) break;
    if (k < job->n_judges) result_with_server_error(job, "%s", err.msg);
    else run_child(job, dirs);
    for (size_t i = 0; i < k; i++) {
        dir_cache_release(cache, dirs[i]);
        free(dirs[i]);
    }
    free(dirs);
}

static void job_free(struct grader_job *job) {
    grader_free(job->grader);
    json_decref(job->request);
    json_decref(job->sample);
    json_decref(job->item);
    json_decref(job->answer);
    for (size_t k = 0; k < job->n_judges; k++) {
        free(job->judges[k].name);
        free(job->judges[k].param);
        free(job->judges[k].object_prefix);
        free(job->judges[k].sha256);
    }
    free(job->judges);
    free(job);
}

static void run_done(struct gw_req *r, void *arg) {
    struct grader_job *job = arg;
    if (!http_gone(r)) {
        if (job->answer) http_reply_json(r, 200, json_incref(job->answer));
        else http_reply_error(r, 500, NULL, NULL, "grader could not run: %s", job->err.msg);
    }
    job_free(job);
}

static void start_job(struct gw_req *r, struct grader_job *job) {
    if (http_run_blocking_or_busy(r, run_work, run_done, job)) job_free(job);
}

/* The judge models of `grader` (a validated grader object) and the path of each `model` field,
 * depth first in the order of multi's `graders`; a model named twice is one judge. */
static void collect_judges(struct grader_job *job, const json_t *grader, const char *path) {
    const char *type = json_string_value(json_object_get(grader, "type"));
    if (!type) return;
    if (!strcmp(type, "score_model") || !strcmp(type, "label_model")) {
        const char *model = json_string_value(json_object_get(grader, "model"));
        if (!model) return;
        for (size_t k = 0; k < job->n_judges; k++)
            if (!strcmp(job->judges[k].name, model)) return;
        job->judges = xrealloc(job->judges, (job->n_judges + 1) * sizeof *job->judges);
        job->judges[job->n_judges++] = (struct judge_ref){xstrdup(model), xasprintf("%s.model", path), NULL, NULL};
    } else if (!strcmp(type, "multi")) {
        const char *key;
        json_t *sub;
        json_object_foreach(json_object_get(grader, "graders"), key, sub) {
            char *sub_path = xasprintf("%s.graders.%s", path, key);
            collect_judges(job, sub, sub_path);
            free(sub_path);
        }
    }
}

/* What the catalog look-up carries: the request's pool owns it (the callback does not run when the
 * client went away), so the job is built again from the body's text afterwards. */
struct judge_lookup {
    const char *body_text;
};

static struct grader_job *job_from_body(struct gw_req *r, json_t *body);

/* The catalog's row for every judge, in order (NULLs for a model it lacks). */
static void judges_looked_up(struct gw_req *r, const struct db_result *res, void *arg) {
    struct judge_lookup *lookup = arg;
    if (db_reply_failed(r, res)) return;
    json_t *body = json_loads(lookup->body_text, 0, NULL);
    struct grader_job *job = body ? job_from_body(r, body) : NULL;
    json_decref(body);
    if (!job) {
        if (!body) http_reply_error(r, 500, NULL, NULL, "the request could not be read again");
        return;
    }
    const PGresult *rows = res->res[0];
    for (size_t k = 0; k < job->n_judges; k++) {
        if ((int)k >= PQntuples(rows) || PQgetisnull(rows, (int)k, 1)) {
            http_reply_error(r, 400, job->judges[k].param, "model_not_found",
                             "%s: the judge model \"%s\" does not exist", job->judges[k].param, job->judges[k].name);
            job_free(job);
            return;
        }
        job->judges[k].object_prefix = xstrdup(PQgetvalue(rows, (int)k, 1));
        job->judges[k].sha256 = xstrdup(PQgetvalue(rows, (int)k, 2));
    }
    start_job(r, job);
}

/* Validates the request into a job, or answers 400 and returns NULL. */
static struct grader_job *job_from_body(struct gw_req *r, json_t *body) {
    if (http_body_keys_known(r, body, (const char *const[]){"grader", "model_sample", "item", NULL})) return NULL;
    json_t *grader = json_object_get(body, "grader"), *sample = json_object_get(body, "model_sample"),
           *item = json_object_get(body, "item");
    struct grader *g = NULL;
    struct whet_err err;
    char param[GRADERS_PARAM_MAX];
    if (!grader) {
        http_reply_error(r, 400, "grader", "invalid_request", "grader: missing");
    } else if (!json_is_string(sample)) {
        http_reply_error(r, 400, "model_sample", "invalid_request", "model_sample: %s",
                         sample ? "expected a string" : "missing");
    } else if (item && !json_is_object(item) && !json_is_null(item)) {
        http_reply_error(r, 400, "item", "invalid_request", "item: expected an object");
    } else if (grader_validate(grader, "grader", &g, param, sizeof param, &err) < 0) {
        http_reply_error(r, 400, param, "invalid_grader", "%s", err.msg);
    } else {
        struct grader_job *job = xcalloc(1, sizeof *job);
        job->grader = g;
        job->sample = grader_sample_from_text(json_string_value(sample));
        job->item = json_is_object(item) ? json_incref(item) : json_object();
        job->request = json_pack("{sOsOsO}", "grader", grader, "model_sample", sample, "item", job->item);
        collect_judges(job, grader, "grader");
        return job;
    }
    return NULL;
}

static void graders_run(struct gw_req *r) {
    json_t *body = http_body_json(r);
    if (!body) return;
    struct grader_job *job = job_from_body(r, body);
    if (job && job->n_judges) {
        /* Every judge model must be in the catalog: look them up, in order, then build the job again. */
        json_t *names = json_array();
        for (size_t k = 0; k < job->n_judges; k++) json_array_append_new(names, json_string(job->judges[k].name));
        char *names_text = json_dumps(names, JSON_COMPACT), *body_text = json_dumps(body, JSON_COMPACT);
        struct judge_lookup *lookup = http_alloc(r, sizeof *lookup);
        lookup->body_text = http_strndup(r, body_text, strlen(body_text));
        const char *params[] = {http_strndup(r, names_text, strlen(names_text))};
        db_query_sql(r,
                     "SELECT t.name, b.object_prefix, b.sha256 FROM jsonb_array_elements_text($1::jsonb) "
                     "WITH ORDINALITY AS t(name, i) LEFT JOIN base_models b ON b.id = t.name ORDER BY t.i",
                     1, params, judges_looked_up, lookup);
        free(names_text);
        free(body_text);
        json_decref(names);
        job_free(job);
    } else if (job) {
        start_job(r, job);
    }
    json_decref(body);
}

/* POST /v1/fine_tuning/alpha/graders/validate {"grader": …}: answers {"grader": …} when it is valid. */
static void graders_validate(struct gw_req *r) {
    json_t *body = http_body_json(r);
    if (!body) return;
    json_t *grader = json_object_get(body, "grader");
    char param[GRADERS_PARAM_MAX];
    struct whet_err err;
    if (http_body_keys_known(r, body, (const char *const[]){"grader", NULL})) {
        /* answered */
    } else if (!grader) {
        http_reply_error(r, 400, "grader", "invalid_request", "grader: missing");
    } else if (grader_validate(grader, "grader", NULL, param, sizeof param, &err)) {
        http_reply_error(r, 400, param, "invalid_grader", "%s", err.msg);
    } else {
        http_reply_json(r, 200, json_pack("{s:O}", "grader", grader));
    }
    json_decref(body);
}

void graders_routes(struct http_router *rt) {
    http_route(rt, "POST", "/v1/fine_tuning/alpha/graders/validate", graders_validate, 0, "graders.validate");
    http_route(rt, "POST", "/v1/fine_tuning/alpha/graders/run", graders_run, 0, "graders.run");
}
