/* sandbox_cgroup.c - cgroup v2 limits for a sandbox, where the host delegates the controllers.
 *
 * Each sandbox gets its own group, `<parent>/whet-sandbox-<pid>-<n>`, with memory.max,
 * memory.swap.max = 0 and pids.max, each where the controller is delegated; the caller moves the
 * sandbox's init into it before init starts the command. The parent is $WHET_SANDBOX_CGROUP when it
 * names a directory (a subtree delegated to the executor, e.g. by systemd's Delegate=yes), else the
 * caller's own cgroup v2 group; WHET_SANDBOX_CGROUP=self lets the sandbox move the caller into a
 * leaf `whet-supervisor` of its own group so the controllers can be enabled for siblings (cgroup v2
 * forbids enabling them in a group that holds processes). What no controller holds falls back to
 * rlimits, and the note says so (this build machine mounts cgroup v2 with only hugetlb, beside v1
 * hierarchies). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandbox_internal.h"

struct sandbox_cgroup {
    char *path;
    int memory, pids; /* which limits the group holds */
};

static int write_text(const char *dir, const char *file, const char *text) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    ok = (fclose(f) == 0) && ok;
    return ok ? 0 : -1;
}

/* Reads a small pseudo-file whole (their st_size is 0, so whet_read_file cannot). NULL if absent. */
static char *read_pseudo(const char *path) {
    FILE *f = fopen(path, "re");
    if (!f) return NULL;
    size_t len = 0, cap = 4096;
    char *text = xmalloc(cap);
    size_t n;
    while ((n = fread(text + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (len + 1 == cap) text = xrealloc(text, cap *= 2);
    }
    fclose(f);
    text[len] = 0;
    return text;
}

static char *read_text(const char *dir, const char *file) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return read_pseudo(path);
}

static int has_word(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ' || p[n] == '\n')) return 1;
    return 0;
}

/* The caller's cgroup v2 directory: the cgroup2 mount point joined with the "0::" line of
 * /proc/self/cgroup. */
static char *own_cgroup_dir(void) {
    char *mountinfo = read_pseudo("/proc/self/mountinfo"), *cgroup = read_pseudo("/proc/self/cgroup"), *dir = NULL;
    if (!mountinfo || !cgroup) {
        free(mountinfo);
        free(cgroup);
        return NULL;
    }
    char mount_point[4096] = "";
    for (char *line = strtok(mountinfo, "\n"); line; line = strtok(NULL, "\n")) {
        /* "36 25 0:31 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw" */
        char *sep = strstr(line, " - cgroup2 ");
        if (!sep) continue;
        char root[4096], mp[4096];
        if (sscanf(line, "%*s %*s %*s %4095s %4095s", root, mp) == 2 && !strcmp(root, "/")) {
            sbx_strlcpy(mount_point, mp, sizeof mount_point);
            break;
        }
    }
    char *v2 = strstr(cgroup, "0::");
    if (mount_point[0] && v2 && (v2 == cgroup || v2[-1] == '\n')) {
        char *end = strchr(v2, '\n');
        if (end) *end = 0;
        dir = xasprintf("%s%s", mount_point, strcmp(v2 + 3, "/") ? v2 + 3 : "");
    }
    free(mountinfo);
    free(cgroup);
    return dir;
}

/* With WHET_SANDBOX_CGROUP=self the process moves itself into a leaf on the first call, after which
 * its own cgroup is no longer the parent: that parent is remembered. */
static pthread_mutex_t parent_lock = PTHREAD_MUTEX_INITIALIZER;
static char *adopted_dir;

/* Enables `name` for the parent's children unless it is on already; with adoption, a parent that
 * refuses because it holds processes (cgroup v2's no-internal-process rule: this one) gets them
 * moved into a leaf, `whet-supervisor`, first. Returns 1 when the controller is usable. */
static int enable_controller(const char *parent_dir, int adopt, const char *name) {
    char *subtree = read_text(parent_dir, "cgroup.subtree_control");
    int on = subtree && has_word(subtree, name);
    free(subtree);
    if (on) return 1;
    char *controllers = read_text(parent_dir, "cgroup.controllers");
    int offered = controllers && has_word(controllers, name);
    free(controllers);
    if (!offered) return 0;
    char plus[32];
    snprintf(plus, sizeof plus, "+%s", name);
    if (write_text(parent_dir, "cgroup.subtree_control", plus) == 0) return 1;
    if (errno != EBUSY || !adopt) return 0;
    char *leaf = xasprintf("%s/whet-supervisor", parent_dir), pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    int moved = (mkdir(leaf, 0755) == 0 || errno == EEXIST) && write_text(leaf, "cgroup.procs", pid) == 0;
    free(leaf);
    return moved && write_text(parent_dir, "cgroup.subtree_control", plus) == 0;
}

struct sandbox_cgroup *sandbox_cgroup_create(const struct sandbox_spec *spec, char *why, size_t why_len) {
    static atomic_uint counter;
    const char *env = getenv("WHET_SANDBOX_CGROUP");
    int adopt = env && !strcmp(env, "self");
    /* The lock keeps two threads from adopting at once and from racing on subtree_control. */
    pthread_mutex_lock(&parent_lock);
    char *parent = NULL;
    if (adopt && adopted_dir) parent = xstrdup(adopted_dir);
    else if (env && *env && !adopt) parent = xstrdup(env);
    else parent = own_cgroup_dir();
    if (adopt && parent && !adopted_dir) adopted_dir = xstrdup(parent);
    if (!parent) {
        pthread_mutex_unlock(&parent_lock);
        snprintf(why, why_len, "no cgroup v2 hierarchy: rlimits only");
        return NULL;
    }
    int memory = spec->mem_bytes && enable_controller(parent, adopt, "memory");
    int pids = spec->max_procs > 0 && enable_controller(parent, adopt, "pids");
    pthread_mutex_unlock(&parent_lock);
    if (!memory && !pids) {
        char offered[64] = "none";
        char *controllers = read_text(parent, "cgroup.controllers");
        if (controllers) {
            sbx_strlcpy(offered, controllers, sizeof offered);
            offered[strcspn(offered, "\n")] = 0;
            if (!offered[0]) sbx_strlcpy(offered, "none", sizeof offered);
        }
        free(controllers);
        snprintf(why, why_len, "cgroup v2 controllers not delegated at %s (offers: %s): rlimits only", parent,
                 offered);
        free(parent);
        return NULL;
    }
    struct sandbox_cgroup *cg = xcalloc(1, sizeof *cg);
    cg->path = xasprintf("%s/whet-sandbox-%d-%u", parent, (int)getpid(), atomic_fetch_add(&counter, 1));
    free(parent);
    char value[32];
    int ok = mkdir(cg->path, 0755) == 0;
    if (ok && memory) {
        snprintf(value, sizeof value, "%llu", (unsigned long long)spec->mem_bytes);
        ok = write_text(cg->path, "memory.max", value) == 0;
        write_text(cg->path, "memory.swap.max", "0"); /* absent without swap accounting: fine */
        cg->memory = ok;
    }
    if (ok && pids) {
        snprintf(value, sizeof value, "%d", spec->max_procs);
        ok = write_text(cg->path, "pids.max", value) == 0;
        cg->pids = ok;
    }
    if (!ok) {
        snprintf(why, why_len, "cgroup %s: %s: rlimits only", cg->path, strerror(errno));
        sandbox_cgroup_destroy(cg);
        return NULL;
    }
    if (spec->mem_bytes && !memory) snprintf(why, why_len, "cgroup v2 holds pids only: memory by RLIMIT_AS");
    if (spec->max_procs > 0 && !pids) snprintf(why, why_len, "cgroup v2 holds memory only: processes by rlimits");
    return cg;
}

int sandbox_cgroup_has_memory(const struct sandbox_cgroup *cg) { return cg && cg->memory; }
int sandbox_cgroup_has_pids(const struct sandbox_cgroup *cg) { return cg && cg->pids; }

int sandbox_cgroup_add(struct sandbox_cgroup *cg, pid_t pid, struct whet_err *err) {
    char value[32];
    snprintf(value, sizeof value, "%d", (int)pid);
    if (write_text(cg->path, "cgroup.procs", value) < 0)
        return whet_errf(err, "sandbox: %s/cgroup.procs: %s", cg->path, strerror(errno));
    return 0;
}

int sandbox_cgroup_oom_killed(const struct sandbox_cgroup *cg) {
    char *events = read_text(cg->path, "memory.events");
    if (!events) return 0;
    const char *p = strstr(events, "oom_kill ");
    int killed = p && atoi(p + 9) > 0;
    free(events);
    return killed;
}

void sandbox_cgroup_destroy(struct sandbox_cgroup *cg) {
    if (!cg) return;
    /* The tree was killed just before; its processes may take a moment to leave the group. */
    for (int i = 0; i < 100 && rmdir(cg->path) < 0 && errno == EBUSY; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    free(cg->path);
    free(cg);
}
