/* test_init.c - `whet model init`'s library: the same options give byte-identical files, another
 * seed other weights, the result loads, trains a step and samples; bad shapes are refused with the
 * config loader's own messages. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "model_init.h"
#include "test.h"

static char *read_all(const char *dir, const char *name, size_t *len) {
    char *path = xasprintf("%s/%s", dir, name), *data = NULL;
    struct whet_err err;
    if (whet_read_file(path, (size_t)1 << 30, &data, len, &err)) data = NULL;
    free(path);
    return data;
}

static int same_file(const char *a, const char *b, const char *name) {
    size_t la, lb;
    char *x = read_all(a, name, &la), *y = read_all(b, name, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

TEST(init_deterministic_and_trainable) {
    char tmpl[] = "/tmp/whet-init-test-XXXXXX";
    char *root = mkdtemp(tmpl);
    CHECK(root != NULL);
    char *a = xasprintf("%s/a", root), *b = xasprintf("%s/b", root), *c = xasprintf("%s/c", root);
    struct model_init_opts o;
    struct whet_err err;
    CHECK(model_init_preset(&o, "tiny", &err) == 0);
    /* Smaller than the preset, to keep the test fast. */
    o.layers = 2, o.hidden = 64, o.heads = 4, o.kv_heads = 2, o.head_dim = 16, o.intermediate = 128, o.vocab = 400;
    CHECK_MSG(model_init_write(a, &o, &err) == 0, "%s", err.msg);
    CHECK_MSG(model_init_write(b, &o, &err) == 0, "%s", err.msg);
    o.seed = 7;
    CHECK_MSG(model_init_write(c, &o, &err) == 0, "%s", err.msg);
    static const char *const files[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < WHET_ARRAY_LEN(files); i++) CHECK_MSG(same_file(a, b, files[i]), "%s differs", files[i]);
    CHECK(!same_file(a, c, "model.safetensors"));
    CHECK(same_file(a, c, "config.json"));

    struct model_opts mo = model_opts_default();
    mo.train = 1, mo.lora_r = 4, mo.lora_alpha = 8;
    struct model *m;
    int rc = model_load(&m, a, &mo, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        const struct model_config *cfg = model_get_config(m);
        CHECK(cfg->arch == ARCH_QWEN3 && cfg->vocab_size == 400 && cfg->eos_token_id == 399 && cfg->tie_word_embeddings);
        CHECK((long long)model_num_params(m) == model_config_num_params(cfg));
        /* LoRA r=4 on 7 modules of 2 layers: r*(in+out) each, q 64->64, k/v 64->32, o 64->64,
         * gate/up 64->128, down 128->64. */
        CHECK(model_num_trainable(m) == 2 * 4 * ((64 + 64) + 2 * (64 + 32) + (64 + 64) + 3 * (64 + 128)));
        int ids[16], targets[16];
        for (int i = 0; i < 16; i++) ids[i] = (i * 37) % 256, targets[i] = (i * 37 + 37) % 256;
        struct model_batch batch = {.B = 1, .T = 16, .ids = ids, .targets = targets};
        float l0, l1;
        CHECK(model_forward(m, &batch, &l0, &err) == 0);
        /* Random init: the loss is near ln(vocab). */
        CHECK_MSG(l0 > 5.0f && l0 < 7.0f, "initial loss %g", l0);
        for (int s = 0; s < 5; s++) {
            model_zero_grad(m);
            CHECK(model_forward(m, &batch, &l1, &err) == 0);
            CHECK(model_backward(m, 1.0f / 16, &err) == 0);
            model_adamw_step(m, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f);
        }
        CHECK(model_forward(m, &batch, &l1, &err) == 0);
        CHECK_MSG(l1 < l0 - 0.1f, "loss %g -> %g", l0, l1);
        model_free(m);
    }
    o.heads = 3;
    CHECK(model_init_write(c, &o, &err) == -1);
    CHECK_CONTAINS(err.msg, "num_key_value_heads: 2 does not divide num_attention_heads 3");
    CHECK(model_init_preset(&o, "huge", &err) == -1);
    CHECK_CONTAINS(err.msg, "preset \"huge\" is unknown");
    char *cmd = xasprintf("rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    free(cmd), free(a), free(b), free(c);
}

int main(void) {
    RUN(init_deterministic_and_trainable);
    return test_summary();
}
