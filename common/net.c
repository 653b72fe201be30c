/* net.c - see net.h. */
#include "net.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int whet_split_host_port(const char *hostport, char *host, size_t host_size, char *port, size_t port_size) {
    const char *colon = strrchr(hostport, ':');
    if (!colon || !colon[1]) return -1;
    const char *h = hostport;
    size_t hlen = (size_t)(colon - hostport);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= host_size || strlen(colon + 1) >= port_size) return -1;
    memcpy(host, h, hlen);
    host[hlen] = 0;
    strcpy(port, colon + 1);
    return 0;
}

static struct addrinfo *resolve(const char *what, const char *hostport, int passive, struct whet_err *err) {
    char host[256], port[16];
    if (whet_split_host_port(hostport, host, sizeof host, port, sizeof port)) {
        whet_errf(err, "%s \"%s\": expected HOST:PORT", what, hostport);
        return NULL;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0},
                    *res;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc) {
        whet_errf(err, "%s %s: %s", what, hostport, gai_strerror(rc));
        return NULL;
    }
    return res;
}

int whet_tcp_bind(const char *what, const char *hostport, char *bound, size_t bound_len, struct whet_err *err) {
    struct addrinfo *res = resolve(what, hostport, 1, err);
    if (!res) return -1;
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen)) {
        int e = errno;
        freeaddrinfo(res);
        if (fd >= 0) close(fd);
        return whet_errf(err, "%s: cannot bind %s: %s", what, hostport, strerror(e));
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[NI_MAXHOST], p[16];
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p, NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(bound, bound_len, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, p);
    return fd;
}

int whet_tcp_listen(const char *what, const char *hostport, char *bound, size_t bound_len, struct whet_err *err) {
    int fd = whet_tcp_bind(what, hostport, bound, bound_len, err);
    if (fd >= 0 && listen(fd, SOMAXCONN)) {
        int e = errno;
        close(fd);
        return whet_errf(err, "%s: cannot listen on %s: %s", what, hostport, strerror(e));
    }
    return fd;
}

int whet_tcp_connect(const char *what, const char *hostport, double deadline, struct whet_err *err) {
    struct addrinfo *res = resolve(what, hostport, 0, err);
    if (!res) return -1;
    int fd = -1, e = 0;
    for (long wait_ms = 10;; wait_ms = wait_ms < 500 ? wait_ms * 2 : 500) {
        fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) == 0) break;
        e = errno;
        close(fd);
        fd = -1;
        if ((e != ECONNREFUSED && e != ETIMEDOUT && e != EHOSTUNREACH) || whet_now_mono() >= deadline) break;
        struct timespec ts = {0, wait_ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    freeaddrinfo(res);
    if (fd < 0) return whet_errf(err, "%s: cannot connect to %s: %s", what, hostport, strerror(e ? e : errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}
