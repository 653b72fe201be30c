/* serve_session.h - training sessions on the model worker: a client's own LoRA adapter, trained step by
 * step on the worker's one copy of the base (Tinker's training API: forward_backward, optim_step, sample,
 * save), while the same worker serves completions.
 *
 * A session is an adapter view of the base (model_load_adapter_view) loaded with train, so it has its own
 * gradients and AdamW moments; the worker's base is loaded frozen (serve_engine_opts.training). Gradients
 * accumulate over forward_backward calls until optim_step applies them and zeroes them, as in Tinker.
 *
 * forward_backward takes data after Tinker's Datum: input tokens and, per position i, the token that
 * follows (target_tokens[i]) and what the loss needs. With lp the log-prob of the target under the
 * session's current weights (temperature 1), summed over every position of every datum:
 *   cross_entropy        loss = -sum(weights * lp)
 *   importance_sampling  loss = -sum(exp(lp - logprobs) * advantages)    (logprobs: the sampler's)
 *   ppo                  loss = -sum(min(r * advantages, clip(r, clip_low, clip_high) * advantages)),
 *                        r = exp(lp - logprobs)
 * Each is a weighted negative log-likelihood whose weights depend on the forward pass (the gradient of
 * -r·A with respect to lp is -r·A; a clipped term has none), so one forward and one backward pass serve
 * all three (model_set_loss_weights). Many sessions' calls run as ONE pass: their rows are LoRA runs of
 * the frozen base (model_set_lora_runs), each run's gradients go to its own view, and each session's loss
 * and log-probs are its own rows' (a session's result does not depend on what shares its pass, within
 * the summation order of the batched kernels).
 *
 * Thread safety: none; the worker calls all of this on its engine thread, between engine steps. */
#ifndef WHET_SERVE_SESSION_H
#define WHET_SERVE_SESSION_H

#include <stdint.h>

#include "util.h"

struct model;

enum serve_loss { SERVE_LOSS_CROSS_ENTROPY, SERVE_LOSS_IMPORTANCE_SAMPLING, SERVE_LOSS_PPO };
/* "cross_entropy" -> SERVE_LOSS_CROSS_ENTROPY …; -1 for an unknown name. */
int serve_loss_from_name(const char *name);

struct serve_session_lora {
    int r;
    float alpha;
    unsigned targets; /* LORA_* bits (model.h) */
    uint64_t seed;    /* the LoRA A initialisation */
};

struct serve_session {
    char id[64];
    struct model *view; /* the trainable adapter */
    double last_used;   /* whet_now_mono() of its last call: idle sessions expire */
    int sampling;       /* its sample requests in the engine (it cannot change or go meanwhile) */
    int pass_rows, pass_T; /* its call's data and longest datum in the worker's last pass; 0 when not in it */
    long long trained_tokens, sampled_tokens, prefill_tokens; /* metering: tokens it trained on, prompted, drew */
};

/* A new session on `base` (loaded with frozen_base): a fresh adapter as `lora` says, or the PEFT adapter
 * in init_dir (its own r, alpha and targets) when init_dir is not NULL. */
int serve_session_new(struct serve_session **out, struct model *base, const char *id,
                      const struct serve_session_lora *lora, const char *init_dir, struct whet_err *err);
void serve_session_free(struct serve_session *s);

/* A session's state, enough to go on exactly where its last optim_step left it on another worker: its
 * adapter (PEFT files, with its r, alpha and targets) and its optimizer state (AdamW moments and step
 * count, optimizer.safetensors) in dir. Gradients accumulated since the last optim_step are not part of
 * it: call it right after an optim_step (or the create), when there are none. */
int serve_session_save_state(const struct serve_session *s, const char *dir, struct whet_err *err);
/* A session `id` on `base` from serve_session_save_state's dir, with no gradients. */
int serve_session_restore(struct serve_session **out, struct model *base, const char *id, const char *dir,
                          struct whet_err *err);

/* One datum: n input tokens and, per position, the target token and the loss's inputs (weights for
 * cross_entropy, advantages and the sampler's logprobs for the others; NULL when the loss needs none). */
struct serve_datum {
    int n;
    int *input, *targets;
    float *weights, *advantages, *logprobs;
};

/* One session's forward_backward call. */
struct serve_fb {
    struct serve_session *session;
    enum serve_loss loss;
    float clip_low, clip_high; /* ppo's ratio bounds */
    struct serve_datum *data;
    int n_data;
    /* results */
    double loss_value;
    float *logprobs; /* [sum of the data's n]: lp of each target, datum after datum (the caller frees it) */
};

/* Runs n calls (of distinct sessions) as one forward and backward pass of `base`, accumulating each
 * session's gradients. Inputs and targets must lie in [0, vocab). */
int serve_session_forward_backward(struct model *base, struct serve_fb *fbs, int n, struct whet_err *err);

struct serve_adam {
    float learning_rate, beta1, beta2, eps, weight_decay;
    float grad_clip_norm; /* > 0: the gradients' global norm is clipped to it first */
};
/* Tinker's defaults: learning_rate 1e-4, betas 0.9 and 0.95, eps 1e-12, no weight decay, no clipping. */
struct serve_adam serve_adam_default(void);
/* Applies the accumulated gradients (one AdamW step) and zeroes them; returns the gradient norm before
 * clipping. */
float serve_session_optim_step(struct serve_session *s, const struct serve_adam *p);

#endif
