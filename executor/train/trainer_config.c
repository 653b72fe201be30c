/* trainer_config.c - parse and validate the trainer config (see trainer_config.h).
 *
 * The numeric hyperparameters are one table (name, kind, bounds, where it lives) in the manner of
 * Redis' config table, so every bound is written once and every error reads the same way:
 * "job.json: hyperparameters.learning_rate: must be a number in (0, 1], got 3". */
#include "trainer_config.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "grader.h"
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

/* ---------------------------------------------------------------- the hyperparameter table */

enum field_kind { FIELD_INT, FIELD_DOUBLE };

struct number_field {
    const char *name;
    enum field_kind kind;
    size_t offset;      /* into struct trainer_hparams */
    double min, max;
    int min_exclusive;  /* (min, max] rather than [min, max] */
    int auto_allowed;   /* OpenAI's "auto" keeps the default */
};

#define HP(f) offsetof(struct trainer_hparams, f)
static const struct number_field hparam_fields[] = {
    {"n_epochs", FIELD_INT, HP(n_epochs), 1, 1000, 0, 1},
    {"batch_size", FIELD_INT, HP(batch_size), 1, 4096, 0, 1},
    {"learning_rate", FIELD_DOUBLE, HP(learning_rate), 0, 1, 1, 1},
    {"warmup_steps", FIELD_INT, HP(warmup_steps), 0, 100000000, 0, 0},
    {"max_grad_norm", FIELD_DOUBLE, HP(max_grad_norm), 0, 1e6, 0, 0},
    {"weight_decay", FIELD_DOUBLE, HP(weight_decay), 0, 1, 0, 0},
    {"max_seq_len", FIELD_INT, HP(max_seq_len), 8, 1048576, 0, 0},
    {"gradient_accumulation_steps", FIELD_INT, HP(gradient_accumulation_steps), 1, 4096, 0, 0},
    {"adam_beta1", FIELD_DOUBLE, HP(adam_beta1), 0, 1, 0, 0},
    {"adam_beta2", FIELD_DOUBLE, HP(adam_beta2), 0, 1, 0, 0},
    {"adam_eps", FIELD_DOUBLE, HP(adam_eps), 0, 1, 1, 0},
    {"beta", FIELD_DOUBLE, HP(beta), 0, 2, 1, 0}, /* the range the gateway accepts */
    {"kl_coef", FIELD_DOUBLE, HP(kl_coef), 0, 10, 0, 0},
    {"clip_ratio_low", FIELD_DOUBLE, HP(clip_ratio_low), 0, 1, 0, 0}, /* < 1 checked below */
    {"clip_ratio_high", FIELD_DOUBLE, HP(clip_ratio_high), 0, 10, 0, 0},
    {"ppo_epochs", FIELD_INT, HP(ppo_epochs), 1, 100, 0, 0},
    {"max_gen_batches", FIELD_INT, HP(max_gen_batches), 1, 100, 0, 0},
};

/* The GRPO hyperparameters that are not numbers (parsed in parse_hparams). */
static const char *const grpo_flag_fields[] = {"loss_agg", "norm_adv_by_std", "dynamic_sampling"};

/* Hyperparameters only one method takes. */
static const char *hparam_method(const char *name) {
    static const char *const grpo_only[] = {"kl_coef", "clip_ratio_low", "clip_ratio_high", "ppo_epochs",
                                            "loss_agg", "norm_adv_by_std", "dynamic_sampling", "max_gen_batches"};
    if (!strcmp(name, "beta")) return "dpo";
    for (size_t i = 0; i < WHET_ARRAY_LEN(grpo_only); i++)
        if (!strcmp(name, grpo_only[i])) return "grpo";
    return NULL;
}
#undef HP

static void format_range(char *out, size_t n, const struct number_field *f) {
    if (f->kind == FIELD_INT)
        snprintf(out, n, "an integer in [%.0f, %.0f]", f->min, f->max);
    else
        snprintf(out, n, "a number in %c%g, %g]", f->min_exclusive ? '(' : '[', f->min, f->max);
}

/* Reads one number into `base + f->offset`; `prefix` is the path of the enclosing object. */
static int number_field_set(void *base, const struct number_field *f, json_t *v, const char *prefix,
                            struct whet_err *err) {
    char range[96];
    format_range(range, sizeof range, f);
    if (json_is_string(v) && f->auto_allowed && !strcmp(json_string_value(v), "auto")) return 0;
    if (!json_is_number(v) || (f->kind == FIELD_INT && !json_is_integer(v)))
        return whet_errf(err, "%s%s: must be %s%s", prefix, f->name, range,
                         f->auto_allowed ? " or \"auto\"" : "");
    double x = json_number_value(v);
    int below = f->min_exclusive ? x <= f->min : x < f->min;
    if (!isfinite(x) || below || x > f->max)
        return whet_errf(err, "%s%s: must be %s, got %g", prefix, f->name, range, x);
    char *slot = (char *)base + f->offset;
    if (f->kind == FIELD_INT) {
        int i = (int)json_integer_value(v);
        memcpy(slot, &i, sizeof i);
    } else {
        memcpy(slot, &x, sizeof x);
    }
    return 0;
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
    lora->r = 16;
    lora->alpha = 32;
    if (!v) return 0; /* absent: LoRA with the defaults (null asks for full fine-tuning) */
    if (json_is_null(v)) {
        lora->enabled = 0;
        return 0;
    }
    if (!json_is_object(v)) return whet_errf(err, "lora: must be an object {r, alpha, target_modules} or null");
    if (check_known_keys(v, "lora.", known, WHET_ARRAY_LEN(known), err)) return -1;
    json_t *r = json_object_get(v, "r");
    if (r) {
        if (!json_is_integer(r) || json_integer_value(r) < 1 || json_integer_value(r) > 1024)
            return whet_errf(err, "lora.r: must be an integer in [1, 1024]");
        lora->r = (int)json_integer_value(r);
    }
    json_t *alpha = json_object_get(v, "alpha");
    if (alpha) {
        if (!json_is_number(alpha) || json_number_value(alpha) <= 0 || json_number_value(alpha) > 1e6)
            return whet_errf(err, "lora.alpha: must be a number in (0, 1e6]");
        lora->alpha = (float)json_number_value(alpha);
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

static int parse_grpo_flag(struct trainer_hparams *hp, const char *key, json_t *val, struct whet_err *err) {
    if (!strcmp(key, "loss_agg")) {
        if (!json_is_string(val) || grpo_loss_agg_parse(json_string_value(val), &hp->loss_agg))
            return whet_errf(err, "hyperparameters.loss_agg: must be one of \"token-mean\", \"seq-mean-token-mean\", "
                                  "\"seq-mean-token-sum\"");
        return 0;
    }
    if (!json_is_boolean(val)) return whet_errf(err, "hyperparameters.%s: must be true or false", key);
    if (!strcmp(key, "norm_adv_by_std")) hp->norm_adv_by_std = json_is_true(val);
    else hp->dynamic_sampling = json_is_true(val);
    return 0;
}

static int parse_hparams(struct trainer_hparams *hp, json_t *v, enum trainer_method method, struct whet_err *err) {
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) return whet_errf(err, "hyperparameters: must be an object");
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        const char *only = hparam_method(key);
        if (only && strcmp(only, trainer_method_name(method)))
            return whet_errf(err, "hyperparameters.%s: only method \"%s\" takes a %s", key, only, key);
        size_t f = 0;
        while (f < WHET_ARRAY_LEN(grpo_flag_fields) && strcmp(grpo_flag_fields[f], key)) f++;
        if (f < WHET_ARRAY_LEN(grpo_flag_fields)) {
            if (parse_grpo_flag(hp, key, val, err)) return -1;
            continue;
        }
        if (!strcmp(key, "lr_scheduler") || !strcmp(key, "lr_scheduler_type")) {
            const char *s = json_is_string(val) ? json_string_value(val) : "";
            if (!strcmp(s, "linear")) hp->lr_scheduler = LR_LINEAR;
            else if (!strcmp(s, "cosine")) hp->lr_scheduler = LR_COSINE;
            else if (!strcmp(s, "constant")) hp->lr_scheduler = LR_CONSTANT;
            else return whet_errf(err, "hyperparameters.%s: must be one of \"linear\", \"cosine\", \"constant\"", key);
            continue;
        }
        size_t i = 0;
        while (i < WHET_ARRAY_LEN(hparam_fields) && strcmp(hparam_fields[i].name, key)) i++;
        if (i == WHET_ARRAY_LEN(hparam_fields)) {
            char list[600] = "lr_scheduler";
            for (size_t j = 0; j < WHET_ARRAY_LEN(hparam_fields); j++) {
                strncat(list, ", ", sizeof list - strlen(list) - 1);
                strncat(list, hparam_fields[j].name, sizeof list - strlen(list) - 1);
            }
            for (size_t j = 0; j < WHET_ARRAY_LEN(grpo_flag_fields); j++) {
                strncat(list, ", ", sizeof list - strlen(list) - 1);
                strncat(list, grpo_flag_fields[j], sizeof list - strlen(list) - 1);
            }
            return whet_errf(err, "hyperparameters.%s: unknown field (known: %s)", key, list);
        }
        if (number_field_set(hp, &hparam_fields[i], val, "hyperparameters.", err)) return -1;
    }
    if (hp->adam_beta1 >= 1 || hp->adam_beta2 >= 1)
        return whet_errf(err, "hyperparameters.adam_beta%d: must be a number in [0, 1)", hp->adam_beta1 >= 1 ? 1 : 2);
    if (hp->clip_ratio_low >= 1) return whet_errf(err, "hyperparameters.clip_ratio_low: must be a number in [0, 1)");
    return 0;
}

/* ---------------------------------------------------------------- grpo sections */

static int parse_rollout(struct trainer_rollout *ro, json_t *v, struct whet_err *err) {
    static const char *const known[] = {"n", "max_tokens", "temperature", "top_p", "top_k", "stop"};
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) return whet_errf(err, "rollout: must be an object {n, max_tokens, temperature, top_p, top_k, stop}");
    if (check_known_keys(v, "rollout.", known, WHET_ARRAY_LEN(known), err)) return -1;
    static const struct {
        const char *name;
        int is_int;
        double min, max;
        int min_exclusive;
    } fields[] = {{"n", 1, 1, 256, 0}, {"max_tokens", 1, 1, 65536, 0}, {"temperature", 0, 0, 10, 0},
                  {"top_p", 0, 0, 1, 1}, {"top_k", 1, 0, 1000000, 0}};
    for (size_t i = 0; i < WHET_ARRAY_LEN(fields); i++) {
        json_t *f = json_object_get(v, fields[i].name);
        if (!f) continue;
        double x = json_is_number(f) ? json_number_value(f) : NAN;
        int below = fields[i].min_exclusive ? x <= fields[i].min : x < fields[i].min;
        if (!json_is_number(f) || (fields[i].is_int && !json_is_integer(f)) || !isfinite(x) || below || x > fields[i].max)
            return whet_errf(err, "rollout.%s: must be %s in %c%g, %g]", fields[i].name,
                             fields[i].is_int ? "an integer" : "a number", fields[i].min_exclusive ? '(' : '[',
                             fields[i].min, fields[i].max);
        switch (i) {
        case 0: ro->n = (int)x; break;
        case 1: ro->max_tokens = (int)x; break;
        case 2: ro->temperature = x; break;
        case 3: ro->top_p = x; break;
        case 4: ro->top_k = (int)x; break;
        }
    }
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
    if (eval_samples && !json_is_null(eval_samples) &&
        !(json_is_string(eval_samples) && !strcmp(json_string_value(eval_samples), "auto"))) {
        if (!json_is_integer(eval_samples) || json_integer_value(eval_samples) < 0 ||
            json_integer_value(eval_samples) > 100000000)
            return whet_errf(err, "eval_samples: must be an integer in [0, 100000000] (0 or \"auto\": every "
                                  "validation prompt)");
        cfg->eval_samples = (int)json_integer_value(eval_samples);
    }
    return 0;
}

/* ---------------------------------------------------------------- entry points */

static int parse_object(struct trainer_config *cfg, json_t *root, struct whet_err *err) {
    static const char *const known[] = {
        "method", "model", "init_adapter", "training_file", "validation_file", "output_dir", "lora",
        "hyperparameters", "seed", "checkpoint_every_steps", "eval_every_steps", "max_steps", "resume_from",
        "grader", "rollout", "beta", "suffix", "job_id", "eval_samples", "judge_models"};
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
        string_field(root, "resume_from", 0, &cfg->resume_from, err))
        return -1;
    if (parse_lora(&cfg->lora, json_object_get(root, "lora"), err)) return -1;
    if (cfg->init_adapter && !cfg->lora.enabled)
        return whet_errf(err, "init_adapter: needs LoRA (lora is null, which asks for full fine-tuning)");

    /* Full fine-tuning moves every weight, so it wants a smaller default step than LoRA. */
    cfg->hp.learning_rate = cfg->lora.enabled ? 1e-4 : 1e-5;
    if (parse_hparams(&cfg->hp, json_object_get(root, "hyperparameters"), cfg->method, err)) return -1;
    /* beta may also sit at the top level (the older place); once, and only for dpo. */
    json_t *hparams = json_object_get(root, "hyperparameters"), *beta = json_object_get(root, "beta");
    int beta_in_hp = json_is_object(hparams) && json_object_get(hparams, "beta");
    if (beta && beta_in_hp) return whet_errf(err, "beta: given twice (top level and hyperparameters.beta)");
    const struct number_field *beta_field = hparam_fields;
    while (strcmp(beta_field->name, "beta")) beta_field++;
    if (beta && number_field_set(&cfg->hp, beta_field, beta, "", err)) return -1;
    if (beta && cfg->method != TRAINER_DPO) return whet_errf(err, "beta: only method \"dpo\" takes a beta");
    if (parse_grpo_fields(cfg, root, err)) return -1;

    int64_t v;
    v = (int64_t)cfg->seed;
    if (nonneg_int_field(root, "seed", INT64_MAX, &v, err)) return -1;
    cfg->seed = (uint64_t)v;
    v = cfg->checkpoint_every_steps;
    if (nonneg_int_field(root, "checkpoint_every_steps", 100000000, &v, err)) return -1;
    cfg->checkpoint_every_steps = (int)v;
    v = cfg->eval_every_steps;
    if (nonneg_int_field(root, "eval_every_steps", 100000000, &v, err)) return -1;
    cfg->eval_every_steps = (int)v;
    v = cfg->max_steps;
    if (nonneg_int_field(root, "max_steps", 100000000, &v, err)) return -1;
    cfg->max_steps = (int)v;
    return 0;
}

static void set_defaults(struct trainer_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->hp = (struct trainer_hparams){
        .n_epochs = 1,
        .batch_size = 1,
        .learning_rate = 1e-4,
        .lr_scheduler = LR_LINEAR,
        .max_grad_norm = 1.0,
        .max_seq_len = 1024,
        .gradient_accumulation_steps = 1,
        .adam_beta1 = 0.9,
        .adam_beta2 = 0.999,
        .adam_eps = 1e-8,
        .beta = 0.1,
        .kl_coef = 0.001,
        .clip_ratio_low = 0.2,
        .clip_ratio_high = 0.2,
        .ppo_epochs = 1,
        .loss_agg = GRPO_TOKEN_MEAN,
        .norm_adv_by_std = 1,
        .max_gen_batches = 3, /* up to 3 × batch_size prompts a step: DAPO's recipe oversampling */
    };
    cfg->rollout = (struct trainer_rollout){.n = 8, .max_tokens = 64, .temperature = 1.0, .top_p = 1.0};
    cfg->seed = 42;
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
    for (int i = 0; i < cfg->lora.n_target_modules; i++) free(cfg->lora.target_modules[i]);
    for (int i = 0; i < cfg->rollout.n_stop; i++) free(cfg->rollout.stop[i]);
    if (cfg->grader) grader_free(cfg->grader);
    json_decref(cfg->judge_models);
    memset(cfg, 0, sizeof *cfg);
}
