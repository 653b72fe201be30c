/* test_sandbox_net.c - a gang trainer's network (sandbox_spec.peer_hosts, sandbox_net.c): python3 in
 * the sandbox listens and connects to its peer on the gang's port range (a bind to port 0 gets a port
 * of the range, a non-blocking connect stays non-blocking), and every way past it ends the sandbox
 * naming what was tried: a service on the peer outside the range (as PostgreSQL or the gateway would
 * be), a host that is no peer, a bind outside the range, a UDP or AF_UNIX socket. Given the path of
 * unit_dist_comm, it also runs the training communicator's own tests (Gloo's TCP full mesh and rank
 * 0's rendezvous store, threads of one process) under the policy. A server's network (connect_to,
 * listen_host: a model worker's): it listens on its host at a port the kernel picks and is reached
 * from outside, connects to its endpoint, and nothing else. A GPU gang rank (allow_unix_sockets, for
 * NCCL) binds and sends on path-named unix sockets, but binds no abstract name and reaches no host
 * service's abstract socket; a CPU rank's unix socket still ends its sandbox. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/random.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "sandbox.h"
#include "test.h"

static int port_lo, port_hi, as_nobody, gpu_rank;
static const char *comm_test;

/* Runs argv as a gang trainer whose only peer is 127.0.0.1 (as_nobody: as host uid 65534, as a root
 * executor runs its trainers). */
static struct sandbox_job run_gang(const char *const *argv, const char *const *readonly) {
    static const char *peers[] = {"127.0.0.1", NULL};
    /* (an ASan build's leak check traces the process at exit, which the sandbox forbids) */
    static const char *const env[] = {"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", "ASAN_OPTIONS=detect_leaks=0",
                                      NULL};
    struct sandbox_job job;
    memset(&job, 0, sizeof job);
    sandbox_spec_init(&job.spec);
    job.spec.argv = argv;
    job.spec.env = env;
    job.spec.readonly_dirs = readonly;
    job.spec.max_procs = 256;
    job.spec.wall_timeout_s = 60;
    job.spec.kill_on_network = 1;
    job.spec.peer_hosts = peers;
    job.spec.peer_port_lo = port_lo;
    job.spec.peer_port_hi = port_hi;
    if (as_nobody) job.spec.host_uid = job.spec.host_gid = 65534;
    job.spec.allow_unix_sockets = gpu_rank;
    struct whet_err err;
    if (sandbox_run_many(&job, 1, &err) < 0) fprintf(stderr, "run_many: %s\n", err.msg);
    job.spec.argv = NULL;
    fprintf(stderr, "  [%s] %s | out: %.200s | err: %.300s\n", sandbox_reason_name(job.result.reason),
            job.result.message, job.out, job.errout);
    return job;
}

static struct sandbox_job run_python(const char *script) {
    const char *argv[] = {"python3", "-c", script, NULL};
    return run_gang(argv, NULL);
}

static const char listen_and_connect[] =
    "import socket\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(4)\n"
    "port = s.getsockname()[1]\n"
    "c = socket.create_connection(('127.0.0.1', port))\n"
    "a, _ = s.accept(); c.sendall(b'ping')\n"
    "n = socket.socket(); n.setblocking(False)\n"
    "rc = n.connect_ex(('127.0.0.1', port))\n"
    "print(port, a.recv(4).decode(), rc in (0, 115))\n";

TEST(peers_listen_and_connect_on_the_gang_range) {
    struct sandbox_job job = run_python(listen_and_connect);
    CHECK(job.result.reason == SANDBOX_OK);
    int port = atoi(job.out ? job.out : "0");
    CHECK_MSG(port >= port_lo && port <= port_hi, "bound port %d outside %d-%d", port, port_lo, port_hi);
    CHECK_CONTAINS(job.out, " ping True");
    sandbox_job_release(&job);
}

TEST(a_root_executors_trainer_as_nobody_too) {
    if (geteuid() != 0) return;
    as_nobody = 1;
    struct sandbox_job job = run_python(listen_and_connect);
    as_nobody = 0;
    CHECK(job.result.reason == SANDBOX_OK);
    CHECK_CONTAINS(job.out, " ping True");
    sandbox_job_release(&job);
}

TEST(a_service_outside_the_range_is_out_of_reach) {
    /* A real listener of the host, as PostgreSQL is: the trainer is stopped at the connect. */
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    CHECK(l >= 0 && bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 1) == 0 &&
          getsockname(l, (struct sockaddr *)&a, &len) == 0);
    char script[256], want[96];
    snprintf(script, sizeof script, "import socket\nsocket.create_connection(('127.0.0.1', %d))\nprint('reached')\n",
             ntohs(a.sin_port));
    snprintf(want, sizeof want, "connect to 127.0.0.1:%d: not a port of the gang's range", ntohs(a.sin_port));
    struct sandbox_job job = run_python(script);
    CHECK(job.result.reason == SANDBOX_SECCOMP);
    CHECK_STR(job.result.syscall, "connect");
    CHECK_STR(job.result.denied, want);
    CHECK(!job.out || !strstr(job.out, "reached"));
    sandbox_job_release(&job);
    close(l);
}

TEST(a_host_that_is_no_peer_is_out_of_reach) {
    char script[256], want[96];
    snprintf(script, sizeof script,
             "import socket\ns = socket.socket(); s.settimeout(5)\ns.connect(('10.255.0.1', %d))\n", port_lo);
    snprintf(want, sizeof want, "connect to 10.255.0.1:%d: not a peer of the gang", port_lo);
    struct sandbox_job job = run_python(script);
    CHECK(job.result.reason == SANDBOX_SECCOMP);
    CHECK_STR(job.result.denied, want);
    sandbox_job_release(&job);
}

TEST(a_bind_outside_the_range_is_refused) {
    char script[256];
    int port = port_lo > 1100 ? port_lo - 7 : port_hi + 7;
    snprintf(script, sizeof script, "import socket\nsocket.socket().bind(('127.0.0.1', %d))\n", port);
    struct sandbox_job job = run_python(script);
    CHECK(job.result.reason == SANDBOX_SECCOMP);
    CHECK_STR(job.result.syscall, "bind");
    CHECK_CONTAINS(job.result.denied, "not a port of the gang's range");
    sandbox_job_release(&job);
}

TEST(a_udp_socket_sends_nothing) {
    /* It gets a stand-in that answers interface ioctls and can reach no address. */
    char script[512];
    snprintf(script, sizeof script,
             "import socket, fcntl, struct\n"
             "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
             "fcntl.ioctl(u.fileno(), 0x8933, struct.pack('16s16x', b'lo'))\n" /* SIOCGIFINDEX */
             "try:\n    u.sendto(b'x', ('127.0.0.1', %d)); print('sent')\n"
             "except OSError as e: print('refused', e.errno)\n",
             port_lo);
    struct sandbox_job job = run_python(script);
    CHECK(job.result.reason == SANDBOX_OK);
    CHECK_CONTAINS(job.out, "refused");
    sandbox_job_release(&job);
}

TEST(other_sockets_end_the_sandbox) {
    struct sandbox_job job = run_python("import socket\nsocket.socket(socket.AF_INET, socket.SOCK_RAW, 1)\n");
    CHECK(job.result.reason == SANDBOX_SECCOMP);
    CHECK_STR(job.result.denied, "a socket other than TCP: domain 2, type 3");
    sandbox_job_release(&job);
    job = run_python("import socket\nsocket.socket(socket.AF_UNIX).connect('\\0x')\n");
    CHECK(job.result.reason == SANDBOX_SECCOMP);
    CHECK_STR(job.result.denied, "a socket other than TCP: domain 1, type 1");
    sandbox_job_release(&job);
}

/* Landlock's ABI on this kernel (0 without it): a GPU rank's unix sockets need 6. */
static long landlock_abi(void) {
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1UL /* LANDLOCK_CREATE_RULESET_VERSION */);
    return abi > 0 ? abi : 0;
}

TEST(a_gpu_gang_rank_binds_and_sends_on_path_unix_sockets) {
    /* A socket bound in the rank's /tmp, a datagram to it; a stream socket likewise. */
    static const char script[] = "import socket\n"
                                 "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind('/tmp/nccl-socket-0-1')\n"
                                 "c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
                                 "c.sendto(b'fd', '/tmp/nccl-socket-0-1'); print('got', s.recv(2).decode())\n"
                                 "t = socket.socket(socket.AF_UNIX); t.bind('/tmp/stream'); t.listen(1)\n"
                                 "u = socket.socket(socket.AF_UNIX); u.connect('/tmp/stream'); print('connected')\n";
    gpu_rank = 1;
    struct sandbox_job job = run_python(script);
    gpu_rank = 0;
    if (landlock_abi() < 6) {
        CHECK(job.result.reason == SANDBOX_SETUP);
        CHECK_CONTAINS(job.result.message, "need Landlock ABI 6");
    } else {
        CHECK(job.result.reason == SANDBOX_OK);
        CHECK_CONTAINS(job.out, "got fd\nconnected");
        if (geteuid() == 0) { /* as a root executor's trainer: init binds as uid 65534, who may send to it */
            sandbox_job_release(&job);
            as_nobody = gpu_rank = 1;
            job = run_python(script);
            as_nobody = gpu_rank = 0;
            CHECK(job.result.reason == SANDBOX_OK);
            CHECK_CONTAINS(job.out, "got fd\nconnected");
        }
    }
    sandbox_job_release(&job);
    /* The same script in a CPU gang rank's sandbox: the unix socket ends it. */
    job = run_python(script);
    CHECK(job.result.reason == SANDBOX_SECCOMP);
    CHECK_STR(job.result.denied, "a socket other than TCP: domain 1, type 2");
    sandbox_job_release(&job);
}

TEST(a_gpu_gang_rank_reaches_no_abstract_socket) {
    if (landlock_abi() < 6) return;
    /* A host service's abstract socket (the sandbox shares the host's network namespace). */
    char name[64], script[512];
    snprintf(name, sizeof name, "whet-test-%d", (int)getpid());
    int host = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path + 1, name, strlen(name));
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
    CHECK(host >= 0 && bind(host, (struct sockaddr *)&a, len) == 0);
    snprintf(script, sizeof script,
             "import socket\n"
             "c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
             "try:\n  c.sendto(b'hi', '\\0%s'); print('sent')\n"
             "except PermissionError: print('refused')\n",
             name);
    gpu_rank = 1;
    struct sandbox_job job = run_python(script);
    CHECK(job.result.reason == SANDBOX_OK);
    CHECK_CONTAINS(job.out, "refused");
    char buf[4];
    CHECK(recv(host, buf, sizeof buf, 0) < 0);
    sandbox_job_release(&job);
    /* NCCL's proxy socket, the one abstract name a rank may bind (as NCCL binds it: the whole
     * sockaddr_un, NUL-padded), and a datagram to it from inside the sandbox. */
    job = run_python("import socket\n"
                     "name = b'\\0tmp/nccl-socket-3-9f0c1a2b'\n"
                     "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind(name.ljust(108, b'\\0'))\n"
                     "c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
                     "c.sendto(b'fd', name.ljust(108, b'\\0')); print('got', s.recv(2).decode())\n");
    CHECK_MSG(job.result.reason == SANDBOX_OK, "%s: %s", job.result.message, job.errout);
    CHECK_CONTAINS(job.out, "got fd");
    sandbox_job_release(&job);
    /* The CUDA driver's UVM socket, named after one of the sandbox's own namespaces (cuInit binds it,
     * listening for seqpackets); with a namespace not its own (the host's network one) it is refused. */
    job = run_python("import os, socket\n"
                     "ns, pid = os.stat('/proc/self/ns/mnt').st_ino, os.getpid()\n"
                     "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
                     "s.bind(b'\\0cuda-uvmfd-%d-%d' % (ns, pid)); s.listen(1); print('listening', flush=True)\n"
                     "socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET).bind(b'\\0cuda-uvmfd-%d-%d' % "
                     "(os.stat('/proc/self/ns/net').st_ino, pid))\n");
    CHECK(job.result.reason == SANDBOX_SECCOMP);
    CHECK_CONTAINS(job.out, "listening");
    CHECK_CONTAINS(job.result.denied, "bind of a unix socket to an abstract or relative name \"@cuda-uvmfd-");
    sandbox_job_release(&job);
    job = run_python(
        "import socket\nsocket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).bind(b'\\0tmp/nccl-socket-3-xyz')\n");
    CHECK(job.result.reason == SANDBOX_SECCOMP);
    CHECK_STR(job.result.denied, "bind of a unix socket to an abstract or relative name \"@tmp/nccl-socket-3-xyz\"");
    sandbox_job_release(&job);
    /* Nor may it take an abstract name a host service might want, or try to connect to one. */
    job = run_python("import socket\nsocket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).bind('\\0whet-squat')\n");
    CHECK(job.result.reason == SANDBOX_SECCOMP);
    CHECK_STR(job.result.denied, "bind of a unix socket to an abstract or relative name \"@whet-squat\"");
    sandbox_job_release(&job);
    snprintf(script, sizeof script, "import socket\nsocket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).connect('\\0%s')\n",
             name);
    job = run_python(script);
    gpu_rank = 0;
    CHECK(job.result.reason == SANDBOX_SECCOMP);
    snprintf(script, sizeof script, "connect of a unix socket to an abstract or relative name \"@%s\"", name);
    CHECK_STR(job.result.denied, script);
    sandbox_job_release(&job);
    close(host);
}

TEST(the_communicators_collectives_run_under_the_policy) {
    if (!comm_test) return;
    const char *argv[] = {comm_test, NULL}, *readonly[] = {comm_test, NULL};
    struct sandbox_job job = run_gang(argv, readonly);
    CHECK(job.result.reason == SANDBOX_OK);
    CHECK_CONTAINS(job.out, " passed, 0 failed");
    sandbox_job_release(&job);
}

TEST(a_bad_peer_list_is_a_setup_error) {
    static const char *peers[] = {"node-a.example", NULL};
    const char *argv[] = {"true", NULL};
    struct sandbox_job job;
    memset(&job, 0, sizeof job);
    sandbox_spec_init(&job.spec);
    job.spec.argv = argv;
    job.spec.kill_on_network = 1;
    job.spec.peer_hosts = peers;
    job.spec.peer_port_lo = port_lo;
    job.spec.peer_port_hi = port_hi;
    struct whet_err err;
    CHECK(sandbox_run_many(&job, 1, &err) == 0);
    CHECK(job.result.reason == SANDBOX_SETUP);
    CHECK_CONTAINS(job.result.message, "\"node-a.example\" is not a numeric IPv4 or IPv6 address");
    sandbox_job_release(&job);
}

/* A listener of the host on 127.0.0.1 at a port the kernel picks; returns its fd, the port in *port. */
static int host_listener(int *port) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 4) || getsockname(l, (struct sockaddr *)&a, &len))
        return -1;
    *port = ntohs(a.sin_port);
    return l;
}

/* Runs python3 -c script as a server that may listen on 127.0.0.1 and connect to `endpoint` only. */
static struct sandbox_job run_server(const char *script, const char *endpoint) {
    const char *argv[] = {"python3", "-c", script, NULL}, *connects[] = {endpoint, NULL};
    static const char *const env[] = {"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", NULL};
    struct sandbox_job job;
    memset(&job, 0, sizeof job);
    sandbox_spec_init(&job.spec);
    job.spec.argv = argv;
    job.spec.env = env;
    job.spec.max_procs = 256;
    job.spec.wall_timeout_s = 60;
    job.spec.kill_on_network = 1;
    job.spec.listen_host = "127.0.0.1";
    job.spec.connect_to = connects;
    struct whet_err err;
    if (sandbox_run_many(&job, 1, &err) < 0) fprintf(stderr, "run_many: %s\n", err.msg);
    job.spec.argv = NULL;
    job.spec.connect_to = NULL;
    fprintf(stderr, "  [%s] %s | out: %.200s | err: %.300s\n", sandbox_reason_name(job.result.reason),
            job.result.message, job.out, job.errout);
    return job;
}

/* The host side of a_server_listens_and_reaches_its_endpoint: the "object store" the server tells its
 * port, then a client of the server (as the gateway is). */
static void *store_and_client(void *arg) {
    int l = *(int *)arg, s = accept(l, NULL, NULL);
    char buf[16] = "";
    ssize_t n = s >= 0 ? read(s, buf, sizeof buf - 1) : -1;
    if (s >= 0) close(s);
    if (n <= 0) return NULL;
    buf[n] = 0;
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(buf)),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (c >= 0 && connect(c, (struct sockaddr *)&a, sizeof a) == 0 && write(c, "hello", 5) != 5) perror("write");
    if (c >= 0) close(c);
    return NULL;
}

TEST(a_server_listens_and_reaches_its_endpoint) {
    int port, l = host_listener(&port);
    CHECK(l >= 0);
    char script[512], endpoint[32];
    snprintf(endpoint, sizeof endpoint, "127.0.0.1:%d", port);
    snprintf(script, sizeof script,
             "import socket\n"
             "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(4)\n"
             "socket.create_connection(('127.0.0.1', %d)).sendall(str(s.getsockname()[1]).encode())\n"
             "a, _ = s.accept(); print('got', a.recv(5).decode())\n",
             port);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, store_and_client, &l) == 0);
    struct sandbox_job job = run_server(script, endpoint);
    pthread_join(t, NULL);
    CHECK(job.result.reason == SANDBOX_OK);
    CHECK_CONTAINS(job.out, "got hello");
    sandbox_job_release(&job);
    close(l);
}

TEST(a_server_reaches_nothing_else) {
    int port, l = host_listener(&port), other, o = host_listener(&other);
    CHECK(l >= 0 && o >= 0);
    char script[256], endpoint[32], want[96];
    snprintf(endpoint, sizeof endpoint, "127.0.0.1:%d", port);
    snprintf(script, sizeof script, "import socket\nsocket.create_connection(('127.0.0.1', %d))\nprint('reached')\n", other);
    snprintf(want, sizeof want, "connect to 127.0.0.1:%d: not an endpoint it may connect to", other);
    struct sandbox_job job = run_server(script, endpoint);
    CHECK(job.result.reason == SANDBOX_SECCOMP);
    CHECK_STR(job.result.denied, want);
    CHECK(!job.out || !strstr(job.out, "reached"));
    sandbox_job_release(&job);
    job = run_server("import socket\nsocket.socket().bind(('0.0.0.0', 0))\n", endpoint);
    CHECK(job.result.reason == SANDBOX_SECCOMP);
    CHECK_STR(job.result.denied, "bind to 0.0.0.0:0: not the address it may listen on");
    sandbox_job_release(&job);
    job = run_server("true", "s3.example:443");
    CHECK(job.result.reason == SANDBOX_SETUP);
    CHECK_CONTAINS(job.result.message, "\"s3.example:443\": expected a numeric ADDR:PORT or [ADDR]:PORT");
    sandbox_job_release(&job);
    close(l);
    close(o);
}

int main(int argc, char **argv) {
    comm_test = argc > 1 ? argv[1] : NULL;
    /* A range of its own below the kernel's ephemeral ports, so concurrent runs rarely share one. */
    unsigned r = 0;
    if (getrandom(&r, sizeof r, 0) != sizeof r) r = (unsigned)getpid();
    port_lo = 20000 + (int)(r % 100) * 100;
    port_hi = port_lo + 99;
    RUN(peers_listen_and_connect_on_the_gang_range);
    RUN(a_root_executors_trainer_as_nobody_too);
    RUN(a_service_outside_the_range_is_out_of_reach);
    RUN(a_host_that_is_no_peer_is_out_of_reach);
    RUN(a_bind_outside_the_range_is_refused);
    RUN(a_udp_socket_sends_nothing);
    RUN(other_sockets_end_the_sandbox);
    RUN(a_gpu_gang_rank_binds_and_sends_on_path_unix_sockets);
    RUN(a_gpu_gang_rank_reaches_no_abstract_socket);
    RUN(the_communicators_collectives_run_under_the_policy);
    RUN(a_bad_peer_list_is_a_setup_error);
    RUN(a_server_listens_and_reaches_its_endpoint);
    RUN(a_server_reaches_nothing_else);
    return test_summary();
}
