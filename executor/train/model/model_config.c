/* model_config.c - parsing and bounding a Hugging Face config.json (see model_config.h).
 *
 * Defaults follow transformers' config classes for each architecture (LlamaConfig, Qwen2Config, …)
 * so a config.json that omits a field means what it means there. */
#include "model_config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static const struct {
    const char *hf_name, *model_type;
    enum model_arch arch;
} archs[] = {
    {"LlamaForCausalLM", "llama", ARCH_LLAMA},
    {"MistralForCausalLM", "mistral", ARCH_MISTRAL},
    {"Qwen2ForCausalLM", "qwen2", ARCH_QWEN2},
    {"Qwen3ForCausalLM", "qwen3", ARCH_QWEN3},
};

const char *model_arch_name(enum model_arch a) { return archs[a].hf_name; }
const char *model_arch_type(enum model_arch a) { return archs[a].model_type; }

/* Reads an integer field within [lo, hi]; `def` < lo means the field is required. */
static int get_int(json_t *root, const char *key, long long def, long long lo, long long hi, int *out,
                   const char *file, struct whet_err *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (def < lo) return whet_errf(err, "%s: %s: missing (required)", file, key);
        *out = (int)def;
        return 0;
    }
    if (!json_is_integer(v)) return whet_errf(err, "%s: %s: expected an integer", file, key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return whet_errf(err, "%s: %s: %lld is out of range [%lld, %lld]", file, key, x, lo, hi);
    *out = (int)x;
    return 0;
}

static int get_float(json_t *root, const char *key, double def, double lo, double hi, float *out, const char *file,
                     struct whet_err *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = (float)def;
        return 0;
    }
    if (!json_is_number(v)) return whet_errf(err, "%s: %s: expected a number", file, key);
    double x = json_number_value(v);
    if (!(x > lo && x <= hi)) return whet_errf(err, "%s: %s: %g is out of range (%g, %g]", file, key, x, lo, hi);
    *out = (float)x;
    return 0;
}

static int get_bool(json_t *root, const char *key, int def, int *out, const char *file, struct whet_err *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return whet_errf(err, "%s: %s: expected true or false", file, key);
    *out = json_is_true(v);
    return 0;
}

/* bos/eos may be an integer or a list of them (Llama 3): the first one is kept. */
static int get_token_id(json_t *root, const char *key, int *out, const char *file, struct whet_err *err) {
    json_t *v = json_object_get(root, key);
    if (json_is_array(v)) v = json_array_get(v, 0);
    *out = -1;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0) return whet_errf(err, "%s: %s: expected a token id", file, key);
    *out = (int)json_integer_value(v);
    return 0;
}

static int parse_rope_scaling(struct model_config *c, json_t *rs, const char *file, struct whet_err *err) {
    c->rope_scaling = 0;
    if (!rs || json_is_null(rs)) return 0;
    if (!json_is_object(rs)) return whet_errf(err, "%s: rope_scaling: expected an object or null", file);
    json_t *t = json_object_get(rs, "rope_type");
    if (!t) t = json_object_get(rs, "type");
    const char *type = json_string_value(t);
    if (!type) return whet_errf(err, "%s: rope_scaling.rope_type: expected a string", file);
    if (!strcmp(type, "default")) return 0;
    if (get_float(rs, "factor", 0, 0, 1e6, &c->rope_factor, file, err)) return -1;
    if (c->rope_factor <= 0) return whet_errf(err, "%s: rope_scaling.factor: missing", file);
    if (!strcmp(type, "linear")) {
        c->rope_scaling = 1;
        return 0;
    }
    if (!strcmp(type, "llama3")) {
        c->rope_scaling = 2;
        if (get_float(rs, "low_freq_factor", 1, 0, 1e6, &c->rope_low_freq_factor, file, err) ||
            get_float(rs, "high_freq_factor", 4, 0, 1e6, &c->rope_high_freq_factor, file, err) ||
            get_int(rs, "original_max_position_embeddings", 8192, 1, 1 << 24, &c->rope_original_max_pos, file, err))
            return -1;
        if (c->rope_high_freq_factor <= c->rope_low_freq_factor)
            return whet_errf(err, "%s: rope_scaling: high_freq_factor must exceed low_freq_factor", file);
        return 0;
    }
    return whet_errf(err, "%s: rope_scaling: rope_type \"%s\" is not supported (supported: default, linear, llama3)",
                     file, type);
}

int model_config_parse(struct model_config *c, const char *json, const char *file, struct whet_err *err) {
    memset(c, 0, sizeof *c);
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr);
    if (!root) return whet_json_errf(err, file, &jerr);
    int rc = -1;
    if (!json_is_object(root)) {
        whet_errf(err, "%s: expected a JSON object", file);
        goto out;
    }
    /* Architecture: "architectures": ["Qwen3ForCausalLM"], else "model_type". */
    const char *name = json_string_value(json_array_get(json_object_get(root, "architectures"), 0));
    const char *type = json_string_value(json_object_get(root, "model_type"));
    if (!name && !type) {
        whet_errf(err, "%s: architectures: missing (and no model_type)", file);
        goto out;
    }
    size_t k;
    for (k = 0; k < WHET_ARRAY_LEN(archs); k++)
        if (name ? !strcmp(name, archs[k].hf_name) : !strcmp(type, archs[k].model_type)) break;
    if (k == WHET_ARRAY_LEN(archs)) {
        whet_errf(err, "%s: architecture \"%s\" is not supported (supported: LlamaForCausalLM, MistralForCausalLM, "
                       "Qwen2ForCausalLM, Qwen3ForCausalLM)", file, name ? name : type);
        goto out;
    }
    c->arch = archs[k].arch;
    if (get_int(root, "vocab_size", -1, 1, 16 << 20, &c->vocab_size, file, err) ||
        get_int(root, "hidden_size", -1, 1, 1 << 16, &c->hidden_size, file, err) ||
        get_int(root, "intermediate_size", -1, 1, 1 << 20, &c->intermediate_size, file, err) ||
        get_int(root, "num_hidden_layers", -1, 1, 1024, &c->n_layers, file, err) ||
        get_int(root, "num_attention_heads", -1, 1, 1024, &c->n_heads, file, err) ||
        get_int(root, "num_key_value_heads", c->n_heads, 1, 1024, &c->n_kv_heads, file, err) ||
        get_int(root, "max_position_embeddings", 4096, 1, 1 << 24, &c->max_position_embeddings, file, err) ||
        get_float(root, "rope_theta", 10000.0, 0, 1e12, &c->rope_theta, file, err) ||
        get_float(root, "rms_norm_eps", 1e-6, 0, 0.1, &c->rms_norm_eps, file, err) ||
        get_bool(root, "tie_word_embeddings", 0, &c->tie_word_embeddings, file, err) ||
        get_token_id(root, "bos_token_id", &c->bos_token_id, file, err) ||
        get_token_id(root, "eos_token_id", &c->eos_token_id, file, err) ||
        parse_rope_scaling(c, json_object_get(root, "rope_scaling"), file, err))
        goto out;
    if (c->n_heads % c->n_kv_heads) {
        whet_errf(err, "%s: num_key_value_heads: %d does not divide num_attention_heads %d", file, c->n_kv_heads,
                  c->n_heads);
        goto out;
    }
    json_t *hd = json_object_get(root, "head_dim");
    if (hd && !json_is_null(hd)) {
        if (get_int(root, "head_dim", -1, 2, 1024, &c->head_dim, file, err)) goto out;
    } else {
        if (c->hidden_size % c->n_heads) {
            whet_errf(err, "%s: num_attention_heads: %d does not divide hidden_size %d (and no head_dim)", file,
                      c->n_heads, c->hidden_size);
            goto out;
        }
        c->head_dim = c->hidden_size / c->n_heads;
    }
    if (c->head_dim % 2) {
        whet_errf(err, "%s: head_dim: %d is odd; rotary embeddings need an even head size", file, c->head_dim);
        goto out;
    }
    const char *act = json_string_value(json_object_get(root, "hidden_act"));
    if (act && strcmp(act, "silu")) {
        whet_errf(err, "%s: hidden_act: \"%s\" is not supported (only silu)", file, act);
        goto out;
    }
    int attention_bias, mlp_bias;
    if (get_bool(root, "attention_bias", 0, &attention_bias, file, err) ||
        get_bool(root, "mlp_bias", 0, &mlp_bias, file, err))
        goto out;
    if (c->arch == ARCH_QWEN2) {
        c->qkv_bias = 1; /* Qwen2 always has q/k/v biases and never an o_proj bias */
    } else if (attention_bias) {
        whet_errf(err, "%s: attention_bias: an o_proj bias is not supported", file);
        goto out;
    }
    if (mlp_bias) {
        whet_errf(err, "%s: mlp_bias: MLP biases are not supported", file);
        goto out;
    }
    c->qk_norm = c->arch == ARCH_QWEN3;
    /* Sliding window: Mistral uses it whenever set; Qwen only with use_sliding_window. */
    int use_sw = c->arch == ARCH_MISTRAL;
    if (c->arch == ARCH_QWEN2 || c->arch == ARCH_QWEN3)
        if (get_bool(root, "use_sliding_window", 0, &use_sw, file, err)) goto out;
    if (use_sw && get_int(root, "sliding_window", 0, 0, 1 << 30, &c->sliding_window, file, err)) goto out;
    if (c->sliding_window >= c->max_position_embeddings) c->sliding_window = 0; /* never applies */
    const char *dt = json_string_value(json_object_get(root, "torch_dtype"));
    snprintf(c->torch_dtype, sizeof c->torch_dtype, "%s", dt ? dt : "float32");
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int model_config_load(struct model_config *cfg, const char *path, struct whet_err *err) {
    char *text;
    size_t len;
    if (whet_read_file(path, 1 << 20, &text, &len, err)) return -1;
    int rc = model_config_parse(cfg, text, path, err);
    free(text);
    return rc;
}

/* A float as the shortest decimal that reads back to it (1e-06, not 9.99999997e-07). */
static json_t *json_float(float f) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", (double)f);
    return json_real(strtod(buf, NULL));
}

char *model_config_to_json(const struct model_config *c, const char *torch_dtype) {
    json_t *root = json_object();
    json_object_set_new(root, "architectures", json_pack("[s]", model_arch_name(c->arch)));
    json_object_set_new(root, "model_type", json_string(model_arch_type(c->arch)));
    json_object_set_new(root, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(root, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(root, "intermediate_size", json_integer(c->intermediate_size));
    json_object_set_new(root, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(root, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(root, "num_key_value_heads", json_integer(c->n_kv_heads));
    json_object_set_new(root, "head_dim", json_integer(c->head_dim));
    json_object_set_new(root, "hidden_act", json_string("silu"));
    json_object_set_new(root, "max_position_embeddings", json_integer(c->max_position_embeddings));
    json_object_set_new(root, "rope_theta", json_float(c->rope_theta));
    json_object_set_new(root, "rms_norm_eps", json_float(c->rms_norm_eps));
    json_object_set_new(root, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    if (c->arch != ARCH_QWEN2) json_object_set_new(root, "attention_bias", json_boolean(c->qkv_bias));
    if (c->arch == ARCH_QWEN2 || c->arch == ARCH_QWEN3) json_object_set_new(root, "use_sliding_window", json_false());
    if (c->rope_scaling == 1)
        json_object_set_new(root, "rope_scaling", json_pack("{s:s, s:f}", "rope_type", "linear", "factor", c->rope_factor));
    if (c->rope_scaling == 2)
        json_object_set_new(root, "rope_scaling",
                            json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3", "factor", c->rope_factor,
                                      "low_freq_factor", c->rope_low_freq_factor, "high_freq_factor",
                                      c->rope_high_freq_factor, "original_max_position_embeddings",
                                      c->rope_original_max_pos));
    if (c->bos_token_id >= 0) json_object_set_new(root, "bos_token_id", json_integer(c->bos_token_id));
    if (c->eos_token_id >= 0) json_object_set_new(root, "eos_token_id", json_integer(c->eos_token_id));
    json_object_set_new(root, "torch_dtype", json_string(torch_dtype));
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(root);
    char *out = xasprintf("%s\n", s);
    free(s);
    return out;
}

long long model_config_num_params(const struct model_config *c) {
    long long C = c->hidden_size, hd = c->head_dim, q = (long long)c->n_heads * hd, kv = (long long)c->n_kv_heads * hd;
    long long layer = C + (q + 2 * kv) * C + q * C + C + 3LL * C * c->intermediate_size;
    if (c->qkv_bias) layer += q + 2 * kv;
    if (c->qk_norm) layer += 2 * hd;
    long long n = (long long)c->vocab_size * C + c->n_layers * layer + C;
    if (!c->tie_word_embeddings) n += (long long)c->vocab_size * C;
    return n;
}
