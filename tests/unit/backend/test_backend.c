/* test_backend.c - every op of every backend this machine can open, against a plain reference.
 *
 * The references are written for clarity (double precision, the textbook formula, no blocking);
 * each forward op is compared with its reference, and each backward op with the gradient its
 * forward op implies, by central finite differences through the backend itself (so a backward that
 * disagrees with its own forward fails whatever the reference says). Sampling is checked against a
 * brute-force sort, for the distribution it draws from, and for the same draws from the same (seed,
 * counter). The CPU backend always runs; "cuda" runs where backend_open finds a device (the GPU
 * script tests/gpu/run.sh), and is reported as not present otherwise. Tolerances are stated per op:
 * the CPU computes in fp32 with a polynomial exp (relative error 3e-7). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "rng.h"
#include "test.h"

static struct backend *be;
static struct rng rng;

/* ---------------------------------------------------------------- helpers */

static float *host_random(size_t n, float scale) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) h[i] = scale * rng_normal(&rng);
    return h;
}

static void *dev_from(const void *host, size_t bytes) {
    struct whet_err err;
    void *d = be->alloc(be, bytes, &err);
    if (!d) abort();
    be->upload(be, d, host, bytes);
    return d;
}
static float *devf(const float *host, size_t n) { return dev_from(host, sizeof(float) * n); }
static int *devi(const int *host, size_t n) { return dev_from(host, sizeof(int) * n); }
static float *dev_zeros(size_t n) {
    struct whet_err err;
    float *d = be->alloc(be, sizeof(float) * (n ? n : 1), &err);
    if (!d) abort();
    return d;
}
static float *host_of(const float *d, size_t n) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    be->download(be, h, d, sizeof(float) * n);
    return h;
}

/* Largest |a - b| / (atol/rtol scaled) over n values: <= 1 passes. */
static double worst(const float *got, const double *want, size_t n, double atol, double rtol) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (atol + rtol * fabs(want[i]));
        if (!(e <= w)) w = e; /* NaN counts as worst */
    }
    return w;
}

static double dot_host(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* ---------------------------------------------------------------- memory */

TEST(memory_ops) {
    struct whet_err err;
    float h[64], back[64];
    for (int i = 0; i < 64; i++) h[i] = (float)i;
    float *a = devf(h, 64), *b = dev_zeros(64);
    be->copy(be, b, a + 8, sizeof(float) * 32);
    be->zero(be, a, sizeof(float) * 16);
    be->download(be, back, b, sizeof back);
    CHECK(back[0] == 8 && back[31] == 39 && back[32] == 0);
    be->download(be, back, a, sizeof back);
    CHECK(back[15] == 0 && back[16] == 16);
    size_t free_bytes = 0, total = 0;
    be->mem_info(be, &free_bytes, &total);
    CHECK(total > 0 && free_bytes <= total);
    /* more than the device has: an error that says so, not an abort */
    void *huge = be->alloc(be, (size_t)1 << 62, &err);
    CHECK(huge == NULL);
    CHECK_MSG(strstr(err.msg, "out of") && strstr(err.msg, "memory: needed") && strstr(err.msg, "GiB free"), "%s",
              err.msg);
    be->free(be, a);
    be->free(be, b);
}

/* release: the bytes read as zero afterwards, those around them are untouched, and they can be written
 * again; over whole pages of a big buffer (the CPU gives those back) and within one page. */
TEST(release_zeroes_only_its_bytes) {
    size_t n = (size_t)3 << 20; /* 12 MiB: whole pages inside the range */
    float *h = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) h[i] = (float)(i % 1000) + 1;
    float *d = devf(h, n);
    size_t lo = 12345, hi = n - 54321, small_lo = 7, small_hi = 300;
    be->release(be, d + lo, sizeof(float) * (hi - lo));
    be->release(be, d + small_lo, sizeof(float) * (small_hi - small_lo));
    float *back = host_of(d, n);
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) {
        int released = (i >= lo && i < hi) || (i >= small_lo && i < small_hi);
        wrong += back[i] != (released ? 0.0f : h[i]);
    }
    CHECK_MSG(wrong == 0, "%zu values wrong after release", wrong);
    be->upload(be, d + lo, h + lo, sizeof(float) * (hi - lo)); /* written again: it holds what was written */
    be->download(be, back, d, sizeof(float) * n);
    CHECK(back[lo] == h[lo] && back[hi - 1] == h[hi - 1] && back[n / 2] == h[n / 2] && back[small_lo] == 0);
    free(back);
    free(h);
    be->free(be, d);
}

/* ---------------------------------------------------------------- matrix products */

TEST(gemm_all_transposes) {
    enum { M = 37, N = 29, K = 41 };
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;
            float *a = host_random((size_t)(ta ? K : M) * lda, 1), *b = host_random((size_t)(tb ? N : K) * ldb, 1);
            float *c = host_random((size_t)M * ldc, 1);
            double *want = calloc((size_t)M * ldc, sizeof *want);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < ldc; j++) {
                    double s = 0;
                    if (j < N)
                        for (int k = 0; k < K; k++)
                            s += (double)(ta ? a[(size_t)k * lda + i] : a[(size_t)i * lda + k]) *
                                 (tb ? b[(size_t)j * ldb + k] : b[(size_t)k * ldb + j]);
                    double c0 = c[(size_t)i * ldc + j];
                    want[(size_t)i * ldc + j] = j < N ? 0.5 * s + 0.25 * c0 : c0;
                }
            float *da = devf(a, (size_t)(ta ? K : M) * lda), *db = devf(b, (size_t)(tb ? N : K) * ldb);
            float *dc = devf(c, (size_t)M * ldc);
            be->gemm(be, ta, tb, M, N, K, 0.5f, da, lda, db, ldb, 0.25f, dc, ldc);
            float *got = host_of(dc, (size_t)M * ldc);
            CHECK_MSG(worst(got, want, (size_t)M * ldc, 1e-4, 1e-4) <= 1, "gemm ta=%d tb=%d", ta, tb);
            be->free(be, da), be->free(be, db), be->free(be, dc);
            free(a), free(b), free(c), free(want), free(got);
        }
}

TEST(matmul_forward_and_backward) {
    enum { N = 19, C = 24, OC = 13, LDI = 30, LDO = 17 };
    float *inp = host_random((size_t)N * LDI, 1), *w = host_random((size_t)OC * C, 0.5f), *bias = host_random(OC, 1);
    float *out0 = host_random((size_t)N * LDO, 1);
    double *want = malloc(sizeof(double) * N * LDO);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < LDO; o++) {
            double s = 0;
            if (o < OC) {
                for (int c = 0; c < C; c++) s += (double)inp[n * LDI + c] * w[o * C + c];
                s += bias[o] + 0.5 * out0[n * LDO + o];
            }
            want[n * LDO + o] = o < OC ? s : out0[n * LDO + o];
        }
    float *di = devf(inp, (size_t)N * LDI), *dw = devf(w, (size_t)OC * C), *db = devf(bias, OC);
    float *dout = devf(out0, (size_t)N * LDO);
    be->matmul_forward(be, dout, LDO, di, LDI, dw, db, N, C, OC, 0.5f);
    float *got = host_of(dout, (size_t)N * LDO);
    CHECK(worst(got, want, (size_t)N * LDO, 1e-4, 1e-4) <= 1);
    /* backward: loss = sum(out * g); dinp = g @ W, dW = g^T @ inp, dbias = sum g; all accumulate */
    float *g = host_random((size_t)N * LDO, 1);
    float *dg = devf(g, (size_t)N * LDO), *dinp = dev_zeros((size_t)N * C), *dwg = dev_zeros((size_t)OC * C);
    float *dbg = dev_zeros(OC);
    be->matmul_backward(be, dinp, C, dwg, dbg, dg, LDO, di, LDI, dw, N, C, OC);
    be->matmul_backward(be, dinp, C, dwg, dbg, dg, LDO, di, LDI, dw, N, C, OC); /* twice: 2x */
    double *wi = calloc((size_t)N * C, sizeof *wi), *ww = calloc((size_t)OC * C, sizeof *ww);
    double *wb = calloc(OC, sizeof *wb);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double go = 2.0 * g[n * LDO + o];
            wb[o] += go;
            for (int c = 0; c < C; c++) {
                wi[n * C + c] += go * w[o * C + c];
                ww[o * C + c] += go * inp[n * LDI + c];
            }
        }
    float *gi = host_of(dinp, (size_t)N * C), *gw = host_of(dwg, (size_t)OC * C), *gb = host_of(dbg, OC);
    CHECK(worst(gi, wi, (size_t)N * C, 1e-4, 1e-4) <= 1);
    CHECK(worst(gw, ww, (size_t)OC * C, 1e-4, 1e-4) <= 1);
    CHECK(worst(gb, wb, OC, 1e-4, 1e-4) <= 1);
    be->free(be, di), be->free(be, dw), be->free(be, db), be->free(be, dout), be->free(be, dg);
    be->free(be, dinp), be->free(be, dwg), be->free(be, dbg);
    free(inp), free(w), free(bias), free(out0), free(want), free(got), free(g), free(wi), free(ww), free(wb);
    free(gi), free(gw), free(gb);
}

/* ---------------------------------------------------------------- embedding, rows */

TEST(embedding_and_rows) {
    enum { V = 11, C = 7, N = 9 };
    int ids[N] = {3, 0, 3, 10, 5, 3, 1, 0, 9};
    float *wte = host_random(V * C, 1), *g = host_random(N * C, 1);
    float *dwte = devf(wte, V * C), *dout = dev_zeros(N * C), *dg = devf(g, N * C), *dgrad = dev_zeros(V * C);
    int *dids = devi(ids, N);
    be->embedding_forward(be, dout, dids, dwte, N, C);
    be->embedding_backward(be, dgrad, dg, dids, N, C);
    float *out = host_of(dout, N * C), *grad = host_of(dgrad, V * C);
    double want_out[N * C], want_grad[V * C];
    memset(want_grad, 0, sizeof want_grad);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            want_out[n * C + c] = wte[ids[n] * C + c];
            want_grad[ids[n] * C + c] += g[n * C + c];
        }
    CHECK(worst(out, want_out, N * C, 1e-30, 0) <= 1); /* a copy: exact */
    CHECK(worst(grad, want_grad, V * C, 1e-6, 1e-6) <= 1);
    /* gather, scatter-add, set rows (a KV cache write with a source stride) */
    int rows[4] = {8, 2, 5, 0};
    int *drows = devi(rows, 4);
    float *gathered = dev_zeros(4 * C);
    be->gather_rows(be, gathered, dwte, drows, 4, C);
    be->scatter_add_rows(be, dgrad, gathered, drows, 4, C);
    be->set_rows(be, dwte, drows, dg, 2 * C, 4, C); /* rows[i] <- g row 2i */
    float *gath = host_of(gathered, 4 * C), *grad2 = host_of(dgrad, V * C), *set = host_of(dwte, V * C);
    int ok = 1;
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < C; c++) {
            ok &= gath[i * C + c] == wte[rows[i] * C + c];
            ok &= fabs(grad2[rows[i] * C + c] - (want_grad[rows[i] * C + c] + wte[rows[i] * C + c])) < 1e-5;
            ok &= set[rows[i] * C + c] == g[2 * i * C + c];
        }
    ok &= set[1 * C] == wte[1 * C]; /* a row not listed is untouched */
    CHECK(ok);
    be->free(be, dwte), be->free(be, dout), be->free(be, dg), be->free(be, dgrad), be->free(be, dids);
    be->free(be, drows), be->free(be, gathered);
    free(wte), free(g), free(out), free(grad), free(gath), free(grad2), free(set);
}

/* ---------------------------------------------------------------- normalisation, RoPE, SwiGLU */

/* sum(g * f(x)) for the forward op under test, evaluated through the backend. */
typedef double (*scalar_fn)(const float *x_host, void *ctx);

/* Central differences of fn at x[i] for a sample of i; compares with grad[i]. */
static double fd_worst(scalar_fn fn, void *ctx, float *x, size_t n, const float *grad, float eps, double atol,
                       double rtol) {
    double w = 0;
    for (size_t i = 0; i < n; i += 1 + n / 40) {
        float keep = x[i];
        x[i] = keep + eps;
        double up = fn(x, ctx);
        x[i] = keep - eps;
        double down = fn(x, ctx);
        x[i] = keep;
        double fd = (up - down) / (2.0 * eps);
        double e = fabs(grad[i] - fd) / (atol + rtol * fabs(fd));
        if (!(e <= w)) w = e;
    }
    return w;
}

struct norm_case {
    int N, H, D, ld;
    const float *weight, *g;
    float eps;
};

static double rmsnorm_objective(const float *x, void *arg) {
    const struct norm_case *k = arg;
    size_t n = (size_t)k->N * k->ld;
    float *dx = devf(x, n), *dw = devf(k->weight, k->D), *out = dev_zeros(n), *rstd = dev_zeros((size_t)k->N * k->H);
    be->rmsnorm_forward(be, out, k->ld, rstd, dx, k->ld, dw, k->N, k->H, k->D, k->eps);
    float *h = host_of(out, n);
    double s = dot_host(h, k->g, n);
    be->free(be, dx), be->free(be, dw), be->free(be, out), be->free(be, rstd);
    free(h);
    return s;
}

TEST(rmsnorm_per_head_with_strides) {
    enum { N = 5, H = 3, D = 8, LD = H * D + 4 };
    float *x = host_random(N * LD, 1), *w = host_random(D, 1), *g = host_random(N * LD, 1);
    for (int n = 0; n < N; n++) /* the padding columns carry no gradient */
        for (int j = H * D; j < LD; j++) g[n * LD + j] = 0;
    struct norm_case k = {N, H, D, LD, w, g, 1e-6f};
    float *dx = devf(x, N * LD), *dw = devf(w, D), *out = dev_zeros(N * LD), *rstd = dev_zeros(N * H);
    be->rmsnorm_forward(be, out, LD, rstd, dx, LD, dw, N, H, D, k.eps);
    float *h = host_of(out, N * LD);
    /* the reference: x * s * w per head, s the reciprocal RMS; and dweight = sum of g * x * s */
    double want[N * LD], want_gw[D] = {0};
    for (int n = 0; n < N; n++) {
        for (int hh = 0; hh < H; hh++) {
            const float *r = x + n * LD + hh * D;
            double ss = 0;
            for (int i = 0; i < D; i++) ss += (double)r[i] * r[i];
            double s = 1 / sqrt(ss / D + k.eps);
            for (int i = 0; i < D; i++) {
                want[n * LD + hh * D + i] = r[i] * s * w[i];
                want_gw[i] += g[n * LD + hh * D + i] * r[i] * s;
            }
        }
        for (int j = H * D; j < LD; j++) want[n * LD + j] = 0;
    }
    CHECK(worst(h, want, N * LD, 1e-5, 1e-4) <= 1);
    /* backward against finite differences of the forward */
    float *dg = devf(g, N * LD), *dxg = dev_zeros(N * LD), *dwg = dev_zeros(D);
    be->rmsnorm_backward(be, dxg, LD, dwg, dg, LD, dx, LD, dw, rstd, N, H, D);
    float *gx = host_of(dxg, N * LD);
    CHECK(fd_worst(rmsnorm_objective, &k, x, N * LD, gx, 1e-2f, 2e-3, 2e-2) <= 1);
    float *gw = host_of(dwg, D);
    CHECK(worst(gw, want_gw, D, 1e-4, 1e-4) <= 1);
    be->free(be, dx), be->free(be, dw), be->free(be, out), be->free(be, rstd), be->free(be, dg);
    be->free(be, dxg), be->free(be, dwg);
    free(x), free(w), free(g), free(h), free(gx), free(gw);
}

TEST(rope_rotates_and_unrotates) {
    enum { N = 6, H = 2, D = 8, LD = H * D + 2, P = 16 };
    float cs[P * D];
    for (int p = 0; p < P; p++)
        for (int i = 0; i < D / 2; i++) {
            double a = p * pow(10000.0, -2.0 * i / D);
            cs[p * D + i] = (float)cos(a), cs[p * D + D / 2 + i] = (float)sin(a);
        }
    int pos[N] = {0, 1, 2, 7, 3, 15};
    float *x = host_random(N * LD, 1);
    float *dx = devf(x, N * LD), *dcs = devf(cs, P * D);
    int *dpos = devi(pos, N);
    be->rope_forward(be, dx, LD, dpos, dcs, N, H, D);
    float *h = host_of(dx, N * LD);
    double want[N * LD];
    for (int n = 0; n < N; n++) {
        for (int hh = 0; hh < H; hh++)
            for (int i = 0; i < D / 2; i++) {
                double c = cs[pos[n] * D + i], s = cs[pos[n] * D + D / 2 + i];
                double a = x[n * LD + hh * D + i], b = x[n * LD + hh * D + D / 2 + i];
                want[n * LD + hh * D + i] = a * c - b * s;
                want[n * LD + hh * D + D / 2 + i] = b * c + a * s;
            }
        for (int j = H * D; j < LD; j++) want[n * LD + j] = x[n * LD + j];
    }
    CHECK(worst(h, want, N * LD, 1e-5, 1e-5) <= 1);
    be->rope_backward(be, dx, LD, dpos, dcs, N, H, D); /* the inverse rotation */
    float *back = host_of(dx, N * LD);
    double orig[N * LD];
    for (int i = 0; i < N * LD; i++) orig[i] = x[i];
    CHECK(worst(back, orig, N * LD, 1e-5, 1e-5) <= 1);
    be->free(be, dx), be->free(be, dcs), be->free(be, dpos);
    free(x), free(h), free(back);
}

struct swiglu_case {
    int N, F;
    const float *g;
};

static double swiglu_objective(const float *gu, void *arg) {
    const struct swiglu_case *k = arg;
    float *dgu = devf(gu, (size_t)k->N * 2 * k->F), *out = dev_zeros((size_t)k->N * k->F);
    be->swiglu_forward(be, out, dgu, k->N, k->F);
    float *h = host_of(out, (size_t)k->N * k->F);
    double s = dot_host(h, k->g, (size_t)k->N * k->F);
    be->free(be, dgu), be->free(be, out);
    free(h);
    return s;
}

TEST(swiglu) {
    enum { N = 7, F = 10 };
    float *gu = host_random(N * 2 * F, 2), *g = host_random(N * F, 1);
    struct swiglu_case k = {N, F, g};
    float *dgu = devf(gu, N * 2 * F), *out = dev_zeros(N * F);
    be->swiglu_forward(be, out, dgu, N, F);
    float *h = host_of(out, N * F);
    double want[N * F];
    for (int n = 0; n < N; n++)
        for (int i = 0; i < F; i++) {
            double a = gu[n * 2 * F + i];
            want[n * F + i] = a / (1 + exp(-a)) * gu[n * 2 * F + F + i];
        }
    CHECK(worst(h, want, N * F, 1e-5, 1e-5) <= 1);
    float *dg = devf(g, N * F), *dgrad = host_random(N * 2 * F, 1); /* overwritten, not accumulated */
    float *dd = devf(dgrad, N * 2 * F);
    be->swiglu_backward(be, dd, dg, dgu, N, F);
    float *grad = host_of(dd, N * 2 * F);
    CHECK(fd_worst(swiglu_objective, &k, gu, N * 2 * F, grad, 1e-2f, 2e-3, 2e-2) <= 1);
    be->free(be, dgu), be->free(be, out), be->free(be, dg), be->free(be, dd);
    free(gu), free(g), free(h), free(dgrad), free(grad);
}

/* ---------------------------------------------------------------- attention */

/* Plain causal attention inside each segment, in double: out[N, H*D], lse[H, N]. */
static void attention_ref(double *out, double *lse, const float *q, int ldq, const float *k, int ldk, const float *v,
                          int ldv, const struct attn_segment *segs, int n_segs, int N, int H, int HKV, int D) {
    double scale = 1 / sqrt(D), *sc = malloc(sizeof(double) * (size_t)N);
    for (int si = 0; si < n_segs; si++)
        for (int h = 0; h < H; h++) {
            int kh = h / (H / HKV);
            for (int i = 0; i < segs[si].len; i++) {
                int t = segs[si].start + i;
                double mx = -INFINITY, z = 0;
                for (int j = 0; j <= i; j++) {
                    int u = segs[si].start + j;
                    double s = 0;
                    for (int d = 0; d < D; d++) s += (double)q[t * ldq + h * D + d] * k[u * ldk + kh * D + d];
                    sc[j] = s * scale;
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j <= i; j++) z += exp(sc[j] - mx);
                lse[h * N + t] = mx + log(z);
                for (int d = 0; d < D; d++) {
                    double o = 0;
                    for (int j = 0; j <= i; j++) o += exp(sc[j] - mx) / z * v[(segs[si].start + j) * ldv + kh * D + d];
                    out[t * H * D + h * D + d] = o;
                }
            }
        }
    free(sc);
}

/* The backward of attention_ref from its definitions, in double, added into g[N, ldg] at the columns of
 * a fused qkv gradient (dq at 0, dk at H*D, dv at (H+HKV)*D): per segment and head, P from the
 * forward's formula, dV += P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)), dQ += scale dS K,
 * dK += scale dS^T Q. q, k, v are the column blocks of one fused qkv [N, ldq]. */
static void attention_backward_ref(double *g, int ldg, const float *dout, const float *qkv, int ldq,
                                   const struct attn_segment *segs, int n_segs, int H, int HKV, int D) {
    double scale = 1 / sqrt(D);
    for (int si = 0; si < n_segs; si++) {
        int s = segs[si].start, L = segs[si].len;
        double *P = calloc((size_t)L * L, sizeof(double)), *dS = calloc((size_t)L * L, sizeof(double));
        for (int h = 0; h < H; h++) {
            int kh = h / (H / HKV);
            const float *q = qkv + h * D, *k = qkv + (H + kh) * D, *v = qkv + (H + HKV + kh) * D;
            for (int i = 0; i < L; i++) {
                double mx = -INFINITY, z = 0, dot = 0;
                for (int j = 0; j <= i; j++) {
                    double x = 0;
                    for (int d = 0; d < D; d++) x += (double)q[(s + i) * ldq + d] * k[(s + j) * ldq + d];
                    P[i * L + j] = x * scale;
                    mx = fmax(mx, x * scale);
                }
                for (int j = 0; j <= i; j++) z += (P[i * L + j] = exp(P[i * L + j] - mx));
                for (int j = 0; j <= i; j++) {
                    P[i * L + j] /= z;
                    double dp = 0;
                    for (int d = 0; d < D; d++) dp += (double)dout[(s + i) * H * D + h * D + d] * v[(s + j) * ldq + d];
                    dS[i * L + j] = dp;
                    dot += P[i * L + j] * dp;
                }
                for (int j = 0; j <= i; j++) dS[i * L + j] = P[i * L + j] * (dS[i * L + j] - dot);
            }
            for (int i = 0; i < L; i++)
                for (int j = 0; j <= i; j++)
                    for (int d = 0; d < D; d++) {
                        g[(s + i) * ldg + h * D + d] += scale * dS[i * L + j] * k[(s + j) * ldq + d];
                        g[(s + j) * ldg + (H + kh) * D + d] += scale * dS[i * L + j] * q[(s + i) * ldq + d];
                        g[(s + j) * ldg + (H + HKV + kh) * D + d] += P[i * L + j] * dout[(s + i) * H * D + h * D + d];
                    }
        }
        free(P), free(dS);
    }
}

enum { AN = 13, AH = 4, AHKV = 2, AD = 8, AQKV = (AH + 2 * AHKV) * AD };
static const struct attn_segment att_segs[3] = {{0, 5}, {5, 1}, {6, 7}};

struct att_case {
    const float *g; /* [AN, AH*AD] */
    struct attn_segment *dsegs;
};

/* sum(g * attention(qkv)) with q, k, v the column blocks of one fused qkv [AN, AQKV]. */
static double attention_objective(const float *qkv, void *arg) {
    const struct att_case *c = arg;
    float *d = devf(qkv, AN * AQKV), *out = dev_zeros(AN * AH * AD), *lse = dev_zeros(AH * AN);
    be->attention_forward(be, out, lse, d, AQKV, d + AH * AD, AQKV, d + (AH + AHKV) * AD, AQKV, c->dsegs, att_segs, 3,
                          AN, 7, AH, AHKV, AD);
    float *h = host_of(out, AN * AH * AD);
    double s = dot_host(h, c->g, AN * AH * AD);
    be->free(be, d), be->free(be, out), be->free(be, lse);
    free(h);
    return s;
}

TEST(attention_forward_backward_and_cached) {
    float *qkv = host_random(AN * AQKV, 1), *g = host_random(AN * AH * AD, 1);
    struct attn_segment *dsegs = (struct attn_segment *)devi((const int *)att_segs, 6);
    struct att_case c = {g, dsegs};
    float *d = devf(qkv, AN * AQKV), *out = dev_zeros(AN * AH * AD), *lse = dev_zeros(AH * AN);
    const float *q = d, *k = d + AH * AD, *v = d + (AH + AHKV) * AD;
    be->attention_forward(be, out, lse, q, AQKV, k, AQKV, v, AQKV, dsegs, att_segs, 3, AN, 7, AH, AHKV, AD);
    double want[AN * AH * AD], want_lse[AH * AN];
    attention_ref(want, want_lse, qkv, AQKV, qkv + AH * AD, AQKV, qkv + (AH + AHKV) * AD, AQKV, att_segs, 3, AN, AH,
                  AHKV, AD);
    float *h = host_of(out, AN * AH * AD), *hl = host_of(lse, AH * AN);
    CHECK(worst(h, want, AN * AH * AD, 1e-5, 1e-4) <= 1);
    CHECK(worst(hl, want_lse, AH * AN, 1e-5, 1e-4) <= 1);
    /* backward: dq, dk, dv into one fused gradient, against finite differences */
    float *dg = devf(g, AN * AH * AD), *dqkv = dev_zeros(AN * AQKV);
    be->attention_backward(be, dqkv, AQKV, dqkv + AH * AD, AQKV, dqkv + (AH + AHKV) * AD, AQKV, dg, lse, q, AQKV, k,
                           AQKV, v, AQKV, dsegs, att_segs, 3, AN, 7, AH, AHKV, AD);
    float *grad = host_of(dqkv, AN * AQKV);
    CHECK(fd_worst(attention_objective, &c, qkv, AN * AQKV, grad, 1e-2f, 2e-3, 2e-2) <= 1);
    /* cached: the keys and values of the third segment in a cache, each query against its prefix */
    enum { S0 = 6, L = 7, KVD = AHKV * AD };
    float kc[L * KVD], vc[L * KVD];
    for (int i = 0; i < L; i++)
        for (int j = 0; j < KVD; j++) {
            kc[i * KVD + j] = qkv[(S0 + i) * AQKV + AH * AD + j];
            vc[i * KVD + j] = qkv[(S0 + i) * AQKV + (AH + AHKV) * AD + j];
        }
    int first[L], nctx[L];
    for (int i = 0; i < L; i++) first[i] = 0, nctx[i] = i + 1;
    float *dkc = devf(kc, L * KVD), *dvc = devf(vc, L * KVD), *cout = dev_zeros(L * AH * AD);
    int *dfirst = devi(first, L), *dnctx = devi(nctx, L);
    be->attention_cached(be, cout, d + S0 * AQKV, AQKV, dkc, dvc, dfirst, dnctx, L, AH, AHKV, AD);
    float *hc = host_of(cout, L * AH * AD);
    CHECK(worst(hc, want + S0 * AH * AD, L * AH * AD, 1e-5, 1e-4) <= 1);
    be->free(be, dsegs), be->free(be, d), be->free(be, out), be->free(be, lse), be->free(be, dg);
    be->free(be, dqkv), be->free(be, dkc), be->free(be, dvc), be->free(be, cout), be->free(be, dfirst);
    be->free(be, dnctx);
    free(qkv), free(g), free(h), free(hl), free(grad), free(hc);
}

/* A segment long enough for a device backend's blocked path (CUDA: cuBLAS over blocks of 512 query
 * rows, from 128 tokens on) among short ones, GQA, forward and backward against the references. */
TEST(attention_long_segment) {
    enum { H = 4, HKV = 2, D = 16, QKV = (H + 2 * HKV) * D, N = 612 };
    static const struct attn_segment segs[3] = {{0, 3}, {3, 600}, {603, 9}};
    float *qkv = host_random(N * QKV, 1), *g = host_random(N * H * D, 1);
    struct attn_segment *dsegs = (struct attn_segment *)devi((const int *)segs, 6);
    float *d = devf(qkv, N * QKV), *out = dev_zeros(N * H * D), *lse = dev_zeros(H * N);
    const float *q = d, *k = d + H * D, *v = d + (H + HKV) * D;
    be->attention_forward(be, out, lse, q, QKV, k, QKV, v, QKV, dsegs, segs, 3, N, 600, H, HKV, D);
    double *want = malloc(sizeof(double) * N * H * D), *want_lse = malloc(sizeof(double) * H * N);
    attention_ref(want, want_lse, qkv, QKV, qkv + H * D, QKV, qkv + (H + HKV) * D, QKV, segs, 3, N, H, HKV, D);
    float *h = host_of(out, N * H * D), *hl = host_of(lse, H * N);
    CHECK(worst(h, want, N * H * D, 1e-5, 1e-4) <= 1);
    CHECK(worst(hl, want_lse, H * N, 1e-5, 1e-4) <= 1);
    float *dg = devf(g, N * H * D), *dqkv = dev_zeros(N * QKV);
    be->attention_backward(be, dqkv, QKV, dqkv + H * D, QKV, dqkv + (H + HKV) * D, QKV, dg, lse, q, QKV, k, QKV, v, QKV,
                           dsegs, segs, 3, N, 600, H, HKV, D);
    double *want_grad = calloc((size_t)N * QKV, sizeof(double));
    attention_backward_ref(want_grad, QKV, g, qkv, QKV, segs, 3, H, HKV, D);
    float *grad = host_of(dqkv, N * QKV);
    CHECK(worst(grad, want_grad, N * QKV, 1e-4, 1e-3) <= 1);
    be->free(be, dsegs), be->free(be, d), be->free(be, out), be->free(be, lse), be->free(be, dg), be->free(be, dqkv);
    free(qkv), free(g), free(want), free(want_lse), free(h), free(hl), free(want_grad), free(grad);
}

/* ---------------------------------------------------------------- loss */

struct ce_case {
    int M, V;
    const int *targets;
    const float *w;
};

static double ce_objective(const float *logits, void *arg) {
    const struct ce_case *c = arg;
    float *dl = devf(logits, (size_t)c->M * c->V), *loss = dev_zeros(c->M), *lse = dev_zeros(c->M);
    int *dt = devi(c->targets, c->M), *corr = (int *)dev_zeros(c->M);
    be->crossentropy_forward(be, loss, lse, corr, dl, dt, c->M, c->V);
    float *h = host_of(loss, c->M);
    double s = dot_host(h, c->w, c->M);
    be->free(be, dl), be->free(be, loss), be->free(be, lse), be->free(be, dt), be->free(be, corr);
    free(h);
    return s;
}

TEST(crossentropy_and_statistics) {
    enum { M = 6, V = 50 };
    int targets[M] = {0, 49, 7, 7, 20, 3};
    float *logits = host_random(M * V, 3), w[M] = {1, 0.5f, 2, 0, 1, 1};
    logits[2 * V + 7] = 40; /* row 2 predicts its target */
    logits[4 * V + 11] = logits[4 * V + 20] = 40; /* row 4: a tie at the top, lowest id wins (11, not 20) */
    float *dl = devf(logits, M * V), *loss = dev_zeros(M), *lse = dev_zeros(M), *dw = devf(w, M);
    int *dt = devi(targets, M), *corr = (int *)dev_zeros(M);
    be->crossentropy_forward(be, loss, lse, corr, dl, dt, M, V);
    float *hl = host_of(loss, M);
    int hc[M];
    be->download(be, hc, corr, sizeof hc);
    double want[M];
    int want_c[M];
    for (int m = 0; m < M; m++) {
        double mx = -INFINITY, z = 0;
        int arg = 0;
        for (int j = 0; j < V; j++)
            if (logits[m * V + j] > mx) mx = logits[m * V + j], arg = j;
        for (int j = 0; j < V; j++) z += exp(logits[m * V + j] - mx);
        want[m] = mx + log(z) - logits[m * V + targets[m]];
        want_c[m] = arg == targets[m];
    }
    CHECK(worst(hl, want, M, 1e-5, 1e-5) <= 1);
    CHECK(memcmp(hc, want_c, sizeof hc) == 0 && hc[2] == 1 && hc[4] == 0);
    /* statistics on the device: the last forward's, and a running sum */
    struct whet_err err;
    double zeros[8] = {0}, stats[8];
    double *ds = be->alloc(be, sizeof stats, &err);
    be->upload(be, ds, zeros, sizeof zeros);
    be->loss_stats(be, ds, ds + 4, loss, dw, corr, M);
    be->loss_stats(be, ds, ds + 4, loss, dw, corr, M);
    be->download(be, stats, ds, sizeof stats);
    double wl = 0, ws = 0, nc = 0;
    for (int m = 0; m < M; m++) wl += w[m] * want[m], ws += w[m], nc += want_c[m];
    CHECK_NEAR(stats[0], wl, 1e-4 * fabs(wl) + 1e-5);
    CHECK(stats[1] == ws && stats[2] == nc && stats[3] == M);
    CHECK_NEAR(stats[4], 2 * wl, 2e-4 * fabs(wl) + 1e-5);
    CHECK(stats[5] == 2 * ws && stats[6] == 2 * nc && stats[7] == 2 * M);
    /* backward (scaled by 0.5) against finite differences of sum(w * loss), on logits without the
     * peaks above (a softmax saturated at 40 has gradients below what differences resolve) */
    struct ce_case c = {M, V, targets, w};
    logits[2 * V + 7] = logits[4 * V + 11] = logits[4 * V + 20] = 1;
    float *dl2 = devf(logits, M * V);
    be->crossentropy_forward(be, loss, lse, corr, dl2, dt, M, V);
    be->crossentropy_backward(be, dl2, lse, dt, dw, 0.5f, M, V);
    float *grad2 = host_of(dl2, M * V);
    for (int i = 0; i < M * V; i++) grad2[i] *= 2;
    CHECK(fd_worst(ce_objective, &c, logits, M * V, grad2, 1e-2f, 1e-3, 2e-2) <= 1);
    be->free(be, dl), be->free(be, loss), be->free(be, lse), be->free(be, dw), be->free(be, dt), be->free(be, corr);
    be->free(be, ds), be->free(be, dl2);
    free(logits), free(hl), free(grad2);
}

/* ---------------------------------------------------------------- optimiser */

TEST(adamw_norm_and_clipping) {
    enum { N = 1000 };
    float *p = host_random(N, 1), *g = host_random(N, 1), *m = host_random(N, 0.1f), *v = host_random(N, 0.1f);
    for (int i = 0; i < N; i++) v[i] = v[i] * v[i];
    float *dp = devf(p, N), *dg = devf(g, N), *dm = devf(m, N), *dv = devf(v, N);
    float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f, bc1 = 1 - powf(b1, 3), bc2 = 1 - powf(b2, 3);
    be->adamw(be, dp, dg, dm, dv, N, lr, b1, b2, eps, wd, bc1, bc2);
    float *hp = host_of(dp, N), *hm = host_of(dm, N), *hv = host_of(dv, N);
    double wp[N], wm[N], wv[N];
    for (int i = 0; i < N; i++) {
        wm[i] = b1 * m[i] + (1 - b1) * (double)g[i];
        wv[i] = b2 * v[i] + (1 - b2) * (double)g[i] * g[i];
        wp[i] = p[i] * (1 - lr * wd) - lr * (wm[i] / bc1) / (sqrt(wv[i] / bc2) + eps);
    }
    CHECK(worst(hm, wm, N, 1e-6, 1e-5) <= 1);
    CHECK(worst(hv, wv, N, 1e-7, 1e-5) <= 1);
    CHECK(worst(hp, wp, N, 1e-6, 1e-5) <= 1);
    /* the squared norm accumulates in a device double; clipping scales on the device */
    struct whet_err err;
    double zero = 0, ss;
    double *dss = be->alloc(be, sizeof(double), &err);
    be->upload(be, dss, &zero, sizeof zero);
    be->sumsq(be, dss, dg, N);
    be->sumsq(be, dss, dg, N / 2);
    be->download(be, &ss, dss, sizeof ss);
    double want = 0;
    for (int i = 0; i < N; i++) want += (double)g[i] * g[i] * (i < N / 2 ? 2 : 1);
    CHECK_NEAR(ss, want, 1e-9 * want);
    be->upload(be, dss, &zero, sizeof zero);
    be->sumsq(be, dss, dg, N);
    be->download(be, &ss, dss, sizeof ss);
    double norm = sqrt(ss);
    be->clip_by_norm(be, dg, N, dss, (float)(norm * 2)); /* under the limit: untouched */
    float *same = host_of(dg, N);
    CHECK(memcmp(same, g, sizeof(float) * N) == 0);
    be->clip_by_norm(be, dg, N, dss, 1.0f);
    float *clipped = host_of(dg, N);
    double got = 0;
    for (int i = 0; i < N; i++) got += (double)clipped[i] * clipped[i];
    CHECK_NEAR(sqrt(got), norm / (norm + 1e-6), 1e-5);
    float *sx = host_of(dp, N);
    be->scale(be, dp, -2.0f, N);
    be->axpy(be, dp, dp, 0.5f, N); /* -2x + 0.5 * -2x = -3x */
    float *sc = host_of(dp, N);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= fabsf(sc[i] + 3 * sx[i]) <= 1e-5f * (1 + fabsf(sx[i]));
    CHECK(ok);
    be->free(be, dp), be->free(be, dg), be->free(be, dm), be->free(be, dv), be->free(be, dss);
    free(p), free(g), free(m), free(v), free(hp), free(hm), free(hv), free(same), free(clipped), free(sx), free(sc);
}

/* ---------------------------------------------------------------- sampling */

/* One draw through the backend; entropy, logprob and the top arrays (SAMPLE_TOP_MAX each) may be NULL. */
static int draw_all(const float *logits, int V, struct sample_row row, float *entropy, float *logprob, int *top_ids,
                    float *top_lps) {
    float *dl = devf(logits, V), *dent = dev_zeros(1), *dlp = dev_zeros(1), *dtl = dev_zeros(SAMPLE_TOP_MAX);
    struct sample_row *dr = dev_from(&row, sizeof row);
    int *dids = (int *)dev_zeros(1), *dtop = (int *)dev_zeros(SAMPLE_TOP_MAX), id;
    struct sample_out out = {dids, dent, dlp, dtop, dtl};
    be->sample(be, &out, dl, dr, 1, V);
    be->download(be, &id, dids, sizeof id);
    if (entropy) be->download(be, entropy, dent, sizeof *entropy);
    if (logprob) be->download(be, logprob, dlp, sizeof *logprob);
    if (top_ids) be->download(be, top_ids, dtop, sizeof(int) * SAMPLE_TOP_MAX);
    if (top_lps) be->download(be, top_lps, dtl, sizeof(float) * SAMPLE_TOP_MAX);
    be->free(be, dl), be->free(be, dent), be->free(be, dr), be->free(be, dids), be->free(be, dlp);
    be->free(be, dtop), be->free(be, dtl);
    return id;
}

static int draw(const float *logits, int V, struct sample_row row, float *entropy) {
    return draw_all(logits, V, row, entropy, NULL, NULL, NULL);
}

/* Reference: full sort (probability desc, id asc), top-k, then the top-p share of what is left, the
 * draw at rng_counter_uniform(seed, counter). */
static int draw_ref(const float *logits, int V, const struct sample_row *r) {
    double *p = malloc(sizeof(double) * (size_t)V);
    int *order = malloc(sizeof(int) * (size_t)V);
    float max = logits[0];
    for (int i = 1; i < V; i++) max = fmaxf(max, logits[i]);
    double z = 0;
    for (int i = 0; i < V; i++) z += p[i] = expf((logits[i] - max) / r->temperature);
    for (int i = 0; i < V; i++) p[i] = (float)(p[i] / z), order[i] = i;
    for (int i = 1; i < V; i++) /* insertion sort: obviously right */
        for (int j = i; j > 0 && (p[order[j]] > p[order[j - 1]] ||
                                  (p[order[j]] == p[order[j - 1]] && order[j] < order[j - 1])); j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    int k = r->top_k > 0 && r->top_k < V ? r->top_k : V;
    double kept = 0, mass = 0;
    for (int i = 0; i < k; i++) kept += p[order[i]];
    double target = r->top_k > 0 && r->top_k < V ? r->top_p * kept : r->top_p;
    int n = 0;
    while (n < k && (n == 0 || mass < target)) mass += p[order[n++]];
    int result = order[n - 1];
    double u = rng_counter_uniform(r->seed, r->counter) * mass, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += p[order[i]];
        if (u < acc) {
            result = order[i];
            break;
        }
    }
    free(p);
    free(order);
    return result;
}

TEST(sample_matches_a_brute_force_reference) {
    enum { V = 300 };
    float logits[V];
    int mismatches = 0;
    const float top_ps[] = {1.0f, 0.9f, 0.5f, 0.05f};
    const int top_ks[] = {0, 1, 2, 17, 299, 300};
    for (int trial = 0; trial < 200; trial++) {
        float spread = trial % 2 ? 0.3f : 4.0f; /* flat and peaked distributions */
        for (int i = 0; i < V; i++) logits[i] = spread * rng_normal(&rng);
        logits[trial % V] = logits[(trial * 7) % V]; /* a tie */
        struct sample_row r = {.seed = 10 + (uint64_t)trial, .counter = (uint32_t)trial, .temperature = 0.8f,
                               .top_p = top_ps[trial % 4], .top_k = top_ks[trial % 6]};
        if (r.top_p == 1.0f && (r.top_k == 0 || r.top_k >= V)) continue; /* no cut: draws in id order */
        int want = 0;
        if (r.top_k == 1) { /* greedy: the argmax, no draw */
            for (int i = 1; i < V; i++)
                if (logits[i] > logits[want]) want = i;
        } else {
            want = draw_ref(logits, V, &r);
        }
        mismatches += draw(logits, V, r, NULL) != want;
    }
    CHECK(mismatches == 0);
}

static const float six[6] = {1.0f, 3.0f, 0.5f, 2.0f, -1.0f, 2.9f};

TEST(sample_greedy_entropy_and_vocab_cut) {
    float ent;
    CHECK(draw(six, 6, (struct sample_row){.temperature = 0, .top_p = 1}, &ent) == 1);
    double z = 0, zx = 0;
    for (int i = 0; i < 6; i++) z += exp(six[i] - 3.0), zx += exp(six[i] - 3.0) * (six[i] - 3.0);
    CHECK_NEAR(ent, log(z) - zx / z, 1e-5);
    /* log-probs at temperature 1, whatever temperature draws: the token's and the top three */
    float lp, top_lp[SAMPLE_TOP_MAX];
    int top[SAMPLE_TOP_MAX];
    double lse = 3.0 + log(z);
    int id = draw_all(six, 6, (struct sample_row){.seed = 9, .temperature = 0.5f, .top_p = 1, .top_logprobs = 3}, NULL,
                      &lp, top, top_lp);
    CHECK_NEAR(lp, six[id] - lse, 1e-5);
    CHECK(top[0] == 1 && top[1] == 5 && top[2] == 3);
    CHECK_NEAR(top_lp[0], 3.0 - lse, 1e-5);
    CHECK_NEAR(top_lp[2], 2.0 - lse, 1e-5);
    const float tie[4] = {1, 2, 2, 0};
    draw_all(tie, 4, (struct sample_row){.temperature = 0, .top_p = 1, .top_logprobs = 4}, NULL, NULL, top, NULL);
    CHECK(top[0] == 1 && top[1] == 2 && top[2] == 0 && top[3] == 3); /* ties: lower id first */
    /* the vocabulary cut: ids 1 and above never drawn, greedy or not */
    CHECK(draw(six, 6, (struct sample_row){.temperature = 0, .top_p = 1, .vocab = 1}, NULL) == 0);
    int only_low = 1;
    for (uint32_t c = 0; c < 200; c++)
        only_low &= draw(six, 6, (struct sample_row){.seed = 5, .counter = c, .temperature = 1, .top_p = 1, .vocab = 3},
                         NULL) < 3;
    CHECK(only_low);
}

TEST(sample_distributions_and_seeds) {
    /* top-k 3 keeps ids 1, 5, 3 in proportion to exp(logit); top-p 0.5 at T=1 keeps {1, 5}; T=2
     * follows the tempered softmax; draws are a function of (seed, counter) alone */
    int n = 6000, ck[6] = {0}, cp[6] = {0}, ct[6] = {0};
    for (int i = 0; i < n; i++) {
        uint32_t k = (uint32_t)i;
        struct sample_row top3 = {.seed = 4, .counter = k, .temperature = 1, .top_p = 1, .top_k = 3};
        ck[draw(six, 6, top3, NULL)]++;
        cp[draw(six, 6, (struct sample_row){.seed = 2, .counter = k, .temperature = 1, .top_p = 0.5f}, NULL)]++;
        ct[draw(six, 6, (struct sample_row){.seed = 3, .counter = k, .temperature = 2, .top_p = 1}, NULL)]++;
    }
    double zk = exp(3.0) + exp(2.9) + exp(2.0);
    CHECK(ck[0] == 0 && ck[2] == 0 && ck[4] == 0);
    CHECK_NEAR(ck[1] / (double)n, exp(3.0) / zk, 0.025);
    CHECK_NEAR(ck[3] / (double)n, exp(2.0) / zk, 0.025);
    CHECK(cp[0] == 0 && cp[2] == 0 && cp[3] == 0 && cp[4] == 0);
    CHECK_NEAR(cp[1] / (double)n, exp(3.0) / (exp(3.0) + exp(2.9)), 0.03);
    double zt = 0;
    for (int i = 0; i < 6; i++) zt += exp(six[i] / 2);
    for (int i = 0; i < 6; i++) CHECK_NEAR(ct[i] / (double)n, exp(six[i] / 2) / zt, 0.02);
    int same = 1, differs = 0;
    for (uint32_t c = 0; c < 64; c++) {
        struct sample_row a = {.seed = 42, .counter = c, .temperature = 1.5f, .top_p = 0.9f};
        struct sample_row b = a;
        b.seed = 43;
        int x = draw(six, 6, a, NULL);
        same &= x == draw(six, 6, a, NULL);
        differs |= x != draw(six, 6, b, NULL);
    }
    CHECK(same && differs);
}

TEST(sample_many_rows_at_once) {
    /* rows of one batch draw as they would alone */
    enum { R = 33, V = 40 };
    float *logits = host_random(R * V, 2);
    struct sample_row rows[R];
    int want[R], got[R];
    for (int r = 0; r < R; r++) {
        rows[r] = (struct sample_row){.seed = 77 + (uint64_t)r, .counter = 3, .temperature = 0.9f, .top_p = 0.95f,
                                      .top_k = r % 4 ? 10 : 0};
        want[r] = draw(logits + r * V, V, rows[r], NULL);
    }
    float *dl = devf(logits, R * V);
    struct sample_row *dr = dev_from(rows, sizeof rows);
    int *dids = (int *)dev_zeros(R);
    be->sample(be, &(struct sample_out){.ids = dids}, dl, dr, R, V);
    be->download(be, got, dids, sizeof got);
    CHECK(memcmp(got, want, sizeof got) == 0);
    be->free(be, dl), be->free(be, dr), be->free(be, dids);
    free(logits);
}

/* ---------------------------------------------------------------- opening */

TEST(open_rejects_bad_devices) {
    struct backend *b = NULL;
    struct whet_err err;
    CHECK(backend_open(&b, "tpu", &err) == -1 && b == NULL && strstr(err.msg, "expected cpu, cuda or cuda:N"));
    CHECK(backend_open(&b, "cuda:x", &err) == -1 && strstr(err.msg, "expected cpu, cuda or cuda:N"));
    CHECK(backend_open(&b, "cuda:-1", &err) == -1);
    CHECK(backend_open(&b, "cuda:99", &err) == -1 && strstr(err.msg, "no CUDA device"));
}

static void run_all(void) {
    RUN(memory_ops);
    RUN(release_zeroes_only_its_bytes);
    RUN(gemm_all_transposes);
    RUN(matmul_forward_and_backward);
    RUN(embedding_and_rows);
    RUN(rmsnorm_per_head_with_strides);
    RUN(rope_rotates_and_unrotates);
    RUN(swiglu);
    RUN(attention_forward_backward_and_cached);
    RUN(attention_long_segment);
    RUN(crossentropy_and_statistics);
    RUN(adamw_norm_and_clipping);
    RUN(sample_matches_a_brute_force_reference);
    RUN(sample_greedy_entropy_and_vocab_cut);
    RUN(sample_distributions_and_seeds);
    RUN(sample_many_rows_at_once);
}

int main(int argc, char **argv) {
    /* argv[1]: only this device (tests/gpu/run.sh passes "cuda"); otherwise every device there is */
    const char *devices[] = {"cpu", "cuda"};
    RUN(open_rejects_bad_devices);
    for (size_t i = 0; i < WHET_ARRAY_LEN(devices); i++) {
        if (argc > 1 && strcmp(argv[1], devices[i])) continue;
        struct whet_err err;
        if (backend_open(&be, devices[i], &err)) {
            /* only a device that is asked for by name must be there */
            CHECK_MSG(argc == 1, "%s: %s", devices[i], err.msg);
            printf("backend %s: not present here (%s)\n", devices[i], err.msg);
            continue;
        }
        printf("backend %s\n", be->name);
        fflush(stdout);
        rng_seed(&rng, 2026);
        run_all();
        be->close(be);
    }
    return test_summary();
}
