/* cmd_model.c - `whet model init`: write a small random model in Hugging Face layout
 * (executor/train/model/model_init.c does the work). `whet model register` belongs to the control plane:
 * it plugs in by defining cmd_model_register() in its own cli file. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "model_init.h"

/* Defined by the control plane's cli file when it is built in. */
int cmd_model_register(int argc, char **argv) __attribute__((weak));

static void usage(FILE *out) {
    fprintf(out,
            "usage: whet model init --out DIR [--preset tiny] [options]\n"
            "       whet model register NAME DIR\n\n"
            "init writes config.json, model.safetensors (F32), tokenizer.json and tokenizer_config.json of a\n"
            "small randomly initialised model; the same options always give byte-identical files.\n\n"
            "options of init:\n"
            "  --out DIR            the model dir to write (created)\n"
            "  --preset NAME        starting point: tiny (Qwen3, 4 layers, hidden 256, ~3.7M parameters)\n"
            "  --arch ARCH          qwen3, qwen2, llama or mistral\n"
            "  --layers N           decoder layers\n"
            "  --hidden N           hidden size\n"
            "  --heads N            attention heads\n"
            "  --kv-heads N         key/value heads (divides --heads)\n"
            "  --head-dim N         head size (default hidden / heads for a changed --hidden or --heads)\n"
            "  --intermediate N     SwiGLU width\n"
            "  --vocab N            vocabulary size (the tiny BPE tokenizer is trained to it)\n"
            "  --seed S             random seed of the weights (default 0)\n"
            "  -h, --help           this help\n");
}

static int parse_int(const char *opt, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) {
        fprintf(stderr, "whet model init: %s: expected an integer in [%lld, %lld], got \"%s\"\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int model_init_main(int argc, char **argv) {
    static const struct option longopts[] = {
        {"out", required_argument, 0, 'o'},      {"preset", required_argument, 0, 'p'},
        {"arch", required_argument, 0, 'a'},     {"layers", required_argument, 0, 'l'},
        {"hidden", required_argument, 0, 'H'},   {"heads", required_argument, 0, 'n'},
        {"kv-heads", required_argument, 0, 'k'}, {"head-dim", required_argument, 0, 'd'},
        {"intermediate", required_argument, 0, 'i'}, {"vocab", required_argument, 0, 'v'},
        {"seed", required_argument, 0, 's'},     {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *out = NULL;
    struct model_init_opts o;
    struct whet_err err;
    model_init_preset(&o, "tiny", &err);
    int explicit_head_dim = 0, explicit_kv = 0, shape_changed = 0, c;
    long long v;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'p':
            if (model_init_preset(&o, optarg, &err)) {
                whet_err_report("whet model init", &err);
                return 2;
            }
            break;
        case 'a':
            if (!strcmp(optarg, "qwen3")) o.arch = ARCH_QWEN3;
            else if (!strcmp(optarg, "qwen2")) o.arch = ARCH_QWEN2;
            else if (!strcmp(optarg, "llama")) o.arch = ARCH_LLAMA;
            else if (!strcmp(optarg, "mistral")) o.arch = ARCH_MISTRAL;
            else {
                fprintf(stderr, "whet model init: --arch: \"%s\" is unknown (qwen3, qwen2, llama, mistral)\n", optarg);
                return 2;
            }
            break;
        case 'l': if (parse_int("--layers", optarg, 1, 1024, &v)) return 2; o.layers = (int)v; break;
        case 'H': if (parse_int("--hidden", optarg, 1, 65536, &v)) return 2; o.hidden = (int)v; shape_changed = 1; break;
        case 'n': if (parse_int("--heads", optarg, 1, 1024, &v)) return 2; o.heads = (int)v; shape_changed = 1; break;
        case 'k': if (parse_int("--kv-heads", optarg, 1, 1024, &v)) return 2; o.kv_heads = (int)v; explicit_kv = 1; break;
        case 'd': if (parse_int("--head-dim", optarg, 2, 1024, &v)) return 2; o.head_dim = (int)v; explicit_head_dim = 1; break;
        case 'i': if (parse_int("--intermediate", optarg, 1, 1 << 20, &v)) return 2; o.intermediate = (int)v; break;
        case 'v': if (parse_int("--vocab", optarg, 1, 16 << 20, &v)) return 2; o.vocab = (int)v; break;
        case 's': if (parse_int("--seed", optarg, 0, (long long)1 << 62, &v)) return 2; o.seed = (uint64_t)v; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!out || optind < argc) {
        fprintf(stderr, "whet model init: %s\n", out ? "unexpected arguments" : "--out DIR is required");
        return 2;
    }
    if (shape_changed && !explicit_head_dim) o.head_dim = 0; /* hidden / heads */
    if (!explicit_kv && o.kv_heads > o.heads) o.kv_heads = o.heads; /* the preset's 2 kv heads */
    if (model_init_write(out, &o, &err)) {
        whet_err_report("whet model init", &err);
        return 1;
    }
    return 0;
}

static int cmd_model(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "init")) return model_init_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "register")) {
        if (cmd_model_register) return cmd_model_register(argc - 1, argv + 1);
        fprintf(stderr, "whet model register: not built into this binary\n");
        return 1;
    }
    fprintf(stderr, "whet model: unknown subcommand \"%s\"\nhint: run `whet model --help`\n", argv[1]);
    return 2;
}
WHET_COMMAND("model", cmd_model, "create (init) or register base models")
