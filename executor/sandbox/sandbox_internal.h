/* sandbox_internal.h - what the parts of the sandbox share: the plan prepared before the clone.
 *
 * Everything the cloned children need (mount list, uid maps, the compiled seccomp program, rlimits,
 * the exec candidates) is computed in the caller's process into a `struct sandbox_plan`, because
 * after clone() in a multithreaded caller a child may only make async-signal-safe calls: no malloc,
 * no stdio, no locks. The child-side functions (`*_child`) keep to system calls and string copies. */
#ifndef WHET_SANDBOX_INTERNAL_H
#define WHET_SANDBOX_INTERNAL_H

#include <linux/filter.h>
#include <stdint.h>
#include <sys/resource.h>

#include "sandbox.h"

/* Where the host's root and the new root sit during the build (sandbox_mounts.c). */
#define SANDBOX_BASE "/tmp"
#define SANDBOX_OLDROOT "/oldroot"
#define SANDBOX_NEWROOT "/newroot"

enum mount_kind {
    MOUNT_DIR,      /* mkdir dst (a mount point or parent of one) */
    MOUNT_FILE,     /* create an empty file dst (a mount point for a bound file) */
    MOUNT_BIND_RO,  /* bind src on dst, read-only (recursive), nosuid, nodev */
    MOUNT_BIND_RW,  /* bind src on dst, writable, nosuid, nodev */
    MOUNT_BIND_DEV, /* bind a host device node src on dst, writable, as it is */
    MOUNT_TMPFS,    /* tmpfs on dst with `data` options */
    MOUNT_PROC,     /* a fresh proc for the new PID namespace */
    MOUNT_SYMLINK,  /* symlink src -> dst */
};

struct mount_op {
    enum mount_kind kind;
    char *src;      /* host path under SANDBOX_OLDROOT, or symlink target */
    char *dst;      /* path under SANDBOX_NEWROOT */
    char *data;     /* tmpfs options */
};

struct rlimit_op {
    int resource;
    struct rlimit limit;
};

/* A gang trainer's network policy (sandbox_spec.peer_hosts), parsed for init (sandbox_net.c). */
#define SANDBOX_MAX_PEERS 64
struct sandbox_peer {
    int family;                 /* AF_INET or AF_INET6 */
    unsigned char addr[16];
};
struct sandbox_endpoint {
    struct sandbox_peer host;
    int port;                   /* 0 in `listen`: any port */
};
struct sandbox_net {
    int active;                 /* 0: no policy (the sandbox has its own network namespace) */
    int n_peers;
    struct sandbox_peer peers[SANDBOX_MAX_PEERS];
    int port_lo, port_hi;
    int n_connects;             /* a server's (connect_to, listen_host) */
    struct sandbox_endpoint connects[SANDBOX_MAX_PEERS];
    struct sandbox_endpoint listen; /* host.family 0: none */
    int unix_sockets;           /* allow_unix_sockets: AF_UNIX sockets, bound to absolute paths by init */
};

struct sandbox_plan {
    /* identity: maps written by the child itself (one line, unprivileged) or, for a root caller
     * with a host uid, by the caller; the worker switches to run_uid/run_gid when switch_ids */
    int use_userns, parent_writes_maps, switch_ids;
    char uid_map[64], gid_map[64];
    uid_t run_uid;
    gid_t run_gid;
    int nproc_binds;          /* RLIMIT_NPROC holds (the command's host uid is not 0) */
    /* namespaces for clone */
    int clone_flags;
    /* mounts, in order */
    struct mount_op *mounts;
    size_t n_mounts, cap_mounts;
    /* worker */
    char **argv, **env;
    char **exec_paths;        /* candidate paths for argv[0], tried in order */
    size_t n_exec_paths;
    char *workdir;
    struct rlimit_op rlimits[8];
    size_t n_rlimits;
    struct sock_fprog seccomp; /* compiled allow-list; filter owned by the plan */
    int seccomp_notify;       /* forbidden calls go to init through a listener (kill_on_network) */
    struct sandbox_net net;   /* a gang trainer's peers, checked by init */
    int max_procs;
};

/* Plan building (caller side, may allocate). */
int sandbox_plan_build(struct sandbox_plan *plan, const struct sandbox_spec *spec, struct whet_err *err);
void sandbox_plan_free(struct sandbox_plan *plan);
int sandbox_mounts_plan(struct sandbox_plan *plan, const struct sandbox_spec *spec, struct whet_err *err);
int sandbox_seccomp_compile(struct sock_fprog *prog, const struct sandbox_spec *spec, struct whet_err *err);
void sandbox_rlimits_plan(struct sandbox_plan *plan, const struct sandbox_spec *spec, int cgroup_memory);

/* Child side (async-signal-safe). Each returns 0 or -1 with `what` (a static string naming the step)
 * and errno set. */
int sandbox_userns_child(const struct sandbox_plan *plan, const char **what);
int sandbox_mounts_child(const struct sandbox_plan *plan, int *proc_missing, const char **what);
int sandbox_identity_child(const struct sandbox_plan *plan, const char **what);
/* Caller side: writes the maps of a child that waits for them (plan->parent_writes_maps). */
int sandbox_userns_write_maps(const struct sandbox_plan *plan, pid_t pid, struct whet_err *err);
int sandbox_rlimits_child(const struct sandbox_plan *plan, const char **what);
int sandbox_seccomp_child(const struct sandbox_plan *plan, const char **what);
/* For a plan with seccomp_notify: loads the filter with a new listener; returns its fd (close-on-exec). */
int sandbox_seccomp_child_listener(const struct sandbox_plan *plan, const char **what);
/* A gang trainer's or a server's network (sandbox_net.c). Caller side: parses spec->peer_hosts,
 * connect_to and listen_host into plan->net (-1 with err on a bad address or range). Init side: answers a notified socket call of the command when
 * the policy allows it (1); 0 with `why` ("connect to 10.0.0.9:5432: not a peer port") when not. */
int sandbox_net_plan(struct sandbox_plan *plan, const struct sandbox_spec *spec, struct whet_err *err);
/* Worker side, before seccomp: with net.unix_sockets, the Landlock scope that keeps the command from
 * connecting or sending to abstract unix sockets made outside its sandbox (0, or -1 with errno). */
int sandbox_net_child_scope(const struct sandbox_plan *plan, const char **what);
struct seccomp_notif;
int sandbox_net_child_answer(const struct sandbox_plan *plan, int listener, const struct seccomp_notif *req, char *why,
                             size_t why_len);

/* Caller side: the name of system call `nr` on this architecture ("#NR" when unknown). */
void sandbox_syscall_name(int nr, char *out, size_t len);

/* cgroup v2 (sandbox_cgroup.c): a per-sandbox child group under a delegated parent, when there is
 * one. create returns NULL (and explains why in `why`) when the host offers no usable controllers,
 * and may leave a note in `why` on success too (a limit only rlimits hold). */
struct sandbox_cgroup;
struct sandbox_cgroup *sandbox_cgroup_create(const struct sandbox_spec *spec, char *why, size_t why_len);
int sandbox_cgroup_add(struct sandbox_cgroup *cg, pid_t pid, struct whet_err *err);
int sandbox_cgroup_oom_killed(const struct sandbox_cgroup *cg);
int sandbox_cgroup_has_memory(const struct sandbox_cgroup *cg);
int sandbox_cgroup_has_pids(const struct sandbox_cgroup *cg);
void sandbox_cgroup_destroy(struct sandbox_cgroup *cg);

/* Small async-signal-safe string helpers. */
size_t sbx_strlcpy(char *dst, const char *src, size_t size);
size_t sbx_strlcat(char *dst, const char *src, size_t size);

#endif
