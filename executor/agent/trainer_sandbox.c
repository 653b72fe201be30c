/* trainer_sandbox.c - the trainer's sandbox policy (see trainer_sandbox.h). */
#include "trainer_sandbox.h"

#include <string.h>

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
    spec->allow_nested = trainer_grader_runs_python(json_object_get(trainer_cfg, "grader"));
    spec->kill_on_network = !spec->allow_nested;
    /* Room for OpenMP's threads and, with python graders, their sandboxes (pygrader's defaults: 4 at
     * once of at most 16 tasks each). */
    spec->max_procs = 512;
    spec->open_files = 1024;
}
