/* cmd_sim.c - `whet sim inflate|replay|scale`: public traces through the placement library.
 *
 * Thin: options here, the work in scheduler/sim/. Each run prints one JSON object per policy, one
 * per line, on stdout. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "sim.h"

#define MAX_POLICIES 8
#define MAX_TRACE_BYTES (1u << 30)

static void usage(FILE *out) {
    fprintf(out,
            "usage: whet sim inflate --nodes FILE --pods FILE [--load X] [--seed S] [--policy P[,P...]]\n"
            "       whet sim replay  --trace FILE --nodes FILE [--policy P[,P...]] [--max-jobs N]\n"
            "                        [--checkpoint-cost S] [--checkpoint-every S] [--grace S]\n"
            "       whet sim scale   --nodes N --gpus-per-node G --queued J [--dcs D] [--types T] [--seed S]\n"
            "                        [--cotrain-keys K] [--policy P[,P...]]\n\n"
            "Replays a workload through the placement library (the code the scheduler runs) and prints one\n"
            "JSON object per policy on its own line. The same input is given to every policy of a run.\n\n"
            "modes:\n"
            "  inflate  the ATC'23 method: tasks drawn at random from the pod list until the GPU requested\n"
            "           reaches LOAD x capacity; a task that cannot be placed on arrival fails. Prints\n"
            "           allocation_pct (allocated GPU / capacity x 100), placed, failed, decisions_per_s\n"
            "  replay   a time-based replay of a job trace (Philly format) with queueing, preemption and\n"
            "           checkpoints. Prints jobs, avg/p50/p99 JCT, avg/p99 queueing, makespan, GPU\n"
            "           utilisation, preemptions, and per tenant jobs, avg JCT, GPU hours and finish-time\n"
            "           fairness (mean of JCT / max(duration, 60 s))\n"
            "  scale    a synthetic fleet and queue: decisions_per_s of one cycle over the whole queue, and\n"
            "           p50/p99 latency of single-job decisions\n\n"
            "options:\n"
            "  --nodes FILE         inflate, replay: node CSV `sn,cpu_milli,memory_mib,gpu,model[,dc]`\n"
            "  --nodes N            scale: number of nodes\n"
            "  --pods FILE          inflate: Alibaba pod list `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec]`\n"
            "  --trace FILE         replay: `timestamp,duration,num_gpus,gpu_time,cluster` (cluster = tenant)\n"
            "  --load X             inflate: requested GPU / capacity at which drawing stops (default 1.3)\n"
            "  --seed S             inflate, scale: random seed (default 42)\n"
            "  --policy LIST        fifo (first-fit in arrival order), bestfit, las (least attained service),\n"
            "                       whet (fair share, FGD packing, backfill, preemption; the default)\n"
            "  --max-jobs N         replay: only the first N jobs by submit time (default all)\n"
            "  --checkpoint-cost S  replay: seconds a resumed job spends restoring (default 60)\n"
            "  --checkpoint-every S replay: seconds of progress between checkpoints (default 1800)\n"
            "  --grace S            replay: seconds a preempted job keeps its GPUs (default 30)\n"
            "  --gpus-per-node G    scale: GPUs per node (default 8)\n"
            "  --queued J           scale: jobs in the queue (default 100000)\n"
            "  --dcs D              scale: data centers (default 2)\n"
            "  --types T            scale: GPU types (default 2)\n"
            "  --cotrain-keys K     scale: every whole one-GPU job is co-trainable (LoRA of one of K base\n"
            "                       models: up to 8 share a device); 0: none (default)\n"
            "  -h, --help           this text\n");
}

static int parse_num(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "whet sim: %s: expected a number in [%g, %g], got \"%s\"\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int load_text(const char *opt, const char *path, char **text) {
    struct whet_err err;
    size_t len;
    if (!path) {
        fprintf(stderr, "whet sim: %s is required\nhint: run `whet sim --help`\n", opt);
        return -1;
    }
    if (whet_read_file(path, MAX_TRACE_BYTES, text, &len, &err) < 0) {
        whet_err_report("whet sim", &err);
        return -1;
    }
    return 0;
}

static int cmd_sim(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *mode = argv[1];
    if (strcmp(mode, "inflate") && strcmp(mode, "replay") && strcmp(mode, "scale")) {
        fprintf(stderr, "whet sim: unknown mode \"%s\"\nhint: inflate, replay or scale\n", mode);
        return 2;
    }
    static const struct option options[] = {{"nodes", required_argument, 0, 'n'},
                                            {"pods", required_argument, 0, 'p'},
                                            {"trace", required_argument, 0, 't'},
                                            {"load", required_argument, 0, 'l'},
                                            {"seed", required_argument, 0, 's'},
                                            {"policy", required_argument, 0, 'P'},
                                            {"max-jobs", required_argument, 0, 'm'},
                                            {"checkpoint-cost", required_argument, 0, 'c'},
                                            {"checkpoint-every", required_argument, 0, 'e'},
                                            {"grace", required_argument, 0, 'g'},
                                            {"gpus-per-node", required_argument, 0, 'G'},
                                            {"queued", required_argument, 0, 'q'},
                                            {"dcs", required_argument, 0, 'D'},
                                            {"types", required_argument, 0, 'T'},
                                            {"cotrain-keys", required_argument, 0, 'K'},
                                            {"help", no_argument, 0, 'h'},
                                            {0}};
    const char *nodes = NULL, *pods_path = NULL, *trace_path = NULL, *policy = "whet";
    double load = 1.3, seed = 42, max_jobs = 0, ckpt_cost = 60, ckpt_every = 1800, grace = 30;
    double gpn = 8, queued = 100000, dcs = 2, types = 2, cotrain_keys = 0;
    int c;
    optind = 1;
    while ((c = getopt_long(argc - 1, argv + 1, "h", options, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'n': nodes = optarg; break;
        case 'p': pods_path = optarg; break;
        case 't': trace_path = optarg; break;
        case 'P': policy = optarg; break;
        case 'l': bad = parse_num("--load", optarg, 0.01, 100, &load); break;
        case 's': bad = parse_num("--seed", optarg, 0, 1e15, &seed); break;
        case 'm': bad = parse_num("--max-jobs", optarg, 0, 1e9, &max_jobs); break;
        case 'c': bad = parse_num("--checkpoint-cost", optarg, 0, 1e6, &ckpt_cost); break;
        case 'e': bad = parse_num("--checkpoint-every", optarg, 0, 1e9, &ckpt_every); break;
        case 'g': bad = parse_num("--grace", optarg, 0, 1e6, &grace); break;
        case 'G': bad = parse_num("--gpus-per-node", optarg, 1, PL_MAX_GPUS_PER_NODE, &gpn); break;
        case 'q': bad = parse_num("--queued", optarg, 1, 1e8, &queued); break;
        case 'D': bad = parse_num("--dcs", optarg, 1, PL_MAX_DCS, &dcs); break;
        case 'T': bad = parse_num("--types", optarg, 1, PL_MAX_TYPES, &types); break;
        case 'K': bad = parse_num("--cotrain-keys", optarg, 0, 1e6, &cotrain_keys); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (bad) return 2;
    }
    if (optind < argc - 1) {
        fprintf(stderr, "whet sim: unexpected argument \"%s\"\n", argv[optind + 1]);
        return 2;
    }
    struct whet_err err = {0};
    char names[MAX_POLICIES][16];
    int n_policies = sim_policies(policy, names, MAX_POLICIES, &err);
    if (n_policies < 0) {
        whet_err_report("whet sim", &err);
        return 2;
    }

    int rc = 0;
    if (!strcmp(mode, "scale")) {
        double n_nodes;
        if (!nodes) {
            fprintf(stderr, "whet sim scale: --nodes N is required\n");
            return 2;
        }
        if (parse_num("--nodes", nodes, 1, 1e7, &n_nodes)) return 2;
        struct sim_scale_opts o = {(int32_t)n_nodes, (int32_t)gpn, (int32_t)queued, (int32_t)dcs, (int32_t)types,
                                   (int32_t)cotrain_keys, (uint64_t)seed};
        for (int i = 0; i < n_policies && !rc; i++)
            if (sim_scale(stdout, &o, names[i], &err) < 0) rc = 1;
        if (rc) whet_err_report("whet sim", &err);
        return rc;
    }

    char *node_text = NULL, *text = NULL;
    struct sim_fleet fleet;
    if (load_text("--nodes", nodes, &node_text)) return 1;
    if (sim_fleet_parse(&fleet, nodes, node_text, &err) < 0) {
        whet_err_report("whet sim", &err);
        free(node_text);
        return 1;
    }
    free(node_text);
    if (!strcmp(mode, "inflate")) {
        struct sim_pods pods;
        if (load_text("--pods", pods_path, &text)) rc = 1;
        else if (sim_pods_parse(&pods, &fleet, pods_path, text, &err) < 0) rc = 1;
        else {
            struct sim_inflate_opts o = {load, (uint64_t)seed};
            for (int i = 0; i < n_policies && !rc; i++)
                if (sim_inflate(stdout, &fleet, &pods, &o, names[i], &err) < 0) rc = 1;
            sim_pods_free(&pods);
        }
    } else {
        struct sim_trace trace;
        if (load_text("--trace", trace_path, &text)) rc = 1;
        else if (sim_trace_parse(&trace, trace_path, text, &err) < 0) rc = 1;
        else {
            struct sim_replay_opts o = {(int32_t)max_jobs, ckpt_every, ckpt_cost, grace};
            for (int i = 0; i < n_policies && !rc; i++) {
                if (sim_replay(stdout, &fleet, &trace, &o, names[i], &err) < 0) rc = 1;
                fflush(stdout);
            }
            sim_trace_free(&trace);
        }
    }
    if (rc && err.msg[0]) whet_err_report("whet sim", &err);
    free(text);
    sim_fleet_free(&fleet);
    return rc;
}
WHET_COMMAND("sim", cmd_sim, "replay a workload through the placement library")
