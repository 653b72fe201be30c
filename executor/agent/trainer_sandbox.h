/* trainer_sandbox.h - the sandbox policy for a job's trainer, in one place: the executor (job.c)
 * applies it, and tests build the very same sandbox.
 *
 * `whet train` of one process never opens a socket, so a try kills it (kill_on_network); a gang's
 * ranks reach their peers and nothing else (trainer_sandbox_gang) — unless the job grades with
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

#define TRAINER_HOST_UID 65534

/* Prepares the host side for a spec with a host uid (a no-op without one): `job_dir` and everything
 * in it become the trainer's, `model_dir` (shared by the node's jobs, bound read-only) readable by all.
 * Returns 0, or -1 with err. */
int trainer_sandbox_hand_over(const struct sandbox_spec *spec, const char *job_dir, const char *model_dir,
                              struct whet_err *err);

#endif
