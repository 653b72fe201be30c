/* cmd_scheduler.c - `whet scheduler`: the placement service executors talk to. */
#include <getopt.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "env.h"
#include "log.h"
#include "model_plan.h"
#include "pg.h"
#include "scheduler.h"

static void scheduler_usage(FILE *out) {
    fprintf(out,
            "usage: whet scheduler [--data-dir DIR] [--grpc HOST:PORT] [--policy P] [--lease-ms MS]\n"
            "                      [--metrics HOST:PORT] [--rpc-threads N] [--progress-ms MS]\n"
            "                      [--cotrain-move-min-left S] [--checkpoint-keep N] [--deleted-model-keep S]\n"
            "                      [--event-retention-days N] [--usage-retention-days N]\n"
            "                      [--attempt-gc-grace S] [--cycle-target-ms MS]\n\n"
            "Runs the scheduler: one leader per database (a second one waits and takes over), serving the\n"
            "executors over gRPC and placing queued jobs. Reads WHET_DATABASE_URL, WHET_GRPC,\n"
            "WHET_EXECUTOR_TOKEN and WHET_OBJECT_STORE (or DIR/whet.env), and WHET_COTRAIN_PASS_TOKENS (the\n"
            "executors' bound on a co-training group's passes, which sizes its groups; default %d).\n\n"
            "  --data-dir DIR    read DIR/whet.env\n"
            "  --grpc HOST:PORT  where executors call (default $WHET_GRPC, else 127.0.0.1:7070)\n"
            "  --policy P        placement policy: whet (default), fifo, bestfit, las\n"
            "  --lease-ms MS     a node silent this long is declared lost (default $WHET_LEASE_MS, else 10000)\n"
            "  --metrics H:P     serve Prometheus metrics at GET /metrics there (default $WHET_SCHEDULER_METRICS,\n"
            "                    else none)\n"
            "  --rpc-threads N   threads answering the executors' reports, each with its own database\n"
            "                    connection (default $WHET_SCHEDULER_RPC_THREADS, else 16; a call waiting on a job's\n"
            "                    row lock holds one, so a big fleet under job churn needs more); heartbeats have 8\n"
            "                    more of their own, which no pile of reports can keep busy\n"
            "  --progress-ms MS  write a running job's step (its trained_tokens and estimated_finish) this\n"
            "                    often (default $WHET_SCHEDULER_PROGRESS_MS, else 5000; 0: on every heartbeat),\n"
            "                    sooner with a heartbeat of its node written anyway; a job's first step, its end\n"
            "                    and a changed total are written at once\n"
            "  --cotrain-move-min-left S\n"
            "                    a co-trained job moves out of its group to a freed device only with more than S\n"
            "                    seconds of work left at its pace so far (default $WHET_COTRAIN_MOVE_MIN_LEFT_S,\n"
            "                    else 60: a move costs a checkpoint, a new process and a load of the base model)\n"
            "  --checkpoint-keep N\n"
            "                    keep the newest N step checkpoints of each job, every pinned one and the final\n"
            "                    model; the leader deletes the others' rows and files (default\n"
            "                    $WHET_CHECKPOINT_KEEP, else 0: every checkpoint is kept)\n"
            "  --deleted-model-keep S\n"
            "                    S seconds after a tenant deletes a fine-tuned model, delete all its job's\n"
            "                    checkpoints and its final model, pinned or not (default\n"
            "                    $WHET_DELETED_MODEL_KEEP_S, else 0; `never`: they follow --checkpoint-keep)\n"
            "  --event-retention-days N\n"
            "                    drop jobs' events and metric series a month at a time, once the month ended more\n"
            "                    than N days ago (default $WHET_EVENT_RETENTION_DAYS, else 0: kept for ever, as\n"
            "                    long as their job)\n"
            "  --attempt-gc-grace S\n"
            "                    S seconds after an attempt ended (its node declared lost, its job ended), remove\n"
            "                    the files under its jobs/<job>/attempt-<N>/ that no checkpoint, final model or\n"
            "                    result file references (default $WHET_ATTEMPT_GC_GRACE_S, else 3600)\n"
            "  --usage-retention-days N\n"
            "                    drop usage records (what billing and /v1/usage read) a month of jobs at a time,\n"
            "                    once the month in which the jobs were created ended more than N days ago and none\n"
            "                    of their usage was recorded in the last N days (default\n"
            "                    $WHET_USAGE_RETENTION_DAYS, else 0: kept for ever, as it is billing data)\n"
            "  --cycle-target-ms MS\n"
            "                    a cycle stops writing placements once it has run this long (less the time its\n"
            "                    public state took last) and the next cycles write the rest of its plan, for up\n"
            "                    to 3 s, each after its leases, gang deadlines, pauses and cancels and one batch\n"
            "                    of 256 at least (default\n"
            "                    $WHET_SCHEDULER_CYCLE_TARGET_MS, else 800)\n",
            MP_COTRAIN_PASS_TOKENS);
}

/* A number from its flag or environment variable: lo to hi, a whole number unless `fraction`; else -1 with a
 * message that names both. */
static int number_setting(const char *text, const char *flag, const char *env, double lo, double hi, int fraction,
                          const char *unit, double *out) {
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !(v >= lo && v <= hi) || (!fraction && v != floor(v))) {
        fprintf(stderr, "whet scheduler: --%s (or %s) must be %.0f to %.0f%s, not \"%s\"\n", flag, env, lo, hi, unit,
                text);
        return -1;
    }
    *out = v;
    return 0;
}

static int cmd_scheduler(int argc, char **argv) {
    static const struct option opts[] = {{"data-dir", required_argument, 0, 'd'},
                                         {"grpc", required_argument, 0, 'g'},
                                         {"policy", required_argument, 0, 'p'},
                                         {"lease-ms", required_argument, 0, 'l'},
                                         {"metrics", required_argument, 0, 'm'},
                                         {"rpc-threads", required_argument, 0, 't'},
                                         {"progress-ms", required_argument, 0, 'P'},
                                         {"cotrain-move-min-left", required_argument, 0, 'C'},
                                         {"checkpoint-keep", required_argument, 0, 'K'},
                                         {"deleted-model-keep", required_argument, 0, 'D'},
                                         {"event-retention-days", required_argument, 0, 'R'},
                                         {"attempt-gc-grace", required_argument, 0, 'G'},
                                         {"usage-retention-days", required_argument, 0, 'U'},
                                         {"cycle-target-ms", required_argument, 0, 'T'},
                                         {"help", no_argument, 0, 'h'},
                                         {0}};
    const char *data_dir = NULL, *grpc = NULL, *policy = "whet", *metrics = NULL;
    int lease_ms = atoi(whet_env("WHET_LEASE_MS", "10000")), c;
    int rpc_threads = atoi(whet_env("WHET_SCHEDULER_RPC_THREADS", "16"));
    const char *progress_ms = whet_env("WHET_SCHEDULER_PROGRESS_MS", "5000");
    const char *move_min_left = whet_env("WHET_COTRAIN_MOVE_MIN_LEFT_S", "60");
    const char *checkpoint_keep = whet_env("WHET_CHECKPOINT_KEEP", "0");
    const char *deleted_model_keep = whet_env("WHET_DELETED_MODEL_KEEP_S", "0");
    const char *retention_days = whet_env("WHET_EVENT_RETENTION_DAYS", "0");
    const char *gc_grace = whet_env("WHET_ATTEMPT_GC_GRACE_S", "3600");
    const char *usage_retention_days = whet_env("WHET_USAGE_RETENTION_DAYS", "0");
    const char *cycle_target_ms = whet_env("WHET_SCHEDULER_CYCLE_TARGET_MS", NULL); /* NULL: the scheduler's default */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': data_dir = optarg; break;
        case 'g': grpc = optarg; break;
        case 'p': policy = optarg; break;
        case 'm': metrics = optarg; break;
        case 't': rpc_threads = atoi(optarg); break;
        case 'P': progress_ms = optarg; break;
        case 'C': move_min_left = optarg; break;
        case 'K': checkpoint_keep = optarg; break;
        case 'D': deleted_model_keep = optarg; break;
        case 'R': retention_days = optarg; break;
        case 'G': gc_grace = optarg; break;
        case 'U': usage_retention_days = optarg; break;
        case 'T': cycle_target_ms = optarg; break;
        case 'l':
            lease_ms = atoi(optarg);
            if (lease_ms < 500) {
                fprintf(stderr, "whet scheduler: --lease-ms must be at least 500\n");
                return 2;
            }
            break;
        case 'h': scheduler_usage(stdout); return 0;
        default: scheduler_usage(stderr); return 2;
        }
    }
    if (lease_ms < 500) {
        fprintf(stderr, "whet scheduler: the lease must be at least 500 ms\n");
        return 2;
    }
    if (rpc_threads < 1 || rpc_threads > 256) {
        fprintf(stderr, "whet scheduler: --rpc-threads (or WHET_SCHEDULER_RPC_THREADS) must be 1 to 256\n");
        return 2;
    }
    double progress, min_left, keep, model_keep_s = -1, retention, grace, usage_retention, cycle_target = 0;
    if (number_setting(progress_ms, "progress-ms", "WHET_SCHEDULER_PROGRESS_MS", 0, 3600000, 0, "", &progress) < 0 ||
        number_setting(move_min_left, "cotrain-move-min-left", "WHET_COTRAIN_MOVE_MIN_LEFT_S", 0, 86400, 1, " seconds",
                       &min_left) < 0 ||
        number_setting(checkpoint_keep, "checkpoint-keep", "WHET_CHECKPOINT_KEEP", 0, 1000000, 0, " checkpoints",
                       &keep) < 0 ||
        (strcmp(deleted_model_keep, "never") != 0 &&
         number_setting(deleted_model_keep, "deleted-model-keep", "WHET_DELETED_MODEL_KEEP_S", 0, 3153600000.0, 0,
                        " seconds or `never`", &model_keep_s) < 0) ||
        number_setting(retention_days, "event-retention-days", "WHET_EVENT_RETENTION_DAYS", 0, 36500, 0, " days",
                       &retention) < 0 ||
        number_setting(gc_grace, "attempt-gc-grace", "WHET_ATTEMPT_GC_GRACE_S", 0, 3153600000.0, 0, " seconds",
                       &grace) < 0 ||
        number_setting(usage_retention_days, "usage-retention-days", "WHET_USAGE_RETENTION_DAYS", 0, 36500, 0, " days",
                       &usage_retention) < 0 ||
        (cycle_target_ms && number_setting(cycle_target_ms, "cycle-target-ms", "WHET_SCHEDULER_CYCLE_TARGET_MS", 1,
                                           60000, 0, " ms", &cycle_target) < 0))
        return 2;
    whet_log_component("scheduler");
    struct whet_err err;
    struct scheduler_options o = {.policy = policy,
                                  .lease_ms = lease_ms,
                                  .heartbeat_ms = lease_ms / 10,
                                  .rpc_threads = rpc_threads,
                                  .progress_ms = (int)progress,
                                  .cotrain_move_min_left_s = min_left,
                                  .checkpoint_keep = (int)keep,
                                  .deleted_model_keep_s = (long long)model_keep_s,
                                  .event_retention_days = (int)retention,
                                  .attempt_gc_grace_s = (long long)grace,
                                  .usage_retention_days = (int)usage_retention,
                                  .cycle_target_ms = (int)cycle_target};
    if (whet_env_load_data_dir(data_dir, &err) < 0 || !(o.database_url = whet_database_url(&err))) {
        whet_err_report("whet scheduler", &err);
        return 1;
    }
    o.grpc_addr = grpc ? grpc : whet_env("WHET_GRPC", "127.0.0.1:7070");
    o.metrics_addr = metrics ? metrics : whet_env("WHET_SCHEDULER_METRICS", NULL);
    o.executor_token = whet_env("WHET_EXECUTOR_TOKEN", NULL);
    o.object_store = whet_env("WHET_OBJECT_STORE", NULL);
    char why[300];
    o.cotrain_pass_tokens = mp_cotrain_pass_tokens_setting(whet_env(MP_COTRAIN_PASS_TOKENS_ENV, NULL), why, sizeof why);
    if (!o.cotrain_pass_tokens) {
        fprintf(stderr, "whet scheduler: %s\n", why);
        return 1;
    }
    if (!o.executor_token) {
        fprintf(stderr, "whet scheduler: WHET_EXECUTOR_TOKEN is not set\nhint: executors authenticate with it; "
                        "`whet up` generates one into whet.env\n");
        return 1;
    }
    /* glibc gives each thread that allocates its own arena (up to 8 per core), and the scheduler's threads (the
     * cycle's, the executors' handlers, the heartbeat writers, gRPC's) each keep the pages of theirs: at 10k
     * nodes x 8 (tests/bench/scale/run.sh) its RSS was 1.0-1.1 GB with them and 0.5 GB with 2, its CPU the same.
     * An operator's MALLOC_ARENA_MAX stands. */
    if (!getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, 2);
    if (scheduler_run(&o, &err) < 0) {
        whet_err_report("whet scheduler", &err);
        return 1;
    }
    return 0;
}
WHET_COMMAND("scheduler", cmd_scheduler, "run the scheduler service (placement, leases, executor RPCs)")
