/* trainer_sandbox.h - the sandbox policy for a job's trainer, in one place: the executor (job.c)
 * applies it, and tests build the very same sandbox.
 *
 * `whet train` never opens a socket, so a try kills it (kill_on_network) — unless the job grades with
 * python: the trainer then builds a nested sandbox per grader batch (pygrader.h), which needs
 * allow_nested, and a grader's socket() keeps failing with EACCES (as in the graders API) rather than
 * killing the grader's python, since the outer filter's answer would win over the inner one's. */
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

#endif
