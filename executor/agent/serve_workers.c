/* serve_workers.c - the model workers (`whet serve`) the scheduler has this node run (serving.h in the
 * scheduler; migration 0021).
 *
 * Each heartbeat's answer lists every worker the node is to run. A new one gets a device once one is
 * free (as a 1-device job does, agent_take_devices; a job preempted for it may still be checkpointing
 * there) and a thread that fetches its base model (the node's model cache, as for
 * jobs), then runs `TRAINER serve` as a child in its own process group, listening on the node's address
 * (WHET_EXECUTOR_ADDRESS) at a port the kernel picks, written to its address file once it listens (its
 * model loaded): the worker is then ready at that HOST:PORT. A worker no longer listed is stopped:
 * SIGTERM to its process group, SIGKILL after STOP_GRACE_S. Every heartbeat reports each worker's state
 * until one that reached the scheduler says it exited; then it is forgotten. A worker runs in its own
 * process group but not in the trainers' sandbox (it listens, and reaches the object store for
 * adapters): that is still missing. */
#include <errno.h>
#include <fcntl.h>
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

#define STOP_GRACE_S 5
/* How long a worker told to stop may finish its requests before SIGTERM (whet serve drops those it
 * has when it stops); it gets it as soon as it has none. */
#define DRAIN_MAX_S 30
/* How long reading a worker's load may hold up a heartbeat. */
#define SCRAPE_MS 200

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
    char *cache = xasprintf("%s/cache", w->dir), *http = xasprintf("%s:0", a->address), device[32] = "cpu";
    int dev = __builtin_ctz(w->device_mask ? w->device_mask : 1);
    if (a->cuda) snprintf(device, sizeof device, "cuda:%d", dev);
    unlink(address_file);
    const char *name = json_string_value(json_object_get(w->base, "id"));
    /* WHET_SERVE_SLOTS: sequences a worker decodes at once (whet serve's --slots; its default when unset) */
    const char *slots = whet_env("WHET_SERVE_SLOTS", NULL);
    char *const argv[] = {(char *)a->opts->trainer, "serve", "--model", model, "--name", (char *)name, "--http", http,
                          "--address-file", address_file, "--object-store", (char *)a->opts->object_store,
                          "--cache-dir", cache, "--device", device, "--training", slots ? "--slots" : NULL,
                          (char *)slots, NULL};
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    pid_t pid = atomic_load(&w->stop) ? -1 : fork();
    if (pid == 0) {
        /* only async-signal-safe calls between fork and exec: the executor has other threads */
        setpgid(0, 0);
        if (log_fd >= 0) {
            dup2(log_fd, 1);
            dup2(log_fd, 2);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    if (log_fd >= 0) close(log_fd);
    if (pid < 0) {
        snprintf(w->message, sizeof w->message, "%s", atomic_load(&w->stop) ? "stopped before it ran" : strerror(errno));
    } else {
        setpgid(pid, pid); /* also here: a kill from the main thread must reach the group at once */
        atomic_store(&w->pid, pid);
        if (atomic_load(&w->stop)) kill(-pid, SIGTERM);
        log_info("msg=\"model worker started\" worker=%s model=%s pid=%d device=%s log=%s", w->id, name, (int)pid, device,
                 log_path);
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (WIFSIGNALED(status))
            snprintf(w->message, sizeof w->message, "`whet serve` was killed by signal %d (its log: %s)",
                     WTERMSIG(status), log_path);
        else
            snprintf(w->message, sizeof w->message, "`whet serve` exited with status %d (its log: %s)",
                     WEXITSTATUS(status), log_path);
    }
    free(model);
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
 * slot (whet_serve_requests_running, _waiting). Returns -1 when it did not answer within SCRAPE_MS (a
 * heartbeat is not held up for it). */
static int load_of(const struct agent_worker *w, uint32_t *running, uint32_t *waiting) {
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
    const char *r = strstr(buf, "\nwhet_serve_requests_running "), *q = strstr(buf, "\nwhet_serve_requests_waiting ");
    if (!r || !q) return -1;
    long nr = strtol(r + strlen("\nwhet_serve_requests_running "), NULL, 10);
    long nq = strtol(q + strlen("\nwhet_serve_requests_waiting "), NULL, 10);
    *running = nr > 0 ? (uint32_t)nr : 0;
    *waiting = nq > 0 ? (uint32_t)nq : 0;
    return 0;
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
        if (!w->term_sent && (!w->address[0] || now > w->term_at || load_of(w, &running, &waiting) < 0 ||
                              running + waiting == 0)) {
            kill(-pid, SIGTERM);
            w->term_sent = 1;
            w->kill_at = now + STOP_GRACE_S;
        } else if (w->term_sent && now > w->kill_at) {
            kill(-pid, SIGKILL);
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
        if (w->address[0] && !w->exit_reported && !atomic_load(&w->stop))
            load_of(w, &s->requests_running, &s->requests_waiting);
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
