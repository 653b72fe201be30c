/* bench_train.c - tokens/s of one training step (forward + backward + AdamW) of whet's engine, and
 * the sgemm peak of OpenBLAS on this machine. Driven by run.sh, which compares it with the same
 * model in PyTorch (bench_torch.py) in the same run.
 *
 *   bench_train peak
 *   bench_train step LAYERS HIDDEN HEADS FFN VOCAB B T LORA_R STEPS
 *
 * `step` writes a random Llama model (tied embeddings) to a temporary dir, loads it (LoRA r on all
 * linear layers, alpha 2r, or full fine-tuning when LORA_R is 0), runs one warm-up step and STEPS
 * timed ones on random tokens, and prints one JSON line: tokens/s and seconds of the fastest step
 * (the mean too), and the model FLOP/s (matmul and attention FLOPs the step needs, whatever the
 * implementation). */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "model.h"
#include "rng.h"
#include "safetensors.h"

static double now(void) { return whet_now_mono(); }

static int peak(void) {
    /* OpenBLAS threading itself (its own pool) on a large square product. */
    if (openblas_get_parallel() == 1) openblas_set_num_threads(omp_get_max_threads());
    int n = 2048;
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
    for (long i = 0; i < (long)n * n; i++) a[i] = b[i] = (float)(i % 7) * 0.1f;
    double best = 0;
    for (int rep = 0; rep < 4; rep++) {
        double t = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double g = 2.0 * n * n * n / (now() - t) / 1e9;
        best = g > best ? g : best;
    }
    /* The backend's split (one sgemm per OpenMP thread) on the same product. */
    const struct backend *be = backend_cpu();
    double best_split = 0;
    for (int rep = 0; rep < 4; rep++) {
        double t = now();
        be->gemm(0, 1, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double g = 2.0 * n * n * n / (now() - t) / 1e9;
        best_split = g > best_split ? g : best_split;
    }
    printf("{\"sgemm_gflops\": %.1f, \"backend_gemm_gflops\": %.1f, \"threads\": %d}\n", best, best_split,
           omp_get_max_threads());
    free(a), free(b), free(c);
    return 0;
}

struct writer_ctx {
    struct st_writer w;
    struct rng rng;
    float **bufs;
    int n;
};

static void add_random(void *arg, const char *name, int ndim, const int64_t *shape) {
    struct writer_ctx *c = arg;
    int64_t n = ndim > 1 ? shape[0] * shape[1] : shape[0];
    float *d = xmalloc(sizeof(float) * (size_t)n);
    /* Uniform with the standard deviation of N(0, 0.02): as good for timing, and quick to draw. */
    for (int64_t i = 0; i < n; i++) d[i] = ndim == 1 ? 1.0f : rng_uniform_range(&c->rng, -0.0346f, 0.0346f);
    c->bufs = xrealloc(c->bufs, sizeof *c->bufs * (size_t)(c->n + 1));
    c->bufs[c->n++] = d;
    st_writer_add(&c->w, name, ndim, shape, d);
}

static int step(int argc, char **argv) {
    if (argc != 11) {
        fprintf(stderr, "usage: bench_train step LAYERS HIDDEN HEADS FFN VOCAB B T LORA_R STEPS\n");
        return 2;
    }
    int L = atoi(argv[2]), C = atoi(argv[3]), NH = atoi(argv[4]), F = atoi(argv[5]), V = atoi(argv[6]);
    int B = atoi(argv[7]), T = atoi(argv[8]), r = atoi(argv[9]), steps = atoi(argv[10]);
    struct model_config cfg = {.arch = ARCH_LLAMA, .vocab_size = V, .hidden_size = C, .intermediate_size = F,
                               .n_layers = L, .n_heads = NH, .n_kv_heads = NH, .head_dim = C / NH,
                               .max_position_embeddings = 4096, .rope_theta = 10000, .rms_norm_eps = 1e-5f,
                               .tie_word_embeddings = 1, .bos_token_id = -1, .eos_token_id = -1};
    char dir[] = "/tmp/whet-bench-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    struct whet_err err;
    char *json = model_config_to_json(&cfg, "float32"), *path = xasprintf("%s/config.json", dir);
    if (whet_write_file_atomic(path, json, strlen(json), &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    free(json), free(path);
    struct writer_ctx wc = {0};
    st_writer_init(&wc.w);
    rng_seed(&wc.rng, 1);
    model_config_tensors(&cfg, add_random, &wc);
    path = xasprintf("%s/model.safetensors", dir);
    if (st_writer_write(&wc.w, path, ST_F32, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    st_writer_free(&wc.w);
    for (int i = 0; i < wc.n; i++) free(wc.bufs[i]);
    free(wc.bufs);

    struct model_opts o = model_opts_default();
    o.train = 1, o.lora_r = r, o.lora_alpha = 2.0f * r, o.lora_targets = LORA_ALL, o.seed = 1;
    struct model *m;
    if (model_load(&m, dir, &o, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    unlink(path);
    free(path);
    path = xasprintf("%s/config.json", dir);
    unlink(path);
    free(path);
    rmdir(dir);

    int N = B * T;
    int *ids = malloc(sizeof(int) * N), *targets = malloc(sizeof(int) * N);
    struct rng rr;
    rng_seed(&rr, 2);
    for (int i = 0; i < N; i++) ids[i] = (int)rng_below(&rr, (uint64_t)V);
    for (int i = 0; i < N; i++) targets[i] = (i + 1) % T ? ids[i + 1] : -1;
    struct model_batch b = {.B = B, .T = T, .ids = ids, .targets = targets};
    double total = 0, best = 1e30;
    float loss = 0;
    for (int s = 0; s <= steps; s++) {
        double t = now();
        model_zero_grad(m);
        if (model_forward(m, &b, &loss, &err) ||
            model_backward(m, (float)(1.0 / model_last_stats(m).weight_sum), &err))
            return fprintf(stderr, "%s\n", err.msg), 1;
        model_clip_grad_norm(m, 1.0f);
        model_adamw_step(m, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f);
        double dt = now() - t;
        if (s > 0) total += dt, best = dt < best ? dt : best; /* step 0 warms up (allocation, page faults) */
    }
    /* The fastest step: on a shared machine the mean mostly measures the neighbours. */
    double per = best;
    /* FLOPs: matmuls 2*N*params forward; attention QK^T and PV over the causal half. */
    double qkv = 3.0 * C * C, mm = L * (qkv + (double)C * C + 3.0 * C * F), head = (double)C * V;
    double fwd = 2.0 * N * (mm + head), att = L * 2.0 * 2.0 * N * (T / 2.0) * C;
    double flops = r ? fwd + att /* forward */ + 2.0 * N * (mm + head) + 2 * att /* input grads */
                     : 3 * fwd + 3 * att;
    printf("{\"impl\": \"whet\", \"params\": %zu, \"trainable\": %zu, \"B\": %d, \"T\": %d, \"lora_r\": %d, "
           "\"s_per_step\": %.4f, \"mean_s_per_step\": %.4f, \"tokens_per_s\": %.1f, \"gflops\": %.1f, "
           "\"loss\": %.4f}\n",
           model_num_params(m), model_num_trainable(m), B, T, r, per, total / steps, N / per, flops / per / 1e9, loss);
    free(ids), free(targets);
    model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "peak")) return peak();
    if (argc >= 2 && !strcmp(argv[1], "step")) return step(argc, argv);
    fprintf(stderr, "usage: bench_train peak | step LAYERS HIDDEN HEADS FFN VOCAB B T LORA_R STEPS\n");
    return 2;
}
