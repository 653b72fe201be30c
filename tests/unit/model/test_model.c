/* test_model.c - the model engine against PyTorch (tests/fixtures/reference, written by
 * tests/fixtures/make_reference.py): logits, loss, every gradient and one AdamW step for full
 * fine-tuning and for LoRA, on Llama (GQA, llama3 rope scaling), Qwen2 (biases, tied, rsLoRA) and
 * Qwen3 (q/k norm), and segments of 150 and 50 tokens (several attention blocks). Tensors compare by relative error ||c - ref|| / ||ref|| <= 1e-4 (fp32).
 * Also: activation recomputation and logits computed in chunks give the same gradients, KV-cache generation gives the logits of
 * the full forward pass, and saved models, adapters and optimiser states load back the same.
 * argv[1], when given, is the device to run on ("cuda": tests/gpu/run.sh and the emulated CUDA backend's
 * run, tests/unit/backend/CMakeLists.txt); the CPU otherwise. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "safetensors.h"
#include "test.h"

#define TOL 1e-4

static const char *device; /* NULL: the CPU */

static struct model_opts device_opts(void) {
    struct model_opts o = model_opts_default();
    o.device = device;
    return o;
}

static char *fixture(const char *arch, const char *rest) {
    const char *base = getenv("WHET_FIXTURES");
    return xasprintf("%s/reference/%s%s%s", base ? base : "tests/fixtures", arch, rest ? "/" : "", rest ? rest : "");
}

struct ref {
    struct st_set set;
    int B, T, N;
    int *ids, *pos, *seq, *targets;
    float *mask;
};

static float *ref_tensor(struct ref *r, const char *name, int64_t *numel) {
    const struct st_tensor *t = st_find(&r->set, name);
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

static int *ref_ints(struct ref *r, const char *name) {
    int64_t n;
    float *f = ref_tensor(r, name, &n);
    int *out = xmalloc(sizeof(int) * (size_t)n);
    for (int64_t i = 0; i < n; i++) out[i] = (int)f[i];
    free(f);
    return out;
}

static int ref_open(struct ref *r, const char *arch) {
    char *path = fixture(arch, "ref.safetensors");
    struct whet_err err;
    int rc = st_open_file(&r->set, path, &err);
    free(path);
    if (rc) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    r->B = atoi(st_metadata(&r->set, "B"));
    r->T = atoi(st_metadata(&r->set, "T"));
    r->N = r->B * r->T;
    r->ids = ref_ints(r, "inputs.ids");
    r->pos = ref_ints(r, "inputs.positions");
    r->seq = ref_ints(r, "inputs.seq_ids");
    r->targets = ref_ints(r, "inputs.targets");
    r->mask = ref_tensor(r, "inputs.loss_mask", NULL);
    return 0;
}

static void ref_close(struct ref *r) {
    free(r->ids);
    free(r->pos);
    free(r->seq);
    free(r->targets);
    free(r->mask);
    st_close(&r->set);
}

static struct model_batch ref_batch(const struct ref *r, int with_targets) {
    return (struct model_batch){.B = r->B, .T = r->T, .ids = r->ids, .positions = r->pos, .seq_ids = r->seq,
                                .targets = with_targets ? r->targets : NULL, .loss_mask = r->mask};
}

static double rel_err(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num) / (den > 0 ? sqrt(den) : 1e-30);
}

/* Compares a model tensor (param or grad) with reference tensor `prefix` + name. */
static void check_tensor(struct model *m, struct ref *r, const char *name, const char *prefix, int grad) {
    char key[256];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    int64_t n;
    float *want = ref_tensor(r, key, &n);
    CHECK_MSG(want != NULL, "%s", key);
    if (!want) return;
    CHECK_MSG(model_tensor_numel(m, name) == n, "%s: %lld elements, reference %lld", name, model_tensor_numel(m, name),
              (long long)n);
    float *got = xmalloc(sizeof(float) * (size_t)n);
    struct whet_err err;
    int rc = grad ? model_get_grad(m, name, got, &err) : model_get_param(m, name, got, &err);
    CHECK(rc == 0);
    double e = rel_err(got, want, n);
    CHECK_MSG(e <= TOL, "%s: relative error %.3g", key, e);
    free(got);
    free(want);
}

static float meta_f(struct ref *r, const char *k) { return (float)atof(st_metadata(&r->set, k)); }

static void full_finetune(const char *arch, int recompute, int logit_rows) {
    struct ref r;
    CHECK(ref_open(&r, arch) == 0);
    struct model_opts o = device_opts();
    o.train = 1, o.lora_r = 0, o.recompute = recompute, o.logit_rows = logit_rows;
    struct model *m;
    struct whet_err err;
    char *dir = fixture(arch, NULL);
    int rc = model_load(&m, dir, &o, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    free(dir);
    if (rc) return;
    const struct model_config *c = model_get_config(m);

    /* Logits without targets. */
    struct model_batch b = ref_batch(&r, 0);
    float loss;
    CHECK(model_forward(m, &b, &loss, &err) == 0);
    int64_t n;
    float *want = ref_tensor(&r, "logits", &n);
    CHECK(n == (int64_t)r.N * c->vocab_size);
    float *got = xmalloc(sizeof(float) * (size_t)n);
    model_get_logits(m, got);
    double e = rel_err(got, want, n);
    CHECK_MSG(e <= TOL, "%s logits: relative error %.3g", arch, e);
    free(got);
    free(want);

    /* Loss and gradients. */
    b = ref_batch(&r, 1);
    CHECK(model_forward(m, &b, &loss, &err) == 0);
    float *ref_loss = ref_tensor(&r, "loss", NULL);
    CHECK_MSG(fabs(loss - ref_loss[0]) <= TOL * fabs(ref_loss[0]), "%s loss %.7f, reference %.7f", arch, loss, ref_loss[0]);
    struct model_stats st = model_last_stats(m);
    int n_targets = 0;
    double weight = 0;
    for (int i = 0; i < r.N; i++)
        if (r.targets[i] >= 0 && r.mask[i] != 0) n_targets++, weight += r.mask[i];
    CHECK(st.n_targets == n_targets);
    CHECK_NEAR(st.weight_sum, weight, 1e-9);
    CHECK(st.n_correct >= 0 && st.n_correct <= n_targets);
    model_zero_grad(m);
    CHECK(model_backward(m, (float)(1.0 / st.weight_sum), &err) == 0);
    CHECK(model_backward(m, 1.0f, &err) == -1); /* a backward consumes its forward */
    for (int i = 0; i < model_num_tensors(m); i++) check_tensor(m, &r, model_tensor_name(m, i), "grad.", 1);

    /* One AdamW step. */
    model_adamw_step(m, meta_f(&r, "lr"), meta_f(&r, "beta1"), meta_f(&r, "beta2"), meta_f(&r, "eps"), meta_f(&r, "wd"));
    CHECK(model_adam_step_count(m) == 1);
    for (int i = 0; i < model_num_tensors(m); i++) check_tensor(m, &r, model_tensor_name(m, i), "adamw.", 0);
    free(ref_loss);
    model_free(m);
    ref_close(&r);
}

static void lora_finetune(const char *arch) {
    struct ref r;
    CHECK(ref_open(&r, arch) == 0);
    struct model_opts o = device_opts();
    char *adapter = fixture(arch, "adapter"), *dir = fixture(arch, NULL);
    o.train = 1, o.adapter_dir = adapter;
    struct model *m;
    struct whet_err err;
    int rc = model_load(&m, dir, &o, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    CHECK(model_is_lora(m));
    struct model_batch b = ref_batch(&r, 1);
    float loss;
    CHECK(model_forward(m, &b, &loss, &err) == 0);
    float *ref_loss = ref_tensor(&r, "lora.loss", NULL);
    CHECK_MSG(fabs(loss - ref_loss[0]) <= TOL * fabs(ref_loss[0]), "%s LoRA loss %.7f, reference %.7f", arch, loss,
              ref_loss[0]);
    model_zero_grad(m);
    CHECK(model_backward(m, (float)(1.0 / model_last_stats(m).weight_sum), &err) == 0);
    int n_lora = 0;
    for (int i = 0; i < model_num_tensors(m); i++) {
        const char *name = model_tensor_name(m, i);
        if (!strstr(name, "lora_")) continue;
        n_lora++;
        check_tensor(m, &r, name, "lora.grad.", 1);
    }
    CHECK(n_lora > 0);
    /* Frozen base: zero gradient. */
    float *g = xmalloc(sizeof(float) * (size_t)model_tensor_numel(m, "model.norm.weight"));
    CHECK(model_get_grad(m, "model.norm.weight", g, &err) == 0);
    CHECK(g[0] == 0.0f);
    free(g);
    model_adamw_step(m, meta_f(&r, "lr"), meta_f(&r, "beta1"), meta_f(&r, "beta2"), meta_f(&r, "eps"), meta_f(&r, "wd"));
    for (int i = 0; i < model_num_tensors(m); i++)
        if (strstr(model_tensor_name(m, i), "lora_")) check_tensor(m, &r, model_tensor_name(m, i), "lora.adamw.", 0);

    /* Save the adapter and the optimiser state; a fresh model loaded from them continues the same. */
    char tmpl[] = "/tmp/whet-model-test-XXXXXX";
    char *tmp = mkdtemp(tmpl);
    CHECK(tmp != NULL);
    char *adir = xasprintf("%s/adapter", tmp), *opt = xasprintf("%s/optimizer.safetensors", tmp);
    CHECK_MSG(model_save_adapter(m, adir, &err) == 0, "%s", err.msg);
    CHECK_MSG(model_save_optimizer(m, opt, &err) == 0, "%s", err.msg);
    struct model *m2;
    o.adapter_dir = adir;
    rc = model_load(&m2, dir, &o, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        CHECK_MSG(model_load_optimizer(m2, opt, &err) == 0, "%s", err.msg);
        CHECK(model_adam_step_count(m2) == 1);
        float l1, l2;
        CHECK(model_forward(m, &b, &l1, &err) == 0);
        CHECK(model_forward(m2, &b, &l2, &err) == 0);
        CHECK(l1 == l2);
        model_zero_grad(m);
        model_zero_grad(m2);
        CHECK(model_backward(m, 0.1f, &err) == 0);
        CHECK(model_backward(m2, 0.1f, &err) == 0);
        model_adamw_step(m, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f);
        model_adamw_step(m2, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f);
        CHECK(model_forward(m, &b, &l1, &err) == 0);
        CHECK(model_forward(m2, &b, &l2, &err) == 0);
        CHECK_MSG(l1 == l2, "resumed %.9g vs %.9g", l1, l2);

        /* The merged full model gives the LoRA model's logits. */
        char *hf = xasprintf("%s/merged", tmp);
        CHECK_MSG(model_save_hf(m, hf, 0, &err) == 0, "%s", err.msg);
        struct model_opts io = device_opts();
        struct model *m3;
        rc = model_load(&m3, hf, &io, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        if (!rc) {
            struct model_batch bi = ref_batch(&r, 0);
            int V = model_get_config(m)->vocab_size;
            float *a = xmalloc(sizeof(float) * (size_t)r.N * V), *c = xmalloc(sizeof(float) * (size_t)r.N * V);
            CHECK(model_forward(m, &bi, &l1, &err) == 0);
            model_get_logits(m, a);
            CHECK(model_forward(m3, &bi, &l2, &err) == 0);
            model_get_logits(m3, c);
            double e = rel_err(c, a, (int64_t)r.N * V);
            CHECK_MSG(e <= 1e-5, "merged logits: relative error %.3g", e);
            free(a);
            free(c);
            model_free(m3);
        }
        free(hf);
        model_free(m2);
    }
    char *cmd = xasprintf("rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
    free(cmd);
    free(adir);
    free(opt);
    free(ref_loss);
    free(adapter);
    free(dir);
    model_free(m);
    ref_close(&r);
}

TEST(llama_full) { full_finetune("llama", 0, 0); }
TEST(qwen2_full) { full_finetune("qwen2", 0, 0); }
TEST(qwen3_full) { full_finetune("qwen3", 0, 0); }
TEST(qwen3_full_recompute) { full_finetune("qwen3", 1, 0); }
/* Logits 3 rows at a time: the backward pass recomputes them chunk by chunk. */
TEST(qwen2_full_logit_chunks) { full_finetune("qwen2", 0, 3); }
TEST(long_segments_full) { full_finetune("long", 0, 64); }
TEST(long_segments_lora) { lora_finetune("long"); }
TEST(llama_full_recompute) { full_finetune("llama", 1, 0); }
TEST(llama_lora) { lora_finetune("llama"); }
TEST(qwen2_rslora) { lora_finetune("qwen2"); }
TEST(qwen3_lora) { lora_finetune("qwen3"); }

/* Prefill + decode through the KV cache reproduces the logits of the full forward pass. */
static void kv_cache_matches(const char *arch) {
    struct ref r;
    CHECK(ref_open(&r, arch) == 0);
    struct model_opts o = device_opts();
    struct model *m;
    struct whet_err err;
    char *dir = fixture(arch, NULL);
    int rc = model_load(&m, dir, &o, &err);
    free(dir);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    int V = model_get_config(m)->vocab_size, T = r.T;
    /* Row 1 of the batch is one 8-token example. */
    const int *ids = r.ids + T;
    struct model_batch b = {.B = 1, .T = T, .ids = ids};
    float loss;
    CHECK(model_forward(m, &b, &loss, &err) == 0);
    float *full = xmalloc(sizeof(float) * (size_t)T * V), *step = xmalloc(sizeof(float) * (size_t)2 * V);
    model_get_logits(m, full);
    struct kv_cache *c = kv_cache_new(m, 2, 16, &err);
    CHECK(model_prefill(m, c, 0, ids, 5, step, &err) == 0);
    CHECK(rel_err(step, full + 4 * V, V) <= TOL);
    CHECK(model_prefill(m, c, 1, ids, 3, step, &err) == 0);
    CHECK(rel_err(step, full + 2 * V, V) <= TOL);
    /* Both slots step together: slot 0 gets token 5, slot 1 token 3. */
    int slots[2] = {0, 1}, next[2] = {ids[5], ids[3]};
    CHECK(model_decode_step(m, c, slots, next, 2, step, &err) == 0);
    CHECK_MSG(rel_err(step, full + 5 * V, V) <= TOL, "slot 0: %.3g", rel_err(step, full + 5 * V, V));
    CHECK_MSG(rel_err(step + V, full + 3 * V, V) <= TOL, "slot 1: %.3g", rel_err(step + V, full + 3 * V, V));
    CHECK(kv_cache_len(c, 0) == 6 && kv_cache_len(c, 1) == 4);
    int dup[2] = {0, 0};
    CHECK(model_decode_step(m, c, dup, next, 2, step, &err) == -1);
    CHECK_CONTAINS(err.msg, "twice");
    kv_cache_clear(c, 1);
    CHECK(kv_cache_len(c, 1) == 0);
    kv_cache_free(c);
    free(full);
    free(step);
    model_free(m);
    ref_close(&r);
}

TEST(kv_cache_llama) { kv_cache_matches("llama"); }
TEST(kv_cache_qwen3) { kv_cache_matches("qwen3"); }

TEST(bad_batches) {
    struct model_opts o = device_opts();
    struct model *m;
    struct whet_err err;
    char *dir = fixture("qwen2", NULL);
    CHECK(model_load(&m, dir, &o, &err) == 0);
    free(dir);
    int ids[4] = {1, 2, 3, 99};
    struct model_batch b = {.B = 1, .T = 4, .ids = ids};
    float loss;
    CHECK(model_forward(m, &b, &loss, &err) == -1);
    CHECK_CONTAINS(err.msg, "outside the vocabulary");
    ids[3] = 4;
    int targets[4] = {1, 2, -7, 0};
    b.targets = targets;
    CHECK(model_forward(m, &b, &loss, &err) == -1);
    CHECK_CONTAINS(err.msg, "target -7");
    int pos[4] = {0, 1, 2, 100000};
    b.targets = NULL, b.positions = pos;
    CHECK(model_forward(m, &b, &loss, &err) == -1);
    CHECK_CONTAINS(err.msg, "max_position_embeddings");
    CHECK(model_backward(m, 1.0f, &err) == -1); /* inference model */
    model_free(m);
    /* A missing tensor names itself. */
    o.adapter_dir = "/nonexistent-adapter";
    dir = fixture("qwen2", NULL);
    CHECK(model_load(&m, dir, &o, &err) == -1);
    CHECK_CONTAINS(err.msg, "adapter_config.json");
    free(dir);
}

/* More than the device holds is an error that says how much was needed and what to lower, not an
 * abort. The device is named too: one that is not there fails at once. */
TEST(out_of_memory_and_devices) {
    struct model_opts o = model_opts_default();
    o.train = 1;
    o.max_batch_rows = 1 << 15, o.max_seq_len = 1 << 15; /* 2^30 tokens of activations: terabytes */
    struct model *m = NULL;
    struct whet_err err;
    char *dir = fixture("qwen2", NULL);
    CHECK(model_load(&m, dir, &o, &err) == -1 && m == NULL);
    CHECK_CONTAINS(err.msg, "out of host memory: needed");
    CHECK_CONTAINS(err.hint, "lower batch_size or max_seq_len");
    o.max_batch_rows = 1 << 16; /* 2^31 tokens: more than a batch can count */
    CHECK(model_load(&m, dir, &o, &err) == -1);
    CHECK_CONTAINS(err.msg, "tokens");
    o.max_batch_rows = o.max_seq_len = 0;
    o.device = "cuda:7";
    CHECK(model_load(&m, dir, &o, &err) == -1);
    CHECK_CONTAINS(err.msg, "no CUDA device");
    o.device = "gpu";
    CHECK(model_load(&m, dir, &o, &err) == -1);
    CHECK_CONTAINS(err.msg, "expected cpu, cuda or cuda:N");
    free(dir);
}

int main(int argc, char **argv) {
    device = argc > 1 ? argv[1] : NULL;
    RUN(llama_full);
    RUN(qwen2_full);
    RUN(qwen3_full);
    RUN(qwen3_full_recompute);
    RUN(qwen2_full_logit_chunks);
    RUN(long_segments_full);
    RUN(long_segments_lora);
    RUN(llama_full_recompute);
    RUN(llama_lora);
    RUN(qwen2_rslora);
    RUN(qwen3_lora);
    RUN(kv_cache_llama);
    RUN(kv_cache_qwen3);
    RUN(bad_batches);
    RUN(out_of_memory_and_devices);
    return test_summary();
}
