/* sandbox_helper.c - a program that misbehaves on request, run inside the sandbox by the tests.
 *
 *   sandbox_helper MODE [ARGS...]
 *
 * Modes: hello (identity and a stdin echo), metrics N (metric lines, one per flush), omp (OpenMP
 * threads), socket, newns (clone a user namespace), write PATH... (try to create each), read PATH,
 * forkbomb, alloc, spin, sleeptree MARKER (a daemon child, then sleep), ptrace, mount, fsize PATH,
 * term (wait for SIGTERM, then say so and exit 0, as whet train checkpoints and stops), limits,
 * files (open /dev/null until refused).
 * Each mode prints what happened, so the tests judge the sandbox rather than trust this program. */
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static int hello(void) {
    char host[64] = "";
    gethostname(host, sizeof host);
    printf("uid=%d gid=%d pid=%d host=%s\n", (int)getuid(), (int)getgid(), (int)getpid(), host);
    /* network interfaces: a fresh network namespace has only lo, and it is down */
    FILE *net = fopen("/proc/net/dev", "r");
    char line[256];
    printf("interfaces:");
    for (int n = 0; net && fgets(line, sizeof line, net); n++) {
        char *colon = strchr(line, ':');
        if (n < 2 || !colon) continue; /* two header lines */
        *colon = 0;
        printf(" %s", line + strspn(line, " "));
    }
    if (net) fclose(net);
    printf("\n");
    while (fgets(line, sizeof line, stdin)) printf("echo: %s", line);
    return 0;
}

static int metrics(int n) {
    for (int i = 1; i <= n; i++) {
        printf("{\"step\":%d,\"loss\":%.3f}\n", i, 1.0 / i);
        fflush(stdout);
    }
    return 0;
}

static int omp(void) {
    double sum = 0;
    int threads = 0;
#pragma omp parallel reduction(+ : sum)
    {
#pragma omp single
        threads = omp_get_num_threads();
#pragma omp for
        for (int i = 1; i <= 1000000; i++) sum += 1.0 / ((double)i * i);
    }
    printf("threads=%d sum=%.6f\n", threads, sum);
    return 0;
}

static int try_socket(void) {
    int inet = socket(AF_INET, SOCK_STREAM, 0), inet_errno = errno;
    int unix_fd = socket(AF_UNIX, SOCK_STREAM, 0), unix_errno = errno;
    printf("inet=%s unix=%s\n", inet < 0 ? strerrorname_np(inet_errno) : "open",
           unix_fd < 0 ? strerrorname_np(unix_errno) : "open");
    return inet < 0 && unix_fd < 0 ? 0 : 1;
}

static int newns(void) {
    long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);
    if (pid == 0) _exit(0);
    printf("clone(CLONE_NEWUSER)=%s\n", pid < 0 ? strerrorname_np(errno) : "created");
    return pid < 0 ? 0 : 1;
}

static int write_paths(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        int fd = open(argv[i], O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0 && write(fd, "pwned\n", 6) == 6) printf("%s: written\n", argv[i]);
        else printf("%s: %s\n", argv[i], strerrorname_np(errno));
        if (fd >= 0) close(fd);
    }
    return 0;
}

static int read_path(const char *path) {
    char buf[256];
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        printf("%s: %s\n", path, strerrorname_np(errno));
        return 1;
    }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    printf("%s: read: %s\n", path, buf);
    return 0;
}

static volatile sig_atomic_t terminated;
static void on_term(int sig) { terminated = sig; }

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *mode = argv[1];
    if (!strcmp(mode, "hello")) return hello();
    if (!strcmp(mode, "metrics")) return metrics(argc > 2 ? atoi(argv[2]) : 3);
    if (!strcmp(mode, "omp")) return omp();
    if (!strcmp(mode, "socket")) return try_socket();
    if (!strcmp(mode, "newns")) return newns();
    if (!strcmp(mode, "write")) return write_paths(argc - 2, argv + 2);
    if (!strcmp(mode, "read")) return read_path(argv[2]);
    if (!strcmp(mode, "forkbomb"))
        for (;;) fork();
    if (!strcmp(mode, "alloc"))
        for (;;) memset(malloc(1 << 20), 1, 1 << 20); /* no NULL check: hostile on purpose */
    if (!strcmp(mode, "spin"))
        for (volatile unsigned long i = 0;; i++) {}
    if (!strcmp(mode, "sleeptree")) {
        char name[128];
        snprintf(name, sizeof name, "sleep-%s", argv[2]);
        if (fork() == 0) {
            setsid();
            execl("/bin/sleep", name, "1000", (char *)NULL);
            _exit(1);
        }
        printf("started\n");
        fflush(stdout);
        for (;;) pause();
    }
    if (!strcmp(mode, "files")) {
        int n = 0;
        while (open("/dev/null", O_RDONLY) >= 0) n++;
        printf("opened %d more files, then %s\n", n, strerrorname_np(errno));
        return 0;
    }
    if (!strcmp(mode, "limits")) {
        struct rlimit as, nproc;
        getrlimit(RLIMIT_AS, &as);
        getrlimit(RLIMIT_NPROC, &nproc);
        if (as.rlim_cur == RLIM_INFINITY) printf("as=unlimited");
        else printf("as=%llu", (unsigned long long)as.rlim_cur);
        printf(" nproc=%llu\n", (unsigned long long)nproc.rlim_cur);
        return 0;
    }
    if (!strcmp(mode, "term")) {
        signal(SIGTERM, on_term);
        printf("ready\n");
        fflush(stdout);
        while (!terminated) pause();
        printf("got SIGTERM, stopping cleanly\n");
        return 0;
    }
    if (!strcmp(mode, "ptrace")) {
        long rc = ptrace(PTRACE_TRACEME, 0, 0, 0);
        printf("ptrace returned %ld\n", rc);
        return 0;
    }
    if (!strcmp(mode, "mount")) {
        int rc = mount("none", "/tmp", "tmpfs", 0, NULL);
        printf("mount returned %d\n", rc);
        return 0;
    }
    if (!strcmp(mode, "fsize")) {
        FILE *f = fopen(argv[2], "w");
        if (!f) return 1;
        static char block[1 << 16];
        for (int i = 0; i < 160; i++) fwrite(block, 1, sizeof block, f);
        fclose(f);
        printf("wrote 10 MiB\n");
        return 0;
    }
    return 2;
}
