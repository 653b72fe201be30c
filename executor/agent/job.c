/* job.c - one attempt of a job on this node, on its own thread: fetch, train in the sandbox, stream
 * checkpoints to the object store, report, finish.
 *
 * The trainer's stdout is a pipe of JSON lines (trainer.h): "metrics" lines become progress and
 * metric events, "checkpoint" lines are uploaded at once (the trainer writes each checkpoint
 * directory atomically and goes on training while it is uploaded) and reported with their metrics,
 * "final" names the finished model. Its stderr goes to trainer.log in the job dir, whose tail explains
 * a failure. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_internal.h"
#include "buf.h"
#include "crypto.h"
#include "env.h"
#include "json_text.h"
#include "log.h"
#include "proto/whet.pb-c.h"
#include "sandbox.h"
#include "trainer_sandbox.h"

/* What a model's fill fetches: the object store's copy. */
struct model_fetch {
    struct agent *a;
    const char *id, *prefix;
};

static int fetch_model_files(void *ctx, const char *dir, struct whet_err *err) {
    const struct model_fetch *f = ctx;
    int rc = objstore_get_dir(f->a->store, f->prefix, dir, err);
    if (rc != 0) agent_metrics_store_failed(AGENT_STORE_FETCH);
    if (rc == OBJSTORE_NOT_FOUND) rc = whet_errf(err, "base model %s: no complete copy at %s", f->id, f->prefix);
    return rc;
}

/* Base models are fetched once per node into models/ID-SHA/ (a verified copy: a new SHA is a new dir);
 * concurrent jobs of the same model wait for the first fetch. */
char *agent_fetch_model(struct agent *a, json_t *base, struct whet_err *err) {
    const char *id = json_string_value(json_object_get(base, "id"));
    const char *prefix = json_string_value(json_object_get(base, "object_prefix"));
    const char *sha = json_string_value(json_object_get(base, "sha256"));
    if (!id || !prefix) {
        whet_errf(err, "manifest: base_model needs id and object_prefix");
        return NULL;
    }
    char *name = dir_cache_name(id, sha, 12);
    struct model_fetch f = {a, id, prefix};
    char *dir = dir_cache_get(a->models, name, fetch_model_files, &f, err);
    free(name);
    return dir;
}

void agent_release_model(struct agent *a, char *dir) {
    if (!dir) return;
    dir_cache_release(a->models, dir);
    free(dir);
}

static int fetch_file(struct agent_job *job, json_t *file, const char *path, struct whet_err *err) {
    const char *key = json_string_value(json_object_get(file, "object_key"));
    if (!key) return whet_errf(err, "manifest: a data file has no object_key");
    int rc = objstore_get_file(job->tenant_store, key, path, NULL, err);
    if (rc != 0) agent_metrics_store_failed(AGENT_STORE_FETCH);
    return rc == OBJSTORE_NOT_FOUND ? whet_errf(err, "data file %s is missing from the object store", key) : rc;
}

/* The judge models of the manifest (score_model / label_model graders), fetched like the base model:
 * their dirs into judge_dirs (NULL-terminated, owned) and {"id": dir} into the trainer config. */
static int fetch_judges(struct agent *a, const json_t *list, json_t *cfg, char ***judge_dirs, struct whet_err *err) {
    size_t n = json_array_size(list);
    *judge_dirs = xcalloc(n + 1, sizeof **judge_dirs);
    json_t *dirs = json_object();
    json_object_set_new(cfg, "judge_models", dirs);
    for (size_t i = 0; i < n; i++) {
        json_t *judge = json_array_get(list, i);
        if (!((*judge_dirs)[i] = agent_fetch_model(a, judge, err))) return whet_err_prefix(err, "judge model");
        json_object_set_new(dirs, json_string_value(json_object_get(judge, "id")), json_string((*judge_dirs)[i]));
    }
    return 0;
}

/* The trainer config's `distributed` object (notes in DESIGN.md, "Gangs") from the manifest's, which
 * also lists the peers' addresses for the sandbox. */
static json_t *trainer_distributed(const json_t *dist) {
    json_t *d = json_deep_copy(dist);
    json_object_del(d, "peers");
    return d;
}

/* Everything the trainer needs, in the job dir (every rank of a gang fetches the model, the data and
 * the checkpoint to resume from); returns the config path. */
static char *prepare(struct agent_job *job, char **model_dir, char ***judge_dirs, struct whet_err *err) {
    struct agent *a = job->agent;
    json_t *m = job->manifest;
    char *out_dir = xasprintf("%s/out", job->dir);
    char *train = xasprintf("%s/train.jsonl", job->dir), *valid = NULL, *resume = NULL, *init = NULL, *cfg_path = NULL;
    json_t *cfg = NULL;
    if (whet_mkdir_p(out_dir, err) < 0 || !(*model_dir = agent_fetch_model(a, json_object_get(m, "base_model"), err)) ||
        fetch_file(job, json_object_get(m, "training_file"), train, err) < 0)
        goto out;
    if (json_is_object(json_object_get(m, "validation_file"))) {
        valid = xasprintf("%s/valid.jsonl", job->dir);
        if (fetch_file(job, json_object_get(m, "validation_file"), valid, err) < 0) goto out;
    }
    json_t *r = json_object_get(m, "resume");
    if (json_is_object(r)) {
        resume = xasprintf("%s/resume", job->dir);
        int rc = objstore_get_dir(job->tenant_store, json_string_value(json_object_get(r, "object_prefix")), resume, err);
        if (rc != 0) {
            agent_metrics_store_failed(AGENT_STORE_FETCH);
            if (rc == OBJSTORE_NOT_FOUND) whet_errf(err, "the checkpoint to resume from is incomplete");
            goto out;
        }
    }
    json_t *ia = json_object_get(m, "init_adapter");
    if (json_is_object(ia)) {
        init = xasprintf("%s/init_adapter", job->dir);
        if (objstore_get_dir(job->tenant_store, json_string_value(json_object_get(ia, "object_prefix")), init, err) != 0) {
            agent_metrics_store_failed(AGENT_STORE_FETCH);
            goto out;
        }
    }
    cfg = json_deep_copy(json_object_get(m, "trainer"));
    if (!json_is_object(cfg)) {
        whet_errf(err, "manifest: no trainer settings");
        goto out;
    }
    json_object_set_new(cfg, "model", json_string(*model_dir));
    json_object_set_new(cfg, "training_file", json_string(train));
    json_object_set_new(cfg, "validation_file", valid ? json_string(valid) : json_null());
    json_object_set_new(cfg, "output_dir", json_string(out_dir));
    json_object_set_new(cfg, "resume_from", resume ? json_string(resume) : json_null());
    json_object_set_new(cfg, "init_adapter", init ? json_string(init) : json_null());
    /* a GPU node's trainer sees only its devices (CUDA_VISIBLE_DEVICES), the first of them as cuda */
    if (a->cuda) json_object_set_new(cfg, "device", json_string("cuda"));
    json_t *dist = json_object_get(m, "distributed");
    if (json_is_object(dist)) json_object_set_new(cfg, "distributed", trainer_distributed(dist));
    if (json_array_size(json_object_get(m, "judge_models")) &&
        fetch_judges(a, json_object_get(m, "judge_models"), cfg, judge_dirs, err) < 0)
        goto out;
    cfg_path = xasprintf("%s/trainer.json", job->dir);
    char *text = json_dumps(cfg, JSON_INDENT(2));
    if (whet_write_file_atomic(cfg_path, text, strlen(text), err) < 0) {
        free(cfg_path);
        cfg_path = NULL;
    }
    free(text);
out:
    json_decref(cfg);
    free(out_dir);
    free(train);
    free(valid);
    free(resume);
    free(init);
    return cfg_path;
}

/* ---- the trainer's event lines ---- */

/* What the agent gathers from one trainer process's event lines (the trainer's own `struct run` is
 * another thing: its whole training state). */
struct trainer_watch {
    struct agent_job *job;
    char *final_path;
    struct whet_buf csv; /* OpenAI-style step metrics, built as lines arrive */
    int last_checkpoint_step;
    json_t *last_metrics; /* the latest metrics line */
    long long rollout_tokens; /* generated by this attempt (GRPO's metrics lines), for metering */
};

/* Tells the scheduler a complete checkpoint is at `prefix`; returns 0 once it has been recorded. */
static int report_checkpoint(struct agent_job *job, int step, const char *prefix, uint64_t bytes, json_t *metrics) {
    struct agent *a = job->agent;
    struct whet_err err;
    char *metrics_json = metrics ? whet_json_compact(metrics, NULL) : NULL;
    Whet__V1__CheckpointReport rep = WHET__V1__CHECKPOINT_REPORT__INIT;
    rep.node_id = a->node_id;
    rep.job_id = job->id;
    rep.attempt = (uint32_t)job->attempt;
    rep.step = (uint32_t)step;
    rep.object_prefix = (char *)prefix;
    rep.bytes = bytes;
    rep.metrics_json = metrics_json ? metrics_json : "";
    int rc = agent_call(a, "/whet.v1.Scheduler/ReportCheckpoint", &rep.base,
                        &whet__v1__report_checkpoint_response__descriptor, 60000, &err);
    if (rc == RPC_FAILED_PRECONDITION) agent_job_fenced(job, "checkpoint");
    else if (rc != RPC_OK)
        log_warn("msg=\"checkpoint report failed\" job=%s step=%d error=\"%s\"", job->id, step, err.msg);
    free(metrics_json);
    return rc;
}

static void upload_checkpoint(struct trainer_watch *r, int step, const char *path, json_t *metrics) {
    struct agent_job *job = r->job;
    struct whet_err err;
    /* An abandoned attempt's job moved on: its checkpoint would be refused (and never read). */
    if (atomic_load(&job->stop) == JOB_ABANDON) return;
    char *prefix = xasprintf("%s/checkpoints/step-%d", json_string_value(json_object_get(job->manifest, "output_prefix")), step);
    double t0 = whet_now_mono();
    if (objstore_put_dir(job->tenant_store, prefix, path, &err) < 0) {
        log_warn("msg=\"checkpoint upload failed\" job=%s step=%d error=\"%s\"", job->id, step, err.msg);
        agent_metrics_store_failed(AGENT_STORE_CHECKPOINT_UPLOAD);
        agent_report_event(job, "warn", "message", "A checkpoint could not be uploaded; training goes on", NULL);
    } else if (report_checkpoint(job, step, prefix, whet_dir_bytes(path), metrics) == 0) {
        r->last_checkpoint_step = step;
        agent_metrics_checkpoint_uploaded();
        log_info("msg=\"checkpoint uploaded\" job=%s step=%d seconds=%.2f", job->id, step, whet_now_mono() - t0);
    }
    free(prefix);
}

/* OpenAI's checkpoint metrics fields from a trainer metrics line. */
static json_t *checkpoint_metrics(json_t *last) {
    json_t *m = json_object();
    if (!last) return m;
    json_object_set(m, "step", json_object_get(last, "step"));
    json_object_set(m, "train_loss", json_object_get(last, "loss"));
    /* Each figure the step measured, under OpenAI's checkpoint metric names (a GRPO step's reward too). */
    static const char *const names[][2] = {
        {"train_mean_token_accuracy", "train_mean_token_accuracy"}, {"valid_loss", "valid_loss"},
        {"reward_mean", "train_reward_mean"}, {"pass_rate", "train_pass_rate"},
        {"valid_reward_mean", "valid_reward_mean"}, {"valid_pass_rate", "valid_pass_rate"},
    };
    for (size_t i = 0; i < WHET_ARRAY_LEN(names); i++) {
        json_t *v = json_object_get(last, names[i][0]);
        if (json_is_number(v)) json_object_set(m, names[i][1], v);
    }
    return m;
}

/* A number of a metrics line for the CSV: empty when the step did not measure it. */
static void csv_number(char *out, size_t len, const json_t *ev, const char *name) {
    const json_t *v = json_object_get(ev, name);
    if (json_is_number(v)) snprintf(out, len, ",%.6f", json_number_value(v));
    else snprintf(out, len, ",");
}

/* The result file's header, once: its columns follow the first metrics line (a run without any gets
 * the supervised columns). */
static void csv_header(struct trainer_watch *r, int reinforcement) {
    if (!r->csv.len)
        whet_buf_puts(&r->csv, reinforcement
                                   ? "step,train_loss,train_reward_mean,train_pass_rate,valid_reward_mean,valid_pass_rate\n"
                                   : "step,train_loss,train_accuracy,valid_loss,valid_mean_token_accuracy\n");
}

/* One row of the result file, like OpenAI's step_metrics.csv: SFT and DPO steps carry loss and token
 * accuracy, GRPO steps (the lines with a reward) the reward and pass rate. */
static void csv_add_step(struct trainer_watch *r, const json_t *ev) {
    static const char *const sft[] = {"loss", "train_mean_token_accuracy", "valid_loss", "valid_mean_token_accuracy"};
    static const char *const grpo[] = {"loss", "reward_mean", "pass_rate", "valid_reward_mean", "valid_pass_rate"};
    int rl = json_object_get(ev, "reward_mean") != NULL;
    csv_header(r, rl);
    const char *const *cols = rl ? grpo : sft;
    size_t n_cols = rl ? WHET_ARRAY_LEN(grpo) : WHET_ARRAY_LEN(sft);
    char row[256], cell[48];
    snprintf(row, sizeof row, "%lld", (long long)json_integer_value(json_object_get(ev, "step")));
    for (size_t i = 0; i < n_cols; i++) {
        csv_number(cell, sizeof cell, ev, cols[i]);
        strncat(row, cell, sizeof row - strlen(row) - 1);
    }
    strncat(row, "\n", sizeof row - strlen(row) - 1);
    whet_buf_puts(&r->csv, row);
}

/* Rank 0 listens: the scheduler learns where, and starts the other ranks pointed there. A failure is
 * logged; the scheduler then fails the gang at its rendezvous deadline. */
static void publish_rendezvous(struct agent_job *job, const json_t *ev) {
    const char *address = json_string_value(json_object_get(ev, "address"));
    Whet__V1__RendezvousRequest req = WHET__V1__RENDEZVOUS_REQUEST__INIT;
    req.node_id = job->agent->node_id;
    req.job_id = job->id;
    req.attempt = (uint32_t)job->attempt;
    req.generation = (uint32_t)json_integer_value(json_object_get(ev, "generation"));
    req.address = (char *)(address ? address : "");
    struct whet_err err;
    if (agent_call(job->agent, "/whet.v1.Scheduler/PublishRendezvous", &req.base,
                   &whet__v1__rendezvous_response__descriptor, 60000, &err) != RPC_OK)
        log_warn("msg=\"rendezvous not published\" job=%s attempt=%d error=\"%s\"", job->id, job->attempt, err.msg);
    else
        log_info("msg=\"rendezvous published\" job=%s attempt=%d address=%s", job->id, job->attempt, req.address);
}

static void handle_line(struct trainer_watch *r, const char *line, json_t **last_metrics) {
    struct agent_job *job = r->job;
    json_t *ev = json_loads(line, 0, NULL);
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (!type) {
        json_decref(ev);
        return;
    }
    if (!strcmp(type, "metrics")) {
        int step = (int)json_integer_value(json_object_get(ev, "step"));
        atomic_store(&job->step, step);
        atomic_store(&job->loss, json_number_value(json_object_get(ev, "loss")));
        atomic_fetch_add(&job->trained_tokens, (long long)json_integer_value(json_object_get(ev, "tokens")));
        r->rollout_tokens += (long long)json_integer_value(json_object_get(ev, "rollout_tokens"));
        json_t *total = json_object_get(ev, "total_steps");
        if (json_is_integer(total)) atomic_store(&job->total_steps, (int)json_integer_value(total));
        json_object_del(ev, "type");
        char *data = whet_json_compact(ev, NULL);
        char msg[64];
        snprintf(msg, sizeof msg, "Step %d: training loss=%.4f", step, json_number_value(json_object_get(ev, "loss")));
        agent_report_event(job, "info", "metrics", msg, data);
        free(data);
        csv_add_step(r, ev);
        json_decref(*last_metrics);
        *last_metrics = json_incref(ev);
    } else if (!strcmp(type, "data")) {
        json_t *total = json_object_get(ev, "total_steps");
        if (json_is_integer(total)) atomic_store(&job->total_steps, (int)json_integer_value(total));
        json_object_del(ev, "type");
        char *data = whet_json_compact(ev, NULL);
        agent_report_event(job, "info", "message", "Training data loaded", data);
        free(data);
    } else if (!strcmp(type, "rendezvous")) {
        if (job->rank == 0 && job->world_size > 1) publish_rendezvous(job, ev);
    } else if (!strcmp(type, "checkpoint") && job->rank == 0) { /* only rank 0 writes checkpoints */
        const char *path = json_string_value(json_object_get(ev, "path"));
        int step = (int)json_integer_value(json_object_get(ev, "step"));
        json_t *metrics = checkpoint_metrics(*last_metrics);
        if (path && step > r->last_checkpoint_step) upload_checkpoint(r, step, path, metrics);
        json_decref(metrics);
    } else if (!strcmp(type, "final") && job->rank == 0) {
        const char *path = json_string_value(json_object_get(ev, "path"));
        free(r->final_path);
        r->final_path = path ? xstrdup(path) : NULL;
    }
    json_decref(ev);
}

/* The last lines of trainer.log, for a failure message. */
static void log_tail(const char *path, char *out, size_t len) {
    out[0] = 0;
    char *text = NULL;
    size_t n = 0;
    if (whet_read_file(path, 64 << 20, &text, &n, NULL) < 0) return;
    while (n && (text[n - 1] == '\n' || text[n - 1] == ' ')) text[--n] = 0;
    char *start = text + n;
    for (int lines = 0; start > text && lines < 3; start--)
        if (start[-1] == '\n' && ++lines == 3) break;
    snprintf(out, len, "%s", start);
    free(text);
}

/* What the tenant reads when the trainer ended without a model: what the sandbox saw, then the last
 * lines the trainer wrote to stderr (its own account, e.g. "… Read-only file system"). */
static void failure_message(char *msg, size_t len, const struct sandbox_result *res, const char *log_path) {
    char what[512], tail[400];
    switch (res->reason) {
    case SANDBOX_OK: snprintf(what, sizeof what, "exited without a final model"); break;
    case SANDBOX_EXIT: snprintf(what, sizeof what, "exited with status %d", res->exit_code); break;
    case SANDBOX_SECCOMP: {
        char call[160] = "it made a forbidden system call";
        if (res->denied[0]) snprintf(call, sizeof call, "%s", res->denied);
        else if (res->syscall[0]) snprintf(call, sizeof call, "system call %s is not allowed", res->syscall);
        snprintf(what, sizeof what, "was killed by the sandbox: %s (a trainer may not open network sockets but to its "
                 "gang's peers, mount file systems, trace processes or load kernel code)", call);
        break;
    }
    default: snprintf(what, sizeof what, "ended: %s", res->message); break;
    }
    log_tail(log_path, tail, sizeof tail);
    snprintf(msg, len, "the trainer %s%s%s", what, *tail ? ": " : "", tail);
}

/* Runs the trainer; fills the outcome. */
static void train(struct agent_job *job, const char *cfg_path, const char *model_dir, char *const *judge_dirs,
                  struct trainer_watch *r, Whet__V1__FinishJobRequest *fin, char *msg, size_t msg_len) {
    struct agent *a = job->agent;
    struct whet_err err;
    int out_pipe[2];
    char *log_path = xasprintf("%s/trainer.log", job->dir);
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0 || pipe2(out_pipe, O_CLOEXEC) != 0) {
        snprintf(msg, msg_len, "cannot set up the trainer's output: %s", strerror(errno));
        if (log_fd >= 0) close(log_fd);
        free(log_path);
        return;
    }
    /* One CPU thread per device the job holds: a simulated accelerator trains on one core, and a
     * resumed run matches the original step for step only with the same thread count. Passive waiting
     * keeps OpenMP from spinning on a node shared by several jobs. */
    char threads[32];
    json_int_t devices = json_integer_value(json_object_get(job->manifest, "devices"));
    snprintf(threads, sizeof threads, "OMP_NUM_THREADS=%d", devices > 0 ? (int)devices : 1);
    const char *argv[] = {a->opts->trainer, "train", "--config", cfg_path, NULL};
    struct agent_cuda_grant gpus;
    agent_cuda_grant(&gpus, job->device_mask);
    /* NCCL between a gang's GPU nodes: the interface the operator named for it (executor's environment). */
    const char *ifname = whet_env("NCCL_SOCKET_IFNAME", NULL);
    char *nccl_ifname = ifname && job->world_size > 1 ? xasprintf("NCCL_SOCKET_IFNAME=%s", ifname) : NULL;
    const char *env[16] = {"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", threads, "OMP_WAIT_POLICY=PASSIVE",
#ifdef __SANITIZE_ADDRESS__
                           /* A sanitizer build's LeakSanitizer stops the world with ptrace at exit, which
                            * the sandbox forbids: the trainer of such a build checks no leaks. */
                           "ASAN_OPTIONS=detect_leaks=0",
#endif
                           /* a GPU node's jobs see their own devices; on other nodes the list ends here */
                           a->cuda ? gpus.visible : NULL, "CUDA_DEVICE_ORDER=PCI_BUS_ID", nccl_ifname, NULL};
    /* a GPU gang's rank: NCCL's settings for the sandbox, and /dev/shm shared with the gang's ranks here */
    int nccl = a->cuda && job->world_size > 1;
    if (nccl) trainer_sandbox_nccl_env(env, WHET_ARRAY_LEN(env));
    const char *writable[] = {job->dir, NULL};
    /* the base model, the trainer binary, the judge models (read by the trainer too) */
    size_t n_judges = 0;
    while (judge_dirs && judge_dirs[n_judges]) n_judges++;
    const char **readonly = xcalloc(n_judges + 3, sizeof *readonly);
    readonly[0] = model_dir;
    readonly[1] = a->opts->trainer;
    for (size_t i = 0; i < n_judges; i++) readonly[2 + i] = judge_dirs[i];
    struct sandbox_spec spec;
    trainer_sandbox_spec(&spec, argv, env, job->dir, writable, readonly, a->cuda ? gpus.nodes : NULL,
                         json_object_get(job->manifest, "trainer"));
    const char **peers = trainer_sandbox_gang(&spec, json_object_get(job->manifest, "distributed"), a->gang_port_lo,
                                              a->gang_port_hi);
    spec.stdout_fd = out_pipe[1];
    spec.stderr_fd = log_fd;
    struct sandbox_child child;
    char *shm_dir = NULL;
    int handed = trainer_sandbox_hand_over(&spec, job->dir, model_dir, &err);
    if (handed == 0 && nccl && peers && !(shm_dir = trainer_sandbox_gang_shm(&spec, a->opts->work_dir, job->id,
                                                                            job->attempt, &err)))
        handed = -1;
    for (size_t i = 0; i < n_judges && handed == 0; i++)
        handed = trainer_sandbox_hand_over(&spec, job->dir, judge_dirs[i], &err);
    if (handed < 0 || sandbox_spawn(&spec, &child, &err) < 0) {
        char text[3 * WHET_ERR_MAX];
        snprintf(msg, msg_len, "the sandbox could not start the trainer: %s", whet_err_text(&err, text, sizeof text));
        close(out_pipe[0]);
        close(out_pipe[1]);
        close(log_fd);
        free(log_path);
        free(readonly);
        free(peers);
        free(nccl_ifname);
        trainer_sandbox_gang_shm_release(shm_dir);
        return;
    }
    close(out_pipe[1]);
    close(log_fd);
    agent_report_event(job, "info", "message", "Fine-tuning job started", NULL);

    char buf[65536];
    size_t have = 0;
    int signalled = 0, out_open = 1;
    for (;;) {
        int stop = atomic_load(&job->stop);
        if (stop == JOB_STOP && !signalled) {
            sandbox_signal(&child, SIGTERM); /* the trainer checkpoints and exits 0 */
            signalled = 1;
        } else if ((stop == JOB_CANCEL || (stop == JOB_ABANDON && !r->final_path)) && signalled < 2) {
            /* An abandoned trainer that has written its final model is let finish: the model may still
             * count (the scheduler takes a late success when nothing else has finished the job). */
            sandbox_kill(&child);
            signalled = 2;
        }
        struct pollfd pfd[2] = {{.fd = out_open ? out_pipe[0] : -1, .events = POLLIN},
                                {.fd = child.result_fd, .events = POLLIN}};
        poll(pfd, 2, 200);
        if (out_open && (pfd[0].revents & (POLLIN | POLLHUP))) {
            ssize_t n = read(out_pipe[0], buf + have, sizeof buf - 1 - have);
            if (n <= 0) {
                out_open = 0;
            } else {
                have += (size_t)n;
                buf[have] = 0;
                char *start = buf, *nl;
                while ((nl = strchr(start, '\n'))) {
                    *nl = 0;
                    handle_line(r, start, &r->last_metrics);
                    start = nl + 1;
                }
                have -= (size_t)(start - buf);
                memmove(buf, start, have);
                if (have == sizeof buf - 1) have = 0; /* a line longer than the buffer: not ours, drop it */
            }
        }
        if (!out_open && sandbox_pump(&child)) break;
    }
    close(out_pipe[0]);
    struct sandbox_result res;
    if (sandbox_wait(&child, &res, &err) < 0) res.reason = SANDBOX_SETUP;
    int stop = atomic_load(&job->stop);
    if (stop == JOB_CANCEL) {
        fin->outcome = WHET__V1__FINISH_JOB_REQUEST__OUTCOME__CANCELLED;
    } else if (res.reason == SANDBOX_OK && stop == JOB_STOP) {
        fin->outcome = WHET__V1__FINISH_JOB_REQUEST__OUTCOME__STOPPED;
    } else if (res.reason == SANDBOX_OK && (r->final_path || job->rank > 0)) {
        fin->outcome = WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED;
    } else if (stop == JOB_ABANDON) {
        /* Stopped here because the scheduler had ended the attempt: its trainer did not fail. */
        fin->outcome = WHET__V1__FINISH_JOB_REQUEST__OUTCOME__CANCELLED;
    } else {
        int n = job->world_size > 1 ? snprintf(msg, msg_len, "rank %d: ", job->rank) : 0;
        failure_message(msg + n, msg_len - (size_t)n, &res, log_path);
        if (res.reason == SANDBOX_SECCOMP) fin->error_code = "sandbox_violation";
    }
    free(log_path);
    free(readonly);
    free(peers);
    free(nccl_ifname);
    trainer_sandbox_gang_shm_release(shm_dir);
}

/* A job in the node's co-training process (cotrain.c): the same lines, the same outcomes as train(). */
static void cotrain_line(void *ctx, const char *line) {
    struct trainer_watch *r = ctx;
    handle_line(r, line, &r->last_metrics);
}

static double cotrain(struct agent_job *job, const char *cfg_path, const char *model_dir, char *const *judge_dirs,
                      struct trainer_watch *r, Whet__V1__FinishJobRequest *fin, char *msg, size_t msg_len) {
    struct agent_cotrain_result res;
    agent_cotrain_run(job, cfg_path, model_dir, judge_dirs, cotrain_line, r, &res);
    int stop = atomic_load(&job->stop);
    if (stop == JOB_CANCEL) fin->outcome = WHET__V1__FINISH_JOB_REQUEST__OUTCOME__CANCELLED;
    else if (stop == JOB_STOP && !r->final_path) fin->outcome = WHET__V1__FINISH_JOB_REQUEST__OUTCOME__STOPPED;
    else if (r->final_path) fin->outcome = WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED;
    else if (stop == JOB_ABANDON) fin->outcome = WHET__V1__FINISH_JOB_REQUEST__OUTCOME__CANCELLED;
    else snprintf(msg, msg_len, "%s", res.failure[0] ? res.failure : "the co-trained run ended without a model");
    return res.device_seconds;
}

/* The store the tenant's data goes through: sealed with the data key the scheduler put into the
 * manifest when encryption at rest is on (the key is then dropped from the manifest), the agent's
 * store as it is otherwise. */
static int tenant_store_open(struct agent_job *job, struct whet_err *err) {
    job->tenant_store = job->agent->store;
    json_t *dk = json_object_get(job->manifest, "data_key");
    const char *refused = json_string_value(json_object_get(job->manifest, "data_key_error"));
    if (refused) return whet_errf(err, "the tenant's data key is unavailable: %s", refused);
    if (!json_is_object(dk)) return 0;
    struct whet_data_key key;
    json_int_t id = json_integer_value(json_object_get(dk, "id"));
    const char *hex = json_string_value(json_object_get(dk, "key"));
    int rc = id > 0 && id <= UINT32_MAX && hex ? whet_data_key_from_hex((uint32_t)id, hex, &key, err)
                                                : whet_errf(err, "manifest: data_key needs an id and a key");
    if (rc == 0) job->tenant_store = objstore_encrypted(job->agent->store, &key);
    explicit_bzero(&key, sizeof key);
    json_object_del(job->manifest, "data_key");
    return rc;
}

static void *job_main(void *arg) {
    struct agent_job *job = arg;
    struct agent *a = job->agent;
    double t0 = whet_now_mono();
    Whet__V1__FinishJobRequest fin = WHET__V1__FINISH_JOB_REQUEST__INIT;
    fin.node_id = a->node_id;
    fin.job_id = job->id;
    fin.attempt = (uint32_t)job->attempt;
    fin.rank = (uint32_t)job->rank;
    fin.outcome = WHET__V1__FINISH_JOB_REQUEST__OUTCOME__FAILED;
    fin.error_code = "training_failed";
    char msg[600] = "";
    struct trainer_watch r = {.job = job};
    struct whet_err err;
    char *model_dir = NULL, *final_prefix = NULL, *final_metrics = NULL, *csv_key = NULL, csv_sha[65],
         **judge_dirs = NULL;
    double cotrain_seconds = -1; /* co-trained: its share of the shared process's device-seconds */

    char *cfg_path = tenant_store_open(job, &err) == 0 ? prepare(job, &model_dir, &judge_dirs, &err) : NULL;
    if (!cfg_path) {
        snprintf(msg, sizeof msg, "could not prepare the job: %s", err.msg);
        fin.error_code = "preparation_failed";
    } else if (atomic_load(&job->stop) == JOB_RUN && (job->cotrain_group[0] || agent_cotrain_eligible(job))) {
        cotrain_seconds = cotrain(job, cfg_path, model_dir, judge_dirs, &r, &fin, msg, sizeof msg);
    } else if (atomic_load(&job->stop) == JOB_RUN) {
        train(job, cfg_path, model_dir, judge_dirs, &r, &fin, msg, sizeof msg);
    } else {
        fin.outcome = atomic_load(&job->stop) == JOB_STOP ? WHET__V1__FINISH_JOB_REQUEST__OUTCOME__STOPPED
                                                          : WHET__V1__FINISH_JOB_REQUEST__OUTCOME__CANCELLED;
    }
    const char *output_prefix = json_string_value(json_object_get(job->manifest, "output_prefix"));
    if (fin.outcome == WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED && job->rank == 0) {
        final_prefix = xasprintf("%s/final", output_prefix);
        csv_key = xasprintf("%s/results.csv", output_prefix);
        csv_header(&r, 0);
        if (objstore_put_dir(job->tenant_store, final_prefix, r.final_path, &err) < 0 ||
            objstore_put(job->tenant_store, csv_key, r.csv.data, r.csv.len, &err) < 0) {
            agent_metrics_store_failed(AGENT_STORE_FINAL_UPLOAD);
            fin.outcome = WHET__V1__FINISH_JOB_REQUEST__OUTCOME__FAILED;
            fin.error_code = "upload_failed";
            snprintf(msg, sizeof msg, "the fine-tuned model could not be uploaded: %s", err.msg);
        } else {
            /* The finished model is the last checkpoint too, as OpenAI lists it; FinishJob records it. */
            int step = atomic_load(&job->step);
            if (step > r.last_checkpoint_step) {
                json_t *metrics = checkpoint_metrics(r.last_metrics);
                final_metrics = whet_json_compact(metrics, NULL);
                json_decref(metrics);
                fin.final_step = (uint32_t)step;
                fin.final_bytes = whet_dir_bytes(r.final_path);
                fin.final_metrics_json = final_metrics;
            }
            fin.final_object_prefix = final_prefix;
            fin.result_object_key = csv_key;
            fin.result_bytes = r.csv.len;
            whet_sha256_hex(r.csv.data, r.csv.len, csv_sha);
            fin.result_sha256 = csv_sha;
        }
    }
    if (fin.outcome != WHET__V1__FINISH_JOB_REQUEST__OUTCOME__FAILED) fin.error_code = "";
    fin.error_message = msg;
    Whet__V1__Usage usage = WHET__V1__USAGE__INIT;
    usage.device_type = a->device_type;
    /* device-seconds: the devices this process held (one per rank of a gang), times its seconds */
    usage.device_seconds = cotrain_seconds >= 0 ? cotrain_seconds : (whet_now_mono() - t0) * __builtin_popcount(job->device_mask);
    usage.trained_tokens = (uint64_t)atomic_load(&job->trained_tokens);
    usage.rollout_tokens = (uint64_t)r.rollout_tokens;
    fin.usage = &usage;
    fin.trained_tokens = usage.trained_tokens;
    /* An abandoned attempt's job was requeued elsewhere: it reports nothing, except a success, whose
     * model is uploaded (under this attempt's own prefix) and which the scheduler may still take, and a
     * gang rank's end: the scheduler ends a gang's started ranks only by their reports (gang.c; a failed
     * gang's cancel can arrive after the refusal that abandoned the rank), and meters each once. A rank the
     * lease expiry ended as lost already finds its row ended, and changes nothing. */
    if (atomic_load(&job->stop) != JOB_ABANDON || fin.outcome == WHET__V1__FINISH_JOB_REQUEST__OUTCOME__SUCCEEDED ||
        job->world_size > 1) {
        int rc = agent_call(a, "/whet.v1.Scheduler/FinishJob", &fin.base, &whet__v1__finish_job_response__descriptor,
                            10 * 60 * 1000, &err);
        if (rc == RPC_FAILED_PRECONDITION)
            log_warn("msg=\"the scheduler refused the end of an attempt that is no longer current\" job=%s attempt=%d "
                     "outcome=%d",
                     job->id, job->attempt, (int)fin.outcome);
        else if (rc != RPC_OK)
            log_error("msg=\"could not report the end of a job\" job=%s error=\"%s\"", job->id, err.msg);
    }
    log_info("msg=\"job attempt ended\" job=%s attempt=%d outcome=%d error=\"%s\"", job->id, job->attempt, (int)fin.outcome, msg);
    free(cfg_path);
    agent_release_model(a, model_dir);
    for (size_t i = 0; judge_dirs && judge_dirs[i]; i++) agent_release_model(a, judge_dirs[i]);
    free(judge_dirs);
    free(final_prefix);
    free(final_metrics);
    free(csv_key);
    free(r.final_path);
    whet_buf_free(&r.csv);
    json_decref(r.last_metrics);
    atomic_store(&job->done, 1);
    return NULL;
}

void agent_job_start(struct agent_job *job) { pthread_create(&job->thread, NULL, job_main, job); }

void agent_job_free(struct agent_job *job) {
    pthread_join(job->thread, NULL);
    if (job->tenant_store != job->agent->store) objstore_close(job->tenant_store);
    json_decref(job->manifest);
    free(job->dir);
    free(job);
}
