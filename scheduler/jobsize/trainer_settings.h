/* trainer_settings.h - a job's OpenAI method object and `whet` extension, as the settings part of a
 * trainer config (DESIGN.md, "Trainer config"; the grpo fields: notes/grpo_contract.md).
 *
 * Pure logic, no database: manifest.c puts the result under "trainer" in a START manifest, and the
 * executor adds the paths (model, data, output, resume) before it writes trainer.json. The method
 * object is the one the gateway stored, with every "auto" already resolved to a number; a value that
 * is still missing or "auto" gets the job specification's service default (common/job_spec.h). */
#ifndef WHET_SCHEDULER_TRAINER_SETTINGS_H
#define WHET_SCHEDULER_TRAINER_SETTINGS_H

#include <jansson.h>

/* Returns a new object: method, lora, hyperparameters, seed, checkpoint_every_steps, max_steps,
 * eval_every_steps, and for grpo grader, rollout and eval_samples. `method` is
 * {"type": t, t: {"hyperparameters": {…}[, "grader": {…}]}} (NULL or a missing type: supervised);
 * `whet` is the extension object (NULL: none). */
json_t *trainer_settings_from_job(const json_t *method, const json_t *whet, int seed);

#endif
