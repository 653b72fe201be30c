/* cmd_train.c - `whet train --config FILE.json`: the trainer executors run (usable alone).
 *
 * Thin: parses the options, installs the SIGTERM/SIGINT handlers that ask the run to checkpoint and
 * stop, and hands over to executor/train/trainer.c. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "trainer.h"

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: whet train --config FILE.json [--quiet]\n\n"
            "Fine-tunes a model as the trainer config says (method, model, training_file, output_dir, lora,\n"
            "hyperparameters, seed, checkpoint_every_steps, eval_every_steps, max_steps, resume_from; for\n"
            "grpo also grader, rollout and eval_samples).\n"
            "Writes OUTPUT_DIR/metrics.jsonl, OUTPUT_DIR/checkpoints/step-N/ and OUTPUT_DIR/final/; prints one\n"
            "JSON event per line on stdout (data, metrics, checkpoint, final) and progress on stderr.\n"
            "SIGTERM or SIGINT: the step under way finishes, a checkpoint is written, exit status 0.\n\n"
            "options:\n"
            "  --config FILE   the trainer config (JSON)\n"
            "  --quiet         no progress lines on stderr\n"
            "  -h, --help      this text\n");
}

static int cmd_train(int argc, char **argv) {
    static const struct option options[] = {
        {"config", required_argument, 0, 'c'}, {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'}, {0}};
    const char *config = NULL;
    int quiet = 0, c;
    while ((c = getopt_long(argc, argv, "c:qh", options, NULL)) != -1) {
        switch (c) {
        case 'c': config = optarg; break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!config || optind != argc) {
        usage(stderr);
        return 2;
    }
    struct trainer_config cfg;
    struct whet_err err;
    if (trainer_config_load(&cfg, config, &err)) {
        whet_err_report("whet train", &err);
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct trainer_io io = {stdout, quiet ? NULL : stderr, &stop_requested};
    int stopped = 0;
    int rc = trainer_run(&cfg, &io, &stopped, &err);
    trainer_config_free(&cfg);
    if (rc) {
        whet_err_report("whet train", &err);
        return 1;
    }
    if (stopped) fprintf(stderr, "whet train: stopped on request after a checkpoint\n");
    return 0;
}
WHET_COMMAND("train", cmd_train, "fine-tune a model from a trainer config (SFT, DPO or GRPO, LoRA or full)")
