/* test_serve_session.c - training sessions' passes (executor/serve/serve_session.c) on the tiny model:
 * a session started from an adapter reports the log-probs of that adapter loaded alone (what `whet
 * score` measures); two sessions in one pass get what each gets alone (log-probs and gradients);
 * importance_sampling at ratio 1 has cross_entropy's gradient, and ppo's clipped tokens none; the losses
 * are Tinker's formulas; cross_entropy steps lower the loss; a session restored from the state saved after an
 * optim_step (on another copy of the base, as another worker) goes on as the original: the same step count,
 * log-probs and steps after it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "serve_session.h"
#include "test.h"
#include "tiny_models.h"

#define LEN 9
static char root_dir[64], model_dir[128], adapter_dir[160];
static int ids[2][LEN + 1]; /* two token sequences: input ids[0..LEN), targets ids[1..LEN] */

static int setup(void) {
    struct whet_err err;
    snprintf(root_dir, sizeof root_dir, "/tmp/whet-session-XXXXXX");
    int rc = tiny_model_write(root_dir, model_dir, &err);
    snprintf(adapter_dir, sizeof adapter_dir, "%s/adapter", root_dir); /* root_dir is made by now */
    if (rc || random_adapter_write(model_dir, adapter_dir, 4, LORA_ALL, 7, 0.05f, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return -1;
    }
    for (int s = 0; s < 2; s++)
        for (int t = 0; t <= LEN; t++) ids[s][t] = (s * 577 + t * 131 + 5) % 2000;
    return 0;
}

static struct model *frozen_base(void) {
    struct model_opts o = model_opts_default();
    o.train = o.frozen_base = 1;
    struct model *m;
    struct whet_err err;
    CHECK_MSG(model_load(&m, model_dir, &o, &err) == 0, "%s", err.msg);
    return m;
}

static struct serve_session *session(struct model *base, const char *init) {
    struct serve_session_lora l = {.r = 4, .alpha = 8, .targets = LORA_Q | LORA_V | LORA_UP, .seed = 3};
    struct serve_session *s;
    struct whet_err err;
    CHECK_MSG(serve_session_new(&s, base, "s", &l, init, &err) == 0, "%s", err.msg);
    return s;
}

/* One datum of sequence `seq` with every position's loss inputs set to these values. */
static struct serve_datum datum(int seq, float weight, float advantage, const float *sampling_logprobs) {
    struct serve_datum d = {.n = LEN,
                            .input = malloc(sizeof(int) * LEN),
                            .targets = malloc(sizeof(int) * LEN),
                            .weights = malloc(sizeof(float) * LEN),
                            .advantages = malloc(sizeof(float) * LEN),
                            .logprobs = malloc(sizeof(float) * LEN)};
    for (int i = 0; i < LEN; i++) {
        d.input[i] = ids[seq][i], d.targets[i] = ids[seq][i + 1];
        d.weights[i] = weight, d.advantages[i] = advantage,
        d.logprobs[i] = sampling_logprobs ? sampling_logprobs[i] : 0;
    }
    return d;
}

static void datum_free(struct serve_datum *d) {
    free(d->input), free(d->targets), free(d->weights), free(d->advantages), free(d->logprobs);
}

/* Runs one call of session s on datum d; the log-probs (LEN) to lp when not NULL; returns the loss. */
static double run(struct model *base, struct serve_session *s, enum serve_loss loss, struct serve_datum *d, float *lp) {
    struct serve_fb fb = {.session = s, .loss = loss, .clip_low = 0.8f, .clip_high = 1.2f, .data = d, .n_data = 1};
    struct whet_err err;
    CHECK_MSG(serve_session_forward_backward(base, &fb, 1, &err) == 0, "%s", err.msg);
    if (lp && fb.logprobs) memcpy(lp, fb.logprobs, sizeof(float) * LEN);
    free(fb.logprobs);
    return fb.loss_value;
}

static double grad_diff(const struct model *a, const struct model *b) {
    double worst = 0;
    for (int i = 0; i < model_num_tensors(a); i++) {
        const char *name = model_tensor_name(a, i);
        if (!strstr(name, "lora_")) continue;
        long long n = model_tensor_numel(a, name);
        float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
        struct whet_err err;
        CHECK(model_get_grad(a, name, x, &err) == 0 && model_get_grad(b, name, y, &err) == 0);
        for (long long k = 0; k < n; k++) worst = fmax(worst, fabs((double)x[k] - y[k]));
        free(x), free(y);
    }
    return worst;
}

static double grad_norm2(const struct model *a) {
    double sum = 0;
    for (int i = 0; i < model_num_tensors(a); i++) {
        const char *name = model_tensor_name(a, i);
        if (!strstr(name, "lora_")) continue;
        long long n = model_tensor_numel(a, name);
        float *x = malloc(sizeof(float) * (size_t)n);
        struct whet_err err;
        CHECK(model_get_grad(a, name, x, &err) == 0);
        for (long long k = 0; k < n; k++) sum += (double)x[k] * x[k];
        free(x);
    }
    return sum;
}

TEST(logprobs_equal_the_adapter_alone) {
    struct model *base = frozen_base();
    struct serve_session *s = session(base, adapter_dir);
    struct serve_datum d = datum(0, 1, 0, NULL);
    float lp[LEN];
    double loss = run(base, s, SERVE_LOSS_CROSS_ENTROPY, &d, lp);
    /* the reference: the adapter loaded the ordinary way, one forward with targets (as `whet score`) */
    struct model_opts o = model_opts_default();
    o.adapter_dir = adapter_dir;
    struct model *alone;
    struct whet_err err;
    CHECK(model_load(&alone, model_dir, &o, &err) == 0);
    struct model_batch b = {.B = 1, .T = LEN, .ids = d.input, .targets = d.targets};
    float mean, nll[LEN];
    CHECK(model_forward(alone, &b, &mean, &err) == 0);
    model_get_token_losses(alone, nll);
    double sum = 0, worst = 0;
    for (int i = 0; i < LEN; i++) sum -= lp[i], worst = fmax(worst, fabs(lp[i] + nll[i]));
    CHECK_MSG(worst < 1e-4, "log-probs differ from the adapter alone by %g", worst);
    CHECK_NEAR(sum / LEN, mean, 1e-4);
    CHECK_NEAR(loss, sum, 1e-3); /* cross_entropy with weights 1: -sum(lp) */
    CHECK(lp[0] < 0);
    datum_free(&d);
    model_free(alone);
    serve_session_free(s);
    model_free(base);
}

TEST(two_sessions_in_one_pass_equal_each_alone) {
    struct model *base = frozen_base();
    struct serve_session *a = session(base, adapter_dir), *b = session(base, NULL);
    struct serve_datum da = datum(0, 1, 0, NULL), db[2] = {datum(1, 0.5f, 0, NULL), datum(0, 1, 0, NULL)};
    db[1].n = LEN - 3; /* rows of different lengths */
    struct serve_fb fbs[2] = {{.session = a, .loss = SERVE_LOSS_CROSS_ENTROPY, .data = &da, .n_data = 1},
                              {.session = b, .loss = SERVE_LOSS_CROSS_ENTROPY, .data = db, .n_data = 2}};
    struct whet_err err;
    CHECK_MSG(serve_session_forward_backward(base, fbs, 2, &err) == 0, "%s", err.msg);
    /* alone: fresh sessions of the same adapters */
    struct model *base2 = frozen_base();
    struct serve_session *a2 = session(base2, adapter_dir), *b2 = session(base2, NULL);
    struct serve_fb fa = {.session = a2, .loss = SERVE_LOSS_CROSS_ENTROPY, .data = &da, .n_data = 1};
    struct serve_fb fb = {.session = b2, .loss = SERVE_LOSS_CROSS_ENTROPY, .data = db, .n_data = 2};
    CHECK(serve_session_forward_backward(base2, &fa, 1, &err) == 0 &&
          serve_session_forward_backward(base2, &fb, 1, &err) == 0);
    double lp_diff = 0;
    for (int i = 0; i < LEN; i++) lp_diff = fmax(lp_diff, fabs(fbs[0].logprobs[i] - fa.logprobs[i]));
    for (int i = 0; i < 2 * LEN - 3; i++) lp_diff = fmax(lp_diff, fabs(fbs[1].logprobs[i] - fb.logprobs[i]));
    CHECK_MSG(lp_diff < 1e-4, "log-probs in one pass differ from alone by %g", lp_diff);
    CHECK_NEAR(fbs[1].loss_value, fb.loss_value, 1e-3);
    double ga = grad_diff(a->view, a2->view), gb = grad_diff(b->view, b2->view);
    CHECK_MSG(ga < 1e-4 && gb < 1e-4, "gradients differ: %g (A), %g (B)", ga, gb);
    CHECK(grad_norm2(b->view) > 0);
    for (int i = 0; i < 2; i++) free(fbs[i].logprobs);
    free(fa.logprobs), free(fb.logprobs);
    datum_free(&da), datum_free(&db[0]), datum_free(&db[1]);
    serve_session_free(a), serve_session_free(b), serve_session_free(a2), serve_session_free(b2);
    model_free(base), model_free(base2);
}

TEST(policy_losses_follow_their_formulas) {
    struct model *base = frozen_base();
    struct serve_session *ce = session(base, adapter_dir), *is = session(base, adapter_dir);
    struct serve_datum d = datum(0, 1, 0, NULL);
    float lp[LEN];
    run(base, ce, SERVE_LOSS_CROSS_ENTROPY, &d, lp);
    /* importance sampling at the current log-probs (ratio 1) with advantages 1: -sum(1) and the
     * gradient of cross_entropy with weights 1 */
    struct serve_datum on_policy = datum(0, 0, 1, lp);
    double loss = run(base, is, SERVE_LOSS_IMPORTANCE_SAMPLING, &on_policy, NULL);
    CHECK_NEAR(loss, -LEN, 1e-3);
    double g = grad_diff(ce->view, is->view);
    CHECK_MSG(g < 1e-5 && grad_norm2(is->view) > 0, "importance_sampling at ratio 1 vs cross_entropy: %g", g);
    /* ppo: sampled log-probs 1 below the current ones make every ratio e > 1.2: with advantage 2 each
     * term is clipped to 1.2 * 2 and has no gradient; with advantage -2 the unclipped -2e is the min */
    float lower[LEN];
    for (int i = 0; i < LEN; i++) lower[i] = lp[i] - 1;
    struct serve_session *ppo = session(base, adapter_dir);
    struct serve_datum up = datum(0, 0, 2, lower), down = datum(0, 0, -2, lower);
    loss = run(base, ppo, SERVE_LOSS_PPO, &up, NULL);
    CHECK_NEAR(loss, -LEN * 1.2 * 2, 1e-3);
    CHECK(grad_norm2(ppo->view) == 0);
    loss = run(base, ppo, SERVE_LOSS_PPO, &down, NULL);
    CHECK_NEAR(loss, LEN * 2 * exp(1.0), 1e-2);
    CHECK(grad_norm2(ppo->view) > 0);
    datum_free(&d), datum_free(&on_policy), datum_free(&up), datum_free(&down);
    serve_session_free(ce), serve_session_free(is), serve_session_free(ppo);
    model_free(base);
}

TEST(cross_entropy_steps_lower_the_loss) {
    struct model *base = frozen_base();
    struct serve_session *s = session(base, NULL);
    struct serve_datum d = datum(1, 1, 0, NULL);
    struct serve_adam adam = serve_adam_default();
    adam.learning_rate = 1e-2f;
    double first = run(base, s, SERVE_LOSS_CROSS_ENTROPY, &d, NULL), last = first;
    for (int step = 0; step < 10; step++) {
        float norm = serve_session_optim_step(s, &adam);
        CHECK(norm > 0);
        CHECK(grad_norm2(s->view) == 0); /* the step zeroes the gradients */
        last = run(base, s, SERVE_LOSS_CROSS_ENTROPY, &d, NULL);
    }
    printf("cross_entropy: %.3f -> %.3f in 10 steps\n", first, last);
    CHECK_MSG(last < 0.8 * first, "the loss went from %g to %g", first, last);
    CHECK(model_adam_step_count(s->view) == 10);
    datum_free(&d);
    serve_session_free(s);
    model_free(base);
}

TEST(a_restored_session_goes_on_from_its_last_step) {
    struct model *base = frozen_base(), *other = frozen_base();
    struct serve_session *s = session(base, NULL);
    struct serve_datum d = datum(0, 1, 0, NULL), e = datum(1, 1, 0, NULL);
    struct serve_adam adam = serve_adam_default();
    adam.learning_rate = 1e-2f;
    for (int step = 0; step < 3; step++) {
        run(base, s, SERVE_LOSS_CROSS_ENTROPY, &d, NULL);
        serve_session_optim_step(s, &adam);
    }
    run(base, s, SERVE_LOSS_CROSS_ENTROPY, &e, NULL); /* gradients since the last step: not part of the state */
    char dir[200];
    snprintf(dir, sizeof dir, "%s/state", root_dir);
    struct whet_err err;
    struct serve_session *r;
    model_zero_grad(s->view);
    CHECK_MSG(serve_session_save_state(s, dir, &err) == 0, "%s", err.msg);
    CHECK_MSG(serve_session_restore(&r, other, "s", dir, &err) == 0, "%s", err.msg);
    CHECK(model_adam_step_count(r->view) == 3);
    CHECK(grad_norm2(r->view) == 0);
    /* two more steps each: the log-probs agree at every one (the same computation on equal weights) */
    for (int step = 0; step < 2; step++) {
        float a[LEN], b[LEN];
        double la = run(base, s, SERVE_LOSS_CROSS_ENTROPY, &e, a), lb = run(other, r, SERVE_LOSS_CROSS_ENTROPY, &e, b);
        CHECK_MSG(fabs(la - lb) <= 1e-5, "step %d: loss %g restored vs %g", step, lb, la);
        for (int i = 0; i < LEN; i++) CHECK_MSG(fabsf(a[i] - b[i]) <= 1e-5f, "step %d: log-prob %d", step, i);
        serve_session_optim_step(s, &adam);
        serve_session_optim_step(r, &adam);
    }
    CHECK(model_adam_step_count(r->view) == 5);
    datum_free(&d), datum_free(&e);
    serve_session_free(s), serve_session_free(r);
    model_free(base), model_free(other);
}

int main(void) {
    if (setup()) return 1;
    RUN(logprobs_equal_the_adapter_alone);
    RUN(two_sessions_in_one_pass_equal_each_alone);
    RUN(policy_losses_follow_their_formulas);
    RUN(cross_entropy_steps_lower_the_loss);
    RUN(a_restored_session_goes_on_from_its_last_step);
    whet_rm_rf(root_dir);
    return test_summary();
}
