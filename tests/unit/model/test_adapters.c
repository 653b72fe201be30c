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
        CHECK_MSG(model_load_adapter_view(&views[k], base, adapter_dirs[k], &err) == 0, "%s", err.msg);
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
    CHECK(model_load_adapter_view(&stranger, other, adapter_dirs[1], &err) == 0);
    struct lora_run bad = {stranger, 1};
    CHECK(model_set_lora_runs(base, &bad, 1, &err) == -1);
    CHECK_CONTAINS(err.msg, "not a view of this model");
    CHECK(model_set_lora_runs(views[0], runs, 1, &err) == -1);
    struct model *view_of_view;
    CHECK(model_load_adapter_view(&view_of_view, views[0], adapter_dirs[1], &err) == -1 && !view_of_view);
    CHECK(model_set_lora_runs(base, NULL, 0, &err) == 0);
    kv_cache_free(c);
    model_free(stranger);
    model_free(other);
    for (int k = 0; k < N_ADAPTERS; k++) model_free(views[k]);
    model_free(base);
    free(want_logits);
    free(logits);
}

int main(void) {
    if (setup()) return 1;
    RUN(one_batch_of_many_adapters_equals_each_alone);
    whet_rm_rf(root_dir);
    return test_summary();
}
