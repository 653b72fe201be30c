/* sandbox_net.c - a gang trainer's network: its peers, nothing else (sandbox_spec.peer_hosts); and a
 * server's (a model worker: connect_to, listen_host): its endpoints, nothing else.
 *
 * How: the sandbox keeps the host's network namespace, and the seccomp filter sends socket(),
 * socketpair(), connect() and bind() to init's listener (as kill_on_network does for every socket
 * call). Init lets through TCP sockets over IPv4/IPv6, netlink route sockets (glibc reads the
 * interfaces through one) and AF_UNIX socket pairs; it reads a connect's or bind's address from the
 * command's memory, checks it against the peers and the port range, and then makes the call itself,
 * on the command's own socket (pidfd_getfd) with its own copy of the address, answering with its
 * result. So the address checked is the address used: another thread rewriting it after the check
 * (the race that makes SECCOMP_USER_NOTIF_FLAG_CONTINUE unfit for pointer arguments) changes
 * nothing. sendto/sendmsg are let through without MSG_FASTOPEN only (a fast-open send connects), so a
 * TCP socket reaches nothing but what connect() allowed. A UDP socket (Gloo opens one only to ask its
 * interface's speed with an ioctl) is answered with a netlink route socket instead (SECCOMP_IOCTL_
 * NOTIF_ADDFD): interface ioctls work on it and no datagram can leave. Other socket calls (raw,
 * AF_UNIX sockets, whose abstract names the host's network namespace shares) end the sandbox.
 *
 * A GPU gang rank (allow_unix_sockets) may also create AF_UNIX sockets: NCCL's proxy opens one in
 * every process (ncclProxyInit, src/proxy.cc) and exchanges cuMem file descriptors over it. seccomp
 * cannot tell a socket's address from its pointer, so the line is drawn elsewhere:
 *   - bind and connect: init reads the address like an IP one and accepts only an absolute path name,
 *     making the call itself in the sandbox's mount namespace (its cwd is "/", hence no relative
 *     names) with the command's file-system ids (a bound socket file is the command's); an abstract
 *     name (or autobind, which picks one) ends the sandbox, so nothing can squat a host service's name
 *     in the host's network namespace, which such a sandbox shares. One exception: NCCL's proxy binds
 *     its socket to the abstract name "\0tmp/nccl-socket-RANK-HASH" and nothing makes it choose
 *     otherwise (src/misc/ipcsocket.cc defines USE_ABSTRACT_SOCKET at compile time; 2.28 has no setting
 *     for it, seen on an H200 where the sandbox ended every GPU rank at that bind), so a bind to a name
 *     of exactly that form is made, as init, like a path's. HASH comes from the communicator's random
 *     id: a rank cannot guess another job's name to take it first, and squatting one of that form
 *     takes nothing a host service uses. Likewise the CUDA driver's "\0cuda-uvmfd-NS-PID" (cuInit
 *     fails without it), NS one of the sandbox's own namespaces (cuda_uvm_name);
 *   - sendto/sendmsg to an abstract name (seccomp cannot read their addresses): a Landlock scope
 *     (LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, Linux 6.12, loaded by the worker) refuses every abstract
 *     socket made outside the sandbox (containerd's, systemd's, X11's) with EPERM;
 *   - a path name reaches only socket files the sandbox's mounts show: its own /tmp and job dir, its
 *     gang's /dev/shm (the gang's own ranks), and read-only system dirs that hold none.
 * So a rank's NCCL reaches its own proxy socket (made inside its sandbox, which the scope allows) and no
 * other rank's, and runs without cuMem handle exchange (comm_nccl.c says what that costs).
 *
 * Limits, stated for operators:
 *   - The policy is on addresses and ports: any service that listens on a peer's address within the
 *     port range is reachable. The range (WHET_GANG_PORTS, executor/agent) must be one no service of
 *     the fleet uses; ports the kernel hands out for outgoing connections lie elsewhere.
 *   - Inbound is not filtered: whoever reaches a node may connect to a trainer's listening port (the
 *     trainers authenticate nothing beyond the generation; the fleet's network should keep outsiders
 *     off the range).
 *   - Init makes a blocking connect itself, so while a connect to an unreachable peer waits (up to
 *     the kernel's SYN retries) init forwards no signal; killing the sandbox still works at once.
 *   - A trainer sees the host's interfaces (netlink route dumps, /proc/net is the sandbox's own).
 * Init-side code is async-signal-safe: system calls and string copies, no allocation. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "sandbox_internal.h"

static int parse_host(struct sandbox_peer *p, const char *text) {
    if (inet_pton(AF_INET, text, p->addr) == 1) p->family = AF_INET;
    else if (inet_pton(AF_INET6, text, p->addr) == 1) p->family = AF_INET6;
    else return -1;
    return 0;
}

/* "ADDR:PORT" or "[ADDR]:PORT", numeric. */
static int parse_endpoint(struct sandbox_endpoint *e, const char *endpoint, struct whet_err *err) {
    const char *text = endpoint, *colon = strrchr(text, ':');
    char host[INET6_ADDRSTRLEN + 2] = "";
    size_t len = colon ? (size_t)(colon - text) : 0;
    if (len >= 2 && text[0] == '[' && text[len - 1] == ']') {
        text++;
        len -= 2;
    }
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : 0;
    if (len && len < sizeof host) memcpy(host, text, len);
    if (!colon || !len || len >= sizeof host || *end || port < 1 || port > 65535 || parse_host(&e->host, host) < 0)
        return whet_errf(err, "sandbox: endpoint \"%s\": expected a numeric ADDR:PORT or [ADDR]:PORT", endpoint);
    e->port = (int)port;
    return 0;
}

static int plan_server(struct sandbox_net *net, const struct sandbox_spec *spec, struct whet_err *err) {
    for (size_t i = 0; spec->connect_to && spec->connect_to[i]; i++) {
        if (net->n_connects == SANDBOX_MAX_PEERS)
            return whet_errf(err, "sandbox: more than %d endpoints to connect to", SANDBOX_MAX_PEERS);
        if (parse_endpoint(&net->connects[net->n_connects++], spec->connect_to[i], err) < 0) return -1;
    }
    if (spec->listen_host && parse_host(&net->listen.host, spec->listen_host) < 0)
        return whet_errf(err, "sandbox: listen host \"%s\" is not a numeric IPv4 or IPv6 address", spec->listen_host);
    return 0;
}

/* Landlock's scope of abstract unix sockets (ABI 6); older kernel headers lack it. */
#define LANDLOCK_ABI_SCOPE 6
#define SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
struct landlock_scope_attr {
    uint64_t handled_access_fs, handled_access_net, scoped;
};

int sandbox_net_plan(struct sandbox_plan *plan, const struct sandbox_spec *spec, struct whet_err *err) {
    struct sandbox_net *net = &plan->net;
    memset(net, 0, sizeof *net);
    if (!spec->peer_hosts && !spec->connect_to && !spec->listen_host) return 0;
    net->active = 1;
    if (!spec->kill_on_network || spec->allow_nested || spec->allow_network)
        return whet_errf(err, "sandbox: a network policy (peer_hosts, connect_to, listen_host) needs kill_on_network "
                              "and rules out allow_nested (python graders) and allow_network");
    if (plan_server(net, spec, err) < 0) return -1;
    if (!spec->peer_hosts) return 0;
    if (spec->peer_port_lo < 1024 || spec->peer_port_hi < spec->peer_port_lo || spec->peer_port_hi > 65535)
        return whet_errf(err, "sandbox: peer ports %d-%d: expected 1024 <= LO <= HI <= 65535", spec->peer_port_lo,
                         spec->peer_port_hi);
    for (size_t i = 0; spec->peer_hosts[i]; i++) {
        if (net->n_peers == SANDBOX_MAX_PEERS) return whet_errf(err, "sandbox: more than %d peers", SANDBOX_MAX_PEERS);
        if (parse_host(&net->peers[net->n_peers++], spec->peer_hosts[i]) < 0)
            return whet_errf(err, "sandbox: peer \"%s\" is not a numeric IPv4 or IPv6 address", spec->peer_hosts[i]);
    }
    if (net->n_peers == 0) return whet_errf(err, "sandbox: peer_hosts lists no address");
    net->port_lo = spec->peer_port_lo;
    net->port_hi = spec->peer_port_hi;
    if (spec->allow_unix_sockets) {
        long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
        if (abi < LANDLOCK_ABI_SCOPE)
            return whet_errf(err, "sandbox: unix sockets for NCCL need Landlock ABI %d (Linux 6.12, \"landlock\" in the "
                                  "lsm= boot list) to keep them off the host's abstract sockets; this kernel offers %s",
                             LANDLOCK_ABI_SCOPE, abi < 0 ? strerror(errno) : "an older ABI");
        net->unix_sockets = 1;
    }
    return 0;
}

/* ---------- worker side ---------- */

int sandbox_net_child_scope(const struct sandbox_plan *plan, const char **what) {
    if (!plan->net.unix_sockets) return 0;
    *what = "Landlock scope of abstract unix sockets";
    struct landlock_scope_attr attr = {.scoped = SCOPE_ABSTRACT_UNIX_SOCKET};
    int fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (fd < 0) return -1;
    int rc = (int)syscall(SYS_landlock_restrict_self, fd, 0);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* ---------- init side ---------- */

static void put_uint(char *out, size_t len, unsigned long v, int base) {
    char digits[24];
    int n = 0;
    do {
        digits[n++] = "0123456789abcdef"[v % (unsigned)base];
        v /= (unsigned)base;
    } while (v && n < (int)sizeof digits);
    char one[2] = {0, 0};
    while (n) {
        one[0] = digits[--n];
        sbx_strlcat(out, one, len);
    }
}

/* "WHAT to ADDR:PORT: WHY" (IPv6 groups written out in full). */
static void describe(char *why, size_t len, const char *what, int family, const unsigned char *addr, int port,
                     const char *reason) {
    sbx_strlcpy(why, what, len);
    sbx_strlcat(why, " to ", len);
    if (family == AF_INET) {
        for (int i = 0; i < 4; i++) {
            if (i) sbx_strlcat(why, ".", len);
            put_uint(why, len, addr[i], 10);
        }
    } else {
        sbx_strlcat(why, "[", len);
        for (int i = 0; i < 16; i += 2) {
            if (i) sbx_strlcat(why, ":", len);
            put_uint(why, len, (unsigned long)(addr[i] << 8 | addr[i + 1]), 16);
        }
        sbx_strlcat(why, "]", len);
    }
    sbx_strlcat(why, ":", len);
    put_uint(why, len, (unsigned long)port, 10);
    sbx_strlcat(why, ": ", len);
    sbx_strlcat(why, reason, len);
}

/* The thread group of a task (pidfd_open takes only a process's leader on older kernels): from
 * /proc/TID/status, else the task itself. */
static pid_t thread_group(pid_t tid) {
    char path[48] = "/proc/", buf[512];
    put_uint(path, sizeof path, (unsigned long)tid, 10);
    sbx_strlcat(path, "/status", sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tid;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return tid;
    buf[n] = 0;
    const char *p = strstr(buf, "\nTgid:");
    if (!p) return tid;
    p += 6;
    while (*p == ' ' || *p == '\t') p++;
    pid_t v = 0;
    while (*p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
    return v > 0 ? v : tid;
}

static int send_answer(int listener, const struct seccomp_notif *req, int error, uint32_t flags) {
    struct seccomp_notif_resp resp;
    memset(&resp, 0, sizeof resp);
    resp.id = req->id;
    resp.error = error ? -error : 0;
    resp.val = error ? -1 : 0;
    resp.flags = flags;
    ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp); /* ENOENT: the caller died meanwhile */
    return 1;
}

enum socket_answer { SOCKET_DENY, SOCKET_CONTINUE, SOCKET_STAND_IN };

static enum socket_answer socket_answer(const struct sandbox_net *net, const struct seccomp_notif *req) {
    long domain = (long)req->data.args[0], type = (long)req->data.args[1] & 0xf, proto = (long)req->data.args[2];
    if (req->data.nr == SYS_socketpair) return domain == AF_UNIX ? SOCKET_CONTINUE : SOCKET_DENY;
    if (domain == AF_UNIX) return net->unix_sockets ? SOCKET_CONTINUE : SOCKET_DENY;
    if (domain == AF_INET || domain == AF_INET6) {
        if (type == SOCK_STREAM && (proto == 0 || proto == IPPROTO_TCP)) return SOCKET_CONTINUE;
        return type == SOCK_DGRAM && (proto == 0 || proto == IPPROTO_UDP) ? SOCKET_STAND_IN : SOCKET_DENY;
    }
    return domain == AF_NETLINK && proto == NETLINK_ROUTE ? SOCKET_CONTINUE : SOCKET_DENY;
}

/* A UDP socket's stand-in: a netlink route socket with the flags asked for, placed in the command's
 * fd table as the call's result. */
static int answer_stand_in(int listener, const struct seccomp_notif *req) {
    long flags = (long)req->data.args[1];
    int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | (int)(flags & SOCK_NONBLOCK), NETLINK_ROUTE);
    if (nl < 0) return send_answer(listener, req, errno, 0);
    struct seccomp_notif_addfd add;
    memset(&add, 0, sizeof add);
    add.id = req->id;
    add.flags = SECCOMP_ADDFD_FLAG_SEND;
    add.srcfd = (uint32_t)nl;
    add.newfd_flags = flags & SOCK_CLOEXEC ? O_CLOEXEC : 0;
    int e = ioctl(listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add) < 0 ? errno : 0;
    close(nl);
    if (e && e != ENOENT) send_answer(listener, req, e, 0); /* ENOENT: the caller died meanwhile */
    return 1;
}

union any_addr {
    struct sockaddr sa;
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
    struct sockaddr_nl nl;
    struct sockaddr_un un;
    struct sockaddr_storage ss;
};

/* Makes the checked call on the command's socket; a port of 0 on bind takes a free port of the
 * range, from a random start (trainers of one node bind at once). Returns 0 or an errno. */
static int perform(const struct sandbox_net *net, const struct seccomp_notif *req, union any_addr *a, socklen_t len,
                   in_port_t *port) {
    int pidfd = (int)syscall(SYS_pidfd_open, thread_group((pid_t)req->pid), 0);
    if (pidfd < 0) return errno;
    int fd = (int)syscall(SYS_pidfd_getfd, pidfd, (int)req->data.args[0], 0);
    int e = fd < 0 ? errno : 0;
    close(pidfd);
    if (fd < 0) return e;
    if (req->data.nr == SYS_connect) {
        e = connect(fd, &a->sa, len) < 0 ? errno : 0;
    } else if (port && *port == 0) {
        unsigned range = (unsigned)(net->port_hi - net->port_lo + 1), start = 0;
        if (getrandom(&start, sizeof start, GRND_NONBLOCK) != sizeof start) start = (unsigned)req->pid;
        /* The search binds without SO_REUSEADDR: with it, two sockets bound but not listening yet may
         * share a port (Gloo's pairs set it), and the second one's listen() then fails. */
        int reuse = 0, off = 0;
        socklen_t reuse_len = sizeof reuse;
        getsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, &reuse_len);
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &off, sizeof off);
        e = EADDRINUSE;
        for (unsigned k = 0; k < range && e == EADDRINUSE; k++) {
            *port = htons((in_port_t)(net->port_lo + (start + k) % range));
            e = bind(fd, &a->sa, len) < 0 ? errno : 0;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof reuse);
    } else {
        e = bind(fd, &a->sa, len) < 0 ? errno : 0;
    }
    close(fd);
    return e;
}

/* A unix socket's bind or connect, made as the command: a bound file is the command's (which may then
 * send to it) and created only where the command could create it; a connect needs the command's own
 * permission on the socket file. */
static int perform_as_command(const struct sandbox_plan *plan, const struct seccomp_notif *req, union any_addr *a,
                              socklen_t len) {
    if (!plan->switch_ids) return perform(&plan->net, req, a, len, NULL);
    int gid = setfsgid(plan->run_gid), uid = setfsuid(plan->run_uid);
    int e = perform(&plan->net, req, a, len, NULL);
    setfsuid((uid_t)uid);
    setfsgid((gid_t)gid);
    return e;
}

/* Abstract names of a fixed form: "\0" PREFIX, then runs of (decimal or hex) digits parsed by the callers,
 * then NUL bytes to the length given (NCCL binds with the whole sockaddr_un). These return where the next
 * part starts, or 0 where the name does not have the form; no locale tables (init's rule above). */
static size_t name_prefix(const struct sockaddr_un *un, size_t n, const char *prefix) {
    size_t k = strlen(prefix);
    return n > 1 + k && n <= sizeof un->sun_path && !un->sun_path[0] && !memcmp(un->sun_path + 1, prefix, k) ? 1 + k
                                                                                                             : 0;
}
static size_t name_digits(const struct sockaddr_un *un, size_t n, size_t i, int hex, unsigned long long *value) {
    size_t from = i;
    if (value) *value = 0;
    for (; i < n; i++) {
        char ch = un->sun_path[i], lower = (char)(ch | 0x20);
        if (!(ch >= '0' && ch <= '9') && !(hex && lower >= 'a' && lower <= 'f')) break;
        if (value) *value = *value * 10 + (unsigned)(ch - '0'); /* decimal runs only */
    }
    return i > from && i - from <= 19 ? i : 0;
}
static int name_ends(const struct sockaddr_un *un, size_t n, size_t i) {
    while (i < n && !un->sun_path[i]) i++;
    return i == n;
}

/* NCCL's proxy socket: "\0tmp/nccl-socket-" RANK (decimal) "-" HASH (hex). */
static int nccl_proxy_name(const struct sockaddr_un *un, size_t n) {
    size_t i = name_prefix(un, n, "tmp/nccl-socket-");
    if (!i || !(i = name_digits(un, n, i, 0, NULL)) || un->sun_path[i] != '-') return 0;
    return (i = name_digits(un, n, i + 1, 1, NULL)) && name_ends(un, n, i);
}

/* The CUDA driver's socket for handing its UVM file descriptor to IPC peers: "\0cuda-uvmfd-" NS "-" PID,
 * NS the inode of one of the process's namespaces (seen: cuInit in a sandbox bound "@cuda-uvmfd-
 * 4026532261-2"; AppArmor's CUDA abstraction allows "@cuda-uvmfd-*"). NS must be one of the sandbox's
 * own mount, PID or IPC namespaces, which init shares with the command: no rank can take a name another
 * sandbox's or the host's CUDA processes would bind. */
static int cuda_uvm_name(const struct sockaddr_un *un, size_t n) {
    unsigned long long ns;
    size_t i = name_prefix(un, n, "cuda-uvmfd-");
    if (!i || !(i = name_digits(un, n, i, 0, &ns)) || un->sun_path[i] != '-') return 0;
    if (!(i = name_digits(un, n, i + 1, 0, NULL)) || !name_ends(un, n, i)) return 0;
    static const char *const own[] = {"/proc/self/ns/mnt", "/proc/self/ns/pid", "/proc/self/ns/ipc"};
    for (size_t k = 0; k < sizeof own / sizeof own[0]; k++) {
        struct stat st;
        if (stat(own[k], &st) == 0 && (unsigned long long)st.st_ino == ns) return 1;
    }
    return 0;
}

/* Appends ` "NAME"` for a unix socket's address: an abstract name with a leading '@' (it starts with a
 * NUL), "" for an unnamed bind (the kernel then picks an abstract name), bytes outside printable ASCII as
 * '?', at most 64 of them. Says which library asked, which the caller's error message cannot. */
static void put_unix_name(char *why, size_t why_len, const struct sockaddr_un *un, socklen_t len) {
    char name[72];
    size_t n = 0, at = offsetof(struct sockaddr_un, sun_path);
    size_t end = len > at ? len - at : 0;
    if (end > sizeof un->sun_path) end = sizeof un->sun_path;
    name[n++] = ' ', name[n++] = '"';
    for (size_t i = 0; i < end && n < 2 + 64; i++) {
        unsigned char ch = (unsigned char)un->sun_path[i];
        if (i == 0 && ch == 0) name[n++] = '@';
        else if (ch == 0) break; /* a path name ends at its NUL */
        else name[n++] = ch >= 0x20 && ch < 0x7f && ch != '"' ? (char)ch : '?';
    }
    name[n++] = '"', name[n] = 0;
    sbx_strlcat(why, name, why_len);
}

int sandbox_net_child_answer(const struct sandbox_plan *plan, int listener, const struct seccomp_notif *req, char *why,
                             size_t why_len) {
    const struct sandbox_net *net = &plan->net;
    why[0] = 0;
    int nr = req->data.nr;
    if (nr == SYS_socket || nr == SYS_socketpair) {
        enum socket_answer answer = socket_answer(net, req);
        if (answer == SOCKET_STAND_IN) return answer_stand_in(listener, req);
        if (answer == SOCKET_DENY) {
            sbx_strlcpy(why, nr == SYS_socket ? "a socket other than TCP: domain " : "a socket pair of domain ",
                        why_len);
            put_uint(why, why_len, (unsigned long)req->data.args[0], 10);
            sbx_strlcat(why, ", type ", why_len);
            put_uint(why, why_len, (unsigned long)req->data.args[1] & 0xf, 10);
            return 0;
        }
        /* Integer arguments only: the kernel runs the call with the registers that were checked. */
        return send_answer(listener, req, 0, SECCOMP_USER_NOTIF_FLAG_CONTINUE);
    }
    if (nr != SYS_connect && nr != SYS_bind) return 0;
    union any_addr a;
    memset(&a, 0, sizeof a);
    socklen_t len = (socklen_t)req->data.args[2];
    if (len < sizeof(sa_family_t) || len > sizeof a) return send_answer(listener, req, EINVAL, 0);
    struct iovec local = {.iov_base = &a, .iov_len = len}, remote = {.iov_base = (void *)req->data.args[1], .iov_len = len};
    if (syscall(SYS_process_vm_readv, (pid_t)req->pid, &local, 1UL, &remote, 1UL, 0UL) != (long)len)
        return send_answer(listener, req, EFAULT, 0);
    if (ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &req->id) != 0) return 1; /* the caller is gone */
    const char *what = nr == SYS_connect ? "connect" : "bind";
    if (a.sa.sa_family == AF_NETLINK) {
        /* glibc's interface lookup binds its route socket; subscribing to multicast groups is refused. */
        if (nr == SYS_bind && len >= sizeof a.nl && a.nl.nl_groups == 0)
            return send_answer(listener, req, perform(net, req, &a, len, NULL), 0);
        sbx_strlcpy(why, nr == SYS_bind ? "bind of a netlink socket to multicast groups" : "connect of a netlink socket",
                    why_len);
        return 0;
    }
    if (a.sa.sa_family == AF_UNIX && net->unix_sockets) {
        /* An absolute path only (the zeroed copy ends it); init's cwd is "/", not the command's. */
        if (len > offsetof(struct sockaddr_un, sun_path) && a.un.sun_path[0] == '/')
            return send_answer(listener, req, perform_as_command(plan, req, &a, len), 0);
        size_t name_len = len - offsetof(struct sockaddr_un, sun_path);
        if (nr == SYS_bind && (nccl_proxy_name(&a.un, name_len) || cuda_uvm_name(&a.un, name_len)))
            return send_answer(listener, req, perform(net, req, &a, len, NULL), 0);
        sbx_strlcpy(why, what, why_len);
        sbx_strlcat(why, " of a unix socket to an abstract or relative name", why_len);
        put_unix_name(why, why_len, &a.un, len);
        return 0;
    }
    int family = a.sa.sa_family;
    const unsigned char *addr;
    in_port_t *port;
    static const unsigned char any[16];
    if (family == AF_INET && len >= sizeof a.in) {
        addr = (const unsigned char *)&a.in.sin_addr;
        port = &a.in.sin_port;
    } else if (family == AF_INET6 && len >= sizeof a.in6) {
        addr = (const unsigned char *)&a.in6.sin6_addr;
        port = &a.in6.sin6_port;
    } else {
        sbx_strlcpy(why, what, why_len);
        sbx_strlcat(why, " with an address of family ", why_len);
        put_uint(why, why_len, (unsigned long)family, 10);
        return 0;
    }
    int size = family == AF_INET ? 4 : 16, p = ntohs(*port);
    /* A server's endpoints: exact (a bind on its listen host at any port, 0 left to the kernel). */
    const struct sandbox_endpoint *e = nr == SYS_bind ? &net->listen : NULL;
    int served = e && e->host.family == family && !memcmp(e->host.addr, addr, (size_t)size);
    for (int i = 0; i < net->n_connects && !served && nr == SYS_connect; i++) {
        e = &net->connects[i];
        served = e->host.family == family && !memcmp(e->host.addr, addr, (size_t)size) && e->port == p;
    }
    if (served) return send_answer(listener, req, perform(net, req, &a, len, NULL), 0);
    if (!net->n_peers) {
        describe(why, why_len, what, family, addr, p,
                 nr == SYS_connect ? "not an endpoint it may connect to" : "not the address it may listen on");
        return 0;
    }
    int peer = nr == SYS_bind && !memcmp(addr, any, (size_t)size);
    for (int i = 0; i < net->n_peers && !peer; i++)
        peer = net->peers[i].family == family && !memcmp(net->peers[i].addr, addr, (size_t)size);
    int port_ok = (p >= net->port_lo && p <= net->port_hi) || (nr == SYS_bind && p == 0);
    if (!peer || !port_ok) {
        describe(why, why_len, what, family, addr, p, !peer ? "not a peer of the gang" : "not a port of the gang's range");
        return 0;
    }
    return send_answer(listener, req, perform(net, req, &a, len, nr == SYS_bind ? port : NULL), 0);
}
