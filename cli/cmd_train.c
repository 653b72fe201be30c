/* cmd_train.c - `whet train --config FILE.json`: the trainer executors run (usable alone); with --cotrain
 * and several configs, SFT, DPO and GRPO LoRA runs of one base model co-trained on one copy of it (trainer_cotrain).
 *
 * Thin: parses the options, installs the SIGTERM/SIGINT handlers that ask the run to checkpoint and
 * stop, and hands over to executor/train/trainer.c. */
#include <dirent.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "model_plan.h"
#include "trainer.h"

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: whet train --config FILE.json [--quiet]\n"
            "       whet train --cotrain --config FILE.json [--config FILE.json ...] [--join-dir DIR]\n"
            "                        [--pass-tokens N] [--quiet]\n\n"
            "Fine-tunes a model as the trainer config says (method, model, training_file, output_dir, lora,\n"
            "hyperparameters, seed, checkpoint_every_steps, eval_every_steps, max_steps, resume_from; for\n"
            "grpo also grader, rollout and eval_samples).\n"
            "Writes OUTPUT_DIR/metrics.jsonl, OUTPUT_DIR/checkpoints/step-N/ and OUTPUT_DIR/final/; prints one\n"
            "JSON event per line on stdout (data, metrics, checkpoint, final) and progress on stderr.\n"
            "SIGTERM or SIGINT: the step under way finishes, a checkpoint is written, exit status 0.\n\n"
            "--cotrain: the configs' SFT, DPO and GRPO LoRA runs (one base model) share one copy of it, each step\n"
            "passes of up to --pass-tokens over all the SFT and DPO runs' rows (a GRPO run steps on its own); each\n"
            "run's events go to its OUTPUT_DIR/events.jsonl, the last one {\"type\":\"cotrain\",\"tokens\",\n"
            "\"device_seconds\"}; creating OUTPUT_DIR/stop stops that run alone (after a checkpoint, as SIGTERM does\n"
            "for all); the exit status is 1 when any run failed. --join-dir: runs join while it runs: before each\n"
            "step, each DIR/NAME.join (a config's path) becomes DIR/NAME.taken and its run trains from that step\n"
            "on (DIR/NAME.refused: its config did not load).\n\n"
            "options:\n"
            "  --config FILE   the trainer config (JSON); with --cotrain, one per run\n"
            "  --cotrain       co-train the configs' runs\n"
            "  --join-dir DIR  with --cotrain, runs join from DIR while it runs\n"
            "  --pass-tokens N with --cotrain, a shared pass's tokens at most (whole rows; default %d): bounds\n"
            "                  the activations whatever the runs\n"
            "  --quiet         no progress lines on stderr\n"
            "  -h, --help      this text\n",
            MP_COTRAIN_PASS_TOKENS);
}

/* A co-trained run of cmd_train's: its config (loaded: it did), its job, its stop file and its config's path. */
struct co_run {
    struct trainer_config cfg;
    int loaded;
    struct trainer_cotrain_job job;
    char *stop_file, *path;
};

/* Loads the run of config `path` into r: its events file opened (truncated), an earlier stop request
 * gone. Returns 0, or -1 with a message printed. */
static int co_run_open(struct co_run *r, const char *path, int quiet) {
    struct whet_err err;
    r->path = xstrdup(path);
    if (trainer_config_load(&r->cfg, path, &err)) {
        whet_err_report("whet train", &err);
        return -1;
    }
    r->loaded = 1;
    char *events = xasprintf("%s/events.jsonl", r->cfg.output_dir);
    FILE *f = whet_mkdir_p(r->cfg.output_dir, &err) ? NULL : fopen(events, "w");
    if (!f) fprintf(stderr, "whet train: %s: cannot open for writing\n", events);
    free(events);
    r->stop_file = xasprintf("%s/stop", r->cfg.output_dir);
    unlink(r->stop_file); /* a request left by an earlier run */
    r->job = (struct trainer_cotrain_job){.cfg = &r->cfg, .io = {f, quiet ? NULL : stderr, &stop_requested, r->stop_file}};
    return f ? 0 : -1;
}

/* Its outcome (1: failed, printed), and everything freed. */
static int co_run_close(struct co_run *r) {
    int failed = 0;
    if (r->loaded && r->job.rc) {
        fprintf(stderr, "whet train: %s: ", r->path);
        whet_err_report("co-trained run failed", &r->job.err);
        failed = 1;
    }
    if (r->job.io.events) fclose(r->job.io.events);
    if (r->loaded) trainer_config_free(&r->cfg);
    free(r->stop_file);
    free(r->path);
    return failed;
}

/* The runs joining through --join-dir (trainer_cotrain_joins): each its own allocation, as the trainer
 * holds their jobs. */
struct joining {
    const char *dir;
    int quiet;
    struct co_run **runs;
    int n;
};

/* The next DIR/NAME.join whose config loads, as NAME.taken; one that does not becomes NAME.refused. */
static struct trainer_cotrain_job *next_join(void *ctx) {
    struct joining *jn = ctx;
    DIR *d = opendir(jn->dir);
    struct trainer_cotrain_job *got = NULL;
    for (struct dirent *e; d && !got && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".join")) continue;
        char *req = xasprintf("%s/%s", jn->dir, e->d_name), path[4096] = "";
        FILE *f = fopen(req, "r");
        if (f && fgets(path, sizeof path, f)) path[strcspn(path, "\n")] = 0;
        if (f) fclose(f);
        struct co_run *r = xcalloc(1, sizeof *r);
        int ok = path[0] && co_run_open(r, path, jn->quiet) == 0;
        char *ack = xasprintf("%s/%.*s.%s", jn->dir, (int)(len - 5), e->d_name, ok ? "taken" : "refused");
        if (rename(req, ack) != 0) ok = 0; /* the executor took it back: it is not ours */
        if (ok) {
            jn->runs = xrealloc(jn->runs, (size_t)(jn->n + 1) * sizeof *jn->runs);
            jn->runs[jn->n++] = r;
            got = &r->job;
        } else {
            co_run_close(r);
            free(r);
        }
        free(req);
        free(ack);
    }
    if (d) closedir(d);
    return got;
}

/* The runs of `configs` co-trained, and those joining through join_dir (NULL: none); 0 when every one
 * ended well. */
static int cotrain(char **configs, int n, const char *join_dir, int pass_tokens, int quiet) {
    struct co_run *runs = xcalloc((size_t)n, sizeof *runs);
    struct trainer_cotrain_job *jobs = xcalloc((size_t)n, sizeof *jobs);
    struct joining jn = {join_dir, quiet, NULL, 0};
    struct trainer_cotrain_joins joins = {next_join, &jn};
    struct whet_err err;
    int rc = 0, loaded = 0; /* runs opened, or tried */
    for (; loaded < n && !rc; loaded++) {
        if (co_run_open(&runs[loaded], configs[loaded], quiet)) rc = 2;
        jobs[loaded] = runs[loaded].job;
    }
    if (!rc && trainer_cotrain(jobs, n, pass_tokens, join_dir ? &joins : NULL, &err)) {
        whet_err_report("whet train", &err);
        rc = 1;
    }
    for (int i = 0; i < loaded; i++) {
        runs[i].job.rc = jobs[i].rc, runs[i].job.err = jobs[i].err;
        if (co_run_close(&runs[i]) && !rc) rc = 1;
    }
    for (int i = 0; i < jn.n; i++) {
        if (co_run_close(jn.runs[i]) && !rc) rc = 1;
        free(jn.runs[i]);
    }
    free(jn.runs);
    free(jobs);
    free(runs);
    return rc;
}

static int cmd_train(int argc, char **argv) {
    static const struct option options[] = {{"config", required_argument, 0, 'c'}, {"cotrain", no_argument, 0, 'C'},
                                            {"join-dir", required_argument, 0, 'J'},
                                            {"pass-tokens", required_argument, 0, 'p'},
                                            {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'}, {0}};
    char **configs = xcalloc((size_t)argc, sizeof *configs);
    const char *join_dir = NULL;
    int n_configs = 0, quiet = 0, co = 0, pass_tokens = 0, c;
    while ((c = getopt_long(argc, argv, "c:qh", options, NULL)) != -1) {
        switch (c) {
        case 'c': configs[n_configs++] = optarg; break;
        case 'C': co = 1; break;
        case 'J': join_dir = optarg; break;
        case 'p':
            pass_tokens = atoi(optarg);
            if (pass_tokens < 1) {
                fprintf(stderr, "whet train: --pass-tokens %s: a number of tokens of at least 1\n", optarg);
                free(configs);
                return 2;
            }
            break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); free(configs); return 0;
        default: usage(stderr); free(configs); return 2;
        }
    }
    if (!n_configs || optind != argc || ((n_configs > 1 || join_dir) && !co)) {
        usage(stderr);
        free(configs);
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (co) {
        int rc = cotrain(configs, n_configs, join_dir, pass_tokens, quiet);
        free(configs);
        return rc;
    }
    struct trainer_config cfg;
    struct whet_err err;
    int rc = trainer_config_load(&cfg, configs[0], &err);
    free(configs);
    if (rc) {
        whet_err_report("whet train", &err);
        return 2;
    }
    struct trainer_io io = {stdout, quiet ? NULL : stderr, &stop_requested, NULL};
    int stopped = 0;
    rc = trainer_run(&cfg, &io, &stopped, &err);
    trainer_config_free(&cfg);
    if (rc) {
        whet_err_report("whet train", &err);
        return 1;
    }
    if (stopped) fprintf(stderr, "whet train: stopped on request after a checkpoint\n");
    return 0;
}
WHET_COMMAND("train", cmd_train, "fine-tune a model from a trainer config (SFT, DPO or GRPO, LoRA or full)")
