/* cmd_score.c - `whet score --model DIR [--adapter DIR] [--device DEV] --data FILE.jsonl`: the loss of token sequences.
 *
 * Thin: options here, the work in executor/train/sampling/sampler.c. */
#include <getopt.h>
#include <stdio.h>

#include "commands.h"
#include "sampler.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: whet score --model DIR [--adapter DIR] [--device DEV] --data FILE.jsonl\n\n"
            "Reads lines {\"input_ids\": [...]} and prints one line per example {\"index\":i,\"loss\":L,\"tokens\":n}:\n"
            "L is the mean next-token negative log-likelihood over the n predicted positions (null when a\n"
            "line has fewer than 2 ids).\n\n"
            "options:\n"
            "  --model DIR     a Hugging Face model dir (config.json, safetensors)\n"
            "  --adapter DIR   a PEFT LoRA adapter dir to apply\n"
            "  --data FILE     the JSONL file of token ids\n"
            "  --device DEV    cpu (the default), cuda or cuda:N\n"
            "  -h, --help      this text\n");
}

static int cmd_score(int argc, char **argv) {
    static const struct option options[] = {{"model", required_argument, 0, 'm'},
                                            {"adapter", required_argument, 0, 'a'},
                                            {"data", required_argument, 0, 'd'},
                                            {"device", required_argument, 0, 'D'},
                                            {"help", no_argument, 0, 'h'},
                                            {0}};
    const char *model = NULL, *adapter = NULL, *data = NULL, *device = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "m:a:d:h", options, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'a': adapter = optarg; break;
        case 'd': data = optarg; break;
        case 'D': device = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!model || !data || optind != argc) {
        usage(stderr);
        return 2;
    }
    struct whet_err err;
    if (score_run(model, adapter, device, data, stdout, &err)) {
        whet_err_report("whet score", &err);
        return 1;
    }
    return 0;
}
WHET_COMMAND("score", cmd_score, "print the loss of token sequences under a model (and adapter)")
