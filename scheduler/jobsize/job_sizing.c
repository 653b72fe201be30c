/* job_sizing.c - what sizing (scheduler/placement/sizing.h) reads of a job and its base model (see
 * job_sizing.h). */
#include "job_sizing.h"

#include <stdlib.h>
#include <string.h>

#include "trainer_settings.h"

/* v when it is an integer in [1, INT32_MAX], else fallback. */
static int32_t job_sizing_int(json_t *v, int32_t fallback) {
    return json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) <= INT32_MAX
               ? (int32_t)json_integer_value(v)
               : fallback;
}

void job_sizing_model(struct sz_model *m, const char *parameters, const char *config_json) {
    memset(m, 0, sizeof *m);
    m->n_params = atoll(parameters);
    json_t *c = json_loads(config_json, 0, NULL);
    m->hidden = job_sizing_int(json_object_get(c, "hidden_size"), 0);
    m->intermediate = job_sizing_int(json_object_get(c, "intermediate_size"), 0);
    m->layers = job_sizing_int(json_object_get(c, "num_hidden_layers"), 0);
    m->heads = job_sizing_int(json_object_get(c, "num_attention_heads"), 0);
    m->kv_heads = job_sizing_int(json_object_get(c, "num_key_value_heads"), 0);
    m->head_dim = job_sizing_int(json_object_get(c, "head_dim"), 0);
    m->vocab = job_sizing_int(json_object_get(c, "vocab_size"), 0);
    json_decref(c);
}

void job_sizing_spec(struct job_sizing_spec *spec, json_t *method, json_t *whet) {
    struct sz_job *j = &spec->job;
    memset(spec, 0, sizeof *spec);
    spec->max_gpus = job_sizing_int(json_object_get(whet, "max_gpus"), 0);
    spec->min_gpus = job_sizing_int(json_object_get(whet, "min_gpus"), 0);
    json_t *t = trainer_settings_from_job(method, whet, 0);
    const char *m = json_string_value(json_object_get(t, "method"));
    j->method = !strcmp(m, "dpo") ? SZ_DPO : !strcmp(m, "grpo") ? SZ_GRPO : SZ_SFT;
    json_t *hp = json_object_get(t, "hyperparameters"), *lora = json_object_get(t, "lora");
    j->batch_size = job_sizing_int(json_object_get(hp, "batch_size"), 0);
    j->max_seq_len = job_sizing_int(json_object_get(hp, "max_seq_len"), 0);
    j->full_ft = json_is_null(lora);
    j->lora_r = job_sizing_int(json_object_get(lora, "r"), 0);
    size_t i;
    json_t *name;
    json_array_foreach(json_object_get(lora, "target_modules"), i, name) {
        if (json_is_string(name)) j->lora_targets |= sz_lora_target(json_string_value(name));
    }
    j->group_size = job_sizing_int(json_object_get(json_object_get(t, "rollout"), "n"), 0);
    json_decref(t);
}

int32_t job_sizing_choose(struct sz_choice *out, struct sz_estimate *e, const struct sz_model *model,
                          const struct job_sizing_spec *spec, const struct sz_pool *pools, int32_t n_pools) {
    struct sz_estimate own;
    if (!e) e = &own;
    sz_estimate(e, model, &spec->job);
    sz_choose(out, e, pools, n_pools, spec->max_gpus);
    int32_t gpus = out->gpus > 0 ? out->gpus : 1;
    return gpus < spec->min_gpus ? spec->min_gpus : gpus;
}

int32_t job_sizing_gang(struct sz_choice *out, struct sz_estimate *e, const char *parameters, const char *config_json,
                        json_t *method, json_t *whet, const struct sz_pool *pools, int32_t n_pools) {
    struct sz_model model;
    struct job_sizing_spec spec;
    job_sizing_model(&model, parameters, config_json);
    job_sizing_spec(&spec, method, whet);
    return job_sizing_choose(out, e, &model, &spec, pools, n_pools);
}
