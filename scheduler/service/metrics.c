/* metrics.c - the scheduler's Prometheus metrics, served at GET /metrics on WHET_SCHEDULER_METRICS
 * (`whet scheduler --metrics HOST:PORT`; off when unset) by one small thread: whether this process
 * leads, the cycles (count, failures, a duration histogram, when the last one ended), what the last
 * cycle's snapshot held (ready nodes, running and queued jobs, how long the oldest queued job has
 * waited) and the nodes declared lost with the jobs they sent back to the queue. A standby serves them
 * too, with whet_scheduler_leader 0, so "no leader" is max() == 0 over the replicas.
 *
 * The cycle updates atomics (relaxed: statistics); the thread reads them. Scrapes are rare and small,
 * so the server answers one connection at a time, each bounded by a 2 s receive timeout. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "log.h"
#include "service_internal.h"

static const double cycle_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define NBUCKETS ((int)WHET_ARRAY_LEN(cycle_bounds))

static struct {
    atomic_int leader;
    atomic_ulong cycles, cycle_failures, cycle_buckets[NBUCKETS], cycle_sum_us;
    atomic_ulong last_cycle_ms; /* Unix time */
    atomic_long nodes_ready, jobs_running, jobs_queued, oldest_queued_ms;
    atomic_ulong nodes_lost, jobs_requeued;
} m;

static int listen_fd = -1;
static pthread_t thread;
static atomic_int stopping;

void scheduler_metrics_leader(int leading) { atomic_store_explicit(&m.leader, leading, memory_order_relaxed); }

void scheduler_metrics_cycle(double seconds, int ok) {
    atomic_fetch_add_explicit(ok ? &m.cycles : &m.cycle_failures, 1, memory_order_relaxed);
    if (!ok) return;
    int b = 0;
    while (b < NBUCKETS && seconds > cycle_bounds[b]) b++;
    if (b < NBUCKETS) atomic_fetch_add_explicit(&m.cycle_buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m.cycle_sum_us, (unsigned long)(seconds * 1e6), memory_order_relaxed);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    atomic_store_explicit(&m.last_cycle_ms, (unsigned long)now.tv_sec * 1000 + (unsigned long)now.tv_nsec / 1000000,
                          memory_order_relaxed);
}

void scheduler_metrics_snapshot(int nodes_ready, int jobs_running, int jobs_queued, double oldest_queued_s) {
    atomic_store_explicit(&m.nodes_ready, nodes_ready, memory_order_relaxed);
    atomic_store_explicit(&m.jobs_running, jobs_running, memory_order_relaxed);
    atomic_store_explicit(&m.jobs_queued, jobs_queued, memory_order_relaxed);
    atomic_store_explicit(&m.oldest_queued_ms, (long)(oldest_queued_s * 1000), memory_order_relaxed);
}

void scheduler_metrics_lost(int nodes, int jobs) {
    atomic_fetch_add_explicit(&m.nodes_lost, (unsigned long)nodes, memory_order_relaxed);
    atomic_fetch_add_explicit(&m.jobs_requeued, (unsigned long)jobs, memory_order_relaxed);
}

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

static void metric(struct whet_buf *t, const char *name, const char *type, const char *help) {
    whet_buf_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The Prometheus text exposition; the caller frees t->data. */
static void render(struct whet_buf *t) {
    metric(t, "whet_scheduler_leader", "gauge", "1 while this scheduler leads (holds the advisory lock), else 0.");
    whet_buf_printf(t, "whet_scheduler_leader %d\n", LOAD(m.leader));
    metric(t, "whet_scheduler_cycle_failures_total", "counter", "Cycles that failed (the database, mostly).");
    whet_buf_printf(t, "whet_scheduler_cycle_failures_total %lu\n", LOAD(m.cycle_failures));
    metric(t, "whet_scheduler_cycle_duration_seconds", "histogram", "Time one successful cycle took.");
    unsigned long cumulative = 0;
    for (int b = 0; b < NBUCKETS; b++) {
        cumulative += LOAD(m.cycle_buckets[b]);
        whet_buf_printf(t, "whet_scheduler_cycle_duration_seconds_bucket{le=\"%g\"} %lu\n", cycle_bounds[b], cumulative);
    }
    whet_buf_printf(t, "whet_scheduler_cycle_duration_seconds_bucket{le=\"+Inf\"} %lu\n", LOAD(m.cycles));
    whet_buf_printf(t, "whet_scheduler_cycle_duration_seconds_sum %.6f\n", (double)LOAD(m.cycle_sum_us) / 1e6);
    whet_buf_printf(t, "whet_scheduler_cycle_duration_seconds_count %lu\n", LOAD(m.cycles));
    metric(t, "whet_scheduler_last_cycle_timestamp_seconds", "gauge", "Unix time the last successful cycle ended.");
    whet_buf_printf(t, "whet_scheduler_last_cycle_timestamp_seconds %.3f\n", (double)LOAD(m.last_cycle_ms) / 1e3);
    metric(t, "whet_scheduler_nodes_ready", "gauge", "Nodes ready to take jobs, in the last cycle.");
    whet_buf_printf(t, "whet_scheduler_nodes_ready %ld\n", LOAD(m.nodes_ready));
    metric(t, "whet_scheduler_jobs_running", "gauge", "Jobs running on a node, in the last cycle.");
    whet_buf_printf(t, "whet_scheduler_jobs_running %ld\n", LOAD(m.jobs_running));
    metric(t, "whet_scheduler_jobs_queued", "gauge", "Jobs waiting to be placed, in the last cycle.");
    whet_buf_printf(t, "whet_scheduler_jobs_queued %ld\n", LOAD(m.jobs_queued));
    metric(t, "whet_scheduler_oldest_queued_job_seconds", "gauge",
           "How long the oldest queued job has waited since it was created, in the last cycle (0: none).");
    whet_buf_printf(t, "whet_scheduler_oldest_queued_job_seconds %.3f\n", (double)LOAD(m.oldest_queued_ms) / 1e3);
    metric(t, "whet_scheduler_nodes_lost_total", "counter", "Nodes declared lost (silent past their lease).");
    whet_buf_printf(t, "whet_scheduler_nodes_lost_total %lu\n", LOAD(m.nodes_lost));
    metric(t, "whet_scheduler_jobs_requeued_total", "counter", "Running jobs sent back to the queue by a lost node.");
    whet_buf_printf(t, "whet_scheduler_jobs_requeued_total %lu\n", LOAD(m.jobs_requeued));
}

static void answer(int fd) {
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char req[4096];
    size_t len = 0;
    while (len < sizeof req - 1) {
        ssize_t n = read(fd, req + len, sizeof req - 1 - len);
        if (n <= 0) return;
        len += (size_t)n;
        req[len] = 0;
        if (strstr(req, "\r\n\r\n")) break;
    }
    struct whet_buf body = {0};
    int found = !strncmp(req, "GET /metrics ", 13) || !strncmp(req, "GET /metrics?", 13);
    if (found) render(&body);
    else whet_buf_puts(&body, "not found: the scheduler serves GET /metrics only\n");
    struct whet_buf head = {0};
    whet_buf_printf(&head, "HTTP/1.1 %s\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                           "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                    found ? "200 OK" : "404 Not Found", body.len);
    if (write(fd, head.data, head.len) == (ssize_t)head.len && body.len) {
        size_t off = 0;
        ssize_t n;
        while (off < body.len && (n = write(fd, body.data + off, body.len - off)) > 0) off += (size_t)n;
    }
    free(head.data);
    free(body.data);
}

static void *serve(void *arg) {
    (void)arg;
    while (!atomic_load(&stopping)) {
        struct pollfd p = {.fd = listen_fd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0) continue;
        int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0) continue;
        answer(fd);
        close(fd);
    }
    return NULL;
}

int scheduler_metrics_start(const char *addr, struct whet_err *err) {
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || !colon[1])
        return whet_errf(err, "metrics address \"%s\" is not HOST:PORT", addr);
    char host[256];
    snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc) return whet_errf(err, "metrics address %s: %s", addr, gai_strerror(rc));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 16) < 0) {
        whet_errf(err, "metrics: cannot listen on %s: %s", addr, strerror(errno));
        whet_err_hint(err, "pick another --metrics HOST:PORT (WHET_SCHEDULER_METRICS)");
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    listen_fd = fd;
    atomic_store(&stopping, 0);
    if (pthread_create(&thread, NULL, serve, NULL)) {
        close(listen_fd);
        listen_fd = -1;
        return whet_errf(err, "metrics: cannot start its thread");
    }
    log_info("msg=\"metrics listening\" address=%s", addr);
    return 0;
}

void scheduler_metrics_stop(void) {
    if (listen_fd < 0) return;
    atomic_store(&stopping, 1);
    pthread_join(thread, NULL);
    close(listen_fd);
    listen_fd = -1;
}
