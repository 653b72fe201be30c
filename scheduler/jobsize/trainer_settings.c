/* trainer_settings.c - see trainer_settings.h. OpenAI's method object maps onto the trainer's settings
 * here: the learning-rate multiplier scales a base rate that depends on the method and on LoRA or full
 * fine-tuning, and the `whet` extension may pin LoRA settings, steps, sequence length and, for
 * reinforcement, the GRPO knobs OpenAI does not expose (group size, KL, clipping, sampling).
 *
 *   API (method.<type>.hyperparameters, whet)        trainer config
 *   type supervised | dpo | reinforcement            method sft | dpo | grpo
 *   n_epochs, batch_size                             hyperparameters.n_epochs, .batch_size (examples per
 *                                                    optimizer step; dpo: pairs, grpo: prompts)
 *   learning_rate_multiplier                         hyperparameters.learning_rate = base * multiplier
 *   beta (dpo)                                       hyperparameters.beta
 *   reinforcement.grader                             grader (copied as given)
 *   whet.group_size, or its default * compute_mult.  rollout.n
 *   whet.max_tokens/temperature/top_p/top_k/stop     rollout.* (max_seq_len's default + max_tokens)
 *   whet.kl_coef, clip_ratio_low/high, ppo_epochs,   hyperparameters.* of the same names
 *   loss_agg, norm_adv_by_std, dynamic_sampling
 *   eval_interval, eval_samples                      eval_every_steps, eval_samples
 *   reasoning_effort                                 nothing (see below)
 *
 * The defaults and ranges are the job specification's (common/job_spec.c); what is computed rather
 * than copied is computed here. */
#include "trainer_settings.h"

#include "job_spec.h"

#include <math.h>
#include <string.h>

/* A number that may be missing or "auto". */
static double number_or(const json_t *obj, const char *name, double fallback) {
    json_t *v = json_object_get(obj, name);
    return json_is_number(v) ? json_number_value(v) : fallback;
}

/* The value of the job_spec field `name` at `place` in `obj`, or its service default when missing or
 * "auto" (an enum's or a bool's is read by the callers). */
static double spec_number(const json_t *obj, enum job_spec_place place, const char *name) {
    return number_or(obj, name, job_spec_find(place, name)->service_default);
}
#define HP_NUMBER(obj, name) spec_number(obj, JOB_SPEC_HYPERPARAMETERS, name)
#define WHET_NUMBER(obj, name) spec_number(obj, JOB_SPEC_WHET, name)

static int spec_bool(const json_t *whet, const char *name) {
    json_t *v = json_object_get(whet, name);
    return json_is_boolean(v) ? json_is_true(v) : job_spec_find(JOB_SPEC_WHET, name)->service_default != 0;
}

/* The rollout object: how responses are sampled for each prompt. compute_multiplier is OpenAI's
 * "compute used for exploring the search space"; here that is the group size, so the default group
 * size scales with it (at least group_size's API minimum: a group of one has no advantage). A group
 * size the tenant pins in `whet.group_size` is taken as it is, and compute_multiplier then changes
 * nothing. */
static json_t *rollout_settings(const json_t *hp, const json_t *whet) {
    const struct job_spec_field *group = job_spec_find(JOB_SPEC_WHET, "group_size");
    json_int_t n;
    if (json_is_integer(json_object_get(whet, "group_size"))) {
        n = json_integer_value(json_object_get(whet, "group_size"));
    } else {
        n = (json_int_t)lround(group->service_default * HP_NUMBER(hp, "compute_multiplier"));
        if (n < (json_int_t)group->api.min) n = (json_int_t)group->api.min;
    }
    json_t *r = json_object();
    json_object_set_new(r, "n", json_integer(n));
    json_object_set_new(r, "max_tokens", json_integer((json_int_t)WHET_NUMBER(whet, "max_tokens")));
    json_object_set_new(r, "temperature", json_real(WHET_NUMBER(whet, "temperature")));
    json_object_set_new(r, "top_p", json_real(WHET_NUMBER(whet, "top_p")));
    json_object_set_new(r, "top_k", json_integer((json_int_t)WHET_NUMBER(whet, "top_k")));
    json_t *stop = json_object_get(whet, "stop"), *stops = json_array();
    if (json_is_string(stop)) json_array_append(stops, stop);
    for (size_t i = 0; i < json_array_size(stop); i++) json_array_append(stops, json_array_get(stop, i));
    json_object_set_new(r, "stop", stops);
    return r;
}

/* The GRPO fields of hyperparameters: the loss (veRL's core_algos names) and how advantages are made. */
static void grpo_hyperparameters(json_t *h, const json_t *whet) {
    json_object_set_new(h, "kl_coef", json_real(WHET_NUMBER(whet, "kl_coef")));
    json_object_set_new(h, "clip_ratio_low", json_real(WHET_NUMBER(whet, "clip_ratio_low")));
    json_object_set_new(h, "clip_ratio_high", json_real(WHET_NUMBER(whet, "clip_ratio_high")));
    json_object_set_new(h, "ppo_epochs", json_integer((json_int_t)WHET_NUMBER(whet, "ppo_epochs")));
    const struct job_spec_field *agg_field = job_spec_find(JOB_SPEC_WHET, "loss_agg");
    const char *agg = json_string_value(json_object_get(whet, "loss_agg"));
    json_object_set_new(h, "loss_agg", json_string(agg ? agg : agg_field->values[(int)agg_field->service_default]));
    json_object_set_new(h, "norm_adv_by_std", json_boolean(spec_bool(whet, "norm_adv_by_std")));
    json_object_set_new(h, "dynamic_sampling", json_boolean(spec_bool(whet, "dynamic_sampling")));
}

/* A trainer setting the API does not expose, at the job specification's service default. */
static void trainer_only(json_t *h, const char *name) {
    const struct job_spec_field *f = job_spec_find(JOB_SPEC_TRAINER_ONLY, name);
    json_t *v = f->type == JOB_SPEC_ENUM  ? json_string(f->values[(int)f->service_default])
                : f->type == JOB_SPEC_INT ? json_integer((json_int_t)f->service_default)
                                          : json_real(f->service_default);
    json_object_set_new(h, name, v);
}

/* The lora object: null for a full fine-tune, else whet.lora with the service defaults. */
static json_t *lora_settings(const json_t *whet, int full) {
    if (full) return json_null();
    json_t *lora = json_object_get(whet, "lora");
    json_t *l = json_object();
    json_object_set_new(l, "r", json_integer((json_int_t)spec_number(lora, JOB_SPEC_WHET_LORA, "r")));
    json_object_set_new(l, "alpha", json_real(spec_number(lora, JOB_SPEC_WHET_LORA, "alpha")));
    json_t *modules = json_object_get(lora, "target_modules");
    if (json_is_array(modules)) json_object_set(l, "target_modules", modules);
    return l;
}

json_t *trainer_settings_from_job(const json_t *method, const json_t *whet, int seed) {
    const char *type = json_string_value(json_object_get(method, "type"));
    if (!type) type = "supervised";
    int dpo = !strcmp(type, "dpo"), grpo = !strcmp(type, "reinforcement");
    const json_t *settings = json_object_get(method, type);
    const json_t *hp = json_object_get(settings, "hyperparameters");
    int full = json_is_true(json_object_get(whet, "full_finetune"));

    json_t *t = json_object();
    json_object_set_new(t, "method", json_string(dpo ? "dpo" : grpo ? "grpo" : "sft"));
    json_object_set_new(t, "lora", lora_settings(whet, full));
    double base_lr = job_spec_base_learning_rate(job_spec_method_bit(type), full);
    json_t *h = json_object();
    json_object_set_new(h, "n_epochs", json_integer((json_int_t)HP_NUMBER(hp, "n_epochs")));
    json_object_set_new(h, "batch_size", json_integer((json_int_t)HP_NUMBER(hp, "batch_size")));
    json_object_set_new(h, "learning_rate", json_real(base_lr * HP_NUMBER(hp, "learning_rate_multiplier")));
    trainer_only(h, "lr_scheduler");
    trainer_only(h, "warmup_steps");
    trainer_only(h, "max_grad_norm");
    trainer_only(h, "weight_decay");
    /* A grpo sequence is the prompt and its response: the default leaves max_seq_len's default of prompt
     * before however many tokens the responses may take. */
    double seq_default = job_spec_find(JOB_SPEC_WHET, "max_seq_len")->service_default;
    if (grpo) seq_default += WHET_NUMBER(whet, "max_tokens");
    json_object_set_new(h, "max_seq_len", json_integer((json_int_t)number_or(whet, "max_seq_len", seq_default)));
    trainer_only(h, "gradient_accumulation_steps");
    if (dpo) json_object_set_new(h, "beta", json_real(HP_NUMBER(hp, "beta")));
    if (grpo) grpo_hyperparameters(h, whet);
    json_object_set_new(t, "hyperparameters", h);
    if (grpo) {
        /* reasoning_effort is accepted (OpenAI's reasoning models take it) and ignored: the models
         * served here have no reasoning mode to set. */
        json_t *grader = json_object_get(settings, "grader");
        json_object_set_new(t, "grader", grader ? json_deep_copy(grader) : json_null());
        json_object_set_new(t, "rollout", rollout_settings(hp, whet));
        json_object_set_new(t, "eval_every_steps", json_integer((json_int_t)HP_NUMBER(hp, "eval_interval")));
        /* "auto" scores every validation prompt (0 to the trainer): one prompt says little. */
        json_object_set_new(t, "eval_samples", json_integer((json_int_t)HP_NUMBER(hp, "eval_samples")));
    }
    json_object_set_new(t, "seed", json_integer(seed));
    json_object_set_new(t, "checkpoint_every_steps", json_integer((json_int_t)WHET_NUMBER(whet, "checkpoint_every_steps")));
    json_object_set_new(t, "max_steps", json_integer((json_int_t)WHET_NUMBER(whet, "max_steps")));
    return t;
}
