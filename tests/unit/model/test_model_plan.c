/* test_model_plan.c - the memory plan (executor/train/plan) is what the engine allocates: every byte
 * the CPU backend allocates while a model and its trainer state are built and one training step of
 * B rows × T tokens runs is counted (posix_memalign, the backend's one allocation call, is wrapped
 * at link time), and compared with the plan, exactly, for LoRA and full fine-tuning, with and
 * without recompute, on the tiny preset (Qwen3: q/k norms) and a Qwen2 variant (q/k/v biases). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "model_init.h"
#include "model_plan.h"
#include "test.h"

static int counting;
static long long counted;

int __real_posix_memalign(void **p, size_t align, size_t size);
int __wrap_posix_memalign(void **p, size_t align, size_t size);
int __wrap_posix_memalign(void **p, size_t align, size_t size) {
    if (counting) counted += (long long)size;
    return __real_posix_memalign(p, align, size);
}

enum { B = 2, T = 24 };

static struct mp_shape shape_of(const struct model_config *c) {
    return (struct mp_shape){c->hidden_size, c->intermediate_size, c->n_layers, c->n_heads, c->n_kv_heads,
                             c->head_dim, c->vocab_size, c->tie_word_embeddings, c->qkv_bias, c->qk_norm};
}

/* Loads dir as `o` says with buffers for B×T tokens, runs a step, and checks the bytes the backend
 * allocated against the plan. */
static void check_case(const char *dir, const struct model_opts *o, const char *what) {
    struct model *m = NULL;
    struct whet_err err;
    counted = 0, counting = 1;
    int rc = model_load(&m, dir, o, &err);
    CHECK_MSG(rc == 0, "%s: %s", what, err.msg);
    if (rc) {
        counting = 0;
        return;
    }
    long long at_load = counted;
    int ids[B * T], targets[B * T];
    for (int i = 0; i < B * T; i++) ids[i] = (i * 37) % 256, targets[i] = (i * 37 + 37) % 256;
    struct model_batch batch = {.B = B, .T = T, .ids = ids, .targets = targets};
    float loss;
    model_zero_grad(m);
    CHECK_MSG(model_forward(m, &batch, &loss, &err) == 0, "%s: %s", what, err.msg);
    if (o->train) CHECK_MSG(model_backward(m, 1.0f / (B * T), &err) == 0, "%s: %s", what, err.msg);
    counting = 0;

    struct mp_shape s = shape_of(model_get_config(m));
    struct mp_job j = {.train = o->train, .method = MP_SFT, .lora_r = o->train ? o->lora_r : 0,
                       .lora_targets = o->lora_targets, .recompute = o->recompute || !o->train,
                       .rows = B, .seq_len = T, .dtype = MP_F32};
    struct mp_plan p;
    mp_plan(&p, &s, &j);
    CHECK_MSG((long long)model_num_params(m) == p.n_params, "%s: %zu parameters, plan %lld", what,
              model_num_params(m), (long long)p.n_params);
    CHECK_MSG((long long)model_num_trainable(m) == p.n_trainable, "%s: %zu trainable, plan %lld", what,
              model_num_trainable(m), (long long)p.n_trainable);
    long long params = p.weights + p.lora + p.gradients + p.moments + p.master + p.scalars;
    CHECK_MSG(at_load == params + p.activations + p.logits, "%s: load allocated %lld, plan %lld + %lld + %lld", what,
              at_load, params, (long long)p.activations, (long long)p.logits);
    CHECK_MSG(counted == p.total, "%s: a step allocated %lld in all, plan %lld", what, counted, (long long)p.total);

    counted = 0, counting = 1;
    struct kv_cache *kv = kv_cache_new(m, 3, 40, &err);
    counting = 0;
    CHECK_MSG(counted == mp_kv_cache_bytes(&s, 3, 40, MP_F32), "%s: kv cache %lld, plan %lld", what, counted,
              (long long)mp_kv_cache_bytes(&s, 3, 40, MP_F32));
    kv_cache_free(kv);
    model_free(m);
}

static void check_model(const char *dir) {
    struct model_opts o = model_opts_default();
    o.train = 1, o.lora_r = 8, o.lora_alpha = 16, o.max_batch_rows = B, o.max_seq_len = T;
    check_case(dir, &o, "lora all-linear");
    o.lora_r = 4, o.lora_targets = LORA_Q | LORA_V | LORA_DOWN;
    check_case(dir, &o, "lora q,v,down");
    o.recompute = 1;
    check_case(dir, &o, "lora recompute");
    o.lora_r = 0, o.recompute = 0;
    check_case(dir, &o, "full");
    o.recompute = 1;
    check_case(dir, &o, "full recompute");
    o.train = 0;
    check_case(dir, &o, "inference");
}

TEST(plan_matches_cpu_allocations) {
    char tmpl[] = "/tmp/whet-plan-test-XXXXXX";
    char *root = mkdtemp(tmpl);
    CHECK(root != NULL);
    if (!root) return;
    char *qwen3 = xasprintf("%s/qwen3", root), *qwen2 = xasprintf("%s/qwen2", root);
    struct model_init_opts io;
    struct whet_err err;
    CHECK(model_init_preset(&io, "tiny", &err) == 0);
    CHECK_MSG(model_init_write(qwen3, &io, &err) == 0, "%s", err.msg);
    io.arch = ARCH_QWEN2, io.layers = 2, io.head_dim = 32;
    CHECK_MSG(model_init_write(qwen2, &io, &err) == 0, "%s", err.msg);
    check_model(qwen3);
    check_model(qwen2);

    /* Full-fine-tuning DPO's reference: the trainer loads the base again for inference. */
    struct model_opts ro = model_opts_default();
    ro.lora_r = 0;
    struct model *ref = NULL;
    counted = 0, counting = 1;
    CHECK_MSG(model_load(&ref, qwen3, &ro, &err) == 0, "%s", err.msg);
    counting = 0;
    struct mp_plan p;
    struct mp_job dpo = {.train = 1, .method = MP_DPO, .rows = B, .seq_len = T};
    if (ref) {
        struct mp_shape s = shape_of(model_get_config(ref));
        mp_plan(&p, &s, &dpo);
        CHECK_MSG(counted == p.reference, "reference allocated %lld, plan %lld", counted, (long long)p.reference);
        model_free(ref);
    }
    char *cmd = xasprintf("rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    free(cmd), free(qwen3), free(qwen2);
}

/* The parts follow the dtype: bf16 halves weights, gradients and activations, adds an f32 master
 * copy of the trainable values, and keeps moments f32. */
TEST(plan_bf16_parts) {
    struct mp_shape s = {.hidden = 64, .intermediate = 128, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 16,
                         .vocab = 400, .tie_word_embeddings = 1};
    struct mp_job j = {.train = 1, .rows = 2, .seq_len = 8};
    struct mp_plan f, h;
    mp_plan(&f, &s, &j);
    j.dtype = MP_BF16;
    mp_plan(&h, &s, &j);
    CHECK(f.master == 0 && h.master == 4 * h.n_trainable && h.n_trainable == f.n_params);
    CHECK(h.weights * 2 == f.weights && h.gradients * 2 == f.gradients && h.moments == f.moments);
    CHECK(h.activations < f.activations && h.logits == f.logits);
}

/* ZeRO-3: the ranks' shards of every unit add up to the model (each value kept once), each rank keeps
 * about 1/N, and what stays resident (its shards and the units in flight) is less than the whole once the
 * model has more than a few layers. In flight: the unit computing and the next one, whose all-gather
 * runs meanwhile — untied the larger of embedding + layer, two layers, layer + head; tied the embedding
 * beside the larger of two layers and layer + head (the final norm). */
static int64_t most(int64_t a, int64_t b) { return a > b ? a : b; }

TEST(plan_zero3_shards) {
    struct mp_shape s = {.hidden = 64, .intermediate = 176, .layers = 6, .heads = 4, .kv_heads = 2, .head_dim = 16,
                         .vocab = 500, .tie_word_embeddings = 0};
    for (int tied = 0; tied < 2; tied++) {
        s.tie_word_embeddings = tied;
        struct mp_plan whole;
        mp_plan(&whole, &s, &(struct mp_job){.train = 1, .rows = 2, .seq_len = 8});
        int64_t embedding = s.vocab * s.hidden, head = s.hidden + (tied ? 0 : s.vocab * s.hidden);
        int64_t layer = (whole.n_params - embedding - head) / s.layers;
        int64_t in_flight = tied ? embedding + most(2 * layer, layer + head)
                                 : most(embedding + layer, most(2 * layer, layer + head));
        for (int n = 2; n <= 5; n++) {
            int64_t kept = 0;
            for (int k = 0; k < n; k++) {
                struct mp_plan p;
                mp_plan(&p, &s, &(struct mp_job){.train = 1, .rows = 2, .seq_len = 8, .optimizer_shards = n,
                                                 .optimizer_shard = k, .shard_params = 1});
                kept += p.moments / 8;
                CHECK_MSG(p.moments / 8 <= whole.n_params / n + s.layers + 2, "rank %d of %d keeps %lld of %lld", k, n,
                          (long long)(p.moments / 8), (long long)whole.n_params);
                CHECK(p.weights == p.gradients && p.weights < whole.weights && p.weights > 4 * whole.n_params / n);
                CHECK_MSG(p.weights == 4 * (p.moments / 8 + in_flight), "rank %d of %d: %lld bytes of weights", k, n,
                          (long long)p.weights);
            }
            CHECK_MSG(kept == whole.n_params, "%d ranks keep %lld values of %lld", n, (long long)kept,
                      (long long)whole.n_params);
            /* LoRA: the frozen base as sharded, the adapter's gradients whole, its moments ZeRO-1's */
            struct mp_plan lora, lora1;
            struct mp_job lj = {.train = 1, .rows = 2, .seq_len = 8, .lora_r = 8, .lora_targets = 0x7f,
                                .optimizer_shards = n, .optimizer_shard = n - 1};
            mp_plan(&lora1, &s, &lj);
            lj.shard_params = 1;
            mp_plan(&lora, &s, &lj);
            CHECK(lora.weights < lora1.weights && lora.gradients == lora1.gradients && lora.moments == lora1.moments);
            /* a frozen reference sharded with the policy: the policy's resident weights, nothing trainable */
            struct mp_plan ref, policy;
            mp_plan(&policy, &s, &(struct mp_job){.train = 1, .method = MP_DPO, .rows = 2, .seq_len = 8,
                                                  .optimizer_shards = n, .optimizer_shard = 0, .shard_params = 1});
            mp_plan(&ref, &s, &(struct mp_job){.rows = 2, .seq_len = 8, .optimizer_shards = n, .shard_params = 1});
            CHECK(ref.weights == policy.weights && ref.weights < whole.weights && ref.gradients == 0 && ref.moments == 0);
            CHECK(policy.reference == ref.weights + MP_SCALAR_BYTES);
        }
    }
}

/* A co-trained group's pass: its members' step tokens, cut at the bound, never below a whole row. */
TEST(plan_cotrain_pass) {
    CHECK(mp_cotrain_pass_tokens(8 * 512, 128, 1024) == 1024);                   /* 8 runs' rows, 4 passes */
    CHECK(mp_cotrain_pass_tokens(300, 128, 1024) == 300);                        /* one pass, all of it */
    CHECK(mp_cotrain_pass_tokens(4096, 2048, 1024) == 2048);                     /* a row longer than the bound */
    CHECK(mp_cotrain_pass_tokens(1 << 20, 128, 0) == MP_COTRAIN_PASS_TOKENS);    /* the default */
    CHECK(mp_cotrain_pass_tokens(-5, 128, 0) == 0);
}

int main(void) {
    RUN(plan_matches_cpu_allocations);
    RUN(plan_bf16_parts);
    RUN(plan_zero3_shards);
    RUN(plan_cotrain_pass);
    return test_summary();
}
