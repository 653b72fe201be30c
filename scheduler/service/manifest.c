/* manifest.c - what an executor needs to run one attempt of a job, as the JSON of a START command.
 *
 * The manifest names objects, not local paths: the executor fetches the base model (cached per node),
 * the data files and, when resuming, the last complete checkpoint, then writes the trainer config with
 * its own paths. `judge_models` lists the catalog models that score_model / label_model graders name
 * as judges: the executor fetches them like the base model and the trainer loads them (judge.h). The trainer settings themselves (OpenAI's method object and the `whet` extension
 * mapped onto a trainer config, sft, dpo or grpo) come from trainer_settings.c, which needs no
 * database. Each rank of a gang gets the attempt's manifest with its own "distributed" object
 * (scheduler_rank_manifest): world_size, rank, generation, rendezvous, host, timeout_s, zero (ZeRO-3 for
 * full fine-tuning), and the peers' addresses, which the executor turns into the trainer config's `distributed` and its sandbox's
 * network policy. With encryption at rest on, the tenant's data key joins a manifest when it is
 * delivered (scheduler_manifest_deliver), never in the stored copy. A job placed into a co-training group
 * (scheduler/placement/cotrain.c) gets "cotrain": {"group", "members"}: the executor runs it in one
 * process with the other members (executor/agent/cotrain.c), on the device the group shares. */
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "data_keys.h"
#include "log.h"
#include "pg.h"
#include "service_internal.h"
#include "trainer_settings.h"

/* Adds to `names` (an object used as a set) the judge model of every score_model / label_model
 * grader in `grader`, inside multi too. */
static void judge_names(json_t *names, const json_t *grader) {
    const char *type = json_string_value(json_object_get(grader, "type"));
    if (!type) return;
    if (!strcmp(type, "score_model") || !strcmp(type, "label_model")) {
        const char *model = json_string_value(json_object_get(grader, "model"));
        if (model) json_object_set_new(names, model, json_true());
    } else if (!strcmp(type, "multi")) {
        const char *key;
        json_t *sub;
        json_object_foreach(json_object_get(grader, "graders"), key, sub) judge_names(names, sub);
    }
}

/* The judge models the grader names, each a base model of the catalog the executor fetches like the
 * base model: [{"id", "object_prefix", "sha256"}]. NULL with err when one is not in the catalog. */
static json_t *judge_models(PGconn *conn, const json_t *grader, struct whet_err *err) {
    json_t *names = json_object(), *list = json_array(), *v;
    judge_names(names, grader);
    const char *name;
    json_object_foreach(names, name, v) {
        const char *params[] = {name};
        PGresult *res = whet_pg_query(conn, "SELECT id, object_prefix, sha256 FROM base_models WHERE id = $1", 1, params,
                                      err);
        if (res && PQntuples(res) != 1) whet_errf(err, "grader: judge model \"%s\" is not in the model catalog", name);
        if (!res || PQntuples(res) != 1) {
            if (res) PQclear(res);
            json_decref(names);
            json_decref(list);
            return NULL;
        }
        json_array_append_new(list, json_pack("{s:s, s:s, s:s}", "id", PQgetvalue(res, 0, 0), "object_prefix",
                                              PQgetvalue(res, 0, 1), "sha256", PQgetvalue(res, 0, 2)));
        PQclear(res);
    }
    json_decref(names);
    return list;
}

PGresult *scheduler_manifest_rows(PGconn *conn, const char *job_ids, struct whet_err *err) {
    /* Resume from the newest checkpoint that has trainer state: the final model is listed as a
     * checkpoint too (as OpenAI lists it) but holds no optimizer moments. */
    const char *params[] = {job_ids};
    return whet_pg_query(
        conn,
        "SELECT j.id, j.attempt, j.tenant_id, j.method::text, j.whet::text, j.seed, b.id, b.object_prefix, b.sha256,"
        " tf.id, tf.object_key, vf.id, vf.object_key,"
        " (SELECT json_build_object('step', c.step_number, 'object_prefix', c.object_prefix)::text FROM checkpoints c"
        "   WHERE c.job_id = j.id AND c.object_prefix NOT LIKE '%/final' ORDER BY c.step_number DESC LIMIT 1),"
        " (SELECT p.final_object_prefix FROM jobs p WHERE p.fine_tuned_model = j.model AND p.tenant_id = j.tenant_id)"
        " FROM jobs j JOIN base_models b ON b.id = j.base_model JOIN files tf ON tf.id = j.training_file"
        " LEFT JOIN files vf ON vf.id = j.validation_file"
        " WHERE j.id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))",
        1, params, err);
}

json_t *scheduler_manifest_build(PGconn *conn, const struct scheduler_options *opts, const PGresult *res, int row,
                                 const char *job_id, int devices, struct whet_err *err) {
    json_t *method = json_loads(PQgetvalue(res, row, 3), 0, NULL);
    json_t *whet = json_loads(PQgetvalue(res, row, 4), 0, NULL);
    json_t *m = json_object();
    json_object_set_new(m, "job_id", json_string(job_id));
    json_object_set_new(m, "attempt", json_integer(atoi(PQgetvalue(res, row, 1)) + 1));
    json_object_set_new(m, "devices", json_integer(devices));
    json_object_set_new(m, "tenant_id", json_string(PQgetvalue(res, row, 2)));
    json_object_set_new(m, "object_store", json_string(opts->object_store ? opts->object_store : ""));
    json_object_set_new(m, "base_model", json_pack("{s:s, s:s, s:s}", "id", PQgetvalue(res, row, 6), "object_prefix",
                                                   PQgetvalue(res, row, 7), "sha256", PQgetvalue(res, row, 8)));
    json_object_set_new(m, "training_file",
                        json_pack("{s:s, s:s}", "id", PQgetvalue(res, row, 9), "object_key", PQgetvalue(res, row, 10)));
    json_object_set_new(m, "validation_file",
                        PQgetisnull(res, row, 11) ? json_null()
                                                  : json_pack("{s:s, s:s}", "id", PQgetvalue(res, row, 11), "object_key",
                                                              PQgetvalue(res, row, 12)));
    json_object_set_new(m, "resume",
                        PQgetisnull(res, row, 13) ? json_null() : json_loads(PQgetvalue(res, row, 13), 0, NULL));
    json_object_set_new(m, "init_adapter",
                        PQgetisnull(res, row, 14) ? json_null()
                                                  : json_pack("{s:s}", "object_prefix", PQgetvalue(res, row, 14)));
    /* Each attempt writes under its own prefix: an attempt declared lost whose trainer ran on (a data
     * center cut off) never overwrites the checkpoints or the final model of the attempt that replaced it.
     * Readers take the prefixes from the rows (checkpoints.object_prefix, jobs.final_object_prefix), so
     * rows of the former `jobs/<job>` layout keep working; a final model's prefix still ends in `/final`
     * (resume above and the retention, migration 0040, tell it by that). */
    char *output_prefix = xasprintf("jobs/%s/attempt-%d", job_id, atoi(PQgetvalue(res, row, 1)) + 1);
    json_object_set_new(m, "output_prefix", json_string(output_prefix));
    free(output_prefix);
    json_t *trainer = trainer_settings_from_job(method, whet, atoi(PQgetvalue(res, row, 5)));
    json_object_set_new(m, "trainer", trainer);
    json_decref(method);
    json_decref(whet);
    json_t *judges = judge_models(conn, json_object_get(trainer, "grader"), err);
    if (!judges) {
        json_decref(m);
        return NULL;
    }
    json_object_set_new(m, "judge_models", judges);
    return m;
}

void scheduler_manifest_cotrain(json_t *manifest, const char *group, const json_t *members) {
    json_object_set_new(manifest, "cotrain", json_pack("{s:s, s:O}", "group", group, "members", members));
}

json_t *scheduler_rank_manifest(const json_t *manifest, const struct gang_rank *r) {
    json_t *m = json_deep_copy(manifest);
    json_object_set_new(m, "devices", json_integer(1));
    /* A full fine-tune is sharded as sizing assumed (scheduler/placement/sizing.h): the parameters,
     * gradients and optimizer state (ZeRO-3, 1.5x the bytes of data parallelism for 1/N of the memory).
     * So is a LoRA job whose base does not fit one device (its frozen base sharded, gathered unit by
     * unit). Otherwise LoRA's state is small, and data parallelism overlaps the gradient's all-reduce
     * with the backward pass: a LoRA gang of whet.min_gpus (for speed) stays data parallel. */
    int full_ft = json_is_null(json_object_get(json_object_get(m, "trainer"), "lora"));
    int zero = full_ft || r->base_needs_gang ? 3 : 0;
    json_object_set_new(m, "distributed",
                        json_pack("{s:i, s:i, s:i, s:o, s:s, s:i, s:i, s:O}", "world_size", r->world_size, "rank",
                                  r->rank, "generation", r->generation, "rendezvous",
                                  r->rendezvous ? json_string(r->rendezvous) : json_null(), "host", r->host,
                                  "timeout_s", GANG_TIMEOUT_S, "zero", zero, "peers", r->peers));
    return m;
}

/* The operator keyring ($WHET_DATA_KEY_FILE), read once; NULL: encryption at rest is off. */
static pthread_once_t keyring_once = PTHREAD_ONCE_INIT;
static struct whet_keyring *keyring;
static struct whet_err keyring_err;
static int keyring_failed;

static void keyring_load(void) {
    keyring_failed = whet_keyring_from_env(&keyring, &keyring_err) != 0;
    if (keyring_failed) log_error("msg=\"operator keyring unusable\" err=\"%s\"", keyring_err.msg);
}

char *scheduler_manifest_deliver(PGconn *conn, const char *manifest) {
    pthread_once(&keyring_once, keyring_load);
    json_t *m = keyring || keyring_failed ? json_loads(manifest, 0, NULL) : NULL;
    const char *tenant_id = json_string_value(json_object_get(m, "tenant_id"));
    if (!tenant_id) {
        json_decref(m);
        return xstrdup(manifest);
    }
    struct whet_err err = keyring_err;
    struct whet_data_key dk;
    if (!keyring_failed && whet_tenant_data_key(conn, keyring, tenant_id, &dk, &err) == 0) {
        char hex[2 * WHET_DATA_KEY_BYTES + 1];
        whet_data_key_hex(&dk, hex);
        json_object_set_new(m, "data_key", json_pack("{s:I, s:s}", "id", (json_int_t)dk.id, "key", hex));
        explicit_bzero(hex, sizeof hex);
        explicit_bzero(&dk, sizeof dk);
    } else {
        log_error("msg=\"tenant data key unavailable\" tenant=%s err=\"%s\"", tenant_id, err.msg);
        json_object_set_new(m, "data_key_error", json_string(err.msg));
    }
    char *out = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    return out;
}
