/* model_init.h - `whet model init`: a small randomly initialised model in Hugging Face layout.
 *
 * Writes DIR/config.json, DIR/model.safetensors (F32) and the tiny tokenizer's files
 * (tokenizer.json, tokenizer_config.json with a ChatML template). Weights are N(0, 0.02) like
 * transformers' initializer_range, norms are 1, drawn from rng.h in file order, so the same options
 * give byte-identical files. */
#ifndef WHET_MODEL_INIT_H
#define WHET_MODEL_INIT_H

#include <stdint.h>

#include "model_config.h"
#include "util.h"

struct model_init_opts {
    enum model_arch arch;
    int layers, hidden, heads, kv_heads, head_dim, intermediate, vocab;
    uint64_t seed;
};

/* The "tiny" preset: Qwen3, 4 layers, hidden 256, 4 heads of 64 (2 kv heads), SwiGLU 768, the tiny
 * tokenizer's 2048 tokens, tied embeddings: about 3.7 M parameters. Returns -1 for an unknown preset. */
int model_init_preset(struct model_init_opts *o, const char *preset, struct whet_err *err);
/* Checks the options (as a config.json would be checked) and writes the model dir. */
int model_init_write(const char *dir, const struct model_init_opts *o, struct whet_err *err);

#endif
