/* cotrain.c - co-training of a node's LoRA SFT, DPO and GRPO jobs: jobs of one group share ONE sandboxed
 * `whet train --cotrain` process (trainer.h: one copy of the base, each step one batched pass over all
 * their rows, each job its own optimizer, schedule, data order and checkpoints).
 *
 * Groups come from the scheduler: placement packs co-trainable jobs onto one device as a group
 * (scheduler/placement/cotrain.c) and each member's START manifest names it: "cotrain": {"group",
 * "members"}. The members share the device the first of them took (agent_cotrain_place) and the group
 * starts once every listed member has joined, or GROUP_WAIT_S after the first did (a member cancelled
 * before it started, or failing its preparation, does not hold the others up). The process's sandbox is
 * what each member's trainer would get alone, for all of them at once: its members' dirs (all in the
 * group's dir, work_dir/cotrain/GROUP), their judge models, their graders' policy (a python grader's
 * nested sandboxes). A member arriving after its group's process started (placed into the running group,
 * or a START delivered late) joins that process when its sandbox has what the member needs: its dir is
 * in the group's already, and the process takes its config from its --join-dir between two steps
 * (hand_to_process). When it cannot (the process ended meanwhile, or lacks the member's python nesting
 * or judge models), the member starts a new process of its group name on the same device. Without a
 * group in the manifest, the executor's
 * own opt-in (WHET_COTRAIN=1) groups LoRA SFT, DPO and GRPO jobs of one base model that start on this node
 * within WHET_COTRAIN_WINDOW_S seconds (default 3) of the first, each on its own device.
 *
 * Each job keeps its own thread (job.c): it prepares its dir and config as for a trainer of its own, joins
 * the group, reads its own event lines (the process writes them to out/events.jsonl in the job's dir) and
 * hands them to job.c, which uploads checkpoints and reports metrics and the end as it does for a trainer
 * of its own. The first job of a group is its leader: it waits out the window, starts the process on the
 * devices of all members, and a thread of the group's own waits for it, so that each job leaves as soon
 * as its own run ended (its last event line, "cotrain"). A job's stop (pause, cancel, abandon) creates
 * out/stop, which stops that job alone after a checkpoint. Metering: the trainer splits each shared
 * pass's time between the runs in it by their tokens and adds each run's own optimizer steps and
 * checkpoints (the "cotrain" event's device_seconds); the job is charged that times the devices the
 * process runs on. */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_internal.h"
#include "env.h"
#include "log.h"
#include "sandbox.h"
#include "trainer_sandbox.h"

#define COTRAIN_MAX 16
#define GROUP_WAIT_S 60 /* the longest a scheduler's group waits for its listed members */

struct cotrain_group {
    char *name;          /* the scheduler's group, NULL: formed by the window */
    char *dir;           /* the scheduler's group: its dir, holding its members' dirs (group_dir), bound
                            writable in the process's sandbox, so that a member joining it later is there */
    char *join_dir;      /* its process's --join-dir (in dir), NULL: none */
    int expected;        /* the scheduler's group: members listed in the manifest */
    struct agent *agent;
    char *model_dir;     /* held in the model cache, as are judge_dirs, until the group is gone: its
                            process may outlive the members that brought them */
    struct agent_job *members[COTRAIN_MAX];
    char *cfgs[COTRAIN_MAX];
    char *const *judges[COTRAIN_MAX]; /* each member's judge model dirs (NULL-terminated, the member's) */
    int n;
    int started, ended;  /* no more members join once started; ended: the process is gone */
    int devices;         /* held by its members when it started */
    struct sandbox_child child; /* the process, waited for by its own thread (watch) */
    char failure[600];   /* the process did not start or ended badly: why */
    int nested;          /* the process's sandbox runs python graders (trainer_sandbox_policy_all) */
    char **judge_dirs;   /* the judge model dirs bound in it (owned), n_judge_dirs of them */
    int n_judge_dirs;
    int refs;            /* members still in it, and the watching thread */
    struct cotrain_group *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static struct cotrain_group *groups; /* until their last member left; those not started take members */

int agent_cotrain_eligible(const struct agent_job *job) {
    if (strcmp(whet_env("WHET_COTRAIN", "0"), "1")) return 0;
    const json_t *t = json_object_get(job->manifest, "trainer");
    const char *method = json_string_value(json_object_get(t, "method"));
    return method && (!strcmp(method, "sft") || !strcmp(method, "dpo") || !strcmp(method, "grpo")) &&
           !json_is_null(json_object_get(t, "lora")) && !json_is_object(json_object_get(job->manifest, "distributed"));
}

/* The scheduler's group of a START manifest, or NULL. */
static const char *manifest_group(const json_t *manifest) {
    return json_string_value(json_object_get(json_object_get(manifest, "cotrain"), "group"));
}

/* The dir of the scheduler's group `name` on this node (the caller frees it), or NULL for a name that is
 * not one the scheduler gives (whet_random_id's). */
static char *group_dir(const struct agent *a, const char *name) {
    return strchr(name, '/') || name[0] == '.' ? NULL : xasprintf("%s/cotrain/%s", a->opts->work_dir, name);
}

uint32_t agent_cotrain_place(struct agent *a, struct agent_job *job) {
    const char *name = manifest_group(job->manifest);
    snprintf(job->cotrain_group, sizeof job->cotrain_group, "%s", name ? name : "");
    if (!name) return 0;
    /* its dir in its group's, where the group's process sees it even once it runs (joining) */
    char *in_group = group_dir(a, name);
    if (in_group) {
        char *dir = xasprintf("%s%s", in_group, strrchr(job->dir, '/'));
        free(job->dir);
        job->dir = dir;
    }
    free(in_group);
    for (const struct agent_job *j = a->jobs; j; j = j->next)
        if (!strcmp(j->cotrain_group, name) && j->device_mask) return j->device_mask;
    return 0;
}

static void wait_a_moment(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 200 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&changed, &lock, &ts);
}

/* Whether dir is one of list[0..n). */
static int listed(const char *const *list, int n, const char *dir) {
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i], dir)) return 1;
    return 0;
}

/* The leader's process: every member's config, their devices and dirs, and the sandbox each member's
 * trainer would have alone, all in one: every member's judge models bound, its graders' policy
 * (trainer_sandbox_policy_all). Returns 0 with *child running. */
static int spawn(struct cotrain_group *g, struct sandbox_child *child, int log_fd, struct whet_err *err) {
    struct agent_job *leader = g->members[0];
    struct agent *a = leader->agent;
    uint32_t mask = 0;
    const char **argv = xcalloc((size_t)(9 + 2 * g->n), sizeof *argv);
    const char **writable = xcalloc((size_t)(g->n + 1), sizeof *writable);
    const json_t **trainer_cfgs = xcalloc((size_t)g->n, sizeof *trainer_cfgs);
    int k = 0, n_judges = 0;
    char pass_tokens[16]; /* the bound the scheduler sized the group for (sizing.h's sz_cotrain_mib) */
    snprintf(pass_tokens, sizeof pass_tokens, "%d", a->cotrain_pass_tokens);
    argv[k++] = a->opts->trainer, argv[k++] = "train", argv[k++] = "--cotrain", argv[k++] = "--pass-tokens";
    argv[k++] = pass_tokens;
    for (int i = 0; i < g->n; i++) {
        argv[k++] = "--config", argv[k++] = g->cfgs[i];
        writable[i] = g->dir ? NULL : g->members[i]->dir; /* a scheduler's group: its dir holds theirs */
        mask |= g->members[i]->device_mask;
        trainer_cfgs[i] = json_object_get(g->members[i]->manifest, "trainer");
        for (int d = 0; g->judges[i] && g->judges[i][d]; d++) n_judges++;
    }
    if (g->dir) {
        writable[0] = g->dir;
        argv[k++] = "--join-dir", argv[k++] = g->join_dir;
    }
    /* the base model, the trainer binary, the members' judge models (each once) */
    const char **readonly = xcalloc((size_t)n_judges + 3, sizeof *readonly);
    int n_ro = 0;
    readonly[n_ro++] = g->model_dir, readonly[n_ro++] = a->opts->trainer;
    for (int i = 0; i < g->n; i++)
        for (int d = 0; g->judges[i] && g->judges[i][d]; d++)
            if (!listed(readonly + 2, n_ro - 2, g->judges[i][d])) readonly[n_ro++] = g->judges[i][d];
    char threads[32];
    int devices = __builtin_popcount(mask);
    snprintf(threads, sizeof threads, "OMP_NUM_THREADS=%d", devices > 0 ? devices : 1);
    struct agent_cuda_grant gpus;
    agent_cuda_grant(&gpus, mask);
    const char *env[] = {"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", threads, "OMP_WAIT_POLICY=PASSIVE",
#ifdef __SANITIZE_ADDRESS__
                         "ASAN_OPTIONS=detect_leaks=0", /* as job.c: LeakSanitizer's ptrace is forbidden */
#endif
                         a->cuda ? gpus.visible : NULL, "CUDA_DEVICE_ORDER=PCI_BUS_ID", NULL};
    struct sandbox_spec spec;
    trainer_sandbox_spec(&spec, argv, env, leader->dir, writable, readonly, a->cuda ? gpus.nodes : NULL, NULL);
    trainer_sandbox_policy_all(&spec, trainer_cfgs, g->n);
    spec.stdout_fd = log_fd; /* the events go to each job's out/events.jsonl */
    spec.stderr_fd = log_fd;
    /* what members joining later may need of it */
    g->nested = spec.allow_nested;
    g->n_judge_dirs = n_ro - 2;
    g->judge_dirs = xcalloc((size_t)g->n_judge_dirs + 1, sizeof *g->judge_dirs);
    for (int d = 2; d < n_ro; d++) {
        g->judge_dirs[d - 2] = xstrdup(readonly[d]);
        dir_cache_hold(a->models, readonly[d]);
    }
    int rc = g->join_dir ? whet_mkdir_p(g->join_dir, err) : 0;
    for (int i = 0; i < (g->dir ? 1 : g->n) && !rc; i++)
        rc = trainer_sandbox_hand_over(&spec, g->dir ? g->dir : g->members[i]->dir, g->model_dir, err);
    for (int d = 2; d < n_ro && !rc; d++) rc = trainer_sandbox_hand_over(&spec, leader->dir, readonly[d], err);
    if (!rc) rc = sandbox_spawn(&spec, child, err) < 0 ? -1 : 0;
    free(argv);
    free(writable);
    free(trainer_cfgs);
    free(readonly);
    return rc;
}

/* Whether the job may join group g, which has not started: the scheduler's group it names, else a
 * window group of its base model. */
static int joins(const struct cotrain_group *g, const char *name, const char *model_dir) {
    if (g->started || g->n == COTRAIN_MAX) return 0;
    return name ? g->name && !strcmp(g->name, name) : !g->name && !strcmp(g->model_dir, model_dir);
}

/* Joins (or opens, as its leader) the forming group of the job's scheduler group or base model. */
static struct cotrain_group *join(struct agent_job *job, const char *cfg_path, const char *model_dir,
                                   char *const *judge_dirs, int *leader) {
    const char *name = job->cotrain_group[0] ? job->cotrain_group : NULL;
    pthread_mutex_lock(&lock);
    struct cotrain_group *g = groups;
    int late = 0; /* its group's process already runs */
    for (; g && !joins(g, name, model_dir); g = g->next) late |= name && g->name && !strcmp(g->name, name);
    *leader = !g;
    if (!g) {
        g = xcalloc(1, sizeof *g);
        g->agent = job->agent;
        g->model_dir = xstrdup(model_dir);
        dir_cache_hold(g->agent->models, model_dir);
        if (name) {
            const json_t *members = json_object_get(json_object_get(job->manifest, "cotrain"), "members");
            g->name = xstrdup(name);
            g->expected = late ? 1 : (int)json_array_size(members);
            g->dir = group_dir(job->agent, name);
            if (g->dir) g->join_dir = xasprintf("%s/join-%s-%d", g->dir, job->id, job->attempt);
        }
        g->next = groups;
        groups = g;
    }
    g->members[g->n] = job;
    g->judges[g->n] = judge_dirs;
    g->cfgs[g->n++] = xstrdup(cfg_path);
    g->refs++;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    return g;
}

/* The running process of the job's scheduler group when its sandbox has what the job's own would (its
 * base model, its judge models, its python graders' nesting), held (refs); else NULL. */
static struct cotrain_group *join_running(const struct agent_job *job, const char *model_dir, char *const *judge_dirs) {
    int python = trainer_grader_runs_python(json_object_get(json_object_get(job->manifest, "trainer"), "grader"));
    pthread_mutex_lock(&lock);
    struct cotrain_group *g = groups;
    for (; g; g = g->next) {
        if (!g->join_dir || !g->started || g->ended || strcmp(g->name, job->cotrain_group) ||
            strcmp(g->model_dir, model_dir) || (python && !g->nested))
            continue;
        int bound = 1;
        for (int d = 0; judge_dirs && judge_dirs[d] && bound; d++)
            bound = listed((const char *const *)g->judge_dirs, g->n_judge_dirs, judge_dirs[d]);
        if (bound) break;
    }
    if (g) g->refs++;
    pthread_mutex_unlock(&lock);
    return g;
}

/* Hands the job (its config at cfg_path, in its dir in the group's) to the group's running process through
 * its --join-dir: 1 once the process took it, 0 when it did not (it ended first, or refused the config),
 * the request then withdrawn. */
static int hand_to_process(struct cotrain_group *g, struct agent_job *job, const char *cfg_path) {
    struct sandbox_spec spec;
    sandbox_spec_init(&spec);
    trainer_sandbox_policy(&spec, json_object_get(job->manifest, "trainer"));
    char *req = xasprintf("%s/%s-%d.join", g->join_dir, job->id, job->attempt);
    char *taken = xasprintf("%s/%s-%d.taken", g->join_dir, job->id, job->attempt), *line = xasprintf("%s\n", cfg_path);
    struct whet_err err;
    int ok = trainer_sandbox_hand_over(&spec, job->dir, NULL, &err) == 0 &&
             whet_write_file_atomic(req, line, strlen(line), &err) == 0;
    if (!ok) log_warn("msg=\"co-training: cannot hand the job to the running process\" job=%s error=\"%s\"", job->id, err.msg);
    pthread_mutex_lock(&lock);
    while (ok && !access(req, F_OK) && !g->ended) wait_a_moment();
    pthread_mutex_unlock(&lock);
    ok = ok && !access(taken, F_OK);
    unlink(req); /* not taken: the process is gone, none takes it now */
    if (ok) log_info("msg=\"co-training joined\" job=%s group=%s", job->id, g->name);
    free(req);
    free(taken);
    free(line);
    return ok;
}

static void close_group(struct cotrain_group *g) {
    pthread_mutex_lock(&lock);
    int last = --g->refs == 0;
    if (last) {
        struct cotrain_group **p = &groups;
        while (*p != g) p = &(*p)->next;
        *p = g->next;
    }
    pthread_mutex_unlock(&lock);
    if (!last) return;
    for (int i = 0; i < g->n; i++) free(g->cfgs[i]);
    for (int i = 0; i < g->n_judge_dirs; i++) agent_release_model(g->agent, g->judge_dirs[i]);
    free(g->judge_dirs);
    free(g->dir);
    free(g->join_dir);
    free(g->name);
    agent_release_model(g->agent, g->model_dir);
    free(g);
}

/* The group's process to its end: then `ended`, and `failure` when it ended badly. */
static void *watch(void *arg) {
    struct cotrain_group *g = arg;
    for (;;) {
        struct pollfd pfd = {.fd = g->child.result_fd, .events = POLLIN};
        poll(&pfd, 1, 500);
        if (sandbox_pump(&g->child)) break;
    }
    struct sandbox_result sr;
    struct whet_err err;
    int ok = sandbox_wait(&g->child, &sr, &err) == 0 && sr.reason == SANDBOX_OK;
    pthread_mutex_lock(&lock);
    if (!ok) snprintf(g->failure, sizeof g->failure, "the co-training process ended: %s", sr.message);
    g->ended = 1;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    close_group(g);
    return NULL;
}

/* The leader, once the window is over: the process, and the thread that waits for it. Called locked. */
static void start_group(struct cotrain_group *g, const char *log_path) {
    g->started = 1; /* no one joins now */
    uint32_t mask = 0; /* a scheduler's group shares one device, a window group has one per member */
    for (int i = 0; i < g->n; i++) mask |= g->members[i]->device_mask;
    g->devices = __builtin_popcount(mask);
    struct whet_err err;
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int rc = log_fd >= 0 ? spawn(g, &g->child, log_fd, &err) : whet_errf(&err, "%s: cannot open", log_path);
    if (log_fd >= 0) close(log_fd);
    pthread_t t;
    if (!rc) {
        g->refs++;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_create(&t, &attr, watch, g);
        pthread_attr_destroy(&attr);
        log_info("msg=\"co-training started\" leader=%s jobs=%d pass_tokens=%d", g->members[0]->id, g->n,
                 g->members[0]->agent->cotrain_pass_tokens);
    } else {
        snprintf(g->failure, sizeof g->failure, "the sandbox could not start the co-training process: %.500s", err.msg);
        g->ended = 1;
    }
    pthread_cond_broadcast(&changed);
}

/* What the process appended to the job's events file, a line at a time; 1 once its last line came. */
struct tail {
    int fd;
    char buf[65536];
    size_t have;
};

static int read_lines(struct tail *t, const char *path, void (*line)(void *, const char *), void *ctx, double *seconds,
                      char *error, size_t error_len) {
    int last = 0;
    if (t->fd < 0) t->fd = open(path, O_RDONLY | O_CLOEXEC);
    for (ssize_t n; t->fd >= 0 && (n = read(t->fd, t->buf + t->have, sizeof t->buf - 1 - t->have)) > 0;) {
        t->have += (size_t)n;
        t->buf[t->have] = 0;
        char *start = t->buf, *nl;
        while ((nl = strchr(start, '\n'))) {
            *nl = 0;
            json_t *ev = json_loads(start, 0, NULL);
            const char *type = json_string_value(json_object_get(ev, "type"));
            if (type && !strcmp(type, "cotrain")) {
                *seconds = json_number_value(json_object_get(ev, "device_seconds"));
                last = 1;
            } else if (type && !strcmp(type, "error")) {
                snprintf(error, error_len, "%s", json_string_value(json_object_get(ev, "message")));
            } else {
                line(ctx, start);
            }
            json_decref(ev);
            start = nl + 1;
        }
        t->have -= (size_t)(start - t->buf);
        memmove(t->buf, start, t->have);
        if (t->have == sizeof t->buf - 1) t->have = 0; /* a line longer than the buffer: not ours */
    }
    return last;
}

void agent_cotrain_run(struct agent_job *job, const char *cfg_path, const char *model_dir, char *const *judge_dirs,
                       void (*line)(void *ctx, const char *line), void *ctx, struct agent_cotrain_result *res) {
    memset(res, 0, sizeof *res);
    double window = atof(whet_env("WHET_COTRAIN_WINDOW_S", "3"));
    int leader = 0;
    /* a member of a group whose process runs joins it when it can; else it starts a process of its own */
    struct cotrain_group *g = job->cotrain_group[0] ? join_running(job, model_dir, judge_dirs) : NULL;
    if (g && !hand_to_process(g, job, cfg_path)) {
        close_group(g);
        g = NULL;
    }
    if (!g) g = join(job, cfg_path, model_dir, judge_dirs, &leader);
    if (g->name) window = GROUP_WAIT_S; /* or until every listed member joined */
    char *events = xasprintf("%s/out/events.jsonl", job->dir), *stop_file = xasprintf("%s/out/stop", job->dir);
    char *log_path = xasprintf("%s/trainer.log", job->dir);
    struct tail *t = xcalloc(1, sizeof *t);
    t->fd = -1;
    double t0 = whet_now_mono(), seconds = 0;
    char error[600] = ""; /* its run's own error, when it failed */
    pthread_mutex_lock(&lock);
    while (!g->started) {
        if (leader && (whet_now_mono() - t0 >= window || g->n == COTRAIN_MAX || (g->name && g->n >= g->expected)))
            start_group(g, log_path);
        else wait_a_moment();
    }
    res->members = g->n;
    int devices = g->devices, running = !g->ended;
    pthread_mutex_unlock(&lock);
    if (running) agent_report_event(job, "info", "message", "Fine-tuning job started", NULL);
    pthread_mutex_lock(&lock);
    for (int done = 0; !done;) {
        int ended = g->ended;
        pthread_mutex_unlock(&lock);
        if (atomic_load(&job->stop) != JOB_RUN) {
            /* this job alone stops; again each time round, as the process clears a stop file it finds at start */
            int fd = open(stop_file, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            if (fd >= 0) close(fd);
        }
        /* its last line, or the process's end (after which nothing more comes) */
        done = read_lines(t, events, line, ctx, &seconds, error, sizeof error) || ended;
        pthread_mutex_lock(&lock);
        if (!done) wait_a_moment();
    }
    snprintf(res->failure, sizeof res->failure, "%s", error[0] ? error : g->failure);
    pthread_mutex_unlock(&lock);
    res->device_seconds = seconds * (devices > 0 ? devices : 1);
    if (t->fd >= 0) close(t->fd);
    close_group(g);
    free(t);
    free(events);
    free(stop_file);
    free(log_path);
}
