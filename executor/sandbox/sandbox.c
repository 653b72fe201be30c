/* sandbox.c - spawning, supervising and judging a sandboxed command (see sandbox.h for the picture).
 *
 * Sections: the plan (everything computed before the clone), the init process (PID 1 inside), the
 * worker (the command), the caller's side (spawn, pump, wait, the verdict), and the run loop that
 * feeds stdin and captures output for several sandboxes at once.
 *
 * Init and worker talk to the caller through one pipe of fixed-size records (each smaller than
 * PIPE_BUF, so writes from the two never interleave): a setup error, a note, or the final result with
 * the worker's wait status and the tree's resource use. EOF on the pipe means the sandbox is gone. */
#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "sandbox_internal.h"

/* ---------- async-signal-safe helpers ---------- */

size_t sbx_strlcpy(char *dst, const char *src, size_t size) {
    size_t n = strlen(src);
    if (size) {
        size_t k = n < size - 1 ? n : size - 1;
        memcpy(dst, src, k);
        dst[k] = 0;
    }
    return n;
}

size_t sbx_strlcat(char *dst, const char *src, size_t size) {
    size_t used = strnlen(dst, size);
    if (used == size) return used + strlen(src);
    return used + sbx_strlcpy(dst + used, src, size - used);
}

/* ---------- records from init and worker ---------- */

enum record_kind { RECORD_SETUP_ERROR = 1, RECORD_NOTE, RECORD_RESULT };

struct record {
    int32_t kind;
    int32_t wait_status;   /* the worker's, for RECORD_RESULT */
    int32_t procs_killed;  /* init killed the tree at the process limit */
    int32_t peak_tasks;
    int32_t denied_syscall; /* 1 + the number of the forbidden call init was notified of (0: none) */
    int64_t max_rss_kb;
    int64_t cpu_us;
    char msg[200];
};

static void record_send(int fd, int kind, const char *msg) {
    struct record r;
    memset(&r, 0, sizeof r);
    r.kind = kind;
    sbx_strlcpy(r.msg, msg, sizeof r.msg);
    ssize_t ignored = write(fd, &r, sizeof r);
    (void)ignored;
}

/* "what: strerror" as a setup error, then exit. strerrordesc_np is async-signal-safe. */
static void child_fail(int fd, const char *what, int e, int code) {
    char msg[200];
    sbx_strlcpy(msg, what, sizeof msg);
    sbx_strlcat(msg, ": ", sizeof msg);
    const char *desc = strerrordesc_np(e);
    sbx_strlcat(msg, desc ? desc : "unknown error", sizeof msg);
    record_send(fd, RECORD_SETUP_ERROR, msg);
    _exit(code);
}

/* ---------- the plan ---------- */

static char **copy_strv(const char *const *v) {
    size_t n = 0;
    while (v && v[n]) n++;
    char **out = xcalloc(n + 1, sizeof *out);
    for (size_t i = 0; i < n; i++) out[i] = xstrdup(v[i]);
    return out;
}

static void free_strv(char **v) {
    for (size_t i = 0; v && v[i]; i++) free(v[i]);
    free(v);
}

static const char *const default_env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "TMPDIR=/tmp",
                                          "LANG=C.UTF-8", NULL};

/* argv[0] with a slash is used as it is; otherwise each directory of the environment's PATH. */
static void plan_exec_paths(struct sandbox_plan *plan) {
    const char *name = plan->argv[0];
    if (strchr(name, '/')) {
        plan->exec_paths = xcalloc(1, sizeof(char *));
        plan->exec_paths[0] = xstrdup(name);
        plan->n_exec_paths = 1;
        return;
    }
    const char *path = "/usr/bin:/bin";
    for (size_t i = 0; plan->env[i]; i++)
        if (!strncmp(plan->env[i], "PATH=", 5)) path = plan->env[i] + 5;
    size_t cap = 1;
    for (const char *p = path; *p; p++) cap += *p == ':';
    plan->exec_paths = xcalloc(cap, sizeof(char *));
    const char *start = path;
    for (;;) {
        const char *end = strchr(start, ':');
        size_t len = end ? (size_t)(end - start) : strlen(start);
        if (len) plan->exec_paths[plan->n_exec_paths++] = xasprintf("%.*s/%s", (int)len, start, name);
        if (!end) break;
        start = end + 1;
    }
}

/* Who the command is, inside and out (see sandbox_ns.c); recomputed when user namespaces fail. */
static void plan_identity(struct sandbox_plan *plan, const struct sandbox_spec *spec) {
    int uid = (int)getuid(), gid = (int)getgid();
    plan->parent_writes_maps = plan->switch_ids = 0;
    if (plan->use_userns && spec->host_uid >= 0) {
        snprintf(plan->uid_map, sizeof plan->uid_map, "0 %d 1\n%d %d 1\n", uid, SANDBOX_UID, spec->host_uid);
        snprintf(plan->gid_map, sizeof plan->gid_map, "0 %d 1\n%d %d 1\n", gid, SANDBOX_UID, spec->host_gid);
        plan->parent_writes_maps = plan->switch_ids = 1;
        plan->run_uid = SANDBOX_UID;
        plan->run_gid = SANDBOX_UID;
    } else if (plan->use_userns) {
        snprintf(plan->uid_map, sizeof plan->uid_map, "%d %d 1\n", SANDBOX_UID, uid);
        snprintf(plan->gid_map, sizeof plan->gid_map, "%d %d 1\n", SANDBOX_UID, gid);
    } else if (spec->host_uid >= 0) {
        plan->switch_ids = 1;
        plan->run_uid = (uid_t)spec->host_uid;
        plan->run_gid = (gid_t)spec->host_gid;
    }
    /* The kernel exempts uid 0's processes from RLIMIT_NPROC, user namespace or not. */
    plan->nproc_binds = spec->host_uid >= 0 ? spec->host_uid != 0 : uid != 0;
}

int sandbox_plan_build(struct sandbox_plan *plan, const struct sandbox_spec *spec, struct whet_err *err) {
    if (!spec->argv || !spec->argv[0] || !spec->argv[0][0]) return whet_errf(err, "sandbox: no command given");
    if ((spec->host_uid >= 0) != (spec->host_gid >= 0))
        return whet_errf(err, "sandbox: host_uid and host_gid go together");
    if (spec->host_uid >= 0 && geteuid() != 0)
        return whet_errf(err, "sandbox: host_uid %d needs a root caller", spec->host_uid);
    plan->use_userns = !spec->no_userns;
    plan_identity(plan, spec);
    plan->clone_flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
    /* A gang trainer or a server keeps the host's network, held to its peers or endpoints by init
     * (sandbox_net.c). */
    if (!spec->allow_network && !spec->peer_hosts && !spec->connect_to && !spec->listen_host)
        plan->clone_flags |= CLONE_NEWNET;
    if (plan->use_userns) plan->clone_flags |= CLONE_NEWUSER;
    plan->argv = copy_strv(spec->argv);
    plan->env = copy_strv(spec->env ? spec->env : default_env);
    plan_exec_paths(plan);
    plan->max_procs = spec->max_procs;
    plan->seccomp_notify = spec->kill_on_network;
    if (spec->workdir) {
        plan->workdir = xstrdup(spec->workdir);
    } else if (spec->writable_dirs && spec->writable_dirs[0]) {
        char real[PATH_MAX];
        plan->workdir = xstrdup(realpath(spec->writable_dirs[0], real) ? real : spec->writable_dirs[0]);
    } else {
        plan->workdir = xstrdup("/tmp");
    }
    if (sandbox_mounts_plan(plan, spec, err) < 0 || sandbox_net_plan(plan, spec, err) < 0) return -1;
    return sandbox_seccomp_compile(&plan->seccomp, spec, err);
}

void sandbox_plan_free(struct sandbox_plan *plan) {
    for (size_t i = 0; i < plan->n_mounts; i++) {
        free(plan->mounts[i].src);
        free(plan->mounts[i].dst);
        free(plan->mounts[i].data);
    }
    free(plan->mounts);
    free_strv(plan->argv);
    free_strv(plan->env);
    for (size_t i = 0; i < plan->n_exec_paths; i++) free(plan->exec_paths[i]);
    free(plan->exec_paths);
    free(plan->workdir);
    free(plan->seccomp.filter);
    memset(plan, 0, sizeof *plan);
}

/* ---------- the worker: becomes the command ---------- */

/* The file descriptors the children keep, renumbered above every inherited one; with a seccomp
 * listener (plan->seccomp_notify), init adds the two pipes through which the worker hands it over. */
struct child_fds {
    int in, out, err, result, lifeline, go;
    int listener_w, listener_ack; /* worker's ends: the listener's fd number out, init's ack in */
};

/* Fds 4 and 5 of the worker while it hands its seccomp listener to init. */
#define WORKER_LISTENER_W 4
#define WORKER_LISTENER_ACK 5


static void worker_main(const struct sandbox_plan *plan, const struct child_fds *fds) {
    /* Signals the caller blocked or ignored would stay so across exec: the command starts clean. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) sigaction(sig, &dfl, NULL); /* EINVAL for KILL, STOP: fine */
    const char *what = "setsid";
    if (setsid() < 0) child_fail(fds->result, what, errno, 127);
    /* Init closed 0-2, so a fresh open would land on one of them: move /dev/null above 3. */
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd >= 0 && null_fd <= 3) null_fd = fcntl(null_fd, F_DUPFD_CLOEXEC, 4);
    if (null_fd < 0) child_fail(fds->result, "open /dev/null", errno, 127);
    int in = fds->in >= 0 ? fds->in : null_fd, out = fds->out >= 0 ? fds->out : null_fd;
    int errfd = fds->err >= 0 ? fds->err : null_fd;
    /* All sources are above 3, so the dup2s cannot clobber one another; the result pipe goes to 3
     * and closes itself on exec. */
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(errfd, 2) < 0 || dup3(fds->result, 3, O_CLOEXEC) < 0)
        child_fail(fds->result, "dup2", errno, 127);
    /* The listener pipes sit above 5 (init put them there), so these cannot clobber them either. */
    if (plan->seccomp_notify && (dup3(fds->listener_w, WORKER_LISTENER_W, O_CLOEXEC) < 0 ||
                                 dup3(fds->listener_ack, WORKER_LISTENER_ACK, O_CLOEXEC) < 0))
        child_fail(fds->result, "dup2", errno, 127);
    syscall(SYS_close_range, plan->seccomp_notify ? WORKER_LISTENER_ACK + 1 : 4, ~0U, 0);
    const int result = 3;
    if (sandbox_rlimits_child(plan, &what) < 0) child_fail(result, what, errno, 127);
    if (chdir(plan->workdir) < 0) child_fail(result, "chdir to the working directory", errno, 127);
    if (sandbox_identity_child(plan, &what) < 0) child_fail(result, what, errno, 127);
    if (sandbox_net_child_scope(plan, &what) < 0) child_fail(result, what, errno, 127);
    if (plan->seccomp_notify) {
        /* Init takes the listener with pidfd_getfd, which needs the worker dumpable (a uid switch
         * clears it; exec would set it anyway). The command never holds it: init acks before exec,
         * and the fd is close-on-exec. */
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
        int listener = sandbox_seccomp_child_listener(plan, &what);
        if (listener < 0) child_fail(result, what, errno, 127);
        int32_t n = listener;
        char ack;
        if (write(WORKER_LISTENER_W, &n, sizeof n) != sizeof n || read(WORKER_LISTENER_ACK, &ack, 1) != 1)
            child_fail(result, "hand the seccomp listener to init", errno, 127);
        close(listener);
        close(WORKER_LISTENER_W);
        close(WORKER_LISTENER_ACK);
    } else if (sandbox_seccomp_child(plan, &what) < 0) {
        child_fail(result, what, errno, 127);
    }
    int e = ENOENT;
    for (size_t i = 0; i < plan->n_exec_paths; i++) {
        execve(plan->exec_paths[i], plan->argv, plan->env);
        if (errno == ENOENT || errno == ENOTDIR) continue;
        e = errno;
        if (errno != EACCES) break; /* like execvp: a later directory may still hold it */
    }
    char msg[160] = "exec ";
    sbx_strlcat(msg, plan->argv[0], sizeof msg);
    child_fail(result, msg, e, 127);
}

/* ---------- init: PID 1 of the sandbox ---------- */

/* Tasks (threads included) in the PID namespace other than init, from /proc/<pid>/stat's
 * num_threads (field 20), counting no further than `stop`. Raw getdents64: opendir would allocate.
 * Returns -1 without /proc. */
static int count_tasks(int stop) {
    int dir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return -1;
    char buf[4096], stat_buf[512], path[64];
    int total = 0;
    for (;;) {
        long n = syscall(SYS_getdents64, dir, buf, sizeof buf);
        if (n <= 0) break;
        for (long off = 0; off < n;) {
            struct {
                uint64_t ino;
                int64_t off;
                unsigned short reclen;
                unsigned char type;
                char name[];
            } *d = (void *)(buf + off);
            off += d->reclen;
            if (d->name[0] < '1' || d->name[0] > '9' || !strcmp(d->name, "1")) continue;
            sbx_strlcpy(path, "/proc/", sizeof path);
            sbx_strlcat(path, d->name, sizeof path);
            sbx_strlcat(path, "/stat", sizeof path);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) continue;
            ssize_t len = read(fd, stat_buf, sizeof stat_buf - 1);
            close(fd);
            if (len <= 0) continue;
            stat_buf[len] = 0;
            /* The name (field 2) may hold spaces and parentheses: count fields after the last ')'. */
            char *p = strrchr(stat_buf, ')');
            if (!p) continue;
            int field = 2;
            long threads = 1;
            for (; *p; p++) {
                if (*p != ' ') continue;
                if (++field == 20) {
                    threads = strtol(p + 1, NULL, 10);
                    break;
                }
            }
            total += (int)(threads > 0 ? threads : 1);
            if (total > stop) break;
        }
        if (total > stop) break;
    }
    close(dir);
    return total;
}

/* Counts the tasks this often (when there is a process limit); the worker's end and the caller's
 * death wake init at once. */
#define INIT_POLL_MS 50
/* The tree is killed after this many consecutive polls at the process limit (a fork bomb). */
#define PROC_LIMIT_POLLS 6

/* What sandbox_signal may pass on to the command (SIGTERM: "checkpoint and stop" for whet train). */
static const int forwarded_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

/* init's first steps inside the new namespaces: the user namespace's maps, the host name, the mounts. */
static void init_enter(const struct sandbox_plan *plan, struct child_fds *fds) {
    /* A caller that changed its uid is not dumpable, which would leave /proc/self/uid_map owned by
     * root and unwritable: be dumpable while writing the maps, and not afterwards. */
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    const char *what = "wait for the go signal";
    char go;
    if (read(fds->go, &go, 1) != 1) _exit(1); /* the caller gave up (cgroup failure) */
    close(fds->go);
    if (sandbox_userns_child(plan, &what) < 0) child_fail(fds->result, what, errno, 1);
    if (sethostname(SANDBOX_HOSTNAME, sizeof SANDBOX_HOSTNAME - 1) < 0)
        child_fail(fds->result, "sethostname", errno, 1);
    int proc_missing = 0;
    if (sandbox_mounts_child(plan, &proc_missing, &what) < 0) child_fail(fds->result, what, errno, 1);
    if (proc_missing) record_send(fds->result, RECORD_NOTE, "no /proc inside: the host refused a new proc mount");
    /* init holds a copy of the caller's memory: keep the command from reading it through /proc/1. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

/* Signals through a signalfd: SIGCHLD wakes init the moment a child ends, and the ones the caller may
 * send (sandbox_signal) are forwarded to the command. A PID namespace's init only receives signals it
 * handles or blocks, so blocking them is what lets them in. */
static int init_signal_fd(struct child_fds *fds) {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    for (size_t i = 0; i < WHET_ARRAY_LEN(forwarded_signals); i++) sigaddset(&chld, forwarded_signals[i]);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sig_fd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sig_fd < 0) child_fail(fds->result, "signalfd", errno, 1);
    return sig_fd;
}

/* The pipes through which the worker hands init its seccomp listener's fd number (listener_w, read at
 * *listener_r) and init says it has taken it (*ack_w, read at listener_ack). */
static void init_listener_pipes(struct child_fds *fds, int sig_fd, int *listener_r, int *ack_w) {
    int out_pipe[2], ack_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) < 0 || pipe2(ack_pipe, O_CLOEXEC) < 0)
        child_fail(fds->result, "pipe for the seccomp listener", errno, 1);
    /* Above every fd the worker moves into 0-5 (see worker_main). */
    int top = WORKER_LISTENER_ACK;
    int all[] = {fds->in, fds->out, fds->err, fds->result, fds->lifeline, sig_fd};
    for (size_t i = 0; i < WHET_ARRAY_LEN(all); i++)
        if (all[i] > top) top = all[i];
    fds->listener_w = fcntl(out_pipe[1], F_DUPFD_CLOEXEC, top + 1);
    fds->listener_ack = fcntl(ack_pipe[0], F_DUPFD_CLOEXEC, top + 1);
    if (fds->listener_w < 0 || fds->listener_ack < 0) child_fail(fds->result, "move the listener pipes", errno, 1);
    close(out_pipe[1]);
    close(ack_pipe[0]);
    *listener_r = out_pipe[0];
    *ack_w = ack_pipe[1];
}

/* Takes the worker's seccomp listener (pidfd_getfd of the number it sends); -1 when there is none. */
static int init_take_listener(struct child_fds *fds, pid_t worker, int listener_r, int ack_w) {
    close(fds->listener_w);
    close(fds->listener_ack);
    int listener = -1;
    int32_t n;
    /* EOF: the worker failed before (its setup error is on the result pipe). */
    if (read(listener_r, &n, sizeof n) == sizeof n) {
        int pidfd = (int)syscall(SYS_pidfd_open, worker, 0);
        listener = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, n, 0);
        if (listener < 0) {
            /* The command still runs under the filter; with no listener its forbidden calls fail
             * with ENOSYS instead of ending it. */
            record_send(fds->result, RECORD_NOTE, "no seccomp listener: forbidden calls fail instead of killing");
        }
        if (pidfd >= 0) close(pidfd);
        ssize_t ignored = write(ack_w, "k", 1);
        (void)ignored;
    }
    close(listener_r);
    close(ack_w);
    return listener;
}

/* Watches the worker until it ends: forwards signals, ends the tree on a forbidden call, the caller's
 * death or a fork bomb, and records what it saw in r. */
static void init_watch(const struct sandbox_plan *plan, struct child_fds *fds, pid_t worker, int sig_fd, int listener,
                       struct record *r) {
    int worker_done = 0, at_limit = 0;
    struct pollfd pfd[3] = {{.fd = fds->lifeline, .events = POLLIN}, {.fd = sig_fd, .events = POLLIN},
                            {.fd = listener, .events = POLLIN}};
    while (!worker_done) {
        /* The task count needs a timer; otherwise only an event wakes init. */
        poll(pfd, 3, plan->max_procs > 0 ? INIT_POLL_MS : -1);
        if (pfd[0].revents) _exit(1); /* the caller is gone: take the tree down */
        if (pfd[1].revents) {
            struct signalfd_siginfo info;
            while (read(sig_fd, &info, sizeof info) > 0)
                if (info.ssi_signo != SIGCHLD) kill(worker, (int)info.ssi_signo);
        }
        if (pfd[2].revents & POLLIN) {
            /* A forbidden call, held by the kernel until answered: remember which, end the tree; but a
             * gang trainer's socket call that its policy allows is answered and the tree goes on. */
            struct seccomp_notif req;
            memset(&req, 0, sizeof req);
            char why[sizeof r->msg];
            if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) == 0) {
                if (plan->net.active && sandbox_net_child_answer(plan, listener, &req, why, sizeof why)) continue;
                if (!r->denied_syscall) {
                    r->denied_syscall = req.data.nr + 1;
                    sbx_strlcpy(r->msg, plan->net.active ? why : "", sizeof r->msg);
                }
            }
            kill(-1, SIGKILL);
        } else if (pfd[2].revents) {
            pfd[2].fd = -1; /* hung up: nothing runs under the filter any more */
        }
        int status;
        struct rusage ru;
        pid_t pid;
        while ((pid = wait4(-1, &status, WNOHANG, &ru)) > 0) {
            if (ru.ru_maxrss > r->max_rss_kb) r->max_rss_kb = ru.ru_maxrss;
            if (pid == worker) {
                r->wait_status = status;
                worker_done = 1;
            }
        }
        if (worker_done || plan->max_procs <= 0) continue;
        int tasks = count_tasks(plan->max_procs);
        if (tasks > r->peak_tasks) r->peak_tasks = tasks;
        /* init counts toward RLIMIT_NPROC too, so the others top out at max_procs - 1: a tree held
         * there for a while is a fork bomb. Above it, RLIMIT_NPROC is not holding (uid 0 without a
         * user namespace): no grace then. */
        at_limit = tasks >= plan->max_procs - 1 ? at_limit + 1 : 0;
        if (at_limit >= PROC_LIMIT_POLLS || tasks > plan->max_procs) {
            r->procs_killed = 1;
            kill(-1, SIGKILL);
        }
    }
}

/* The sandbox's init (PID 1 of its namespace): sets the namespaces up, starts the worker that becomes
 * the command, watches it, and sends the result record when the whole tree is gone. */
static void init_main(const struct sandbox_plan *plan, struct child_fds *fds) {
    init_enter(plan, fds);
    int sig_fd = init_signal_fd(fds);
    int listener_r = -1, ack_w = -1;
    fds->listener_w = fds->listener_ack = -1;
    if (plan->seccomp_notify) init_listener_pipes(fds, sig_fd, &listener_r, &ack_w);
    pid_t worker = (pid_t)syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL);
    if (worker < 0) child_fail(fds->result, "fork the worker", errno, 1);
    if (worker == 0) worker_main(plan, fds);
    if (fds->in >= 0) close(fds->in);
    if (fds->out >= 0) close(fds->out);
    if (fds->err >= 0) close(fds->err);
    int listener = plan->seccomp_notify ? init_take_listener(fds, worker, listener_r, ack_w) : -1;

    struct record r;
    memset(&r, 0, sizeof r);
    r.kind = RECORD_RESULT;
    init_watch(plan, fds, worker, sig_fd, listener, &r);
    /* The command is over: whatever it left behind goes too, then the totals are complete. */
    kill(-1, SIGKILL);
    int status;
    struct rusage ru;
    while (wait4(-1, &status, 0, &ru) > 0)
        if (ru.ru_maxrss > r.max_rss_kb) r.max_rss_kb = ru.ru_maxrss;
    struct rusage total;
    getrusage(RUSAGE_CHILDREN, &total);
    r.cpu_us = (int64_t)(total.ru_utime.tv_sec + total.ru_stime.tv_sec) * 1000000 + total.ru_utime.tv_usec +
               total.ru_stime.tv_usec;
    if (r.max_rss_kb < total.ru_maxrss) r.max_rss_kb = total.ru_maxrss;
    ssize_t ignored = write(fds->result, &r, sizeof r);
    (void)ignored;
    _exit(0);
}

/* Moves the fds the children keep above every other one, then closes all the rest (the caller's
 * other sandboxes' pipes, sockets, …: init never execs, so close-on-exec would not help). */
static void child_keep_fds(struct child_fds *fds, int max_fd) {
    int *slots[] = {&fds->in, &fds->out, &fds->err, &fds->result, &fds->lifeline, &fds->go};
    int kept[6], n = 0;
    for (size_t i = 0; i < 6; i++) {
        if (*slots[i] < 0) continue;
        int moved = fcntl(*slots[i], F_DUPFD_CLOEXEC, max_fd + 1);
        if (moved < 0) _exit(1);
        *slots[i] = moved;
        kept[n++] = moved;
    }
    /* Close everything but `kept`: sort (n <= 6), then the gaps. */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && kept[j - 1] > kept[j]; j--) {
            int t = kept[j];
            kept[j] = kept[j - 1];
            kept[j - 1] = t;
        }
    int from = 0;
    for (int i = 0; i < n; i++) {
        if (kept[i] > from) syscall(SYS_close_range, from, kept[i] - 1, 0);
        from = kept[i] + 1;
    }
    syscall(SYS_close_range, from, ~0U, 0);
}

/* ---------- the caller's side ---------- */

struct sandbox_state {
    double started, deadline;      /* whet_now_mono(); deadline 0: none */
    double wall_timeout_s;
    uint64_t mem_bytes, cpu_seconds, file_bytes;
    int max_procs;
    int lifeline_fd;
    int killed, timed_out, ended;
    double ended_at;
    struct record result;          /* kind 0 until the result record arrives */
    char setup_error[200];
    char notes[256];
    unsigned char partial[sizeof(struct record)];
    size_t partial_len;
    struct sandbox_cgroup *cgroup;
};

void sandbox_spec_init(struct sandbox_spec *spec) {
    memset(spec, 0, sizeof *spec);
    spec->stdin_fd = spec->stdout_fd = spec->stderr_fd = -1;
    spec->open_files = 256;
    spec->tmp_bytes = 64ull << 20;
    spec->host_uid = spec->host_gid = -1;
}

const char *sandbox_reason_name(enum sandbox_reason reason) {
    switch (reason) {
    case SANDBOX_OK: return "ok";
    case SANDBOX_EXIT: return "exit";
    case SANDBOX_SIGNAL: return "signal";
    case SANDBOX_TIMEOUT: return "timeout";
    case SANDBOX_CPU: return "cpu";
    case SANDBOX_MEMORY: return "memory";
    case SANDBOX_PROCS: return "procs";
    case SANDBOX_SECCOMP: return "seccomp";
    case SANDBOX_FSIZE: return "file_size";
    case SANDBOX_KILLED: return "killed";
    case SANDBOX_SETUP: return "setup";
    }
    return "unknown";
}

static void add_note(struct sandbox_state *st, const char *note) {
    if (st->notes[0]) sbx_strlcat(st->notes, "; ", sizeof st->notes);
    sbx_strlcat(st->notes, note, sizeof st->notes);
}

static void close_pair(int p[2]) {
    for (int i = 0; i < 2; i++)
        if (p[i] >= 0) close(p[i]);
    p[0] = p[1] = -1;
}

/* One clone attempt with the plan's namespaces. Returns the pid, or -1 with errno. */
static pid_t spawn_clone(const struct sandbox_plan *plan, const struct sandbox_spec *spec, int result_w,
                         int lifeline_r, int go_r) {
    struct child_fds fds = {spec->stdin_fd, spec->stdout_fd, spec->stderr_fd, result_w, lifeline_r, go_r, -1, -1};
    int max_fd = 2;
    int all[] = {fds.in, fds.out, fds.err, fds.result, fds.lifeline, fds.go};
    for (size_t i = 0; i < WHET_ARRAY_LEN(all); i++)
        if (all[i] > max_fd) max_fd = all[i];
    pid_t pid = (pid_t)syscall(SYS_clone, plan->clone_flags | SIGCHLD, NULL, NULL, NULL, NULL);
    if (pid == 0) {
        child_keep_fds(&fds, max_fd);
        init_main(plan, &fds);
    }
    return pid;
}

int sandbox_spawn(const struct sandbox_spec *spec, struct sandbox_child *child, struct whet_err *err) {
    memset(child, 0, sizeof *child);
    child->pid = -1;
    child->result_fd = -1;
    struct sandbox_plan plan;
    memset(&plan, 0, sizeof plan);
    if (sandbox_plan_build(&plan, spec, err) < 0) {
        sandbox_plan_free(&plan);
        return -1;
    }
    struct sandbox_state *st = xcalloc(1, sizeof *st);
    st->lifeline_fd = -1;
    if (spec->no_userns) add_note(st, "user namespace disabled by the caller");
    char why[256] = "";
    if (spec->mem_bytes || spec->max_procs > 0) {
        st->cgroup = sandbox_cgroup_create(spec, why, sizeof why);
        if (why[0]) {
            add_note(st, why);
            /* Every result carries the note; the log says it once per process. */
            static atomic_int logged;
            if (!atomic_exchange(&logged, 1)) log_warn("sandbox: %s", why);
        }
    }
    sandbox_rlimits_plan(&plan, spec, sandbox_cgroup_has_memory(st->cgroup));
    if (spec->max_procs > 0 && !plan.nproc_binds && !sandbox_cgroup_has_pids(st->cgroup))
        add_note(st, "RLIMIT_NPROC does not bind uid 0: init's task counter enforces the process limit");

    int result[2] = {-1, -1}, lifeline[2] = {-1, -1}, go[2] = {-1, -1};
    if (pipe2(result, O_CLOEXEC) < 0 || pipe2(lifeline, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0) {
        whet_errf(err, "sandbox: pipe: %s", strerror(errno));
        goto fail;
    }
    st->started = whet_now_mono();
    pid_t pid = spawn_clone(&plan, spec, result[1], lifeline[0], go[0]);
    if (pid < 0 && plan.use_userns && (errno == EPERM || errno == EINVAL || errno == ENOSPC || errno == EUSERS) &&
        geteuid() == 0) {
        /* No user namespaces here (a sysctl, a container): root can still build the others. */
        char note[128];
        snprintf(note, sizeof note, "user namespaces unavailable (%s): running without one", strerror(errno));
        add_note(st, note);
        log_warn("sandbox: %s", note);
        plan.use_userns = 0;
        plan.clone_flags &= ~CLONE_NEWUSER;
        plan_identity(&plan, spec);
        pid = spawn_clone(&plan, spec, result[1], lifeline[0], go[0]);
    }
    if (pid < 0) {
        int e = errno;
        whet_errf(err, "sandbox: clone with new namespaces: %s", strerror(e));
        if (e == EPERM || e == ENOSPC)
            whet_err_hint(err, "user namespaces may be off: see /proc/sys/user/max_user_namespaces; inside a "
                               "sandbox, the outer one needs allow_nested");
        goto fail;
    }
    close(result[1]);
    close(lifeline[0]);
    close(go[0]);
    result[1] = lifeline[0] = go[0] = -1;
    fcntl(result[0], F_SETFL, O_NONBLOCK);
    if ((plan.parent_writes_maps && sandbox_userns_write_maps(&plan, pid, err) < 0) ||
        (st->cgroup && sandbox_cgroup_add(st->cgroup, pid, err) < 0)) {
        close_pair(go); /* init reads EOF instead of the go byte and exits */
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        goto fail;
    }
    if (write(go[1], "g", 1) != 1) {
        whet_errf(err, "sandbox: starting init: %s", strerror(errno));
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        goto fail;
    }
    close(go[1]);
    sandbox_plan_free(&plan);
    st->lifeline_fd = lifeline[1];
    st->wall_timeout_s = spec->wall_timeout_s;
    st->deadline = spec->wall_timeout_s > 0 ? st->started + spec->wall_timeout_s : 0;
    st->mem_bytes = spec->mem_bytes;
    st->cpu_seconds = spec->cpu_seconds;
    st->file_bytes = spec->file_bytes;
    st->max_procs = spec->max_procs;
    child->pid = pid;
    child->result_fd = result[0];
    child->state = st;
    return 0;
fail:
    close_pair(result);
    close_pair(lifeline);
    close_pair(go);
    sandbox_cgroup_destroy(st->cgroup);
    free(st);
    sandbox_plan_free(&plan);
    return -1;
}

void sandbox_kill(struct sandbox_child *child) {
    /* A sandbox that has already ended keeps its own verdict. */
    if (!child->state || sandbox_pump(child)) return;
    child->state->killed = 1;
    kill(child->pid, SIGKILL);
}

int sandbox_signal(struct sandbox_child *child, int sig) {
    int ok = 0;
    for (size_t i = 0; i < WHET_ARRAY_LEN(forwarded_signals); i++) ok |= forwarded_signals[i] == sig;
    if (!ok || !child->state || child->state->ended) {
        errno = ok ? ESRCH : EINVAL;
        return -1;
    }
    return kill(child->pid, sig);
}

int sandbox_check_deadline(struct sandbox_child *child) {
    struct sandbox_state *st = child->state;
    if (!st || st->ended || st->timed_out || st->killed || !st->deadline || whet_now_mono() < st->deadline)
        return 0;
    st->timed_out = 1;
    kill(child->pid, SIGKILL);
    return 1;
}

int sandbox_timeout_ms(const struct sandbox_child *child) {
    const struct sandbox_state *st = child->state;
    if (!st || !st->deadline || st->timed_out || st->killed) return -1;
    double left = st->deadline - whet_now_mono();
    return left <= 0 ? 0 : (int)ceil(left * 1000);
}

static void take_record(struct sandbox_state *st, const struct record *r) {
    char msg[sizeof r->msg + 1];
    memcpy(msg, r->msg, sizeof r->msg);
    msg[sizeof r->msg] = 0;
    if (r->kind == RECORD_SETUP_ERROR && !st->setup_error[0]) sbx_strlcpy(st->setup_error, msg, sizeof st->setup_error);
    else if (r->kind == RECORD_NOTE) add_note(st, msg);
    else if (r->kind == RECORD_RESULT) st->result = *r;
}

int sandbox_pump(struct sandbox_child *child) {
    struct sandbox_state *st = child->state;
    if (st->ended) return 1;
    for (;;) { /* result_fd is non-blocking */
        ssize_t n = read(child->result_fd, st->partial + st->partial_len, sizeof st->partial - st->partial_len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return 0;
        if (n <= 0) {
            st->ended = 1;
            st->ended_at = whet_now_mono();
            return 1;
        }
        st->partial_len += (size_t)n;
        if (st->partial_len == sizeof st->partial) {
            struct record r;
            memcpy(&r, st->partial, sizeof r);
            take_record(st, &r);
            st->partial_len = 0;
        }
    }
}

static double mib(uint64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* The verdict: why the command ended, in the terms of sandbox_reason. */
static void reach_verdict(const struct sandbox_state *st, struct sandbox_result *res) {
    const struct record *r = &st->result;
    res->exit_code = -1;
    res->term_signal = 0;
    res->cpu_s = (double)r->cpu_us / 1e6;
    res->max_rss_kb = r->max_rss_kb;
    res->peak_tasks = r->peak_tasks;
    double rss_bytes = (double)r->max_rss_kb * 1024.0;
    /* Under RLIMIT_AS a program learns of the limit as a failed allocation and dies its own way
     * (MemoryError, a NULL dereference, abort): count it as the memory limit when the tree's peak
     * resident set came near the limit. */
    int near_memory = st->mem_bytes && rss_bytes >= 0.75 * (double)st->mem_bytes;
    if (st->setup_error[0]) {
        res->reason = SANDBOX_SETUP;
        snprintf(res->message, sizeof res->message, "sandbox setup failed: %s", st->setup_error);
        return;
    }
    if (st->killed) {
        res->reason = SANDBOX_KILLED;
        snprintf(res->message, sizeof res->message, "killed on request");
        return;
    }
    if (st->timed_out) {
        res->reason = SANDBOX_TIMEOUT;
        snprintf(res->message, sizeof res->message, "killed: wall-clock timeout of %g s", st->wall_timeout_s);
        return;
    }
    if (r->kind != RECORD_RESULT) {
        res->reason = SANDBOX_SETUP;
        snprintf(res->message, sizeof res->message, "sandbox init ended without a report");
        return;
    }
    int status = r->wait_status;
    if (WIFEXITED(status)) res->exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) res->term_signal = WTERMSIG(status);
    if (r->procs_killed) {
        res->reason = SANDBOX_PROCS;
        snprintf(res->message, sizeof res->message, "killed: process limit of %d reached and held", st->max_procs);
    } else if (r->denied_syscall) {
        res->reason = SANDBOX_SECCOMP;
        sandbox_syscall_name(r->denied_syscall - 1, res->syscall, sizeof res->syscall);
        snprintf(res->denied, sizeof res->denied, "%.127s", r->msg);
        if (res->denied[0])
            snprintf(res->message, sizeof res->message, "killed: %s (the sandbox's network policy)", res->denied);
        else
            snprintf(res->message, sizeof res->message, "killed: forbidden system call %s (seccomp)", res->syscall);
    } else if (sandbox_cgroup_has_memory(st->cgroup) && sandbox_cgroup_oom_killed(st->cgroup)) {
        res->reason = SANDBOX_MEMORY;
        snprintf(res->message, sizeof res->message, "killed: memory limit of %.0f MiB (cgroup OOM)", mib(st->mem_bytes));
    } else if (WIFEXITED(status) && res->exit_code == 0) {
        res->reason = SANDBOX_OK;
        snprintf(res->message, sizeof res->message, "exited with status 0");
    } else if (res->term_signal == SIGSYS) {
        res->reason = SANDBOX_SECCOMP;
        snprintf(res->message, sizeof res->message, "killed: forbidden system call (seccomp, SIGSYS)");
    } else if (res->term_signal == SIGXCPU ||
               (res->term_signal == SIGKILL && st->cpu_seconds && res->cpu_s >= (double)st->cpu_seconds)) {
        res->reason = SANDBOX_CPU;
        snprintf(res->message, sizeof res->message, "killed: CPU time limit of %llu s",
                 (unsigned long long)st->cpu_seconds);
    } else if (res->term_signal == SIGXFSZ) {
        res->reason = SANDBOX_FSIZE;
        snprintf(res->message, sizeof res->message, "killed: file size limit of %.1f MiB", mib(st->file_bytes));
    } else if (near_memory) {
        res->reason = SANDBOX_MEMORY;
        if (WIFEXITED(status))
            snprintf(res->message, sizeof res->message,
                     "exited with status %d at the memory limit (peak %.0f MiB of %.0f MiB)", res->exit_code,
                     rss_bytes / 1048576.0, mib(st->mem_bytes));
        else
            snprintf(res->message, sizeof res->message, "killed by signal %d (%s) at the memory limit (peak %.0f MiB of %.0f MiB)",
                     res->term_signal, sigdescr_np(res->term_signal), rss_bytes / 1048576.0, mib(st->mem_bytes));
    } else if (WIFEXITED(status)) {
        res->reason = SANDBOX_EXIT;
        snprintf(res->message, sizeof res->message, "exited with status %d", res->exit_code);
    } else {
        res->reason = SANDBOX_SIGNAL;
        snprintf(res->message, sizeof res->message, "killed by signal %d (%s)", res->term_signal,
                 sigdescr_np(res->term_signal));
    }
}

int sandbox_wait(struct sandbox_child *child, struct sandbox_result *res, struct whet_err *err) {
    struct sandbox_state *st = child->state;
    memset(res, 0, sizeof *res);
    while (!sandbox_pump(child)) {
        struct pollfd p = {.fd = child->result_fd, .events = POLLIN};
        int rc = poll(&p, 1, sandbox_timeout_ms(child));
        if (rc < 0 && errno != EINTR) return whet_errf(err, "sandbox: poll: %s", strerror(errno));
        sandbox_check_deadline(child);
    }
    /* Init has ended (or is ending): reap it. ECHILD when the caller ignores SIGCHLD. */
    while (waitpid(child->pid, NULL, 0) < 0 && errno == EINTR) {}
    reach_verdict(st, res);
    res->wall_s = st->ended_at - st->started;
    sbx_strlcpy(res->notes, st->notes, sizeof res->notes);
    close(child->result_fd);
    close(st->lifeline_fd);
    sandbox_cgroup_destroy(st->cgroup);
    free(st);
    child->state = NULL;
    child->result_fd = -1;
    return 0;
}

/* ---------- running several with buffers ---------- */

struct capture {
    int fd;
    char **buf;
    size_t *len, cap, max;
    int *truncated;
};

static void capture_read(struct capture *c) {
    char chunk[65536];
    ssize_t n = read(c->fd, chunk, sizeof chunk);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
        close(c->fd);
        c->fd = -1;
        return;
    }
    size_t take = (size_t)n;
    if (*c->len + take > c->max) {
        take = c->max - *c->len;
        *c->truncated = 1;
    }
    if (*c->len + take + 1 > c->cap) {
        c->cap = (*c->len + take + 1) * 2;
        *c->buf = xrealloc(*c->buf, c->cap);
    }
    memcpy(*c->buf + *c->len, chunk, take);
    *c->len += take;
    (*c->buf)[*c->len] = 0;
}

struct run_slot {
    struct sandbox_child child;
    int in_fd;
    size_t in_off;
    struct capture out, err;
    int done;
};

/* Writes to a pipe whose reader died must not kill the caller with SIGPIPE: block it in this thread
 * and swallow any that is left pending. */
static ssize_t write_nosigpipe(int fd, const void *buf, size_t len) {
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    ssize_t n = write(fd, buf, len);
    int saved = errno;
    if (n < 0 && errno == EPIPE) {
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = saved;
    return n;
}

static int slot_start(struct sandbox_job *job, struct run_slot *slot) {
    int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1};
    struct whet_err err;
    memset(&job->result, 0, sizeof job->result);
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
        whet_errf(&err, "sandbox: pipe: %s", strerror(errno));
        goto fail;
    }
    struct sandbox_spec spec = job->spec;
    spec.stdin_fd = in[0];
    spec.stdout_fd = out[1];
    spec.stderr_fd = errp[1];
    if (sandbox_spawn(&spec, &slot->child, &err) < 0) goto fail;
    close(in[0]);
    close(out[1]);
    close(errp[1]);
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    slot->in_fd = in[1];
    if (!job->input_len) {
        close(slot->in_fd);
        slot->in_fd = -1;
    }
    size_t max = job->output_max ? job->output_max : (1u << 20);
    slot->out = (struct capture){out[0], &job->out, &job->out_len, 0, max, &job->out_truncated};
    slot->err = (struct capture){errp[0], &job->errout, &job->errout_len, 0, max, &job->errout_truncated};
    job->spawned = 1;
    return 0;
fail:
    close_pair(in);
    close_pair(out);
    close_pair(errp);
    job->result.reason = SANDBOX_SETUP;
    job->result.exit_code = -1;
    sbx_strlcpy(job->result.message, err.msg, sizeof job->result.message);
    slot->done = 1;
    return -1;
}

int sandbox_run_many(struct sandbox_job *jobs, size_t n, struct whet_err *err) {
    struct run_slot *slots = xcalloc(n, sizeof *slots);
    struct pollfd *pfds = xcalloc(4 * n, sizeof *pfds);
    for (size_t i = 0; i < n; i++) {
        jobs[i].out = xstrdup("");
        jobs[i].errout = xstrdup("");
        jobs[i].out_len = jobs[i].errout_len = 0;
        slots[i].in_fd = slots[i].out.fd = slots[i].err.fd = -1;
        slot_start(&jobs[i], &slots[i]);
    }
    int rc = 0;
    for (;;) {
        size_t np = 0;
        int timeout = -1, live = 0;
        for (size_t i = 0; i < n; i++) {
            struct run_slot *s = &slots[i];
            if (s->done) continue;
            live = 1;
            if (s->in_fd >= 0) pfds[np++] = (struct pollfd){.fd = s->in_fd, .events = POLLOUT};
            if (s->out.fd >= 0) pfds[np++] = (struct pollfd){.fd = s->out.fd, .events = POLLIN};
            if (s->err.fd >= 0) pfds[np++] = (struct pollfd){.fd = s->err.fd, .events = POLLIN};
            if (!s->child.state->ended) pfds[np++] = (struct pollfd){.fd = s->child.result_fd, .events = POLLIN};
            int t = sandbox_timeout_ms(&s->child);
            if (t >= 0 && (timeout < 0 || t < timeout)) timeout = t;
        }
        if (!live) break;
        if (poll(pfds, np, timeout) < 0 && errno != EINTR) {
            rc = whet_errf(err, "sandbox: poll: %s", strerror(errno));
            break;
        }
        /* Service every slot without blocking: non-blocking stdin, reads of what poll reported. */
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            struct run_slot *s = &slots[i];
            if (s->done) continue;
            struct sandbox_job *job = &jobs[i];
            if (s->in_fd >= 0) {
                short ev = pfds[k++].revents;
                if (ev & (POLLOUT | POLLERR | POLLHUP)) {
                    ssize_t w = write_nosigpipe(s->in_fd, job->input + s->in_off, job->input_len - s->in_off);
                    if (w > 0) s->in_off += (size_t)w;
                    if ((w < 0 && errno != EAGAIN && errno != EINTR) || s->in_off == job->input_len) {
                        close(s->in_fd);
                        s->in_fd = -1;
                    }
                }
            }
            if (s->out.fd >= 0 && (pfds[k++].revents & (POLLIN | POLLHUP | POLLERR))) capture_read(&s->out);
            if (s->err.fd >= 0 && (pfds[k++].revents & (POLLIN | POLLHUP | POLLERR))) capture_read(&s->err);
            if (!s->child.state->ended && (pfds[k++].revents & (POLLIN | POLLHUP | POLLERR))) sandbox_pump(&s->child);
            sandbox_check_deadline(&s->child);
            /* Done when init reported its end and both streams reached EOF (every writer is dead). */
            if (s->child.state->ended && s->out.fd < 0 && s->err.fd < 0) {
                if (s->in_fd >= 0) close(s->in_fd);
                s->in_fd = -1;
                struct whet_err werr;
                if (sandbox_wait(&s->child, &job->result, &werr) < 0) {
                    job->result.reason = SANDBOX_SETUP;
                    sbx_strlcpy(job->result.message, werr.msg, sizeof job->result.message);
                }
                s->done = 1;
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        struct run_slot *s = &slots[i];
        if (s->done) continue;
        /* The runner itself failed: take down what still runs. */
        sandbox_kill(&s->child);
        if (s->in_fd >= 0) close(s->in_fd);
        if (s->out.fd >= 0) close(s->out.fd);
        if (s->err.fd >= 0) close(s->err.fd);
        struct whet_err werr;
        sandbox_wait(&s->child, &jobs[i].result, &werr);
    }
    free(pfds);
    free(slots);
    return rc;
}

int sandbox_run(struct sandbox_job *job, struct whet_err *err) { return sandbox_run_many(job, 1, err); }

void sandbox_job_release(struct sandbox_job *job) {
    free(job->out);
    free(job->errout);
    job->out = job->errout = NULL;
    job->out_len = job->errout_len = 0;
}

/* ---------- probe ---------- */

char *sandbox_probe(void) {
    struct sandbox_spec spec;
    sandbox_spec_init(&spec);
    const char *argv[] = {"/bin/true", NULL};
    spec.argv = argv;
    spec.wall_timeout_s = 10;
    spec.mem_bytes = 256ull << 20;
    spec.max_procs = 16;
    struct sandbox_child child;
    struct sandbox_result res;
    struct whet_err err;
    if (sandbox_spawn(&spec, &child, &err) < 0) return xasprintf("sandbox: unusable: %s\n", err.msg);
    if (sandbox_wait(&child, &res, &err) < 0) return xasprintf("sandbox: unusable: %s\n", err.msg);
    return xasprintf("sandbox: %s (%s)\nuid %d outside, %d inside\nfallbacks: %s\n",
                     res.reason == SANDBOX_OK ? "working" : "failed", res.message, (int)getuid(), SANDBOX_UID,
                     res.notes[0] ? res.notes : "none");
}
