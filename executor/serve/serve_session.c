/* serve_session.c - training sessions' adapters and their passes (see serve_session.h).
 *
 * A forward_backward pass lays the data of every call out as rows of one batch (B data, T the longest,
 * shorter rows padded with targets -1: causal attention never lets padding reach a real token), the
 * rows of one session consecutive so that they form its LoRA run. */
#include "serve_session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

int serve_loss_from_name(const char *name) {
    static const char *const names[] = {"cross_entropy", "importance_sampling", "ppo"};
    for (int i = 0; i < (int)WHET_ARRAY_LEN(names); i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

int serve_session_new(struct serve_session **out, struct model *base, const char *id,
                      const struct serve_session_lora *lora, const char *init_dir, struct whet_err *err) {
    *out = NULL;
    struct model_opts o = model_opts_default();
    o.train = 1;
    o.lora_r = lora->r, o.lora_alpha = lora->alpha, o.lora_targets = lora->targets, o.seed = lora->seed;
    o.adapter_dir = init_dir;
    struct model *view;
    if (model_load_adapter_view(&view, base, &o, err)) return -1;
    model_zero_grad(view);
    struct serve_session *s = xcalloc(1, sizeof *s);
    snprintf(s->id, sizeof s->id, "%s", id);
    s->view = view;
    s->last_used = whet_now_mono();
    *out = s;
    return 0;
}

void serve_session_free(struct serve_session *s) {
    if (!s) return;
    model_free(s->view);
    free(s);
}

int serve_session_save_state(const struct serve_session *s, const char *dir, struct whet_err *err) {
    char *optimizer = xasprintf("%s/optimizer.safetensors", dir);
    int rc = model_save_adapter(s->view, dir, err) || model_save_optimizer(s->view, optimizer, err);
    free(optimizer);
    return rc ? -1 : 0;
}

int serve_session_restore(struct serve_session **out, struct model *base, const char *id, const char *dir,
                          struct whet_err *err) {
    const struct serve_session_lora adapters_own = {0}; /* the adapter in dir says r, alpha and targets */
    if (serve_session_new(out, base, id, &adapters_own, dir, err)) return -1;
    char *optimizer = xasprintf("%s/optimizer.safetensors", dir);
    int rc = model_load_optimizer((*out)->view, optimizer, err);
    free(optimizer);
    if (rc) {
        serve_session_free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

/* The weight of each position of a call's data in the backward pass (which takes the gradient of
 * sum(weight * nll), nll = -lp), and its share of the loss. */
static void loss_of(struct serve_fb *f, const float *lp, float *w) {
    double loss = 0;
    for (int d = 0, k = 0; d < f->n_data; d++) {
        const struct serve_datum *x = &f->data[d];
        for (int i = 0; i < x->n; i++, k++) {
            if (f->loss == SERVE_LOSS_CROSS_ENTROPY) {
                w[k] = x->weights[i];
                loss -= (double)x->weights[i] * lp[k];
                continue;
            }
            double r = exp((double)lp[k] - x->logprobs[i]), a = x->advantages[i];
            double term = r * a, grad_w = term;
            if (f->loss == SERVE_LOSS_PPO) {
                double clipped = (r < f->clip_low ? f->clip_low : r > f->clip_high ? f->clip_high : r) * a;
                if (clipped < term) term = clipped, grad_w = 0; /* the clipped ratio is a constant */
            }
            w[k] = (float)grad_w;
            loss -= term;
        }
    }
    f->loss_value = loss;
}

int serve_session_forward_backward(struct model *base, struct serve_fb *fbs, int n, struct whet_err *err) {
    int B = 0, T = 1;
    for (int f = 0; f < n; f++)
        for (int d = 0; d < fbs[f].n_data; d++, B++)
            if (fbs[f].data[d].n > T) T = fbs[f].data[d].n;
    if (B == 0) return whet_errf(err, "forward_backward: no data");
    size_t N = (size_t)B * (size_t)T;
    int *ids = xcalloc(N, sizeof *ids), *targets = xmalloc(N * sizeof *targets);
    float *nll = xmalloc(N * sizeof *nll), *w = xcalloc(N, sizeof *w);
    struct lora_run *runs = xmalloc(sizeof *runs * (size_t)n);
    for (size_t i = 0; i < N; i++) targets[i] = -1;
    for (int f = 0, row = 0; f < n; f++) {
        int first = row;
        for (int d = 0; d < fbs[f].n_data; d++, row++) {
            const struct serve_datum *x = &fbs[f].data[d];
            memcpy(ids + (size_t)row * T, x->input, sizeof(int) * (size_t)x->n);
            memcpy(targets + (size_t)row * T, x->targets, sizeof(int) * (size_t)x->n);
        }
        runs[f] = (struct lora_run){fbs[f].session->view, (row - first) * T};
    }
    struct model_batch batch = {.B = B, .T = T, .ids = ids, .targets = targets};
    int rc = model_set_lora_runs(base, runs, n, err) || model_forward(base, &batch, NULL, err);
    if (!rc) {
        model_get_token_losses(base, nll);
        /* each call's log-probs and weights, packed datum after datum, then spread to the batch's rows */
        for (int f = 0, row = 0; f < n; f++) {
            struct serve_fb *fb = &fbs[f];
            int total = 0;
            for (int d = 0; d < fb->n_data; d++) total += fb->data[d].n;
            fb->logprobs = xmalloc(sizeof(float) * (size_t)(total ? total : 1));
            float *cw = xmalloc(sizeof(float) * (size_t)(total ? total : 1));
            for (int d = 0, k = 0; d < fb->n_data; d++)
                for (int i = 0; i < fb->data[d].n; i++, k++) fb->logprobs[k] = -nll[(size_t)(row + d) * T + i];
            loss_of(fb, fb->logprobs, cw);
            for (int d = 0, k = 0; d < fb->n_data; d++, row++) {
                memcpy(w + (size_t)row * T, cw + k, sizeof(float) * (size_t)fb->data[d].n);
                k += fb->data[d].n;
            }
            free(cw);
            fb->session->trained_tokens += total;
        }
        rc = model_set_loss_weights(base, w, err) || model_backward(base, 1.0f, err);
    }
    struct whet_err ignored;
    model_set_lora_runs(base, NULL, 0, &ignored);
    free(ids), free(targets), free(nll), free(w), free(runs);
    return rc ? -1 : 0;
}

struct serve_adam serve_adam_default(void) {
    return (struct serve_adam){.learning_rate = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-12f};
}

float serve_session_optim_step(struct serve_session *s, const struct serve_adam *p) {
    float norm = model_clip_grad_norm(s->view, p->grad_clip_norm);
    model_adamw_step(s->view, p->learning_rate, p->beta1, p->beta2, p->eps, p->weight_decay);
    model_zero_grad(s->view);
    return norm;
}
