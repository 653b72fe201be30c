/* pipeline.c - see pipeline.h. */
#include "pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer_settings.h"

json_t *pipeline_settings(const json_t *body, size_t examples, char param[JOB_PARAM_MAX], struct whet_err *err) {
    struct job_request req;
    err->msg[0] = 0;
    if (job_request_parse(body, &req, param, err)) return NULL;
    if (examples) job_request_resolve_auto(&req, examples);
    json_t *t = trainer_settings_from_job(req.method, req.whet, 42);
    job_request_free(&req);
    return t;
}

int pipeline_trainer_parses(const json_t *settings, struct trainer_config *cfg, struct whet_err *err) {
    json_t *c = json_deep_copy(settings);
    json_object_set_new(c, "model", json_string("/models/whet-tiny"));
    json_object_set_new(c, "training_file", json_string("/job/train.jsonl"));
    json_object_set_new(c, "validation_file", json_null());
    json_object_set_new(c, "output_dir", json_string("/job/out"));
    json_object_set_new(c, "resume_from", json_null());
    json_object_set_new(c, "init_adapter", json_null());
    char *text = json_dumps(c, JSON_COMPACT);
    json_decref(c);
    struct whet_err own = {0};
    int rc = trainer_config_parse(cfg, text, strlen(text), "trainer.json", err ? err : &own);
    if (rc && !err) fprintf(stderr, "trainer_config_parse: %s\n  config: %s\n", own.msg, text);
    free(text);
    return rc;
}
