/* sizing.c - the memory estimate of a fine-tuning job and the gang it needs (see sizing.h for the
 * formula and why each term is there). The bytes come from the engine's own memory plan
 * (executor/train/plan/model_plan.h): placement depends on that one pure file, the model's math,
 * which the engine allocates by, so an estimate cannot drift from what a trainer holds. */
#include "sizing.h"

#include <math.h>
#include <string.h>

#include "model_plan.h"

#define MIB (1024 * 1024)
#define EMPTY_FLEET_DEVICE_MIB (80 * 1024) /* an H100/A100-80GB, what a GPU fleet most often has */
#define EMPTY_FLEET_NODE_DEVICES 8

uint32_t sz_lora_target(const char *name) {
    static const char *const names[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    for (uint32_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i])) return 1u << i;
    return 0;
}

/* The shape with every field known: the config's, or a Llama-like estimate from P. */
static struct sz_model full_shape(const struct sz_model *m) {
    struct sz_model s = *m;
    if (s.n_params < 1) s.n_params = 1;
    if (s.hidden <= 0 || s.layers <= 0) {
        /* P = 12·L·C² and L = C/128  =>  C = cbrt(128·P/12) */
        double c = cbrt(128.0 * (double)s.n_params / 12.0);
        s.hidden = c < 1 ? 1 : (int32_t)c;
        s.layers = s.hidden / 128 < 1 ? 1 : s.hidden / 128;
    }
    if (s.intermediate <= 0) s.intermediate = (int32_t)((8 * (int64_t)s.hidden + 2) / 3);
    if (s.heads <= 0) s.heads = s.hidden >= 128 ? s.hidden / 128 : 1;
    if (s.kv_heads <= 0) s.kv_heads = s.heads;
    if (s.head_dim <= 0) s.head_dim = s.hidden / s.heads > 0 ? s.hidden / s.heads : 1;
    if (s.vocab <= 0) s.vocab = 32000;
    return s;
}

int sz_cotrainable(const struct sz_job *job) {
    return !job->full_ft && (job->method == SZ_SFT || job->method == SZ_DPO || job->method == SZ_GRPO);
}

void sz_estimate(struct sz_estimate *out, const struct sz_model *model, const struct sz_job *job) {
    struct sz_model s = full_shape(model);
    int64_t batch = job->batch_size > 1 ? job->batch_size : 1;
    int64_t seq = job->max_seq_len > 1 ? job->max_seq_len : 1;
    int64_t group = job->group_size > 1 ? job->group_size : 1;
    int64_t sequences = job->method == SZ_DPO ? 2 : job->method == SZ_GRPO ? group : 1;
    /* sizing.h's bits are model_plan.h's: q k v o gate up down. */
    struct mp_shape shape = {s.hidden, s.intermediate, s.layers, s.heads, s.kv_heads, s.head_dim, s.vocab, 0, 0, 0};
    struct mp_job mj = {
        .train = 1,
        .method = job->method == SZ_DPO ? MP_DPO : job->method == SZ_GRPO ? MP_GRPO : MP_SFT,
        .lora_r = job->full_ft ? 0 : job->lora_r > 1 ? job->lora_r : 1,
        .lora_targets = job->lora_targets ? job->lora_targets & SZ_LORA_ALL : SZ_LORA_ALL,
        .rows = sequences, /* one example */
        .seq_len = seq,
        .dtype = MP_F32,
    };
    struct mp_plan plan;
    mp_plan(&plan, &shape, &mj);

    memset(out, 0, sizeof *out);
    out->batch = (int32_t)batch;
    out->cotrainable = sz_cotrainable(job);
    /* The base's parameter count is the model's own (config.json may leave out biases, norms or a
     * tied head); the plan gives the bytes each parameter takes. */
    out->weights = plan.weights / plan.n_params * s.n_params; /* full_shape gives a layer and a width */
    int64_t train_state = plan.gradients + plan.moments + plan.master;
    if (job->full_ft) /* the weights are the trainable values: the state mirrors them */
        out->state = plan.n_trainable > 0 ? train_state / plan.n_trainable * s.n_params : 0;
    else
        out->state = plan.lora + train_state;
    if (plan.reference) out->reference = out->weights;
    out->activations_per_example = plan.activations;
    out->logits_max = plan.logits;
    out->rope = plan.rope;
    out->act_per_token = plan.act_per_token;
    out->logit_row = plan.logits / (sequences * seq < plan.logit_rows ? sequences * seq : plan.logit_rows);
    out->logit_rows = plan.logit_rows;
    out->cotrain_row = job->method == SZ_GRPO ? 0 : sequences * seq; /* SFT: 1 sequence a row; DPO: a pair */
    if (job->method == SZ_GRPO) out->kv_per_example = mp_kv_cache_bytes(&shape, sequences, seq, MP_F32);
}

int64_t sz_per_device_bytes(const struct sz_estimate *e, int32_t n) {
    if (n < 1) n = 1;
    int64_t sharded = (e->weights + e->state + e->reference + n - 1) / n;
    int64_t examples = (e->batch + n - 1) / n;
    if (examples < 1) examples = 1;
    int64_t train = e->activations_per_example * examples + e->logits_max + e->rope;
    int64_t rollout = e->kv_per_example * examples;
    return sharded + (train > rollout ? train : rollout) + (int64_t)SZ_DEVICE_OVERHEAD_MIB * MIB;
}

static int32_t mib_up(int64_t bytes) {
    int64_t mib = (bytes + MIB - 1) / MIB;
    return mib > INT32_MAX ? INT32_MAX : (int32_t)mib;
}

void sz_cotrain_mib(const struct sz_estimate *e, int32_t pass_tokens, int32_t *base_mib, int32_t *member_mib) {
    int64_t base = e->weights + (int64_t)SZ_DEVICE_OVERHEAD_MIB * MIB, member = e->state;
    if (e->cotrain_row > 0) { /* its rows join the shared passes: the largest, once per group */
        int64_t t = mp_cotrain_pass_tokens(INT64_MAX, e->cotrain_row, pass_tokens);
        base += e->act_per_token * t + (t < e->logit_rows ? t : e->logit_rows) * e->logit_row + e->rope;
    } else { /* its own steps, as alone */
        member = sz_per_device_bytes(e, 1) - base;
    }
    *base_mib = mib_up(base);
    *member_mib = mib_up(member);
}

int32_t sz_min_device_mib(const struct sz_estimate *e, int32_t n) {
    double mib = ceil((double)sz_per_device_bytes(e, n) / SZ_USABLE_FRACTION / MIB);
    return mib > INT32_MAX ? INT32_MAX : (int32_t)mib;
}

int32_t sz_devices_needed(const struct sz_estimate *e, int64_t device_mib, int32_t max_devices) {
    if (max_devices > SZ_MAX_GANG) max_devices = SZ_MAX_GANG;
    /* per_device falls as n grows: binary search for the first n that fits. */
    int32_t lo = 1, hi = max_devices;
    if (hi < 1 || sz_min_device_mib(e, hi) > device_mib) return 0;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (sz_min_device_mib(e, mid) <= device_mib) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

void sz_choose(struct sz_choice *out, const struct sz_estimate *e, const struct sz_pool *pools, int32_t n_pools,
               int32_t max_gpus) {
    int32_t cap = max_gpus > 0 ? max_gpus : SZ_MAX_GANG;
    memset(out, 0, sizeof *out);
    out->pool = -1;
    int any_unknown = 0, any_known = 0;
    int64_t best_bytes = 0;
    int32_t largest_mib = 0;
    for (int32_t i = 0; i < n_pools; i++) {
        const struct sz_pool *p = &pools[i];
        if (p->device_mib <= 0) {
            any_unknown = 1;
            continue;
        }
        any_known = 1;
        if (p->device_mib > largest_mib) largest_mib = p->device_mib;
        int32_t limit = p->max_node_devices < cap ? p->max_node_devices : cap;
        int32_t n = sz_devices_needed(e, p->device_mib, limit);
        if (n == 0) continue;
        int64_t bytes = (int64_t)n * p->device_mib;
        if (out->pool < 0 || bytes < best_bytes || (bytes == best_bytes && n < out->gpus)) {
            out->pool = i;
            out->gpus = n;
            best_bytes = bytes;
        }
    }
    if (out->pool >= 0) {
        out->fits = 1;
        out->min_gpu_mem_mib = sz_min_device_mib(e, out->gpus);
        return;
    }
    if (any_unknown) { /* devices whose memory nobody knows: one of them, placement checks nothing */
        out->fits = 1;
        out->gpus = 1;
        out->min_gpu_mem_mib = 0;
        return;
    }
    if (!any_known) { /* an empty fleet: a shape to wait with */
        largest_mib = EMPTY_FLEET_DEVICE_MIB;
        int32_t n = sz_devices_needed(e, largest_mib, cap < EMPTY_FLEET_NODE_DEVICES ? cap : EMPTY_FLEET_NODE_DEVICES);
        if (n > 0) {
            out->fits = 1;
            out->gpus = n;
            out->min_gpu_mem_mib = sz_min_device_mib(e, n);
            return;
        }
    }
    /* Too big for one node of any pool, or for the cap: what the largest device would take. */
    if (max_gpus > 0) { /* the cap is why: say what would fit without it */
        struct sz_choice uncapped;
        sz_choose(&uncapped, e, pools, n_pools, 0);
        if (uncapped.fits) {
            out->capped = 1;
            out->gpus = uncapped.gpus;
            out->min_gpu_mem_mib = uncapped.min_gpu_mem_mib;
            return;
        }
    }
    out->gpus = sz_devices_needed(e, largest_mib, SZ_MAX_GANG);
    out->min_gpu_mem_mib = sz_min_device_mib(e, out->gpus > 0 ? out->gpus : SZ_MAX_GANG);
}
