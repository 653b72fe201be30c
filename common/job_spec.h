/* job_spec.h - the job specification: one table of every hyperparameter and `whet` extension field a
 * fine-tuning job takes, and of the trainer config keys they map to.
 *
 * Three layers read it, so a bound or a default is written once:
 *   the gateway (gateway/job_request.c)        checks a request against the API bounds and methods;
 *   the scheduler (trainer_settings.c)         maps the request onto trainer settings, using the
 *                                              service defaults for what the tenant left out;
 *   the trainer (executor/train/trainer_config.c) checks a config against the trainer bounds and
 *                                              starts from the trainer defaults.
 * tests/unit/job_spec walks the table through all three. Pure data and lookups: no I/O. */
#ifndef WHET_JOB_SPEC_H
#define WHET_JOB_SPEC_H

#include <stddef.h>

/* Where the field sits in the API request. */
enum job_spec_place {
    JOB_SPEC_HYPERPARAMETERS, /* method.<type>.hyperparameters.NAME */
    JOB_SPEC_WHET,            /* whet.NAME */
    JOB_SPEC_WHET_LORA,       /* whet.lora.NAME */
    JOB_SPEC_TRAINER_ONLY,    /* not in the API: a trainer config key a person may set when running by hand */
};

enum job_spec_type {
    JOB_SPEC_INT,
    JOB_SPEC_NUMBER,
    JOB_SPEC_BOOL,
    JOB_SPEC_ENUM,  /* one of `values` */
    JOB_SPEC_OTHER, /* strings and lists, checked by the layer's own code (gpu_types, stop, ...) */
};

/* Methods a field applies to (a bitmask): the API's supervised, dpo and reinforcement are the
 * trainer's sft, dpo and grpo. */
enum {
    JOB_SPEC_SFT = 1,
    JOB_SPEC_DPO = 2,
    JOB_SPEC_GRPO = 4,
    JOB_SPEC_ALL = 7,
};

/* [min, max], either end open when its flag is set: (0, 10] is {0, 10, 1, 0}. */
struct job_spec_range {
    double min, max;
    unsigned char min_open, max_open;
};

struct job_spec_field {
    const char *name;            /* the API name; for JOB_SPEC_TRAINER_ONLY the trainer key's last part */
    enum job_spec_place place;
    const char *trainer_key;     /* "hyperparameters.n_epochs", "rollout.n", "eval_every_steps"; NULL: the
                                  * trainer has no such setting (priority, gpu_types, reasoning_effort) */
    enum job_spec_type type;
    const char *const *values;   /* JOB_SPEC_ENUM: the names, NULL-terminated */
    struct job_spec_range api;   /* what a tenant may ask */
    struct job_spec_range trainer; /* what the trainer accepts under trainer_key (holds `api` unless formula) */
    unsigned char api_auto;      /* the API takes "auto" (resolved by the gateway, or service_default) */
    unsigned char trainer_auto;  /* the trainer takes "auto" (keeps trainer_default) */
    unsigned char formula;       /* the trainer's value is computed from the API value (trainer_settings.c),
                                  * not copied, so the two ranges need not nest */
    double service_default;      /* what the service writes when the tenant leaves the field out (or "auto");
                                  * an enum's index into `values`; a bool 0/1 */
    double trainer_default;      /* what the trainer takes when its config leaves trainer_key out */
    unsigned methods;            /* JOB_SPEC_SFT | JOB_SPEC_DPO | JOB_SPEC_GRPO */
};

extern const struct job_spec_field job_spec_fields[];
extern const size_t job_spec_count;

/* The field named `name` at `place`, or NULL. */
const struct job_spec_field *job_spec_find(enum job_spec_place place, const char *name);
/* The field whose trainer_key is `key` and whose values the trainer reads as they are (not a formula's
 * input), or NULL. */
const struct job_spec_field *job_spec_by_trainer_key(const char *key);
/* The value of `field` named `name` (an enum's index), or -1. */
int job_spec_enum_index(const struct job_spec_field *field, const char *name);
/* JOB_SPEC_SFT/DPO/GRPO for an API ("supervised", "reinforcement") or trainer ("sft", "grpo") method
 * name; 0 when unknown. */
unsigned job_spec_method_bit(const char *method);
/* 1 when x lies in r. */
int job_spec_in_range(const struct job_spec_range *r, double x);

/* Base learning rates: the trainer's learning_rate is base × learning_rate_multiplier. SFT and DPO:
 * the usual LoRA and full fine-tuning rates. GRPO moves the policy with a noisy, self-generated signal
 * and wants smaller steps: TRL's GRPOConfig defaults to 1e-6 for full fine-tuning, and LoRA recipes use
 * some 10x that and more (an adapter starts from zero and has far fewer parameters). */
double job_spec_base_learning_rate(unsigned method_bit, int full_finetune);

#endif
