/* comm_store.c - see comm_store.h. The server is one thread polling its listening socket, its clients
 * and a pipe that stops it; keys and values live in two arrays (a rendezvous holds a few keys per
 * rank). A client is a blocking socket with deadlines. */
#include "comm_store.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "net.h"

enum { OP_HELLO = 'H', OP_SET = 'S', OP_GET = 'G', OP_OK = 'K', OP_VALUE = 'V', OP_ERROR = 'E' };
enum { MAX_KEY = 256, MAX_VALUE = 1 << 20, MAX_CLIENTS = 4096, HEADER = 9 };

/* ---------------------------------------------------------------- framing */

static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}
static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int write_all(int fd, const void *data, size_t len) {
    const char *p = data;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int send_frame(int fd, int op, const char *key, const void *value, size_t vlen) {
    size_t klen = key ? strlen(key) : 0;
    unsigned char *f = xmalloc(HEADER + klen + vlen);
    f[0] = (unsigned char)op;
    put_u32(f + 1, (uint32_t)klen);
    put_u32(f + 5, (uint32_t)vlen);
    if (klen) memcpy(f + HEADER, key, klen);
    if (vlen) memcpy(f + HEADER + klen, value, vlen);
    int rc = write_all(fd, f, HEADER + klen + vlen);
    free(f);
    return rc;
}

/* ---------------------------------------------------------------- the server */

struct store_client {
    int fd;
    int introduced;   /* said hello with the right generation */
    unsigned char *buf; /* bytes received, not yet a whole frame */
    size_t len, cap;
    char *waiting;    /* the key of a get not answered yet, or NULL */
};

struct comm_store_server {
    int listen_fd, stop_pipe[2];
    unsigned generation;
    pthread_t thread;
    struct store_client *clients;
    int n_clients;
    char **keys;
    unsigned char **values;
    size_t *value_lens;
    int n_keys;
};

static int find_key(const struct comm_store_server *s, const char *key) {
    for (int i = 0; i < s->n_keys; i++)
        if (!strcmp(s->keys[i], key)) return i;
    return -1;
}

static void drop_client(struct comm_store_server *s, int i) {
    close(s->clients[i].fd);
    free(s->clients[i].buf);
    free(s->clients[i].waiting);
    s->clients[i] = s->clients[--s->n_clients];
}

static void set_key(struct comm_store_server *s, const char *key, const unsigned char *value, size_t len) {
    int k = find_key(s, key);
    if (k < 0) {
        k = s->n_keys++;
        s->keys = xrealloc(s->keys, sizeof *s->keys * (size_t)s->n_keys);
        s->values = xrealloc(s->values, sizeof *s->values * (size_t)s->n_keys);
        s->value_lens = xrealloc(s->value_lens, sizeof *s->value_lens * (size_t)s->n_keys);
        s->keys[k] = xstrdup(key);
    } else {
        free(s->values[k]);
    }
    s->values[k] = xmalloc(len ? len : 1);
    memcpy(s->values[k], value, len);
    s->value_lens[k] = len;
    for (int i = 0; i < s->n_clients; i++) {
        struct store_client *c = &s->clients[i];
        if (c->waiting && !strcmp(c->waiting, key)) {
            free(c->waiting);
            c->waiting = NULL;
            send_frame(c->fd, OP_VALUE, NULL, value, len); /* a failed send shows as a closed socket next poll */
        }
    }
}

/* One whole frame from client i; -1 drops the client (a protocol error or another generation). */
static int handle_frame(struct comm_store_server *s, int i, int op, const char *key, const unsigned char *value,
                        size_t vlen) {
    struct store_client *c = &s->clients[i];
    if (op == OP_HELLO) {
        char text[64];
        snprintf(text, sizeof text, "%.*s", (int)(vlen < sizeof text ? vlen : sizeof text - 1), (const char *)value);
        unsigned generation = 0;
        int rank = -1;
        if (sscanf(text, "%u %d", &generation, &rank) != 2) return -1;
        if (generation != s->generation) {
            char msg[160];
            snprintf(msg, sizeof msg, "rank %d is of generation %u; this gang is generation %u", rank, generation,
                     s->generation);
            send_frame(c->fd, OP_ERROR, NULL, msg, strlen(msg));
            return -1;
        }
        c->introduced = 1;
        return send_frame(c->fd, OP_OK, NULL, NULL, 0);
    }
    if (!c->introduced) return -1;
    if (op == OP_SET) {
        set_key(s, key, value, vlen);
        return send_frame(c->fd, OP_OK, NULL, NULL, 0);
    }
    if (op == OP_GET) {
        int k = find_key(s, key);
        if (k >= 0) return send_frame(c->fd, OP_VALUE, NULL, s->values[k], s->value_lens[k]);
        free(c->waiting);
        c->waiting = xstrdup(key);
        return 0;
    }
    return -1;
}

/* Reads what client i sent and handles every whole frame; -1 when the client is gone or misbehaved. */
static int read_client(struct comm_store_server *s, int i) {
    struct store_client *c = &s->clients[i];
    if (c->cap - c->len < 4096) {
        c->cap = c->cap ? c->cap * 2 : 8192;
        c->buf = xrealloc(c->buf, c->cap);
    }
    ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    if (n < 0 && errno == EINTR) return 0;
    if (n <= 0) return -1;
    c->len += (size_t)n;
    size_t at = 0;
    while (c->len - at >= HEADER) {
        const unsigned char *f = c->buf + at;
        uint32_t klen = get_u32(f + 1), vlen = get_u32(f + 5);
        if (klen > MAX_KEY || vlen > MAX_VALUE) return -1;
        if (c->len - at < HEADER + klen + vlen) break;
        char key[MAX_KEY + 1];
        memcpy(key, f + HEADER, klen);
        key[klen] = 0;
        if (handle_frame(s, i, f[0], key, f + HEADER + klen, vlen)) return -1;
        at += HEADER + klen + vlen;
    }
    memmove(c->buf, c->buf + at, c->len - at);
    c->len -= at;
    return 0;
}

static void accept_client(struct comm_store_server *s) {
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return;
    if (s->n_clients == MAX_CLIENTS) {
        close(fd);
        return;
    }
    /* A peer that stops reading must not stall the rendezvous of the others for ever. */
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    s->clients = xrealloc(s->clients, sizeof *s->clients * (size_t)(s->n_clients + 1));
    s->clients[s->n_clients++] = (struct store_client){.fd = fd};
}

static void *serve(void *arg) {
    struct comm_store_server *s = arg;
    struct pollfd *fds = NULL;
    for (;;) {
        fds = xrealloc(fds, sizeof *fds * (size_t)(s->n_clients + 2));
        fds[0] = (struct pollfd){.fd = s->stop_pipe[0], .events = POLLIN};
        fds[1] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
        for (int i = 0; i < s->n_clients; i++) fds[i + 2] = (struct pollfd){.fd = s->clients[i].fd, .events = POLLIN};
        int n_polled = s->n_clients;
        if (poll(fds, (nfds_t)n_polled + 2, -1) < 0 && errno != EINTR) break;
        if (fds[0].revents) break;
        /* Backwards, so that dropping client i (the last moves into its place) skips no one. */
        for (int i = n_polled - 1; i >= 0; i--)
            if (fds[i + 2].revents && read_client(s, i)) drop_client(s, i);
        if (fds[1].revents & POLLIN) accept_client(s);
    }
    free(fds);
    return NULL;
}

int comm_store_serve(struct comm_store_server **out, const char *hostport, unsigned generation, char *bound,
                     size_t bound_len, struct whet_err *err) {
    int fd = whet_tcp_listen("distributed.rendezvous", hostport, bound, bound_len, err);
    if (fd < 0) return -1;
    struct comm_store_server *s = xcalloc(1, sizeof *s);
    s->listen_fd = fd;
    s->generation = generation;
    if (pipe2(s->stop_pipe, O_CLOEXEC) || pthread_create(&s->thread, NULL, serve, s)) {
        close(fd);
        free(s);
        return whet_errf(err, "distributed.rendezvous: cannot start the store's thread");
    }
    *out = s;
    return 0;
}

void comm_store_server_stop(struct comm_store_server *s) {
    if (!s) return;
    if (write(s->stop_pipe[1], "x", 1) != 1) abort(); /* cannot fail on an empty pipe */
    pthread_join(s->thread, NULL);
    while (s->n_clients) drop_client(s, s->n_clients - 1);
    for (int k = 0; k < s->n_keys; k++) {
        free(s->keys[k]);
        free(s->values[k]);
    }
    free(s->keys);
    free(s->values);
    free(s->value_lens);
    free(s->clients);
    close(s->listen_fd);
    close(s->stop_pipe[0]);
    close(s->stop_pipe[1]);
    free(s);
}

/* ---------------------------------------------------------------- the client */

struct comm_store {
    int fd;
    char address[300];
};

static int read_full(int fd, void *data, size_t len, double deadline) {
    char *p = data;
    while (len > 0) {
        double left = deadline - whet_now_mono();
        if (left <= 0) return errno = ETIMEDOUT, -1;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return errno = r == 0 ? ETIMEDOUT : errno, -1;
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return errno = n == 0 ? ECONNRESET : errno, -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Sends a request and reads its answer: OK, or a value (malloc'd into *value when asked). */
static int request(struct comm_store *s, int op, const char *key, const void *value, size_t vlen, void **answer,
                   size_t *answer_len, double deadline, struct whet_err *err) {
    unsigned char h[HEADER];
    if (send_frame(s->fd, op, key, value, vlen) || read_full(s->fd, h, HEADER, deadline))
        return whet_errf(err, "distributed rendezvous at %s: %s%s", s->address, strerror(errno),
                         errno == ETIMEDOUT ? " (the other ranks did not all arrive in time)" : "");
    uint32_t klen = get_u32(h + 1), alen = get_u32(h + 5);
    if (klen || alen > MAX_VALUE) return whet_errf(err, "distributed rendezvous at %s: malformed answer", s->address);
    char *body = xmalloc(alen + 1);
    if (read_full(s->fd, body, alen, deadline)) {
        free(body);
        return whet_errf(err, "distributed rendezvous at %s: %s", s->address, strerror(errno));
    }
    body[alen] = 0;
    if (h[0] == OP_ERROR) {
        whet_errf(err, "distributed rendezvous at %s refused this rank: %s", s->address, body);
        free(body);
        return -1;
    }
    if (answer) {
        *answer = body;
        *answer_len = alen;
    } else {
        free(body);
    }
    return 0;
}

int comm_store_connect(struct comm_store **out, const char *hostport, unsigned generation, int rank, double deadline,
                       struct whet_err *err) {
    int fd = whet_tcp_connect("distributed.rendezvous", hostport, deadline, err);
    if (fd < 0) return -1;
    struct comm_store *s = xcalloc(1, sizeof *s);
    s->fd = fd;
    snprintf(s->address, sizeof s->address, "%s", hostport);
    char hello[64];
    snprintf(hello, sizeof hello, "%u %d", generation, rank);
    if (request(s, OP_HELLO, NULL, hello, strlen(hello), NULL, NULL, deadline, err)) {
        comm_store_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

int comm_store_set(struct comm_store *s, const char *key, const void *value, size_t len, struct whet_err *err) {
    if (strlen(key) > MAX_KEY || len > MAX_VALUE) return whet_errf(err, "rendezvous key %s: too large", key);
    return request(s, OP_SET, key, value, len, NULL, NULL, whet_now_mono() + 60, err);
}

int comm_store_get(struct comm_store *s, const char *key, void **value, size_t *len, double deadline,
                   struct whet_err *err) {
    if (strlen(key) > MAX_KEY) return whet_errf(err, "rendezvous key %s: too long", key);
    return request(s, OP_GET, key, NULL, 0, value, len, deadline, err);
}

void comm_store_close(struct comm_store *s) {
    if (!s) return;
    close(s->fd);
    free(s);
}
