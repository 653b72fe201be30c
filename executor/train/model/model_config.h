/* model_config.h - the Hugging Face `config.json` of a decoder-only model, parsed and checked.
 *
 * Accepted architectures: LlamaForCausalLM (Llama 2/3, SmolLM), MistralForCausalLM (only when its
 * sliding window never applies), Qwen2ForCausalLM (q/k/v biases) and Qwen3ForCausalLM (per-head
 * RMSNorm of q and k before RoPE). Everything the engine needs is read and bounded here, so the model
 * code can trust the numbers: a missing or absurd field, an unknown architecture, or a feature the
 * engine does not implement is an error that names the file and the field. */
#ifndef WHET_MODEL_CONFIG_H
#define WHET_MODEL_CONFIG_H

#include "util.h"

enum model_arch { ARCH_LLAMA, ARCH_MISTRAL, ARCH_QWEN2, ARCH_QWEN3 };

struct model_config {
    enum model_arch arch;
    int vocab_size;
    int hidden_size;        /* C */
    int intermediate_size;  /* I, the SwiGLU width */
    int n_layers;           /* L */
    int n_heads;            /* NH, query heads */
    int n_kv_heads;         /* NKV, key/value heads (GQA: NH % NKV == 0) */
    int head_dim;           /* hd; NH*hd need not equal C (Qwen3) */
    int max_position_embeddings;
    float rope_theta;
    float rms_norm_eps;
    int tie_word_embeddings;
    int qkv_bias;           /* q/k/v projections have biases (Qwen2, Llama attention_bias) */
    int qk_norm;            /* per-head RMSNorm on q and k before RoPE (Qwen3) */
    int sliding_window;     /* 0: none; otherwise attention must never reach this far back */
    /* rope_scaling: 0 none, 1 linear (factor), 2 llama3 (factor, low/high freq factors, original
     * max positions) */
    int rope_scaling;
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    int bos_token_id, eos_token_id; /* -1 when absent */
    char torch_dtype[16];           /* as found ("bfloat16", …), for the record */
};

/* Parses the JSON text of a config.json; `file` names it in messages. */
int model_config_parse(struct model_config *cfg, const char *json, const char *file, struct whet_err *err);
/* Reads and parses `path`. */
int model_config_load(struct model_config *cfg, const char *path, struct whet_err *err);
/* The HF architecture name ("Qwen3ForCausalLM") and model_type ("qwen3"). */
const char *model_arch_name(enum model_arch a);
const char *model_arch_type(enum model_arch a);
/* A config.json text for `cfg` (caller frees), loadable by transformers and by model_config_parse. */
char *model_config_to_json(const struct model_config *cfg, const char *torch_dtype);
/* Total parameter count implied by the config. */
long long model_config_num_params(const struct model_config *cfg);

#endif
