/* trainer_sandbox.h - the sandbox policy for a job's trainer, in one place: the executor (job.c)
 * applies it, and tests build the very same sandbox.
 *
 * `whet train` of one process never opens a socket, so a try kills it (kill_on_network); a gang's
 * ranks reach their peers and nothing else (trainer_sandbox_gang), and a GPU gang's ranks also get
 * what NCCL needs (trainer_sandbox_gang_shm, trainer_sandbox_nccl_env) — unless the job grades with
 * python: the trainer then builds a nested sandbox per grader batch (pygrader.h), which needs
 * allow_nested, and a grader's socket() keeps failing with EACCES (as in the graders API) rather than
 * killing the grader's python, since the outer filter's answer would win over the inner one's.
 *
 * An executor running as root runs the trainer as host uid/gid 65534 (nobody) rather than as root
 * inside a user namespace: tenant code then owns nothing of the host even if it left every namespace,
 * and RLIMIT_NPROC binds. The job dir is handed to that uid, and the base-model cache made readable. */
#ifndef WHET_TRAINER_SANDBOX_H
#define WHET_TRAINER_SANDBOX_H

#include <jansson.h>

#include "sandbox.h"

/* 1 when the grader object (OpenAI's shape) is of type python or is a multi holding one. */
int trainer_grader_runs_python(const json_t *grader);

/* Sets the policy fields of `spec` (allow_nested, kill_on_network, process and file limits) for a
 * trainer whose config is `trainer_cfg` (the manifest's "trainer" object); the caller sets the
 * command, directories and descriptors. */
void trainer_sandbox_policy(struct sandbox_spec *spec, const json_t *trainer_cfg);
/* The same for one process running the trainer configs trainer_cfgs[0..n) (a co-training group): the
 * policy every one of them needs, so that each member's graders run as they would in a sandbox of its own
 * (one python grader among them: nested sandboxes for all, and sockets failing rather than killing). */
void trainer_sandbox_policy_all(struct sandbox_spec *spec, const json_t *const *trainer_cfgs, int n);
/* A whole spec for what the executor runs in the trainers' sandbox (a job's trainer, a co-trained group,
 * a model worker): sandbox_spec_init, the command, its working dir, the dirs it writes and reads
 * (NULL-terminated), the node's device nodes (NULL: none), then trainer_sandbox_policy. */
void trainer_sandbox_spec(struct sandbox_spec *spec, const char *const *argv, const char *const *env,
                          const char *workdir, const char *const *writable, const char *const *readonly,
                          const char *const *device_nodes, const json_t *trainer_cfg);

/* A gang rank's network (sandbox_net.c): its gang's nodes (the manifest's distributed.peers) on the
 * ports lo..hi, nothing else; a job of one process (`distributed` absent) keeps the sandbox's own
 * network namespace and its socket() killed. Returns the NULL-terminated peer list the spec points
 * at (the caller frees it, the strings stay the manifest's), or NULL for one process. */
const char **trainer_sandbox_gang(struct sandbox_spec *spec, const json_t *distributed, int lo, int hi);

/* A GPU gang rank's NCCL (the decisions and their cost: executor/train/dist/nccl/comm_nccl.c). Appends
 * to the NULL-terminated `env` (room for `cap` pointers, the NULL included; static strings) what NCCL
 * needs in the sandbox: path-named proxy sockets in the rank's own /tmp, no cuMem and no CUDA P2P/NVLS
 * (both would pass handles or open the other ranks' GPUs across sandboxes), no InfiniBand (the sandbox
 * binds no /dev/infiniband): a node's ranks meet in the gang's /dev/shm, nodes over TCP. The executor
 * adds NCCL_SOCKET_IFNAME from its own environment. What does not fit in `cap` is left out. */
void trainer_sandbox_nccl_env(const char **env, size_t cap);
/* Makes `spec` (a gang rank's, after trainer_sandbox_gang) NCCL-ready: unix sockets (sandbox.h) and
 * /dev/shm bound to the gang's directory on this node, work_dir/gang-shm/JOB-ATTEMPT, created at the
 * first of the node's ranks, handed to the trainer's host uid, shared by the gang's ranks here and by
 * no other job. Returns that directory (the caller hands it to trainer_sandbox_gang_shm_release when
 * the rank has ended), or NULL with err. Operators bound its size by mounting a tmpfs (size=…) on
 * work_dir/gang-shm; without one it lives on the work dir's disk, which is correct but slower for
 * NCCL's SHM transport. Pages written there are charged to the writing rank's memory cgroup either way. */
char *trainer_sandbox_gang_shm(struct sandbox_spec *spec, const char *work_dir, const char *job_id, int attempt,
                               struct whet_err *err);
/* Ends a rank's hold on its gang's directory (takes `dir`); the last rank of the node removes it. What
 * a killed executor left there goes when the next one holds no directory and a gang asks for one. */
void trainer_sandbox_gang_shm_release(char *dir);

#define TRAINER_HOST_UID 65534

/* Prepares the host side for a spec with a host uid (a no-op without one): `job_dir` and everything
 * in it become the trainer's, `model_dir` (shared by the node's jobs, bound read-only) readable by all.
 * Returns 0, or -1 with err. */
int trainer_sandbox_hand_over(const struct sandbox_spec *spec, const char *job_dir, const char *model_dir,
                              struct whet_err *err);

#endif
