/* sandbox_ns.c - identity inside the sandbox: the user-namespace maps and dropping capabilities.
 *
 * The cloned init writes its own maps: one line mapping its outside uid (gid) to SANDBOX_UID, which
 * an unprivileged process may do for itself once setgroups is denied; root gets the same line, so
 * root and a normal user get the same sandbox. A root caller that names a host uid writes two lines
 * for the child instead, "0 0 1" (init builds the mounts as root of the namespace, so it can reach
 * the caller's 0700 directories) and "1000 HOST_UID 1" (what the command runs as). The worker then gives up every capability (bounding
 * set, ambient set, effective/permitted/inheritable, and the securebits that would hand them back to
 * uid 0 on exec), so the command cannot undo its mounts even in the root fallback without a user
 * namespace. Child-side code only: system calls, no allocation. */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox_internal.h"

static int write_proc_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t len = strlen(text);
    ssize_t n = write(fd, text, len);
    int saved = errno;
    close(fd);
    errno = saved;
    return n == (ssize_t)len ? 0 : -1;
}

int sandbox_userns_child(const struct sandbox_plan *plan, const char **what) {
    if (!plan->use_userns || plan->parent_writes_maps) return 0;
    *what = "write /proc/self/setgroups";
    if (write_proc_file("/proc/self/setgroups", "deny") < 0 && errno != ENOENT) return -1;
    *what = "write /proc/self/uid_map";
    if (write_proc_file("/proc/self/uid_map", plan->uid_map) < 0) return -1;
    *what = "write /proc/self/gid_map";
    return write_proc_file("/proc/self/gid_map", plan->gid_map);
}

int sandbox_userns_write_maps(const struct sandbox_plan *plan, pid_t pid, struct whet_err *err) {
    static const char *const files[] = {"uid_map", "gid_map"};
    const char *maps[] = {plan->uid_map, plan->gid_map};
    for (int i = 0; i < 2; i++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, files[i]);
        if (write_proc_file(path, maps[i]) < 0) return whet_errf(err, "sandbox: writing %s: %s", path, strerror(errno));
    }
    return 0;
}

/* Order matters: the securebits and the bounding set need CAP_SETPCAP, the id switch CAP_SETUID and
 * CAP_SETGID (kept across it by SECBIT_NO_SETUID_FIXUP), and only then the last capabilities go. */
int sandbox_identity_child(const struct sandbox_plan *plan, const char **what) {
    *what = "set securebits";
    if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED, 0, 0, 0) < 0)
        return -1;
    *what = "drop bounding set";
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL) return -1;
    if (plan->switch_ids) {
        *what = "setgroups";
        if (setgroups(0, NULL) < 0) return -1;
        *what = "setresgid";
        if (setresgid(plan->run_gid, plan->run_gid, plan->run_gid) < 0) return -1;
        *what = "setresuid";
        if (setresuid(plan->run_uid, plan->run_uid, plan->run_uid) < 0) return -1;
    }
    *what = "clear ambient capabilities";
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL) return -1;
    *what = "capset";
    struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    if (syscall(SYS_capset, &header, data) < 0) return -1;
    *what = "set no_new_privs";
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}
