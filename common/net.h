/* net.h - TCP addresses written as HOST:PORT ("127.0.0.1:8080", "[::1]:0", "node-7:41000"): split,
 * listened on, connected to. Blocking sockets, close-on-exec; the callers own the descriptors. */
#ifndef WHET_NET_H
#define WHET_NET_H

#include <stddef.h>

#include "util.h"

/* Splits HOST:PORT (brackets around an IPv6 host removed); -1 when it is not of that form or too long. */
int whet_split_host_port(const char *hostport, char *host, size_t host_size, char *port, size_t port_size);
/* A socket bound to HOST:PORT (port 0: the kernel picks one); the address it is bound to, numeric,
 * goes to bound[bound_len]. Returns the descriptor, or -1 with err set ("WHAT: cannot bind HOSTPORT: why").
 * whet_tcp_bind leaves the listen() to the caller (a server that accepts only once it is ready). */
int whet_tcp_bind(const char *what, const char *hostport, char *bound, size_t bound_len, struct whet_err *err);
int whet_tcp_listen(const char *what, const char *hostport, char *bound, size_t bound_len, struct whet_err *err);
/* Connects to HOST:PORT, retrying refused connections until `deadline` (whet_now_mono seconds): the
 * other side may not be listening yet. Returns the descriptor (TCP_NODELAY set), or -1 with err set. */
int whet_tcp_connect(const char *what, const char *hostport, double deadline, struct whet_err *err);

#endif
