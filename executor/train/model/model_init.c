/* model_init.c - writing a random model dir (see model_init.h). The config goes through
 * model_config_to_json and back through model_config_parse, so whatever `whet model init` writes is
 * exactly what the loader accepts. */
#include "model_init.h"

#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "rng.h"
#include "safetensors.h"
#include "tokenizer.h"

int model_init_preset(struct model_init_opts *o, const char *preset, struct whet_err *err) {
    if (strcmp(preset, "tiny")) return whet_errf(err, "preset \"%s\" is unknown (known: tiny)", preset);
    *o = (struct model_init_opts){.arch = ARCH_QWEN3, .layers = 4, .hidden = 256, .heads = 4, .kv_heads = 2,
                                  .head_dim = 64, .intermediate = 768, .vocab = TOKENIZER_TINY_VOCAB, .seed = 0};
    return 0;
}

struct init_ctx {
    struct st_writer w;
    struct rng rng;
    float **bufs;
    int n;
};

static void init_tensor(void *arg, const char *name, int ndim, const int64_t *shape) {
    struct init_ctx *c = arg;
    int64_t n = ndim > 1 ? shape[0] * shape[1] : shape[0];
    float *data = xmalloc(sizeof(float) * (size_t)n);
    int is_norm = ndim == 1 && strstr(name, "norm");
    for (int64_t i = 0; i < n; i++) data[i] = is_norm ? 1.0f : ndim == 1 ? 0.0f : 0.02f * rng_normal(&c->rng);
    c->bufs = xrealloc(c->bufs, sizeof *c->bufs * (size_t)(c->n + 1));
    c->bufs[c->n++] = data;
    st_writer_add(&c->w, name, ndim, shape, data);
}

int model_init_write(const char *dir, const struct model_init_opts *o, struct whet_err *err) {
    struct model_config cfg = {
        .arch = o->arch,
        .vocab_size = o->vocab,
        .hidden_size = o->hidden,
        .intermediate_size = o->intermediate,
        .n_layers = o->layers,
        .n_heads = o->heads,
        .n_kv_heads = o->kv_heads,
        .head_dim = o->head_dim ? o->head_dim : (o->heads > 0 ? o->hidden / o->heads : 0),
        .max_position_embeddings = 4096,
        .rope_theta = o->arch == ARCH_QWEN2 || o->arch == ARCH_QWEN3 ? 1000000.0f : 10000.0f,
        .rms_norm_eps = 1e-6f,
        .tie_word_embeddings = 1,
        .qkv_bias = o->arch == ARCH_QWEN2,
        .qk_norm = o->arch == ARCH_QWEN3,
        .bos_token_id = o->vocab - 3, /* <|endoftext|> */
        .eos_token_id = o->vocab - 1, /* <|im_end|> */
    };
    /* Validate by the loader's own rules. */
    char *json = model_config_to_json(&cfg, "float32");
    struct model_config check;
    if (model_config_parse(&check, json, "the requested model", err) || whet_mkdir_p(dir, err)) {
        free(json);
        return -1;
    }
    int rc = whet_write_file_in(dir, "config.json", json, strlen(json), err);
    free(json);
    if (rc) return -1;
    struct init_ctx c = {0};
    st_writer_init(&c.w);
    st_writer_metadata(&c.w, "format", "pt");
    rng_seed(&c.rng, o->seed);
    model_config_tensors(&check, init_tensor, &c);
    char *path = xasprintf("%s/model.safetensors", dir);
    rc = st_writer_write(&c.w, path, ST_F32, err);
    free(path);
    st_writer_free(&c.w);
    for (int i = 0; i < c.n; i++) free(c.bufs[i]);
    free(c.bufs);
    if (rc) return -1;
    /* A larger embedding than the tokenizer uses is fine (Qwen's is): the tiny tokenizer stops at its
     * own maximum. */
    return tokenizer_write_tiny(dir, o->vocab < TOKENIZER_TINY_MAX_VOCAB ? o->vocab : TOKENIZER_TINY_MAX_VOCAB, err);
}
