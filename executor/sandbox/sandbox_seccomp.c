/* sandbox_seccomp.c - the system-call allow-list, compiled to BPF before the clone, loaded by the worker.
 *
 * The list covers what `whet train` (C, OpenMP threads, OpenBLAS, mmap'd safetensors) and Debian's
 * python3 running a grader need. Three other answers:
 *   - socket()/socketpair() fail with EACCES, so a program can say "network not allowed" itself
 *     (with kill_on_network they and the calls below go to init's listener instead: SCMP_ACT_NOTIFY
 *     holds the call while init records its number and kills the tree);
 *   - calls that reach beyond the process (ptrace, mount, bpf, kexec, keyctl, modules, namespaces,
 *     io_uring, perf, …) kill the process with SIGSYS, reported as a seccomp violation;
 *   - anything else fails with EPERM (clone3 with ENOSYS so glibc falls back to clone, whose flags
 *     the filter can see: creating namespaces is refused).
 * A gang trainer (peer_hosts) or a server (connect_to, listen_host) may use TCP sockets, its connect()
 * and bind() checked by init (sandbox_net.c); a GPU gang rank (allow_unix_sockets) unix sockets too,
 * bound to path names by init and held off abstract ones by a Landlock scope the worker loads.
 * With allow_nested the command may build sandboxes itself (sandbox.c's own calls: namespaces through
 * clone, mount, umount2, pivot_root, mount_setattr, sethostname); the filter a nested sandbox loads
 * stacks on this one, so what runs inside it is held by both.
 * Other architectures' system calls (the i386 ABI through int 0x80) kill the process (libseccomp's
 * bad-arch default). libseccomp builds the program; the worker loads it with a bare prctl, because
 * after the clone it may not allocate. */
#include <errno.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdio.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox_internal.h"

static const char *const allowed[] = {
    /* files and descriptors */
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
    "open", "openat", "close", "close_range", "creat", "stat", "fstat", "lstat", "newfstatat", "statx",
    "lseek", "access", "faccessat", "faccessat2", "pipe", "pipe2", "dup", "dup2", "dup3", "fcntl", "flock",
    "fsync", "fdatasync", "ftruncate", "truncate", "getdents", "getdents64", "getcwd", "chdir", "fchdir",
    "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "link", "linkat",
    "symlink", "symlinkat", "readlink", "readlinkat", "chmod", "fchmod", "fchmodat", "umask", "statfs",
    "fstatfs", "fadvise64", "fallocate", "copy_file_range", "sendfile", "splice", "tee", "sync_file_range",
    "utime", "utimes", "utimensat", "futimesat", "readahead", "getxattr", "lgetxattr", "fgetxattr",
    "listxattr", "llistxattr", "flistxattr", "memfd_create", "eventfd", "eventfd2",
    /* waiting */
    "select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
    "epoll_pwait", "epoll_pwait2", "nanosleep", "clock_nanosleep", "pause", "timerfd_create",
    "timerfd_settime", "timerfd_gettime", "signalfd", "signalfd4",
    /* memory */
    "mmap", "mprotect", "munmap", "mremap", "madvise", "brk", "mincore", "msync", "mlock", "munlock",
    "get_mempolicy", "set_mempolicy", "mbind", "membarrier",
    /* threads, processes, signals */
    "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "kill", "tgkill",
    "tkill", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait",
    "rt_sigpending", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "futex", "futex_waitv",
    "set_robust_list", "get_robust_list", "set_tid_address", "arch_prctl", "prctl", "rseq", "sched_yield",
    "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_getscheduler",
    "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval", "getpriority",
    "setpriority", "setpgid", "setsid", "alarm", "getitimer", "setitimer", "timer_create", "timer_settime",
    "timer_gettime", "timer_getoverrun", "timer_delete", "restart_syscall", "pidfd_open", "pidfd_send_signal",
    "seccomp", /* only ever adds filters; libseccomp probes it */
    /* identity and accounting */
    "getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid", "getgroups", "getresuid",
    "getresgid", "getpgrp", "getpgid", "getsid", "capget", "capset", "uname", "getrlimit", "setrlimit", "prlimit64",
    "getrusage", "sysinfo", "times", "getcpu", "getrandom", "clock_gettime", "clock_getres", "gettimeofday",
    "time",
    NULL,
};

/* Killed on sight: each reaches past the process, and no trainer or grader has a reason to try. */
static const char *const killed[] = {
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "mount", "umount2",
    "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
    "mount_setattr", "unshare", "setns", "bpf", "perf_event_open", "userfaultfd", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "keyctl", "add_key", "request_key",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "open_by_handle_at", "name_to_handle_at", "iopl",
    "ioperm", "syslog", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname",
    "setdomainname", "io_uring_setup", "io_uring_enter", "io_uring_register", "fanotify_init",
    "lookup_dcookie", "vhangup", "personality",
    NULL,
};

/* What a sandbox inside the sandbox needs beyond the allow-list (see sandbox_mounts.c, sandbox.c). */
static const char *const nested[] = {"mount", "umount2", "pivot_root", "mount_setattr", "sethostname", NULL};

static int in_list(const char *const *names, const char *name) {
    for (size_t i = 0; names[i]; i++)
        if (!strcmp(names[i], name)) return 1;
    return 0;
}

static int add_list(scmp_filter_ctx ctx, const char *const *names, uint32_t action, const char *const *skip,
                    struct whet_err *err) {
    for (size_t i = 0; names[i]; i++) {
        if (skip && in_list(skip, names[i])) continue;
        int nr = seccomp_syscall_resolve_name(names[i]);
        if (nr == __NR_SCMP_ERROR) continue; /* not on this architecture (open on arm64, …) */
        int rc = seccomp_rule_add(ctx, action, nr, 0);
        if (rc < 0) return whet_errf(err, "sandbox: seccomp rule for %s: %s", names[i], strerror(-rc));
    }
    return 0;
}

/* A gang trainer (spec->peer_hosts, with kill_on_network): socket() and socketpair() already go to
 * init, which lets TCP through; connect() and bind() go there too, to be checked and made by init
 * (sandbox_net.c); the calls on a socket that reach no new address are allowed, sends only without
 * MSG_FASTOPEN (which would connect). */
static int gang_rules(scmp_filter_ctx ctx) {
    static const char *const socket_calls[] = {"listen", "accept", "accept4", "getsockname", "getpeername",
                                               "setsockopt", "getsockopt", "shutdown", "recvfrom", "recvmsg",
                                               "recvmmsg", NULL};
    int rc = 0;
    for (size_t i = 0; socket_calls[i] && !rc; i++)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, seccomp_syscall_resolve_name(socket_calls[i]), 0);
    if (!rc) rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(connect), 0);
    if (!rc) rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(bind), 0);
    if (!rc) rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(sendto), 1, SCMP_A3(SCMP_CMP_MASKED_EQ, MSG_FASTOPEN, 0));
    if (!rc) rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(sendmsg), 1, SCMP_A2(SCMP_CMP_MASKED_EQ, MSG_FASTOPEN, 0));
    if (!rc) rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(sendmmsg), 1, SCMP_A3(SCMP_CMP_MASKED_EQ, MSG_FASTOPEN, 0));
    return rc;
}

static int build_rules(scmp_filter_ctx ctx, const struct sandbox_spec *spec, struct whet_err *err) {
    int allow_nested = spec->allow_nested;
    if (add_list(ctx, allowed, SCMP_ACT_ALLOW, NULL, err) < 0) return -1;
    uint32_t kill = spec->kill_on_network ? SCMP_ACT_NOTIFY : SCMP_ACT_KILL_PROCESS;
    if (add_list(ctx, killed, kill, allow_nested ? nested : NULL, err) < 0) return -1;
    if (allow_nested && add_list(ctx, nested, SCMP_ACT_ALLOW, NULL, err) < 0) return -1;
    /* clone: threads and processes yes, new namespaces no (EPERM by the default) unless nested. */
    const uint64_t ns_flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                              CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_NEWTIME;
    int rc = allow_nested ? seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 0)
                          : seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
                                             SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags, 0));
    /* ioctl: all but TIOCSTI, which pushes input into a terminal the caller may have handed over. */
    if (!rc) rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_NE, TIOCSTI, 0));
    uint32_t network = spec->kill_on_network ? SCMP_ACT_NOTIFY : SCMP_ACT_ERRNO(EACCES);
    if (!rc) rc = seccomp_rule_add(ctx, network, SCMP_SYS(socket), 0);
    if (!rc) rc = seccomp_rule_add(ctx, network, SCMP_SYS(socketpair), 0);
    if (!rc && (spec->peer_hosts || spec->connect_to || spec->listen_host)) rc = gang_rules(ctx);
    if (!rc) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    if (rc < 0) return whet_errf(err, "sandbox: seccomp rules: %s", strerror(-rc));
    return 0;
}

int sandbox_seccomp_compile(struct sock_fprog *prog, const struct sandbox_spec *spec, struct whet_err *err) {
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
    if (!ctx) return whet_errf(err, "sandbox: seccomp_init failed");
    int fd = -1, rc = build_rules(ctx, spec, err);
    if (rc == 0) {
        fd = memfd_create("whet-seccomp", MFD_CLOEXEC);
        if (fd < 0) rc = whet_errf(err, "sandbox: memfd_create: %s", strerror(errno));
    }
    if (rc == 0) {
        int e = seccomp_export_bpf(ctx, fd);
        if (e < 0) rc = whet_errf(err, "sandbox: seccomp_export_bpf: %s", strerror(-e));
    }
    if (rc == 0) {
        off_t len = lseek(fd, 0, SEEK_END);
        if (len <= 0 || len % sizeof(struct sock_filter)) {
            rc = whet_errf(err, "sandbox: seccomp program has a bad size (%lld bytes)", (long long)len);
        } else {
            struct sock_filter *filter = xmalloc((size_t)len);
            if (pread(fd, filter, (size_t)len, 0) != len) {
                free(filter);
                rc = whet_errf(err, "sandbox: reading the seccomp program: %s", strerror(errno));
            } else {
                prog->filter = filter;
                prog->len = (unsigned short)(len / sizeof(struct sock_filter));
            }
        }
    }
    if (fd >= 0) close(fd);
    seccomp_release(ctx);
    return rc;
}

int sandbox_seccomp_child(const struct sandbox_plan *plan, const char **what) {
    *what = "load seccomp filter";
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &plan->seccomp, 0, 0);
}

int sandbox_seccomp_child_listener(const struct sandbox_plan *plan, const char **what) {
    *what = "load seccomp filter with a listener";
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &plan->seccomp);
}

void sandbox_syscall_name(int nr, char *out, size_t len) {
    char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
    if (name) snprintf(out, len, "%s", name);
    else snprintf(out, len, "#%d", nr);
    free(name);
}
