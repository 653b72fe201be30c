/* model_io.c - the model's files: what model_load reads and what the trainer writes.
 *
 * Reading: the base weights of a Hugging Face model dir (safetensors, any float dtype, kept as f32),
 * and a PEFT adapter (adapter_config.json and adapter_model.safetensors), into the tensors model.c
 * has laid out (model_internal.h); model_load calls these, model_load_adapter_weights overwrites an
 * adapter in place. Writing: a Hugging Face model dir (LoRA merged into the weights, tokenizer files
 * copied), a PEFT adapter dir, and the AdamW state for exact resume. Tensors move between host and
 * device through the backend only (the LoRA merge is one backend gemm per module). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "model_internal.h"
#include "safetensors.h"

/* ---------------------------------------------------------------- reading ---- */

int model_io_read_base(struct model *m, const char *dir, struct whet_err *err) {
    struct st_set set;
    if (st_open_dir(&set, dir, err)) return -1;
    float *host = NULL;
    size_t host_cap = 0;
    int rc = 0;
    for (int i = 0; i < m->n_base_tensors && !rc; i++) {
        struct tensor *t = &m->tensors[i];
        const struct st_tensor *st;
        if (st_expect(&set, t->name, t->ndim, t->shape, &st, err)) {
            rc = -1;
            break;
        }
        if (t->numel > host_cap) {
            free(host);
            host_cap = t->numel;
            host = xmalloc(sizeof(float) * host_cap);
        }
        rc = st_read_f32(st, host, (int64_t)t->numel, err);
        if (!rc) m->be->upload(m->be, t->ptr, host, sizeof(float) * t->numel);
    }
    free(host);
    st_close(&set);
    return rc;
}

/* Reads adapter_config.json into the LoRA settings of `m`. */
int model_io_read_adapter_config(struct model *m, const char *dir, struct whet_err *err) {
    char *path = xasprintf("%s/adapter_config.json", dir);
    json_t *root = whet_json_load_file(path, 0, err);
    int rc = -1;
    if (!root) goto out;
    const char *pt = json_string_value(json_object_get(root, "peft_type"));
    if (pt && strcmp(pt, "LORA")) {
        whet_errf(err, "%s: peft_type: \"%s\" is not supported (only LORA)", path, pt);
        goto out;
    }
    json_t *r = json_object_get(root, "r"), *alpha = json_object_get(root, "lora_alpha");
    if (!json_is_integer(r) || json_integer_value(r) < 1 || json_integer_value(r) > 4096) {
        whet_errf(err, "%s: r: expected an integer in [1, 4096]", path);
        goto out;
    }
    if (!json_is_number(alpha) || json_number_value(alpha) <= 0) {
        whet_errf(err, "%s: lora_alpha: expected a positive number", path);
        goto out;
    }
    json_t *ltt = json_object_get(root, "layers_to_transform");
    if (ltt && !json_is_null(ltt)) {
        whet_errf(err, "%s: layers_to_transform: adapters on a subset of layers are not supported", path);
        goto out;
    }
    json_t *tm = json_object_get(root, "target_modules");
    unsigned targets = 0;
    if (json_is_string(tm)) {
        targets = lora_target_from_name(json_string_value(tm));
    } else if (json_is_array(tm)) {
        size_t i;
        json_t *v;
        json_array_foreach(tm, i, v) {
            unsigned t = json_is_string(v) ? lora_target_from_name(json_string_value(v)) : 0;
            if (!t) {
                whet_errf(err, "%s: target_modules[%zu]: expected one of q_proj, k_proj, v_proj, o_proj, gate_proj, "
                               "up_proj, down_proj", path, i);
                goto out;
            }
            targets |= t;
        }
    }
    if (!targets) {
        whet_errf(err, "%s: target_modules: expected a non-empty list of module names", path);
        goto out;
    }
    m->lora_r = (int)json_integer_value(r);
    m->lora_alpha = (float)json_number_value(alpha);
    m->rslora = json_is_true(json_object_get(root, "use_rslora"));
    m->targets = targets;
    rc = 0;
out:
    json_decref(root);
    free(path);
    return rc;
}

int model_io_read_lora(struct model *m, const char *dir, struct whet_err *err) {
    char *path = xasprintf("%s/adapter_model.safetensors", dir);
    struct st_set set;
    int rc = st_open_file(&set, path, err);
    free(path);
    if (rc) return -1;
    for (int i = m->n_base_tensors; i < m->n_tensors && !rc; i++) {
        struct tensor *t = &m->tensors[i];
        const struct st_tensor *st;
        float *host = xmalloc(sizeof(float) * t->numel);
        rc = st_expect(&set, t->name, 2, t->shape, &st, err) || st_read_f32(st, host, (int64_t)t->numel, err);
        if (!rc) m->be->upload(m->be, t->ptr, host, sizeof(float) * t->numel);
        free(host);
    }
    /* Every tensor of the file must have been used: a mismatch means another adapter layout. */
    for (int i = 0; i < set.n_tensors && !rc; i++)
        if (!model_find_tensor(m, set.tensors[i].name))
            rc = whet_errf(err, "%s: tensor \"%s\" does not belong to this model's adapter layout",
                           set.tensors[i].file, set.tensors[i].name);
    st_close(&set);
    return rc ? -1 : 0;
}

/* ---------------------------------------------------------------- writing ---- */

static int copy_file(const char *from, const char *to, struct whet_err *err) {
    char *data;
    size_t len;
    if (whet_read_file(from, (size_t)1 << 30, &data, &len, err)) return -1;
    int rc = whet_write_file_atomic(to, data, len, err);
    free(data);
    return rc;
}

int model_save_hf(const struct model *m, const char *dir, int bf16, struct whet_err *err) {
    if (m->sharded && !m->all_resident)
        return whet_errf(err, "model_save_hf: the parameters are sharded (ZeRO-3): model_gather_params first");
    if (whet_mkdir_p(dir, err)) return -1;
    struct backend *be = m->be;
    char *cfg = model_config_to_json(&m->cfg, bf16 ? "bfloat16" : "float32");
    int rc = whet_write_file_in(dir, "config.json", cfg, strlen(cfg), err);
    free(cfg);
    if (rc) return -1;
    /* Host copy of the base weights, with LoRA merged: W += s * B @ A. */
    float *host = xmalloc(sizeof(float) * m->n_params);
    float *merged = NULL;
    if (m->lora_r) {
        if (!(merged = be->alloc(be, sizeof(float) * m->n_params, err))) {
            free(host);
            return whet_err_hint(err, "merging the adapter needs a second copy of the base weights on %s", be->name);
        }
        be->copy(be, merged, m->params, sizeof(float) * m->n_params);
        for (int l = 0; l < m->L; l++)
            for (int mod = 0; mod < N_MODS; mod++) {
                if (!(m->targets & (1u << mod))) continue;
                char name[128];
                snprintf(name, sizeof name, "model.layers.%d.%s.%s.weight", l, model_mod_parents[mod],
                         model_mod_names[mod]);
                const struct tensor *t = model_find_tensor(m, name);
                int in, out;
                model_mod_dims(m, mod, &in, &out);
                be->gemm(be, 0, 0, out, in, m->lora_r, m->lora_scale, m->lmods[l][mod].B, m->lora_r, m->lmods[l][mod].A, in,
                         1.0f, merged + (t->ptr - m->params), in);
            }
    }
    be->download(be, host, merged ? merged : m->params, sizeof(float) * m->n_params);
    be->free(be, merged);
    struct st_writer w;
    st_writer_init(&w);
    st_writer_metadata(&w, "format", "pt");
    for (int i = 0; i < m->n_base_tensors; i++) {
        const struct tensor *t = &m->tensors[i];
        st_writer_add(&w, t->name, t->ndim, t->shape, host + (t->ptr - m->params));
    }
    char *path = xasprintf("%s/model.safetensors", dir);
    rc = st_writer_write(&w, path, bf16 ? ST_BF16 : ST_F32, err);
    free(path);
    st_writer_free(&w);
    free(host);
    if (rc) return -1;
    static const char *const side_files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                             "generation_config.json", "chat_template.jinja"};
    for (size_t i = 0; i < WHET_ARRAY_LEN(side_files) && !rc; i++) {
        char *from = xasprintf("%s/%s", m->dir, side_files[i]), *to = xasprintf("%s/%s", dir, side_files[i]);
        if (access(from, R_OK) == 0 && strcmp(m->dir, dir)) rc = copy_file(from, to, err);
        free(from);
        free(to);
    }
    return rc;
}

int model_save_adapter(const struct model *m, const char *dir, struct whet_err *err) {
    if (!m->lora_r) return whet_errf(err, "model_save_adapter: the model has no LoRA adapter");
    if (whet_mkdir_p(dir, err)) return -1;
    json_t *targets = json_array();
    for (int mod = 0; mod < N_MODS; mod++)
        if (m->targets & (1u << mod)) json_array_append_new(targets, json_string(model_mod_names[mod]));
    json_t *alpha = m->lora_alpha == floorf(m->lora_alpha) ? json_integer((json_int_t)m->lora_alpha)
                                                           : json_real(m->lora_alpha);
    json_t *root = json_pack("{s:s, s:s, s:s, s:i, s:o, s:f, s:o, s:b, s:s, s:b, s:b, s:b, s:n}", "peft_type", "LORA",
                             "task_type", "CAUSAL_LM", "base_model_name_or_path", m->dir, "r", m->lora_r, "lora_alpha",
                             alpha, "lora_dropout", 0.0, "target_modules", targets, "use_rslora", m->rslora, "bias",
                             "none", "fan_in_fan_out", 0, "inference_mode", 1, "init_lora_weights", 1,
                             "modules_to_save");
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    char *body = xasprintf("%s\n", text);
    int rc = whet_write_file_in(dir, "adapter_config.json", body, strlen(body), err);
    free(text);
    free(body);
    if (rc) return -1;
    float *host = xmalloc(sizeof(float) * m->n_lora);
    m->be->download(m->be, host, m->lora, sizeof(float) * m->n_lora);
    struct st_writer w;
    st_writer_init(&w);
    st_writer_metadata(&w, "format", "pt");
    for (int i = m->n_base_tensors; i < m->n_tensors; i++) {
        const struct tensor *t = &m->tensors[i];
        st_writer_add(&w, t->name, 2, t->shape, host + (t->ptr - m->lora));
    }
    char *path = xasprintf("%s/adapter_model.safetensors", dir);
    rc = st_writer_write(&w, path, ST_F32, err);
    free(path);
    st_writer_free(&w);
    free(host);
    return rc;
}

int model_load_adapter_weights(struct model *m, const char *dir, struct whet_err *err) {
    if (!m->lora_r) return whet_errf(err, "%s: the model was loaded without LoRA", dir);
    struct model probe = {0};
    probe.L = m->L;
    if (model_io_read_adapter_config(&probe, dir, err)) return -1;
    if (probe.lora_r != m->lora_r || probe.targets != m->targets)
        return whet_errf(err, "%s/adapter_config.json: r %d and targets differ from the model's (r %d)", dir,
                         probe.lora_r, m->lora_r);
    return model_io_read_lora(m, dir, err);
}

int model_save_optimizer(const struct model *m, const char *path, struct whet_err *err) {
    if (!m->train) return whet_errf(err, "model_save_optimizer: the model was loaded for inference");
    if (m->n_span_values != m->n_train)
        return whet_errf(err, "model_save_optimizer: the optimizer is sharded; gather the moments and use "
                              "model_save_optimizer_moments");
    float *host = xmalloc(sizeof(float) * m->n_train * 2);
    m->be->download(m->be, host, m->adam_m, sizeof(float) * m->n_train);
    m->be->download(m->be, host + m->n_train, m->adam_v, sizeof(float) * m->n_train);
    int rc = model_save_optimizer_moments(m, path, host, host + m->n_train, err);
    free(host);
    return rc;
}

int model_save_optimizer_moments(const struct model *m, const char *path, const float *exp_avg,
                                 const float *exp_avg_sq, struct whet_err *err) {
    struct st_writer w;
    st_writer_init(&w);
    char step[32];
    snprintf(step, sizeof step, "%d", m->adam_t);
    st_writer_metadata(&w, "step", step);
    int64_t shape[1] = {(int64_t)m->n_train};
    st_writer_add(&w, "exp_avg", 1, shape, exp_avg);
    st_writer_add(&w, "exp_avg_sq", 1, shape, exp_avg_sq);
    int rc = st_writer_write(&w, path, ST_F32, err);
    st_writer_free(&w);
    return rc;
}

/* The optimizer's spans of whole[n_train] (host) into moments, back to back. */
static void upload_spans(struct model *m, float *moments, const float *whole) {
    for (int i = 0; i < m->n_spans; i++) {
        size_t n = m->spans[i].hi - m->spans[i].lo;
        m->be->upload(m->be, moments, whole + m->spans[i].lo, sizeof(float) * n);
        moments += n;
    }
}

int model_load_optimizer(struct model *m, const char *path, struct whet_err *err) {
    if (!m->train) return whet_errf(err, "model_load_optimizer: the model was loaded for inference");
    struct st_set set;
    if (st_open_file(&set, path, err)) return -1;
    int64_t shape[1] = {(int64_t)m->n_train};
    const struct st_tensor *a, *b;
    const char *step = st_metadata(&set, "step");
    int rc = -1;
    if (st_expect(&set, "exp_avg", 1, shape, &a, err) || st_expect(&set, "exp_avg_sq", 1, shape, &b, err)) goto out;
    if (!step || atoi(step) < 0) {
        whet_errf(err, "%s: __metadata__.step: missing", path);
        goto out;
    }
    float *host = xmalloc(sizeof(float) * m->n_train);
    rc = st_read_f32(a, host, shape[0], err);
    if (!rc) upload_spans(m, m->adam_m, host);
    if (!rc) rc = st_read_f32(b, host, shape[0], err);
    if (!rc) upload_spans(m, m->adam_v, host);
    free(host);
    if (!rc) m->adam_t = atoi(step);
out:
    st_close(&set);
    return rc;
}