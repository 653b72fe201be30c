/* agent.c - the executor's main loop: register, heartbeat, act on commands, stop cleanly.
 *
 * The node id is created once and kept in WORK_DIR/node_id, so a restarted executor is the same node
 * to the scheduler. Calls carry deadlines and are retried with backoff (common/rpc/rpc.h); a scheduler
 * that restarts or fails over is simply reached again. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "agent_internal.h"
#include "crypto.h"
#include "env.h"
#include "log.h"
#include "model_plan.h"
#include "proto/whet.pb-c.h"

/* How often the loop looks at its model workers between heartbeats. */
#define WORKER_POLL_MS 100

static volatile sig_atomic_t stopping;
static void on_signal(int sig) {
    (void)sig;
    stopping = 1;
}

int agent_call(struct agent *a, const char *method, const ProtobufCMessage *req,
               const ProtobufCMessageDescriptor *resp_desc, int budget_ms, struct whet_err *err) {
    ProtobufCMessage *resp = NULL;
    int rc = rpc_call(a->rpc, method, req, resp_desc, &resp, 5000, budget_ms, err);
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}

void agent_job_fenced(struct agent_job *job, const char *what) {
    /* A pause or preemption (JOB_STOP) under way is abandoned too: its checkpoint would be refused. A
     * cancel stays one: it kills the trainer already, final model or not. */
    int run = JOB_RUN, stop = JOB_STOP;
    if (atomic_compare_exchange_strong(&job->stop, &run, JOB_ABANDON) ||
        atomic_compare_exchange_strong(&job->stop, &stop, JOB_ABANDON))
        log_warn("msg=\"the scheduler refused the attempt's %s: it is no longer current; abandoning it\" job=%s "
                 "attempt=%d",
                 what, job->id, job->attempt);
}

void agent_report_event(struct agent_job *job, const char *level, const char *type, const char *message,
                        const char *data_json) {
    if (job->rank > 0) return; /* a gang speaks through rank 0; the others' ends come with FinishJob */
    if (atomic_load(&job->stop) == JOB_ABANDON) return; /* its job moved on: the scheduler would refuse it */
    Whet__V1__Event ev = WHET__V1__EVENT__INIT, *evs[] = {&ev};
    ev.job_id = job->id;
    ev.attempt = (uint32_t)job->attempt;
    ev.seq = (uint32_t)++job->event_seq;
    ev.level = (char *)level;
    ev.type = (char *)type;
    ev.message = (char *)message;
    ev.data_json = (char *)(data_json ? data_json : "");
    Whet__V1__ReportEventsRequest req = WHET__V1__REPORT_EVENTS_REQUEST__INIT;
    req.node_id = job->agent->node_id;
    req.n_events = 1;
    req.events = evs;
    struct whet_err err;
    int rc = agent_call(job->agent, "/whet.v1.Scheduler/ReportEvents", &req.base,
                        &whet__v1__report_events_response__descriptor, 30000, &err);
    if (rc == RPC_FAILED_PRECONDITION) agent_job_fenced(job, "event");
    else if (rc != RPC_OK) log_warn("msg=\"event not reported\" job=%s error=\"%s\"", job->id, err.msg);
}

static int load_node_id(struct agent *a, struct whet_err *err) {
    char *path = xasprintf("%s/node_id", a->opts->work_dir), *text = NULL;
    int rc = 0;
    if (whet_read_file(path, 128, &text, NULL, NULL) == 0) {
        text[strcspn(text, "\r\n")] = 0;
        snprintf(a->node_id, sizeof a->node_id, "%s", text);
        free(text);
    }
    if (!a->node_id[0]) {
        whet_random_id("node-", 12, a->node_id);
        char line[80];
        int n = snprintf(line, sizeof line, "%s\n", a->node_id);
        rc = whet_write_file_atomic(path, line, (size_t)n, err);
    }
    free(path);
    return rc;
}

static int register_node(struct agent *a, const struct agent_device *devs, int *heartbeat_ms, struct whet_err *err) {
    Whet__V1__Device d[AGENT_MAX_DEVICES], *dp[AGENT_MAX_DEVICES];
    for (int i = 0; i < a->n_devices; i++) {
        whet__v1__device__init(&d[i]);
        d[i].type = (char *)devs[i].type;
        d[i].memory_mib = devs[i].memory_mib;
        d[i].index = (uint32_t)i;
        dp[i] = &d[i];
    }
    Whet__V1__RegisterRequest req = WHET__V1__REGISTER_REQUEST__INIT;
    req.node_id = a->node_id;
    req.dc = (char *)a->opts->dc;
    req.pool = (char *)a->opts->pool;
    req.n_devices = (size_t)a->n_devices;
    req.devices = dp;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    req.cpu_milli = (uint32_t)(cpus * 1000);
    req.memory_mib = (uint64_t)pages * (uint64_t)page / (1024 * 1024);
    req.version = WHET_AGENT_VERSION;
    req.address = (char *)a->address;
    Whet__V1__RegisterResponse *resp = NULL;
    int rc = rpc_call(a->rpc, "/whet.v1.Scheduler/RegisterNode", &req.base, &whet__v1__register_response__descriptor,
                      (ProtobufCMessage **)&resp, 5000, 60000, err);
    if (rc != RPC_OK) return -1;
    *heartbeat_ms = resp->heartbeat_ms ? (int)resp->heartbeat_ms : 1000;
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    log_info("msg=\"registered\" node=%s dc=%s pool=%s devices=%d type=%s heartbeat_ms=%d", a->node_id, a->opts->dc,
             a->opts->pool, a->n_devices, a->device_type, *heartbeat_ms);
    return 0;
}

static struct agent_job *find_job(struct agent *a, const char *id, int attempt, int rank) {
    for (struct agent_job *j = a->jobs; j; j = j->next)
        if (!strcmp(j->id, id) && j->attempt == attempt && j->rank == rank) return j;
    return NULL;
}

static void start_job(struct agent *a, const Whet__V1__Command *c) {
    json_t *manifest = json_loads(c->manifest_json, 0, NULL);
    if (!manifest || strlen(c->job_id) >= sizeof ((struct agent_job *)0)->id) {
        log_error("msg=\"START without a usable manifest\" job=%s", c->job_id);
        json_decref(manifest);
        return;
    }
    json_t *dist = json_object_get(manifest, "distributed");
    int rank = (int)json_integer_value(json_object_get(dist, "rank"));
    if (find_job(a, c->job_id, (int)c->attempt, rank)) { /* a redelivered START */
        json_decref(manifest);
        return;
    }
    /* Ranks of an older generation of a gang still here never join the new one: they end now. */
    for (struct agent_job *j = a->jobs; j; j = j->next)
        if (!strcmp(j->id, c->job_id) && j->attempt < (int)c->attempt && (j->world_size > 1 || json_is_object(dist)))
            atomic_store(&j->stop, JOB_CANCEL);
    struct agent_job *job = xcalloc(1, sizeof *job);
    snprintf(job->id, sizeof job->id, "%s", c->job_id);
    job->attempt = (int)c->attempt;
    job->rank = rank;
    job->world_size = json_is_object(dist) ? (int)json_integer_value(json_object_get(dist, "world_size")) : 1;
    job->manifest = manifest;
    job->dir = json_is_object(dist) ? xasprintf("%s/jobs/%s-%u-rank%d", a->opts->work_dir, c->job_id, c->attempt, rank)
                                    : xasprintf("%s/jobs/%s-%u", a->opts->work_dir, c->job_id, c->attempt);
    job->agent = a;
    json_int_t want = json_integer_value(json_object_get(manifest, "devices"));
    int shared = 0;
    job->device_mask = agent_cotrain_place(a, job); /* a co-training group's members share its device */
    if (!job->device_mask)
        job->device_mask = agent_take_devices(&a->busy_devices, a->n_devices, want > 0 ? (int)want : 1, &shared);
    if (shared)
        log_warn("msg=\"devices still held by another job\" job=%s attempt=%d devices=0x%x", job->id, job->attempt,
                 job->device_mask);
    job->next = a->jobs;
    a->jobs = job;
    log_info("msg=\"starting job\" job=%s attempt=%d rank=%d/%d devices=0x%x", job->id, job->attempt, job->rank,
             job->world_size, job->device_mask);
    agent_job_start(job);
}

static void apply_command(struct agent *a, const Whet__V1__Command *c) {
    if (c->kind == WHET__V1__COMMAND__KIND__START) {
        start_job(a, c);
        return;
    }
    /* Every rank of the attempt this node runs. */
    for (struct agent_job *job = a->jobs; job; job = job->next) {
        if (strcmp(job->id, c->job_id) || job->attempt != (int)c->attempt) continue;
        if (c->kind == WHET__V1__COMMAND__KIND__STOP) atomic_store(&job->stop, JOB_STOP);
        else if (c->kind == WHET__V1__COMMAND__KIND__CANCEL) atomic_store(&job->stop, JOB_CANCEL);
        log_info("msg=\"command\" job=%s rank=%d kind=%d reason=%s", job->id, job->rank, (int)c->kind, c->reason);
    }
}

/* Frees the jobs whose threads are done. */
static void reap_jobs(struct agent *a) {
    for (struct agent_job **p = &a->jobs; *p;) {
        struct agent_job *j = *p;
        if (atomic_load(&j->done)) {
            *p = j->next;
            agent_job_free(j);
        } else {
            p = &j->next;
        }
    }
    /* what the jobs and model workers still running hold (a device two of them shared stays held) */
    a->busy_devices = agent_workers_devices(a);
    for (struct agent_job *j = a->jobs; j; j = j->next) a->busy_devices |= j->device_mask;
}

/* Returns 1 when the scheduler asked us to register again. */
static int heartbeat(struct agent *a, struct whet_err *err) {
    int n = 0;
    for (struct agent_job *j = a->jobs; j; j = j->next) n++;
    Whet__V1__JobProgress *progress = xcalloc((size_t)n + 1, sizeof *progress), **pp = xcalloc((size_t)n + 1, sizeof *pp);
    int i = 0;
    for (struct agent_job *j = a->jobs; j; j = j->next) {
        if (j->rank > 0) continue; /* rank 0 counts the gang's steps */
        whet__v1__job_progress__init(&progress[i]);
        progress[i].job_id = j->id;
        progress[i].attempt = (uint32_t)j->attempt;
        progress[i].step = (uint32_t)atomic_load(&j->step);
        progress[i].total_steps = (uint32_t)atomic_load(&j->total_steps);
        progress[i].loss = atomic_load(&j->loss);
        progress[i].trained_tokens = (uint64_t)atomic_load(&j->trained_tokens);
        progress[i].state = "running";
        pp[i] = &progress[i];
        i++;
    }
    Whet__V1__HeartbeatRequest req = WHET__V1__HEARTBEAT_REQUEST__INIT;
    req.node_id = a->node_id;
    req.n_jobs = (size_t)i;
    req.jobs = pp;
    req.serve_workers = agent_workers_report(a, &req.n_serve_workers);
    Whet__V1__HeartbeatResponse *resp = NULL;
    int rc = rpc_call(a->rpc, "/whet.v1.Scheduler/Heartbeat", &req.base, &whet__v1__heartbeat_response__descriptor,
                      (ProtobufCMessage **)&resp, 3000, 3000, err);
    free(progress);
    free(pp);
    agent_workers_report_free(req.serve_workers, req.n_serve_workers);
    if (rc != RPC_OK) return -1;
    int reregister = resp->reregister;
    for (size_t k = 0; k < resp->n_commands; k++) apply_command(a, resp->commands[k]);
    agent_workers_reap(a, 0); /* the ends this heartbeat reported reached the scheduler */
    if (!stopping && !reregister) agent_workers_apply(a, resp->serve_workers, resp->n_serve_workers);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return reregister;
}

/* The main loop alone adds and reaps jobs, so it walks the list as stop_all() does. */
static int count_jobs(const struct agent *a) {
    int n = 0;
    for (const struct agent_job *j = a->jobs; j; j = j->next) n++;
    return n;
}

static void stop_all(struct agent *a, enum job_stop how) {
    for (struct agent_job *j = a->jobs; j; j = j->next) atomic_store(&j->stop, how);
}

/* One executor per work dir. A second one would register as the same node (its node_id file), which the
 * scheduler takes for a restart: it requeues the running attempts while the first executor's trainers go
 * on training them, two live trainers of one job. The lock is flock's, so it goes with the process however
 * that ends (a SIGKILL too), and it is held for the process's life: the descriptor is never closed (close-
 * on-exec, and every sandbox's init closes what it inherits, so no trainer holds it). */
static int lock_work_dir(const char *work_dir, struct whet_err *err) {
    char *path = xasprintf("%s/executor.lock", work_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        whet_errf(err, "open %s: %s", path, strerror(errno));
        free(path);
        return -1;
    }
    free(path);
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        char holder[32] = "";
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        close(fd);
        if (e != EWOULDBLOCK) return whet_errf(err, "lock the work dir %s: %s", work_dir, strerror(e));
        whet_errf(err, "another executor (pid %s) uses the work dir %s", holder[0] ? holder : "unknown", work_dir);
        whet_err_hint(err, "stop that one first, or give this one a --work-dir of its own");
        return -1;
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)len, 0) != len)
        log_warn("msg=\"could not write the executor's pid into its work dir lock\" error=\"%s\"", strerror(errno));
    return 0;
}

int executor_run(const struct executor_options *opts, struct whet_err *err) {
    static struct agent a;
    struct agent_device devs[AGENT_MAX_DEVICES];
    a.opts = opts;
    if ((a.n_devices = agent_parse_devices(opts->devices, devs, AGENT_MAX_DEVICES, err)) < 0) return -1;
    snprintf(a.device_type, sizeof a.device_type, "%s", devs[0].type);
    a.cuda = !strcmp(opts->devices, "cuda");
    a.address = whet_env("WHET_EXECUTOR_ADDRESS", "127.0.0.1");
    /* Below the kernel's ephemeral ports, so no outgoing connection of the host's takes one of them. */
    const char *ports = whet_env("WHET_GANG_PORTS", "29000-29999");
    if (sscanf(ports, "%d-%d", &a.gang_port_lo, &a.gang_port_hi) != 2 || a.gang_port_lo < 1024 ||
        a.gang_port_hi < a.gang_port_lo || a.gang_port_hi > 65535) {
        whet_errf(err, "WHET_GANG_PORTS=\"%s\": expected LO-HI with 1024 <= LO <= HI <= 65535", ports);
        return whet_err_hint(err, "a range no service of the fleet listens on: a gang's trainers reach each other there");
    }
    char why[300];
    a.cotrain_pass_tokens = mp_cotrain_pass_tokens_setting(whet_env(MP_COTRAIN_PASS_TOKENS_ENV, NULL), why, sizeof why);
    if (!a.cotrain_pass_tokens) return whet_errf(err, "%s", why);
    struct dir_cache_bound cache_max;
    if (dir_cache_parse_bound(opts->model_cache_max ? opts->model_cache_max : AGENT_MODEL_CACHE_MAX_DEFAULT, &cache_max,
                              err) < 0)
        return whet_err_prefix(err, "the model cache's bound (--model-cache-max, WHET_MODEL_CACHE_MAX)");
    if (whet_mkdir_p(opts->work_dir, err) < 0 || lock_work_dir(opts->work_dir, err) < 0 || load_node_id(&a, err) < 0)
        return -1;
    char *models = xasprintf("%s/models", opts->work_dir);
    a.models = dir_cache_open(models, &cache_max, "model cache", err);
    free(models);
    if (!a.models) return -1;
    if (objstore_open(opts->object_store, &a.store, err) < 0) {
        dir_cache_close(a.models);
        return whet_err_prefix(err, "object store");
    }
    if (rpc_client_open(opts->scheduler, opts->token, &a.rpc, err) < 0) {
        objstore_close(a.store);
        dir_cache_close(a.models);
        return -1;
    }
    agent_metrics_model_cache(a.models);
    if (opts->metrics_addr && agent_metrics_start(opts->metrics_addr, err) < 0) {
        rpc_client_close(a.rpc);
        objstore_close(a.store);
        dir_cache_close(a.models);
        return -1;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int heartbeat_ms = 1000, registered = 0, rc = 0;
    double stop_deadline = 0;
    while (!stopping || a.jobs || a.workers) {
        if (stopping && !stop_deadline) {
            /* Our own shutdown: each job checkpoints and stops, to resume elsewhere or here later; the
             * model workers end (the scheduler places them again when they are wanted). */
            log_info("msg=\"stopping: checkpointing running jobs\"");
            stop_all(&a, JOB_STOP);
            agent_workers_stop_all(&a);
            stop_deadline = whet_now_mono() + 60;
        }
        if (stop_deadline && whet_now_mono() > stop_deadline) stop_all(&a, JOB_CANCEL);
        if (!registered && !stopping) {
            if (register_node(&a, devs, &heartbeat_ms, err) < 0) {
                log_warn("msg=\"cannot register yet; retrying\" error=\"%s\"", err->msg);
                continue;
            }
            registered = 1;
        }
        int hb = heartbeat(&a, err);
        if (hb < 0) {
            log_warn("msg=\"heartbeat failed\" error=\"%s\"", err->msg);
            agent_metrics_heartbeat_failed();
        } else if (hb == 1) {
            /* Declared lost: our jobs were requeued elsewhere; running them on would train them twice. */
            log_warn("msg=\"the scheduler declared this node lost; abandoning its jobs and registering again\"");
            stop_all(&a, JOB_ABANDON);
            agent_workers_stop_all(&a);
            registered = 0;
        }
        if (stopping) agent_workers_reap(&a, 1);
        reap_jobs(&a);
        agent_metrics_registered(registered);
        agent_metrics_jobs(count_jobs(&a));
        /* A model worker that starts listening (or ends) is reported at once: a request waits for it. */
        int slept = 0;
        do {
            usleep(WORKER_POLL_MS * 1000);
            slept += WORKER_POLL_MS;
        } while (slept < heartbeat_ms && !agent_workers_tick(&a));
    }
    reap_jobs(&a);
    agent_metrics_stop();
    rpc_client_close(a.rpc);
    objstore_close(a.store);
    dir_cache_close(a.models);
    log_info("msg=\"stopped\"");
    return rc;
}
