/* jobs.c - the Fine-tuning jobs resource (see jobs.h). Sections: the JSON shapes, create (body ->
 * Idempotency-Key, see idempotency.h -> model and files lookup -> one transaction -> stored answer),
 * list, retrieve, the state changes (cancel, pause, resume: Idempotency-Key too), events, checkpoints,
 * routes. */
#include "jobs.h"

#include <stdlib.h>
#include <string.h>

#include "crypto.h"
#include "db.h"
#include "estimate.h"
#include "files_common.h"
#include "idempotency.h"
#include "job_request.h"
#include "log.h"
#include "validate.h"

/* ---------------------------------------------------------------- JSON shapes */

/* A job's columns, of jobs j and its progress p (JOB_FROM): the row's own, then what is derived from the
 * progress, the attempts and the usage. The progress is the heartbeats' (migration 0028); estimated_finish is
 * the running attempt's step rate so far, once that attempt reported a step. */
#define JOB_ROW_COLUMNS                                                                                                \
    "j.id, j.model, j.training_file, j.validation_file, j.method, j.suffix, j.seed, j.metadata, j.whet, j.status, "    \
    "j.error, j.fine_tuned_model, j.result_files, j.created_at, j.finished_at, j.tenant_id, j.wait_reason, "           \
    "j.priority, j.queue_position, j.estimate"
#define JOB_COLUMNS                                                                                                    \
    JOB_ROW_COLUMNS ", p.trained_tokens, CASE WHEN j.status = 'running' AND p.attempt = j.attempt "                    \
                    "THEN whet_estimated_finish(p.last_step, p.total_steps, p.resume_step, p.started_at) END, "        \
                    "whet_job_cost(j.id), CASE WHEN j.estimate ? 'rollout_tokens' AND j.finished_at IS NOT NULL THEN " \
                    "(SELECT sum(u.rollout_tokens) FROM usage_records u WHERE u.job_id = j.id "                        \
                    "AND u.job_created_at = j.created_at) END"
/* JOB_COLUMNS of a job being created, from its row alone: it has no progress, does not run, has not finished,
 * and its cost is that of a job with nothing recorded (migration 0057), without whet_job_cost's probes. */
#define NEW_JOB_COLUMNS JOB_ROW_COLUMNS ", NULL, NULL, whet_job_cost_none(), NULL"
#define JOB_FROM " jobs j LEFT JOIN job_progress p ON p.job_id = j.id "
/* The seq below which a page of the tenant's ($1) jobs starts: after the job whose id is $2, else from the newest. */
#define JOB_CURSOR_SEQ                                                                                                 \
    "CASE WHEN $2::text IS NULL THEN 9223372036854775807 ELSE (SELECT seq FROM jobs WHERE tenant_id = $1 AND id = "    \
    "$2) END"
enum {
    JC_ID,
    JC_MODEL,
    JC_TRAINING_FILE,
    JC_VALIDATION_FILE,
    JC_METHOD,
    JC_SUFFIX,
    JC_SEED,
    JC_METADATA,
    JC_WHET,
    JC_STATUS,
    JC_ERROR,
    JC_FINE_TUNED_MODEL,
    JC_RESULT_FILES,
    JC_CREATED_AT,
    JC_FINISHED_AT,
    JC_TENANT_ID,
    JC_WAIT_REASON,
    JC_PRIORITY,
    JC_QUEUE_POSITION,
    JC_ESTIMATE,
    JC_TRAINED_TOKENS,
    JC_ESTIMATED_FINISH,
    JC_COST,
    JC_ROLLOUT_TOKENS, /* a finished reinforcement job's, to compare with its estimate's */
};

/* OpenAI's fine_tuning.job, plus the `whet` extension object (as given, with priority, why the job
 * waits and its 1-based place in the queue, both null unless it waits; the scheduler keeps them and
 * `estimated_finish` current). The deprecated top-level `hyperparameters` mirrors the method's. */
static json_t *job_row_to_json(const PGresult *res, int row) {
    json_t *method = db_json_value(res, row, JC_METHOD);
    const char *type = json_string_value(json_object_get(method, "type"));
    json_t *hp = json_object_get(json_object_get(method, type ? type : ""), "hyperparameters");
    json_t *legacy = json_object();
    static const char *const legacy_keys[] = {"n_epochs", "batch_size", "learning_rate_multiplier"};
    for (size_t i = 0; i < WHET_ARRAY_LEN(legacy_keys); i++) {
        json_t *v = json_object_get(hp, legacy_keys[i]);
        if (v) json_object_set(legacy, legacy_keys[i], v);
    }
    json_t *whet = db_json_value(res, row, JC_WHET);
    if (!json_is_object(whet)) {
        json_decref(whet);
        whet = json_object();
    }
    json_object_set_new(whet, "priority", db_json_integer(res, row, JC_PRIORITY));
    json_object_set_new(whet, "wait_reason", db_json_string(res, row, JC_WAIT_REASON));
    json_object_set_new(whet, "queue_position", db_json_integer(res, row, JC_QUEUE_POSITION));
    json_t *cost = db_json_value(res, row, JC_COST), *estimate = db_json_value(res, row, JC_ESTIMATE);
    if (json_is_object(estimate) && db_value(res, row, JC_FINISHED_AT))
        json_object_set_new(estimate, "actual",
                            json_pack("{s:o, s:O?, s:O?}", "trained_tokens",
                                      db_json_integer(res, row, JC_TRAINED_TOKENS), "duration_s",
                                      json_object_get(cost, "run_seconds"), "cost", json_object_get(cost, "amount")));
    if (db_value(res, row, JC_ROLLOUT_TOKENS))
        json_object_set_new(json_object_get(estimate, "actual"), "rollout_tokens",
                            db_json_integer(res, row, JC_ROLLOUT_TOKENS));
    json_object_set_new(whet, "cost", cost);         /* live while it runs (prices.h) */
    json_object_set_new(whet, "estimate", estimate); /* made at create, with the actual once it ends (estimate.h) */
    json_t *job = json_object();
    json_object_set_new(job, "id", db_json_string(res, row, JC_ID));
    json_object_set_new(job, "object", json_string("fine_tuning.job"));
    json_object_set_new(job, "created_at", db_json_integer(res, row, JC_CREATED_AT));
    json_object_set_new(job, "error", db_json_value(res, row, JC_ERROR));
    json_object_set_new(job, "fine_tuned_model", db_json_string(res, row, JC_FINE_TUNED_MODEL));
    json_object_set_new(job, "finished_at", db_json_integer(res, row, JC_FINISHED_AT));
    json_object_set_new(job, "hyperparameters", legacy);
    json_object_set_new(job, "model", db_json_string(res, row, JC_MODEL));
    json_object_set_new(job, "organization_id", db_json_string(res, row, JC_TENANT_ID));
    json_object_set_new(job, "result_files", db_json_value(res, row, JC_RESULT_FILES));
    json_object_set_new(job, "seed", db_json_integer(res, row, JC_SEED));
    json_object_set_new(job, "status", db_json_string(res, row, JC_STATUS));
    json_object_set_new(job, "trained_tokens", db_json_integer(res, row, JC_TRAINED_TOKENS));
    json_object_set_new(job, "training_file", db_json_string(res, row, JC_TRAINING_FILE));
    json_object_set_new(job, "validation_file", db_json_string(res, row, JC_VALIDATION_FILE));
    json_object_set_new(job, "integrations", json_array());
    json_object_set_new(job, "estimated_finish", db_json_integer(res, row, JC_ESTIMATED_FINISH));
    json_object_set_new(job, "method", method);
    json_object_set_new(job, "metadata", db_json_value(res, row, JC_METADATA));
    json_object_set_new(job, "user_provided_suffix", db_json_string(res, row, JC_SUFFIX));
    json_object_set_new(job, "whet", whet);
    return job;
}

static json_t *event_row_to_json(const PGresult *res, int row) {
    /* columns: id, created_at, level, message, data, type */
    return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o}", "object", "fine_tuning.job.event", "id",
                     db_json_string(res, row, 0), "created_at", db_json_integer(res, row, 1), "level",
                     db_json_string(res, row, 2), "message", db_json_string(res, row, 3), "data",
                     db_json_value(res, row, 4), "type", db_json_string(res, row, 5));
}

/* A checkpoint object's columns, for checkpoint_row_to_json. */
#define CHECKPOINT_COLUMNS "id, created_at, fine_tuned_model_checkpoint, step_number, metrics, job_id, pinned"

static json_t *checkpoint_row_to_json(const PGresult *res, int row) {
    /* columns: CHECKPOINT_COLUMNS */
    return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:{s:b}}", "object", "fine_tuning.job.checkpoint", "id",
                     db_json_string(res, row, 0), "created_at", db_json_integer(res, row, 1),
                     "fine_tuned_model_checkpoint", db_json_string(res, row, 2), "step_number",
                     db_json_integer(res, row, 3), "metrics", db_json_value(res, row, 4), "fine_tuning_job_id",
                     db_json_string(res, row, 5), "whet", "pinned", PQgetvalue(res, row, 6)[0] == 't');
}

/* ---------------------------------------------------------------- create */

/* Everything a create carries between its asynchronous steps; strings live in the request's pool. */
struct create_ctx {
    const char *model, *training_file, *validation_file, *suffix;
    char method_type[16];
    const char *method_json; /* hyperparameters still "auto" until the training file's size is known */
    const char *metadata_json, *whet_json;
    char seed[16], priority[16];
    const char *job_id;
    char now[24];
    int dry_run; /* whet.dry_run: answer the estimate, create nothing (estimate.h) */
    const char *base_model, *init_checkpoint, *resolved_method; /* once the lookup has checked the model */
    int cut; /* the kept count's max_seq_len for this job (estimate_cut), given to the lookup */
};

/* What the commit of a create raises when it took the tenant past its active-job limit (migration 0064): the
 * failure of the transaction's last statement, which is jobs_create or the Idempotency-Key's. */
#define SQLSTATE_ACTIVE_JOB_LIMIT "WJ429"

static void create_reply_too_many(struct gw_req *r, void *arg) {
    http_reply_rate_limited(r, 30, NULL, "too many active fine-tuning jobs for this tenant; wait for one to finish or "
                                   "cancel one");
}

/* Columns of jobs_create: the job's (JOB_COLUMNS, NULL when it was not created), the NOTIFY, then ESTIMATE_SQL's. */
#define CREATE_ESTIMATE_COLUMN (JC_ROLLOUT_TOKENS + 2)

static void create_done(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct create_ctx *c = arg;
    if (!res->ok && res->failed == res->n - 1 && !strcmp(res->sqlstate, SQLSTATE_ACTIVE_JOB_LIMIT)) {
        /* The tenant's active-job limit rolled the transaction back, the key's reservation with it:
         * idem_lost_race forgets that reservation (and returns 0: this is not a race). */
        idem_lost_race(r, res);
        create_reply_too_many(r, NULL);
        return;
    }
    if (idem_reply_failed(r, res)) return;
    if (estimate_refuses(r, res->res[0], CREATE_ESTIMATE_COLUMN, c->training_file, 0)) return;
    idem_reply_json(r, 200, job_row_to_json(res->res[0], 0));
}

/* Checks a file row's purpose and format for the job's method; answers and returns -1 when unsuitable. */
static int check_file(struct gw_req *r, const struct create_ctx *c, const char *param, const char *id,
                      const char *purpose, const char *format) {
    if (!purpose) {
        http_reply_error(r, 404, param, "file_not_found", "no such file: %s", id);
        return -1;
    }
    if (strcmp(purpose, "fine-tune") != 0) {
        http_reply_error(r, 400, param, "invalid_file", "%s: file %s has purpose \"%s\"; expected \"fine-tune\"", param,
                         id, purpose);
        return -1;
    }
    enum validate_format want = validate_format_for_method(c->method_type);
    if (validate_format_parse(format) != want) {
        http_reply_error(r, 400, param, "invalid_file", "%s: file %s holds %s examples; a %s job needs %s examples",
                         param, id, format ? format : "unchecked", c->method_type, validate_format_name(want));
        return -1;
    }
    return 0;
}

/* The job may be created (estimate.h): its estimate, then the row with it, its "created" event and the NOTIFY
 * (and a warning when its estimate takes the month past the tenant's soft budget) unless the estimate
 * refuses the job, in one statement, one transaction. */
static void create_insert(struct gw_req *r, const char *const *e, void *arg) {
    struct create_ctx *c = arg;
    c->job_id = files_new_id(r, "ftjob-");
    snprintf(c->now, sizeof c->now, "%lld", (long long)whet_now_unix());
    const char *api_key = r->api_key_id[0] ? r->api_key_id : NULL;
    _Static_assert(ESTIMATE_NPARAMS == 5, "jobs_create numbers the row's parameters from $6");
    /* the estimate's parameters, the row's columns, then the ids of its event and of the budget's warning */
    const char *params[] = {e[0], e[1], e[2], e[3], e[4],
                            c->job_id, http_tenant_id(r), c->model, c->base_model, c->init_checkpoint,
                            c->training_file, c->validation_file, c->resolved_method, c->suffix, c->seed,
                            c->metadata_json, c->whet_json, c->now, c->priority, api_key,
                            files_new_id(r, "ftevent-"), files_new_id(r, "ftevent-")};
    struct db_stmt stmts[2] = {{"jobs_create", NULL, (int)WHET_ARRAY_LEN(params), params}};
    db_transaction(r, stmts, idem_reserve(r, stmts, 1), create_done, c);
}

static void create_lookup_done(struct gw_req *r, const struct db_result *res, void *arg) {
    struct create_ctx *c = arg;
    if (db_reply_failed(r, res)) return;
    /* columns: base, ft_base, ft_checkpoint, ckpt_base, ckpt_id, training purpose, format, lines,
     * validation purpose, format, missing judge model, then the estimate's inputs (estimate.h): the base
     * model's parameters, config, object prefix and checksum, the fleet's pools, the training file's object
     * key, checksum and bytes, the time, the shared inputs' version, the kept count, the previous job's
     * trained tokens and steps */
    const PGresult *row = res->res[0];
    const char *base_model = NULL, *init_checkpoint = NULL;
    if (db_value(row, 0, 0)) {
        base_model = db_value(row, 0, 0);
    } else if (db_value(row, 0, 1)) {
        base_model = db_value(row, 0, 1);
        init_checkpoint = db_value(row, 0, 2);
    } else if (db_value(row, 0, 3)) {
        base_model = db_value(row, 0, 3);
        init_checkpoint = db_value(row, 0, 4);
    } else {
        http_reply_error(r, 404, "model", "model_not_found", "model %s does not exist or you do not have access to it",
                         c->model);
        return;
    }
    if (check_file(r, c, "training_file", c->training_file, db_value(row, 0, 5), db_value(row, 0, 6))) return;
    if (c->validation_file &&
        check_file(r, c, "validation_file", c->validation_file, db_value(row, 0, 8), db_value(row, 0, 9)))
        return;
    if (db_value(row, 0, 10)) {
        /* Placing the job would fail on every try: the executor fetches judges from the catalog. */
        http_reply_error(r, 404, "method.reinforcement.grader", "model_not_found",
                         "grader: judge model %s is not in the model catalog (GET /v1/models lists the base models)",
                         db_value(row, 0, 10));
        return;
    }

    /* "auto" hyperparameters become numbers now that the dataset's size is known. */
    struct job_request resolved = {0};
    resolved.method = json_loads(c->method_json, 0, NULL);
    memcpy(resolved.method_type, c->method_type, sizeof resolved.method_type);
    job_request_resolve_auto(&resolved, (size_t)strtoull(db_value(row, 0, 7) ? db_value(row, 0, 7) : "0", NULL, 10));
    char *method = json_dumps(resolved.method, JSON_COMPACT);
    json_decref(resolved.method);
    const char *method_json = http_strdup(r, method);
    free(method);
    c->base_model = http_strdup(r, base_model);
    c->init_checkpoint = init_checkpoint ? http_strdup(r, init_checkpoint) : NULL;
    c->resolved_method = method_json;
    struct estimate_req q = {c->model,         c->base_model, method_json, c->method_type,
                             c->training_file, c->whet_json,  c->cut,      c->dry_run};
    struct estimate_inputs in = {PQgetvalue(row, 0, 11), PQgetvalue(row, 0, 12), PQgetvalue(row, 0, 13),
                                 PQgetvalue(row, 0, 14), PQgetvalue(row, 0, 15), db_value(row, 0, 16),
                                 PQgetvalue(row, 0, 17), PQgetvalue(row, 0, 18), PQgetvalue(row, 0, 7),
                                 PQgetvalue(row, 0, 19), PQgetvalue(row, 0, 20), db_value(row, 0, 21),
                                 db_value(row, 0, 22), db_value(row, 0, 23)};
    estimate_job(r, &q, &in, create_insert, c);
}

static void create_lookup(struct gw_req *r, void *arg) {
    struct create_ctx *c = arg;
    c->cut = estimate_cut(c->method_json, c->whet_json);
    char cut[16];
    snprintf(cut, sizeof cut, "%d", c->cut);
    const char *params[] = {http_tenant_id(r), c->model, c->training_file, c->validation_file, c->method_json, cut};
    db_query(r, "jobs_lookup", 6, params, create_lookup_done, c);
}

static const char *dump_to_pool(struct gw_req *r, const json_t *v) {
    if (!v) return NULL;
    char *text = json_dumps(v, JSON_COMPACT);
    const char *copy = http_strdup(r, text);
    free(text);
    return copy;
}

static void jobs_create(struct gw_req *r) {
    json_t *body = http_body_json(r);
    if (!body) return;
    int dry_run = estimate_take_dry_run(r, body);
    if (dry_run < 0) {
        json_decref(body);
        return;
    }
    struct job_request req;
    char param[JOB_PARAM_MAX];
    struct whet_err err;
    int rc = job_request_parse(body, &req, param, &err);
    json_decref(body);
    if (rc) {
        http_reply_error(r, 400, param[0] ? param : NULL, "invalid_request", "%s", err.msg);
        return;
    }
    struct create_ctx *c = http_alloc(r, sizeof *c);
    memset(c, 0, sizeof *c);
    c->model = http_strdup(r, req.model);
    c->training_file = http_strdup(r, req.training_file);
    c->validation_file = req.validation_file ? http_strdup(r, req.validation_file) : NULL;
    c->suffix = req.suffix ? http_strdup(r, req.suffix) : NULL;
    memcpy(c->method_type, req.method_type, sizeof c->method_type);
    c->method_json = dump_to_pool(r, req.method);
    c->metadata_json = dump_to_pool(r, req.metadata);
    c->whet_json = dump_to_pool(r, req.whet);
    uint32_t seed = 0;
    if (req.has_seed) {
        seed = (uint32_t)req.seed;
    } else {
        whet_random_bytes(&seed, sizeof seed);
        seed &= 0x7fffffff;
    }
    snprintf(c->seed, sizeof c->seed, "%u", seed);
    snprintf(c->priority, sizeof c->priority, "%d", req.priority);
    job_request_free(&req);
    c->dry_run = dry_run;
    if (dry_run) create_lookup(r, c); /* creates nothing: no Idempotency-Key to keep */
    else idem_begin(r, create_lookup, c);
}

/* ---------------------------------------------------------------- list and retrieve */

static void jobs_list(struct gw_req *r) {
    struct files_page *page = files_page_new(r, 20, 100, NULL, job_row_to_json);
    if (!page) return;
    /* metadata[key]=value filters, all of which must match (jsonb containment). */
    const struct http_kv *kv;
    size_t nkv = http_query_params(r, &kv);
    json_t *filter = NULL;
    for (size_t i = 0; i < nkv; i++) {
        size_t klen = strlen(kv[i].key);
        if (strncmp(kv[i].key, "metadata[", 9) != 0) continue;
        if (klen < 11 || kv[i].key[klen - 1] != ']' || !files_text_ok(kv[i].key, klen) ||
            !files_text_ok(kv[i].value, strlen(kv[i].value))) {
            json_decref(filter);
            http_reply_error(r, 400, kv[i].key, "invalid_value", "%s: expected metadata[KEY]=VALUE", kv[i].key);
            return;
        }
        if (!filter) filter = json_object();
        char *name = http_strndup(r, kv[i].key + 9, klen - 10);
        json_object_set_new(filter, name, json_string(kv[i].value));
    }
    const char *filter_json = dump_to_pool(r, filter);
    json_decref(filter);
    if (filter_json) {
        const char *params[] = {http_tenant_id(r), http_query_param(r, "after"), filter_json, page->fetch};
        db_query(r, "jobs_list_metadata", 4, params, files_page_done, page);
    } else {
        const char *params[] = {http_tenant_id(r), http_query_param(r, "after"), page->fetch};
        db_query(r, "jobs_list", 3, params, files_page_done, page);
    }
}

static void jobs_get(struct gw_req *r) { files_retrieve(r, "jobs_get", "fine-tuning job", job_row_to_json); }

/* ---------------------------------------------------------------- cancel, pause, resume */

/* One state change: the statement that applies it (and records an event when something changed), and
 * the statuses from which the request succeeds (including where it already holds: a retried request
 * answers like the first). */
struct state_change {
    const char *stmt;
    const char *verb;
    const char *const ok_from[6];
};

static const struct state_change change_cancel = {
    "jobs_cancel", "cancelled", {"validating_files", "queued", "running", "paused", "cancelled", NULL}};
static const struct state_change change_pause = {"jobs_pause", "paused", {"queued", "running", "paused", NULL}};
static const struct state_change change_resume = {"jobs_resume", "resumed", {"paused", "queued", "running", NULL}};

static void state_done(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct state_change *change = arg;
    if (idem_reply_unless_found(r, res, 0, "fine-tuning job")) return;
    const char *status = PQgetvalue(res->res[0], 0, 0);
    int ok = 0;
    for (const char *const *s = change->ok_from; *s; s++)
        if (strcmp(*s, status) == 0) ok = 1;
    if (!ok) {
        idem_reply_error(r, 409, "id", "invalid_job_state", "fine-tuning job %s is %s and cannot be %s",
                         http_path_param(r, "id"), status, change->verb);
        return;
    }
    idem_reply_json(r, 200, job_row_to_json(res->res[1], 0));
}

static void state_change_start(struct gw_req *r, void *arg) {
    const struct state_change *change = arg;
    const char *event_id = files_new_id(r, "ftevent-");
    const char *update[] = {http_tenant_id(r), http_path_param(r, "id"), event_id};
    const char *get[] = {http_tenant_id(r), http_path_param(r, "id")};
    const char *notify[] = {http_tenant_id(r), http_path_param(r, "id")};
    struct db_stmt stmts[4] = {
        {change->stmt, NULL, 3, update},
        {"jobs_get", NULL, 2, get},
        {"jobs_notify", NULL, 2, notify},
    };
    db_transaction(r, stmts, idem_reserve(r, stmts, 3), state_done, (void *)change);
}

static void jobs_cancel(struct gw_req *r) { idem_begin(r, state_change_start, (void *)&change_cancel); }
static void jobs_pause(struct gw_req *r) { idem_begin(r, state_change_start, (void *)&change_pause); }
static void jobs_resume(struct gw_req *r) { idem_begin(r, state_change_start, (void *)&change_resume); }

/* ---------------------------------------------------------------- events and checkpoints */

/* The job must be the tenant's (else 404), then a page of its `stmt` rows, newest first. */
static void job_page(struct gw_req *r, const char *stmt, int def_limit, json_t *(*to_json)(const PGresult *, int)) {
    struct files_page *p = files_page_new(r, def_limit, 100, "fine-tuning job", to_json);
    if (!p) return;
    const char *job[] = {http_tenant_id(r), http_path_param(r, "id")};
    const char *page[] = {http_tenant_id(r), http_path_param(r, "id"), http_query_param(r, "after"), p->fetch};
    struct db_stmt stmts[] = {
        {"jobs_exists", NULL, 2, job}, {"jobs_page_custom_plan", NULL, 0, NULL}, {stmt, NULL, 4, page}};
    db_transaction(r, stmts, 3, files_page_done, p);
}

static void jobs_events(struct gw_req *r) { job_page(r, "jobs_events", 20, event_row_to_json); }
static void jobs_checkpoints(struct gw_req *r) { job_page(r, "jobs_checkpoints", 10, checkpoint_row_to_json); }

/* Pin and unpin (a whet extension): a pinned checkpoint outlives the operator's retention of a job's newest
 * checkpoints (`whet scheduler --checkpoint-keep`); unpinned, it follows that rule again. Setting what
 * already holds answers the same, so a retry needs no idempotency key. */
static void pin_done(struct gw_req *r, const struct db_result *res, void *arg) {
    (void)arg;
    if (db_reply_failed(r, res)) return;
    if (PQntuples(res->res[0]) == 0) {
        http_reply_error(r, 404, "checkpoint", "not_found", "fine-tuning job %s has no checkpoint %s",
                         http_path_param(r, "id"), http_path_param(r, "checkpoint"));
        return;
    }
    http_reply_json(r, 200, checkpoint_row_to_json(res->res[0], 0));
}

static void set_pinned(struct gw_req *r, const char *pinned) {
    const char *params[] = {http_tenant_id(r), http_path_param(r, "id"), http_path_param(r, "checkpoint"), pinned};
    db_query(r, "jobs_checkpoint_pin", 4, params, pin_done, NULL);
}

static void jobs_checkpoint_pin(struct gw_req *r) { set_pinned(r, "true"); }
static void jobs_checkpoint_unpin(struct gw_req *r) { set_pinned(r, "false"); }

/* ---------------------------------------------------------------- routes */

static void jobs_prepare(void) {
    idem_prepare();
    estimate_prepare();
    /* The model: a base model, the tenant's succeeded job's fine-tuned model (continued from its last
     * checkpoint; not once the retention removed its files), or one of the tenant's checkpoints; then both files, as the tenant sees them; then
     * the first judge model a score_model or label_model grader names (at any depth of a multi
     * grader) that the catalog lacks; and what the estimate starts from (migration 0057: one statement, whose
     * probes for a fine-tuned model or a judge run only when they can find one; migration 0063: with the count
     * kept for the file at the job's max_seq_len, the previous job, the time and the shared inputs' version). */
    db_prepare_read("jobs_lookup",
                    "SELECT * FROM whet_job_create_lookup($1, $2, $3, $4, $5::jsonb, $6::integer)");
    /* The estimate the gateway made, checked against the budget (ESTIMATE_SQL, estimate.h), then the row with it
     * unless that refuses the job, its "created" event, a warning event when the estimate takes the month's
     * spend past the soft budget, and the scheduler's NOTIFY (the job's columns, NULL when it was refused, the
     * NOTIFY, then ESTIMATE_SQL's). The commit bumps the tenant's counter of active jobs (a deferred trigger,
     * migration 0064) and fails, rolling it all back, when that passed the tenant's limit: the counter's row is
     * locked only for the commit, not through a shared transaction's later statements (db.c). */
    db_prepare("jobs_create",
               "WITH s (e, b, over_hard, over_soft, key_limit, key_spent) AS (" ESTIMATE_SQL "), "
               "j AS (INSERT INTO jobs (id, tenant_id, model, base_model, init_checkpoint, training_file, "
               "validation_file, method, suffix, seed, metadata, whet, status, created_at, priority, estimate, "
               "api_key_id) SELECT $6, $7, $8, $9, $10, $11, $12, $13::jsonb, $14, $15::integer, $16::jsonb, "
               "$17::jsonb, 'queued', $18::bigint, $19::integer, s.e, $20 FROM s "
               "WHERE s.e IS NOT NULL AND s.over_hard IS NOT TRUE AND s.key_limit IS NULL RETURNING *), "
               "c AS (INSERT INTO job_events (id, tenant_id, job_id, message, created_at) "
               "SELECT $21, tenant_id, id, 'Created fine-tuning job: ' || id, created_at FROM j), "
               "w AS (INSERT INTO job_events (id, tenant_id, job_id, level, message, data, created_at) "
               "SELECT $22, j.tenant_id, j.id, 'warn', 'This job''s estimated cost takes the month''s spend past the "
               "soft budget', s.b, j.created_at FROM j, s WHERE s.over_soft) "
               "SELECT " NEW_JOB_COLUMNS ", CASE WHEN j.id IS NOT NULL THEN pg_notify('whet_jobs', j.id) END, s.* "
               "FROM s LEFT JOIN j ON true");
    db_prepare("jobs_notify", "SELECT pg_notify('whet_jobs', id) FROM jobs WHERE tenant_id = $1 AND id = $2");
    db_prepare_read("jobs_get", "SELECT " JOB_COLUMNS " FROM" JOB_FROM "WHERE j.tenant_id = $1 AND j.id = $2");
    db_prepare("jobs_exists", "SELECT 1 FROM jobs WHERE tenant_id = $1 AND id = $2");
    /* Pages: the cursor's bound is one expression (no OR), so that even a generic plan starts the
     * index scan at the cursor; an unknown cursor yields an empty page. A job's events and checkpoints
     * find the cursor by its id alone (a generic plan would otherwise walk the job's rows for it).
     * A jobs page's jobs are picked from the tenant's index alone (an index-only scan of (tenant_id, seq)),
     * then read: with the page and its order in one scan, the planner could prefer walking every tenant's
     * jobs by seq, filtering for this one's, which reads every job made after this tenant's newest
     * (scale_plans: 2,100 rows for a page of 20 with 40 other tenants busy). A metadata filter needs the
     * rows themselves. */
    db_prepare_read("jobs_list", "SELECT " JOB_COLUMNS " FROM" JOB_FROM "WHERE j.tenant_id = $1 AND j.seq = ANY (ARRAY("
                                 "SELECT seq FROM jobs WHERE tenant_id = $1 AND seq < " JOB_CURSOR_SEQ
                                 " ORDER BY seq DESC LIMIT $3)) ORDER BY j.seq DESC");
    db_prepare_read("jobs_list_metadata",
                    "SELECT " JOB_COLUMNS " FROM" JOB_FROM "WHERE j.tenant_id = $1 AND j.seq < " JOB_CURSOR_SEQ
                    " AND j.metadata @> $3::jsonb ORDER BY j.seq DESC LIMIT $4");
    /* State changes: lock the row (FOR NO KEY UPDATE: a heartbeat's key check of the job's new progress row
     * does not wait for it), change it where the rules allow, record an event when it changed, and return the
     * status it had (the handler tells "not found" from "not allowed" with it). */
    db_prepare("jobs_cancel",
               "WITH o AS (SELECT id, tenant_id, status, desired FROM jobs WHERE tenant_id = $1 AND id = $2 FOR NO KEY "
               "UPDATE), "
               "u AS (UPDATE jobs j SET desired = 'cancel', "
               "  status = CASE WHEN o.status = 'running' THEN o.status ELSE 'cancelled' END, "
               "  finished_at = CASE WHEN o.status = 'running' THEN j.finished_at ELSE whet_now() END "
               "  FROM o WHERE j.id = o.id AND (o.status IN ('validating_files', 'queued', 'paused') "
               "  OR (o.status = 'running' AND o.desired <> 'cancel')) RETURNING j.id, j.tenant_id, j.status), "
               "e AS (INSERT INTO job_events (id, tenant_id, job_id, message) SELECT $3, u.tenant_id, u.id, "
               "  CASE WHEN u.status = 'cancelled' THEN 'Fine-tuning job cancelled' "
               "  ELSE 'Cancellation requested; the job stops at its next checkpoint' END FROM u) "
               "SELECT status, desired FROM o");
    db_prepare("jobs_pause",
               "WITH o AS (SELECT id, tenant_id, status, desired FROM jobs WHERE tenant_id = $1 AND id = $2 FOR NO KEY "
               "UPDATE), "
               "u AS (UPDATE jobs j SET desired = 'pause', "
               "  status = CASE WHEN o.status = 'queued' THEN 'paused' ELSE o.status END "
               "  FROM o WHERE j.id = o.id AND (o.status = 'queued' OR (o.status = 'running' AND o.desired = 'run')) "
               "  RETURNING j.id, j.tenant_id, j.status), "
               "e AS (INSERT INTO job_events (id, tenant_id, job_id, message) SELECT $3, u.tenant_id, u.id, "
               "  CASE WHEN u.status = 'paused' THEN 'Fine-tuning job paused' "
               "  ELSE 'Pause requested; the job stops at its next checkpoint' END FROM u) "
               "SELECT status, desired FROM o");
    db_prepare("jobs_resume",
               "WITH o AS (SELECT id, tenant_id, status, desired FROM jobs WHERE tenant_id = $1 AND id = $2 FOR NO KEY "
               "UPDATE), "
               "u AS (UPDATE jobs j SET desired = 'run', "
               "  status = CASE WHEN o.status = 'paused' THEN 'queued' ELSE o.status END "
               "  FROM o WHERE j.id = o.id AND (o.status = 'paused' OR (o.status = 'running' AND o.desired = 'pause')) "
               "  RETURNING j.id, j.tenant_id, j.status), "
               "e AS (INSERT INTO job_events (id, tenant_id, job_id, message) SELECT $3, u.tenant_id, u.id, "
               "  CASE WHEN u.status = 'queued' THEN 'Fine-tuning job resumed' "
               "  ELSE 'Pause withdrawn; the job keeps running' END FROM u) "
               "SELECT status, desired FROM o");
    /* A job's page is planned for that job: the generic plan, costed for a job of a few rows, read one
     * job's 4k events of the month in order to sort them (its partitions' index scans appended, then sorted,
     * in scale_plans) where an ordered scan of each partition reads a page's rows. Custom plans for the rest
     * of the page's transaction only. */
    db_prepare("jobs_page_custom_plan", "SELECT set_config('plan_cache_mode', 'force_custom_plan', true)");
    db_prepare("jobs_events",
               "SELECT id, created_at, level, message, data, type FROM job_events WHERE tenant_id = $1 AND job_id = $2 "
               "AND seq < CASE WHEN $3::text IS NULL THEN 9223372036854775807 ELSE (SELECT CASE WHEN tenant_id = $1 "
               "AND job_id = $2 THEN seq END FROM job_events WHERE id = $3) END ORDER BY seq DESC LIMIT $4");
    db_prepare("jobs_checkpoints",
               "SELECT " CHECKPOINT_COLUMNS " FROM checkpoints "
               "WHERE tenant_id = $1 AND job_id = $2 AND seq < CASE WHEN $3::text IS NULL THEN 9223372036854775807 "
               "ELSE (SELECT CASE WHEN tenant_id = $1 AND job_id = $2 THEN seq END FROM checkpoints WHERE id = $3) END "
               "ORDER BY seq DESC LIMIT $4");
    db_prepare("jobs_checkpoint_pin",
               "UPDATE checkpoints SET pinned = $4::boolean WHERE tenant_id = $1 AND job_id = $2 "
               "AND id = $3 RETURNING " CHECKPOINT_COLUMNS);
}

void jobs_routes(struct http_router *rt) {
    jobs_prepare();
    http_route(rt, "POST", "/v1/fine_tuning/jobs", jobs_create, 0, "jobs.create");
    http_route(rt, "GET", "/v1/fine_tuning/jobs", jobs_list, 0, "jobs.list");
    http_route(rt, "GET", "/v1/fine_tuning/jobs/{id}", jobs_get, 0, "jobs.retrieve");
    http_route(rt, "POST", "/v1/fine_tuning/jobs/{id}/cancel", jobs_cancel, 0, "jobs.cancel");
    http_route(rt, "POST", "/v1/fine_tuning/jobs/{id}/pause", jobs_pause, 0, "jobs.pause");
    http_route(rt, "POST", "/v1/fine_tuning/jobs/{id}/resume", jobs_resume, 0, "jobs.resume");
    http_route(rt, "GET", "/v1/fine_tuning/jobs/{id}/events", jobs_events, 0, "jobs.events");
    http_route(rt, "GET", "/v1/fine_tuning/jobs/{id}/checkpoints", jobs_checkpoints, 0, "jobs.checkpoints");
    http_route(rt, "POST", "/v1/fine_tuning/jobs/{id}/checkpoints/{checkpoint}/pin", jobs_checkpoint_pin, 0,
               "jobs.checkpoints.pin");
    http_route(rt, "POST", "/v1/fine_tuning/jobs/{id}/checkpoints/{checkpoint}/unpin", jobs_checkpoint_unpin, 0,
               "jobs.checkpoints.unpin");
}
