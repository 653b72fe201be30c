/* test_dpo.c - the DPO loss against PyTorch (tests/fixtures/reference/dpo, written by
 * tests/fixtures/make_dpo_reference.py): the reference log-probabilities with the adapter switched
 * off, the policy log-probabilities, the loss and the gradient of every lora_A / lora_B, compared by
 * relative error ||c - ref|| / ||ref|| <= 1e-4; the same reference from a separate frozen model (the
 * full fine-tuning path); the adapter left as it was; and the pair loss itself at extreme margins. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dpo.h"
#include "safetensors.h"
#include "test.h"

#define TOL 1e-4

static char *fixture(const char *rest) {
    const char *base = getenv("WHET_FIXTURES");
    return xasprintf("%s/reference/dpo%s%s", base ? base : "tests/fixtures", rest ? "/" : "", rest ? rest : "");
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

static int *ref_ints(const struct st_set *set, const char *name) {
    int64_t n;
    float *f = ref_tensor(set, name, &n);
    int *out = xmalloc(sizeof(int) * (size_t)n);
    for (int64_t i = 0; i < n; i++) out[i] = (int)f[i];
    free(f);
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

static double rel_err_d(const double *a, const float *b, int n) {
    float *af = xmalloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < n; i++) af[i] = (float)a[i];
    double e = rel_err(af, b, n);
    free(af);
    return e;
}

struct fixture {
    struct st_set set;
    struct dpo_batch batch;
    float *ref_logps, *policy_logps;
    double beta;
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
    struct dpo_batch *b = &f->batch;
    memset(b, 0, sizeof *b);
    b->B = atoi(st_metadata(&f->set, "B"));
    b->T = atoi(st_metadata(&f->set, "T"));
    b->n_pairs = atoi(st_metadata(&f->set, "pairs"));
    f->beta = atof(st_metadata(&f->set, "beta"));
    b->ids = ref_ints(&f->set, "inputs.ids");
    b->positions = ref_ints(&f->set, "inputs.positions");
    b->seq_ids = ref_ints(&f->set, "inputs.seq_ids");
    b->targets = ref_ints(&f->set, "inputs.targets");
    b->side = ref_ints(&f->set, "inputs.side");
    f->ref_logps = ref_tensor(&f->set, "reference_logps", NULL);
    f->policy_logps = ref_tensor(&f->set, "policy_logps", NULL);
    return 0;
}

static void fixture_close(struct fixture *f) {
    dpo_batch_free(&f->batch);
    free(f->ref_logps);
    free(f->policy_logps);
    st_close(&f->set);
}

static struct model *load(int train, int with_adapter) {
    char *dir = fixture(NULL), *adapter = fixture("adapter");
    struct model_opts o = model_opts_default();
    o.train = train;
    o.lora_r = with_adapter ? 2 : 0;
    o.adapter_dir = with_adapter ? adapter : NULL;
    struct model *m = NULL;
    struct whet_err err;
    int rc = model_load(&m, dir, &o, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    free(dir);
    free(adapter);
    return rc ? NULL : m;
}

TEST(loss_and_lora_gradients_match_pytorch) {
    struct fixture f;
    if (fixture_open(&f)) {
        CHECK(!"fixture");
        return;
    }
    struct model *m = load(1, 1);
    if (!m) return;
    struct whet_err err;
    int P = f.batch.n_pairs;
    double ref[8], before[8], after[8];
    CHECK(P == 2);
    CHECK(dpo_sequence_logps(before, m, &f.batch, &err) == 0);
    CHECK_MSG(dpo_reference_logps(ref, m, NULL, &f.batch, &err) == 0, "%s", err.msg);
    CHECK_MSG(rel_err_d(ref, f.ref_logps, 2 * P) <= TOL, "reference logps: relative error %.3g",
              rel_err_d(ref, f.ref_logps, 2 * P));
    CHECK_MSG(rel_err_d(before, f.policy_logps, 2 * P) <= TOL, "policy logps: relative error %.3g",
              rel_err_d(before, f.policy_logps, 2 * P));
    /* The adapter is back in place after the reference pass: the policy is unchanged bit for bit. */
    CHECK(dpo_sequence_logps(after, m, &f.batch, &err) == 0);
    CHECK(memcmp(before, after, sizeof(double) * 2 * (size_t)P) == 0);
    CHECK(fabs(ref[0] - before[0]) > 1e-3); /* a non-zero B: the two really differ */

    struct dpo_stats st = {0};
    model_zero_grad(m);
    CHECK_MSG(dpo_forward_backward(m, &f.batch, ref, f.beta, 1.0 / P, &st, &err) == 0, "%s", err.msg);
    float *want_loss = ref_tensor(&f.set, "loss", NULL);
    CHECK(st.n_pairs == P);
    CHECK_NEAR(st.loss_sum / P, want_loss[0], TOL * fabs(want_loss[0]));
    free(want_loss);
    /* One pair has z < 0 and the other z > 0 in the fixture. */
    CHECK(st.n_correct == 1);
    int n_checked = 0;
    for (int i = 0; i < model_num_tensors(m); i++) {
        const char *name = model_tensor_name(m, i);
        if (!strstr(name, ".lora_")) continue;
        char key[256];
        snprintf(key, sizeof key, "grad.%s", name);
        int64_t n;
        float *want = ref_tensor(&f.set, key, &n);
        CHECK_MSG(want != NULL, "%s", key);
        if (!want) continue;
        float *got = xmalloc(sizeof(float) * (size_t)n);
        CHECK(model_get_grad(m, name, got, &err) == 0);
        double e = rel_err(got, want, n);
        CHECK_MSG(e <= TOL, "%s: relative error %.3g", key, e);
        free(got);
        free(want);
        n_checked++;
    }
    CHECK_MSG(n_checked == 2 * 7 * 2, "%d LoRA tensors compared", n_checked); /* 2 layers × 7 modules × A, B */
    model_free(m);
    fixture_close(&f);
}

/* Full fine-tuning: the reference is a frozen copy of the base; it must give the same numbers. */
TEST(frozen_reference_model_gives_the_base_logps) {
    struct fixture f;
    if (fixture_open(&f)) {
        CHECK(!"fixture");
        return;
    }
    struct model *policy = load(1, 1), *ref = load(0, 0);
    if (policy && ref) {
        struct whet_err err;
        double logps[4];
        CHECK_MSG(dpo_reference_logps(logps, policy, ref, &f.batch, &err) == 0, "%s", err.msg);
        CHECK(rel_err_d(logps, f.ref_logps, 4) <= TOL);
        /* Without LoRA and without a reference model there is nothing to compare against. */
        CHECK(dpo_reference_logps(logps, ref, NULL, &f.batch, &err) == -1);
        CHECK_CONTAINS(err.msg, "frozen model");
    }
    if (policy) model_free(policy);
    if (ref) model_free(ref);
    fixture_close(&f);
}

TEST(pair_loss_is_stable_and_its_derivative_right) {
    double d;
    /* z = beta * ((pc - rc) - (pr - rr)) = 0.1 * ((−10 + 12) − (−20 + 19)) = 0.3 */
    double l = dpo_pair_loss(&d, -10, -20, -12, -19, 0.1);
    CHECK_NEAR(l, log1p(exp(-0.3)), 1e-12);
    CHECK_NEAR(d, -1.0 / (1.0 + exp(0.3)), 1e-12);
    double h = 1e-6, lp = dpo_pair_loss(NULL, -10 + h, -20, -12, -19, 0.1), lm = dpo_pair_loss(NULL, -10 - h, -20, -12, -19, 0.1);
    CHECK_NEAR((lp - lm) / (2 * h), 0.1 * d, 1e-8); /* d loss / d log π(c) = β · d loss / dz */
    l = dpo_pair_loss(&d, 0, 5000, 0, 0, 1.0); /* z = −5000: loss ≈ 5000, slope −1, no overflow */
    CHECK(isfinite(l) && fabs(l - 5000) < 1e-9 && fabs(d + 1) < 1e-12);
    l = dpo_pair_loss(&d, 5000, 0, 0, 0, 1.0); /* z = +5000: loss and slope vanish */
    CHECK(isfinite(l) && l >= 0 && l < 1e-300 && fabs(d) < 1e-300);
    CHECK_NEAR(dpo_pair_loss(NULL, 0, 0, 0, 0, 0.1), log(2.0), 1e-15);
}

int main(void) {
    RUN(loss_and_lora_gradients_match_pytorch);
    RUN(frozen_reference_model_gives_the_base_logps);
    RUN(pair_loss_is_stable_and_its_derivative_right);
    return test_summary();
}
