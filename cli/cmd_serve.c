/* cmd_serve.c - `whet serve --model DIR [--adapter NAME=DIR]… [--http HOST:PORT]`: a model worker.
 *
 * Thin: options here, the work in executor/serve (serve_http.c, serve_engine.c). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "log.h"
#include "serve_http.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: whet serve --model DIR [--name NAME] [--adapter NAME=DIR]... [--http HOST:PORT]\n"
            "                  [--slots N] [--max-len N] [--cache N] [--device DEV] [--address-file FILE]\n"
            "                  [--object-store URL [--cache-dir DIR]] [--training [--max-sessions N]\n"
            "                  [--session-idle SECONDS] [--max-train-tokens N]]\n\n"
            "Serves OpenAI's POST /v1/chat/completions and /v1/completions (streamed or whole) for one base\n"
            "model and the LoRA adapters named, all on one copy of the base: requests of different adapters\n"
            "share each decode step (continuous batching). GET /v1/models lists them, GET /healthz answers ok.\n\n"
            "options:\n"
            "  --model DIR          the base model (a Hugging Face dir with its tokenizer)\n"
            "  --name NAME          its name in requests (default: the dir's last component)\n"
            "  --adapter NAME=DIR   a PEFT adapter served as model NAME (repeatable, up to 256)\n"
            "  --http HOST:PORT     where to listen (default 127.0.0.1:8090; port 0: any free port)\n"
            "  --slots N            sequences decoded at once (default 16)\n"
            "  --max-len N          tokens a sequence may have, prompt included (default 2048)\n"
            "  --cache N            adapters kept loaded (default 16)\n"
            "  --device DEV         cpu (the default), cuda or cuda:N\n"
            "  --address-file FILE  write the address listened on to FILE once listening\n"
            "  --object-store URL   where adapters named by a request's x-whet-adapter: PREFIX header are\n"
            "                       (file:// or s3://; default $WHET_OBJECT_STORE); the gateway names them so\n"
            "  --cache-dir DIR      where fetched adapters are kept (default /tmp/whet-serve-cache)\n"
            "  --training           also run training sessions (POST /v1/training_sessions…): clients' own\n"
            "                       LoRA adapters trained on this worker's base (loaded frozen for it)\n"
            "  --max-sessions N     training sessions held at once (default 64)\n"
            "  --session-idle S     a training session idle for S seconds is freed (default 1800)\n"
            "  --max-train-tokens N a forward_backward pass's tokens at most, its data padded to the\n"
            "                       longest (default 16384): a larger call is refused, calls of several\n"
            "                       sessions share a pass up to it\n"
            "  -h, --help           this text\n\n"
            "environment: WHET_DATA_KEY_FILE, the operator keyring of encryption at rest (the gateway's):\n"
            "the worker unwraps with it the tenants' data keys the gateway hands it, to read sealed adapters\n"
            "and write sealed session saves.\n");
}

static int positive(const char *opt, const char *v, int *out) {
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 1 || n > 1 << 20) {
        fprintf(stderr, "whet serve: %s: expected an integer in [1, 1048576]\n", opt);
        return -1;
    }
    *out = (int)n;
    return 0;
}

static int cmd_serve(int argc, char **argv) {
    static const struct option options[] = {
        {"model", required_argument, 0, 'm'}, {"name", required_argument, 0, 'n'},
        {"adapter", required_argument, 0, 'a'}, {"http", required_argument, 0, 'H'},
        {"slots", required_argument, 0, 's'}, {"max-len", required_argument, 0, 'l'},
        {"cache", required_argument, 0, 'c'}, {"device", required_argument, 0, 'D'},
        {"address-file", required_argument, 0, 'f'}, {"object-store", required_argument, 0, 'o'},
        {"cache-dir", required_argument, 0, 'C'}, {"training", no_argument, 0, 'T'},
        {"max-sessions", required_argument, 0, 'S'}, {"session-idle", required_argument, 0, 'I'},
        {"max-train-tokens", required_argument, 0, 'M'},
        {"help", no_argument, 0, 'h'}, {0}};
    static struct serve_http_opts o;
    o = (struct serve_http_opts){.http = "127.0.0.1:8090", .object_store = getenv("WHET_OBJECT_STORE"),
                                 .cache_dir = "/tmp/whet-serve-cache", .max_sessions = 64, .session_idle_s = 1800,
                                 .max_train_tokens = 16384,
                                 .engine = {.n_slots = 16, .max_len = 2048, .max_adapters = 16}};
    int c;
    while ((c = getopt_long(argc, argv, "m:n:a:H:s:l:c:D:f:o:C:TS:I:M:h", options, NULL)) != -1) {
        switch (c) {
        case 'm': o.engine.model_dir = optarg; break;
        case 'n': o.name = optarg; break;
        case 'a': {
            char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || !eq[1] || o.n_adapters == SERVE_MAX_ADAPTERS) {
                fprintf(stderr, "whet serve: --adapter: expected NAME=DIR (at most %d)\n", SERVE_MAX_ADAPTERS);
                return 2;
            }
            *eq = 0;
            o.adapter_names[o.n_adapters] = optarg;
            o.adapter_dirs[o.n_adapters++] = eq + 1;
            break;
        }
        case 'H': o.http = optarg; break;
        case 's': if (positive("--slots", optarg, &o.engine.n_slots)) return 2; break;
        case 'l': if (positive("--max-len", optarg, &o.engine.max_len)) return 2; break;
        case 'c': if (positive("--cache", optarg, &o.engine.max_adapters)) return 2; break;
        case 'D': o.engine.device = optarg; break;
        case 'f': o.address_file = optarg; break;
        case 'o': o.object_store = optarg; break;
        case 'C': o.cache_dir = optarg; break;
        case 'T': o.training = o.engine.training = 1; break;
        case 'S': if (positive("--max-sessions", optarg, &o.max_sessions)) return 2; break;
        case 'M': if (positive("--max-train-tokens", optarg, &o.max_train_tokens)) return 2; break;
        case 'I': {
            int idle;
            if (positive("--session-idle", optarg, &idle)) return 2;
            o.session_idle_s = idle;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!o.engine.model_dir || optind != argc) {
        usage(stderr);
        return 2;
    }
    if (!o.name) {
        const char *slash = strrchr(o.engine.model_dir, '/');
        o.name = slash && slash[1] ? slash + 1 : o.engine.model_dir;
    }
    whet_log_component("serve");
    struct whet_err err;
    if (serve_http_run(&o, &err)) {
        whet_err_report("whet serve", &err);
        return 1;
    }
    return 0;
}
WHET_COMMAND("serve", cmd_serve, "a model worker: OpenAI chat completions for a base model and its adapters")
