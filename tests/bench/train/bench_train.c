/* bench_train.c - tokens/s of one training step (forward + backward + AdamW) of whet's engine, and
 * the sgemm peak of OpenBLAS on this machine. Driven by run.sh, which compares it with the same
 * model in PyTorch (bench_torch.py) in the same run.
 *
 *   bench_train peak
 *   bench_train step LAYERS HIDDEN HEADS FFN VOCAB B T LORA_R STEPS [DEVICE]
 *   bench_train profile LAYERS HIDDEN HEADS FFN VOCAB B T LORA_R STEPS [DEVICE]
 *   bench_train paired LAYERS HIDDEN HEADS FFN VOCAB B T LORA_R STEPS
 *
 * `step` writes a random Llama model (tied embeddings) to a temporary dir, loads it (LoRA r on all
 * linear layers, alpha 2r, or full fine-tuning when LORA_R is 0), runs one warm-up step and STEPS
 * timed ones on random tokens, and prints one JSON line: tokens/s and seconds of the fastest step
 * (the mean too), and the model FLOP/s (matmul and attention FLOPs the step needs, whatever the
 * implementation), and the process CPU seconds of a step (all threads: the work, whatever the load).
 * `profile` does the same and then prints the time of every backend op per step (see below).
 * `paired` waits for a line on stdin before each step and prints {"step", "s", "cpu_s"} after it, so
 * a driver (pairs.py) can alternate the steps of whet and PyTorch one by one.
 * DEVICE (default cpu) is the model's device, as a trainer config names it ("cuda", "cuda:1"). On a GPU a
 * step's AdamW is queued, not waited for: the next step's forward (which waits for its loss) pays it, so
 * each timed step holds one AdamW, the previous step's. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "model.h"
#include "rng.h"
#include "safetensors.h"

static double now(void) { return whet_now_mono(); }

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* GFLOP/s of a large square sgemm, the best of four, per wall second and per CPU second (all
 * threads): on a shared machine the first depends on the neighbours, the second much less. */
static int peak(void) {
    /* OpenBLAS threading itself (its own pool) on a large square product. */
    if (openblas_get_parallel() == 1) openblas_set_num_threads(omp_get_max_threads());
    int n = 2048;
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
    for (long i = 0; i < (long)n * n; i++) a[i] = b[i] = (float)(i % 7) * 0.1f;
    double flop = 2.0 * n * n * n, best = 0, best_cpu = 0;
    for (int rep = 0; rep < 4; rep++) {
        double t = now(), tc = cpu_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double g = flop / (now() - t) / 1e9, gc = flop / (cpu_now() - tc) / 1e9;
        best = g > best ? g : best;
        best_cpu = gc > best_cpu ? gc : best_cpu;
    }
    /* The backend's split (one sgemm per OpenMP thread) on the same product. */
    struct backend *be;
    struct whet_err err;
    if (backend_cpu_open(&be, &err)) return 1;
    double best_split = 0;
    for (int rep = 0; rep < 4; rep++) {
        double t = now();
        be->gemm(be, 0, 1, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double g = flop / (now() - t) / 1e9;
        best_split = g > best_split ? g : best_split;
    }
    printf("{\"sgemm_gflops\": %.1f, \"sgemm_gflops_per_cpu_s\": %.1f, \"backend_gemm_gflops\": %.1f, "
           "\"threads\": %d}\n",
           best, best_cpu, best_split, omp_get_max_threads());
    free(a), free(b), free(c);
    be->close(be);
    return 0;
}

/* ---------------------------------------------------------------- profile ---- */

/* `bench_train profile ...` times every backend call of the steps: run.sh links this program with
 * -Wl,--wrap=backend_open, so the model's backend_open lands in __wrap_backend_open below, which keeps
 * the real op table and points the instance's ops at timed ones that call it. Matrix products are kept
 * apart by op and shape (the caller's M, N, K), the rest by op. Wall and process CPU seconds: on a
 * shared machine the CPU seconds say how much work an op is, the wall seconds how long it waited. The
 * CPU's ops finish inside the call; a device's are queued, so on a device each timed op waits for the
 * queue before and after it (a zero-byte download): the op's own time, at the cost of the overlap the
 * queue gives a step, so the table's total exceeds an untimed step's. */
int __real_backend_open(struct backend **out, const char *device, struct whet_err *err);
int __wrap_backend_open(struct backend **out, const char *device, struct whet_err *err);
static struct backend real;
static int want_profile, profiling; /* the timed table is handed out; the calls now are booked */
static int queued_ops;              /* the instance is a device's: its ops return before they finish */

static void wait_for_device(struct backend *be) {
    char none;
    if (queued_ops) real.download(be, &none, NULL, 0);
}

struct prof_row {
    char key[96];
    double wall, cpu, flops;
    long calls;
};
static struct prof_row prof_rows[256];
static int n_prof_rows;

static void prof_add(const char *key, double wall, double cpu, double flops) {
    if (!profiling) return;
    int i = 0;
    while (i < n_prof_rows && strcmp(prof_rows[i].key, key)) i++;
    if (i == n_prof_rows) {
        if (n_prof_rows == 256) return;
        snprintf(prof_rows[n_prof_rows++].key, sizeof prof_rows[0].key, "%s", key);
    }
    prof_rows[i].wall += wall, prof_rows[i].cpu += cpu, prof_rows[i].flops += flops, prof_rows[i].calls++;
}

/* Runs CALL and books its time under the printf-style key. */
#define TIMED(flops, call, ...)                                                                                        \
    do {                                                                                                               \
        wait_for_device(be);                                                                                           \
        double w0 = now(), c0 = cpu_now();                                                                             \
        call;                                                                                                          \
        wait_for_device(be);                                                                                           \
        char k[96];                                                                                                    \
        snprintf(k, sizeof k, __VA_ARGS__);                                                                            \
        prof_add(k, now() - w0, cpu_now() - c0, flops);                                                                \
    } while (0)

static void t_zero(struct backend *be, void *p, size_t bytes) { TIMED(0, real.zero(be, p, bytes), "zero"); }
static void t_copy(struct backend *be, void *d, const void *s, size_t bytes) { TIMED(0, real.copy(be, d, s, bytes), "copy"); }
static void t_gemm(struct backend *be, int ta, int tb, int M, int N, int K, float alpha, const float *a, int lda, const float *b, int ldb,
                   float beta, float *c, int ldc) {
    TIMED(2.0 * M * N * K, real.gemm(be, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc), "gemm %c%c %dx%dx%d",
          ta ? 't' : 'n', tb ? 't' : 'n', M, N, K);
}
static void t_matmul_forward(struct backend *be, float *out, int ldo, const float *inp, int ldi, const float *w, const float *bias, int N,
                             int C, int OC, float beta) {
    TIMED(2.0 * N * C * OC, real.matmul_forward(be, out, ldo, inp, ldi, w, bias, N, C, OC, beta), "mm_fwd N%d C%d OC%d",
          N, C, OC);
}
static void t_matmul_backward(struct backend *be, float *dinp, int lddi, float *dw, float *db, const float *dout, int lddo, const float *inp,
                              int ldi, const float *w, int N, int C, int OC) {
    double f = 2.0 * N * C * OC * ((dinp != NULL) + (dw != NULL));
    TIMED(f, real.matmul_backward(be, dinp, lddi, dw, db, dout, lddo, inp, ldi, w, N, C, OC),
          "mm_bwd N%d C%d OC%d%s%s", N, C, OC, dinp ? " dx" : "", dw ? " dw" : "");
}
static void t_embedding_forward(struct backend *be, float *out, const int *ids, const float *wte, int N, int C) {
    TIMED(0, real.embedding_forward(be, out, ids, wte, N, C), "embedding_fwd");
}
static void t_embedding_backward(struct backend *be, float *dwte, const float *dout, const int *ids, int N, int C) {
    TIMED(0, real.embedding_backward(be, dwte, dout, ids, N, C), "embedding_bwd");
}
static void t_rmsnorm_forward(struct backend *be, float *out, int ldo, float *rstd, const float *inp, int ldi, const float *w, int N, int H,
                              int D, float eps) {
    TIMED(0, real.rmsnorm_forward(be, out, ldo, rstd, inp, ldi, w, N, H, D, eps), "rmsnorm_fwd");
}
static void t_rmsnorm_backward(struct backend *be, float *dinp, int lddi, float *dw, const float *dout, int lddo, const float *inp, int ldi,
                               const float *w, const float *rstd, int N, int H, int D) {
    TIMED(0, real.rmsnorm_backward(be, dinp, lddi, dw, dout, lddo, inp, ldi, w, rstd, N, H, D), "rmsnorm_bwd");
}
static void t_rope_forward(struct backend *be, float *x, int ldx, const int *pos, const float *cs, int N, int H, int D) {
    TIMED(0, real.rope_forward(be, x, ldx, pos, cs, N, H, D), "rope_fwd");
}
static void t_rope_backward(struct backend *be, float *x, int ldx, const int *pos, const float *cs, int N, int H, int D) {
    TIMED(0, real.rope_backward(be, x, ldx, pos, cs, N, H, D), "rope_bwd");
}
static void t_swiglu_forward(struct backend *be, float *out, const float *gu, int N, int F) {
    TIMED(0, real.swiglu_forward(be, out, gu, N, F), "swiglu_fwd");
}
static void t_swiglu_backward(struct backend *be, float *dgu, const float *dout, const float *gu, int N, int F) {
    TIMED(0, real.swiglu_backward(be, dgu, dout, gu, N, F), "swiglu_bwd");
}
static void t_axpy(struct backend *be, float *y, const float *x, float alpha, size_t n) { TIMED(0, real.axpy(be, y, x, alpha, n), "axpy"); }
static void t_gather_rows(struct backend *be, float *d, const float *s, const int *rows, int n, int C) {
    TIMED(0, real.gather_rows(be, d, s, rows, n, C), "gather_rows");
}
static void t_scatter_add_rows(struct backend *be, float *d, const float *s, const int *rows, int n, int C) {
    TIMED(0, real.scatter_add_rows(be, d, s, rows, n, C), "scatter_add_rows");
}
static void t_attention_forward(struct backend *be, float *out, float *lse, const float *q, int ldq, const float *k,
                                int ldk, const float *v, int ldv, const struct attn_segment *segs,
                                const struct attn_segment *host_segs, int n_segs, int N, int T, int H, int HKV, int D) {
    TIMED(0, real.attention_forward(be, out, lse, q, ldq, k, ldk, v, ldv, segs, host_segs, n_segs, N, T, H, HKV, D),
          "attention_fwd");
}
static void t_attention_backward(struct backend *be, float *dq, int lddq, float *dk, int lddk, float *dv, int lddv,
                                 const float *dout, const float *lse, const float *q, int ldq, const float *k, int ldk,
                                 const float *v, int ldv, const struct attn_segment *segs,
                                 const struct attn_segment *host_segs, int n_segs, int N, int T, int H, int HKV,
                                 int D) {
    TIMED(0,
          real.attention_backward(be, dq, lddq, dk, lddk, dv, lddv, dout, lse, q, ldq, k, ldk, v, ldv, segs, host_segs,
                                  n_segs, N, T, H, HKV, D),
          "attention_bwd");
}
static void t_crossentropy_forward(struct backend *be, float *losses, float *lse, int *correct, const float *logits, const int *targets,
                                   int M, int V) {
    TIMED(0, real.crossentropy_forward(be, losses, lse, correct, logits, targets, M, V), "crossentropy_fwd");
}
static void t_crossentropy_backward(struct backend *be, float *logits, const float *lse, const int *targets, const float *w, float scale,
                                    int M, int V) {
    TIMED(0, real.crossentropy_backward(be, logits, lse, targets, w, scale, M, V), "crossentropy_bwd");
}
static void t_adamw(struct backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps,
                    float wd, float bc1, float bc2) {
    TIMED(0, real.adamw(be, p, g, m, v, n, lr, b1, b2, eps, wd, bc1, bc2), "adamw");
}
static void t_sumsq(struct backend *be, double *out, const float *x, size_t n) {
    TIMED(0, real.sumsq(be, out, x, n), "sumsq");
}
static void t_scale(struct backend *be, float *x, float s, size_t n) { TIMED(0, real.scale(be, x, s, n), "scale"); }
static void t_loss_stats(struct backend *be, double *last, double *acc, const float *losses, const float *w,
                         const int *correct, int M) {
    TIMED(0, real.loss_stats(be, last, acc, losses, w, correct, M), "loss_stats");
}
static void t_clip_by_norm(struct backend *be, float *x, size_t n, const double *sumsq, float max_norm) {
    TIMED(0, real.clip_by_norm(be, x, n, sumsq, max_norm), "clip_by_norm");
}

int __wrap_backend_open(struct backend **out, const char *device, struct whet_err *err) {
    int rc = __real_backend_open(out, device, err);
    if (rc || !want_profile) return rc;
    struct backend *t = *out;
    real = *t;
    queued_ops = strcmp(t->name, "cpu") != 0;
    t->zero = t_zero, t->copy = t_copy, t->gemm = t_gemm;
    t->matmul_forward = t_matmul_forward, t->matmul_backward = t_matmul_backward;
    t->embedding_forward = t_embedding_forward, t->embedding_backward = t_embedding_backward;
    t->rmsnorm_forward = t_rmsnorm_forward, t->rmsnorm_backward = t_rmsnorm_backward;
    t->rope_forward = t_rope_forward, t->rope_backward = t_rope_backward;
    t->swiglu_forward = t_swiglu_forward, t->swiglu_backward = t_swiglu_backward;
    t->axpy = t_axpy, t->gather_rows = t_gather_rows, t->scatter_add_rows = t_scatter_add_rows;
    t->attention_forward = t_attention_forward, t->attention_backward = t_attention_backward;
    t->crossentropy_forward = t_crossentropy_forward, t->crossentropy_backward = t_crossentropy_backward;
    t->adamw = t_adamw, t->sumsq = t_sumsq, t->scale = t_scale, t->loss_stats = t_loss_stats;
    t->clip_by_norm = t_clip_by_norm;
    return 0;
}

static int cmp_rows(const void *a, const void *b) {
    double x = ((const struct prof_row *)a)->wall, y = ((const struct prof_row *)b)->wall;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The table of the timed steps, per step, the most expensive first. */
static void prof_print(int steps, double step_wall, double step_cpu) {
    qsort(prof_rows, (size_t)n_prof_rows, sizeof prof_rows[0], cmp_rows);
    double wall = 0, cpu = 0;
    printf("%-40s %6s %9s %9s %8s\n", "op (per step)", "calls", "wall ms", "cpu ms", "GFLOP/s");
    for (int i = 0; i < n_prof_rows; i++) {
        struct prof_row *r = &prof_rows[i];
        wall += r->wall, cpu += r->cpu;
        printf("%-40s %6ld %9.1f %9.1f", r->key, r->calls / steps, 1e3 * r->wall / steps, 1e3 * r->cpu / steps);
        if (r->flops > 0) printf(" %8.1f", r->flops / r->wall / 1e9);
        printf("\n");
    }
    printf("%-40s %6s %9.1f %9.1f\n", "backend total", "", 1e3 * wall / steps, 1e3 * cpu / steps);
    printf("%-40s %6s %9.1f %9.1f\n", "step", "", 1e3 * step_wall / steps, 1e3 * step_cpu / steps);
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
    if (argc != 11 && argc != 12) {
        fprintf(stderr,
                "usage: bench_train step|profile|paired LAYERS HIDDEN HEADS FFN VOCAB B T LORA_R STEPS [DEVICE]\n");
        return 2;
    }
    want_profile = !strcmp(argv[1], "profile");
    int paired = !strcmp(argv[1], "paired");
    int L = atoi(argv[2]), C = atoi(argv[3]), NH = atoi(argv[4]), F = atoi(argv[5]), V = atoi(argv[6]);
    int B = atoi(argv[7]), T = atoi(argv[8]), r = atoi(argv[9]), steps = atoi(argv[10]);
    if (steps < 1) {
        fprintf(stderr, "bench_train: STEPS must be at least 1\n");
        return 2;
    }
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
    o.device = argc == 12 ? argv[11] : "cpu";
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
    double total = 0, best = 1e30, total_cpu = 0;
    float loss = 0;
    for (int s = 0; s <= steps; s++) {
        profiling = want_profile && s > 0;
        char go[16];
        if (paired && !fgets(go, sizeof go, stdin)) break; /* the driver hangs up: stop */
        double t = now(), c = cpu_now();
        model_zero_grad(m);
        if (model_forward(m, &b, &loss, &err) ||
            model_backward(m, (float)(1.0 / model_last_stats(m).weight_sum), &err))
            return fprintf(stderr, "%s\n", err.msg), 1;
        model_clip_grad_norm(m, 1.0f);
        model_adamw_step(m, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f);
        double dt = now() - t;
        double dc = cpu_now() - c;
        if (s > 0) total += dt, total_cpu += dc, best = dt < best ? dt : best; /* step 0 warms up */
        if (paired) printf("{\"step\": %d, \"s\": %.4f, \"cpu_s\": %.4f}\n", s, dt, dc), fflush(stdout);
    }
    /* The fastest step: on a shared machine the mean mostly measures the neighbours. */
    double per = best;
    /* FLOPs: matmuls 2*N*params forward; attention QK^T and PV over the causal half. */
    double qkv = 3.0 * C * C, mm = L * (qkv + (double)C * C + 3.0 * C * F), head = (double)C * V;
    double fwd = 2.0 * N * (mm + head), att = L * 2.0 * 2.0 * N * (T / 2.0) * C;
    double flops = r ? fwd + att /* forward */ + 2.0 * N * (mm + head) + 2 * att /* input grads */
                     : 3 * fwd + 3 * att;
    printf("{\"impl\": \"whet\", \"params\": %zu, \"trainable\": %zu, \"B\": %d, \"T\": %d, \"lora_r\": %d, "
           "\"s_per_step\": %.4f, \"mean_s_per_step\": %.4f, \"cpu_s_per_step\": %.4f, \"tokens_per_s\": %.1f, "
           "\"gflops\": %.1f, \"gflops_per_cpu_s\": %.1f, \"loss\": %.4f, \"device\": \"%s\"}\n",
           model_num_params(m), model_num_trainable(m), B, T, r, per, total / steps, total_cpu / steps, N / per,
           flops / per / 1e9, flops / (total_cpu / steps) / 1e9, loss, o.device);
    if (want_profile) prof_print(steps, total, total_cpu);
    free(ids), free(targets);
    model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "peak")) return peak();
    if (argc >= 2 && (!strcmp(argv[1], "step") || !strcmp(argv[1], "profile") || !strcmp(argv[1], "paired")))
        return step(argc, argv);
    fprintf(stderr, "usage: bench_train peak | step|profile|paired LAYERS HIDDEN HEADS FFN VOCAB B T LORA_R STEPS\n");
    return 2;
}
