/* estimate.c - job estimates and the budget's hard cap on create (see estimate.h). */
#include "estimate.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "chat_template.h"
#include "db.h"
#include "dpo_data.h"
#include "env.h"
#include "files_common.h"
#include "idempotency.h"
#include "job_estimate.h"
#include "job_sizing.h"
#include "job_spec.h"
#include "json_text.h"
#include "log.h"
#include "rft_data.h"
#include "sft_data.h"
#include "tokenizer.h"
#include "trainer_settings.h"

int estimate_take_dry_run(struct gw_req *r, json_t *body) {
    json_t *whet = json_object_get(body, "whet");
    json_t *dry = json_is_object(whet) ? json_object_get(whet, "dry_run") : NULL;
    if (!dry) return 0;
    if (!json_is_boolean(dry)) {
        http_reply_error(r, 400, "whet.dry_run", "invalid_request", "whet.dry_run: expected a boolean, found %s",
                         json_is_string(dry)   ? "a string"
                         : json_is_number(dry) ? "a number"
                                               : "another value");
        return -1;
    }
    int on = json_is_true(dry);
    json_object_del(whet, "dry_run");
    return on;
}

struct estimate_ctx {
    struct estimate_req q;
    estimate_next_fn next;
    void *arg;
    const char *counted; /* the count: a dry run's (or why it failed), else the one kept, else NULL */
    const char *sizing;  /* the gang sizing chooses (JSON), its device type (NULL when it names none) and count */
    const char *sizing_device;
    int sizing_devices;
    const char *pools;   /* the fleet's pools (whet_sizing_pools' JSON) */
    const char *rollout; /* reinforcement's {n, max_tokens, ppo_epochs} (JSON), else NULL */
    /* the lookup's inputs (estimate_inputs), copied: a count and a read of the shared inputs come between */
    long long file_bytes, file_lines, now, inputs_version;
    double prev_per_step; /* JOB_ESTIMATE_NULL when no previous job */
    int result;           /* which statement's result holds the estimate */
};

/* A refusal of the create, kept in the request's pool while an Idempotency-Key's reservation is released. */
struct refusal {
    int status;
    const char *param, *code, *hint, *message;
};

static void refusal_answer(struct gw_req *r, void *arg) {
    const struct refusal *f = arg;
    if (f->hint) http_reply_error_hint(r, f->status, f->param, f->code, f->hint, "%s", f->message);
    else http_reply_error(r, f->status, f->param, f->code, "%s", f->message);
}

static int refuse(struct gw_req *r, int status, const char *param, const char *code, const char *hint,
                  const char *message) {
    struct refusal *f = http_alloc(r, sizeof *f);
    *f = (struct refusal){status, param, code, hint, http_strdup(r, message)};
    idem_release_then(r, refusal_answer, f);
    return 1;
}

int estimate_refuses(struct gw_req *r, const PGresult *res, int col, const char *training_file, int dry_run) {
    char message[512];
    if (PQgetisnull(res, 0, col)) { /* no estimate: the training file went since the lookup found it */
        snprintf(message, sizeof message, "no such file: %s", training_file);
        return refuse(r, 404, "training_file", "file_not_found", NULL, message);
    }
    if (dry_run) return 0;
    if (!PQgetisnull(res, 0, col + 4)) {
        snprintf(message, sizeof message,
                 "this job's estimated cost would take this API key's spend this month (%s) past its monthly limit "
                 "of %s",
                 PQgetvalue(res, 0, col + 5), PQgetvalue(res, 0, col + 4));
        return refuse(r, 429, NULL, "insufficient_quota", "ask for a higher limit on this API key, or use another",
                      message);
    }
    if (!strcmp(PQgetvalue(res, 0, col + 2), "t")) {
        json_t *b = db_json_value(res, 0, col + 1), *e = db_json_value(res, 0, col);
        snprintf(message, sizeof message,
                 "this job's estimated cost (%g %s) would take the month's spend (%g) past the monthly limit of %g",
                 json_number_value(json_object_get(json_object_get(e, "cost"), "amount")),
                 json_string_value(json_object_get(b, "currency")), json_number_value(json_object_get(b, "spent")),
                 json_number_value(json_object_get(b, "monthly_limit")));
        json_decref(b);
        json_decref(e);
        return refuse(r, 429, NULL, "insufficient_quota", "ask your operator to raise the monthly limit", message);
    }
    return 0;
}

/* A dry run's answer: the estimate with the budget (ESTIMATE_SQL's columns). */
static void estimate_done(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct estimate_ctx *c = arg;
    if (db_reply_failed(r, res)) return;
    const PGresult *row = res->res[c->result];
    if (estimate_refuses(r, row, 0, c->q.training_file, 1)) return;
    json_t *e = db_json_value(row, 0, 0);
    json_object_set_new(e, "model", json_string(c->q.model));
    json_object_set_new(e, "training_file", json_string(c->q.training_file));
    json_object_set_new(e, "dry_run", json_true());
    json_object_set_new(e, "budget", db_json_value(row, 0, 1));
    json_object_set_new(e, "within_budget",
                        json_boolean(strcmp(PQgetvalue(row, 0, 2), "t") != 0 && PQgetisnull(row, 0, 4)));
    http_reply_json(r, 200, e);
}

/* ---------------------------------------------------------------- the shared inputs (migration 0063) */

/* whet_estimate_inputs()'s answer, kept by the gateway until the lookup shows a newer version: the price books
 * in effect and to come, and every model's measured throughput. Immutable once read; the requests of every
 * event loop use it at once (a reference each, under the lock), the last to drop it frees it. */
struct shared_inputs {
    long long version;
    int refs;
    json_t *json; /* {version, currency, books: [{effective_from, currency, prices}], throughput: [[...]]} */
};

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shared_inputs *shared; /* the newest read, with the cache's reference */

static void shared_put(struct shared_inputs *s) {
    pthread_mutex_lock(&shared_lock);
    int last = --s->refs == 0;
    pthread_mutex_unlock(&shared_lock);
    if (!last) return;
    json_decref(s->json);
    free(s);
}

/* The kept inputs, when at least as new as `version`, with a reference for the caller; else NULL. */
static struct shared_inputs *shared_get(long long version) {
    pthread_mutex_lock(&shared_lock);
    struct shared_inputs *s = shared && shared->version >= version ? shared : NULL;
    if (s) s->refs++;
    pthread_mutex_unlock(&shared_lock);
    return s;
}

/* Keeps inputs just read (unless newer ones were kept meanwhile); returns them with a reference. */
static struct shared_inputs *shared_keep(json_t *json) {
    struct shared_inputs *s = xcalloc(1, sizeof *s), *dropped = NULL;
    s->version = json_integer_value(json_object_get(json, "version"));
    s->json = json;
    s->refs = 2; /* the caller's and, unless newer ones are kept, the cache's */
    pthread_mutex_lock(&shared_lock);
    if (!shared || shared->version < s->version) {
        dropped = shared;
        shared = s;
    } else {
        s->refs--;
    }
    pthread_mutex_unlock(&shared_lock);
    if (dropped) shared_put(dropped);
    return s;
}

/* The price book in effect at `now` (books come oldest first), or NULL. */
static json_t *book_in_effect(const struct shared_inputs *s, long long now) {
    json_t *books = json_object_get(s->json, "books"), *book, *found = NULL;
    size_t i;
    json_array_foreach(books, i, book) {
        if (json_integer_value(json_object_get(book, "effective_from")) <= now) found = book;
    }
    return found;
}

static const char *book_price(json_t *book, const char *key) {
    return json_string_value(json_object_get(json_object_get(book, "prices"), key));
}

/* Tokens a device-second on `device` (whet_job_estimate's second and third statements): this model's by this
 * method, else by any method weighted by jobs, else every model's weighted by jobs, else 1000. A rate that is
 * not positive is taken as not measured (the SQL divided by it and failed). Sums run in whet_throughput's
 * order (base model, device type, method); for one model that is the order of the SQL's own sum, for every
 * model's it may not be, and a sum of several models' rates can differ from the SQL's in its last bit. */
static double throughput(const struct shared_inputs *s, const char *base, const char *method, const char *device,
                         const char **source) {
    json_t *rows = json_object_get(s->json, "throughput"), *row;
    double by_method = -1, model_sum = 0, model_jobs = 0, all_sum = 0, all_jobs = 0;
    size_t i;
    json_array_foreach(rows, i, row) {
        if (strcmp(json_string_value(json_array_get(row, 1)), device) != 0) continue;
        double rate = json_number_value(json_array_get(row, 3));
        double jobs = json_number_value(json_array_get(row, 4));
        all_sum += rate * jobs;
        all_jobs += jobs;
        if (strcmp(json_string_value(json_array_get(row, 0)), base) != 0) continue;
        model_sum += rate * jobs;
        model_jobs += jobs;
        if (method && !strcmp(json_string_value(json_array_get(row, 2)), method)) by_method = rate;
    }
    double rate;
    if (by_method > 0 && isfinite(by_method)) {
        *source = "model_device_method";
        return by_method;
    }
    if (model_jobs > 0 && (rate = model_sum / model_jobs) > 0 && isfinite(rate)) {
        *source = "model_device";
        return rate;
    }
    if (all_jobs > 0 && (rate = all_sum / all_jobs) > 0 && isfinite(rate)) {
        *source = "device";
        return rate;
    }
    *source = "fallback_1000_tokens_per_s";
    return 1000;
}

/* The fleet's device type with the most ready nodes (ties: the first by name), from whet_sizing_pools. Its
 * SQL broke ties in the database's collation; here bytes order them. */
static const char *fleet_device(struct gw_req *r, const char *pools_json) {
    json_t *pools = json_loads(pools_json, 0, NULL), *p, *q;
    const char *best = NULL;
    long long best_nodes = 0;
    size_t i, j;
    json_array_foreach(pools, i, p) {
        const char *type = json_string_value(json_object_get(p, "device_type"));
        if (!type) continue;
        long long nodes = 0;
        json_array_foreach(pools, j, q) {
            const char *other = json_string_value(json_object_get(q, "device_type"));
            if (other && !strcmp(other, type)) nodes += json_integer_value(json_object_get(q, "nodes"));
        }
        if (nodes > 0 && (!best || nodes > best_nodes || (nodes == best_nodes && strcmp(type, best) < 0))) {
            best = type;
            best_nodes = nodes;
        }
    }
    const char *copy = best ? http_strdup(r, best) : NULL;
    json_decref(pools);
    return copy;
}

static long long json_int_or(json_t *v, long long otherwise) {
    return json_is_integer(v) ? (long long)json_integer_value(v) : otherwise;
}

static double json_number_or_null(json_t *v) { return json_is_number(v) ? json_number_value(v) : JOB_ESTIMATE_NULL; }

/* The estimate (job_estimate.h) as JSON text in the request's pool; NULL when a figure is out of range. */
static const char *estimate_compute(struct gw_req *r, const struct estimate_ctx *c, const struct shared_inputs *s) {
    json_t *method = json_loads(c->q.method_json, 0, NULL);
    json_t *whet = json_loads(c->q.whet_json ? c->q.whet_json : "{}", 0, NULL);
    json_t *counted = c->counted ? json_loads(c->counted, 0, NULL) : NULL;
    json_t *rollout = c->rollout ? json_loads(c->rollout, 0, NULL) : NULL;
    const char *type = json_string_value(json_object_get(method, "type"));
    json_t *hp = json_object_get(json_object_get(method, type ? type : ""), "hyperparameters");
    long long epochs = json_int_or(json_object_get(hp, "n_epochs"), 1),
              batch = json_int_or(json_object_get(hp, "batch_size"), 1);
    json_t *max_steps = json_object_get(whet, "max_steps"), *source = json_object_get(counted, "source");
    struct job_estimate_in in = {
        .method = type,
        .epochs = epochs > 1 ? epochs : 1,
        .batch = batch > 1 ? batch : 1,
        .has_max_steps = json_is_integer(max_steps),
        .max_steps = json_int_or(max_steps, 0),
        .reinforcement = type && !strcmp(type, "reinforcement"),
        .n = json_number_value(json_object_get(rollout, "n")),
        .max_tokens = json_number_value(json_object_get(rollout, "max_tokens")),
        .ppo_epochs = json_number_or_null(json_object_get(rollout, "ppo_epochs")),
        .tokenization = c->counted,
        .count_source = json_string_value(source),
        .count_examples = source ? json_int_or(json_object_get(counted, "examples"), -1) : -1,
        .count_tokens = source ? json_number_or_null(json_object_get(counted, "tokens")) : JOB_ESTIMATE_NULL,
        .count_prompt_tokens =
            source ? json_number_or_null(json_object_get(counted, "prompt_tokens")) : JOB_ESTIMATE_NULL,
        .file_bytes = c->file_bytes,
        .file_lines = c->file_lines,
        .per_step = c->prev_per_step,
        .sizing = c->sizing,
        .rollout = c->rollout,
    };
    /* the sizing's device type, else whet.gpu_types' first, else the fleet's most common, else cpu */
    const char *gpu_type = json_string_value(json_array_get(json_object_get(whet, "gpu_types"), 0));
    const char *fleet = c->sizing_device || gpu_type ? NULL : fleet_device(r, c->pools);
    in.device = c->sizing_device ? c->sizing_device : gpu_type ? gpu_type : fleet ? fleet : "cpu";
    in.device_source = c->sizing_device ? "sizing" : gpu_type ? "whet.gpu_types" : fleet ? "fleet" : "default";
    in.devices = c->sizing_devices > 1 ? c->sizing_devices : 1;
    in.rate = throughput(s, c->q.base_model, type, in.device, &in.rate_source);
    json_t *book = book_in_effect(s, c->now);
    in.currency = book ? json_string_value(json_object_get(book, "currency"))
                       : json_string_value(json_object_get(s->json, "currency"));
    char *device_key = xasprintf("device_hour:%s", in.device);
    in.device_hour = book_price(book, device_key) ? book_price(book, device_key) : book_price(book, "device_hour:");
    free(device_key);
    in.tokens_1m = book_price(book, "trained_tokens_1m:");
    in.rollout_1m = book_price(book, "rollout_completion_tokens_1m:");
    struct whet_buf out = {0};
    const char *text = job_estimate_json(&in, &out) == 0 ? http_strdup(r, out.data) : NULL;
    whet_buf_free(&out);
    json_decref(rollout);
    json_decref(counted);
    json_decref(whet);
    json_decref(method);
    return text;
}

/* The estimate made, ESTIMATE_SQL's parameters: a dry run runs it (after keeping its count when there is one to
 * keep), a create hands them on to its insert. */
static void estimate_with(struct gw_req *r, struct estimate_ctx *c, struct shared_inputs *s) {
    const char *e = estimate_compute(r, c, s);
    shared_put(s);
    if (!e) {
        log_error("msg=\"estimate: a figure out of range\" model=%s file=%s", c->q.base_model, c->q.training_file);
        http_reply_error(r, 500, NULL, "server_error", "the job's estimate came out of range; tell your operator");
        return;
    }
    const struct estimate_req *q = &c->q;
    const char *p[ESTIMATE_NPARAMS] = {e, q->training_file, http_tenant_id(r), r->api_key_id[0] ? r->api_key_id : NULL,
                                       q->dry_run ? "t" : "f"};
    if (!q->dry_run) {
        c->next(r, p, c->arg);
        return;
    }
    int keep_count = c->result;
    char seq[16];
    snprintf(seq, sizeof seq, "%d", q->cut);
    const char *keep[] = {q->training_file, http_tenant_id(r), q->base_model, seq, c->counted};
    struct db_stmt stmts[2] = {{"estimate_keep_count", NULL, 5, keep}, {"jobs_estimate", NULL, ESTIMATE_NPARAMS, p}};
    db_transaction(r, stmts + !keep_count, 1 + keep_count, estimate_done, c);
}

static void shared_read_done(struct gw_req *r, const struct db_result *res, void *arg) {
    if (db_reply_failed(r, res)) return;
    json_t *json = db_json_value(res->res[0], 0, 0);
    if (!json_is_object(json)) {
        json_decref(json);
        http_reply_error(r, 500, NULL, "server_error", "whet_estimate_inputs() answered no object");
        return;
    }
    estimate_with(r, arg, shared_keep(json));
}

/* Estimates the job with the shared inputs kept, or read first when the lookup saw a newer version. A dry run
 * that counted keeps its count first (c->result: 1). */
static void estimate_query(struct gw_req *r, struct estimate_ctx *c, int keep_count) {
    c->result = keep_count;
    struct shared_inputs *s = shared_get(c->inputs_version);
    if (s) estimate_with(r, c, s);
    else db_query(r, "estimate_inputs", 0, NULL, shared_read_done, c);
}

/* ---------------------------------------------------------------- the base models' tokenizers */

#define ESTIMATE_CONFIG_MAX (64u << 20) /* a 150k-token vocabulary's tokenizer.json is ~10 MB */

/* One of a base model's files from the object store. */
static int get_model_file(struct objstore *store, const char *key, char **data, size_t *len, struct whet_err *err) {
    *data = NULL;
    int rc = objstore_get(store, key, data, len, ESTIMATE_CONFIG_MAX, err);
    if (rc == OBJSTORE_NOT_FOUND) return whet_errf(err, "%s: not in the object store (the base model's files)", key);
    return rc ? -1 : 0;
}

/* The tokenizer and chat template of a base model, from its copy in the object store. */
static int load_model_text(struct objstore *store, const char *prefix, struct tokenizer **tok,
                           struct chat_template *tpl, struct whet_err *err) {
    char *key = xasprintf("%s/tokenizer.json", prefix), *data;
    size_t len;
    int rc = get_model_file(store, key, &data, &len, err);
    if (rc == 0) rc = tokenizer_load_json(data, len, key, tok, err);
    free(data);
    free(key);
    if (rc) return -1;
    key = xasprintf("%s/tokenizer_config.json", prefix);
    rc = get_model_file(store, key, &data, &len, err);
    json_error_t jerr;
    json_t *config = rc == 0 ? json_loadb(data, len, 0, &jerr) : NULL;
    if (rc == 0 && !config) rc = whet_errf(err, "%s: line %d: %s", key, jerr.line, jerr.text);
    if (rc == 0) rc = chat_template_from_config(tpl, config, key, err);
    json_decref(config);
    free(data);
    free(key);
    return rc;
}

/* Tokenizers and chat templates loaded for dry runs, kept so that the next dry run on the same model does
 * not read and parse its files again (Qwen3's 151k-token tokenizer.json, 11 MB, takes 2 s to load here).
 * Keyed by the model's object prefix and checksum (a model registered again with other files is loaded
 * again); at most ESTIMATE_TOKENIZERS entries, the least recently used dropped. Counts run on the
 * gateway's worker threads at once: a loaded tokenizer and template are immutable and shared
 * (tokenizer.h), the list is under a mutex, and an entry holds a reference per count using it, so one
 * dropped meanwhile is freed by its last user. Two counts that miss at once both load; the second to
 * finish uses the first's. */
#define ESTIMATE_TOKENIZERS 4

struct model_text {
    char *key; /* "object prefix\nsha256" */
    struct tokenizer *tok;
    struct chat_template tpl;
    int refs; /* the cache's, and one per count using it */
    struct model_text *next;
};

static pthread_mutex_t model_texts_lock = PTHREAD_MUTEX_INITIALIZER;
static struct model_text *model_texts; /* most recently used first */

static void model_text_free(struct model_text *m) {
    chat_template_free(&m->tpl);
    tokenizer_free(m->tok);
    free(m->key);
    free(m);
}

/* Drops a reference (under the lock); returns the entry when that was the last, for the caller to free
 * after unlocking. */
static struct model_text *model_text_unref(struct model_text *m) { return --m->refs == 0 ? m : NULL; }

static void model_text_put(struct model_text *m) {
    pthread_mutex_lock(&model_texts_lock);
    struct model_text *last = model_text_unref(m);
    pthread_mutex_unlock(&model_texts_lock);
    if (last) model_text_free(last);
}

/* The cached entry for `key`, moved to the front with a reference for the caller; NULL when absent.
 * Called under the lock. */
static struct model_text *model_text_find(const char *key) {
    for (struct model_text **p = &model_texts; *p; p = &(*p)->next) {
        struct model_text *m = *p;
        if (strcmp(m->key, key) != 0) continue;
        *p = m->next;
        m->next = model_texts;
        model_texts = m;
        m->refs++;
        return m;
    }
    return NULL;
}

/* The tokenizer and chat template of a base model, from the cache or its copy in the object store (then
 * cached); *cached says which. The caller gives it back with model_text_put. */
static struct model_text *model_text_get(struct objstore *store, const char *prefix, const char *sha256, int *cached,
                                         struct whet_err *err) {
    char *key = xasprintf("%s\n%s", prefix, sha256);
    pthread_mutex_lock(&model_texts_lock);
    struct model_text *m = model_text_find(key);
    pthread_mutex_unlock(&model_texts_lock);
    *cached = m != NULL;
    if (m) {
        free(key);
        return m;
    }
    struct model_text *loaded = xcalloc(1, sizeof *loaded);
    loaded->key = key;
    loaded->refs = 1;
    if (load_model_text(store, prefix, &loaded->tok, &loaded->tpl, err)) {
        model_text_free(loaded);
        return NULL;
    }
    struct model_text *dropped = NULL; /* entries past the bound, the cache's reference dropped */
    pthread_mutex_lock(&model_texts_lock);
    m = model_text_find(key);
    if (!m) {
        m = loaded;
        loaded = NULL;
        m->refs++;
        m->next = model_texts;
        model_texts = m;
        struct model_text **p = &model_texts;
        for (int i = 0; *p && i < ESTIMATE_TOKENIZERS; i++) p = &(*p)->next;
        for (struct model_text *e = *p, *next; e; e = next) {
            next = e->next;
            if (model_text_unref(e)) {
                e->next = dropped;
                dropped = e;
            }
        }
        *p = NULL;
    }
    pthread_mutex_unlock(&model_texts_lock);
    while (dropped) {
        struct model_text *next = dropped->next;
        model_text_free(dropped);
        dropped = next;
    }
    if (loaded) model_text_free(loaded); /* another count loaded it meanwhile */
    return m;
}

void estimate_free(void) {
    pthread_mutex_lock(&model_texts_lock);
    struct model_text *m = model_texts;
    model_texts = NULL;
    pthread_mutex_unlock(&model_texts_lock);
    while (m) { /* no count runs any more: the gateway's workers are stopped */
        struct model_text *next = m->next;
        model_text_free(m);
        m = next;
    }
    if (shared) shared_put(shared);
    shared = NULL;
}

/* ---------------------------------------------------------------- counting a training file's tokens */

/* What a dry run tokenizes at most ($WHET_ESTIMATE_TOKENIZE_MAX_BYTES overrides it): a larger file's rest
 * is taken to look like the part read (its tokens per byte, its examples per line), so a dry run takes
 * seconds and holds a chunk and one line whatever the file's size. */
#define ESTIMATE_TOKENIZE_MAX_BYTES (32ull << 20)
#define ESTIMATE_CHUNK (1u << 20)

/* The trainer's reader of each method's lines (executor/train/data): sft_data.h, dpo_data.h, rft_data.h. */
enum count_method { COUNT_NONE, COUNT_SFT, COUNT_DPO, COUNT_RFT };

/* One dry run's count, made on a worker thread (object store reads and tokenizing block). */
struct token_count {
    struct estimate_ctx *ctx;
    /* in: copies, since the work must not touch the request */
    char *tenant_id, *file_key, *file_sha256, *model_id, *model_prefix, *model_sha256;
    uint64_t file_bytes, line_count, max_bytes;
    enum count_method method;
    int cut; /* max_seq_len (SFT, DPO), the prompt's limit (RFT): estimate_ctx's */
    /* out: {examples, tokens, source, …} (counted 1), or {error}; or refused: a line the trainer would
     * refuse, or no example it would keep (json is then the message) */
    char *json;
    int counted, refused;
};

static void token_count_free(struct token_count *t) {
    free(t->tenant_id);
    free(t->file_key);
    free(t->file_sha256);
    free(t->model_id);
    free(t->model_prefix);
    free(t->model_sha256);
    free(t->json);
    free(t);
}

/* The sets a count fills, only counted (count_only), of the method's kind. */
struct count_sets {
    struct sft_dataset sft;
    struct dpo_dataset dpo;
    struct rft_dataset rft;
};

/* One line into the method's set as the trainer reads it (common/json.c's whet_jsonl_each: a byte-order
 * mark before the first line skipped, blank lines skipped). */
static int count_line(const struct token_count *t, struct count_sets *s, const struct model_text *m, const char *line,
                      size_t len, uint64_t lineno, uint64_t *lines, struct whet_err *err) {
    if (lineno == 1) line = whet_json_skip_bom(line, &len);
    if (strspn(line, " \t\r\n") >= len) return 0;
    (*lines)++;
    int rc;
    switch (t->method) {
    case COUNT_DPO: rc = dpo_dataset_add_line(&s->dpo, line, len, &m->tpl, m->tok, err); break;
    case COUNT_RFT: rc = rft_dataset_add_line(&s->rft, line, len, (int)lineno, &m->tpl, m->tok, t->cut, err); break;
    default: rc = sft_dataset_add_line(&s->sft, line, len, &m->tpl, m->tok, err); break;
    }
    if (rc) return whet_err_prefix(err, "training file: line %llu", (unsigned long long)lineno);
    return 0;
}

/* Streams the file through the tokenizer a chunk at a time, stopping at the end of the line that reaches
 * max_bytes. A line the trainer would refuse sets *bad_line. */
static int count_file(const struct token_count *t, struct objstore *store, const struct model_text *m,
                      struct count_sets *s, uint64_t *bytes_read, uint64_t *lines, int *bad_line,
                      struct whet_err *err) {
    struct objstore_reader *rd;
    if (objstore_reader_open(store, t->file_key, t->file_sha256, &rd, NULL, err)) return -1;
    char *chunk = xmalloc(ESTIMATE_CHUNK);
    struct whet_buf line = {0};
    uint64_t lineno = 0;
    size_t got = 0;
    int rc = 0;
    *bytes_read = 0;
    while (!rc && *bytes_read < t->max_bytes && !(rc = objstore_reader_next(rd, chunk, ESTIMATE_CHUNK, &got, err)) &&
           got > 0) {
        const char *p = chunk, *end = chunk + got;
        while (!rc && p < end && *bytes_read < t->max_bytes) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            const char *stop = nl ? nl + 1 : end;
            whet_buf_append(&line, p, (size_t)(stop - p));
            *bytes_read += (uint64_t)(stop - p);
            p = stop;
            if (!nl) break;
            rc = *bad_line = count_line(t, s, m, line.data, line.len, ++lineno, lines, err) ? 1 : 0;
            line.len = 0;
        }
    }
    if (!rc && line.len > 0 && *bytes_read >= t->file_bytes) /* a last line without its newline */
        rc = *bad_line = count_line(t, s, m, line.data, line.len, ++lineno, lines, err) ? 1 : 0;
    whet_buf_free(&line);
    free(chunk);
    objstore_reader_close(rd);
    return rc ? -1 : 0;
}

/* The count as JSON, scaled up to the whole file when only its first max_bytes were read; NULL with the
 * trainer's refusal in err when the whole file leaves it nothing to train on. */
static json_t *count_json(const struct token_count *t, const struct count_sets *s, uint64_t bytes_read, uint64_t lines,
                          struct whet_err *err) {
    int whole = bytes_read >= t->file_bytes;
    double scale = whole || !bytes_read ? 1.0 : (double)t->file_bytes / (double)bytes_read;
    double example_scale = whole || !lines ? 1.0 : (double)t->line_count / (double)lines;
    json_t *out;
    int kept;
    if (t->method == COUNT_RFT) {
        const struct rft_dataset *d = &s->rft;
        kept = d->n_prompts;
        if (whole && !kept)
            whet_errf(err, "training file: no usable prompts (%llu lines, %d longer than %d tokens, which leaves no "
                           "room for a response within max_seq_len)",
                      (unsigned long long)lines, d->n_too_long, t->cut);
        out = json_pack("{s:I, s:I, s:i, s:i}", "examples", (json_int_t)(kept * example_scale + 0.5), "prompt_tokens",
                        (json_int_t)((double)d->n_tokens * scale + 0.5), "prompts_too_long", d->n_too_long,
                        "max_prompt_len", t->cut);
    } else {
        /* DPO: a pair is an example holding both its sequences (dpo_data.h), so its tokens are prompt +
         * chosen and prompt + rejected, after the cut; its trained targets are the scored answer tokens. */
        const struct sft_dataset *d = t->method == COUNT_DPO ? &s->dpo.pairs : &s->sft;
        int truncated = t->method == COUNT_DPO ? s->dpo.n_truncated : d->n_truncated;
        long long truncated_tokens = t->method == COUNT_DPO ? s->dpo.n_truncated_tokens : d->n_truncated_tokens;
        int untrained = t->method == COUNT_DPO ? s->dpo.n_unscored : d->n_untrained;
        kept = d->n_examples;
        if (whole && !kept)
            whet_errf(err, "training file: no usable %s (%llu lines, %d without a %s token within max_seq_len %d)",
                      t->method == COUNT_DPO ? "preference pairs" : "examples", (unsigned long long)lines, untrained,
                      t->method == COUNT_DPO ? "scored" : "trained", t->cut);
        out = json_pack("{s:I, s:I, s:I, s:i, s:i, s:I, s:i}", "examples", (json_int_t)(kept * example_scale + 0.5),
                        "tokens", (json_int_t)((double)d->n_tokens * scale + 0.5), "trained_targets",
                        (json_int_t)((double)d->n_trained_tokens * scale + 0.5), "truncated_examples", truncated,
                        "untrained_examples", untrained, "truncated_tokens", (json_int_t)truncated_tokens,
                        "max_seq_len", t->cut);
    }
    if (whole && !kept) {
        json_decref(out);
        return NULL;
    }
    json_object_set_new(out, "source", json_string(whole ? "tokenized" : "tokenized_prefix"));
    json_object_set_new(out, "bytes_tokenized", json_integer((json_int_t)bytes_read));
    json_object_set_new(out, "bytes", json_integer((json_int_t)t->file_bytes));
    return out;
}

static void token_count_work(void *arg) {
    struct token_count *t = arg;
    struct whet_err err = {0};
    struct count_sets s;
    sft_dataset_init(&s.sft, t->cut);
    s.sft.count_only = 1;
    dpo_dataset_init(&s.dpo, t->cut);
    s.dpo.pairs.count_only = 1;
    memset(&s.rft, 0, sizeof s.rft);
    s.rft.count_only = 1;
    uint64_t bytes_read = 0, lines = 0;
    int cached = 0;
    double t0 = whet_now_mono();
    struct objstore *models = files_store(&err), *data = models ? files_tenant_store(t->tenant_id, &err) : NULL;
    struct model_text *m = data ? model_text_get(models, t->model_prefix, t->model_sha256, &cached, &err) : NULL;
    int rc = m ? count_file(t, data, m, &s, &bytes_read, &lines, &t->refused, &err) : -1;
    json_t *out = rc ? NULL : count_json(t, &s, bytes_read, lines, &err);
    if (!rc && !out) t->refused = 1;
    if (t->refused) {
        t->json = xstrdup(err.msg);
    } else {
        if (!out) {
            log_warn("msg=\"dry run: the training file's tokens were not counted\" model=%s file=%s reason=\"%s\"",
                     t->model_id, t->file_key, err.msg);
            out = json_pack("{s:s, s:i}", "error", err.msg, t->method == COUNT_RFT ? "max_prompt_len" : "max_seq_len",
                            t->cut);
        } else {
            t->counted = 1;
            json_object_set_new(out, "tokenizer", json_string(cached ? "cached" : "loaded"));
            json_object_set_new(out, "seconds", json_real(whet_now_mono() - t0));
        }
        t->json = json_dumps(out, JSON_COMPACT);
    }
    json_decref(out);
    if (m) model_text_put(m);
    sft_dataset_free(&s.sft);
    dpo_dataset_free(&s.dpo);
    rft_dataset_free(&s.rft);
}

static void token_count_done(struct gw_req *r, void *arg) {
    struct token_count *t = arg;
    struct estimate_ctx *c = t->ctx;
    if (!http_gone(r) && t->refused) {
        http_reply_error_hint(r, 400, "training_file", "invalid_file",
                              "the trainer would refuse this file and the job fail: fix it and upload it again", "%s",
                              t->json);
    } else if (!http_gone(r)) {
        c->counted = http_strdup(r, t->json);
        estimate_query(r, c, t->counted);
    }
    token_count_free(t);
}

/* The count a method's dry run makes (COUNT_NONE: none, the cheaper guesses). */
static enum count_method count_method_of(const char *type) {
    return !strcmp(type, "supervised")      ? COUNT_SFT
           : !strcmp(type, "dpo")           ? COUNT_DPO
           : !strcmp(type, "reinforcement") ? COUNT_RFT
                                            : COUNT_NONE;
}

/* ---------------------------------------------------------------- sizing */

/* Whether the name is in the array (absent or empty: any name), as the scheduler reads whet.gpu_types
 * and whet.regions. */
static int name_allowed(json_t *names, const char *name) {
    if (!json_is_array(names) || json_array_size(names) == 0) return 1;
    size_t i;
    json_t *v;
    json_array_foreach(names, i, v) {
        if (json_is_string(v) && !strcmp(json_string_value(v), name)) return 1;
    }
    return 0;
}

/* The gang the scheduler will size for the job (scheduler/service/cycle.c, size_job) over the pools of
 * the fleet (whet_sizing_pools, kept by migration 0037) that its whet.gpu_types and whet.regions admit: JSON in
 * the request's pool, {device_count, fits, min_device_mib, device_bytes, and device_type: the chosen pool's,
 * when its device memory is known}. */
static void estimate_sizing(struct gw_req *r, struct estimate_ctx *c, const char *parameters, const char *config_json,
                            const char *pools_json) {
    const struct estimate_req *q = &c->q;
    json_t *method = json_loads(q->method_json, 0, NULL),
           *whet = json_loads(q->whet_json ? q->whet_json : "{}", 0, NULL);
    json_t *pools = json_loads(pools_json, 0, NULL);
    struct sz_pool *allowed = xcalloc(json_array_size(pools) + 1, sizeof *allowed);
    const char **types = xcalloc(json_array_size(pools) + 1, sizeof *types);
    int n = 0;
    size_t i;
    json_t *p;
    json_array_foreach(pools, i, p) {
        const char *type = json_string_value(json_object_get(p, "device_type"));
        const char *dc = json_string_value(json_object_get(p, "dc"));
        if (!type || !dc || !name_allowed(json_object_get(whet, "gpu_types"), type) ||
            !name_allowed(json_object_get(whet, "regions"), dc))
            continue;
        allowed[n] = (struct sz_pool){(int32_t)json_integer_value(json_object_get(p, "device_mib")),
                                      (int32_t)json_integer_value(json_object_get(p, "devices"))};
        types[n++] = type;
    }
    struct sz_choice ch;
    struct sz_estimate e;
    int32_t gpus = job_sizing_gang(&ch, &e, parameters, config_json, method, whet, allowed, n);
    const char *type = ch.pool >= 0 && ch.pool < n && allowed[ch.pool].device_mib > 0 ? types[ch.pool] : NULL;
    json_t *out = json_pack("{s:i, s:b, s:i, s:I}", "device_count", gpus, "fits", ch.fits, "min_device_mib",
                            ch.min_gpu_mem_mib, "device_bytes", (json_int_t)sz_per_device_bytes(&e, gpus));
    if (type) json_object_set_new(out, "device_type", json_string(type));
    c->sizing_device = type ? http_strdup(r, type) : NULL;
    c->sizing_devices = gpus;
    char *text = json_dumps(out, JSON_COMPACT);
    c->sizing = http_strdup(r, text);
    free(text);
    json_decref(out);
    free(types);
    free(allowed);
    json_decref(pools);
    json_decref(whet);
    json_decref(method);
}

/* Sizes the job, then estimates it: a dry run counts the file's tokens as the trainer will first; a create
 * uses the count a dry run kept (migration 0022), or the cheaper guesses. */
static void estimate_start(struct gw_req *r, struct estimate_ctx *c, const struct estimate_inputs *in) {
    estimate_sizing(r, c, in->parameters, in->config, in->pools);
    c->pools = http_strdup(r, in->pools);
    c->counted = in->kept_count ? http_strdup(r, in->kept_count) : NULL;
    c->file_bytes = strtoll(in->file_bytes, NULL, 10);
    c->file_lines = in->line_count[0] ? strtoll(in->line_count, NULL, 10) : -1;
    c->now = strtoll(in->now, NULL, 10);
    c->inputs_version = strtoll(in->inputs_version, NULL, 10);
    /* p.trained_tokens::float8 / nullif(p.total_steps, 0), as whet_job_estimate divides */
    long long prev_steps = in->prev_total_steps ? strtoll(in->prev_total_steps, NULL, 10) : 0;
    c->prev_per_step = in->prev_trained_tokens && prev_steps != 0
                           ? (double)strtoll(in->prev_trained_tokens, NULL, 10) / (double)prev_steps
                           : JOB_ESTIMATE_NULL;
    enum count_method method = count_method_of(c->q.method_type);
    if (!c->q.dry_run || method == COUNT_NONE || !in->file_key) {
        estimate_query(r, c, 0);
        return;
    }
    struct token_count *t = xcalloc(1, sizeof *t);
    t->ctx = c;
    t->tenant_id = xstrdup(http_tenant_id(r));
    t->model_id = xstrdup(c->q.base_model);
    t->model_prefix = xstrdup(in->object_prefix);
    t->model_sha256 = xstrdup(in->model_sha256);
    t->file_key = xstrdup(in->file_key);
    t->file_sha256 = xstrdup(in->file_sha256);
    t->file_bytes = strtoull(in->file_bytes, NULL, 10);
    t->line_count = strtoull(in->line_count, NULL, 10);
    t->method = method;
    t->cut = c->q.cut;
    const char *cap = whet_env("WHET_ESTIMATE_TOKENIZE_MAX_BYTES", NULL);
    t->max_bytes = cap && strtoull(cap, NULL, 10) > 0 ? strtoull(cap, NULL, 10) : ESTIMATE_TOKENIZE_MAX_BYTES;
    if (http_run_blocking_or_busy(r, token_count_work, token_count_done, t)) token_count_free(t);
}

/* The trainer's settings of the job (trainer_settings.h, as the scheduler will write them); the caller frees
 * them. */
static json_t *trainer_settings(const char *method_json, const char *whet_json) {
    json_t *method = json_loads(method_json, 0, NULL), *whet = whet_json ? json_loads(whet_json, 0, NULL) : NULL;
    json_t *t = trainer_settings_from_job(method, whet, 0);
    json_decref(whet);
    json_decref(method);
    return t;
}

int estimate_cut(const char *method_json, const char *whet_json) {
    json_t *t = trainer_settings(method_json, whet_json);
    int cut = (int)json_integer_value(json_object_get(json_object_get(t, "hyperparameters"), "max_seq_len")) -
              (int)json_integer_value(json_object_get(json_object_get(t, "rollout"), "max_tokens"));
    json_decref(t);
    return cut;
}

/* Reinforcement's rollout settings (JSON in the request's pool), from the resolved hyperparameters (the group
 * size may follow compute_multiplier); the other methods have none. */
static void estimate_rollout(struct gw_req *r, struct estimate_ctx *c) {
    if (strcmp(c->q.method_type, "reinforcement") != 0) return;
    json_t *t = trainer_settings(c->q.method_json, c->q.whet_json), *hp = json_object_get(t, "hyperparameters");
    json_t *rollout = json_object_get(t, "rollout");
    if (rollout) {
        json_t *ro = json_pack("{s:O, s:O, s:O}", "n", json_object_get(rollout, "n"), "max_tokens",
                               json_object_get(rollout, "max_tokens"), "ppo_epochs", json_object_get(hp, "ppo_epochs"));
        char *text = json_dumps(ro, JSON_COMPACT);
        c->rollout = http_strdup(r, text);
        free(text);
        json_decref(ro);
    }
    json_decref(t);
}

void estimate_job(struct gw_req *r, const struct estimate_req *q, const struct estimate_inputs *in,
                  estimate_next_fn next, void *arg) {
    struct estimate_ctx *c = http_alloc(r, sizeof *c);
    memset(c, 0, sizeof *c);
    c->q = *q;
    c->next = next;
    c->arg = arg;
    estimate_rollout(r, c);
    estimate_start(r, c, in);
}

void estimate_prepare(void) {
    db_prepare_read("jobs_estimate", ESTIMATE_SQL);
    db_prepare_read("estimate_inputs", "SELECT whet_estimate_inputs()");
    db_prepare("estimate_keep_count",
               "INSERT INTO file_token_counts (file_id, tenant_id, base_model, max_seq_len, counted) "
               "VALUES ($1, $2, $3, $4::int, $5::jsonb) ON CONFLICT (file_id, base_model, max_seq_len) "
               "DO UPDATE SET counted = EXCLUDED.counted, created_at = whet_now()");
}
