/* trainer_sandbox.c - the trainer's sandbox policy (see trainer_sandbox.h). */
#include "trainer_sandbox.h"

#include <errno.h>
#include <ftw.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "log.h"

int trainer_grader_runs_python(const json_t *grader) {
    const char *type = json_string_value(json_object_get(grader, "type"));
    if (!type) return 0;
    if (!strcmp(type, "python")) return 1;
    if (strcmp(type, "multi")) return 0;
    const char *name;
    json_t *sub;
    json_object_foreach((json_t *)json_object_get(grader, "graders"), name, sub)
        if (trainer_grader_runs_python(sub)) return 1;
    return 0;
}

void trainer_sandbox_policy(struct sandbox_spec *spec, const json_t *trainer_cfg) {
    trainer_sandbox_policy_all(spec, &trainer_cfg, 1);
}

void trainer_sandbox_policy_all(struct sandbox_spec *spec, const json_t *const *trainer_cfgs, int n) {
    spec->allow_nested = 0;
    for (int i = 0; i < n; i++)
        spec->allow_nested |= trainer_grader_runs_python(json_object_get(trainer_cfgs[i], "grader"));
    spec->kill_on_network = !spec->allow_nested;
    /* Room for OpenMP's threads and, with python graders, their sandboxes (pygrader's defaults: 4 at
     * once of at most 16 tasks each). */
    spec->max_procs = 512;
    spec->open_files = 1024;
    if (geteuid() == 0) spec->host_uid = spec->host_gid = TRAINER_HOST_UID;
}

void trainer_sandbox_spec(struct sandbox_spec *spec, const char *const *argv, const char *const *env,
                          const char *workdir, const char *const *writable, const char *const *readonly,
                          const char *const *device_nodes, const json_t *trainer_cfg) {
    sandbox_spec_init(spec);
    spec->argv = argv;
    spec->env = env;
    spec->workdir = workdir;
    spec->writable_dirs = writable;
    spec->readonly_dirs = readonly;
    spec->device_nodes = device_nodes;
    trainer_sandbox_policy(spec, trainer_cfg);
}

const char **trainer_sandbox_gang(struct sandbox_spec *spec, const json_t *distributed, int lo, int hi) {
    const json_t *list = json_object_get(distributed, "peers");
    if (!json_is_array(list)) return NULL;
    const char **peers = xcalloc(json_array_size(list) + 1, sizeof *peers);
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(list); i++)
        if (json_is_string(json_array_get(list, i))) peers[n++] = json_string_value(json_array_get(list, i));
    spec->peer_hosts = peers;
    spec->peer_port_lo = lo;
    spec->peer_port_hi = hi;
    return peers;
}

void trainer_sandbox_nccl_env(const char **env, size_t cap) {
    static const char *const nccl[] = {"NCCL_CUMEM_ENABLE=0", "NCCL_P2P_DISABLE=1", "NCCL_NVLS_ENABLE=0",
                                       "NCCL_IB_DISABLE=1"};
    size_t n = 0;
    while (n < cap && env[n]) n++;
    for (size_t i = 0; i < WHET_ARRAY_LEN(nccl) && n + 1 < cap; i++) env[n++] = nccl[i];
    env[n < cap ? n : cap - 1] = NULL;
}

/* The node's gang directories in use, with how many ranks hold each (the ranks run on threads of their own). */
struct gang_shm {
    char *dir;
    int holders;
    struct gang_shm *next;
};
static pthread_mutex_t gang_shm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gang_shm *gang_shms;

/* Once per executor: NCCL's shared memory belongs in memory, bounded (trainer_sandbox.h). */
static void warn_unless_tmpfs(const char *dir) {
    static int warned;
    struct statfs fs;
    if (warned || statfs(dir, &fs) != 0 || fs.f_type == TMPFS_MAGIC) return;
    warned = 1;
    log_warn("msg=\"the GPU gangs' shared memory is not a tmpfs: NCCL's SHM transport will use the work dir's disk, "
             "slower and unbounded; mount a tmpfs with size= there\" dir=%s",
             dir);
}

char *trainer_sandbox_gang_shm(struct sandbox_spec *spec, const char *work_dir, const char *job_id, int attempt,
                               struct whet_err *err) {
    char *dir = xasprintf("%s/gang-shm/%s-%d", work_dir, job_id, attempt);
    pthread_mutex_lock(&gang_shm_lock);
    struct gang_shm *g = gang_shms;
    while (g && strcmp(g->dir, dir)) g = g->next;
    int rc = 0;
    if (!g) {
        /* 0700: the ranks run as one uid; what keeps other jobs out is that no other sandbox binds it. */
        char *parent = xasprintf("%s/gang-shm", work_dir);
        /* Held by no rank of this executor, every directory there is a dead executor's leftover. */
        if (!gang_shms) whet_rm_rf(parent);
        rc = whet_mkdir_p(parent, err);
        warn_unless_tmpfs(parent);
        free(parent);
        if (!rc && mkdir(dir, 0700) != 0 && errno != EEXIST)
            rc = whet_errf(err, "%s: mkdir: %s", dir, strerror(errno));
        if (!rc && spec->host_uid >= 0 && chown(dir, (uid_t)spec->host_uid, (gid_t)spec->host_gid) != 0)
            rc = whet_errf(err, "%s: chown to uid %d: %s", dir, spec->host_uid, strerror(errno));
        if (!rc) {
            g = xcalloc(1, sizeof *g);
            g->dir = xstrdup(dir);
            g->next = gang_shms;
            gang_shms = g;
        }
    }
    if (g) g->holders++;
    pthread_mutex_unlock(&gang_shm_lock);
    if (rc) {
        free(dir);
        return NULL;
    }
    spec->shm_dir = dir;
    spec->allow_unix_sockets = 1;
    return dir;
}

void trainer_sandbox_gang_shm_release(char *dir) {
    if (!dir) return;
    pthread_mutex_lock(&gang_shm_lock);
    for (struct gang_shm **p = &gang_shms; *p; p = &(*p)->next) {
        struct gang_shm *g = *p;
        if (strcmp(g->dir, dir)) continue;
        if (--g->holders == 0) {
            whet_rm_rf(g->dir);
            *p = g->next;
            free(g->dir);
            free(g);
        }
        break;
    }
    pthread_mutex_unlock(&gang_shm_lock);
    free(dir);
}

/* nftw passes no context: the walk's target and its first failure, per thread (jobs run on several). */
static _Thread_local uid_t walk_uid;
static _Thread_local gid_t walk_gid;
static _Thread_local int walk_errno;
static _Thread_local const char *walk_failed;

static int give_path(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)type;
    (void)ftw;
    if (lchown(path, walk_uid, walk_gid) != 0) {
        walk_errno = errno;
        walk_failed = "chown";
        return 1;
    }
    return 0;
}

static int open_path(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)ftw;
    if (type == FTW_SL) return 0;
    mode_t want = st->st_mode | S_IRUSR | S_IRGRP | S_IROTH;
    if (S_ISDIR(st->st_mode)) want |= S_IXUSR | S_IXGRP | S_IXOTH;
    if (want != st->st_mode && chmod(path, want & 07777) != 0) {
        walk_errno = errno;
        walk_failed = "chmod";
        return 1;
    }
    return 0;
}

int trainer_sandbox_hand_over(const struct sandbox_spec *spec, const char *job_dir, const char *model_dir,
                              struct whet_err *err) {
    if (spec->host_uid < 0) return 0;
    walk_uid = (uid_t)spec->host_uid;
    walk_gid = (gid_t)spec->host_gid;
    walk_failed = NULL;
    if (nftw(job_dir, give_path, 16, FTW_PHYS) != 0)
        return whet_errf(err, "%s: %s to uid %d: %s", job_dir, walk_failed ? walk_failed : "walk", spec->host_uid,
                         strerror(walk_failed ? walk_errno : errno));
    if (model_dir && nftw(model_dir, open_path, 16, FTW_PHYS) != 0)
        return whet_errf(err, "%s: %s a+rX: %s", model_dir, walk_failed ? walk_failed : "walk",
                         strerror(walk_failed ? walk_errno : errno));
    return 0;
}
