/* cmd_train.c - `whet train --config FILE.json`: the trainer executors run (usable alone); with --cotrain
 * and several configs, SFT, DPO and GRPO LoRA runs of one base model co-trained on one copy of it (trainer_cotrain).
 *
 * Thin: parses the options, installs the SIGTERM/SIGINT handlers that ask the run to checkpoint and
 * stop, and hands over to executor/train/trainer.c. */
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
            "       whet train --cotrain --config FILE.json [--config FILE.json ...] [--pass-tokens N] [--quiet]\n\n"
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
            "for all); the exit status is 1 when any run failed.\n\n"
            "options:\n"
            "  --config FILE   the trainer config (JSON); with --cotrain, one per run\n"
            "  --cotrain       co-train the configs' runs\n"
            "  --pass-tokens N with --cotrain, a shared pass's tokens at most (whole rows; default %d): bounds\n"
            "                  the activations whatever the runs\n"
            "  --quiet         no progress lines on stderr\n"
            "  -h, --help      this text\n",
            MP_COTRAIN_PASS_TOKENS);
}

/* The runs of `configs` co-trained; 0 when every one ended well. */
static int cotrain(char **configs, int n, int pass_tokens, int quiet) {
    struct trainer_config *cfgs = xcalloc((size_t)n, sizeof *cfgs);
    struct trainer_cotrain_job *jobs = xcalloc((size_t)n, sizeof *jobs);
    char **stop_files = xcalloc((size_t)n, sizeof *stop_files);
    struct whet_err err;
    int rc = 0, loaded = 0;
    for (; loaded < n && !rc; loaded++) {
        if (trainer_config_load(&cfgs[loaded], configs[loaded], &err)) {
            whet_err_report("whet train", &err);
            rc = 2;
            break;
        }
        char *events = xasprintf("%s/events.jsonl", cfgs[loaded].output_dir);
        FILE *f = whet_mkdir_p(cfgs[loaded].output_dir, &err) ? NULL : fopen(events, "w");
        if (!f) fprintf(stderr, "whet train: %s: cannot open for writing\n", events), rc = 2;
        free(events);
        stop_files[loaded] = xasprintf("%s/stop", cfgs[loaded].output_dir);
        unlink(stop_files[loaded]); /* a request left by an earlier run */
        jobs[loaded] = (struct trainer_cotrain_job){
            .cfg = &cfgs[loaded], .io = {f, quiet ? NULL : stderr, &stop_requested, stop_files[loaded]}};
    }
    if (!rc && trainer_cotrain(jobs, n, pass_tokens, &err)) {
        whet_err_report("whet train", &err);
        rc = 1;
    }
    for (int i = 0; i < loaded; i++) {
        if (jobs[i].rc) {
            fprintf(stderr, "whet train: %s: ", configs[i]);
            whet_err_report("co-trained run failed", &jobs[i].err);
            rc = 1;
        }
        if (jobs[i].io.events) fclose(jobs[i].io.events);
        trainer_config_free(&cfgs[i]);
        free(stop_files[i]);
    }
    free(stop_files);
    free(jobs);
    free(cfgs);
    return rc;
}

static int cmd_train(int argc, char **argv) {
    static const struct option options[] = {{"config", required_argument, 0, 'c'}, {"cotrain", no_argument, 0, 'C'},
                                            {"pass-tokens", required_argument, 0, 'p'},
                                            {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'}, {0}};
    char **configs = xcalloc((size_t)argc, sizeof *configs);
    int n_configs = 0, quiet = 0, co = 0, pass_tokens = 0, c;
    while ((c = getopt_long(argc, argv, "c:qh", options, NULL)) != -1) {
        switch (c) {
        case 'c': configs[n_configs++] = optarg; break;
        case 'C': co = 1; break;
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
    if (!n_configs || optind != argc || (n_configs > 1 && !co)) {
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
        int rc = cotrain(configs, n_configs, pass_tokens, quiet);
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
