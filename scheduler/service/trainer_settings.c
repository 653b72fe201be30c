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
 *   whet.group_size, or 8 * compute_multiplier       rollout.n
 *   whet.max_tokens/temperature/top_p/top_k/stop     rollout.* (max_seq_len defaults to 512 + max_tokens)
 *   whet.kl_coef, clip_ratio_low/high, ppo_epochs,   hyperparameters.* of the same names
 *   loss_agg, norm_adv_by_std, dynamic_sampling
 *   eval_interval, eval_samples                      eval_every_steps, eval_samples
 *   reasoning_effort                                 nothing (see below) */
#include "trainer_settings.h"

#include <math.h>
#include <string.h>

/* Base learning rates, scaled by learning_rate_multiplier. SFT and DPO: the usual LoRA and full
 * fine-tuning rates. GRPO moves the policy with a noisy, self-generated signal and wants smaller
 * steps: TRL's GRPOConfig defaults to 1e-6 for full fine-tuning, and LoRA recipes use some 10x that
 * and more (an adapter starts from zero and has far fewer parameters). */
#define BASE_LR_LORA 2e-4
#define BASE_LR_FULL 2e-5
#define BASE_LR_GRPO_LORA 5e-5
#define BASE_LR_GRPO_FULL 1e-6

/* A number that may be missing or "auto". */
static double number_or(const json_t *obj, const char *name, double fallback) {
    json_t *v = json_object_get(obj, name);
    return json_is_number(v) ? json_number_value(v) : fallback;
}

static int bool_or(const json_t *obj, const char *name, int fallback) {
    json_t *v = json_object_get(obj, name);
    return json_is_boolean(v) ? json_is_true(v) : fallback;
}

/* The rollout object: how responses are sampled for each prompt. compute_multiplier is OpenAI's
 * "compute used for exploring the search space"; here that is the group size, so the default group of
 * 8 responses per prompt scales with it (at least 2: a group of one has no advantage). A group size
 * the tenant pins in `whet.group_size` is taken as it is, and compute_multiplier then changes nothing. */
static json_t *rollout_settings(const json_t *hp, const json_t *whet) {
    json_int_t n;
    if (json_is_integer(json_object_get(whet, "group_size"))) {
        n = json_integer_value(json_object_get(whet, "group_size"));
    } else {
        n = (json_int_t)lround(TRAINER_GRPO_GROUP_SIZE * number_or(hp, "compute_multiplier", 1.0));
        if (n < 2) n = 2;
    }
    json_t *r = json_object();
    json_object_set_new(r, "n", json_integer(n));
    json_object_set_new(r, "max_tokens", json_integer((json_int_t)number_or(whet, "max_tokens", TRAINER_GRPO_MAX_TOKENS)));
    json_object_set_new(r, "temperature", json_real(number_or(whet, "temperature", 1.0)));
    json_object_set_new(r, "top_p", json_real(number_or(whet, "top_p", 1.0)));
    json_object_set_new(r, "top_k", json_integer((json_int_t)number_or(whet, "top_k", 0)));
    json_t *stop = json_object_get(whet, "stop"), *stops = json_array();
    if (json_is_string(stop)) json_array_append(stops, stop);
    for (size_t i = 0; i < json_array_size(stop); i++) json_array_append(stops, json_array_get(stop, i));
    json_object_set_new(r, "stop", stops);
    return r;
}

/* The GRPO fields of hyperparameters: the loss (veRL's core_algos names) and how advantages are made. */
static void grpo_hyperparameters(json_t *h, const json_t *whet) {
    json_object_set_new(h, "kl_coef", json_real(number_or(whet, "kl_coef", TRAINER_GRPO_KL_COEF)));
    json_object_set_new(h, "clip_ratio_low", json_real(number_or(whet, "clip_ratio_low", TRAINER_GRPO_CLIP_RATIO)));
    json_object_set_new(h, "clip_ratio_high", json_real(number_or(whet, "clip_ratio_high", TRAINER_GRPO_CLIP_RATIO)));
    json_object_set_new(h, "ppo_epochs", json_integer((json_int_t)number_or(whet, "ppo_epochs", 1)));
    const char *agg = json_string_value(json_object_get(whet, "loss_agg"));
    json_object_set_new(h, "loss_agg", json_string(agg ? agg : "token-mean"));
    json_object_set_new(h, "norm_adv_by_std", json_boolean(bool_or(whet, "norm_adv_by_std", 1)));
    json_object_set_new(h, "dynamic_sampling", json_boolean(bool_or(whet, "dynamic_sampling", 0)));
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
    if (full) {
        json_object_set_new(t, "lora", json_null());
    } else {
        json_t *lora = json_object_get(whet, "lora");
        json_t *l = json_object();
        json_object_set_new(l, "r", json_integer((json_int_t)number_or(lora, "r", 16)));
        json_object_set_new(l, "alpha", json_real(number_or(lora, "alpha", 32)));
        json_t *modules = json_object_get(lora, "target_modules");
        if (json_is_array(modules)) json_object_set(l, "target_modules", modules);
        json_object_set_new(t, "lora", l);
    }
    double base_lr = grpo ? (full ? BASE_LR_GRPO_FULL : BASE_LR_GRPO_LORA) : (full ? BASE_LR_FULL : BASE_LR_LORA);
    json_t *h = json_object();
    json_object_set_new(h, "n_epochs", json_integer((json_int_t)number_or(hp, "n_epochs", 3)));
    json_object_set_new(h, "batch_size", json_integer((json_int_t)number_or(hp, "batch_size", 4)));
    json_object_set_new(h, "learning_rate", json_real(base_lr * number_or(hp, "learning_rate_multiplier", 1)));
    json_object_set_new(h, "lr_scheduler", json_string("linear"));
    json_object_set_new(h, "warmup_steps", json_integer(0));
    json_object_set_new(h, "max_grad_norm", json_real(1.0));
    json_object_set_new(h, "weight_decay", json_real(0.0));
    /* A grpo sequence is the prompt and its response: the default leaves 512 tokens of prompt before
     * however many tokens the responses may take. */
    double max_tokens = number_or(whet, "max_tokens", TRAINER_GRPO_MAX_TOKENS);
    json_object_set_new(h, "max_seq_len", json_integer((json_int_t)number_or(whet, "max_seq_len", grpo ? 512 + max_tokens : 512)));
    json_object_set_new(h, "gradient_accumulation_steps", json_integer(1));
    if (dpo) json_object_set_new(h, "beta", json_real(number_or(hp, "beta", 0.1)));
    if (grpo) grpo_hyperparameters(h, whet);
    json_object_set_new(t, "hyperparameters", h);
    if (grpo) {
        /* reasoning_effort is accepted (OpenAI's reasoning models take it) and ignored: the models
         * served here have no reasoning mode to set. */
        json_t *grader = json_object_get(settings, "grader");
        json_object_set_new(t, "grader", grader ? json_deep_copy(grader) : json_null());
        json_object_set_new(t, "rollout", rollout_settings(hp, whet));
        json_object_set_new(t, "eval_every_steps", json_integer((json_int_t)number_or(hp, "eval_interval", 1)));
        /* "auto" scores every validation prompt (0 to the trainer): one prompt says little. */
        json_object_set_new(t, "eval_samples", json_integer((json_int_t)number_or(hp, "eval_samples", 0)));
    }
    json_object_set_new(t, "seed", json_integer(seed));
    json_object_set_new(t, "checkpoint_every_steps", json_integer((json_int_t)number_or(whet, "checkpoint_every_steps", 10)));
    json_object_set_new(t, "max_steps", json_integer((json_int_t)number_or(whet, "max_steps", 0)));
    return t;
}
