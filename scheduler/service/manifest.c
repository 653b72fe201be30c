/* manifest.c - what an executor needs to run one attempt of a job, as the JSON of a START command.
 *
 * The manifest names objects, not local paths: the executor fetches the base model (cached per node),
 * the data files and, when resuming, the last complete checkpoint, then writes the trainer config with
 * its own paths. OpenAI's method object maps onto the trainer's settings here: "auto" hyperparameters
 * get whet's defaults, the learning-rate multiplier scales a base rate that depends on LoRA or full
 * fine-tuning, and the `whet` extension may pin LoRA settings, steps and sequence length. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "pg.h"
#include "service_internal.h"

#define BASE_LR_LORA 2e-4
#define BASE_LR_FULL 2e-5

/* A hyperparameter that may be missing or "auto". */
static double hp_number(json_t *hp, const char *name, double fallback) {
    json_t *v = json_object_get(hp, name);
    return json_is_number(v) ? json_number_value(v) : fallback;
}

static json_t *trainer_settings(json_t *method, json_t *whet, int seed) {
    const char *type = json_string_value(json_object_get(method, "type"));
    if (!type) type = "supervised";
    json_t *hp = json_object_get(json_object_get(method, type), "hyperparameters");
    int full = json_is_true(json_object_get(whet, "full_finetune"));

    json_t *t = json_object();
    json_object_set_new(t, "method", json_string(!strcmp(type, "dpo") ? "dpo" : !strcmp(type, "reinforcement") ? "grpo" : "sft"));
    if (full) {
        json_object_set_new(t, "lora", json_null());
    } else {
        json_t *lora = json_object_get(whet, "lora");
        json_t *l = json_object();
        json_object_set_new(l, "r", json_integer((json_int_t)hp_number(lora, "r", 16)));
        json_object_set_new(l, "alpha", json_real(hp_number(lora, "alpha", 32)));
        json_t *modules = json_object_get(lora, "target_modules");
        if (json_is_array(modules)) json_object_set(l, "target_modules", modules);
        json_object_set_new(t, "lora", l);
    }
    json_t *h = json_object();
    json_object_set_new(h, "n_epochs", json_integer((json_int_t)hp_number(hp, "n_epochs", 3)));
    json_object_set_new(h, "batch_size", json_integer((json_int_t)hp_number(hp, "batch_size", 4)));
    json_object_set_new(h, "learning_rate",
                        json_real((full ? BASE_LR_FULL : BASE_LR_LORA) * hp_number(hp, "learning_rate_multiplier", 1)));
    json_object_set_new(h, "lr_scheduler", json_string("linear"));
    json_object_set_new(h, "warmup_steps", json_integer(0));
    json_object_set_new(h, "max_grad_norm", json_real(1.0));
    json_object_set_new(h, "weight_decay", json_real(0.0));
    json_object_set_new(h, "max_seq_len", json_integer((json_int_t)hp_number(whet, "max_seq_len", 512)));
    json_object_set_new(h, "gradient_accumulation_steps", json_integer(1));
    if (!strcmp(type, "dpo")) json_object_set_new(h, "beta", json_real(hp_number(hp, "beta", 0.1)));
    json_object_set_new(t, "hyperparameters", h);
    json_object_set_new(t, "seed", json_integer(seed));
    json_object_set_new(t, "checkpoint_every_steps", json_integer((json_int_t)hp_number(whet, "checkpoint_every_steps", 10)));
    json_object_set_new(t, "max_steps", json_integer((json_int_t)hp_number(whet, "max_steps", 0)));
    return t;
}

char *scheduler_manifest(PGconn *conn, const struct scheduler_options *opts, const char *job_id, int attempt,
                         int devices, struct whet_err *err) {
    /* Resume from the newest checkpoint that has trainer state: the final model is listed as a
     * checkpoint too (as OpenAI lists it) but holds no optimizer moments. */
    const char *params[] = {job_id};
    PGresult *res = whet_pg_query(
        conn,
        "SELECT j.id, j.tenant_id, j.method::text, j.whet::text, j.seed, b.id, b.object_prefix, b.sha256,"
        " tf.id, tf.object_key, vf.id, vf.object_key,"
        " (SELECT json_build_object('step', c.step_number, 'object_prefix', c.object_prefix)::text FROM checkpoints c"
        "   WHERE c.job_id = j.id AND c.object_prefix NOT LIKE '%/final' ORDER BY c.step_number DESC LIMIT 1),"
        " (SELECT p.final_object_prefix FROM jobs p WHERE p.fine_tuned_model = j.model AND p.tenant_id = j.tenant_id)"
        " FROM jobs j JOIN base_models b ON b.id = j.base_model JOIN files tf ON tf.id = j.training_file"
        " LEFT JOIN files vf ON vf.id = j.validation_file WHERE j.id = $1",
        1, params, err);
    if (!res) return NULL;
    if (PQntuples(res) != 1) {
        PQclear(res);
        whet_errf(err, "job %s: not found, or its base model or training file is gone", job_id);
        return NULL;
    }
    json_t *method = json_loads(PQgetvalue(res, 0, 2), 0, NULL);
    json_t *whet = json_loads(PQgetvalue(res, 0, 3), 0, NULL);
    json_t *m = json_object();
    json_object_set_new(m, "job_id", json_string(job_id));
    json_object_set_new(m, "attempt", json_integer(attempt));
    json_object_set_new(m, "devices", json_integer(devices));
    json_object_set_new(m, "tenant_id", json_string(PQgetvalue(res, 0, 1)));
    json_object_set_new(m, "object_store", json_string(opts->object_store ? opts->object_store : ""));
    json_object_set_new(m, "base_model", json_pack("{s:s, s:s, s:s}", "id", PQgetvalue(res, 0, 5), "object_prefix",
                                                   PQgetvalue(res, 0, 6), "sha256", PQgetvalue(res, 0, 7)));
    json_object_set_new(m, "training_file",
                        json_pack("{s:s, s:s}", "id", PQgetvalue(res, 0, 8), "object_key", PQgetvalue(res, 0, 9)));
    json_object_set_new(m, "validation_file",
                        PQgetisnull(res, 0, 10) ? json_null()
                                                : json_pack("{s:s, s:s}", "id", PQgetvalue(res, 0, 10), "object_key",
                                                            PQgetvalue(res, 0, 11)));
    json_object_set_new(m, "resume", PQgetisnull(res, 0, 12) ? json_null() : json_loads(PQgetvalue(res, 0, 12), 0, NULL));
    json_object_set_new(m, "init_adapter",
                        PQgetisnull(res, 0, 13) ? json_null() : json_pack("{s:s}", "object_prefix", PQgetvalue(res, 0, 13)));
    char *output_prefix = xasprintf("jobs/%s", job_id);
    json_object_set_new(m, "output_prefix", json_string(output_prefix));
    free(output_prefix);
    json_object_set_new(m, "trainer", trainer_settings(method, whet, atoi(PQgetvalue(res, 0, 4))));
    PQclear(res);
    json_decref(method);
    json_decref(whet);
    char *out = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    return out;
}
