/* test_adapters.c - many adapters on one base (serving's batched LoRA, model.h "many adapters"): on
 * the tiny model, four PEFT adapters of different ranks and target modules are loaded as views of one
 * base, and one batch decodes six sequences (two on the same adapter, one on the base alone); every
 * sequence's greedy tokens equal those of its adapter loaded alone the ordinary way, and the logits
 * agree to 1e-4. Also: the runs must cover each pass, name views of this base, and need a plain base. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "rng.h"
#include "tiny_models.h"
#include "test.h"

#define N_ADAPTERS 4
#define N_SEQS 6
#define N_NEW 10
static char root_dir[64], model_dir[128], adapter_dirs[N_ADAPTERS][160];
/* sequence i: its adapter (-1: the base) and its prompt */
static const int seq_adapter[N_SEQS] = {0, 0, 1, 2, 3, -1};
static const int seq_prompt_len[N_SEQS] = {5, 9, 7, 3, 11, 6};
static int prompts[N_SEQS][16];

static int setup(void) {
    struct whet_err err;
    snprintf(root_dir, sizeof root_dir, "/tmp/whet-adapters-XXXXXX");
    if (tiny_model_write(root_dir, model_dir, &err)) goto fail;
    for (int k = 0; k < N_ADAPTERS; k++) {
        snprintf(adapter_dirs[k], sizeof adapter_dirs[k], "%s/adapter-%d", root_dir, k);
        unsigned targets = k == 3 ? LORA_Q | LORA_V : LORA_ALL;
        if (random_adapter_write(model_dir, adapter_dirs[k], k % 2 ? 4 : 8, targets, 100 + (uint64_t)k, 0.05f, &err))
            goto fail;
    }
    for (int i = 0; i < N_SEQS; i++)
        for (int t = 0; t < seq_prompt_len[i]; t++) prompts[i][t] = (i * 131 + t * 17 + 3) % 2000;
    return 0;
fail:
    fprintf(stderr, "setup: %s\n", err.msg);
    return -1;
}

static const struct sample_row greedy = {.temperature = 0, .top_p = 1};

/* Greedy tokens of sequence i with its adapter loaded alone (or the plain base), and the prefill's
 * logits. */
static void reference(int i, int *tokens, float *logits) {
    struct model_opts o = model_opts_default();
    o.adapter_dir = seq_adapter[i] >= 0 ? adapter_dirs[seq_adapter[i]] : NULL;
    struct model *m;
    struct whet_err err;
    CHECK_MSG(model_load(&m, model_dir, &o, &err) == 0, "%s", err.msg);
    struct kv_cache *c = kv_cache_new(m, 1, 32, &err);
    CHECK(model_prefill(m, c, 0, prompts[i], seq_prompt_len[i], logits, &err) == 0);
    kv_cache_clear(c, 0);
    int slot = 0;
    struct sample_out drawn = {.ids = &tokens[0]};
    CHECK(model_prefill_sample(m, c, 0, prompts[i], seq_prompt_len[i], 1, &greedy, &drawn, &err) == 0);
    for (int t = 1; t < N_NEW; t++) {
        drawn.ids = &tokens[t];
        CHECK(model_decode_sample(m, c, &slot, &tokens[t - 1], 1, &greedy, &drawn, &err) == 0);
    }
    kv_cache_free(c);
    model_free(m);
}

TEST(one_batch_of_many_adapters_equals_each_alone) {
    struct whet_err err;
    int want[N_SEQS][N_NEW], got[N_SEQS][N_NEW];
    int V = 2048;
    float *want_logits = malloc(sizeof(float) * N_SEQS * (size_t)V), *logits = malloc(sizeof(float) * (size_t)V);
    for (int i = 0; i < N_SEQS; i++) reference(i, want[i], want_logits + (size_t)i * V);
    /* the adapters differ from the base and from each other */
    CHECK(memcmp(want[0], want[5], sizeof want[0]) || memcmp(want_logits, want_logits + 5 * (size_t)V, 64));

    struct model_opts o = model_opts_default();
    struct model *base, *views[N_ADAPTERS];
    CHECK_MSG(model_load(&base, model_dir, &o, &err) == 0, "%s", err.msg);
    for (int k = 0; k < N_ADAPTERS; k++)
        CHECK_MSG(model_load_adapter_view(&views[k], base, &(struct model_opts){.adapter_dir = adapter_dirs[k]}, &err) == 0,
                  "%s", err.msg);
    struct kv_cache *c = kv_cache_new(base, N_SEQS, 32, &err);
    double worst = 0;
    for (int i = 0; i < N_SEQS; i++) { /* one prefill per sequence, its adapter on all its tokens */
        struct lora_run run = {seq_adapter[i] >= 0 ? views[seq_adapter[i]] : NULL, seq_prompt_len[i]};
        CHECK(model_set_lora_runs(base, &run, 1, &err) == 0);
        CHECK(model_prefill(base, c, i, prompts[i], seq_prompt_len[i], logits, &err) == 0);
        for (int v = 0; v < V; v++) worst = fmax(worst, fabs(logits[v] - want_logits[(size_t)i * V + v]));
        kv_cache_clear(c, i);
        struct sample_out first = {.ids = &got[i][0]};
        CHECK(model_prefill_sample(base, c, i, prompts[i], seq_prompt_len[i], 1, &greedy, &first, &err) == 0);
    }
    CHECK_MSG(worst < 1e-4, "prefill logits differ by %g", worst);
    /* then every step decodes all six at once: runs of 2, 1, 1, 1 and 1 rows */
    struct lora_run runs[5] = {{views[0], 2}, {views[1], 1}, {views[2], 1}, {views[3], 1}, {NULL, 1}};
    CHECK(model_set_lora_runs(base, runs, 5, &err) == 0);
    int slots[N_SEQS] = {0, 1, 2, 3, 4, 5}, ids[N_SEQS], next[N_SEQS];
    struct sample_out drawn = {.ids = next};
    struct sample_row rows[N_SEQS];
    for (int i = 0; i < N_SEQS; i++) rows[i] = greedy;
    for (int t = 1; t < N_NEW; t++) {
        for (int i = 0; i < N_SEQS; i++) ids[i] = got[i][t - 1];
        CHECK(model_decode_sample(base, c, slots, ids, N_SEQS, rows, &drawn, &err) == 0);
        for (int i = 0; i < N_SEQS; i++) got[i][t] = next[i];
    }
    for (int i = 0; i < N_SEQS; i++) CHECK_MSG(!memcmp(got[i], want[i], sizeof got[i]), "sequence %d differs", i);

    /* runs must cover the pass and name views of this base; a base with its own adapter takes none */
    CHECK(model_decode_sample(base, c, slots, ids, 3, rows, &drawn, &err) == -1);
    CHECK_CONTAINS(err.msg, "cover 6 tokens, the pass has 3");
    struct model *other, *stranger;
    CHECK(model_load(&other, model_dir, &o, &err) == 0);
    struct model_opts one = {.adapter_dir = adapter_dirs[1]};
    CHECK(model_load_adapter_view(&stranger, other, &one, &err) == 0);
    struct lora_run bad = {stranger, 1};
    CHECK(model_set_lora_runs(base, &bad, 1, &err) == -1);
    CHECK_CONTAINS(err.msg, "not a view of this model");
    CHECK(model_set_lora_runs(views[0], runs, 1, &err) == -1);
    struct model *view_of_view;
    CHECK(model_load_adapter_view(&view_of_view, views[0], &one, &err) == -1 && !view_of_view);
    CHECK(model_set_lora_runs(base, NULL, 0, &err) == 0);
    kv_cache_free(c);
    model_free(stranger);
    model_free(other);
    for (int k = 0; k < N_ADAPTERS; k++) model_free(views[k]);
    model_free(base);
    free(want_logits);
    free(logits);
}

/* Largest |a - b| over the LoRA tensors of two models, relative to the largest |b|: their gradients
 * (grads) or their weights; *l2 (when not NULL) gets ||a - b|| / ||b|| over them all. */
static double lora_diff(const struct model *a, const struct model *b, int grads, double *l2) {
    double worst = 0, scale = 1e-30, diff_sq = 0, norm_sq = 1e-60;
    struct whet_err err;
    for (int t = 0; t < model_num_tensors(b); t++) {
        const char *name = model_tensor_name(b, t);
        if (!strstr(name, "lora_")) continue;
        long long n = model_tensor_numel(b, name);
        CHECK_MSG(model_tensor_numel(a, name) == n, "%s: %lld values, want %lld", name, model_tensor_numel(a, name), n);
        float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
        CHECK((grads ? model_get_grad(a, name, x, &err) : model_get_param(a, name, x, &err)) == 0);
        CHECK((grads ? model_get_grad(b, name, y, &err) : model_get_param(b, name, y, &err)) == 0);
        for (long long i = 0; i < n; i++) {
            worst = fmax(worst, fabs(x[i] - y[i])), scale = fmax(scale, fabs(y[i]));
            diff_sq += ((double)x[i] - y[i]) * ((double)x[i] - y[i]), norm_sq += (double)y[i] * y[i];
        }
        free(x), free(y);
    }
    if (l2) *l2 = sqrt(diff_sq / norm_sq);
    return worst / scale;
}

/* Co-training: one forward and backward pass of a frozen base over the rows of two adapters (an
 * existing one, rank 8 on every linear layer, and a new one, rank 4 on q and v) gives each adapter the
 * gradient it gets trained alone on its own rows, and a step of each view's own AdamW the same weights. */
TEST(co_training_equals_each_adapter_alone) {
    enum { T = 10, NA = 2, NB = 1, N = (NA + NB) * T };
    struct whet_err err;
    struct model *base, *va, *vb, *alone_a, *alone_b;
    struct model_opts fo = model_opts_default();
    fo.train = 1, fo.frozen_base = 1;
    CHECK_MSG(model_load(&base, model_dir, &fo, &err) == 0, "%s", err.msg);
    struct model_opts oa = model_opts_default(), ob = model_opts_default();
    oa.train = ob.train = 1;
    oa.adapter_dir = adapter_dirs[0];
    ob.lora_r = 4, ob.lora_alpha = 8, ob.lora_targets = LORA_Q | LORA_V, ob.seed = 5;
    CHECK_MSG(model_load_adapter_view(&va, base, &oa, &err) == 0, "%s", err.msg);
    CHECK_MSG(model_load_adapter_view(&vb, base, &ob, &err) == 0, "%s", err.msg);
    CHECK(model_load(&alone_a, model_dir, &oa, &err) == 0 && model_load(&alone_b, model_dir, &ob, &err) == 0);
    int ids[N], targets[N];
    float w[N];
    for (int t = 0; t < N; t++) {
        ids[t] = (t * 37 + 11) % 2000;
        targets[t] = t % T == T - 1 ? -1 : (t * 37 + 48) % 2000;
        w[t] = t < NA * T ? 1.0f / (NA * (T - 1)) : 1.0f / (NB * (T - 1)); /* each adapter's own mean */
    }
    /* together: the runs of A's rows and B's row, each loss a mean over its own tokens */
    struct lora_run runs[2] = {{va, NA * T}, {vb, NB * T}};
    model_zero_grad(va), model_zero_grad(vb);
    CHECK(model_set_lora_runs(base, runs, 2, &err) == 0);
    struct model_batch together = {.B = NA + NB, .T = T, .ids = ids, .targets = targets};
    CHECK_MSG(model_forward(base, &together, NULL, &err) == 0, "%s", err.msg);
    CHECK(model_set_loss_weights(base, w, &err) == 0);
    CHECK_MSG(model_backward(base, 1.0f, &err) == 0, "%s", err.msg);
    /* alone: each adapter on its own rows */
    struct model_batch rows_a = {.B = NA, .T = T, .ids = ids, .targets = targets};
    struct model_batch rows_b = {.B = NB, .T = T, .ids = ids + NA * T, .targets = targets + NA * T};
    model_zero_grad(alone_a), model_zero_grad(alone_b);
    CHECK(model_forward(alone_a, &rows_a, NULL, &err) == 0 && model_backward(alone_a, 1.0f / (NA * (T - 1)), &err) == 0);
    CHECK(model_forward(alone_b, &rows_b, NULL, &err) == 0 && model_backward(alone_b, 1.0f / (NB * (T - 1)), &err) == 0);
    double ga = lora_diff(va, alone_a, 1, NULL), gb = lora_diff(vb, alone_b, 1, NULL);
    printf("co-training: gradients within %.2g (A) and %.2g (B) of training alone\n", ga, gb);
    CHECK_MSG(ga < 1e-4 && gb < 1e-4, "gradients differ from training alone: %g (A), %g (B)", ga, gb);
    struct model *all[4] = {va, vb, alone_a, alone_b};
    for (int i = 0; i < 4; i++) model_adamw_step(all[i], 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f);
    /* Weights compared as e2e_cotrain compares adapters, in L2: AdamW's first step is about lr * sign(g), so
     * an element whose gradient is within rounding of zero may move the other way (each such element by up to
     * 2 lr); a wrong gradient or shared moments would move every element (~1e-2 relative here). */
    double pa, pb;
    lora_diff(va, alone_a, 0, &pa), lora_diff(vb, alone_b, 0, &pb);
    printf("co-training: weights after a step within %.2g (A) and %.2g (B) of training alone (L2)\n", pa, pb);
    CHECK_MSG(pa < 1e-4 && pb < 1e-4, "weights after a step differ: %g (A), %g (B) relative L2", pa, pb);
    /* the base itself has nothing to train, and a base that trains cannot carry views */
    CHECK(model_num_trainable(base) == 0);
    struct model *full;
    struct model_opts ft = model_opts_default();
    ft.train = 1, ft.lora_r = 0;
    CHECK(model_load(&full, model_dir, &ft, &err) == 0);
    struct model *bad;
    CHECK(model_load_adapter_view(&bad, full, &oa, &err) == -1);
    model_free(full);
    model_free(va), model_free(vb), model_free(alone_a), model_free(alone_b), model_free(base);
}

int main(void) {
    if (setup()) return 1;
    RUN(one_batch_of_many_adapters_equals_each_alone);
    RUN(co_training_equals_each_adapter_alone);
    whet_rm_rf(root_dir);
    return test_summary();
}
