/* job_spec.c - the job specification table (see job_spec.h) and its lookups. */
#include "job_spec.h"

#include <string.h>

static const char *const reasoning_efforts[] = {"default", "low", "medium", "high", NULL};
static const char *const loss_aggs[] = {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum", NULL};
static const char *const lr_schedulers[] = {"linear", "cosine", "constant", NULL};

#define CLOSED(a, b) {a, b, 0, 0}     /* [a, b] */
#define LEFT_OPEN(a, b) {a, b, 1, 0}  /* (a, b] */
#define RIGHT_OPEN(a, b) {a, b, 0, 1} /* [a, b) */
#define OPEN(a, b) {a, b, 1, 1}       /* (a, b) */
#define NO_RANGE {0, 0, 0, 0}         /* not a number, or no such place */

#define HP JOB_SPEC_HYPERPARAMETERS
#define WHET JOB_SPEC_WHET
#define LORA JOB_SPEC_WHET_LORA
#define TRAINER JOB_SPEC_TRAINER_ONLY
#define INT JOB_SPEC_INT
#define NUMBER JOB_SPEC_NUMBER
#define BOOL JOB_SPEC_BOOL
#define ENUM JOB_SPEC_ENUM
#define OTHER JOB_SPEC_OTHER
#define SFT JOB_SPEC_SFT
#define DPO JOB_SPEC_DPO
#define GRPO JOB_SPEC_GRPO
#define ALL JOB_SPEC_ALL

/* The columns: name, place, trainer key, type, enum values, API range, trainer range, API takes "auto",
 * trainer takes "auto", formula, service default, trainer default, methods.
 *
 * The service defaults are OpenAI's where OpenAI has one ("auto" n_epochs and batch_size are resolved
 * from the training file by the gateway; the 3 and 4 here are only for a stored job that still says
 * "auto"); the GRPO ones are veRL's and DAPO's usual values. The trainer defaults are what a config
 * written by hand gets: a short LoRA run (1 epoch of batches of 1, checkpoints only at the end). */
const struct job_spec_field job_spec_fields[] = {
    /* OpenAI's method hyperparameters */
    {"n_epochs", HP, "hyperparameters.n_epochs", INT, NULL, CLOSED(1, 50), CLOSED(1, 1000), 1, 1, 0, 3, 1, ALL},
    {"batch_size", HP, "hyperparameters.batch_size", INT, NULL, CLOSED(1, 256), CLOSED(1, 4096), 1, 1, 0, 4, 1, ALL},
    /* learning_rate = job_spec_base_learning_rate × multiplier; the trainer's own default is LoRA's (a
     * tenth of it for full fine-tuning, trainer_config.c). */
    {"learning_rate_multiplier", HP, "hyperparameters.learning_rate", NUMBER, NULL, LEFT_OPEN(0, 10),
     LEFT_OPEN(0, 1), 1, 1, 1, 1, 1e-4, ALL},
    {"beta", HP, "hyperparameters.beta", NUMBER, NULL, LEFT_OPEN(0, 2), LEFT_OPEN(0, 2), 1, 0, 0, 0.1, 0.1, DPO},
    {"eval_interval", HP, "eval_every_steps", INT, NULL, CLOSED(1, 1000), CLOSED(0, 100000000), 1, 0, 0, 1, 0, GRPO},
    /* "auto" (0 to the trainer) scores every validation prompt: one prompt says little. */
    {"eval_samples", HP, "eval_samples", INT, NULL, CLOSED(1, 1000), CLOSED(0, 100000000), 1, 1, 0, 0, 0, GRPO},
    /* "compute used for exploring the search space": scales the default group size (rollout.n =
     * group_size's default × multiplier, at least 2) unless whet.group_size pins it; rollout.n's trainer
     * range and default are group_size's. */
    {"compute_multiplier", HP, "rollout.n", NUMBER, NULL, LEFT_OPEN(0, 10), NO_RANGE, 1, 0, 1, 1, 0, GRPO},
    /* Accepted (OpenAI's reasoning models take it) and ignored: the models served have no reasoning mode. */
    {"reasoning_effort", HP, NULL, ENUM, reasoning_efforts, NO_RANGE, NO_RANGE, 0, 0, 0, 0, 0, GRPO},

    /* the whet extension: scheduling */
    {"priority", WHET, NULL, INT, NULL, CLOSED(-100, 100), NO_RANGE, 0, 0, 0, 0, 0, ALL},
    {"full_finetune", WHET, NULL, BOOL, NULL, NO_RANGE, NO_RANGE, 0, 0, 0, 0, 0, ALL}, /* true: "lora": null */
    {"lora", WHET, NULL, OTHER, NULL, NO_RANGE, NO_RANGE, 0, 0, 0, 0, 0, ALL},          /* the rows below */
    {"gpu_types", WHET, NULL, OTHER, NULL, NO_RANGE, NO_RANGE, 0, 0, 0, 0, 0, ALL},
    {"regions", WHET, NULL, OTHER, NULL, NO_RANGE, NO_RANGE, 0, 0, 0, 0, 0, ALL},
    {"max_gpus", WHET, NULL, INT, NULL, CLOSED(1, 1024), NO_RANGE, 0, 0, 0, 0, 0, ALL},
    {"min_gpus", WHET, NULL, INT, NULL, CLOSED(1, 1024), NO_RANGE, 0, 0, 0, 0, 0, ALL}, /* a floor on the gang */
    /* training length and checkpoint cadence; 0 to the trainer is "n_epochs decides" / "only final/" */
    {"max_steps", WHET, "max_steps", INT, NULL, CLOSED(1, 10000000), CLOSED(0, 100000000), 0, 0, 0, 0, 0, ALL},
    {"checkpoint_every_steps", WHET, "checkpoint_every_steps", INT, NULL, CLOSED(1, 10000000),
     CLOSED(0, 100000000), 0, 0, 0, 10, 0, ALL},
    /* tokens per packed row; grpo's service default is this plus max_tokens (the prompt, then the response) */
    {"max_seq_len", WHET, "hyperparameters.max_seq_len", INT, NULL, CLOSED(8, 131072), CLOSED(8, 1048576), 0, 0, 0,
     512, 1024, ALL},

    /* whet.lora */
    {"r", LORA, "lora.r", INT, NULL, CLOSED(1, 256), CLOSED(1, 1024), 0, 0, 0, 16, 16, ALL},
    {"alpha", LORA, "lora.alpha", NUMBER, NULL, LEFT_OPEN(0, 4096), LEFT_OPEN(0, 1e6), 0, 0, 0, 32, 32, ALL},
    {"target_modules", LORA, "lora.target_modules", OTHER, NULL, NO_RANGE, NO_RANGE, 0, 0, 0, 0, 0, ALL},

    /* the whet extension: GRPO (veRL's names; notes/grpo_contract.md) */
    {"group_size", WHET, "rollout.n", INT, NULL, CLOSED(2, 256), CLOSED(1, 256), 0, 0, 0, 8, 8, GRPO},
    {"kl_coef", WHET, "hyperparameters.kl_coef", NUMBER, NULL, CLOSED(0, 10), CLOSED(0, 10), 0, 0, 0, 0.001, 0.001,
     GRPO},
    /* PPO's clipping on both sides; DAPO raises the high one to 0.28. A low ratio of 1 would clip the
     * ratio below at 0: no clipping at all. */
    {"clip_ratio_low", WHET, "hyperparameters.clip_ratio_low", NUMBER, NULL, OPEN(0, 1), RIGHT_OPEN(0, 1), 0, 0, 0,
     0.2, 0.2, GRPO},
    {"clip_ratio_high", WHET, "hyperparameters.clip_ratio_high", NUMBER, NULL, LEFT_OPEN(0, 1), CLOSED(0, 10), 0, 0,
     0, 0.2, 0.2, GRPO},
    {"ppo_epochs", WHET, "hyperparameters.ppo_epochs", INT, NULL, CLOSED(1, 16), CLOSED(1, 100), 0, 0, 0, 1, 1, GRPO},
    {"loss_agg", WHET, "hyperparameters.loss_agg", ENUM, loss_aggs, NO_RANGE, NO_RANGE, 0, 0, 0, 0, 0, GRPO},
    {"norm_adv_by_std", WHET, "hyperparameters.norm_adv_by_std", BOOL, NULL, NO_RANGE, NO_RANGE, 0, 0, 0, 1, 1, GRPO},
    {"dynamic_sampling", WHET, "hyperparameters.dynamic_sampling", BOOL, NULL, NO_RANGE, NO_RANGE, 0, 0, 0, 0, 0,
     GRPO},
    /* rollout sampling, in the names of OpenAI's chat completions (plus top_k; 0 is off) */
    {"max_tokens", WHET, "rollout.max_tokens", INT, NULL, CLOSED(1, 32768), CLOSED(1, 65536), 0, 0, 0, 64, 64, GRPO},
    {"temperature", WHET, "rollout.temperature", NUMBER, NULL, CLOSED(0, 2), CLOSED(0, 10), 0, 0, 0, 1, 1, GRPO},
    {"top_p", WHET, "rollout.top_p", NUMBER, NULL, LEFT_OPEN(0, 1), LEFT_OPEN(0, 1), 0, 0, 0, 1, 1, GRPO},
    {"top_k", WHET, "rollout.top_k", INT, NULL, CLOSED(0, 1000000), CLOSED(0, 1000000), 0, 0, 0, 0, 0, GRPO},
    {"stop", WHET, "rollout.stop", OTHER, NULL, NO_RANGE, NO_RANGE, 0, 0, 0, 0, 0, GRPO},

    /* trainer settings the API does not expose (the service leaves them at the trainer's defaults) */
    {"lr_scheduler", TRAINER, "hyperparameters.lr_scheduler", ENUM, lr_schedulers, NO_RANGE, NO_RANGE, 0, 0, 0, 0, 0,
     ALL},
    {"warmup_steps", TRAINER, "hyperparameters.warmup_steps", INT, NULL, NO_RANGE, CLOSED(0, 100000000), 0, 0, 0, 0,
     0, ALL},
    {"max_grad_norm", TRAINER, "hyperparameters.max_grad_norm", NUMBER, NULL, NO_RANGE, CLOSED(0, 1e6), 0, 0, 0, 1, 1,
     ALL}, /* 0 turns clipping off */
    {"weight_decay", TRAINER, "hyperparameters.weight_decay", NUMBER, NULL, NO_RANGE, CLOSED(0, 1), 0, 0, 0, 0, 0,
     ALL},
    {"gradient_accumulation_steps", TRAINER, "hyperparameters.gradient_accumulation_steps", INT, NULL, NO_RANGE,
     CLOSED(1, 4096), 0, 0, 0, 1, 1, ALL},
    {"adam_beta1", TRAINER, "hyperparameters.adam_beta1", NUMBER, NULL, NO_RANGE, RIGHT_OPEN(0, 1), 0, 0, 0, 0.9, 0.9,
     ALL},
    {"adam_beta2", TRAINER, "hyperparameters.adam_beta2", NUMBER, NULL, NO_RANGE, RIGHT_OPEN(0, 1), 0, 0, 0, 0.999,
     0.999, ALL},
    {"adam_eps", TRAINER, "hyperparameters.adam_eps", NUMBER, NULL, NO_RANGE, LEFT_OPEN(0, 1), 0, 0, 0, 1e-8, 1e-8,
     ALL},
    /* with dynamic_sampling: rollout batches a step may sample; 3 × batch_size prompts is DAPO's recipe */
    {"max_gen_batches", TRAINER, "hyperparameters.max_gen_batches", INT, NULL, NO_RANGE, CLOSED(1, 100), 0, 0, 0, 3,
     3, GRPO},
};
const size_t job_spec_count = sizeof job_spec_fields / sizeof job_spec_fields[0];

const struct job_spec_field *job_spec_find(enum job_spec_place place, const char *name) {
    for (size_t i = 0; i < job_spec_count; i++)
        if (job_spec_fields[i].place == place && strcmp(job_spec_fields[i].name, name) == 0) return &job_spec_fields[i];
    return NULL;
}

const struct job_spec_field *job_spec_by_trainer_key(const char *key) {
    for (size_t i = 0; i < job_spec_count; i++) {
        const struct job_spec_field *f = &job_spec_fields[i];
        if (f->trainer_key && !f->formula && strcmp(f->trainer_key, key) == 0) return f;
    }
    /* learning_rate has only a formula's row: its trainer range and default are still that row's. */
    for (size_t i = 0; i < job_spec_count; i++) {
        const struct job_spec_field *f = &job_spec_fields[i];
        if (f->trainer_key && strcmp(f->trainer_key, key) == 0) return f;
    }
    return NULL;
}

int job_spec_enum_index(const struct job_spec_field *field, const char *name) {
    for (int i = 0; field->values && field->values[i]; i++)
        if (strcmp(field->values[i], name) == 0) return i;
    return -1;
}

unsigned job_spec_method_bit(const char *method) {
    if (!strcmp(method, "supervised") || !strcmp(method, "sft")) return JOB_SPEC_SFT;
    if (!strcmp(method, "dpo")) return JOB_SPEC_DPO;
    if (!strcmp(method, "reinforcement") || !strcmp(method, "grpo")) return JOB_SPEC_GRPO;
    return 0;
}

int job_spec_in_range(const struct job_spec_range *r, double x) {
    if (x < r->min || (r->min_open && x == r->min)) return 0;
    return !(x > r->max || (r->max_open && x == r->max));
}

double job_spec_base_learning_rate(unsigned method_bit, int full_finetune) {
    if (method_bit == JOB_SPEC_GRPO) return full_finetune ? 1e-6 : 5e-5;
    return full_finetune ? 2e-5 : 2e-4;
}
