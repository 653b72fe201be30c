/* metrics_http.c - GET /metrics for processes without an HTTP server of their own (metrics_http.h). */
#include "metrics_http.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "log.h"
#include "net.h"

struct metrics_http {
    int fd;
    pthread_t thread;
    atomic_int stopping;
    void (*render)(struct whet_buf *out);
};

void metrics_http_family(struct whet_buf *out, const char *name, const char *type, const char *help) {
    whet_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void metrics_http_sample(struct whet_buf *out, const char *name, const char *type, const char *help, double value) {
    metrics_http_family(out, name, type, help);
    whet_buf_printf(out, "%s %.16g\n", name, value);
}

void metrics_http_histogram(struct whet_buf *out, const char *name, const char *help, const double *bounds, int n,
                            const unsigned long *buckets, unsigned long count, double sum) {
    metrics_http_family(out, name, "histogram", help);
    unsigned long cumulative = 0;
    for (int b = 0; b < n; b++) {
        cumulative += buckets[b];
        whet_buf_printf(out, "%s_bucket{le=\"%g\"} %lu\n", name, bounds[b], cumulative);
    }
    whet_buf_printf(out, "%s_bucket{le=\"+Inf\"} %lu\n%s_sum %.6f\n%s_count %lu\n", name, count, name, sum, name, count);
}

static void answer(struct metrics_http *m, int fd) {
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
    struct whet_buf body = {0}, head = {0};
    int found = !strncmp(req, "GET /metrics ", 13) || !strncmp(req, "GET /metrics?", 13);
    if (found) m->render(&body);
    else whet_buf_puts(&body, "not found: this process serves GET /metrics only\n");
    whet_buf_printf(&head,
                    "HTTP/1.1 %s\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                    "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                    found ? "200 OK" : "404 Not Found", body.len);
    if (write(fd, head.data, head.len) == (ssize_t)head.len) {
        size_t off = 0;
        ssize_t n;
        while (off < body.len && (n = write(fd, body.data + off, body.len - off)) > 0) off += (size_t)n;
    }
    free(head.data);
    free(body.data);
}

static void *serve(void *arg) {
    struct metrics_http *m = arg;
    while (!atomic_load(&m->stopping)) {
        struct pollfd p = {.fd = m->fd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0) continue;
        int fd = accept4(m->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        answer(m, fd);
        close(fd);
    }
    return NULL;
}

struct metrics_http *metrics_http_start(const char *addr, void (*render)(struct whet_buf *out), struct whet_err *err) {
    char bound[300];
    int fd = whet_tcp_listen("metrics", addr, bound, sizeof bound, err);
    if (fd < 0) {
        whet_err_hint(err, "pick another HOST:PORT for the metrics");
        return NULL;
    }
    struct metrics_http *m = xcalloc(1, sizeof *m);
    m->fd = fd;
    m->render = render;
    if (pthread_create(&m->thread, NULL, serve, m)) {
        whet_errf(err, "metrics: cannot start its thread");
        close(fd);
        free(m);
        return NULL;
    }
    log_info("msg=\"metrics listening\" address=%s", addr);
    return m;
}

void metrics_http_stop(struct metrics_http *m) {
    if (!m) return;
    atomic_store(&m->stopping, 1);
    pthread_join(m->thread, NULL);
    close(m->fd);
    free(m);
}
