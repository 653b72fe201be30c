/* tiny_models.c - see tiny_models.h. */
#include "tiny_models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "model_init.h"
#include "rng.h"

int tiny_model_write(char *root, char *model_dir, struct whet_err *err) {
    if (!mkdtemp(root)) return whet_errf(err, "mkdtemp %s failed", root);
    snprintf(model_dir, 128, "%s/model", root);
    struct model_init_opts o;
    return model_init_preset(&o, "tiny", err) || model_init_write(model_dir, &o, err) ? -1 : 0;
}

int random_adapter_write(const char *model_dir, const char *out_dir, int r, unsigned targets, uint64_t seed,
                         float b_scale, struct whet_err *err) {
    struct model_opts o = model_opts_default();
    o.train = 1;
    o.lora_r = r;
    o.lora_alpha = 2.0f * (float)r;
    o.lora_targets = targets;
    o.seed = seed;
    struct model *m;
    if (model_load(&m, model_dir, &o, err)) return -1;
    struct rng rng;
    rng_seed(&rng, seed ^ 0x5eedb);
    int rc = 0;
    for (int t = 0; t < model_num_tensors(m) && !rc; t++) {
        const char *name = model_tensor_name(m, t);
        if (!strstr(name, "lora_B")) continue;
        long long n = model_tensor_numel(m, name);
        float *v = malloc(sizeof(float) * (size_t)n);
        for (long long i = 0; i < n; i++) v[i] = b_scale * rng_normal(&rng);
        rc = model_set_param(m, name, v, err);
        free(v);
    }
    if (!rc) rc = model_save_adapter(m, out_dir, err);
    model_free(m);
    return rc;
}
