/* agent_internal.h - what the executor's files share. */
#ifndef WHET_AGENT_INTERNAL_H
#define WHET_AGENT_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

#include "agent.h"
#include "dir_cache.h"
#include "objstore.h"
#include "proto/whet.pb-c.h"
#include "rpc.h"

enum job_stop { JOB_RUN, JOB_STOP, JOB_CANCEL, JOB_ABANDON };

/* One attempt of a job on this node. The main thread creates it and reads its progress; the job's own
 * thread does everything else. */
struct agent_job {
    char id[64];
    int attempt;
    json_t *manifest;              /* owned */
    struct objstore *tenant_store; /* the tenant's data: the agent's store, or a view of it sealed with the
                                      manifest's data key (owned then); set by the job's thread */
    char *dir;                     /* work_dir/jobs/ID-ATTEMPT (cotrain.c: work_dir/cotrain/GROUP/ID-ATTEMPT) */
    pthread_t thread;
    atomic_int stop;               /* enum job_stop, set by the main thread (JOB_ABANDON also by the job's
                                      thread when the scheduler refuses a report: agent_job_fenced) */
    atomic_int done;               /* the thread has finished (and reported) */
    atomic_int step, total_steps;
    atomic_llong trained_tokens;
    _Atomic double loss;
    int event_seq;                 /* events reported for this attempt (job thread only) */
    /* A gang's rank (manifest "distributed"; 0 and 1 for one process). Only rank 0 reports progress,
     * events, checkpoints and the final model; every rank reports its own FinishJob. */
    int rank, world_size;
    uint32_t device_mask;          /* the node's devices it holds (agent_take_devices), set before it starts */
    char cotrain_group[64];        /* the co-training group the scheduler placed it in (the manifest's
                                      "cotrain"), "" when none; set before it starts */
    struct agent *agent;
    struct agent_job *next;
};

/* A model worker (serve_workers.c). The main thread creates it, starts it once a device is free, reads
 * its state and stops it; its thread fetches the model and runs and waits for `whet serve`. */
struct agent_worker {
    char id[64];
    json_t *base;          /* owned: {"id", "object_prefix", "sha256"} */
    char *dir;             /* work_dir/workers/ID: its address file, log and adapter cache */
    uint32_t device_mask;  /* the device it holds (agent_take_devices), once one was free */
    pthread_t thread;
    int started;           /* its thread runs (it had a device) */
    atomic_int pid;        /* the init of `whet serve`'s sandbox; 0 before it runs */
    atomic_int stop;       /* set by the main thread: not to run, or to be killed */
    atomic_int done;       /* the thread has ended: message says why */
    char message[768];     /* written by the thread before done */
    char address[80];      /* HOST:PORT once it listens (main thread) */
    double term_at;        /* when a stopping one gets SIGTERM at the latest (main thread) */
    int term_sent;
    double kill_at;        /* when it gets SIGKILL after the SIGTERM (main thread) */
    int exit_reported;     /* its end went in the last heartbeat (main thread) */
    double generated, generated_at; /* its tokens generated at the last report's read, and when (0: none) */
    struct agent *agent;
    struct agent_worker *next;
};

struct agent {
    const struct executor_options *opts;
    char node_id[64];
    char device_type[32];
    const char *address;           /* where gang peers reach this node's trainers (WHET_EXECUTOR_ADDRESS) */
    int gang_port_lo, gang_port_hi; /* the ports gang trainers listen and connect on (WHET_GANG_PORTS) */
    int cotrain_pass_tokens;       /* a co-training process's bound on its passes (`--pass-tokens`), as the
                                      scheduler sizes its groups: both read WHET_COTRAIN_PASS_TOKENS */
    int n_devices;
    int cuda;                      /* the devices are CUDA GPUs (--devices cuda) */
    uint32_t busy_devices;         /* held by jobs (main thread only) */
    struct rpc_client *rpc;
    struct objstore *store;
    struct dir_cache *models;      /* WORK_DIR/models: base and judge models (dir_cache.h) */
    pthread_mutex_t lock;          /* guards jobs */
    struct agent_job *jobs;
    struct agent_worker *workers;  /* main thread only */
};

/* Starts the job's thread (job.c). */
void agent_job_start(struct agent_job *job);
/* Frees a finished job. */
void agent_job_free(struct agent_job *job);
/* The base model {"id", "object_prefix", "sha256"} in the node's model cache, fetched on first use and
 * held (not evicted) until agent_release_model (job.c). Returns the malloc'd directory, or NULL with err.
 * agent_release_model gives it back and frees it (NULL: nothing). */
char *agent_fetch_model(struct agent *a, json_t *base, struct whet_err *err);
void agent_release_model(struct agent *a, char *dir);

/* Model workers (serve_workers.c), all from the main thread: a heartbeat's list applied (new ones
 * started, unlisted ones stopped); every one stopped; readiness and kills advanced (returns 1 when a
 * worker became ready or ended: news for the scheduler); the states for the
 * next heartbeat (the array and its entries malloc'd, strings borrowed: agent_workers_report_free);
 * the ended ones forgotten once a heartbeat reported their end (all_done: every ended one); the devices
 * the running ones hold. */
void agent_workers_apply(struct agent *a, Whet__V1__ServeWorker *const *list, size_t n);
void agent_workers_stop_all(struct agent *a);
int agent_workers_tick(struct agent *a);
Whet__V1__ServeWorkerState **agent_workers_report(struct agent *a, size_t *n);
void agent_workers_report_free(Whet__V1__ServeWorkerState **states, size_t n);
void agent_workers_reap(struct agent *a, int all_done);
uint32_t agent_workers_devices(const struct agent *a);

/* Co-training (cotrain.c): whether the job runs in a shared co-training process (the executor's
 * WHET_COTRAIN=1; a LoRA SFT, DPO or GRPO job of one process), and running it there (its judge models'
 * dirs, NULL-terminated or NULL, bound in the process's sandbox as in its own): its event lines go to
 * `line` as a trainer's stdout lines would, until the process ends. res: its share of the process's device-seconds (by tokens), and why its run or the process failed
 * ("" when neither did). */
struct agent_cotrain_result {
    double device_seconds;
    int members;
    char failure[600];
};
int agent_cotrain_eligible(const struct agent_job *job);
/* The scheduler's co-training groups: the job's group from its START manifest into job->cotrain_group,
 * and the devices another job of that group on this node holds (0: none here yet, take free ones), which
 * the job then shares. Main thread. */
uint32_t agent_cotrain_place(struct agent *a, struct agent_job *job);
void agent_cotrain_run(struct agent_job *job, const char *cfg_path, const char *model_dir, char *const *judge_dirs,
                       void (*line)(void *ctx, const char *line), void *ctx, struct agent_cotrain_result *res);

/* RPC helpers (agent.c): report an event for the job (level info|warn|error, type message|metrics,
 * data JSON or NULL). Failures are logged, not fatal: events are best effort, results are not.
 * agent_call returns the call's gRPC status (RPC_OK: 0). RPC_FAILED_PRECONDITION answers a report of an
 * attempt that is no longer the job's current one (declared lost, or its job ended otherwise): the
 * attempt is fenced, and agent_job_fenced abandons it (its trainer killed unless it has written its final
 * model, nothing more uploaded or reported but that model's FinishJob, which the scheduler may still take
 * as a late success). */
void agent_report_event(struct agent_job *job, const char *level, const char *type, const char *message,
                        const char *data_json);
int agent_call(struct agent *a, const char *method, const ProtobufCMessage *req,
               const ProtobufCMessageDescriptor *resp_desc, int budget_ms, struct whet_err *err);
void agent_job_fenced(struct agent_job *job, const char *what);

/* The executor's Prometheus metrics (metrics.c): a server on `addr` (start returns -1 with err when it
 * cannot listen; stop ends it), and what the loop and the job threads report. */
enum agent_store_op { AGENT_STORE_FETCH, AGENT_STORE_CHECKPOINT_UPLOAD, AGENT_STORE_FINAL_UPLOAD };
int agent_metrics_start(const char *addr, struct whet_err *err);
void agent_metrics_stop(void);
void agent_metrics_registered(int registered);
void agent_metrics_jobs(int running);
void agent_metrics_heartbeat_failed(void);
void agent_metrics_checkpoint_uploaded(void);
void agent_metrics_store_failed(enum agent_store_op op);
/* The model cache whose size and evictions the metrics show; set before agent_metrics_start. */
void agent_metrics_model_cache(struct dir_cache *models);

#endif
