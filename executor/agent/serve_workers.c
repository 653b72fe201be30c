/* serve_workers.c - the model workers (`whet serve`) the scheduler has this node run (serving.h in the
 * scheduler; migration 0021).
 *
 * Each heartbeat's answer lists every worker the node is to run. A new one gets a device once one is
 * free (as a 1-device job does, agent_take_devices; a job preempted for it may still be checkpointing
 * there) and a thread that fetches its base model (the node's model cache, as for jobs), then runs
 * `TRAINER serve` in the trainers' sandbox (serve() says what it may reach), listening on the node's
 * address (WHET_EXECUTOR_ADDRESS) at a port the kernel picks, written to its address file once it
 * listens (its model loaded): the worker is then ready at that HOST:PORT. A worker no longer listed is
 * stopped: SIGTERM to its sandbox's init, which passes it on, SIGKILL to init (the whole sandbox) after
 * STOP_GRACE_S. Every heartbeat reports each worker's state until one that reached the scheduler says
 * it exited; then it is forgotten. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_internal.h"
#include "env.h"
#include "log.h"
#include "net.h"
#include "sandbox.h"
#include "trainer_sandbox.h"

#define STOP_GRACE_S 5
/* How long a worker told to stop may finish its requests before SIGTERM (whet serve drops those it
 * has when it stops); it gets it as soon as it has none. */
#define DRAIN_MAX_S 30
/* How long reading a worker's load may hold up a heartbeat. */
#define SCRAPE_MS 200

/* What a worker's sandbox lets it reach, worked out before the spawn (the sandbox takes numeric
 * addresses only: it resolves nothing). */
struct worker_net {
    char listen[INET6_ADDRSTRLEN]; /* the node's address (WHET_EXECUTOR_ADDRESS), numeric */
    char **connect_to;             /* NULL-terminated "ADDR:PORT" of an s3:// store's endpoint; owned */
    char *resolve;                 /* "WHET_S3_RESOLVE=HOST:PORT:ADDR,…" for its client; owned */
    const char *store_dir;         /* a file:// store's directory (bound writable: session saves) */
};

static void worker_net_free(struct worker_net *n) {
    for (size_t i = 0; n->connect_to && n->connect_to[i]; i++) free(n->connect_to[i]);
    free(n->connect_to);
    free(n->resolve);
}

/* getaddrinfo of HOST (brackets allowed) and PORT, as numeric text: the first address into n->listen
 * (listen), else every address with its port into n->connect_to, and all of them into n->resolve (the
 * sandbox has no DNS: the object store client inside takes them from there). */
static int resolve_each(const char *host, const char *port, struct worker_net *n, int listen, struct whet_err *err) {
    char name[256];
    size_t len = strlen(host);
    if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
        host++;
        len -= 2;
    }
    if (len >= sizeof name) return whet_errf(err, "host name \"%s\" is too long", host);
    memcpy(name, host, len);
    name[len] = 0;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(name, port, &hints, &res);
    if (rc) return whet_errf(err, "cannot resolve \"%s\": %s", name, gai_strerror(rc));
    size_t count = 0;
    for (struct addrinfo *r = res; r; r = r->ai_next) count++;
    if (!listen) {
        n->connect_to = xcalloc(count + 1, sizeof *n->connect_to);
        n->resolve = xasprintf("WHET_S3_RESOLVE=%s:%s:", name, port);
    }
    count = 0;
    for (struct addrinfo *r = res; r; r = r->ai_next) {
        char text[INET6_ADDRSTRLEN];
        const void *addr = r->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)r->ai_addr)->sin_addr
                                                   : (const void *)&((struct sockaddr_in6 *)r->ai_addr)->sin6_addr;
        if ((r->ai_family != AF_INET && r->ai_family != AF_INET6) || !inet_ntop(r->ai_family, addr, text, sizeof text))
            continue;
        if (listen) {
            snprintf(n->listen, sizeof n->listen, "%s", text);
            break;
        }
        int v6 = r->ai_family == AF_INET6;
        n->connect_to[count++] = xasprintf(v6 ? "[%s]:%s" : "%s:%s", text, port);
        char *more = xasprintf("%s%s%s%s%s", n->resolve, count > 1 ? "," : "", v6 ? "[" : "", text, v6 ? "]" : "");
        free(n->resolve);
        n->resolve = more;
    }
    freeaddrinfo(res);
    if (listen && !n->listen[0]) return whet_errf(err, "\"%s\" has no IPv4 or IPv6 address", name);
    return 0;
}

/* The policy's network: listen on the node's address; an s3:// store's endpoint (WHET_S3_ENDPOINT, else
 * AWS's for AWS_REGION, as the object store client picks it) on its port and nothing else; a file://
 * store needs no network. */
static int worker_net_plan(struct worker_net *n, const char *node_address, const char *store, struct whet_err *err) {
    memset(n, 0, sizeof *n);
    if (resolve_each(node_address, NULL, n, 1, err) < 0) return whet_err_prefix(err, "WHET_EXECUTOR_ADDRESS");
    if (!strncmp(store, "file://", 7)) {
        n->store_dir = store + 7;
        return 0;
    }
    if (strncmp(store, "s3://", 5)) return 0;
    const char *endpoint = getenv("WHET_S3_ENDPOINT"), *region = getenv("AWS_REGION");
    char *url = endpoint && *endpoint ? xstrdup(endpoint)
                                      : xasprintf("https://s3.%s.amazonaws.com", region && *region ? region : "us-east-1");
    int tls = !strncmp(url, "https://", 8);
    char *host = url + (tls ? 8 : strncmp(url, "http://", 7) ? 0 : 7);
    host[strcspn(host, "/")] = 0;
    char *colon = strrchr(host, ':'), *bracket = strrchr(host, ']');
    const char *port = tls ? "443" : "80";
    if (colon && (!bracket || colon > bracket)) {
        *colon = 0;
        port = colon + 1;
    }
    int rc = resolve_each(host, port, n, 0, err);
    free(url);
    return rc < 0 ? whet_err_prefix(err, "WHET_S3_ENDPOINT") : 0;
}

/* The object store client's settings pass into the sandbox, and the operator keyring as a copy
 * (keyring_copy); nothing else of the executor's environment. */
static const char *const passed_env[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                                         "AWS_REGION", "WHET_S3_ENDPOINT", "WHET_LOG_LEVEL"};

/* The operator keyring (WHET_DATA_KEY_FILE, mode 0600, which uid 65534 could not read) copied into the
 * worker's directory, which the worker comes to own (removed with it). *entry: its
 * "WHET_DATA_KEY_FILE=PATH" (the caller frees it), NULL without a keyring. Returns 0, or -1 with err. */
static int keyring_copy(const struct agent_worker *w, char **entry, struct whet_err *err) {
    const char *path = getenv("WHET_DATA_KEY_FILE");
    *entry = NULL;
    if (!path || !*path) return 0;
    char *text = NULL, *copy = xasprintf("%s/data-keys", w->dir);
    size_t len = 0;
    int rc = whet_read_file(path, 1 << 20, &text, &len, err) < 0 ? whet_err_prefix(err, "WHET_DATA_KEY_FILE")
                                                                  : whet_write_file_atomic_mode(copy, text, len, 0600, err);
    if (rc == 0) *entry = xasprintf("WHET_DATA_KEY_FILE=%s", copy);
    if (text) explicit_bzero(text, len);
    free(text);
    free(copy);
    return rc;
}

/* Runs `whet serve` in the trainers' sandbox (trainer_sandbox.h's policy: namespaces, the seccomp
 * allow-list, process and file limits, the model bound read-only, its directory writable) with a
 * server's network (sandbox_net.c): it may bind only the node's address, connect only to the object
 * store's endpoint; the gateway's and the executor's connections to it come in unfiltered. A root
 * executor runs it as nobody, as trainers, unless the store is a file:// directory (the gateway's
 * files, which nobody could not write). Its PID namespace dies with its init, and init with the
 * executor (the sandbox's lifeline), so no worker outlives a killed executor. */
static void serve(struct agent_worker *w, const char *model, const char *const *argv, const char *log_path) {
    struct agent *a = w->agent;
    struct whet_err err;
    struct worker_net net;
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    char *keys = NULL;
    if (worker_net_plan(&net, a->address, a->opts->object_store, &err) < 0 || log_fd < 0 ||
        keyring_copy(w, &keys, &err) < 0) {
        char text[3 * WHET_ERR_MAX];
        snprintf(w->message, sizeof w->message, "the sandbox could not be planned: %s",
                 log_fd < 0 ? strerror(errno) : whet_err_text(&err, text, sizeof text));
        worker_net_free(&net);
        if (log_fd >= 0) close(log_fd);
        return;
    }
    struct agent_cuda_grant gpus;
    agent_cuda_grant(&gpus, w->device_mask);
    char *env_copy[WHET_ARRAY_LEN(passed_env)] = {0};
    const char *env[WHET_ARRAY_LEN(passed_env) + 9] = {"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8",
                                                       "OMP_WAIT_POLICY=PASSIVE", "CUDA_DEVICE_ORDER=PCI_BUS_ID"};
    size_t n_env = 5;
#ifdef __SANITIZE_ADDRESS__
    env[n_env++] = "ASAN_OPTIONS=detect_leaks=0"; /* LeakSanitizer's ptrace is forbidden (as in job.c) */
#endif
    if (a->cuda) env[n_env++] = gpus.visible;
    if (net.resolve) env[n_env++] = net.resolve;
    if (keys) env[n_env++] = keys;
    for (size_t i = 0; i < WHET_ARRAY_LEN(passed_env); i++) {
        const char *v = getenv(passed_env[i]);
        if (v) env[n_env++] = env_copy[i] = xasprintf("%s=%s", passed_env[i], v);
    }
    const char *writable[] = {w->dir, net.store_dir, NULL}, *readonly[] = {model, a->opts->trainer, NULL};
    struct sandbox_spec spec;
    trainer_sandbox_spec(&spec, argv, env, w->dir, writable, readonly, a->cuda ? gpus.nodes : NULL, NULL);
    if (net.store_dir) spec.host_uid = spec.host_gid = -1;
    spec.listen_host = net.listen;
    spec.connect_to = (const char *const *)net.connect_to;
    spec.stdout_fd = spec.stderr_fd = log_fd;
    struct sandbox_child child;
    if (trainer_sandbox_hand_over(&spec, w->dir, model, &err) < 0 || atomic_load(&w->stop) ||
        sandbox_spawn(&spec, &child, &err) < 0) {
        char text[3 * WHET_ERR_MAX];
        snprintf(w->message, sizeof w->message, "%s", atomic_load(&w->stop) ? "stopped before it ran" : "");
        if (!w->message[0])
            snprintf(w->message, sizeof w->message, "the sandbox could not start `whet serve`: %s",
                     whet_err_text(&err, text, sizeof text));
    } else {
        atomic_store(&w->pid, child.pid);
        /* a stop that came meanwhile: SIGTERM to init reaches `whet serve` */
        if (atomic_load(&w->stop)) kill(child.pid, SIGTERM);
        log_info("msg=\"model worker started\" worker=%s pid=%d sandbox=%s listen=%s log=%s", w->id, (int)child.pid,
                 net.connect_to ? "object store endpoint" : "no outbound network", net.listen, log_path);
        struct sandbox_result res;
        if (sandbox_wait(&child, &res, &err) < 0)
            snprintf(w->message, sizeof w->message, "waiting for `whet serve` failed (its log: %s)", log_path);
        else
            snprintf(w->message, sizeof w->message, "`whet serve` ended: %s (its log: %s)", res.message, log_path);
    }
    close(log_fd);
    for (size_t i = 0; i < WHET_ARRAY_LEN(env_copy); i++) free(env_copy[i]);
    free(keys);
    worker_net_free(&net);
}

static void *worker_main(void *arg) {
    struct agent_worker *w = arg;
    struct agent *a = w->agent;
    struct whet_err err;
    char *model = agent_fetch_model(a, w->base, &err);
    if (!model) {
        snprintf(w->message, sizeof w->message, "its base model could not be fetched: %s", err.msg);
        atomic_store(&w->done, 1);
        return NULL;
    }
    char *address_file = xasprintf("%s/address", w->dir), *log_path = xasprintf("%s/serve.log", w->dir);
    char *cache = xasprintf("%s/cache", w->dir), *http = xasprintf("%s:0", a->address);
    /* a GPU worker sees only its own device (CUDA_VISIBLE_DEVICES): its first */
    const char *device = a->cuda ? "cuda:0" : "cpu";
    unlink(address_file);
    const char *name = json_string_value(json_object_get(w->base, "id"));
    const char *argv[24] = {a->opts->trainer, "serve", "--model", model, "--name", name, "--http", http,
                            "--address-file", address_file, "--object-store", a->opts->object_store,
                            "--cache-dir", cache, "--device", device, "--training"};
    int argc = 17;
    /* WHET_SERVE_SLOTS: sequences a worker decodes at once (whet serve's --slots; its default when unset);
     * WHET_SESSION_IDLE_S: when a training session expires, as the gateway and the scheduler read it, so
     * that the worker does not free a session they still take for live (--session-idle) */
    const char *slots = whet_env("WHET_SERVE_SLOTS", NULL), *idle = whet_env("WHET_SESSION_IDLE_S", NULL);
    if (slots) argv[argc++] = "--slots", argv[argc++] = slots;
    if (idle) argv[argc++] = "--session-idle", argv[argc++] = idle;
    log_info("msg=\"starting model worker\" worker=%s model=%s device=%s", w->id, name, device);
    serve(w, model, argv, log_path);
    agent_release_model(a, model);
    free(address_file);
    free(log_path);
    free(cache);
    free(http);
    atomic_store(&w->done, 1);
    return NULL;
}

static void start_worker(struct agent *a, const Whet__V1__ServeWorker *s) {
    json_t *base = json_loads(s->base_model_json, 0, NULL);
    if (!json_is_string(json_object_get(base, "id")) || strlen(s->worker_id) >= sizeof ((struct agent_worker *)0)->id) {
        log_error("msg=\"model worker without a usable base model\" worker=%s", s->worker_id);
        json_decref(base);
        return;
    }
    struct agent_worker *w = xcalloc(1, sizeof *w);
    snprintf(w->id, sizeof w->id, "%s", s->worker_id);
    w->base = base;
    w->agent = a;
    w->dir = xasprintf("%s/workers/%s", a->opts->work_dir, w->id);
    w->next = a->workers;
    a->workers = w;
}

/* Runs a worker that waits for its device once one is free (a job preempted for it may still be
 * checkpointing on it): its thread fetches the model and runs `whet serve`. */
static void launch(struct agent *a, struct agent_worker *w) {
    uint32_t all = a->n_devices >= 32 ? ~0u : (1u << a->n_devices) - 1;
    if (!(all & ~a->busy_devices)) return;
    int shared;
    w->device_mask = agent_take_devices(&a->busy_devices, a->n_devices, 1, &shared);
    struct whet_err err;
    if (whet_mkdir_p(w->dir, &err) < 0 || pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        snprintf(w->message, sizeof w->message, "its directory or thread could not be made: %s", err.msg);
        atomic_store(&w->done, 1);
        return;
    }
    w->started = 1;
}

/* Asks a worker to stop: the gateway sends it nothing new (its row is no longer ready); its process
 * group gets SIGTERM once its requests are answered (agent_workers_tick), SIGKILL after the grace. */
static void stop_worker(struct agent_worker *w) {
    if (atomic_exchange(&w->stop, 1)) return;
    w->term_at = whet_now_mono() + DRAIN_MAX_S;
    log_info("msg=\"stopping model worker\" worker=%s", w->id);
}

void agent_workers_apply(struct agent *a, Whet__V1__ServeWorker *const *list, size_t n) {
    for (struct agent_worker *w = a->workers; w; w = w->next) {
        size_t k = 0;
        while (k < n && strcmp(list[k]->worker_id, w->id)) k++;
        if (k == n) stop_worker(w);
    }
    for (size_t k = 0; k < n; k++) {
        struct agent_worker *w = a->workers;
        while (w && strcmp(w->id, list[k]->worker_id)) w = w->next;
        if (!w) start_worker(a, list[k]);
    }
}

void agent_workers_stop_all(struct agent *a) {
    for (struct agent_worker *w = a->workers; w; w = w->next) stop_worker(w);
}

/* Whether its address file names where it listens yet (1: it does now). */
static int check_ready(struct agent_worker *w) {
    char *path = xasprintf("%s/address", w->dir), *text = NULL;
    if (whet_read_file(path, sizeof w->address - 1, &text, NULL, NULL) == 0) {
        text[strcspn(text, "\r\n")] = 0;
        if (*text) {
            snprintf(w->address, sizeof w->address, "%s", text);
            log_info("msg=\"model worker listening\" worker=%s address=%s", w->id, w->address);
        }
        free(text);
    }
    free(path);
    return w->address[0] != 0;
}

/* A ready worker's load from its GET /metrics: the requests it decodes and those waiting for a sequence
 * slot (whet_serve_requests_running, _waiting) and, when `generated` is not NULL, the tokens it has
 * generated (whet_serve_generated_tokens_total). Returns -1 when it did not answer within SCRAPE_MS (a
 * heartbeat is not held up for it). */
static int load_of(const struct agent_worker *w, uint32_t *running, uint32_t *waiting, double *generated) {
    struct whet_err err;
    int fd = whet_tcp_connect("model worker", w->address, whet_now_mono() + SCRAPE_MS / 1000.0, &err);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_usec = SCRAPE_MS * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    static const char get[] = "GET /metrics HTTP/1.0\r\n\r\n";
    char buf[16384];
    size_t len = 0;
    ssize_t n = write(fd, get, sizeof get - 1);
    while (n > 0 && len < sizeof buf - 1 && (n = read(fd, buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)n;
    close(fd);
    buf[len] = 0;
    static const char run_name[] = "\nwhet_serve_requests_running ", wait_name[] = "\nwhet_serve_requests_waiting ",
                      gen_name[] = "\nwhet_serve_generated_tokens_total ";
    const char *r = strstr(buf, run_name), *q = strstr(buf, wait_name), *g = strstr(buf, gen_name);
    if (!r || !q || (generated && !g)) return -1;
    long nr = strtol(r + strlen(run_name), NULL, 10);
    long nq = strtol(q + strlen(wait_name), NULL, 10);
    *running = nr > 0 ? (uint32_t)nr : 0;
    *waiting = nq > 0 ? (uint32_t)nq : 0;
    if (generated) *generated = strtod(g + strlen(gen_name), NULL);
    return 0;
}

/* A ready worker's load for the heartbeat: its requests, and its tokens/s since the previous report
 * (none for its first). */
static void report_load(struct agent_worker *w, Whet__V1__ServeWorkerState *s) {
    double generated, now = whet_now_mono();
    if (load_of(w, &s->requests_running, &s->requests_waiting, &generated) < 0) return;
    if (w->generated_at > 0 && now > w->generated_at && generated >= w->generated)
        s->tokens_per_s = (uint32_t)((generated - w->generated) / (now - w->generated_at) + 0.5);
    w->generated = generated;
    w->generated_at = now;
}

int agent_workers_tick(struct agent *a) {
    int news = 0;
    for (struct agent_worker *w = a->workers; w; w = w->next) {
        if (atomic_load(&w->done)) {
            news |= !w->exit_reported;
            continue;
        }
        if (!w->started && atomic_load(&w->stop)) {
            snprintf(w->message, sizeof w->message, "stopped before it ran");
            atomic_store(&w->done, 1);
            news = 1;
            continue;
        }
        if (!w->started) launch(a, w);
        if (!w->address[0] && !atomic_load(&w->stop)) news |= check_ready(w);
        pid_t pid = atomic_load(&w->pid);
        if (!atomic_load(&w->stop) || pid <= 0) continue;
        double now = whet_now_mono();
        uint32_t running = 0, waiting = 0;
        if (!w->term_sent && (!w->address[0] || now > w->term_at || load_of(w, &running, &waiting, NULL) < 0 ||
                              running + waiting == 0)) {
            kill(pid, SIGTERM); /* the sandbox's init passes it on */
            w->term_sent = 1;
            w->kill_at = now + STOP_GRACE_S;
        } else if (w->term_sent && now > w->kill_at) {
            kill(pid, SIGKILL); /* init: the whole sandbox goes with it */
        }
    }
    return news;
}

static void worker_free(struct agent_worker *w) {
    if (w->started) pthread_join(w->thread, NULL);
    json_decref(w->base);
    whet_rm_rf(w->dir);
    free(w->dir);
    free(w);
}

Whet__V1__ServeWorkerState **agent_workers_report(struct agent *a, size_t *n) {
    size_t count = 0;
    for (struct agent_worker *w = a->workers; w; w = w->next) count++;
    Whet__V1__ServeWorkerState **out = xcalloc(count + 1, sizeof *out);
    *n = 0;
    for (struct agent_worker *w = a->workers; w; w = w->next) {
        Whet__V1__ServeWorkerState *s = xcalloc(1, sizeof *s);
        whet__v1__serve_worker_state__init(s);
        s->worker_id = w->id;
        w->exit_reported = atomic_load(&w->done);
        s->state = w->exit_reported ? "exited" : w->address[0] ? "ready" : "starting";
        s->address = w->address;
        s->message = w->exit_reported ? w->message : "";
        if (w->address[0] && !w->exit_reported && !atomic_load(&w->stop)) report_load(w, s);
        out[(*n)++] = s;
    }
    return out;
}

void agent_workers_report_free(Whet__V1__ServeWorkerState **states, size_t n) {
    for (size_t i = 0; i < n; i++) free(states[i]);
    free(states);
}

void agent_workers_reap(struct agent *a, int all_done) {
    for (struct agent_worker **p = &a->workers; *p;) {
        struct agent_worker *w = *p;
        if (atomic_load(&w->done) && (w->exit_reported || all_done)) {
            if (!atomic_load(&w->stop)) log_warn("msg=\"model worker ended\" worker=%s why=\"%s\"", w->id, w->message);
            *p = w->next;
            worker_free(w);
        } else {
            p = &w->next;
        }
    }
}

uint32_t agent_workers_devices(const struct agent *a) {
    uint32_t mask = 0;
    for (const struct agent_worker *w = a->workers; w; w = w->next)
        if (!atomic_load(&w->done)) mask |= w->device_mask;
    return mask;
}
