/* test_job_spec.c - walks the job specification (common/job_spec.c) through the three layers that read
 * it: for every field and every method it applies to, the API's bounds are taken by the gateway, mapped
 * by the scheduler and taken by the trainer with the same value (or the documented formula's); one past
 * them the gateway refuses with the field's `param` path; an omitted field maps to its service default;
 * a field of another method is refused by the gateway (and by the trainer). Then each trainer key alone:
 * the trainer's default and bounds are the table's. A bound or default changed in one layer only fails
 * here. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_spec.h"
#include "pipeline.h"
#include "test.h"

static const char *const api_methods[] = {"supervised", "dpo", "reinforcement"};
static const char *const trainer_methods[] = {"sft", "dpo", "grpo"};

static json_t *grader(void) {
    return json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "string_check", "name", "yes", "input",
                     "{{sample.output_text}}", "reference", "{{item.answer}}", "operation", "eq");
}

/* A body for `method` (index into api_methods) with `value` (stolen; NULL: none) at f's place. */
static json_t *body_with(int method, const struct job_spec_field *f, json_t *value) {
    json_t *hp = json_object(), *whet = json_object(), *inner = json_object();
    if (value && f->place == JOB_SPEC_HYPERPARAMETERS) json_object_set_new(hp, f->name, value);
    if (value && f->place == JOB_SPEC_WHET) json_object_set_new(whet, f->name, value);
    if (value && f->place == JOB_SPEC_WHET_LORA) json_object_set_new(whet, "lora", json_pack("{s:o}", f->name, value));
    json_object_set_new(inner, "hyperparameters", hp);
    if (method == 2) json_object_set_new(inner, "grader", grader());
    return json_pack("{s:s, s:s, s:{s:s, s:o}, s:o}", "model", "whet-tiny", "training_file", "file-abc", "method",
                     "type", api_methods[method], api_methods[method], inner, "whet", whet);
}

static void param_path(char out[JOB_PARAM_MAX], int method, const struct job_spec_field *f) {
    if (f->place == JOB_SPEC_HYPERPARAMETERS)
        snprintf(out, JOB_PARAM_MAX, "method.%s.hyperparameters.%s", api_methods[method], f->name);
    else
        snprintf(out, JOB_PARAM_MAX, "whet.%s%s", f->place == JOB_SPEC_WHET_LORA ? "lora." : "", f->name);
}

/* `key` ("rollout.n") in a settings or config object, or NULL. */
static json_t *at_key(const json_t *obj, const char *key) {
    const char *dot = strchr(key, '.');
    if (!dot) return json_object_get(obj, key);
    char head[64];
    snprintf(head, sizeof head, "%.*s", (int)(dot - key), key);
    return json_object_get(json_object_get(obj, head), dot + 1);
}

static void set_key(json_t *obj, const char *key, json_t *value) {
    const char *dot = strchr(key, '.');
    if (!dot) {
        json_object_set_new(obj, key, value);
        return;
    }
    char head[64];
    snprintf(head, sizeof head, "%.*s", (int)(dot - key), key);
    if (!json_is_object(json_object_get(obj, head))) json_object_set_new(obj, head, json_object());
    json_object_set_new(json_object_get(obj, head), dot + 1, value);
}

/* A settings value as a number: an enum by its index in f's values, a bool 0/1; NAN when missing. */
static double settings_number(const json_t *v, const struct job_spec_field *f) {
    if (json_is_number(v)) return json_number_value(v);
    if (json_is_boolean(v)) return json_is_true(v);
    if (json_is_string(v) && f->values) return job_spec_enum_index(f, json_string_value(v));
    return NAN;
}

/* The trainer's value of `key` as it parsed it; NAN for a key this test does not know (a new row of the
 * table then fails here until it is added). */
static double trainer_value(const struct trainer_config *c, const char *key) {
#define K(name, expr) \
    if (!strcmp(key, name)) return (double)(expr)
    K("hyperparameters.n_epochs", c->hp.n_epochs);
    K("hyperparameters.batch_size", c->hp.batch_size);
    K("hyperparameters.learning_rate", c->hp.learning_rate);
    K("hyperparameters.lr_scheduler", c->hp.lr_scheduler);
    K("hyperparameters.warmup_steps", c->hp.warmup_steps);
    K("hyperparameters.max_grad_norm", c->hp.max_grad_norm);
    K("hyperparameters.weight_decay", c->hp.weight_decay);
    K("hyperparameters.max_seq_len", c->hp.max_seq_len);
    K("hyperparameters.gradient_accumulation_steps", c->hp.gradient_accumulation_steps);
    K("hyperparameters.adam_beta1", c->hp.adam_beta1);
    K("hyperparameters.adam_beta2", c->hp.adam_beta2);
    K("hyperparameters.adam_eps", c->hp.adam_eps);
    K("hyperparameters.beta", c->hp.beta);
    K("hyperparameters.kl_coef", c->hp.kl_coef);
    K("hyperparameters.clip_ratio_low", c->hp.clip_ratio_low);
    K("hyperparameters.clip_ratio_high", c->hp.clip_ratio_high);
    K("hyperparameters.ppo_epochs", c->hp.ppo_epochs);
    K("hyperparameters.loss_agg", c->hp.loss_agg);
    K("hyperparameters.norm_adv_by_std", c->hp.norm_adv_by_std);
    K("hyperparameters.dynamic_sampling", c->hp.dynamic_sampling);
    K("hyperparameters.max_gen_batches", c->hp.max_gen_batches);
    K("rollout.n", c->rollout.n);
    K("rollout.max_tokens", c->rollout.max_tokens);
    K("rollout.temperature", c->rollout.temperature);
    K("rollout.top_p", c->rollout.top_p);
    K("rollout.top_k", c->rollout.top_k);
    K("lora.r", c->lora.r);
    K("lora.alpha", c->lora.alpha);
    K("eval_every_steps", c->eval_every_steps);
    K("eval_samples", c->eval_samples);
    K("max_steps", c->max_steps);
    K("checkpoint_every_steps", c->checkpoint_every_steps);
#undef K
    return NAN;
}

static int near(double a, double b) { return fabs(a - b) <= 1e-6 * fmax(1, fabs(b)); }

/* The values a typed field takes at the ends of range r, and just past them (open ends: the end itself). */
static double inside(const struct job_spec_range *r, int upper) {
    double step = (r->max - r->min) * 1e-3;
    if (upper) return r->max_open ? r->max - step : r->max;
    return r->min_open ? r->min + step : r->min;
}
static double past(const struct job_spec_field *f, const struct job_spec_range *r, int upper) {
    double step = f->type == JOB_SPEC_INT ? 1 : (r->max - r->min) * 1e-3;
    if (upper) return r->max_open ? r->max : r->max + step;
    return r->min_open ? r->min : r->min - step;
}
static json_t *json_value(const struct job_spec_field *f, double x) {
    if (f->type == JOB_SPEC_BOOL) return json_boolean(x != 0);
    if (f->type == JOB_SPEC_ENUM) return x >= 0 ? json_string(f->values[(int)x]) : json_string("no-such-value");
    return f->type == JOB_SPEC_INT ? json_integer((json_int_t)x) : json_real(x);
}

/* What the scheduler should write at f's trainer key for API value x of a `method` job (LoRA). */
static double mapped(const struct job_spec_field *f, int method, double x) {
    if (isnan(x)) { /* omitted: the service default; grpo's max_seq_len then leaves room for the response */
        if (!strcmp(f->name, "max_seq_len") && method == 2)
            return f->service_default + job_spec_find(JOB_SPEC_WHET, "max_tokens")->service_default;
        x = f->service_default;
    }
    if (!strcmp(f->name, "learning_rate_multiplier"))
        return job_spec_base_learning_rate(job_spec_method_bit(api_methods[method]), 0) * x;
    if (!strcmp(f->name, "compute_multiplier")) {
        const struct job_spec_field *group = job_spec_find(JOB_SPEC_WHET, "group_size");
        return fmax(group->api.min, lround(group->service_default * x));
    }
    return x;
}

/* A body with f = x (NAN: omitted) for `method`: the gateway takes it, the scheduler maps it as the
 * table says, the trainer reads that back. */
static void check_accepted(const struct job_spec_field *f, int method, double x) {
    char param[JOB_PARAM_MAX];
    struct whet_err err = {0};
    json_t *body = body_with(method, f, isnan(x) ? NULL : json_value(f, x));
    json_t *t = pipeline_settings(body, 0, param, &err);
    json_decref(body);
    CHECK_MSG(t != NULL, "%s = %g for %s refused: %s (%s)", f->name, x, api_methods[method], err.msg, param);
    if (!t) return;
    if (!strcmp(f->name, "full_finetune")) CHECK(json_is_null(json_object_get(t, "lora")) == (x == 1));
    if (f->trainer_key) {
        double want = mapped(f, method, x), got = settings_number(at_key(t, f->trainer_key), f);
        CHECK_MSG(near(got, want), "%s = %g (%s): the scheduler writes %s = %g, expected %g", f->name, x,
                  api_methods[method], f->trainer_key, got, want);
        struct trainer_config cfg;
        if (pipeline_trainer_parses(t, &cfg, NULL) == 0) {
            double read = trainer_value(&cfg, f->trainer_key);
            CHECK_MSG(near(read, want), "%s = %g (%s): the trainer reads %s = %g, expected %g", f->name, x,
                      api_methods[method], f->trainer_key, read, want);
            trainer_config_free(&cfg);
        } else {
            CHECK_MSG(0, "%s = %g (%s): the trainer refuses the settings", f->name, x, api_methods[method]);
        }
    }
    json_decref(t);
}

/* A body with f = value (stolen) for `method` is refused by the gateway at f's path. */
static void check_refused(const struct job_spec_field *f, int method, json_t *value, const char *why) {
    char param[JOB_PARAM_MAX], want[JOB_PARAM_MAX];
    struct whet_err err = {0};
    json_t *body = body_with(method, f, value);
    json_t *t = pipeline_settings(body, 0, param, &err);
    json_decref(body);
    param_path(want, method, f);
    CHECK_MSG(t == NULL, "%s (%s, %s) was accepted", f->name, api_methods[method], why);
    if (t) {
        json_decref(t);
        return;
    }
    CHECK_MSG(!strcmp(param, want), "%s (%s, %s): param \"%s\", expected \"%s\" (%s)", f->name, api_methods[method], why,
              param, want, err.msg);
}

TEST(every_api_field_agrees_across_the_layers) {
    for (size_t i = 0; i < job_spec_count; i++) {
        const struct job_spec_field *f = &job_spec_fields[i];
        if (f->place == JOB_SPEC_TRAINER_ONLY || f->type == JOB_SPEC_OTHER) continue;
        int ranged = f->type == JOB_SPEC_INT || f->type == JOB_SPEC_NUMBER;
        for (int m = 0; m < 3; m++) {
            if (!(f->methods & job_spec_method_bit(api_methods[m]))) {
                check_refused(f, m, json_value(f, ranged ? inside(&f->api, 0) : 0), "another method's field");
                continue;
            }
            check_accepted(f, m, NAN);
            if (ranged) {
                check_accepted(f, m, inside(&f->api, 0));
                check_accepted(f, m, inside(&f->api, 1));
                check_refused(f, m, json_value(f, past(f, &f->api, 0)), "below its range");
                check_refused(f, m, json_value(f, past(f, &f->api, 1)), "above its range");
            } else if (f->type == JOB_SPEC_BOOL) {
                check_accepted(f, m, 0);
                check_accepted(f, m, 1);
                check_refused(f, m, json_integer(1), "not a boolean");
            } else {
                for (int v = 0; f->values[v]; v++) check_accepted(f, m, v);
                check_refused(f, m, json_value(f, -1), "not one of its values");
            }
        }
    }
}

/* A config of `method` (index into trainer_methods) with `key` = value (stolen; NULL: none). */
static json_t *config_with(int method, const char *key, json_t *value) {
    json_t *c = json_pack("{s:s}", "method", trainer_methods[method]);
    if (method == 2) json_object_set_new(c, "grader", grader());
    if (value) set_key(c, key, value);
    return c;
}

/* Each trainer key alone: the trainer's default, range and methods are the table's. */
TEST(every_trainer_key_agrees_with_the_table) {
    for (size_t i = 0; i < job_spec_count; i++) {
        const struct job_spec_field *f = &job_spec_fields[i];
        /* one row per trainer key: the one the trainer reads it from */
        if (!f->trainer_key || job_spec_by_trainer_key(f->trainer_key) != f || f->type == JOB_SPEC_OTHER) continue;
        int ranged = f->type == JOB_SPEC_INT || f->type == JOB_SPEC_NUMBER;
        if (ranged && !f->formula) /* the API asks only what the trainer takes */
            CHECK_MSG(f->place == JOB_SPEC_TRAINER_ONLY ||
                          (job_spec_in_range(&f->trainer, inside(&f->api, 0)) &&
                           job_spec_in_range(&f->trainer, inside(&f->api, 1))),
                      "%s: API range outside the trainer's", f->name);
        for (int m = 0; m < 3; m++) {
            struct trainer_config cfg;
            struct whet_err err = {0};
            /* the trainer evaluates any method at an interval; the API exposes it for reinforcement only */
            int applies = (f->methods & job_spec_method_bit(trainer_methods[m])) != 0 ||
                          !strcmp(f->trainer_key, "eval_every_steps");
            json_t *c = config_with(m, f->trainer_key, NULL);
            int bare_ok = pipeline_trainer_parses(c, &cfg, &err) == 0;
            CHECK_MSG(bare_ok, "%s (%s): the trainer refuses a config without it: %s", f->trainer_key,
                      trainer_methods[m], err.msg);
            if (bare_ok) {
                CHECK_MSG(near(trainer_value(&cfg, f->trainer_key), f->trainer_default), "%s (%s): trainer default %g, "
                          "table %g", f->trainer_key, trainer_methods[m], trainer_value(&cfg, f->trainer_key),
                          f->trainer_default);
                trainer_config_free(&cfg);
            }
            json_decref(c);
            double probes[4] = {ranged ? inside(&f->trainer, 0) : 0, ranged ? inside(&f->trainer, 1) : 1,
                                ranged ? past(f, &f->trainer, 0) : NAN, ranged ? past(f, &f->trainer, 1) : NAN};
            for (int p = 0; p < 4; p++) {
                if (isnan(probes[p])) continue;
                c = config_with(m, f->trainer_key, json_value(f, probes[p]));
                int ok = pipeline_trainer_parses(c, &cfg, &err) == 0, want = applies && p < 2;
                CHECK_MSG(ok == want, "%s = %g (%s): the trainer %s it", f->trainer_key, probes[p], trainer_methods[m],
                          ok ? "takes" : "refuses");
                if (ok) {
                    CHECK(near(trainer_value(&cfg, f->trainer_key), probes[p]));
                    trainer_config_free(&cfg);
                } else if (!want) {
                    CHECK_CONTAINS(err.msg, applies ? f->trainer_key : "only method");
                }
                json_decref(c);
            }
        }
    }
}

int main(void) {
    RUN(every_api_field_agrees_across_the_layers);
    RUN(every_trainer_key_agrees_with_the_table);
    return test_summary();
}
