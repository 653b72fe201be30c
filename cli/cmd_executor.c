/* cmd_executor.c - `whet executor`: run the jobs the scheduler places on this machine. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "commands.h"
#include "env.h"
#include "log.h"
#include "model_plan.h"

static void executor_usage(FILE *out) {
    fprintf(out,
            "usage: whet executor --dc NAME --pool NAME --devices SPEC --work-dir DIR [--data-dir DIR]\n"
            "                     [--scheduler HOST:PORT] [--trainer PATH] [--metrics HOST:PORT]\n"
            "                     [--model-cache-max SIZE]\n\n"
            "Registers this machine's devices with the scheduler and runs the jobs it places here, each\n"
            "`whet train` in the sandbox, streaming checkpoints to the object store. Finds the scheduler\n"
            "(WHET_GRPC), its token (WHET_EXECUTOR_TOKEN) and the object store (WHET_OBJECT_STORE) in the\n"
            "environment or DIR/whet.env. A co-training process's passes hold at most WHET_COTRAIN_PASS_TOKENS\n"
            "tokens (default %d; the scheduler sizes its groups by the same setting: set it alike).\n\n"
            "  --dc NAME            data center\n"
            "  --pool NAME          pool within the data center\n"
            "  --devices SPEC       cuda | cpu:N | sim:TYPE:N[:GIB]\n"
            "  --work-dir DIR       job dirs and the model cache (DIR/models: base and judge models); one\n"
            "                       executor at a time (a second one on DIR refuses to start)\n"
            "  --data-dir DIR       a `whet up` data dir, whose whet.env names the scheduler, token and store\n"
            "  --scheduler ADDR     override WHET_GRPC\n"
            "  --trainer PATH       the program each job runs as `PATH train --config FILE` in the sandbox\n"
            "                       (default: this binary). How an operator deploys a custom trainer build:\n"
            "                       a whet binary built with other kernels or flags, on this node only. It\n"
            "                       must follow `whet train`'s contract (event lines on stdout) and is held\n"
            "                       by the same sandbox: no network, only its job dir writable.\n"
            "  --metrics HOST:PORT  serve Prometheus metrics at GET /metrics there (default\n"
            "                       $WHET_EXECUTOR_METRICS, else none)\n"
            "  --model-cache-max SIZE\n"
            "                       bound the model cache: bytes with a K, M, G or T suffix (20G), a share\n"
            "                       of the work dir's file system (50%%), or 0 for none (default\n"
            "                       $WHET_MODEL_CACHE_MAX, else %s). Past it the least recently used models\n"
            "                       go; never one a job, model worker or co-training process uses, nor the\n"
            "                       latest (kept with a warning when it alone is larger)\n",
            MP_COTRAIN_PASS_TOKENS, AGENT_MODEL_CACHE_MAX_DEFAULT);
}

static int cmd_executor(int argc, char **argv) {
    static const struct option opts[] = {{"dc", required_argument, 0, 'c'},
                                         {"pool", required_argument, 0, 'p'},
                                         {"devices", required_argument, 0, 'v'},
                                         {"work-dir", required_argument, 0, 'w'},
                                         {"data-dir", required_argument, 0, 'd'},
                                         {"scheduler", required_argument, 0, 's'},
                                         {"trainer", required_argument, 0, 't'},
                                         {"metrics", required_argument, 0, 'm'},
                                         {"model-cache-max", required_argument, 0, 'M'},
                                         {"help", no_argument, 0, 'h'},
                                         {0}};
    struct executor_options o = {0};
    const char *data_dir = NULL, *scheduler = NULL, *trainer = NULL, *metrics = NULL, *cache_max = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c': o.dc = optarg; break;
        case 'p': o.pool = optarg; break;
        case 'v': o.devices = optarg; break;
        case 'w': o.work_dir = optarg; break;
        case 'd': data_dir = optarg; break;
        case 's': scheduler = optarg; break;
        case 't': trainer = optarg; break;
        case 'm': metrics = optarg; break;
        case 'M': cache_max = optarg; break;
        case 'h': executor_usage(stdout); return 0;
        default: executor_usage(stderr); return 2;
        }
    }
    if (!o.dc || !o.pool || !o.devices || !o.work_dir || optind != argc) {
        executor_usage(stderr);
        return 2;
    }
    whet_log_component("executor");
    struct whet_err err;
    if (whet_env_load_data_dir(data_dir, &err) < 0) {
        whet_err_report("whet executor", &err);
        return 1;
    }
    o.scheduler = scheduler ? scheduler : whet_env("WHET_GRPC", "127.0.0.1:7070");
    o.token = whet_env("WHET_EXECUTOR_TOKEN", NULL);
    o.object_store = whet_env("WHET_OBJECT_STORE", NULL);
    o.metrics_addr = metrics ? metrics : whet_env("WHET_EXECUTOR_METRICS", NULL);
    o.model_cache_max = cache_max ? cache_max : whet_env("WHET_MODEL_CACHE_MAX", NULL);
    if (!o.token || !o.object_store) {
        fprintf(stderr, "whet executor: WHET_EXECUTOR_TOKEN and WHET_OBJECT_STORE must be set\nhint: pass --data-dir "
                        "of a `whet up` data dir, or set them\n");
        return 1;
    }
    /* The sandbox shows the trainer at its own absolute path, so resolve it now. */
    static char path[PATH_MAX];
    if (trainer) {
        if (!realpath(trainer, path) || access(path, X_OK) != 0) {
            fprintf(stderr, "whet executor: --trainer %s: %s\n", trainer, strerror(errno));
            return 1;
        }
    } else {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        if (n <= 0) {
            fprintf(stderr, "whet executor: cannot find its own binary\n");
            return 1;
        }
        path[n] = 0;
    }
    o.trainer = path;
    if (executor_run(&o, &err) < 0) {
        whet_err_report("whet executor", &err);
        return 1;
    }
    return 0;
}
WHET_COMMAND("executor", cmd_executor, "run jobs placed on this machine (registers with the scheduler)")
