/* test_grpo_temperature.c - the loss temperature GRPO's log-probs use (model_set_logit_temperature)
 * against PyTorch (tests/fixtures/grpo/temperature, written by
 * tests/fixtures/make_grpo_temperature_reference.py): at t = 0.7 the per-token log-probs of
 * softmax(logits / t), the mean loss and the gradient of Σ w·nll with signed GRPO-like weights, for
 * every base tensor (full fine-tuning) and every LoRA matrix, compared by relative error
 * ||c - ref|| / ||ref|| <= 1e-4, also with the logits computed in chunks (the backward pass recomputes
 * them). t = 1 set after another temperature gives bit for bit what a model that never set one gives;
 * logits without targets and generation ignore the temperature. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "safetensors.h"
#include "test.h"

#define TOL 1e-4

static char *fixture(const char *rest) {
    const char *base = getenv("WHET_FIXTURES");
    return xasprintf("%s/grpo/temperature%s%s", base ? base : "tests/fixtures", rest ? "/" : "", rest ? rest : "");
}

static float *ref_tensor(const struct st_set *set, const char *name, int64_t *numel) {
    const struct st_tensor *t = st_find(set, name);
    if (!t) {
        fprintf(stderr, "reference tensor %s missing\n", name);
        return NULL;
    }
    float *out = xmalloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
    struct whet_err err;
    if (st_read_f32(t, out, -1, &err)) {
        free(out);
        return NULL;
    }
    if (numel) *numel = t->numel;
    return out;
}

static double rel_err(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num) / (den > 0 ? sqrt(den) : 1e-30);
}

struct fixture {
    struct st_set set;
    int B, T, N;
    int *ids, *targets;
    float *weights;
    float temperature;
};

static int fixture_open(struct fixture *f) {
    char *path = fixture("ref.safetensors");
    struct whet_err err;
    int rc = st_open_file(&f->set, path, &err);
    free(path);
    if (rc) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    f->B = atoi(st_metadata(&f->set, "B"));
    f->T = atoi(st_metadata(&f->set, "T"));
    f->N = f->B * f->T;
    f->temperature = (float)atof(st_metadata(&f->set, "temperature"));
    float *ids = ref_tensor(&f->set, "inputs.ids", NULL), *targets = ref_tensor(&f->set, "inputs.targets", NULL);
    f->ids = xmalloc(sizeof(int) * (size_t)f->N);
    f->targets = xmalloc(sizeof(int) * (size_t)f->N);
    for (int i = 0; i < f->N; i++) f->ids[i] = (int)ids[i], f->targets[i] = (int)targets[i];
    free(ids);
    free(targets);
    f->weights = ref_tensor(&f->set, "inputs.weights", NULL);
    return 0;
}

static void fixture_close(struct fixture *f) {
    free(f->ids);
    free(f->targets);
    free(f->weights);
    st_close(&f->set);
}

static struct model *load(int lora, int logit_rows) {
    char *dir = fixture(NULL), *adapter = fixture("adapter");
    struct model_opts o = model_opts_default();
    o.train = 1;
    o.lora_r = lora ? 2 : 0;
    o.adapter_dir = lora ? adapter : NULL;
    o.logit_rows = logit_rows;
    struct model *m = NULL;
    struct whet_err err;
    int rc = model_load(&m, dir, &o, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    free(dir);
    free(adapter);
    return rc ? NULL : m;
}

/* Forward with the fixture's targets (as trainer_grpo.c: no loss mask, positions and sequences by
 * row), then the backward of Σ w·nll with the signed weights. token_nll[N] gets the per-token nll. */
static int forward_backward(struct model *m, const struct fixture *f, float *loss, float *token_nll) {
    struct model_batch b = {f->B, f->T, f->ids, NULL, NULL, f->targets, NULL};
    struct whet_err err;
    model_zero_grad(m);
    int rc = model_forward(m, &b, loss, &err) || model_set_loss_weights(m, f->weights, &err) ||
             model_backward(m, 1.0f, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    model_get_token_losses(m, token_nll);
    return rc ? -1 : 0;
}

/* Compares loss, log-probs and the gradients of the tensors `filter` selects with the fixture's
 * entries under `prefix` ("" or "lora."); returns how many tensors were compared. */
static int compare(struct model *m, const struct fixture *f, const char *prefix, const char *filter) {
    float loss, *nll = xmalloc(sizeof(float) * (size_t)f->N);
    int compared = 0;
    if (forward_backward(m, f, &loss, nll)) {
        free(nll);
        return 0;
    }
    char key[256];
    snprintf(key, sizeof key, "%slogp", prefix);
    int64_t n_targets = 0;
    float *want_logp = ref_tensor(&f->set, key, &n_targets), *logp = xmalloc(sizeof(float) * (size_t)n_targets);
    int k = 0;
    for (int i = 0; i < f->N && k < n_targets; i++)
        if (f->targets[i] >= 0) logp[k++] = -nll[i];
    CHECK(k == n_targets);
    double e = rel_err(logp, want_logp, n_targets);
    CHECK_MSG(e <= TOL, "%slogp: relative error %.3g", prefix, e);
    snprintf(key, sizeof key, "%sloss", prefix);
    float *want_loss = ref_tensor(&f->set, key, NULL);
    CHECK_MSG(fabsf(loss - want_loss[0]) <= TOL * fabsf(want_loss[0]), "%sloss %.9g, torch %.9g", prefix, loss,
              want_loss[0]);
    for (int i = 0; i < model_num_tensors(m); i++) {
        const char *name = model_tensor_name(m, i);
        if (filter && !strstr(name, filter)) continue;
        snprintf(key, sizeof key, "%sgrad.%s", prefix, name);
        int64_t n = 0;
        float *want = ref_tensor(&f->set, key, &n), *got = xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
        CHECK_MSG(want != NULL, "%s", key);
        struct whet_err err;
        if (want && model_get_grad(m, name, got, &err) == 0) {
            e = rel_err(got, want, n);
            CHECK_MSG(e <= TOL, "%s: relative error %.3g", key, e);
            compared++;
        }
        free(got);
        free(want);
    }
    free(want_loss);
    free(want_logp);
    free(logp);
    free(nll);
    return compared;
}

TEST(full_fine_tuning_matches_pytorch_at_temperature) {
    struct fixture f;
    if (fixture_open(&f)) {
        CHECK(!"fixture");
        return;
    }
    CHECK(f.temperature == 0.7f);
    /* logit_rows 0: all logits kept between the passes; 3: chunks, recomputed by the backward pass. */
    static const int logit_rows[] = {0, 3};
    for (int i = 0; i < 2; i++) {
        struct model *m = load(0, logit_rows[i]);
        if (!m) continue;
        model_set_logit_temperature(m, f.temperature);
        int n = compare(m, &f, "", NULL);
        CHECK_MSG(n == model_num_tensors(m), "logit_rows %d: %d of %d tensors compared", logit_rows[i], n,
                  model_num_tensors(m));
        model_free(m);
    }
    fixture_close(&f);
}

TEST(lora_matches_pytorch_at_temperature) {
    struct fixture f;
    if (fixture_open(&f)) {
        CHECK(!"fixture");
        return;
    }
    struct model *m = load(1, 0);
    if (m) {
        model_set_logit_temperature(m, f.temperature);
        int n = compare(m, &f, "lora.", ".lora_");
        CHECK_MSG(n == 2 * 7 * 2, "%d LoRA tensors compared", n); /* 2 layers × 7 modules × A, B */
        model_free(m);
    }
    fixture_close(&f);
}

/* Temperature 1 after another one: the same bits as a model that never set one (losses and every
 * gradient); and 0.7 really changes them. */
TEST(temperature_one_is_bit_identical) {
    struct fixture f;
    if (fixture_open(&f)) {
        CHECK(!"fixture");
        return;
    }
    struct model *plain = load(1, 0), *reset = load(1, 0);
    float loss_a, loss_b, loss_c, *nll_a = xmalloc(sizeof(float) * (size_t)f.N),
                                   *nll_b = xmalloc(sizeof(float) * (size_t)f.N);
    if (plain && reset && !forward_backward(plain, &f, &loss_a, nll_a)) {
        model_set_logit_temperature(reset, f.temperature);
        CHECK(forward_backward(reset, &f, &loss_c, nll_b) == 0);
        CHECK(fabsf(loss_c - loss_a) > 1e-3f);
        model_set_logit_temperature(reset, 1.0f);
        CHECK(forward_backward(reset, &f, &loss_b, nll_b) == 0);
        CHECK(memcmp(&loss_a, &loss_b, sizeof loss_a) == 0);
        CHECK(memcmp(nll_a, nll_b, sizeof(float) * (size_t)f.N) == 0);
        int differing = 0;
        for (int i = 0; i < model_num_tensors(plain); i++) {
            const char *name = model_tensor_name(plain, i);
            if (!strstr(name, ".lora_")) continue;
            long long n = model_tensor_numel(plain, name);
            float *ga = xmalloc(sizeof(float) * (size_t)n), *gb = xmalloc(sizeof(float) * (size_t)n);
            struct whet_err err;
            CHECK(model_get_grad(plain, name, ga, &err) == 0 && model_get_grad(reset, name, gb, &err) == 0);
            differing += memcmp(ga, gb, sizeof(float) * (size_t)n) != 0;
            free(ga);
            free(gb);
        }
        CHECK_MSG(differing == 0, "%d gradients differ at temperature 1", differing);
    }
    free(nll_a);
    free(nll_b);
    if (plain) model_free(plain);
    if (reset) model_free(reset);
    fixture_close(&f);
}

/* The temperature is the loss's only: logits without targets and generation are the plain ones. */
TEST(logits_and_generation_ignore_the_temperature) {
    struct fixture f;
    if (fixture_open(&f)) {
        CHECK(!"fixture");
        return;
    }
    struct model *plain = load(1, 0), *hot = load(1, 0);
    if (plain && hot) {
        model_set_logit_temperature(hot, f.temperature);
        int V = model_get_config(plain)->vocab_size;
        size_t n = (size_t)f.T * V;
        float *la = xmalloc(sizeof(float) * n), *lb = xmalloc(sizeof(float) * n), loss;
        struct model_batch b = {1, f.T, f.ids, NULL, NULL, NULL, NULL};
        struct whet_err err;
        CHECK(model_forward(plain, &b, &loss, &err) == 0 && model_forward(hot, &b, &loss, &err) == 0);
        model_get_logits(plain, la);
        model_get_logits(hot, lb);
        CHECK(memcmp(la, lb, sizeof(float) * n) == 0);
        struct kv_cache *ca = kv_cache_new(plain, 1, f.T, &err), *cb = kv_cache_new(hot, 1, f.T, &err);
        CHECK(model_prefill(plain, ca, 0, f.ids, 3, la, &err) == 0 && model_prefill(hot, cb, 0, f.ids, 3, lb, &err) == 0);
        CHECK(memcmp(la, lb, sizeof(float) * (size_t)V) == 0);
        int slot = 0;
        CHECK(model_decode_step(plain, ca, &slot, f.ids + 3, 1, la, &err) == 0 &&
              model_decode_step(hot, cb, &slot, f.ids + 3, 1, lb, &err) == 0);
        CHECK(memcmp(la, lb, sizeof(float) * (size_t)V) == 0);
        kv_cache_free(ca);
        kv_cache_free(cb);
        free(la);
        free(lb);
    }
    if (plain) model_free(plain);
    if (hot) model_free(hot);
    fixture_close(&f);
}

int main(void) {
    RUN(full_fine_tuning_matches_pytorch_at_temperature);
    RUN(lora_matches_pytorch_at_temperature);
    RUN(temperature_one_is_bit_identical);
    RUN(logits_and_generation_ignore_the_temperature);
    return test_summary();
}
