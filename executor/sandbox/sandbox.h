/* sandbox.h - run a command confined: the sandbox for `whet train` and for tenant grader code.
 *
 * A sandboxed command runs in new user, PID, mount, network, IPC and UTS namespaces, sees a read-only
 * minimal view of the system (/usr, /lib*, /bin, a few /etc files, /dev/{null,zero,full,random,
 * urandom} and, for a GPU gang rank, a /dev/shm shared with its gang's ranks of the node only, a fresh /proc for its PID namespace, a small tmpfs /tmp) plus exactly the directories the
 * caller lists (writable or read-only), under a seccomp allow-list, rlimits and, where the host
 * delegates cgroup v2 controllers, cgroup limits. Nothing else of the host file system is visible.
 *
 * Processes (how the parts fit; sandbox.c has the details):
 *
 *   caller ── clone(new namespaces) ──> init (PID 1 of the sandbox: builds the mounts, forks, reaps,
 *      │                                     counts processes, reports the worker's end on a pipe)
 *      │                                  └─> worker (rlimits, no capabilities, seccomp, execve CMD)
 *      └── the result pipe, and a lifeline pipe whose closing (caller died) makes init exit.
 *
 * When init exits the kernel kills every process left in the PID namespace, so killing init (the
 * wall-clock timeout, sandbox_kill) ends the whole tree, daemons included.
 *
 * Inside, the command runs as uid/gid 1000 (SANDBOX_UID), which is the caller's uid/gid outside, or,
 * for a root caller that sets `host_uid`, that unprivileged host uid (recommended for the executor:
 * tenant code then owns nothing of the host, and RLIMIT_NPROC binds, which it never does for uid 0).
 * It starts with no capabilities and PR_SET_NO_NEW_PRIVS. When user namespaces are unavailable and
 * the caller is root, the sandbox falls back to the other namespaces with capabilities dropped and
 * says so in `sandbox_result.notes`. Wherever RLIMIT_NPROC does not bind (uid 0), init's process
 * counter still stops a fork bomb.
 *
 * Thread safety: sandbox_spawn may be called from several threads at once; the children it clones do
 * only async-signal-safe work (everything they need is prepared before the clone). */
#ifndef WHET_SANDBOX_H
#define WHET_SANDBOX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util.h"

#define SANDBOX_UID 1000
#define SANDBOX_HOSTNAME "whet-sandbox"

struct sandbox_spec {
    /* The command. argv[0] without a slash is looked up in env's PATH (or /usr/bin:/bin) inside the
     * sandbox. env NULL: a minimal environment (PATH, HOME=/tmp, LANG=C.UTF-8). */
    const char *const *argv;
    const char *const *env;
    /* Working directory inside the sandbox (default: the first writable dir, else /tmp). */
    const char *workdir;
    /* NULL-terminated lists of host directories (or files) made visible at the same path: writable
     * ones bind-mounted read-write (nosuid, nodev), read-only ones read-only. Either may be NULL. */
    const char *const *writable_dirs;
    const char *const *readonly_dirs;
    /* NULL-terminated names of host device nodes under /dev bound read-write into the sandbox's /dev
     * besides null, zero, full, random and urandom (a GPU job's "nvidiactl", "nvidia0", …). May be NULL. */
    const char *const *device_nodes;
    /* Limits; 0 means "no limit of this kind" except where noted. mem_bytes: cgroup memory.max where
     * delegated, else RLIMIT_AS (address space, per process). cpu_seconds: RLIMIT_CPU (per process;
     * SIGXCPU, then SIGKILL a second later) and cgroup cpu.max is not used for it. file_bytes:
     * RLIMIT_FSIZE. max_procs: RLIMIT_NPROC (threads count; counted in the sandbox's own user
     * namespace) and cgroup pids.max; init kills the sandbox when the tree stays at this many tasks
     * (a fork bomb). open_files: RLIMIT_NOFILE (default 256). tmp_bytes: size of the /tmp tmpfs
     * (default 64 MiB). wall_timeout_s: the wall clock, from spawn; init is killed when it passes. */
    uint64_t mem_bytes, cpu_seconds, file_bytes, tmp_bytes;
    int max_procs, open_files;
    double wall_timeout_s;
    /* 1: keep the host's network namespace (operators debugging only; never for tenant code). */
    int allow_network;
    /* 1: the command may build sandboxes of its own: the filter then lets it create namespaces and
     * mount inside them (`whet train` running python graders). A nested sandbox's command gets the
     * full filter on top, so tenant code is held the same. */
    int allow_nested;
    /* 1: socket() and socketpair() end the sandbox (SANDBOX_SECCOMP) instead of failing with EACCES,
     * and the result names the forbidden call, this one or any other (`syscall`): the filter sends
     * them to init (a seccomp listener), which records the call and kills the tree. For programs that
     * never open a socket (`whet train`): an attempt means the program is not what it should be, and
     * it stops there. Not with allow_nested: a nested sandbox could not have a listener of its own. */
    int kill_on_network;
    /* A gang trainer's network (needs kill_on_network; see sandbox_net.c for how and its limits):
     * NULL-terminated numeric IPv4/IPv6 addresses of the gang's nodes. Set, the command shares the
     * host's network namespace and may create TCP sockets (and netlink route sockets, for looking up
     * its interfaces), but init checks every connect() and bind(): a connect only to a peer on a port
     * of peer_port_lo..peer_port_hi, a bind only to a peer address (or the wildcard) on such a port or
     * port 0, which gets a free port of the range; init then makes the call itself on the command's
     * socket, with the address it checked. Any other socket, address or port ends the sandbox like a
     * forbidden call, `message` naming the address. */
    const char *const *peer_hosts;
    int peer_port_lo, peer_port_hi;
    /* A server's network (a model worker; needs kill_on_network, may go with peer_hosts): the same
     * mechanism as a gang's, checked against exact endpoints instead of a port range. connect_to:
     * NULL-terminated numeric "ADDR:PORT" ("[ADDR]:PORT" for IPv6) the command may connect to (the
     * object store); listen_host: the one numeric address it may bind, on any port (0: the kernel
     * picks one). Inbound connections to what it listens on are not filtered. */
    const char *const *connect_to;
    const char *listen_host;
    /* A GPU gang rank's NCCL (needs peer_hosts; see sandbox_net.c): 1 lets the command create AF_UNIX
     * sockets and bind or connect them to absolute path names, which init does, and bind one to the
     * abstract name NCCL's proxy always takes ("\0tmp/nccl-socket-RANK-HASH"). Other abstract names
     * are what the host's network namespace shares: a bind or connect to one ends the sandbox,
     * and a Landlock scope (Linux 6.12) keeps sends from reaching any abstract socket made outside the
     * sandbox; sandbox_spawn fails where the kernel lacks it. A path socket reaches only what the
     * sandbox's mounts show. */
    int allow_unix_sockets;
    /* A host directory bound writable (nosuid, nodev) at /dev/shm; NULL: the sandbox has no /dev/shm.
     * NCCL needs one, and its SHM transport shares files there between the ranks of one gang on one
     * node, which therefore get the same directory (trainer_sandbox_gang_shm); no other job sees it. */
    const char *shm_dir;
    /* fds handed to the command as 0, 1, 2; -1 means /dev/null. The caller keeps ownership. */
    int stdin_fd, stdout_fd, stderr_fd;
    /* Root callers only: run the command as this host uid/gid (e.g. 65534) instead of root's; -1
     * (the default) keeps the caller's. Supplementary groups are dropped. The writable dirs must be
     * writable by it (chown them); nothing else needs to be readable by it. */
    int host_uid, host_gid;
    /* Tests only: behave as if user namespaces were unavailable (the root fallback). */
    int no_userns;
};

/* Sets every field to its default: no command, no dirs, fds -1, limits 0 (none), open_files 256,
 * tmp_bytes 64 MiB, host_uid/host_gid -1. */
void sandbox_spec_init(struct sandbox_spec *spec);

enum sandbox_reason {
    SANDBOX_OK,        /* exited with status 0 */
    SANDBOX_EXIT,      /* exited with a non-zero status (exit_code) */
    SANDBOX_SIGNAL,    /* killed by a signal not explained below (term_signal) */
    SANDBOX_TIMEOUT,   /* the wall-clock timeout passed; the sandbox was killed */
    SANDBOX_CPU,       /* the CPU-time limit (SIGXCPU, or SIGKILL at the hard limit) */
    SANDBOX_MEMORY,    /* the memory limit: cgroup OOM kill, or a failure at the address-space limit */
    SANDBOX_PROCS,     /* the process limit was reached and held; init killed the tree */
    SANDBOX_SECCOMP,   /* a forbidden system call (SIGSYS from the seccomp filter) */
    SANDBOX_FSIZE,     /* the file-size limit (SIGXFSZ) */
    SANDBOX_KILLED,    /* sandbox_kill was called */
    SANDBOX_SETUP,     /* the sandbox could not be built or the command not started (message) */
};

const char *sandbox_reason_name(enum sandbox_reason reason);

struct sandbox_result {
    enum sandbox_reason reason;
    int exit_code;     /* when the command exited (else -1) */
    int term_signal;   /* when it was killed by a signal (else 0) */
    double wall_s;     /* from spawn to end */
    double cpu_s;      /* user + system time of the whole tree */
    int64_t max_rss_kb; /* largest resident set of any process of the tree */
    int peak_tasks;    /* most tasks (threads included) seen at once by init's sampling */
    char message[256]; /* one line for people: "killed: wall-clock timeout of 2 s", … */
    char syscall[32];  /* SANDBOX_SECCOMP with kill_on_network: the forbidden call ("socket"); else "" */
    char denied[128];  /* SANDBOX_SECCOMP of a gang trainer's socket call: what it tried ("connect to
                        * 127.0.0.1:5432: not a peer port"); else "" */
    char notes[256];   /* fallbacks taken ("cgroup v2 controllers not delegated: rlimits only") */
};

struct sandbox_state; /* private to sandbox.c */

struct sandbox_child {
    pid_t pid;                  /* the sandbox's init, in the caller's PID namespace */
    int result_fd;              /* becomes readable (reports, then EOF) as the sandbox ends */
    struct sandbox_state *state;
};

/* Starts the command. On success the caller must call sandbox_wait (which releases `child`). */
int sandbox_spawn(const struct sandbox_spec *spec, struct sandbox_child *child, struct whet_err *err);
/* Waits for the end, at most until the wall deadline (then kills the tree and reports
 * SANDBOX_TIMEOUT), fills `res` and releases everything in `child`. Returns 0, or -1 when waiting
 * itself failed (err). */
int sandbox_wait(struct sandbox_child *child, struct sandbox_result *res, struct whet_err *err);
/* Kills the sandbox now (cancel); sandbox_wait then reports SANDBOX_KILLED unless it ended first. */
void sandbox_kill(struct sandbox_child *child);
/* Sends `sig` (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 or SIGUSR2) to the command, through init:
 * SIGTERM asks `whet train` to checkpoint and stop. Returns 0, or -1 with errno (EINVAL for another
 * signal, ESRCH when the sandbox has ended). */
int sandbox_signal(struct sandbox_child *child, int sig);
/* Kills the tree if the wall deadline has passed; returns 1 when it did. For callers that poll
 * result_fd in their own loop. */
int sandbox_check_deadline(struct sandbox_child *child);
/* Milliseconds until the wall deadline (for poll), -1 when there is none. */
int sandbox_timeout_ms(const struct sandbox_child *child);
/* Reads what is ready on result_fd without blocking; returns 1 once the sandbox has ended (EOF),
 * 0 while it runs. sandbox_wait after a 1 returns at once. */
int sandbox_pump(struct sandbox_child *child);

/* One job of sandbox_run_many: a spec whose stdin/stdout/stderr the runner connects to buffers. */
struct sandbox_job {
    struct sandbox_spec spec;        /* stdin_fd/stdout_fd/stderr_fd are ignored */
    const char *input;               /* bytes written to the command's stdin, then EOF (may be NULL) */
    size_t input_len;
    size_t output_max;               /* cap on each captured stream (default 1 MiB); the rest dropped */
    /* Filled by the runner: */
    char *out, *errout;              /* NUL-terminated captures; freed by sandbox_job_release */
    size_t out_len, errout_len;
    int out_truncated, errout_truncated;
    struct sandbox_result result;
    int spawned;                     /* 0: spawn failed, result.reason == SANDBOX_SETUP */
};

/* Runs the jobs concurrently (all at once; callers bound n), feeding stdin and capturing output in
 * one poll loop. Returns 0 when every job was run (each has a result, which may be SETUP), -1 on a
 * failure of the runner itself. */
int sandbox_run_many(struct sandbox_job *jobs, size_t n, struct whet_err *err);
/* One job: sandbox_run_many of one. */
int sandbox_run(struct sandbox_job *job, struct whet_err *err);
void sandbox_job_release(struct sandbox_job *job);

/* Describes the host: which namespaces work and whether cgroup v2 controllers are delegated (one
 * line per fact, for `whet sandbox probe` and logs). Returns a string the caller frees. */
char *sandbox_probe(void);

#endif
