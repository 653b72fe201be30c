/* backend.h - the operations the model code runs on a device, as a table of function pointers.
 *
 * The model (model.c, model_io.c, model_generate.c) calls nothing but these: the CPU backend
 * (backend_cpu.c: OpenBLAS sgemm and OpenMP loops) implements them now, a CUDA backend (cuBLAS and
 * kernels) next. Every pointer argument that is not
 * marked "host" is device memory obtained from `alloc`. Each op comes as a forward/backward pair in
 * llm.c's style: outputs first, then inputs, then sizes; shapes are given in comments with
 *   N  tokens in the batch (B rows × T positions, packed),   C  hidden size,
 *   OC output features,  H heads,  D head dim,  V vocab,  F  SwiGLU width.
 * Matrices are row-major; `ld*` arguments are row strides in floats, so a view of some columns of a
 * wider matrix (q inside a fused qkv) is passed without copying. Backward ops ACCUMULATE (+=) into
 * parameter gradients; into input gradients they accumulate as well unless said otherwise, so a
 * residual branch can add its gradient into the stream.
 *
 * Threading (CPU): each op parallelises itself; callers never wrap backend calls in parallel
 * regions. */
#ifndef WHET_BACKEND_H
#define WHET_BACKEND_H

#include <stddef.h>

/* A run of consecutive tokens that attend to each other (one packed example): tokens
 * [start, start+len) of the flattened batch; token start+i sees tokens start..start+i. */
struct attn_segment {
    int start, len;
};

struct backend {
    const char *name;

    /* ---- memory ---- */
    void *(*alloc)(size_t bytes); /* zero-filled; aborts when out of memory */
    void (*free)(void *p);
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);
    void (*zero)(void *p, size_t bytes);
    void (*copy)(float *dst, const float *src, size_t n);

    /* ---- linear algebra ---- */
    /* c[M,N] = alpha * op(a) @ op(b) + beta * c; op(x) is x or x^T (trans_* != 0); a is [M,K] (or
     * [K,M] transposed), b is [K,N] (or [N,K]). */
    void (*gemm)(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc);
    /* out[N,OC] (row stride ldo) = beta*out + inp[N,C] (stride ldi) @ weight[OC,C]^T + bias[OC]
     * (bias may be NULL). */
    void (*matmul_forward)(float *out, int ldo, const float *inp, int ldi, const float *weight,
                           const float *bias, int N, int C, int OC, float beta);
    /* dinp[N,C] += dout @ weight; dweight[OC,C] += dout^T @ inp; dbias[OC] += sum_n dout.
     * Any of dinp, dweight, dbias may be NULL (not wanted). */
    void (*matmul_backward)(float *dinp, int lddi, float *dweight, float *dbias, const float *dout,
                            int lddo, const float *inp, int ldi, const float *weight, int N, int C, int OC);

    /* ---- elementwise and normalisation ---- */
    /* out[N,C] = wte[ids[n], :]; ids is a device int array. */
    void (*embedding_forward)(float *out, const int *ids, const float *wte, int N, int C);
    /* dwte[ids[n], :] += dout[n, :] */
    void (*embedding_backward)(float *dwte, const float *dout, const int *ids, int N, int C);
    /* RMSNorm over the last D features of each of N×H rows (H heads of D per token, token stride
     * ld*): out = inp * rstd * weight[D], rstd[N,H] = 1/sqrt(mean(inp^2) + eps). H=1, D=C is the
     * ordinary layer norm; H=heads, D=head_dim is Qwen3's q/k norm. out may equal inp (in place). */
    void (*rmsnorm_forward)(float *out, int ldo, float *rstd, const float *inp, int ldi, const float *weight,
                            int N, int H, int D, float eps);
    /* dinp += ..., dweight[D] += ... (dweight may be NULL). dinp must not alias dout. */
    void (*rmsnorm_backward)(float *dinp, int lddi, float *dweight, const float *dout, int lddo,
                             const float *inp, int ldi, const float *weight, const float *rstd, int N, int H, int D);
    /* Rotate-half RoPE in place on x[N, H*D] (token stride ldx): for i < D/2,
     * (x_i, x_{i+D/2}) <- (x_i cos - x_{i+D/2} sin, x_{i+D/2} cos + x_i sin) with angle
     * pos[n] * inv_freq[i]; cos_sin[P, D] holds cos in the first D/2 and sin in the last D/2 of row p.
     * rope_backward applies the inverse rotation to a gradient (in place). */
    void (*rope_forward)(float *x, int ldx, const int *pos, const float *cos_sin, int N, int H, int D);
    void (*rope_backward)(float *dx, int lddx, const int *pos, const float *cos_sin, int N, int H, int D);
    /* out[N,F] = silu(gate_up[:, :F]) * gate_up[:, F:] (gate_up is [N, 2F]). */
    void (*swiglu_forward)(float *out, const float *gate_up, int N, int F);
    /* dgate_up[N,2F] = (overwritten, not accumulated) from dout[N,F]. */
    void (*swiglu_backward)(float *dgate_up, const float *dout, const float *gate_up, int N, int F);
    /* y[n] += alpha * x[n] */
    void (*axpy)(float *y, const float *x, float alpha, size_t n);
    /* Row gather/scatter: dst[i,:] = src[rows[i],:] (gather) and dst[rows[i],:] += src[i,:] (scatter). */
    void (*gather_rows)(float *dst, const float *src, const int *rows, int n_rows, int C);
    void (*scatter_add_rows)(float *dst, const float *src, const int *rows, int n_rows, int C);
    /* dst[rows[i], :C] = src[i*lds, :C] (rows of a KV cache). */
    void (*set_rows)(float *dst, const int *rows, const float *src, int lds, int n_rows, int C);

    /* ---- attention ---- */
    /* Causal self-attention inside each segment (host array `segs`, n_segs of them, covering the
     * tokens). q[N, H*D] (stride ldq), k and v [N, HKV*D] (strides ldk, ldv); query head h uses kv
     * head h / (H/HKV). out[N, H*D] (contiguous). Only the log-sum-exp of each score row is kept,
     * lse[H, N]: the backward pass recomputes the probabilities block by block (as FlashAttention
     * does), so memory grows with N, not N*T. T >= the longest segment. */
    void (*attention_forward)(float *out, float *lse, const float *q, int ldq, const float *k, int ldk,
                              const float *v, int ldv, const struct attn_segment *segs, int n_segs,
                              int N, int T, int H, int HKV, int D);
    /* dq, dk, dv (all accumulated; GQA heads share dk, dv) from dout[N, H*D]. */
    void (*attention_backward)(float *dq, int lddq, float *dk, int lddk, float *dv, int lddv, const float *dout,
                               const float *lse, const float *q, int ldq, const float *k, int ldk, const float *v,
                               int ldv, const struct attn_segment *segs, int n_segs, int N, int T, int H, int HKV,
                               int D);

    /* Attention of n new query tokens against a KV cache (generation). q[n, H*D] (stride ldq);
     * kc, vc [n_rows, HKV*D] hold the cached keys and values of one layer; query i sees rows
     * first[i] .. first[i]+n_ctx[i]-1 (its own key included). out[n, H*D] contiguous. */
    void (*attention_cached)(float *out, const float *q, int ldq, const float *kc, const float *vc, const int *first,
                             const int *n_ctx, int n, int H, int HKV, int D);

    /* ---- loss ---- */
    /* For M rows of logits[M,V]: losses[m] = logsumexp(row) - row[targets[m]], lse[m] kept for the
     * backward, correct[m] = 1 when the argmax is the target (ties: lowest index). */
    void (*crossentropy_forward)(float *losses, float *lse, int *correct, const float *logits,
                                 const int *targets, int M, int V);
    /* In place: logits[m,:] <- scale * weights[m] * (softmax(row) - onehot(target)). */
    void (*crossentropy_backward)(float *logits, const float *lse, const int *targets, const float *weights,
                                  float scale, int M, int V);

    /* ---- optimiser ---- */
    /* PyTorch AdamW on n floats: p -= lr*wd*p; m,v moments; p -= lr * (m/bc1) / (sqrt(v/bc2) + eps),
     * with bc1 = 1 - beta1^t, bc2 = 1 - beta2^t given by the caller. */
    void (*adamw)(float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float bc1, float bc2);
    /* Sum of squares of x[n] in double precision (result on the host). */
    double (*sumsq)(const float *x, size_t n);
    void (*scale)(float *x, float s, size_t n);
};

/* The CPU backend (OpenBLAS + OpenMP). */
const struct backend *backend_cpu(void);

#endif
