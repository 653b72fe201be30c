/* cmd_sample.c - `whet sample --model DIR [--adapter DIR] --prompt TEXT …`: generate a reply.
 *
 * Thin: options here, the work in executor/train/sampling/sampler.c. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "sampler.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: whet sample --model DIR [--adapter DIR] --prompt TEXT [--max-tokens N] [--temperature T]\n"
            "                   [--top-k K] [--top-p P] [--seed S] [--device DEV]\n\n"
            "Renders TEXT as a user turn with the model's chat template and prints the generated reply on\n"
            "stdout (KV-cache decoding; the same seed gives the same text).\n\n"
            "options:\n"
            "  --model DIR        a Hugging Face model dir\n"
            "  --adapter DIR      a PEFT LoRA adapter dir to apply\n"
            "  --prompt TEXT      the user message\n"
            "  --max-tokens N     at most N new tokens (default 128)\n"
            "  --temperature T    0 for greedy decoding (default 0.7)\n"
            "  --top-k K          draw only from the K most likely tokens; 0: no cut (default 0)\n"
            "  --top-p P          nucleus sampling mass in (0, 1], applied after --top-k (default 1)\n"
            "  --seed S           random seed (default 0)\n"
            "  --device DEV       cpu (the default), cuda or cuda:N\n"
            "  -h, --help         this text\n");
}

static int parse_number(const char *s, double min, double max, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= min && v <= max)) return -1;
    *out = v;
    return 0;
}

static int cmd_sample(int argc, char **argv) {
    static const struct option options[] = {{"model", required_argument, 0, 'm'},
                                            {"adapter", required_argument, 0, 'a'},
                                            {"prompt", required_argument, 0, 'p'},
                                            {"max-tokens", required_argument, 0, 'n'},
                                            {"temperature", required_argument, 0, 't'},
                                            {"top-k", required_argument, 0, 'k'},
                                            {"top-p", required_argument, 0, 'P'},
                                            {"seed", required_argument, 0, 's'},
                                            {"device", required_argument, 0, 'D'},
                                            {"help", no_argument, 0, 'h'},
                                            {0}};
    struct sample_opts o = {.max_tokens = 128, .temperature = 0.7f, .top_p = 1.0f};
    double v;
    int c;
    while ((c = getopt_long(argc, argv, "m:a:p:n:t:k:P:s:h", options, NULL)) != -1) {
        switch (c) {
        case 'm': o.model_dir = optarg; break;
        case 'a': o.adapter_dir = optarg; break;
        case 'D': o.device = optarg; break;
        case 'p': o.prompt = optarg; break;
        case 'n':
            if (parse_number(optarg, 1, 1 << 20, &v) || v != (int)v) {
                fprintf(stderr, "whet sample: --max-tokens: must be an integer in [1, 1048576]\n");
                return 2;
            }
            o.max_tokens = (int)v;
            break;
        case 't':
            if (parse_number(optarg, 0, 100, &v)) {
                fprintf(stderr, "whet sample: --temperature: must be a number in [0, 100]\n");
                return 2;
            }
            o.temperature = (float)v;
            break;
        case 'k':
            if (parse_number(optarg, 0, 1 << 30, &v) || v != (int)v) {
                fprintf(stderr, "whet sample: --top-k: must be an integer >= 0\n");
                return 2;
            }
            o.top_k = (int)v;
            break;
        case 'P':
            if (parse_number(optarg, 1e-6, 1, &v)) {
                fprintf(stderr, "whet sample: --top-p: must be a number in (0, 1]\n");
                return 2;
            }
            o.top_p = (float)v;
            break;
        case 's':
            if (parse_number(optarg, 0, 9007199254740992.0, &v) || v != (double)(long long)v) {
                fprintf(stderr, "whet sample: --seed: must be a non-negative integer\n");
                return 2;
            }
            o.seed = (uint64_t)v;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!o.model_dir || !o.prompt || optind != argc) {
        usage(stderr);
        return 2;
    }
    struct whet_err err;
    char *text = NULL;
    int n = 0;
    if (sample_run(&o, &text, &n, &err)) {
        whet_err_report("whet sample", &err);
        return 1;
    }
    fwrite(text, 1, strlen(text), stdout);
    fputc('\n', stdout);
    free(text);
    return 0;
}
WHET_COMMAND("sample", cmd_sample, "generate a reply from a model (and adapter) with a KV cache")
