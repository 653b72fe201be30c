/* model.c - the Llama-family decoder: parameters, LoRA, activations, forward, backward, AdamW.
 *
 * The model of model.h is three files around one private layout (model_internal.h): this one owns
 * the model and its math; model_io.c reads and writes its files (model_load calls it for the
 * weights and adapters), model_generate.c runs generation with a KV cache through the layer halves
 * defined here (model_attn_inputs, model_attn_outputs_and_mlp). All three do their math through
 * backend.h only.
 *
 * Layout (llm.c style). `params` is one allocation holding every base tensor in file order: the
 * embedding, then per layer input_layernorm, q|k|v projections (adjacent, so one matmul computes all
 * three: wqkv), their biases, q_norm, k_norm, o_proj, post_attention_layernorm, gate|up (adjacent:
 * wgu), down_proj; then the final norm and an untied lm_head. LoRA A/B matrices live in a second
 * allocation. The trainable buffer is one of the two; its gradients and AdamW moments mirror it, and
 * a table of named tensors (`struct tensor`) maps Hugging Face / PEFT names to pointers.
 *
 * Forward of one layer (x = resid[l], N tokens):
 *   ln1 = rmsnorm(x)                 qkv = ln1 @ wqkv^T (+ bias, + LoRA q/k/v)
 *   [qwen3: q,k = rmsnorm per head]  q,k = rope(q,k)
 *   att = causal attention per segment (log-sum-exp of the scores kept)
 *   mid = x + att @ wo^T (+ LoRA o)
 *   ln2 = rmsnorm(mid)               gu = ln2 @ wgu^T (+ LoRA gate/up)
 *   h = silu(gate) * up              resid[l+1] = mid + h @ wdown^T (+ LoRA down)
 * The backward pass walks it in reverse with one set of gradient buffers shared by all layers.
 * With `recompute`, one set of layer activations is shared too and refilled per layer from resid[l]. */
#include "model.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model_internal.h"
#include "model_plan.h"
#include "rng.h"

const char *const model_mod_names[N_MODS] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj"};
const char *const model_mod_parents[N_MODS] = {"self_attn", "self_attn", "self_attn", "self_attn", "mlp", "mlp", "mlp"};

unsigned lora_target_from_name(const char *name) {
    if (!strcmp(name, "all-linear")) return LORA_ALL;
    for (int i = 0; i < N_MODS; i++)
        if (!strcmp(name, model_mod_names[i])) return 1u << i;
    return 0;
}

const char *lora_target_name(unsigned t) {
    for (int i = 0; i < N_MODS; i++)
        if (t == 1u << i) return model_mod_names[i];
    return NULL;
}

struct model_opts model_opts_default(void) {
    return (struct model_opts){.train = 0, .lora_r = 16, .lora_alpha = 32, .lora_targets = LORA_ALL, .seed = 0};
}

const struct model_config *model_get_config(const struct model *m) { return &m->cfg; }
size_t model_num_params(const struct model *m) { return m->n_params; }
size_t model_num_trainable(const struct model *m) { return m->train ? m->n_train : 0; }
int model_is_lora(const struct model *m) { return m->lora_r > 0; }
int model_adam_step_count(const struct model *m) { return m->adam_t; }

/* ---------------------------------------------------------------- layout ---- */

static struct tensor *add_tensor(struct model *m, const char *name, int ndim, int64_t d0, int64_t d1, float **cursor) {
    m->tensors = xrealloc(m->tensors, sizeof *m->tensors * (size_t)(m->n_tensors + 1));
    struct tensor *t = &m->tensors[m->n_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 1;
    t->numel = (size_t)d0 * (size_t)t->shape[1];
    t->decay = ndim > 1;
    t->ptr = *cursor; /* offsets for now: pointers are fixed up after allocation */
    *cursor += t->numel;
    return t;
}

/* Lays out the base tensors (names, shapes, offsets from NULL) and returns the float count. */
static size_t layout_base(struct model *m) {
    float *cur = NULL;
    char name[128];
    int C = m->C, F = m->F, hd = m->hd;
    add_tensor(m, "model.embed_tokens.weight", 2, m->V, C, &cur);
    for (int l = 0; l < m->L; l++) {
#define T1(suffix, n) (snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix), add_tensor(m, name, 1, n, 1, &cur))
#define T2(suffix, r, c) (snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix), add_tensor(m, name, 2, r, c, &cur))
        T1("input_layernorm.weight", C);
        T2("self_attn.q_proj.weight", m->NH * hd, C);
        T2("self_attn.k_proj.weight", m->NKV * hd, C);
        T2("self_attn.v_proj.weight", m->NKV * hd, C);
        if (m->cfg.qkv_bias) {
            T1("self_attn.q_proj.bias", m->NH * hd);
            T1("self_attn.k_proj.bias", m->NKV * hd);
            T1("self_attn.v_proj.bias", m->NKV * hd);
        }
        if (m->cfg.qk_norm) {
            T1("self_attn.q_norm.weight", hd);
            T1("self_attn.k_norm.weight", hd);
        }
        T2("self_attn.o_proj.weight", C, m->NH * hd);
        T1("post_attention_layernorm.weight", C);
        T2("mlp.gate_proj.weight", F, C);
        T2("mlp.up_proj.weight", F, C);
        T2("mlp.down_proj.weight", C, F);
#undef T1
#undef T2
    }
    add_tensor(m, "model.norm.weight", 1, C, 1, &cur);
    if (!m->cfg.tie_word_embeddings) add_tensor(m, "lm_head.weight", 2, m->V, C, &cur);
    return (size_t)(cur - (float *)NULL);
}

void model_config_tensors(const struct model_config *cfg,
                          void (*fn)(void *ctx, const char *name, int ndim, const int64_t *shape), void *ctx) {
    struct model m = {.cfg = *cfg, .C = cfg->hidden_size, .F = cfg->intermediate_size, .NH = cfg->n_heads,
                      .NKV = cfg->n_kv_heads, .hd = cfg->head_dim, .L = cfg->n_layers, .V = cfg->vocab_size};
    layout_base(&m);
    for (int i = 0; i < m.n_tensors; i++) fn(ctx, m.tensors[i].name, m.tensors[i].ndim, m.tensors[i].shape);
    free(m.tensors);
}

void model_mod_dims(const struct model *m, int mod, int *in, int *out) {
    int q = m->NH * m->hd, kv = m->NKV * m->hd;
    switch (mod) {
    case MOD_Q: *in = m->C, *out = q; break;
    case MOD_K: case MOD_V: *in = m->C, *out = kv; break;
    case MOD_O: *in = q, *out = m->C; break;
    case MOD_GATE: case MOD_UP: *in = m->C, *out = m->F; break;
    default: *in = m->F, *out = m->C; break;
    }
}

static size_t layout_lora(struct model *m) {
    float *cur = NULL;
    char name[128];
    for (int l = 0; l < m->L; l++)
        for (int mod = 0; mod < N_MODS; mod++) {
            if (!(m->targets & (1u << mod))) continue;
            int in, out;
            model_mod_dims(m, mod, &in, &out);
            snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.%s.lora_A.weight", l,
                     model_mod_parents[mod], model_mod_names[mod]);
            add_tensor(m, name, 2, m->lora_r, in, &cur);
            snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.%s.lora_B.weight", l,
                     model_mod_parents[mod], model_mod_names[mod]);
            add_tensor(m, name, 2, out, m->lora_r, &cur);
        }
    return (size_t)(cur - (float *)NULL);
}

struct tensor *model_find_tensor(const struct model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}

/* Named pointers into the base buffer, by walking the tensor table in layout order. */
static void point_base(struct model *m) {
    struct tensor *t = m->tensors;
    m->embed = (t++)->ptr;
    m->layers = xcalloc((size_t)m->L, sizeof *m->layers);
    for (int l = 0; l < m->L; l++) {
        struct layer_params *p = &m->layers[l];
        p->ln1 = (t++)->ptr;
        p->wqkv = t->ptr;
        t += 3;
        if (m->cfg.qkv_bias) {
            p->bqkv = t->ptr;
            t += 3;
        }
        if (m->cfg.qk_norm) {
            p->q_norm = (t++)->ptr;
            p->k_norm = (t++)->ptr;
        }
        p->wo = (t++)->ptr;
        p->ln2 = (t++)->ptr;
        p->wgu = t->ptr;
        t += 2;
        p->wdown = (t++)->ptr;
    }
    m->norm = (t++)->ptr;
    m->lm_head = m->cfg.tie_word_embeddings ? m->embed : (t++)->ptr;
}

static void point_lora(struct model *m) {
    m->lmods = xcalloc((size_t)m->L, sizeof *m->lmods);
    struct tensor *t = m->tensors + m->n_base_tensors;
    for (int l = 0; l < m->L; l++)
        for (int mod = 0; mod < N_MODS; mod++) {
            if (!(m->targets & (1u << mod))) continue;
            m->lmods[l][mod].A = t[0].ptr;
            m->lmods[l][mod].dA = t[0].grad;
            m->lmods[l][mod].B = t[1].ptr;
            m->lmods[l][mod].dB = t[1].grad;
            t += 2;
        }
}

/* Turns offsets into pointers into `base`, and gradient pointers into `gbase` (or NULL). */
static void fix_pointers(struct tensor *t, int n, float *base, float *gbase) {
    for (int i = 0; i < n; i++) {
        size_t off = (size_t)(t[i].ptr - (float *)NULL);
        t[i].ptr = base + off;
        t[i].grad = gbase ? gbase + off : NULL;
    }
}

/* The optimizer's spans (a copy of spans[0..n)) and how many values they hold. */
static void set_spans(struct model *m, const struct model_span *spans, int n) {
    free(m->spans);
    m->spans = xmalloc(sizeof *spans * (size_t)n);
    memcpy(m->spans, spans, sizeof *spans * (size_t)n);
    m->n_spans = n;
    m->n_span_values = 0;
    for (int i = 0; i < n; i++) m->n_span_values += spans[i].hi - spans[i].lo;
}

/* ZeRO-3's units of the base buffer (for a full fine-tune the ranges model_grad_ranges reports) and this
 * rank's shard of each, which are a full fine-tune's optimizer spans too. */
static void shard_units(struct model *m, int shards, int shard) {
    int n = m->L + 2;
    m->units = xcalloc((size_t)n, sizeof *m->units);
    m->resident = xcalloc((size_t)n, 1);
    m->in_flight = xcalloc((size_t)n, sizeof *m->in_flight);
    struct model_span *own = m->unit_own = xcalloc((size_t)n, sizeof *own);
    m->units[0] = (struct model_span){0, (size_t)(m->layers[0].ln1 - m->params)};
    for (int l = 0; l < m->L; l++)
        m->units[1 + l] = (struct model_span){(size_t)(m->layers[l].ln1 - m->params),
                                              (size_t)((l + 1 < m->L ? m->layers[l + 1].ln1 : m->norm) - m->params)};
    m->units[n - 1] = (struct model_span){(size_t)(m->norm - m->params), m->n_params};
    for (int u = 0; u < n; u++) {
        int64_t lo, hi;
        mp_shard((int64_t)(m->units[u].hi - m->units[u].lo), shards, shard, &lo, &hi);
        own[u] = (struct model_span){m->units[u].lo + (size_t)lo, m->units[u].lo + (size_t)hi};
    }
    if (m->full_ft) set_spans(m, own, n);
}

/* Zeroes and releases the parts of unit u of buf (the parameters or the gradients) outside this rank's
 * shard of it. */
static void release_unsharded(struct model *m, float *buf, int u) {
    struct model_span unit = m->units[u], own = m->unit_own[u];
    m->be->release(m->be, buf + unit.lo, sizeof(float) * (own.lo - unit.lo));
    m->be->release(m->be, buf + own.hi, sizeof(float) * (unit.hi - own.hi));
}

/* ---------------------------------------------------------------- loading ---- */

static void init_lora(struct model *m, uint64_t seed) {
    struct rng r;
    rng_seed(&r, seed);
    for (int i = m->n_base_tensors; i < m->n_tensors; i++) {
        struct tensor *t = &m->tensors[i];
        if (strstr(t->name, "lora_B")) continue; /* B starts at zero (the buffer is zeroed) */
        /* PEFT: kaiming_uniform_(A, a=sqrt(5)) => U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
        float bound = 1.0f / sqrtf((float)t->shape[1]);
        float *host = xmalloc(sizeof(float) * t->numel);
        for (size_t j = 0; j < t->numel; j++) host[j] = rng_uniform_range(&r, -bound, bound);
        m->be->upload(m->be, t->ptr, host, sizeof(float) * t->numel);
        free(host);
    }
}

int model_load(struct model **out, const char *dir, const struct model_opts *opts, struct whet_err *err) {
    *out = NULL;
    struct model *m = xcalloc(1, sizeof *m);
    m->dir = xstrdup(dir);
    if (backend_open(&m->be, opts->device, err)) goto fail;
    char *cfg_path = xasprintf("%s/config.json", dir);
    int rc = model_config_load(&m->cfg, cfg_path, err);
    free(cfg_path);
    if (rc) goto fail;
    const struct model_config *c = &m->cfg;
    m->C = c->hidden_size, m->F = c->intermediate_size, m->NH = c->n_heads, m->NKV = c->n_kv_heads;
    m->hd = c->head_dim, m->L = c->n_layers, m->V = c->vocab_size;
    m->QKV = (m->NH + 2 * m->NKV) * m->hd;
    m->QK = (m->NH + m->NKV) * m->hd;
    m->train = opts->train;
    m->logit_temperature = m->loss_inv_t = 1.0f;
    m->recompute = opts->recompute || !opts->train;
    /* The plan's chunk of logits (256 MB in f32) at a time unless told otherwise. */
    m->logit_rows = opts->logit_rows > 0 ? opts->logit_rows : (int)(MP_LOGIT_CHUNK_VALUES / m->V);
    if (m->logit_rows < 1) m->logit_rows = 1;
    if (opts->adapter_dir) {
        if (model_io_read_adapter_config(m, opts->adapter_dir, err)) goto fail;
    } else if (opts->train && opts->lora_r > 0 && !opts->frozen_base) {
        if (!opts->lora_targets || opts->lora_targets & ~(unsigned)LORA_ALL || opts->lora_alpha <= 0) {
            whet_errf(err, "lora: expected target modules and a positive alpha");
            goto fail;
        }
        m->lora_r = opts->lora_r, m->lora_alpha = opts->lora_alpha, m->rslora = opts->use_rslora;
        m->targets = opts->lora_targets;
    }
    m->frozen_base = m->train && opts->frozen_base && !m->lora_r;
    m->full_ft = m->train && !m->lora_r && !m->frozen_base;
    if (m->lora_r) m->lora_scale = m->rslora ? m->lora_alpha / sqrtf((float)m->lora_r) : m->lora_alpha / (float)m->lora_r;

    /* The buffers are sized by the memory plan the scheduler sizes jobs with; the tensor layout
     * must agree with it, or the estimates would drift from what is allocated. */
    struct mp_plan plan;
    struct mp_shape shape = {c->hidden_size, c->intermediate_size, c->n_layers, c->n_heads, c->n_kv_heads,
                             c->head_dim, c->vocab_size, c->tie_word_embeddings, c->qkv_bias, c->qk_norm};
    struct mp_job job = {.train = m->train, .lora_r = m->lora_r, .lora_targets = m->targets,
                         .recompute = m->recompute, .logit_rows = m->logit_rows, .dtype = MP_F32,
                         .optimizer_shards = opts->optimizer_shards, .optimizer_shard = opts->optimizer_shard,
                         .shard_params = opts->shard_params};
    mp_plan(&plan, &shape, &job);
    m->n_params = layout_base(m);
    m->n_base_tensors = m->n_tensors;
    if (m->lora_r) m->n_lora = layout_lora(m);
    if (m->n_params != (size_t)plan.n_params || m->n_lora != (size_t)plan.n_lora) {
        whet_errf(err, "internal error: the tensor layout has %zu base and %zu LoRA values, the memory plan %lld and "
                       "%lld; update executor/train/plan/model_plan.c with the layout",
                  m->n_params, m->n_lora, (long long)plan.n_params, (long long)plan.n_lora);
        goto fail;
    }
    m->sharded = !m->frozen_base && opts->shard_params && opts->optimizer_shards > 1;
    if (opts->shard_params && !m->sharded) {
        whet_errf(err, "internal error: parameter sharding (ZeRO-3) is for a model over more than one rank, not the "
                       "frozen base of co-trained adapters");
        goto fail;
    }
    struct backend *be = m->be;
    /* Sharded, the plan counts what stays resident; the buffers keep the whole layout (the backend's
     * release gives back what a rank does not hold), so every pointer into them stays valid. */
    size_t weight_bytes = m->sharded ? sizeof(float) * m->n_params : (size_t)plan.weights;
    int fits = (m->params = be->alloc(be, weight_bytes, err)) &&
               (m->scalars = be->alloc(be, (size_t)plan.scalars, err)) &&
               (!m->lora_r || (m->lora = be->alloc(be, (size_t)plan.lora, err)));
    if (fits && m->train && !m->frozen_base) {
        m->tp = m->full_ft ? m->params : m->lora;
        m->n_train = (size_t)plan.n_trainable;
        int64_t lo = 0, hi = plan.n_trainable;
        if (job.optimizer_shards > 1) mp_shard(plan.n_trainable, job.optimizer_shards, job.optimizer_shard, &lo, &hi);
        set_spans(m, &(struct model_span){(size_t)lo, (size_t)hi}, 1);
        fits = (m->grads = be->alloc(be, m->sharded && m->full_ft ? sizeof(float) * m->n_train : (size_t)plan.gradients,
                                     err)) &&
               (m->adam_m = be->alloc(be, (size_t)plan.moments / 2, err)) &&
               (m->adam_v = be->alloc(be, (size_t)plan.moments / 2, err));
    }
    if (!fits) {
        whet_err_hint(err, "the %s %s needs %.2f GiB on %s before any activation: fine-tune it with LoRA, pick a smaller "
                           "model, or a device with more memory",
                      m->full_ft ? "full fine-tune of" : "model", dir,
                      (double)(plan.weights + plan.lora + plan.gradients + plan.moments) / (1 << 30), be->name);
        goto fail;
    }
    fix_pointers(m->tensors, m->n_base_tensors, m->params, m->full_ft ? m->grads : NULL);
    fix_pointers(m->tensors + m->n_base_tensors, m->n_tensors - m->n_base_tensors, m->lora,
                 m->train && m->lora_r ? m->grads : NULL);
    point_base(m);
    if (m->lora_r) point_lora(m);
    if (m->sharded) shard_units(m, opts->optimizer_shards, opts->optimizer_shard);
    if (m->sharded && m->n_span_values * 2 * sizeof(float) != (size_t)plan.moments) {
        whet_errf(err, "internal error: ZeRO-3's shards hold %zu values, the memory plan's moments %lld bytes; update "
                       "executor/train/plan/model_plan.c with the units", m->n_span_values, (long long)plan.moments);
        goto fail;
    }

    if (model_io_read_base(m, dir, err)) goto fail;
    /* Read whole (every rank reads the files), then each keeps its shards. */
    for (int u = 0; m->sharded && u < m->L + 2; u++) {
        release_unsharded(m, m->params, u);
        if (m->full_ft) release_unsharded(m, m->grads, u);
    }
    if (m->lora_r) {
        if (opts->adapter_dir) {
            if (model_io_read_lora(m, opts->adapter_dir, err)) goto fail;
        } else {
            init_lora(m, opts->seed);
        }
    }
    long long tokens = (long long)opts->max_batch_rows * opts->max_seq_len;
    if (tokens > INT_MAX) {
        whet_errf(err, "%lld tokens a batch (max_batch_rows %d × max_seq_len %d) are more than the engine counts "
                       "(%d)", tokens, opts->max_batch_rows, opts->max_seq_len, INT_MAX);
        goto fail;
    }
    if (tokens > 0 && model_ensure_acts(m, (int)tokens, err)) goto fail;
    *out = m;
    return 0;
fail:
    model_free(m);
    return -1;
}

/* Copies the base's shape into a model that borrows its weights. */
static void take_shape(struct model *m, const struct model *base) {
    m->cfg = base->cfg;
    m->C = base->C, m->F = base->F, m->NH = base->NH, m->NKV = base->NKV, m->hd = base->hd, m->L = base->L;
    m->V = base->V, m->QKV = base->QKV, m->QK = base->QK;
    m->logit_rows = base->logit_rows;
    m->logit_temperature = m->loss_inv_t = 1.0f;
    m->recompute = 1;
}

/* The LoRA settings of a new view: the adapter dir's, or opts' for a fresh adapter. */
static int view_settings(struct model *m, const struct model_opts *o, struct whet_err *err) {
    if (o->adapter_dir) return model_io_read_adapter_config(m, o->adapter_dir, err);
    if (o->lora_r < 1 || !o->lora_targets || o->lora_targets & ~(unsigned)LORA_ALL || o->lora_alpha <= 0)
        return whet_errf(err, "lora: expected a rank, target modules and a positive alpha");
    m->lora_r = o->lora_r, m->lora_alpha = o->lora_alpha, m->rslora = o->use_rslora, m->targets = o->lora_targets;
    return 0;
}

int model_load_adapter_view(struct model **out, struct model *base, const struct model_opts *o, struct whet_err *err) {
    *out = NULL;
    if (base->view_of || base->lora_r || (base->train && !base->frozen_base))
        return whet_errf(err, "adapter views need a base without an adapter, loaded for inference or as a frozen base");
    struct model *m = xcalloc(1, sizeof *m);
    m->be = base->be;
    m->view_of = base;
    m->dir = xstrdup(base->dir);
    m->train = o->train;
    take_shape(m, base);
    if (view_settings(m, o, err)) goto fail;
    m->lora_scale = m->rslora ? m->lora_alpha / sqrtf((float)m->lora_r) : m->lora_alpha / (float)m->lora_r;
    m->n_params = layout_base(m);
    m->n_base_tensors = m->n_tensors;
    m->n_lora = layout_lora(m);
    size_t bytes = sizeof(float) * m->n_lora;
    if (!(m->lora = m->be->alloc(m->be, bytes, err)) || !(m->scalars = m->be->alloc(m->be, MP_SCALAR_BYTES, err)))
        goto fail;
    if (m->train) { /* its own gradients and AdamW moments: a co-trained adapter steps on its own */
        m->tp = m->lora, m->n_train = m->n_lora;
        set_spans(m, &(struct model_span){0, m->n_lora}, 1);
        if (!(m->grads = m->be->alloc(m->be, bytes, err)) || !(m->adam_m = m->be->alloc(m->be, bytes, err)) ||
            !(m->adam_v = m->be->alloc(m->be, bytes, err)))
            goto fail;
    }
    m->params = base->params;
    fix_pointers(m->tensors, m->n_base_tensors, m->params, NULL);
    fix_pointers(m->tensors + m->n_base_tensors, m->n_tensors - m->n_base_tensors, m->lora, m->grads);
    point_base(m);
    point_lora(m);
    if (o->adapter_dir ? model_io_read_lora(m, o->adapter_dir, err) : (init_lora(m, o->seed), 0)) goto fail;
    *out = m;
    return 0;
fail:
    whet_err_prefix(err, "adapter %s", o->adapter_dir ? o->adapter_dir : "(new)");
    model_free(m);
    return -1;
}

int model_set_lora_runs(struct model *m, const struct lora_run *runs, int n_runs, struct whet_err *err) {
    if (n_runs > 0 && (m->lora_r || m->view_of))
        return whet_errf(err, "lora runs: the model has an adapter of its own; runs need a plain base");
    int max_r = 0;
    for (int i = 0; i < n_runs; i++) {
        if (runs[i].n_tokens < 0) return whet_errf(err, "lora runs: run %d has %d tokens", i, runs[i].n_tokens);
        if (runs[i].adapter && runs[i].adapter->view_of != m)
            return whet_errf(err, "lora runs: run %d's adapter is not a view of this model", i);
        if (runs[i].adapter && runs[i].adapter->lora_r > max_r) max_r = runs[i].adapter->lora_r;
    }
    m->n_runs = n_runs > 0 ? n_runs : 0;
    m->runs = xrealloc(m->runs, sizeof *runs * (size_t)(m->n_runs ? m->n_runs : 1));
    if (m->n_runs) memcpy(m->runs, runs, sizeof *runs * (size_t)m->n_runs);
    m->runs_max_r = max_r;
    return 0;
}

/* The rank the runs' x·Aᵀ blocks are laid out for: the largest of theirs. */
static int runs_rank(const struct model *m) { return m->runs_max_r > 0 ? m->runs_max_r : 1; }

/* Where the runs' x·Aᵀ of module `mod` of layer l lies from token `row` on (a run's [len, r] at row·runs_rank,
 * so the runs' rows never overlap): layer l's own block in a model that trains, the one block otherwise. */
static float *runs_xa(const struct model *m, int l, int mod, int row) {
    size_t block = m->train ? (size_t)l * N_MODS + (size_t)mod : 0;
    return m->run_xa + (block * (size_t)m->runs_N + (size_t)row) * (size_t)runs_rank(m);
}

int model_prepare_runs(struct model *m, int N, struct whet_err *err) {
    if (!m->n_runs) return 0;
    long long covered = 0;
    for (int i = 0; i < m->n_runs; i++) covered += m->runs[i].n_tokens;
    if (covered != N) return whet_errf(err, "lora runs cover %lld tokens, the pass has %d", covered, N);
    /* The runs' x·Aᵀ, [N, r] a module (runs_xa), then the scratch of its gradient: in a model that trains, a
     * block for each module of each layer, kept from the forward for the backward (recomputed there, it was a
     * fifth of the runs' LoRA products); else one, reused. */
    size_t blocks = m->train ? (size_t)m->L * N_MODS + 1 : 2, block = (size_t)N * (size_t)runs_rank(m);
    m->runs_N = N;
    if (blocks * block > m->run_xa_cap) {
        m->be->free(m->be, m->run_xa);
        m->run_xa_cap = 0;
        if (!(m->run_xa = m->be->alloc(m->be, sizeof(float) * blocks * block, err))) return -1;
        m->run_xa_cap = blocks * block;
    }
    m->run_dxa = m->run_xa + (blocks - 1) * block;
    return 0;
}

static void free_acts(struct model *m) {
    for (int i = 0; i < m->n_allocs; i++) m->be->free(m->be, m->allocs[i]);
    free(m->allocs);
    free(m->acts);
    free(m->h_rows);
    free(m->h_losses);
    m->allocs = NULL, m->acts = NULL, m->h_rows = NULL, m->h_losses = NULL;
    m->n_allocs = 0;
    m->cap_N = 0;
}

void model_free(struct model *m) {
    if (!m) return;
    if (m->be) {
        free_acts(m);
        void *bufs[] = {m->view_of ? NULL : m->params, m->lora, m->grads, m->adam_m, m->adam_v, m->cos_sin, m->scalars,
                        m->gen, m->run_xa};
        for (size_t i = 0; i < WHET_ARRAY_LEN(bufs); i++) m->be->free(m->be, bufs[i]);
        if (!m->view_of) m->be->close(m->be);
    }
    free(m->runs);
    free(m->spans);
    free(m->units);
    free(m->unit_own);
    free(m->resident);
    free(m->in_flight);
    free(m->layers);
    free(m->lmods);
    free(m->tensors);
    free(m->segs);
    free(m->dir);
    free(m);
}

/* ---------------------------------------------------------------- activations ---- */

/* An activation buffer, or NULL once one has failed (*failed is set and err says why): the list below
 * is allocated in one go and checked at its end. */
static void *abuf(struct model *m, size_t bytes, int *failed, struct whet_err *err) {
    if (*failed) return NULL;
    void *p = m->be->alloc(m->be, bytes, err);
    if (!p) {
        *failed = 1;
        return NULL;
    }
    m->allocs = xrealloc(m->allocs, sizeof *m->allocs * (size_t)(m->n_allocs + 1));
    return m->allocs[m->n_allocs++] = p;
}
/* All N×V logits of a forward without targets (model_get_logits, sampling without a KV cache). */
static float *abuf_logits(struct model *m, struct whet_err *err) {
    int failed = 0;
    return abuf(m, sizeof(float) * (size_t)m->cap_N * m->V, &failed, err);
}
#define AF(n) ((float *)abuf(m, sizeof(float) * (size_t)(n), &failed, err))
#define AI(n) ((int *)abuf(m, sizeof(int) * (size_t)(n), &failed, err))

/* The buffers of N tokens. executor/train/plan/model_plan.c counts the same list (the scheduler
 * sizes jobs by it): change both together; unit_model_plan compares them byte for byte. */
int model_ensure_acts(struct model *m, int N, struct whet_err *err) {
    if (N <= m->cap_N) return 0;
    free_acts(m);
    int failed = 0;
    m->cap_N = N;
    int C = m->C, nsets = m->recompute ? 1 : m->L;
    m->acts = xcalloc((size_t)nsets, sizeof *m->acts);
    for (int s = 0; s < nsets; s++) {
        struct layer_acts *a = &m->acts[s];
        a->ln1 = AF((size_t)N * C), a->rstd1 = AF(N), a->qkv = AF((size_t)N * m->QKV);
        if (m->cfg.qk_norm) {
            a->q_rstd = AF((size_t)N * m->NH), a->k_rstd = AF((size_t)N * m->NKV), a->qkr = AF((size_t)N * m->QK);
        }
        a->lse = AF((size_t)m->NH * N), a->att = AF((size_t)N * m->NH * m->hd), a->mid = AF((size_t)N * C);
        a->ln2 = AF((size_t)N * C), a->rstd2 = AF(N), a->gu = AF((size_t)N * 2 * m->F), a->h = AF((size_t)N * m->F);
        for (int mod = 0; mod < N_MODS; mod++)
            if (m->targets & (1u << mod)) a->xa[mod] = AF((size_t)N * m->lora_r);
    }
    m->resid = AF((size_t)(m->L + 1) * N * C);
    m->lnf = AF((size_t)N * C), m->rstdf = AF(N), m->lnf_c = AF((size_t)N * C);
    m->logits = AF((size_t)(N < m->logit_rows ? N : m->logit_rows) * m->V);
    m->all_logits = NULL;
    m->lse = AF(N), m->losses = AF(N), m->weights_c = AF(N);
    m->correct = AI(N), m->rows = AI(N), m->targets_c = AI(N), m->ids = AI(N), m->pos = AI(N);
    m->d_segs = (struct attn_segment *)AI(2 * (size_t)N);
    if (m->train) {
        m->dresid = AF((size_t)N * C), m->dln = AF((size_t)N * C), m->dqkv = AF((size_t)N * m->QKV);
        m->dqkr = m->cfg.qk_norm ? AF((size_t)N * m->QK) : NULL;
        m->datt = AF((size_t)N * m->NH * m->hd), m->dgu = AF((size_t)N * 2 * m->F), m->dh = AF((size_t)N * m->F);
        m->dxa = m->lora_r ? AF((size_t)N * m->lora_r) : NULL;
        m->dlnf_c = AF((size_t)N * C);
    }
    if (failed) {
        free_acts(m);
        return whet_err_hint(err, "%d tokens a micro-batch do not fit beside the model: lower batch_size or max_seq_len "
                                  "(or raise gradient_accumulation_steps)", N);
    }
    m->h_rows = xmalloc(sizeof(int) * (size_t)N), m->h_losses = xmalloc(sizeof(float) * (size_t)N);
    return 0;
}

/* cos/sin of every position up to `need` (exclusive), Hugging Face's inv_freq computed in float. */
int model_ensure_rope(struct model *m, int need, struct whet_err *err) {
    if (need <= m->rope_cap) return 0;
    int cap = m->rope_cap ? m->rope_cap : MP_ROPE_MIN_POSITIONS;
    while (cap < need) cap *= 2;
    int hd = m->hd, half = hd / 2;
    const struct model_config *c = &m->cfg;
    float *inv = xmalloc(sizeof(float) * (size_t)half), *host = xmalloc(sizeof(float) * (size_t)cap * hd);
    for (int i = 0; i < half; i++) {
        float f = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)hd);
        if (c->rope_scaling == 1) f /= c->rope_factor;
        if (c->rope_scaling == 2) { /* Llama 3.1 frequency-dependent scaling */
            float low_wl = (float)c->rope_original_max_pos / c->rope_low_freq_factor;
            float high_wl = (float)c->rope_original_max_pos / c->rope_high_freq_factor;
            float wl = 2.0f * (float)M_PI / f;
            if (wl > low_wl) {
                f /= c->rope_factor;
            } else if (wl >= high_wl) {
                float smooth = ((float)c->rope_original_max_pos / wl - c->rope_low_freq_factor) /
                               (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (1 - smooth) * f / c->rope_factor + smooth * f;
            }
        }
        inv[i] = f;
    }
    for (int p = 0; p < cap; p++)
        for (int i = 0; i < half; i++) {
            float angle = (float)p * inv[i];
            host[(size_t)p * hd + i] = (float)cos((double)angle);
            host[(size_t)p * hd + half + i] = (float)sin((double)angle);
        }
    m->be->free(m->be, m->cos_sin);
    m->rope_cap = 0;
    m->cos_sin = m->be->alloc(m->be, sizeof(float) * (size_t)cap * hd, err);
    if (m->cos_sin) {
        m->be->upload(m->be, m->cos_sin, host, sizeof(float) * (size_t)cap * hd);
        m->rope_cap = cap;
    }
    free(inv);
    free(host);
    return m->cos_sin ? 0 : -1;
}

/* ---------------------------------------------------------------- linear + LoRA ---- */

/* out[N, outd] += s * (x @ A^T) @ B^T for adapter `a` (r, s, A, B of its module), keeping xa = x @ A^T. */
static void lora_term(struct backend *be, const struct model *a, const struct lora_mod *lm, float *xa, float *out,
                      int ldo, const float *x, int ldx, int N, int in, int outd) {
    int r = a->lora_r;
    be->matmul_forward(be, xa, r, x, ldx, lm->A, NULL, N, in, r, 0.0f);
    be->gemm(be, 0, 1, N, outd, r, a->lora_scale, xa, r, lm->B, r, 1.0f, out, ldo);
}

/* The LoRA terms of module `mod` of layer l (input x[N, in], output columns out[N, outd]): the
 * model's own adapter (xa kept for the backward pass), or, while serving runs are set
 * (model_set_lora_runs), each run's adapter on the run's rows. */
static void add_lora(struct model *m, int l, int mod, float *xa, float *out, int ldo, const float *x, int ldx, int N,
                     int in, int outd) {
    if (!m->n_runs) {
        if (m->targets & (1u << mod) && !m->adapter_off)
            lora_term(m->be, m, &m->lmods[l][mod], xa, out, ldo, x, ldx, N, in, outd);
        return;
    }
    for (int i = 0, row = 0; i < m->n_runs && row < N; row += m->runs[i++].n_tokens) {
        const struct model *a = m->runs[i].adapter;
        int len = m->runs[i].n_tokens < N - row ? m->runs[i].n_tokens : N - row;
        if (a && a->targets & (1u << mod))
            lora_term(m->be, a, &a->lmods[l][mod], runs_xa(m, l, mod, row), out + (size_t)row * ldo, ldo,
                      x + (size_t)row * ldx, ldx, len, in, outd);
    }
}

/* Gradients of adapter a's LoRA term on N rows: dB += s dout^T @ xa, dA += dxa^T @ x and
 * dx += dxa @ A with dxa = s dout @ B (scratch; dx may be NULL). Without gradients of its own (a view
 * loaded for inference) only dx. */
static void lora_term_backward(struct backend *be, const struct model *a, const struct lora_mod *lm, const float *xa,
                               float *dxa, float *dx, int lddx, const float *dout, int lddo, const float *x, int ldx,
                               int N, int in, int outd) {
    int r = a->lora_r;
    if (lm->dB) be->gemm(be, 1, 0, outd, r, N, a->lora_scale, dout, lddo, xa, r, 1.0f, lm->dB, r);
    be->gemm(be, 0, 0, N, r, outd, a->lora_scale, dout, lddo, lm->B, r, 0.0f, dxa, r);
    if (lm->dA) be->gemm(be, 1, 0, r, in, N, 1.0f, dxa, r, x, ldx, 1.0f, lm->dA, in);
    if (dx) be->gemm(be, 0, 0, N, in, r, 1.0f, dxa, r, lm->A, in, 1.0f, dx, lddx);
}

/* The backward of add_lora for module `mod` of layer l: the model's own adapter, or each run's adapter on its
 * rows (xa kept from the forward either way). */
static void add_lora_backward(struct model *m, int l, int mod, const float *xa, float *dx, int lddx,
                              const float *dout, int lddo, const float *x, int ldx, int N, int in, int outd) {
    if (!m->n_runs) {
        if (m->targets & (1u << mod))
            lora_term_backward(m->be, m, &m->lmods[l][mod], xa, m->dxa, dx, lddx, dout, lddo, x, ldx, N, in, outd);
        return;
    }
    for (int i = 0, row = 0; i < m->n_runs && row < N; row += m->runs[i++].n_tokens) {
        const struct model *a = m->runs[i].adapter;
        int len = m->runs[i].n_tokens < N - row ? m->runs[i].n_tokens : N - row;
        if (!a || !(a->targets & (1u << mod))) continue;
        lora_term_backward(m->be, a, &a->lmods[l][mod], runs_xa(m, l, mod, row), m->run_dxa,
                           dx ? dx + (size_t)row * lddx : NULL, lddx, dout + (size_t)row * lddo, lddo,
                           x + (size_t)row * ldx, ldx, len, in, outd);
    }
}

static float *pgrad(const struct model *m, const float *p) {
    return m->full_ft && p ? m->grads + (p - m->params) : NULL;
}

/* ---------------------------------------------------------------- ZeRO-3's units ---- */

/* Starts unit u's all-gather (a no-op unless sharded, when it is resident or already in flight, or
 * after a collective failed). */
static void unit_prefetch(struct model *m, int u) {
    if (!m->sharded || u < 0 || m->resident[u] || m->in_flight[u] || m->shard_failed) return;
    if (!m->shard_ops.gather_start) {
        whet_errf(&m->shard_err, "internal error: sharded parameters without model_set_shard_ops");
        m->shard_failed = 1;
        return;
    }
    struct model_span unit = m->units[u];
    m->in_flight[u] = m->shard_ops.gather_start(m->shard_ops.ctx, m->params + unit.lo, unit.hi - unit.lo);
}

/* Unit u gathered (a no-op unless sharded, or when it is already). A started all-gather is always waited
 * for, failed or not, so none outlives its pass. */
static int unit_gather(struct model *m, int u) {
    if (!m->sharded || m->resident[u]) return 0;
    unit_prefetch(m, u);
    if (!m->in_flight[u]) return -1; /* (a collective failed before) */
    int rc = m->shard_ops.gather_wait(m->shard_ops.ctx, m->in_flight[u], m->shard_failed ? &(struct whet_err){0} : &m->shard_err);
    m->in_flight[u] = NULL;
    if (rc || m->shard_failed) {
        m->shard_failed = 1;
        return -1;
    }
    m->resident[u] = 1;
    return 0;
}

/* Unit u gathered for use, and the all-gather of `next`, the unit the pass uses after it (-1: none),
 * started to run while u computes. */
static void unit_use(struct model *m, int u, int next) {
    unit_gather(m, u);
    unit_prefetch(m, next);
}

static void unit_release(struct model *m, int u) {
    if (!m->sharded || !m->resident[u] || m->all_resident) return;
    release_unsharded(m, m->params, u);
    m->resident[u] = 0;
}

/* The embedding is a unit of its own; the head's is the final norm and an untied lm_head (a tied one is
 * the embedding, gathered with it). */
static int head_unit(const struct model *m) { return m->L + 1; }

/* The head gathered for use (and, tied, the embedding), then `next` started as unit_use does. */
static void head_use(struct model *m, int next) {
    unit_gather(m, head_unit(m));
    if (m->cfg.tie_word_embeddings) unit_gather(m, 0);
    unit_prefetch(m, next);
}

/* The units of the passes in order: forward the embedding, each layer, the head (unit u's successor u + 1);
 * backward the head, each layer from the last, and not the embedding (layer l's successor is unit l, layer
 * l - 1's, none after layer 0). Real and idle passes walk them alike. */
static int forward_next(const struct model *m, int u) { return u < head_unit(m) ? u + 1 : -1; }
static int backward_next(int l) { return l > 0 ? l : -1; }

static void head_release(struct model *m) {
    unit_release(m, head_unit(m));
    if (m->cfg.tie_word_embeddings) unit_release(m, 0);
}

/* A failed collective of the pass as its error (the pass went on with what it had, and its results are
 * void). */
static int shard_result(const struct model *m, struct whet_err *err) {
    if (!m->shard_failed) return 0;
    *err = m->shard_err;
    return -1;
}

/* ---------------------------------------------------------------- forward ---- */

/* Everything of layer l up to the attention inputs: ln1, qkv (+LoRA), q/k norm, rope. */
void model_attn_inputs(struct model *m, int l, struct layer_acts *a, const float *x, int N, const int *pos) {
    struct backend *be = m->be;
    const struct layer_params *p = &m->layers[l];
    int C = m->C, hd = m->hd, q = m->NH * hd, kv = m->NKV * hd;
    be->rmsnorm_forward(be, a->ln1, C, a->rstd1, x, C, p->ln1, N, 1, C, m->cfg.rms_norm_eps);
    be->matmul_forward(be, a->qkv, m->QKV, a->ln1, C, p->wqkv, p->bqkv, N, C, m->QKV, 0.0f);
    for (int i = 0; i < 3; i++) { /* q, k, v: column slices of qkv */
        int off = i == 0 ? 0 : i == 1 ? q : q + kv, outd = i == 0 ? q : kv;
        add_lora(m, l, MOD_Q + i, a->xa[MOD_Q + i], a->qkv + off, m->QKV, a->ln1, C, N, C, outd);
    }
    if (m->cfg.qk_norm) {
        be->rmsnorm_forward(be, a->qkr, m->QK, a->q_rstd, a->qkv, m->QKV, p->q_norm, N, m->NH, hd, m->cfg.rms_norm_eps);
        be->rmsnorm_forward(be, a->qkr + q, m->QK, a->k_rstd, a->qkv + q, m->QKV, p->k_norm, N, m->NKV, hd,
                            m->cfg.rms_norm_eps);
        be->rope_forward(be, a->qkr, m->QK, pos, m->cos_sin, N, m->NH + m->NKV, hd);
    } else {
        be->rope_forward(be, a->qkv, m->QKV, pos, m->cos_sin, N, m->NH + m->NKV, hd);
    }
}

/* Where q, k (post-rope) and v live for layer activations a. */
void model_qkv_views(const struct model *m, const struct layer_acts *a, const float **q, int *ldq, const float **k,
                      int *ldk, const float **v) {
    int qd = m->NH * m->hd;
    if (m->cfg.qk_norm) {
        *q = a->qkr, *k = a->qkr + qd, *ldq = *ldk = m->QK;
    } else {
        *q = a->qkv, *k = a->qkv + qd, *ldq = *ldk = m->QKV;
    }
    *v = a->qkv + qd + m->NKV * m->hd;
}

/* From the attention output to the layer output: mid = x + o(att); out = mid + mlp(mid). */
void model_attn_outputs_and_mlp(struct model *m, int l, struct layer_acts *a, const float *x, float *out, int N) {
    struct backend *be = m->be;
    const struct layer_params *p = &m->layers[l];
    int C = m->C, F = m->F, qd = m->NH * m->hd;
    be->copy(be, a->mid, x, sizeof(float) * (size_t)N * C);
    be->matmul_forward(be, a->mid, C, a->att, qd, p->wo, NULL, N, qd, C, 1.0f);
    add_lora(m, l, MOD_O, a->xa[MOD_O], a->mid, C, a->att, qd, N, qd, C);
    be->rmsnorm_forward(be, a->ln2, C, a->rstd2, a->mid, C, p->ln2, N, 1, C, m->cfg.rms_norm_eps);
    be->matmul_forward(be, a->gu, 2 * F, a->ln2, C, p->wgu, NULL, N, C, 2 * F, 0.0f);
    add_lora(m, l, MOD_GATE, a->xa[MOD_GATE], a->gu, 2 * F, a->ln2, C, N, C, F);
    add_lora(m, l, MOD_UP, a->xa[MOD_UP], a->gu + F, 2 * F, a->ln2, C, N, C, F);
    be->swiglu_forward(be, a->h, a->gu, N, F);
    be->copy(be, out, a->mid, sizeof(float) * (size_t)N * C);
    be->matmul_forward(be, out, C, a->h, F, p->wdown, NULL, N, F, C, 1.0f);
    add_lora(m, l, MOD_DOWN, a->xa[MOD_DOWN], out, C, a->h, F, N, F, C);
}

static void layer_forward(struct model *m, int l, struct layer_acts *a, int N) {
    const float *x = m->resid + (size_t)l * N * m->C;
    model_attn_inputs(m, l, a, x, N, m->pos);
    const float *q, *k, *v;
    int ldq, ldk;
    model_qkv_views(m, a, &q, &ldq, &k, &ldk, &v);
    m->be->attention_forward(m->be, a->att, a->lse, q, ldq, k, ldk, v, m->QKV, m->d_segs, m->segs, m->n_segs, N,
                             m->longest, m->NH, m->NKV, m->hd);
    model_attn_outputs_and_mlp(m, l, a, x, m->resid + (size_t)(l + 1) * N * m->C, N);
}

static struct layer_acts *acts_of(struct model *m, int l) { return &m->acts[m->recompute ? 0 : l]; }

/* Checks the batch and sets up segments, positions and (host) targets. */
static int prepare_batch(struct model *m, const struct model_batch *b, struct whet_err *err) {
    int N = b->B * b->T, V = m->V;
    if (b->B < 1 || b->T < 1 || !b->ids) return whet_errf(err, "batch: expected B >= 1, T >= 1 and ids");
    int *pos = xmalloc(sizeof(int) * (size_t)N);
    free(m->segs);
    m->segs = xmalloc(sizeof *m->segs * (size_t)N);
    m->n_segs = 0;
    int longest = 0, max_pos = 0, rc = 0;
    for (int t = 0; t < N && !rc; t++) {
        int row_start = t % b->T == 0;
        if (row_start || (b->seq_ids && b->seq_ids[t] != b->seq_ids[t - 1])) m->segs[m->n_segs++] = (struct attn_segment){t, 0};
        struct attn_segment *s = &m->segs[m->n_segs - 1];
        pos[t] = b->positions ? b->positions[t] : s->len;
        s->len++;
        longest = s->len > longest ? s->len : longest;
        if (b->ids[t] < 0 || b->ids[t] >= V) rc = whet_errf(err, "batch: token %d: id %d is outside the vocabulary (%d)", t, b->ids[t], V);
        else if (pos[t] < 0 || pos[t] >= m->cfg.max_position_embeddings)
            rc = whet_errf(err, "batch: token %d: position %d is outside [0, max_position_embeddings %d)", t, pos[t],
                           m->cfg.max_position_embeddings);
        else if (b->targets && (b->targets[t] < -1 || b->targets[t] >= V))
            rc = whet_errf(err, "batch: token %d: target %d is outside the vocabulary", t, b->targets[t]);
        max_pos = pos[t] > max_pos ? pos[t] : max_pos;
    }
    if (!rc && m->cfg.sliding_window && longest > m->cfg.sliding_window)
        rc = whet_errf(err, "batch: a sequence of %d tokens is longer than the model's sliding window (%d), which "
                            "this engine does not implement", longest, m->cfg.sliding_window);
    if (!rc && !(rc = model_ensure_acts(m, N, err)) && !(rc = model_ensure_rope(m, max_pos + 1, err)))
        rc = model_prepare_runs(m, N, err);
    if (!rc) {
        m->longest = longest;
        m->be->upload(m->be, m->ids, b->ids, sizeof(int) * (size_t)N);
        m->be->upload(m->be, m->pos, pos, sizeof(int) * (size_t)N);
        m->be->upload(m->be, m->d_segs, m->segs, sizeof *m->segs * (size_t)m->n_segs);
        m->N = N;
    }
    free(pos);
    return rc;
}

/* Downloads 4 statistics doubles from the device scalars at `at` (the one wait of a step). */
static struct model_stats stats_at(const struct model *m, int at) {
    double s[4];
    m->be->download(m->be, s, m->scalars + at, sizeof s);
    return (struct model_stats){.loss_sum = s[0], .weight_sum = s[1], .n_correct = (int)s[2], .n_targets = (int)s[3]};
}

int model_forward(struct model *m, const struct model_batch *b, float *loss, struct whet_err *err) {
    struct backend *be = m->be;
    if (loss) *loss = 0;
    m->backward_ready = 0;
    if (prepare_batch(m, b, err)) return -1;
    int N = m->N, C = m->C, V = m->V;
    unit_use(m, 0, forward_next(m, 0));
    be->embedding_forward(be, m->resid, m->ids, m->embed, N, C);
    if (!m->cfg.tie_word_embeddings) unit_release(m, 0);
    for (int l = 0; l < m->L; l++) {
        unit_use(m, 1 + l, forward_next(m, 1 + l));
        layer_forward(m, l, acts_of(m, l), N);
        unit_release(m, 1 + l);
    }
    head_use(m, -1);
    be->rmsnorm_forward(be, m->lnf, C, m->rstdf, m->resid + (size_t)m->L * N * C, C, m->norm, N, 1, C, m->cfg.rms_norm_eps);
    m->has_targets = b->targets != NULL;
    if (!b->targets) {
        if (!m->all_logits && !(m->all_logits = abuf_logits(m, err))) return -1;
        be->matmul_forward(be, m->all_logits, V, m->lnf, C, m->lm_head, NULL, N, C, V, 0.0f);
        head_release(m);
        m->M = 0;
        return shard_result(m, err);
    }
    /* Only rows that carry a weighted target reach the vocabulary projection. */
    m->loss_inv_t = 1.0f / m->logit_temperature;
    int M = 0;
    float *w = xmalloc(sizeof(float) * (size_t)N);
    int *tg = xmalloc(sizeof(int) * (size_t)N);
    for (int t = 0; t < N; t++) {
        float wt = b->loss_mask ? b->loss_mask[t] : 1.0f;
        if (b->targets[t] < 0 || wt == 0) continue;
        m->h_rows[M] = t, w[M] = wt, tg[M] = b->targets[t];
        M++;
    }
    m->M = M;
    be->zero(be, m->scalars, 4 * sizeof(double));
    if (M) {
        be->upload(be, m->rows, m->h_rows, sizeof(int) * (size_t)M);
        be->upload(be, m->weights_c, w, sizeof(float) * (size_t)M);
        be->upload(be, m->targets_c, tg, sizeof(int) * (size_t)M);
        be->gather_rows(be, m->lnf_c, m->lnf, m->rows, M, C);
        for (int c0 = 0; c0 < M; c0 += m->logit_rows) {
            int R = M - c0 < m->logit_rows ? M - c0 : m->logit_rows;
            be->matmul_forward(be, m->logits, V, m->lnf_c + (size_t)c0 * C, C, m->lm_head, NULL, R, C, V, 0.0f);
            if (m->loss_inv_t != 1.0f) be->scale(be, m->logits, m->loss_inv_t, (size_t)R * V);
            be->crossentropy_forward(be, m->losses + c0, m->lse + c0, m->correct + c0, m->logits, m->targets_c + c0, R, V);
        }
        m->logits_kept = M <= m->logit_rows; /* else the backward pass recomputes them per chunk */
        be->loss_stats(be, m->scalars, m->scalars + 4, m->losses, m->weights_c, m->correct, M);
    }
    head_release(m);
    free(w);
    free(tg);
    if (shard_result(m, err)) return -1;
    if (loss) {
        struct model_stats st = stats_at(m, 0);
        *loss = st.weight_sum > 0 ? (float)(st.loss_sum / st.weight_sum) : 0.0f;
    }
    m->backward_ready = m->train && !m->adapter_off && (!m->n_runs || m->frozen_base);
    return 0;
}

struct model_stats model_last_stats(const struct model *m) { return stats_at(m, 0); }

void model_reset_stats(struct model *m) { m->be->zero(m->be, m->scalars + 4, 4 * sizeof(double)); }

struct model_stats model_take_stats(struct model *m) {
    struct model_stats st = stats_at(m, 4);
    model_reset_stats(m);
    return st;
}

void model_get_token_losses(const struct model *m, float *out) {
    memset(out, 0, sizeof(float) * (size_t)m->N);
    if (!m->has_targets || !m->M) return;
    m->be->download(m->be, m->h_losses, m->losses, sizeof(float) * (size_t)m->M);
    for (int i = 0; i < m->M; i++) out[m->h_rows[i]] = m->h_losses[i];
}

void model_get_token_correct(const struct model *m, int *out) {
    memset(out, 0, sizeof(int) * (size_t)m->N);
    if (!m->has_targets || !m->M) return;
    int *correct = xmalloc(sizeof(int) * (size_t)m->M);
    m->be->download(m->be, correct, m->correct, sizeof(int) * (size_t)m->M);
    for (int i = 0; i < m->M; i++) out[m->h_rows[i]] = correct[i];
    free(correct);
}

void model_get_logits(const struct model *m, float *out) {
    if (!m->has_targets && m->all_logits) m->be->download(m->be, out, m->all_logits, sizeof(float) * (size_t)m->N * m->V);
}

/* ---------------------------------------------------------------- backward ---- */

/* The backward of a linear layer whose input gradient dinp[N, C] = dout @ weight is written, not added to (no
 * pass zeroing it first; NULL: not wanted), and, in a full fine-tune, its weight's and bias's gradients added
 * to as matmul_backward does. */
static void linear_backward(struct model *m, float *dinp, int lddi, const float *weight, const float *bias,
                            const float *dout, int lddo, const float *inp, int ldi, int N, int C, int OC) {
    if (dinp) m->be->gemm(m->be, 0, 0, N, C, OC, 1.0f, dout, lddo, weight, C, 0.0f, dinp, lddi);
    float *dweight = pgrad(m, weight), *dbias = pgrad(m, bias);
    if (dweight || dbias)
        m->be->matmul_backward(m->be, NULL, lddi, dweight, dbias, dout, lddo, inp, ldi, weight, N, C, OC);
}

/* dresid holds d(loss)/d(resid[l+1]) on entry and d/d(resid[l]) on return. */
static void layer_backward(struct model *m, int l, struct layer_acts *a, int N) {
    struct backend *be = m->be;
    const struct layer_params *p = &m->layers[l];
    int C = m->C, F = m->F, hd = m->hd, qd = m->NH * hd, kvd = m->NKV * hd;
    const float *x = m->resid + (size_t)l * N * C;
    float *dres = m->dresid;
    /* MLP: out = mid + h @ wdown^T */
    linear_backward(m, m->dh, F, p->wdown, NULL, dres, C, a->h, F, N, F, C);
    add_lora_backward(m, l, MOD_DOWN, a->xa[MOD_DOWN], m->dh, F, dres, C, a->h, F, N, F, C);
    be->swiglu_backward(be, m->dgu, m->dh, a->gu, N, F);
    linear_backward(m, m->dln, C, p->wgu, NULL, m->dgu, 2 * F, a->ln2, C, N, C, 2 * F);
    add_lora_backward(m, l, MOD_GATE, a->xa[MOD_GATE], m->dln, C, m->dgu, 2 * F, a->ln2, C, N, C, F);
    add_lora_backward(m, l, MOD_UP, a->xa[MOD_UP], m->dln, C, m->dgu + F, 2 * F, a->ln2, C, N, C, F);
    be->rmsnorm_backward(be, dres, C, pgrad(m, p->ln2), m->dln, C, a->mid, C, p->ln2, a->rstd2, N, 1, C);
    /* Attention: mid = x + att @ wo^T */
    linear_backward(m, m->datt, qd, p->wo, NULL, dres, C, a->att, qd, N, qd, C);
    add_lora_backward(m, l, MOD_O, a->xa[MOD_O], m->datt, qd, dres, C, a->att, qd, N, qd, C);
    const float *q, *k, *v;
    int ldq, ldk;
    model_qkv_views(m, a, &q, &ldq, &k, &ldk, &v);
    be->zero(be, m->dqkv, sizeof(float) * (size_t)N * m->QKV);
    float *dq = m->dqkv, *dk = m->dqkv + qd;
    int lddq = m->QKV;
    if (m->cfg.qk_norm) {
        be->zero(be, m->dqkr, sizeof(float) * (size_t)N * m->QK);
        dq = m->dqkr, dk = m->dqkr + qd, lddq = m->QK;
    }
    be->attention_backward(be, dq, lddq, dk, lddq, m->dqkv + qd + kvd, m->QKV, m->datt, a->lse, q, ldq, k, ldk, v,
                           m->QKV, m->d_segs, m->segs, m->n_segs, N, m->longest, m->NH, m->NKV, hd);
    be->rope_backward(be, dq, lddq, m->pos, m->cos_sin, N, m->NH + m->NKV, hd);
    if (m->cfg.qk_norm) {
        be->rmsnorm_backward(be, m->dqkv, m->QKV, pgrad(m, p->q_norm), m->dqkr, m->QK, a->qkv, m->QKV, p->q_norm, a->q_rstd,
                             N, m->NH, hd);
        be->rmsnorm_backward(be, m->dqkv + qd, m->QKV, pgrad(m, p->k_norm), m->dqkr + qd, m->QK, a->qkv + qd, m->QKV,
                             p->k_norm, a->k_rstd, N, m->NKV, hd);
    }
    /* qkv = ln1 @ wqkv^T + b. The input gradient of layer 0 is only needed to train the embedding. */
    int need_dx = l > 0 || m->full_ft;
    linear_backward(m, need_dx ? m->dln : NULL, C, p->wqkv, p->bqkv, m->dqkv, m->QKV, a->ln1, C, N, C, m->QKV);
    for (int i = 0; i < 3; i++) {
        int off = i == 0 ? 0 : i == 1 ? qd : qd + kvd, outd = i == 0 ? qd : kvd;
        add_lora_backward(m, l, MOD_Q + i, a->xa[MOD_Q + i], need_dx ? m->dln : NULL, C, m->dqkv + off, m->QKV, a->ln1,
                          C, N, C, outd);
    }
    if (need_dx) be->rmsnorm_backward(be, dres, C, pgrad(m, p->ln1), m->dln, C, x, C, p->ln1, a->rstd1, N, 1, C);
}

void model_set_adapter_enabled(struct model *m, int enabled) {
    m->adapter_off = m->lora_r && !enabled;
}

void model_set_logit_temperature(struct model *m, float temperature) {
    m->logit_temperature = temperature > 0 ? temperature : 1.0f;
}

/* ---------------------------------------------------------------- the gradient's ranges as they are done */

static void grad_ready(struct model *m, size_t lo, size_t hi) {
    if (hi <= lo) return;
    if (m->sharded && m->full_ft) { /* the ranges are the units: each rank keeps its shard's sum, releases the rest */
        int u = 0;
        while (m->units[u].lo != lo) u++;
        if (!m->shard_failed &&
            m->shard_ops.reduce_scatter(m->shard_ops.ctx, m->grads + lo, hi - lo, &m->shard_err))
            m->shard_failed = 1;
        release_unsharded(m, m->grads, u);
    }
    if (m->grad_ready) m->grad_ready(m->grad_ready_ctx, lo, hi);
}

/* Layer l's part of the trainable buffer: its base tensors (full fine-tuning), or its LoRA pairs, the
 * same for every layer (layout_base, layout_lora). */
static void layer_ready(struct model *m, int l) {
    if (m->full_ft) {
        const float *end = l + 1 < m->L ? m->layers[l + 1].ln1 : m->norm;
        grad_ready(m, (size_t)(m->layers[l].ln1 - m->tp), (size_t)(end - m->tp));
    } else {
        size_t per = m->n_train / (size_t)m->L;
        grad_ready(m, per * (size_t)l, per * (size_t)(l + 1));
    }
}

/* The final norm and an untied lm_head, last in the buffer, are done first; tied, the lm_head is the
 * embedding, done last. */
static void head_ready(struct model *m) {
    if (m->full_ft && !m->cfg.tie_word_embeddings) grad_ready(m, (size_t)(m->norm - m->tp), m->n_train);
}

static void embedding_ready(struct model *m) {
    if (!m->full_ft) return;
    grad_ready(m, 0, (size_t)(m->layers[0].ln1 - m->tp));
    if (m->cfg.tie_word_embeddings) grad_ready(m, (size_t)(m->norm - m->tp), m->n_train);
}

void model_set_grad_ready(struct model *m, void (*ready)(void *ctx, size_t lo, size_t hi), void *ctx) {
    m->grad_ready = ready;
    m->grad_ready_ctx = ctx;
}

void model_grad_ranges(struct model *m) {
    head_ready(m);
    for (int l = m->L - 1; l >= 0; l--) layer_ready(m, l);
    embedding_ready(m);
}

int model_backward(struct model *m, float loss_scale, struct whet_err *err) {
    if (!m->train) return whet_errf(err, "model_backward: the model was loaded for inference");
    if (!m->backward_ready) return whet_errf(err, "model_backward: no forward pass with targets to go back through");
    m->backward_ready = 0;
    struct backend *be = m->be;
    int N = m->N, C = m->C, V = m->V, M = m->M;
    be->zero(be, m->dresid, sizeof(float) * (size_t)N * C);
    head_use(m, m->L);
    if (M) {
        be->zero(be, m->dlnf_c, sizeof(float) * (size_t)M * C);
        for (int c0 = 0; c0 < M; c0 += m->logit_rows) {
            int R = M - c0 < m->logit_rows ? M - c0 : m->logit_rows;
            const float *x = m->lnf_c + (size_t)c0 * C;
            if (!m->logits_kept) {
                be->matmul_forward(be, m->logits, V, x, C, m->lm_head, NULL, R, C, V, 0.0f);
                if (m->loss_inv_t != 1.0f) be->scale(be, m->logits, m->loss_inv_t, (size_t)R * V);
            }
            /* d/dz of nll(z·inv_t) = inv_t · (softmax(z·inv_t) − onehot): the scale folds into loss_scale. */
            be->crossentropy_backward(be, m->logits, m->lse + c0, m->targets_c + c0, m->weights_c + c0,
                                      loss_scale * m->loss_inv_t, R, V);
            be->matmul_backward(be, m->dlnf_c + (size_t)c0 * C, C, pgrad(m, m->lm_head), NULL, m->logits, V, x, C,
                                m->lm_head, R, C, V);
        }
        be->zero(be, m->dln, sizeof(float) * (size_t)N * C);
        be->scatter_add_rows(be, m->dln, m->dlnf_c, m->rows, M, C);
        be->rmsnorm_backward(be, m->dresid, C, pgrad(m, m->norm), m->dln, C, m->resid + (size_t)m->L * N * C, C, m->norm,
                             m->rstdf, N, 1, C);
    }
    head_release(m);
    head_ready(m);
    for (int l = m->L - 1; l >= 0; l--) {
        struct layer_acts *a = acts_of(m, l);
        unit_use(m, 1 + l, backward_next(l));
        if (m->recompute) layer_forward(m, l, a, N);
        layer_backward(m, l, a, N);
        unit_release(m, 1 + l);
        layer_ready(m, l);
    }
    if (m->full_ft) be->embedding_backward(be, pgrad(m, m->embed), m->dresid, m->ids, N, C);
    embedding_ready(m);
    return shard_result(m, err);
}

int model_idle_pass(struct model *m, int backward, struct whet_err *err) {
    if (!m->sharded) return 0;
    /* model_forward's and model_backward's collectives, in their order */
    unit_use(m, 0, forward_next(m, 0));
    if (!m->cfg.tie_word_embeddings) unit_release(m, 0);
    for (int l = 0; l < m->L; l++) {
        unit_use(m, 1 + l, forward_next(m, 1 + l));
        unit_release(m, 1 + l);
    }
    head_use(m, -1);
    head_release(m);
    if (backward) {
        /* This rank's gradients outside its shards are zero: it adds nothing to the others' sums. */
        head_use(m, m->L);
        head_release(m);
        head_ready(m);
        for (int l = m->L - 1; l >= 0; l--) {
            unit_use(m, 1 + l, backward_next(l));
            unit_release(m, 1 + l);
            layer_ready(m, l);
        }
        embedding_ready(m);
    }
    return shard_result(m, err);
}

/* Per-token weights known only after the forward pass (DPO's β·(1 − σ(z)) of each pair): they
 * replace the ones the backward would apply, for the rows that forward kept. */
int model_set_loss_weights(struct model *m, const float *weights, struct whet_err *err) {
    if (!m->backward_ready) return whet_errf(err, "model_set_loss_weights: no forward pass with targets to go back through");
    if (!m->M) return 0;
    /* the batch's weights go up whole and the kept rows are picked on the device (dln is free
     * scratch of N*C floats until the backward pass) */
    m->be->upload(m->be, m->dln, weights, sizeof(float) * (size_t)m->N);
    m->be->gather_rows(m->be, m->weights_c, m->dln, m->rows, m->M, 1);
    return 0;
}

/* ---------------------------------------------------------------- optimiser ---- */

void model_zero_grad(struct model *m) {
    if (!m->train || !m->n_train) return;
    if (!(m->sharded && m->full_ft)) {
        m->be->zero(m->be, m->grads, sizeof(float) * m->n_train);
        return;
    }
    for (int i = 0; i < m->n_spans; i++) /* outside its shards they are released (zero) */
        m->be->zero(m->be, m->grads + m->spans[i].lo, sizeof(float) * (m->spans[i].hi - m->spans[i].lo));
}

float model_grad_norm(struct model *m) { return model_clip_grad_norm(m, 0); }

float model_clip_grad_norm(struct model *m, float max_norm) {
    if (!m->train) return 0.0f;
    struct backend *be = m->be;
    double *sumsq = m->scalars + 8;
    be->zero(be, sumsq, sizeof *sumsq);
    for (int i = 0; i < m->n_spans; i++) be->sumsq(be, sumsq, m->grads + m->spans[i].lo, m->spans[i].hi - m->spans[i].lo);
    if (m->reduce_sumsq && m->reduce_sumsq(m->reduce_sumsq_ctx, sumsq)) return NAN;
    for (int i = 0; i < m->n_spans && max_norm > 0; i++)
        be->clip_by_norm(be, m->grads + m->spans[i].lo, m->spans[i].hi - m->spans[i].lo, sumsq, max_norm);
    double host;
    be->download(be, &host, sumsq, sizeof host);
    return (float)sqrt(host);
}

/* AdamW's step over [lo, hi) of the trainable buffer, inside the optimizer span that starts at span_lo and
 * whose moments start at `moment`. */
struct adamw_piece {
    size_t lo, hi, span_lo, moment;
    float weight_decay;
};

static void adamw_piece_step(struct model *m, const struct adamw_piece *p, float lr, float beta1, float beta2,
                             float eps, float bc1, float bc2) {
    if (p->lo < p->hi)
        m->be->adamw(m->be, m->tp + p->lo, m->grads + p->lo, m->adam_m + p->moment + (p->lo - p->span_lo),
                     m->adam_v + p->moment + (p->lo - p->span_lo), p->hi - p->lo, lr, beta1, beta2, eps,
                     p->weight_decay, bc1, bc2);
}

void model_adamw_step(struct model *m, float lr, float beta1, float beta2, float eps, float weight_decay) {
    if (!m->train) return;
    m->adam_t++;
    float bc1 = 1.0f - powf(beta1, (float)m->adam_t), bc2 = 1.0f - powf(beta2, (float)m->adam_t);
    size_t moment = 0; /* where span i's moments start */
    /* The parts of the tensors in the spans (both in buffer order), adjacent ones of one span and decay in
     * one step: a LoRA adapter's hundred small matrices are one loop split across the threads, not a
     * hundred each too small to split. */
    struct adamw_piece run = {0};
    for (int i = 0, k = 0; i < m->n_spans; moment += m->spans[i].hi - m->spans[i].lo, i++)
        for (; k < m->n_tensors; k++) {
            struct tensor *t = &m->tensors[k];
            if (!t->grad) continue;
            size_t off = (size_t)(t->ptr - m->tp), span_lo = m->spans[i].lo, span_hi = m->spans[i].hi;
            if (off >= span_hi) break;
            size_t lo = off > span_lo ? off : span_lo, hi = off + t->numel < span_hi ? off + t->numel : span_hi;
            float decay = t->decay ? weight_decay : 0.0f;
            if (lo == run.hi && span_lo == run.span_lo && decay == run.weight_decay) {
                run.hi = hi > lo ? hi : lo;
            } else {
                adamw_piece_step(m, &run, lr, beta1, beta2, eps, bc1, bc2);
                run = (struct adamw_piece){lo, hi > lo ? hi : lo, span_lo, moment, decay};
            }
            if (off + t->numel > span_hi) break; /* the tensor goes on into the next span */
        }
    adamw_piece_step(m, &run, lr, beta1, beta2, eps, bc1, bc2);
}

/* ---------------------------------------------------------------- distributed training ---- */

float *model_trainable_params(struct model *m, size_t *n) {
    *n = m->n_train;
    return m->tp;
}

float *model_trainable_grads(struct model *m, size_t *n) {
    *n = m->train ? m->n_train : 0;
    return m->grads;
}

void model_set_sumsq_reducer(struct model *m, int (*reduce)(void *ctx, double *device_sumsq), void *ctx) {
    m->reduce_sumsq = reduce;
    m->reduce_sumsq_ctx = ctx;
}

void model_download_moments(const struct model *m, float *exp_avg, float *exp_avg_sq) {
    size_t at = 0; /* the moments of the spans lie back to back */
    for (int i = 0; i < m->n_spans; i++) {
        size_t lo = m->spans[i].lo, len = m->spans[i].hi - lo;
        m->be->download(m->be, exp_avg + lo, m->adam_m + at, sizeof(float) * len);
        m->be->download(m->be, exp_avg_sq + lo, m->adam_v + at, sizeof(float) * len);
        at += len;
    }
}

void model_set_shard_ops(struct model *m, const struct model_shard_ops *ops) { m->shard_ops = *ops; }

int model_gather_params(struct model *m, struct whet_err *err) {
    for (int u = 0; m->sharded && u < m->L + 2; u++) unit_gather(m, u);
    m->all_resident = m->sharded;
    return shard_result(m, err);
}

void model_release_params(struct model *m) {
    m->all_resident = 0;
    for (int u = 0; m->sharded && u < m->L + 2; u++) unit_release(m, u);
}

/* ---------------------------------------------------------------- named access ---- */

int model_num_tensors(const struct model *m) { return m->n_tensors; }
const char *model_tensor_name(const struct model *m, int i) { return i >= 0 && i < m->n_tensors ? m->tensors[i].name : NULL; }

long long model_tensor_numel(const struct model *m, const char *name) {
    const struct tensor *t = model_find_tensor(m, name);
    return t ? (long long)t->numel : -1;
}

/* Sharded parameters are whole only between model_gather_params and model_release_params. */
static int whole_params(const struct model *m, struct whet_err *err) {
    if (m->sharded && !m->all_resident)
        return whet_errf(err, "the parameters are sharded (ZeRO-3): model_gather_params first");
    return 0;
}

int model_get_param(const struct model *m, const char *name, float *out, struct whet_err *err) {
    const struct tensor *t = model_find_tensor(m, name);
    if (!t) return whet_errf(err, "no tensor named \"%s\"", name);
    if (whole_params(m, err)) return -1;
    m->be->download(m->be, out, t->ptr, sizeof(float) * t->numel);
    return 0;
}

int model_set_param(struct model *m, const char *name, const float *in, struct whet_err *err) {
    const struct tensor *t = model_find_tensor(m, name);
    if (!t) return whet_errf(err, "no tensor named \"%s\"", name);
    if (whole_params(m, err)) return -1;
    m->be->upload(m->be, t->ptr, in, sizeof(float) * t->numel);
    return 0;
}

int model_get_grad(const struct model *m, const char *name, float *out, struct whet_err *err) {
    const struct tensor *t = model_find_tensor(m, name);
    if (!t) return whet_errf(err, "no tensor named \"%s\"", name);
    if (!m->train) return whet_errf(err, "model_get_grad: the model was loaded for inference");
    if (t->grad) m->be->download(m->be, out, t->grad, sizeof(float) * t->numel);
    else memset(out, 0, sizeof(float) * t->numel);
    return 0;
}
