/* trainer_config.c - parse and validate the trainer config (see trainer_config.h).
 *
 * The settings of the job specification (common/job_spec.c: type, range, default, methods) are read
 * through one table of where each lives in the struct, in the manner of Redis' config table, so every
 * bound is written once and every error reads the same way:
 * "job.json: hyperparameters.learning_rate: must be a number in (0, 1], got 3". */
#include "trainer_config.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "grader.h"
#include "job_spec.h"
#include "json.h"

const char *trainer_method_name(enum trainer_method m) {
    switch (m) {
    case TRAINER_SFT: return "sft";
    case TRAINER_DPO: return "dpo";
    case TRAINER_GRPO: return "grpo";
    }
    return "?";
}

const char *lr_scheduler_name(enum lr_scheduler s) {
    switch (s) {
    case LR_LINEAR: return "linear";
    case LR_COSINE: return "cosine";
    case LR_CONSTANT: return "constant";
    }
    return "?";
}

/* ---------------------------------------------------------------- the job specification's fields */

/* Where each setting of the job specification (common/job_spec.c: type, range, default, methods)
 * lives in the config struct. The table gives the rest, so a bound is written once. */
struct spec_slot {
    const char *key; /* the trainer key in the job specification */
    size_t offset;   /* into the struct being filled; an enum is stored as an int */
};

_Static_assert(sizeof(enum lr_scheduler) == sizeof(int) && sizeof(enum grpo_loss_agg) == sizeof(int),
               "enums are stored through int slots");

#define HP(f) {"hyperparameters." #f, offsetof(struct trainer_hparams, f)}
/* In the order an "unknown field" message lists them. */
static const struct spec_slot hparam_slots[] = {
    HP(lr_scheduler), HP(n_epochs), HP(batch_size), HP(learning_rate), HP(warmup_steps), HP(max_grad_norm),
    HP(weight_decay), HP(max_seq_len), HP(gradient_accumulation_steps), HP(adam_beta1), HP(adam_beta2),
    HP(adam_eps), HP(beta), HP(kl_coef), HP(clip_ratio_low), HP(clip_ratio_high), HP(ppo_epochs),
    HP(max_gen_batches), HP(loss_agg), HP(norm_adv_by_std), HP(dynamic_sampling),
};
#undef HP
#define RO(f) {"rollout." #f, offsetof(struct trainer_rollout, f)}
static const struct spec_slot rollout_slots[] = {RO(n), RO(max_tokens), RO(temperature), RO(top_p), RO(top_k)};
#undef RO

static const struct job_spec_field *spec_of(const char *key) {
    const struct job_spec_field *f = job_spec_by_trainer_key(key);
    if (!f) { /* a slot table out of step with the job specification: a bug, caught by the unit tests */
        fprintf(stderr, "trainer_config: %s is not in the job specification\n", key);
        abort();
    }
    return f;
}

/* A whole number as such (1000000, not 1e+06), any other as %g. */
static void format_bound(char *out, size_t n, double x) {
    if (x == floor(x) && fabs(x) < 1e15) snprintf(out, n, "%.0f", x);
    else snprintf(out, n, "%g", x);
}

static void format_range(char *out, size_t n, const struct job_spec_field *f) {
    char lo[32], hi[32];
    format_bound(lo, sizeof lo, f->trainer.min);
    format_bound(hi, sizeof hi, f->trainer.max);
    snprintf(out, n, "%s in %c%s, %s%c", f->type == JOB_SPEC_INT ? "an integer" : "a number",
             f->trainer.min_open ? '(' : '[', lo, hi, f->trainer.max_open ? ')' : ']');
}

/* Reads `v`, the value of trainer key `key` (shown as `shown` in errors), into *out: 0 when read, 1
 * when it is "auto" and the field takes it (the default stays), -1 on error. */
static int spec_value(const char *key, const char *shown, const json_t *v, double *out, struct whet_err *err) {
    const struct job_spec_field *f = spec_of(key);
    if (json_is_string(v) && f->trainer_auto && !strcmp(json_string_value(v), "auto")) return 1;
    if (f->type == JOB_SPEC_BOOL) {
        if (!json_is_boolean(v)) return whet_errf(err, "%s: must be true or false", shown);
        *out = json_is_true(v);
        return 0;
    }
    if (f->type == JOB_SPEC_ENUM) {
        int i = json_is_string(v) ? job_spec_enum_index(f, json_string_value(v)) : -1;
        if (i < 0) {
            char names[200] = "";
            for (const char *const *s = f->values; *s; s++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s\"%s\"", names[0] ? ", " : "", *s);
            return whet_errf(err, "%s: must be one of %s", shown, names);
        }
        *out = i;
        return 0;
    }
    char range[96];
    format_range(range, sizeof range, f);
    if (!json_is_number(v) || (f->type == JOB_SPEC_INT && !json_is_integer(v)))
        return whet_errf(err, "%s: must be %s%s", shown, range, f->trainer_auto ? " or \"auto\"" : "");
    double x = json_number_value(v);
    if (!isfinite(x) || !job_spec_in_range(&f->trainer, x))
        return whet_errf(err, "%s: must be %s, got %g", shown, range, x);
    *out = x;
    return 0;
}

/* Stores x into the slot at `base + s->offset` as the field's type wants. */
static void slot_store(void *base, const struct spec_slot *s, double x) {
    char *slot = (char *)base + s->offset;
    if (spec_of(s->key)->type == JOB_SPEC_NUMBER) {
        memcpy(slot, &x, sizeof x);
    } else {
        int i = (int)x;
        memcpy(slot, &i, sizeof i);
    }
}

/* The trainer defaults of `slots` into `base`. */
static void slots_default(void *base, const struct spec_slot *slots, size_t n) {
    for (size_t i = 0; i < n; i++) slot_store(base, &slots[i], spec_of(slots[i].key)->trainer_default);
}

/* Reads `v` (may be NULL: nothing to do) into the slot; `shown` names it in errors. */
static int slot_set(void *base, const struct spec_slot *s, const json_t *v, const char *shown, struct whet_err *err) {
    double x;
    int rc = v ? spec_value(s->key, shown, v, &x, err) : 1;
    if (rc == 0) slot_store(base, s, x);
    return rc < 0 ? -1 : 0;
}

/* The method the job specification restricts trainer key `key` to, or NULL when every method takes it. */
static const char *key_method(const char *key) {
    unsigned m = spec_of(key)->methods;
    return m == JOB_SPEC_DPO ? "dpo" : m == JOB_SPEC_GRPO ? "grpo" : m == JOB_SPEC_SFT ? "sft" : NULL;
}

/* A top-level integer of the job specification (checkpoint_every_steps, eval_every_steps, ...). */
static int top_int(json_t *root, const char *key, int *out, struct whet_err *err) {
    json_t *v = json_object_get(root, key);
    double x;
    if (!v || json_is_null(v)) return 0;
    int rc = spec_value(key, key, v, &x, err);
    if (rc == 0) *out = (int)x;
    return rc < 0 ? -1 : 0;
}

/* ---------------------------------------------------------------- helpers */

/* An optional path-like string: absent or null leaves *out NULL. */
static int string_field(json_t *obj, const char *name, int required, char **out, struct whet_err *err) {
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v)) {
        if (required) return whet_errf(err, "%s: required (a non-empty string)", name);
        return 0;
    }
    if (!json_is_string(v) || !json_string_length(v))
        return whet_errf(err, "%s: must be a non-empty string%s", name, required ? "" : " or null");
    *out = xstrdup(json_string_value(v));
    return 0;
}

static int nonneg_int_field(json_t *obj, const char *name, int64_t max, int64_t *out, struct whet_err *err) {
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max)
        return whet_errf(err, "%s: must be an integer in [0, %lld]", name, (long long)max);
    *out = json_integer_value(v);
    return 0;
}

static int check_known_keys(json_t *obj, const char *prefix, const char *const *known, size_t n_known,
                            struct whet_err *err) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        size_t i = 0;
        while (i < n_known && strcmp(known[i], key)) i++;
        if (i == n_known) {
            char list[400] = "";
            for (size_t j = 0; j < n_known; j++) {
                if (j) strncat(list, ", ", sizeof list - strlen(list) - 1);
                strncat(list, known[j], sizeof list - strlen(list) - 1);
            }
            return whet_errf(err, "%s%s: unknown field (known: %s)", prefix, key, list);
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- sections */

static int parse_lora(struct trainer_lora *lora, json_t *v, struct whet_err *err) {
    static const char *const known[] = {"r", "alpha", "target_modules", "use_rslora", "dropout"};
    lora->enabled = 1;
    lora->r = (int)spec_of("lora.r")->trainer_default;
    lora->alpha = (float)spec_of("lora.alpha")->trainer_default;
    if (!v) return 0; /* absent: LoRA with the defaults (null asks for full fine-tuning) */
    if (json_is_null(v)) {
        lora->enabled = 0;
        return 0;
    }
    if (!json_is_object(v)) return whet_errf(err, "lora: must be an object {r, alpha, target_modules} or null");
    if (check_known_keys(v, "lora.", known, WHET_ARRAY_LEN(known), err)) return -1;
    double x;
    json_t *r = json_object_get(v, "r");
    if (r) {
        if (spec_value("lora.r", "lora.r", r, &x, err)) return -1;
        lora->r = (int)x;
    }
    json_t *alpha = json_object_get(v, "alpha");
    if (alpha) {
        if (spec_value("lora.alpha", "lora.alpha", alpha, &x, err)) return -1;
        lora->alpha = (float)x;
    }
    json_t *rs = json_object_get(v, "use_rslora");
    if (rs) {
        if (!json_is_boolean(rs)) return whet_errf(err, "lora.use_rslora: must be true or false");
        lora->use_rslora = json_is_true(rs);
    }
    json_t *dropout = json_object_get(v, "dropout");
    if (dropout && !(json_is_number(dropout) && json_number_value(dropout) == 0))
        return whet_errf(err, "lora.dropout: only 0 is supported (training stays deterministic)");
    json_t *tm = json_object_get(v, "target_modules");
    if (tm && json_is_string(tm) && !strcmp(json_string_value(tm), "all-linear")) return 0;
    if (tm && !json_is_null(tm)) {
        if (!json_is_array(tm) || json_array_size(tm) > TRAINER_MAX_TARGET_MODULES)
            return whet_errf(err, "lora.target_modules: must be \"all-linear\" or an array of at most %d module "
                                  "names (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)",
                             TRAINER_MAX_TARGET_MODULES);
        size_t i;
        json_t *name;
        json_array_foreach(tm, i, name) {
            if (!json_is_string(name) || !json_string_length(name))
                return whet_errf(err, "lora.target_modules[%zu]: must be a non-empty string", i);
            lora->target_modules[lora->n_target_modules++] = xstrdup(json_string_value(name));
        }
    }
    return 0;
}

/* "hyperparameters.KEY: unknown field (known: …)". */
static int unknown_hparam(const char *key, struct whet_err *err) {
    char list[600] = "";
    for (size_t j = 0; j < WHET_ARRAY_LEN(hparam_slots); j++) {
        if (j) strncat(list, ", ", sizeof list - strlen(list) - 1);
        strncat(list, hparam_slots[j].key + strlen("hyperparameters."), sizeof list - strlen(list) - 1);
    }
    return whet_errf(err, "hyperparameters.%s: unknown field (known: %s)", key, list);
}

static int parse_hparams(struct trainer_hparams *hp, json_t *v, enum trainer_method method, struct whet_err *err) {
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) return whet_errf(err, "hyperparameters: must be an object");
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        /* lr_scheduler_type is the name HF's TrainingArguments give it */
        const char *name = strcmp(key, "lr_scheduler_type") ? key : "lr_scheduler";
        char full[128], shown[128];
        snprintf(full, sizeof full, "hyperparameters.%s", name);
        snprintf(shown, sizeof shown, "hyperparameters.%s", key);
        size_t i = 0;
        while (i < WHET_ARRAY_LEN(hparam_slots) && strcmp(hparam_slots[i].key, full)) i++;
        if (i == WHET_ARRAY_LEN(hparam_slots)) return unknown_hparam(key, err);
        const char *only = key_method(full);
        if (only && strcmp(only, trainer_method_name(method)))
            return whet_errf(err, "%s: only method \"%s\" takes a %s", shown, only, key);
        if (slot_set(hp, &hparam_slots[i], val, shown, err)) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- grpo sections */

static int parse_rollout(struct trainer_rollout *ro, json_t *v, struct whet_err *err) {
    static const char *const known[] = {"n", "max_tokens", "temperature", "top_p", "top_k", "stop"};
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) return whet_errf(err, "rollout: must be an object {n, max_tokens, temperature, top_p, top_k, stop}");
    if (check_known_keys(v, "rollout.", known, WHET_ARRAY_LEN(known), err)) return -1;
    for (size_t i = 0; i < WHET_ARRAY_LEN(rollout_slots); i++)
        if (slot_set(ro, &rollout_slots[i], json_object_get(v, rollout_slots[i].key + strlen("rollout.")),
                     rollout_slots[i].key, err))
            return -1;
    json_t *stop = json_object_get(v, "stop");
    if (stop && json_is_string(stop)) { /* OpenAI's API takes one string as well as a list */
        if (!json_string_length(stop)) return whet_errf(err, "rollout.stop: must not be empty");
        ro->stop[ro->n_stop++] = xstrdup(json_string_value(stop));
    } else if (stop && !json_is_null(stop)) {
        if (!json_is_array(stop) || json_array_size(stop) > TRAINER_MAX_STOP)
            return whet_errf(err, "rollout.stop: must be a string or an array of at most %d strings", TRAINER_MAX_STOP);
        size_t i;
        json_t *s;
        json_array_foreach(stop, i, s) {
            if (!json_is_string(s) || !json_string_length(s))
                return whet_errf(err, "rollout.stop[%zu]: must be a non-empty string", i);
            ro->stop[ro->n_stop++] = xstrdup(json_string_value(s));
        }
    }
    return 0;
}

/* grader, rollout and eval_samples: required or allowed for grpo, refused for the other methods. */
static int parse_grpo_fields(struct trainer_config *cfg, json_t *root, struct whet_err *err) {
    json_t *grader = json_object_get(root, "grader"), *rollout = json_object_get(root, "rollout"),
           *eval_samples = json_object_get(root, "eval_samples");
    if (cfg->method != TRAINER_GRPO) {
        const char *given = grader && !json_is_null(grader) ? "grader"
                            : rollout && !json_is_null(rollout) ? "rollout"
                            : eval_samples && !json_is_null(eval_samples) ? "eval_samples"
                                                                          : NULL;
        if (given) return whet_errf(err, "%s: only method \"grpo\" takes a %s", given, given);
        return 0;
    }
    if (!grader || json_is_null(grader))
        return whet_errf(err, "grader: required for method \"grpo\" (an OpenAI grader object, e.g. {\"type\": "
                              "\"string_check\", \"name\": \"exact\", \"input\": \"{{sample.output_text}}\", "
                              "\"reference\": \"{{item.answer}}\", \"operation\": \"eq\"})");
    if (grader_parse(grader, "grader", &cfg->grader, err)) return -1;
    if (parse_rollout(&cfg->rollout, rollout, err)) return -1;
    json_t *judges = json_object_get(root, "judge_models"), *dir;
    const char *name;
    if (judges && !json_is_null(judges) && !json_is_object(judges))
        return whet_errf(err, "judge_models: must be an object {\"model name\": \"/model/dir\"}");
    json_object_foreach(judges, name, dir) {
        if (!json_is_string(dir) || !json_string_length(dir))
            return whet_errf(err, "judge_models.%s: must be a model dir", name);
    }
    if (json_is_object(judges)) cfg->judge_models = json_incref(judges);
    /* 0 or "auto": every validation prompt */
    return top_int(root, "eval_samples", &cfg->eval_samples, err);
}

static int parse_distributed(struct trainer_distributed *d, json_t *v, struct whet_err *err) {
    static const char *const known[] = {"world_size", "rank", "rendezvous", "host", "generation", "timeout_s", "zero"};
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v))
        return whet_errf(err, "distributed: must be an object {world_size, rank, rendezvous, host, generation, "
                              "timeout_s, zero}");
    if (check_known_keys(v, "distributed.", known, WHET_ARRAY_LEN(known), err)) return -1;
    int64_t world = 0, rank = -1, generation = 0, timeout = d->timeout_s;
    json_t *zero = json_object_get(v, "zero");
    if (nonneg_int_field(v, "world_size", 1024, &world, err) || nonneg_int_field(v, "rank", 1023, &rank, err) ||
        nonneg_int_field(v, "generation", UINT32_MAX, &generation, err) ||
        nonneg_int_field(v, "timeout_s", 86400, &timeout, err) || string_field(v, "rendezvous", 1, &d->rendezvous, err) ||
        string_field(v, "host", 0, &d->host, err))
        return whet_err_prefix(err, "distributed");
    if (world < 1) return whet_errf(err, "distributed.world_size: required, an integer in [1, 1024]");
    if (rank < 0 || rank >= world)
        return whet_errf(err, "distributed.rank: required, an integer in [0, world_size - 1] = [0, %lld]",
                         (long long)world - 1);
    if (timeout < 1) return whet_errf(err, "distributed.timeout_s: must be an integer in [1, 86400]");
    json_int_t level = json_is_integer(zero) ? json_integer_value(zero) : json_is_true(zero);
    if (zero && !json_is_boolean(zero) && !(json_is_integer(zero) && (level == 0 || level == 1 || level == 3)))
        return whet_errf(err, "distributed.zero: must be 0 (data parallel), 1 (ZeRO-1: optimizer state sharded) or 3 "
                              "(ZeRO-3: parameters, gradients and optimizer state sharded)");
    d->world_size = (int)world;
    d->rank = (int)rank;
    d->generation = (unsigned)generation;
    d->timeout_s = (int)timeout;
    d->zero = (int)level;
    return 0;
}

/* ---------------------------------------------------------------- entry points */

static int parse_object(struct trainer_config *cfg, json_t *root, struct whet_err *err) {
    static const char *const known[] = {
        "method", "model", "init_adapter", "training_file", "validation_file", "output_dir", "lora",
        "hyperparameters", "seed", "checkpoint_every_steps", "eval_every_steps", "max_steps", "resume_from",
        "grader", "rollout", "beta", "suffix", "job_id", "eval_samples", "judge_models", "device", "distributed"};
    if (!json_is_object(root)) return whet_errf(err, "the config must be a JSON object");
    if (check_known_keys(root, "", known, WHET_ARRAY_LEN(known), err)) return -1;

    json_t *m = json_object_get(root, "method");
    const char *method = json_is_string(m) ? json_string_value(m) : NULL;
    if (m && !method) return whet_errf(err, "method: must be one of \"sft\", \"dpo\", \"grpo\"");
    if (!method || !strcmp(method, "sft")) cfg->method = TRAINER_SFT;
    else if (!strcmp(method, "dpo")) cfg->method = TRAINER_DPO;
    else if (!strcmp(method, "grpo")) cfg->method = TRAINER_GRPO;
    else return whet_errf(err, "method: must be one of \"sft\", \"dpo\", \"grpo\", got \"%s\"", method);

    if (string_field(root, "model", 1, &cfg->model, err) ||
        string_field(root, "training_file", 1, &cfg->training_file, err) ||
        string_field(root, "output_dir", 1, &cfg->output_dir, err) ||
        string_field(root, "init_adapter", 0, &cfg->init_adapter, err) ||
        string_field(root, "validation_file", 0, &cfg->validation_file, err) ||
        string_field(root, "resume_from", 0, &cfg->resume_from, err) ||
        string_field(root, "device", 0, &cfg->device, err))
        return -1;
    if (cfg->device && strcmp(cfg->device, "cpu") && strcmp(cfg->device, "cuda") &&
        (strncmp(cfg->device, "cuda:", 5) || !cfg->device[5] || strspn(cfg->device + 5, "0123456789") != strlen(cfg->device + 5)))
        return whet_errf(err, "device: must be \"cpu\", \"cuda\" or \"cuda:N\", got \"%s\"", cfg->device);
    if (parse_lora(&cfg->lora, json_object_get(root, "lora"), err)) return -1;
    if (parse_distributed(&cfg->dist, json_object_get(root, "distributed"), err)) return -1;
    if (cfg->init_adapter && !cfg->lora.enabled)
        return whet_errf(err, "init_adapter: needs LoRA (lora is null, which asks for full fine-tuning)");

    /* Full fine-tuning moves every weight, so it wants a smaller default step than LoRA's. */
    if (!cfg->lora.enabled) cfg->hp.learning_rate /= 10;
    if (parse_hparams(&cfg->hp, json_object_get(root, "hyperparameters"), cfg->method, err)) return -1;
    /* beta may also sit at the top level (the older place); once, and only for dpo. */
    json_t *hparams = json_object_get(root, "hyperparameters"), *beta = json_object_get(root, "beta");
    int beta_in_hp = json_is_object(hparams) && json_object_get(hparams, "beta");
    if (beta && beta_in_hp) return whet_errf(err, "beta: given twice (top level and hyperparameters.beta)");
    const struct spec_slot *beta_slot = hparam_slots;
    while (strcmp(beta_slot->key, "hyperparameters.beta")) beta_slot++;
    if (slot_set(&cfg->hp, beta_slot, beta, "beta", err)) return -1;
    if (beta && cfg->method != TRAINER_DPO) return whet_errf(err, "beta: only method \"dpo\" takes a beta");
    if (parse_grpo_fields(cfg, root, err)) return -1;

    int64_t v;
    v = (int64_t)cfg->seed;
    if (nonneg_int_field(root, "seed", INT64_MAX, &v, err)) return -1;
    cfg->seed = (uint64_t)v;
    return top_int(root, "checkpoint_every_steps", &cfg->checkpoint_every_steps, err) ||
                   top_int(root, "eval_every_steps", &cfg->eval_every_steps, err) ||
                   top_int(root, "max_steps", &cfg->max_steps, err)
               ? -1
               : 0;
}

/* The job specification's trainer defaults; the seed is the config's own. */
static void set_defaults(struct trainer_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    slots_default(&cfg->hp, hparam_slots, WHET_ARRAY_LEN(hparam_slots));
    slots_default(&cfg->rollout, rollout_slots, WHET_ARRAY_LEN(rollout_slots));
    cfg->checkpoint_every_steps = (int)spec_of("checkpoint_every_steps")->trainer_default;
    cfg->eval_every_steps = (int)spec_of("eval_every_steps")->trainer_default;
    cfg->max_steps = (int)spec_of("max_steps")->trainer_default;
    cfg->eval_samples = (int)spec_of("eval_samples")->trainer_default;
    cfg->seed = 42;
    cfg->dist.world_size = 1;
    cfg->dist.timeout_s = 300;
}

int trainer_config_parse(struct trainer_config *cfg, const char *json, size_t len, const char *source,
                         struct whet_err *err) {
    set_defaults(cfg);
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return whet_json_errf(err, source, &jerr);
    int rc = parse_object(cfg, root, err);
    json_decref(root);
    if (rc) {
        whet_err_prefix(err, "%s", source);
        trainer_config_free(cfg);
    }
    return rc;
}

int trainer_config_load(struct trainer_config *cfg, const char *path, struct whet_err *err) {
    char *data;
    size_t len;
    if (whet_read_file(path, 1 << 20, &data, &len, err)) return -1;
    int rc = trainer_config_parse(cfg, data, len, path, err);
    free(data);
    return rc;
}

void trainer_config_free(struct trainer_config *cfg) {
    free(cfg->model);
    free(cfg->init_adapter);
    free(cfg->training_file);
    free(cfg->validation_file);
    free(cfg->output_dir);
    free(cfg->resume_from);
    free(cfg->device);
    for (int i = 0; i < cfg->lora.n_target_modules; i++) free(cfg->lora.target_modules[i]);
    for (int i = 0; i < cfg->rollout.n_stop; i++) free(cfg->rollout.stop[i]);
    if (cfg->grader) grader_free(cfg->grader);
    json_decref(cfg->judge_models);
    free(cfg->dist.rendezvous);
    free(cfg->dist.host);
    memset(cfg, 0, sizeof *cfg);
}
