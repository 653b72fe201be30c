/* sandbox_mounts.c - the sandbox's file system view: planned by the caller, built by the child.
 *
 * The child (already in its own user and mount namespaces) does, in order:
 *   1. make every mount private, so nothing propagates back to the host;
 *   2. mount a tmpfs on SANDBOX_BASE and pivot_root into it, the host's root landing on /oldroot;
 *   3. mount an empty tmpfs on /newroot and fill it from the plan: read-only binds of the system
 *      pieces and of the caller's read-only dirs, writable binds of its writable dirs, a fresh proc,
 *      a tmpfs /tmp and a tmpfs /dev holding bound /dev/null, zero, full, random, urandom (and the
 *      caller's device nodes, and a GPU gang's shared directory as /dev/shm);
 *   4. detach /oldroot, pivot_root into /newroot, detach the old root, remount / read-only.
 * Paths not in the plan do not exist inside: another tenant's directory is not hidden, it is absent.
 * Bind mounts of the caller's paths keep their canonical host path inside (realpath). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <stdio.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox_internal.h"

/* ---------- planning (caller side) ---------- */

static void plan_push(struct sandbox_plan *plan, enum mount_kind kind, const char *src, const char *dst,
                      const char *data) {
    if (plan->n_mounts == plan->cap_mounts) {
        plan->cap_mounts = plan->cap_mounts ? plan->cap_mounts * 2 : 32;
        plan->mounts = xrealloc(plan->mounts, plan->cap_mounts * sizeof(*plan->mounts));
    }
    struct mount_op *op = &plan->mounts[plan->n_mounts++];
    op->kind = kind;
    op->src = src ? xstrdup(src) : NULL;
    op->dst = xasprintf("%s%s", SANDBOX_NEWROOT, dst);
    op->data = data ? xstrdup(data) : NULL;
}

/* mkdir ops for every proper prefix of `path` ("/a/b/c" -> "/a", "/a/b"). Repeats are harmless: the
 * child ignores EEXIST. */
static void plan_parents(struct sandbox_plan *plan, const char *path) {
    char buf[PATH_MAX];
    sbx_strlcpy(buf, path, sizeof buf);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        plan_push(plan, MOUNT_DIR, NULL, buf, NULL);
        *p = '/';
    }
}

/* A host path shown at the same place: directory or file, read-only or writable. A symlink at the top
 * (Debian's /bin -> usr/bin) is recreated as a symlink. Missing optional paths are skipped. */
static int plan_host_path(struct sandbox_plan *plan, const char *path, int writable, int optional,
                          struct whet_err *err) {
    struct stat st;
    if (lstat(path, &st) < 0) {
        if (optional) return 0;
        return whet_errf(err, "sandbox: %s: %s", path, strerror(errno));
    }
    plan_parents(plan, path);
    if (S_ISLNK(st.st_mode) && optional) {
        char target[PATH_MAX];
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n < 0) return whet_errf(err, "sandbox: readlink %s: %s", path, strerror(errno));
        target[n] = 0;
        plan_push(plan, MOUNT_SYMLINK, target, path, NULL);
        return 0;
    }
    if (stat(path, &st) < 0) {
        if (optional) return 0;
        return whet_errf(err, "sandbox: %s: %s", path, strerror(errno));
    }
    char *src = xasprintf("%s%s", SANDBOX_OLDROOT, path);
    plan_push(plan, S_ISDIR(st.st_mode) ? MOUNT_DIR : MOUNT_FILE, NULL, path, NULL);
    plan_push(plan, writable ? MOUNT_BIND_RW : MOUNT_BIND_RO, src, path, NULL);
    free(src);
    return 0;
}

/* The system pieces every command needs: programs, libraries, the dynamic loader's configuration,
 * Debian's alternatives (libopenblas.so.0 is a link through /etc/alternatives), users and groups,
 * the time zone, python's configuration, and the CPU topology OpenMP and OpenBLAS read. */
static const char *const system_paths[] = {
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
    "/etc/localtime", "/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/os-release",
    "/etc/python3", "/etc/python3.11", "/etc/mime.types", "/etc/ssl/certs",
    "/sys/devices/system/cpu", "/sys/devices/system/node",
    NULL,
};

struct user_path {
    char *path;
    int writable;
};

static int user_path_cmp(const void *a, const void *b) {
    size_t la = strlen(((const struct user_path *)a)->path), lb = strlen(((const struct user_path *)b)->path);
    return la < lb ? -1 : la > lb;
}

/* The host's /dev/NAME bound onto an empty file in the sandbox's /dev. */
static void plan_device_node(struct sandbox_plan *plan, const char *name) {
    char host[64], src[80];
    snprintf(host, sizeof host, "/dev/%s", name);
    snprintf(src, sizeof src, "%s%s", SANDBOX_OLDROOT, host);
    plan_push(plan, MOUNT_FILE, NULL, host, NULL);
    plan_push(plan, MOUNT_BIND_DEV, src, host, NULL);
}

/* The host directory `dir` bound writable at /dev/shm (a GPU gang's, shared by its ranks on the node). */
static int plan_shm(struct sandbox_plan *plan, const char *dir, struct whet_err *err) {
    char real[PATH_MAX];
    struct stat st;
    if (!realpath(dir, real) || stat(real, &st) < 0)
        return whet_errf(err, "sandbox: /dev/shm directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return whet_errf(err, "sandbox: /dev/shm directory %s is not a directory", dir);
    char *src = xasprintf("%s%s", SANDBOX_OLDROOT, real);
    plan_push(plan, MOUNT_DIR, NULL, "/dev/shm", NULL);
    plan_push(plan, MOUNT_BIND_RW, src, "/dev/shm", NULL);
    free(src);
    return 0;
}

int sandbox_mounts_plan(struct sandbox_plan *plan, const struct sandbox_spec *spec, struct whet_err *err) {
    for (size_t i = 0; system_paths[i]; i++)
        if (plan_host_path(plan, system_paths[i], 0, 1, err) < 0) return -1;

    plan_push(plan, MOUNT_DIR, NULL, "/proc", NULL);
    plan_push(plan, MOUNT_PROC, NULL, "/proc", NULL);
    char tmp_opts[64];
    /* tmpfs reads size=0 as "no limit": a zeroed spec still gets the default */
    unsigned long long tmp_bytes = spec->tmp_bytes ? spec->tmp_bytes : 64ull << 20;
    snprintf(tmp_opts, sizeof tmp_opts, "size=%llu,mode=1777", tmp_bytes);
    plan_push(plan, MOUNT_DIR, NULL, "/tmp", NULL);
    plan_push(plan, MOUNT_TMPFS, NULL, "/tmp", tmp_opts);
    plan_push(plan, MOUNT_DIR, NULL, "/dev", NULL);
    plan_push(plan, MOUNT_TMPFS, NULL, "/dev", "size=64k,mode=0755");
    static const char *const devices[] = {"null", "zero", "full", "random", "urandom"};
    for (size_t i = 0; i < WHET_ARRAY_LEN(devices); i++) plan_device_node(plan, devices[i]);
    for (size_t i = 0; spec->device_nodes && spec->device_nodes[i]; i++) {
        if (strchr(spec->device_nodes[i], '/') || !spec->device_nodes[i][0] || strlen(spec->device_nodes[i]) > 40)
            return whet_errf(err, "device node \"%s\": expected a name under /dev", spec->device_nodes[i]);
        plan_device_node(plan, spec->device_nodes[i]);
    }
    if (spec->shm_dir && plan_shm(plan, spec->shm_dir, err) < 0) return -1;
    plan_push(plan, MOUNT_SYMLINK, "/proc/self/fd", "/dev/fd", NULL);
    plan_push(plan, MOUNT_SYMLINK, "/proc/self/fd/0", "/dev/stdin", NULL);
    plan_push(plan, MOUNT_SYMLINK, "/proc/self/fd/1", "/dev/stdout", NULL);
    plan_push(plan, MOUNT_SYMLINK, "/proc/self/fd/2", "/dev/stderr", NULL);

    /* The caller's paths (after /tmp, which may hold them), canonical, shortest first so a writable dir inside a read-only one is
     * mounted over it rather than under it. */
    size_t n = 0, cap = 0;
    struct user_path *paths = NULL;
    for (int writable = 0; writable <= 1; writable++) {
        const char *const *list = writable ? spec->writable_dirs : spec->readonly_dirs;
        for (size_t i = 0; list && list[i]; i++) {
            char real[PATH_MAX];
            if (!realpath(list[i], real)) {
                whet_errf(err, "sandbox: %s directory %s: %s", writable ? "writable" : "read-only", list[i],
                          strerror(errno));
                for (size_t j = 0; j < n; j++) free(paths[j].path);
                free(paths);
                return -1;
            }
            if (n == cap) {
                cap = cap ? cap * 2 : 8;
                paths = xrealloc(paths, cap * sizeof(*paths));
            }
            paths[n].path = xstrdup(real);
            paths[n].writable = writable;
            n++;
        }
    }
    if (n) qsort(paths, n, sizeof(*paths), user_path_cmp);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!strcmp(paths[i].path, "/")) rc = whet_errf(err, "sandbox: refusing to expose / itself");
        else rc = plan_host_path(plan, paths[i].path, paths[i].writable, 0, err);
    }
    for (size_t i = 0; i < n; i++) free(paths[i].path);
    free(paths);
    if (rc < 0) return -1;

    return 0;
}

/* ---------- building (child side, async-signal-safe) ---------- */

/* Adds `set` attributes to the mount at `path` and everything under it. mount_setattr (Linux 5.12)
 * does the whole tree in one call; older kernels get a remount of the top mount only, keeping the
 * flags the kernel locks from the parent namespace (changing them would fail with EPERM). */
static int restrict_mount(const char *path, uint64_t set, unsigned long ms_flags) {
    struct mount_attr attr = {.attr_set = set};
    if (syscall(SYS_mount_setattr, AT_FDCWD, path, AT_RECURSIVE, &attr, sizeof attr) == 0) return 0;
    if (errno != ENOSYS) return -1;
    struct statfs sf;
    if (statfs(path, &sf) < 0) return -1;
    unsigned long locked = 0;
    if (sf.f_flags & ST_NOSUID) locked |= MS_NOSUID;
    if (sf.f_flags & ST_NODEV) locked |= MS_NODEV;
    if (sf.f_flags & ST_NOEXEC) locked |= MS_NOEXEC;
    if (sf.f_flags & ST_NOATIME) locked |= MS_NOATIME;
    if (sf.f_flags & ST_NODIRATIME) locked |= MS_NODIRATIME;
    if (sf.f_flags & ST_RELATIME) locked |= MS_RELATIME;
    return mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | ms_flags | locked, NULL);
}

static int mount_op_child(const struct mount_op *op, int *proc_missing, const char **what) {
    switch (op->kind) {
    case MOUNT_DIR:
        *what = "mkdir";
        if (mkdir(op->dst, 0755) < 0 && errno != EEXIST) return -1;
        return 0;
    case MOUNT_FILE: {
        *what = "create mount point";
        int fd = open(op->dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST && errno != EROFS) return -1;
        if (fd >= 0) close(fd);
        return 0;
    }
    case MOUNT_BIND_RO:
    case MOUNT_BIND_RW:
    case MOUNT_BIND_DEV:
        *what = "bind mount";
        if (mount(op->src, op->dst, NULL, MS_BIND | MS_REC, NULL) < 0) return -1;
        *what = "restrict bind mount";
        if (op->kind == MOUNT_BIND_RO)
            return restrict_mount(op->dst, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                                  MS_RDONLY | MS_NOSUID | MS_NODEV);
        /* Device nodes are bound from the host's /dev and must keep working. */
        if (op->kind == MOUNT_BIND_DEV) return 0;
        return restrict_mount(op->dst, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, MS_NOSUID | MS_NODEV);
    case MOUNT_TMPFS:
        *what = "mount tmpfs";
        return mount("tmpfs", op->dst, "tmpfs", MS_NOSUID | MS_NODEV, op->data);
    case MOUNT_PROC:
        /* A host (a container) may forbid a new proc; the command then runs without /proc. */
        *what = "mount proc";
        if (mount("proc", op->dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) *proc_missing = 1;
        return 0;
    case MOUNT_SYMLINK:
        *what = "symlink";
        if (symlink(op->src, op->dst) < 0 && errno != EEXIST) return -1;
        return 0;
    }
    return 0;
}

int sandbox_mounts_child(const struct sandbox_plan *plan, int *proc_missing, const char **what) {
    *what = "make mounts private";
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) return -1;
    *what = "mount base tmpfs";
    if (mount("tmpfs", SANDBOX_BASE, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755") < 0) return -1;
    *what = "mkdir base";
    if (mkdir(SANDBOX_BASE SANDBOX_OLDROOT, 0755) < 0 || mkdir(SANDBOX_BASE SANDBOX_NEWROOT, 0755) < 0) return -1;
    *what = "mount new root";
    if (mount("tmpfs", SANDBOX_BASE SANDBOX_NEWROOT, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755") < 0)
        return -1;
    *what = "pivot_root to base";
    if (syscall(SYS_pivot_root, SANDBOX_BASE, SANDBOX_BASE SANDBOX_OLDROOT) < 0) return -1;
    if (chdir("/") < 0) return -1;

    for (size_t i = 0; i < plan->n_mounts; i++)
        if (mount_op_child(&plan->mounts[i], proc_missing, what) < 0) return -1;

    *what = "detach host root";
    if (umount2(SANDBOX_OLDROOT, MNT_DETACH) < 0) return -1;
    *what = "pivot_root to new root";
    if (chdir(SANDBOX_NEWROOT) < 0) return -1;
    if (syscall(SYS_pivot_root, ".", ".") < 0) return -1;
    *what = "detach base";
    if (umount2(".", MNT_DETACH) < 0) return -1;
    if (chdir("/") < 0) return -1;
    *what = "remount / read-only";
    return mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL);
}
