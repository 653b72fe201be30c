/* test_sizing.c - serverless job sizing on real model shapes (Qwen3-0.6B, Llama 3.1 8B and 70B, from
 * their config.json): the LoRA parameter count PEFT prints, 16 bytes per parameter for full
 * fine-tuning, gangs that grow with the model and the sequence, the smallest device that holds a job,
 * a job too big for one node refused, the max_gpus cap, and pools whose memory is unknown. The bounds
 * asserted are worked out here from the parameter counts, not read back from the library. */
#include <math.h>
#include <string.h>

#include "model_plan.h"
#include "sizing.h"
#include "test.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static const struct sz_model qwen3_0_6b = {.n_params = 596049920, .hidden = 1024, .intermediate = 3072, .layers = 28,
                                           .heads = 16, .kv_heads = 8, .head_dim = 128, .vocab = 151936};
static const struct sz_model llama_8b = {.n_params = 8030261248, .hidden = 4096, .intermediate = 14336, .layers = 32,
                                         .heads = 32, .kv_heads = 8, .head_dim = 128, .vocab = 128256};
static const struct sz_model llama_70b = {.n_params = 70553706496, .hidden = 8192, .intermediate = 28672, .layers = 80,
                                          .heads = 64, .kv_heads = 8, .head_dim = 128, .vocab = 128256};

static const struct sz_pool h100_node = {.device_mib = 80 * 1024, .max_node_devices = 8};

/* An SFT job with the service's defaults (common/job_spec.h). */
static struct sz_job sft(int full_ft) {
    return (struct sz_job){.method = SZ_SFT, .full_ft = full_ft, .lora_r = 16, .batch_size = 4, .max_seq_len = 512};
}

static struct sz_choice choose(const struct sz_model *m, struct sz_job j, const struct sz_pool *pools, int n, int max_gpus) {
    struct sz_estimate e;
    sz_estimate(&e, m, &j);
    struct sz_choice c;
    sz_choose(&c, &e, pools, n, max_gpus);
    return c;
}

/* Devices of `gib` that the sharded states alone fill: a lower bound on any gang. */
static int lower_bound(double state_bytes, double gib) { return (int)ceil(state_bytes / (SZ_USABLE_FRACTION * gib * GIB)); }

TEST(qwen3_0_6b_lora_takes_one_small_device) {
    struct sz_estimate e;
    struct sz_job j = sft(0);
    sz_estimate(&e, &qwen3_0_6b, &j);
    /* PEFT on Qwen3-0.6B, r=16, all linear projections: "trainable params: 10,092,544"; the adapter,
     * its gradient and two AdamW moments in f32. */
    CHECK(e.state == 16LL * 10092544);
    CHECK(e.weights == 4LL * 596049920);
    CHECK(e.reference == 0);
    struct sz_choice c = choose(&qwen3_0_6b, j, &h100_node, 1, 0);
    CHECK(c.fits && c.gpus == 1 && c.pool == 0);
    /* more than the weights and the per-device overhead, small enough for a 24 GiB L4 */
    CHECK(c.min_gpu_mem_mib > (e.weights >> 20) + SZ_DEVICE_OVERHEAD_MIB);
    CHECK(c.min_gpu_mem_mib < 24 * 1024);
}

TEST(llama_8b_full_finetune_needs_several_devices) {
    struct sz_estimate e;
    struct sz_job j = sft(1);
    sz_estimate(&e, &llama_8b, &j);
    CHECK(e.weights + e.state == 16LL * llama_8b.n_params); /* f32 weights, gradients, m, v */
    struct sz_choice c = choose(&llama_8b, j, &h100_node, 1, 0);
    CHECK(c.fits);
    CHECK(c.gpus >= lower_bound(16.0 * (double)llama_8b.n_params, 80) && c.gpus >= 2 && c.gpus <= 4);
    CHECK(c.min_gpu_mem_mib <= 80 * 1024);
    /* one device fewer would not hold it */
    CHECK(sz_min_device_mib(&e, c.gpus - 1) > 80 * 1024);
    /* on 40 GiB devices it takes more of them; a longer sequence takes more too */
    struct sz_pool a100_40 = {.device_mib = 40 * 1024, .max_node_devices = 8};
    struct sz_choice c40 = choose(&llama_8b, j, &a100_40, 1, 0);
    CHECK(c40.fits && c40.gpus > c.gpus);
    struct sz_job long_seq = j;
    long_seq.max_seq_len = 2048;
    struct sz_choice cl = choose(&llama_8b, long_seq, &h100_node, 1, 0);
    CHECK(cl.fits && cl.gpus > c.gpus);
    /* 16k tokens: one example's activations alone, 32 layers of 4·4096 + 6144 + 4096 + 3·14336 f32
     * per token (~136 GiB), overflow a device; no gang helps (the engine does not recompute) */
    CHECK(4.0 * 32 * (4 * 4096 + 6144 + 4096 + 3 * 14336) * 16384 > 80 * GIB);
    long_seq.max_seq_len = 16384;
    cl = choose(&llama_8b, long_seq, &h100_node, 1, 0);
    CHECK(!cl.fits && cl.gpus == 0);
}

TEST(llama_8b_lora_fits_one_h100) {
    struct sz_choice c = choose(&llama_8b, sft(0), &h100_node, 1, 0);
    CHECK(c.fits && c.gpus == 1);
    CHECK(c.min_gpu_mem_mib > 4.0 * (double)llama_8b.n_params / (1 << 20)); /* at least the f32 weights */
}

TEST(llama_70b_full_finetune_is_too_big_for_one_node) {
    struct sz_choice c = choose(&llama_70b, sft(1), &h100_node, 1, 0);
    CHECK(!c.fits && c.pool == -1);
    /* what it would need: at least 16 bytes per parameter over 90% of 80 GiB devices (15) */
    CHECK(c.gpus >= lower_bound(16.0 * (double)llama_70b.n_params, 80) && c.gpus > 8);
    /* LoRA on the same model fits one node: the frozen f32 weights over at least 4 devices */
    struct sz_choice l = choose(&llama_70b, sft(0), &h100_node, 1, 0);
    CHECK(l.fits && l.gpus >= lower_bound(4.0 * (double)llama_70b.n_params, 80) && l.gpus <= 8);
}

TEST(dpo_and_grpo_cost_more_than_sft) {
    struct sz_estimate s, d, g;
    struct sz_job j = sft(1);
    sz_estimate(&s, &llama_8b, &j);
    j.method = SZ_DPO;
    sz_estimate(&d, &llama_8b, &j);
    /* a frozen reference copy and two sequences (chosen, rejected) per example */
    CHECK(d.reference == 4LL * llama_8b.n_params);
    CHECK(d.activations_per_example == 2 * s.activations_per_example);
    CHECK(sz_per_device_bytes(&d, 1) - sz_per_device_bytes(&s, 1) >= d.reference + s.activations_per_example * s.batch);
    /* LoRA DPO: the reference is the base with the adapter off, no copy */
    j.full_ft = 0;
    sz_estimate(&d, &llama_8b, &j);
    CHECK(d.reference == 0);
    /* GRPO: the KV cache of group_size rollouts of max_seq_len tokens: 2·L·NKV·hd f32 per token */
    struct sz_job r = {.method = SZ_GRPO, .lora_r = 16, .batch_size = 4, .group_size = 8, .max_seq_len = 1024};
    sz_estimate(&g, &llama_8b, &r);
    CHECK(g.kv_per_example == 4LL * 2 * 32 * 8 * 128 * 1024 * 8);
    CHECK(g.activations_per_example > 8 * s.activations_per_example); /* 8 sequences of twice the length */
}

TEST(per_device_bytes_fall_with_the_gang) {
    struct sz_estimate e;
    struct sz_job j = sft(1);
    sz_estimate(&e, &llama_70b, &j);
    int64_t prev = sz_per_device_bytes(&e, 1);
    for (int n = 2; n <= 64; n++) {
        int64_t b = sz_per_device_bytes(&e, n);
        CHECK(b < prev);
        prev = b;
    }
    /* the unsharded part stays: one example and the overhead on each device */
    CHECK(sz_per_device_bytes(&e, 1024) > e.activations_per_example + ((int64_t)SZ_DEVICE_OVERHEAD_MIB << 20));
}

TEST(max_gpus_caps_the_gang) {
    struct sz_choice c = choose(&llama_8b, sft(1), &h100_node, 1, 1);
    CHECK(!c.fits && c.capped && c.gpus >= 2); /* says what it would need, and that the cap is why */
    c = choose(&llama_70b, sft(1), &h100_node, 1, 4);
    CHECK(!c.fits && !c.capped); /* no node holds it, cap or not */
    c = choose(&llama_8b, sft(1), &h100_node, 1, 8);
    CHECK(c.fits && c.gpus >= 2 && c.gpus <= 4);
    c = choose(&qwen3_0_6b, sft(0), &h100_node, 1, 4);
    CHECK(c.fits && c.gpus == 1); /* a cap, not a pin: sizing takes no more than it needs */
}

TEST(smallest_device_that_holds_the_job) {
    struct sz_pool pools[] = {{.device_mib = 80 * 1024, .max_node_devices = 8}, {.device_mib = 24 * 1024, .max_node_devices = 4}};
    struct sz_choice c = choose(&qwen3_0_6b, sft(0), pools, 2, 0);
    CHECK(c.fits && c.pool == 1 && c.gpus == 1 && c.min_gpu_mem_mib <= 24 * 1024);
    /* 8B full fine-tuning would need >= 6 of the 24 GiB devices, more than their 4-device nodes */
    CHECK(lower_bound(16.0 * (double)llama_8b.n_params, 24) > 4);
    c = choose(&llama_8b, sft(1), pools, 2, 0);
    CHECK(c.fits && c.pool == 0 && c.min_gpu_mem_mib > 24 * 1024);
}

TEST(unknown_memory_and_empty_fleets) {
    struct sz_pool cpu = {.device_mib = 0, .max_node_devices = 2};
    struct sz_choice c = choose(&llama_70b, sft(1), &cpu, 1, 0);
    CHECK(c.fits && c.gpus == 1 && c.min_gpu_mem_mib == 0);
    /* known memory decides when there is some */
    struct sz_pool mixed[] = {cpu, h100_node};
    c = choose(&llama_8b, sft(1), mixed, 2, 0);
    CHECK(c.fits && c.pool == 1 && c.gpus >= 2);
    /* no executor yet: a shape to wait with, against 80 GiB devices */
    c = choose(&qwen3_0_6b, sft(0), NULL, 0, 0);
    CHECK(c.fits && c.gpus == 1 && c.min_gpu_mem_mib > 0);
    c = choose(&llama_70b, sft(1), NULL, 0, 0);
    CHECK(!c.fits && c.gpus > 8);
}

TEST(shape_estimated_from_the_parameter_count) {
    /* config.json without a shape: a Llama-like guess from P, close to the real 8B's activations */
    struct sz_model guess = {.n_params = llama_8b.n_params};
    struct sz_estimate real, est;
    struct sz_job j = sft(0);
    sz_estimate(&real, &llama_8b, &j);
    sz_estimate(&est, &guess, &j);
    CHECK(est.weights == real.weights);
    double ratio = (double)est.activations_per_example / (double)real.activations_per_example;
    CHECK_MSG(ratio > 0.5 && ratio < 2.0, "activation estimate off by %.2fx", ratio);
    /* a toy model: one device, little more than the overhead */
    struct sz_model toy = {.n_params = 1000};
    struct sz_choice c = choose(&toy, j, &h100_node, 1, 0);
    CHECK(c.fits && c.gpus == 1 && c.min_gpu_mem_mib < SZ_DEVICE_OVERHEAD_MIB * 2);
}

TEST(lora_targets_by_name) {
    CHECK(sz_lora_target("q_proj") == SZ_LORA_Q && sz_lora_target("down_proj") == SZ_LORA_DOWN);
    CHECK(sz_lora_target("lm_head") == 0);
    struct sz_estimate all, qv;
    struct sz_job j = sft(0);
    sz_estimate(&all, &qwen3_0_6b, &j);
    j.lora_targets = SZ_LORA_Q | SZ_LORA_V;
    sz_estimate(&qv, &qwen3_0_6b, &j);
    /* q: 1024 -> 2048, v: 1024 -> 1024, r 16, 28 layers: PEFT's 2,293,760 */
    CHECK(qv.state == 16LL * 2293760 && qv.state < all.state);
}

/* Co-training: the group holds the base and ONE bounded pass (MP_COTRAIN_PASS_TOKENS by default), each
 * member only its adapter's state. Llama 3.1 8B, r 16 on all seven projections: per layer r·Σ(in + out) =
 * 16·(8192 + 5120 + 5120 + 8192 + 18432 + 18432 + 18432) = 1,310,720, × 32 layers = 41,943,040 values, 16
 * bytes each (adapter, gradient, m, v): exactly 640 MiB. */
#define LLAMA_8B_LORA_STATE_MIB 640

/* The job's estimate, and its co-training parts for passes of pass_tokens. */
static struct sz_estimate cotrain_mib(const struct sz_model *m, struct sz_job j, int32_t pass_tokens, int32_t *base,
                                      int32_t *member) {
    struct sz_estimate e;
    sz_estimate(&e, m, &j);
    CHECK(e.cotrainable == 1);
    sz_cotrain_mib(&e, pass_tokens, base, member);
    return e;
}

TEST(cotrain_base_and_one_pass_once_member_its_adapter) {
    struct sz_job j = sft(0);
    int32_t base, member;
    struct sz_estimate e = cotrain_mib(&llama_8b, j, 0, &base, &member);
    int32_t weights_mib = (int32_t)ceil(4.0 * 8030261248.0 / (1 << 20)) + SZ_DEVICE_OVERHEAD_MIB;
    /* a member adds its adapter, gradients and moments: nothing of its batch */
    CHECK(member == LLAMA_8B_LORA_STATE_MIB);
    /* the base holds the weights, the overhead and a pass: 1024 tokens of 8B activations (every layer's
     * saved tensors, ~9 MB a token) are well over 1 GiB, and under 2048 tokens' worth plus the logits */
    CHECK(base > weights_mib + 1024 && base < weights_mib + (int32_t)(2048 * e.act_per_token >> 20) + 1024);
    /* the pass is bounded: sixteen times the batch or four times the sequence change neither part */
    int32_t base2, member2;
    j.batch_size = 64;
    cotrain_mib(&llama_8b, j, 0, &base2, &member2);
    CHECK(base2 == base && member2 == member);
    j = sft(0);
    j.max_seq_len = 128;
    cotrain_mib(&llama_8b, j, 0, &base2, &member2);
    CHECK(member2 == member && base2 <= base); /* (a shorter RoPE table) */
    /* a larger bound: 1024 more tokens of activations (the logits chunk, 523 rows of 128256, is full in both) */
    j = sft(0);
    cotrain_mib(&llama_8b, j, 2048, &base2, &member2);
    int64_t more = (1024 * e.act_per_token) >> 20;
    CHECK(member2 == member && base2 - base >= more - 1 && base2 - base <= more + 1);
    /* the same bound as the trainer's default, and a pass never splits a row: at least the longest (a DPO
     * pair, both sides in one row: 2 × 1024 tokens, so the pass of a bound of 2048) */
    int32_t base_default;
    cotrain_mib(&llama_8b, j, MP_COTRAIN_PASS_TOKENS, &base_default, &member2);
    CHECK(base_default == base);
    j.max_seq_len = 1024;
    cotrain_mib(&llama_8b, j, 2048, &base2, &member2);
    j.method = SZ_DPO;
    int32_t dpo_base, dpo_member;
    cotrain_mib(&llama_8b, j, 0, &dpo_base, &dpo_member);
    CHECK(dpo_base == base2 && dpo_member == member);
    /* GRPO steps on its own adapter view, as alone: no shared pass in the base, its activations (or its
     * rollouts' KV cache) in its part; together what it needs alone */
    j = sft(0);
    j.method = SZ_GRPO;
    j.group_size = 4;
    int32_t grpo_base, grpo_member;
    e = cotrain_mib(&llama_8b, j, 0, &grpo_base, &grpo_member);
    int64_t alone = (sz_per_device_bytes(&e, 1) + (1 << 20) - 1) >> 20;
    CHECK(grpo_base == weights_mib && grpo_member > 4 * LLAMA_8B_LORA_STATE_MIB);
    CHECK(grpo_base + grpo_member >= alone && grpo_base + grpo_member <= alone + 1);
}

TEST(cotrain_group_of_eight_fits_one_h100) {
    /* Eight Llama 8B LoRA SFT jobs (batch 4 × 512 tokens each) on one 80 GiB device: the weights, the
     * overhead and one pass (~30 + 2 + ~9 GiB) and eight adapters' 640 MiB fit its usable 72 GiB; charged
     * each its own batch's activations (2048 tokens, ~18 GiB each), as if all members' rows ran at once,
     * they did not. */
    int32_t base, member;
    struct sz_estimate e = cotrain_mib(&llama_8b, sft(0), 0, &base, &member);
    int64_t usable = (int64_t)(80 * 1024 * SZ_USABLE_FRACTION);
    CHECK(base + 8 * (int64_t)member <= usable);
    int64_t own_batch = (4 * 512 * e.act_per_token) >> 20;
    CHECK(base + 8 * (member + own_batch) > usable);
}

TEST(cotrainable_methods) {
    /* Full fine-tuning trains the base itself; LoRA SFT, DPO and GRPO share it (a group's sandbox runs each
     * member's graders and judge models as its own would). */
    struct sz_job j = sft(1);
    CHECK(!sz_cotrainable(&j));
    j = sft(0);
    j.method = SZ_DPO;
    CHECK(sz_cotrainable(&j));
    j.method = SZ_GRPO;
    CHECK(sz_cotrainable(&j));
    j.full_ft = 1;
    CHECK(!sz_cotrainable(&j));
}

TEST(cotrain_pass_tokens_setting) {
    char why[300] = "";
    CHECK(mp_cotrain_pass_tokens_setting(NULL, why, sizeof why) == MP_COTRAIN_PASS_TOKENS);
    CHECK(mp_cotrain_pass_tokens_setting("", why, sizeof why) == MP_COTRAIN_PASS_TOKENS);
    CHECK(mp_cotrain_pass_tokens_setting("4096", why, sizeof why) == 4096 && !why[0]);
    const char *bad[] = {"0", "-5", "+5", " 5", "5k", "1.5", "abc", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = 0;
        CHECK_MSG(mp_cotrain_pass_tokens_setting(bad[i], why, sizeof why) == 0, "%s", bad[i]);
        CHECK(strstr(why, MP_COTRAIN_PASS_TOKENS_ENV) && strstr(why, bad[i]));
    }
}

int main(void) {
    RUN(qwen3_0_6b_lora_takes_one_small_device);
    RUN(llama_8b_full_finetune_needs_several_devices);
    RUN(llama_8b_lora_fits_one_h100);
    RUN(llama_70b_full_finetune_is_too_big_for_one_node);
    RUN(dpo_and_grpo_cost_more_than_sft);
    RUN(per_device_bytes_fall_with_the_gang);
    RUN(max_gpus_caps_the_gang);
    RUN(smallest_device_that_holds_the_job);
    RUN(unknown_memory_and_empty_fleets);
    RUN(shape_estimated_from_the_parameter_count);
    RUN(lora_targets_by_name);
    RUN(cotrain_base_and_one_pass_once_member_its_adapter);
    RUN(cotrain_group_of_eight_fits_one_h100);
    RUN(cotrainable_methods);
    RUN(cotrain_pass_tokens_setting);
    return test_summary();
}
