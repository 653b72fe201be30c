/* backend.h - the operations the model code runs on a device: an instance per device, with the
 * device's context inside it and its operations as function pointers.
 *
 * The model (model.c, model_io.c, model_generate.c) calls nothing but these. backend_open picks the
 * implementation by device name: "cpu" (backend_cpu.c: OpenBLAS sgemm and OpenMP loops) or "cuda" /
 * "cuda:N" (a CUDA build's backend). Every op takes its instance first, so a device backend keeps its
 * handles and its stream in `ctx` instead of globals, and two models may run on two devices.
 *
 * Memory. Every pointer argument not marked "host" is device memory from `alloc`. Ops are queued on
 * the instance's stream in call order; only `download` waits (for everything queued before it), so
 * a training step keeps the device busy and comes back to the host for the few scalars a metrics
 * line needs. To that end the things a step measures stay on the device: the loss statistics
 * (`loss_stats`), the gradient norm (`sumsq`, `clip_by_norm`), the attention segment tables, and
 * sampling (`sample` returns token ids, not logits). `alloc` fails with an error that says how much
 * was wanted and how much the device has, which the model turns into advice.
 *
 * Data types: float32 tensors, int32 ids and indices, float64 accumulators (the statistics and the
 * sum of squares, so a long step's sums do not lose digits). The precision policy of a GPU build
 * (bf16 weights and activations, fp32 master weights) is the CUDA backend's business behind these
 * same ops; this CPU backend computes in fp32 throughout.
 *
 * Each op comes as a forward/backward pair in llm.c's style: outputs first, then inputs, then sizes;
 * shapes are given in comments with
 *   N  tokens in the batch (B rows × T positions, packed),   C  hidden size,
 *   OC output features,  H heads,  D head dim,  V vocab,  F  SwiGLU width.
 * Matrices are row-major; `ld*` arguments are row strides in elements, so a view of some columns of
 * a wider matrix (q inside a fused qkv) is passed without copying. Backward ops ACCUMULATE (+=) into
 * parameter gradients; into input gradients they accumulate as well unless said otherwise, so a
 * residual branch can add its gradient into the stream.
 *
 * Threading (CPU): each op parallelises itself; callers never wrap backend calls in parallel
 * regions. */
#ifndef WHET_BACKEND_H
#define WHET_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "sample_row.h"
#include "util.h"

/* A run of consecutive tokens that attend to each other (one packed example): tokens
 * [start, start+len) of the flattened batch; token start+i sees tokens start..start+i. */
struct attn_segment {
    int start, len;
};

struct backend {
    const char *name; /* "cpu", "cuda:0" */
    void *ctx;        /* the implementation's own state */

    /* ---- instance and memory ---- */
    void (*close)(struct backend *be);
    /* Zero-filled device memory, or NULL with err set to "out of <device> memory: needed X GiB, have
     * Y GiB free". */
    void *(*alloc)(struct backend *be, size_t bytes, struct whet_err *err);
    void (*free)(struct backend *be, void *p);
    void (*upload)(struct backend *be, void *dst, const void *host_src, size_t bytes);
    /* Waits for the ops queued before it, then copies. */
    void (*download)(struct backend *be, void *host_dst, const void *src, size_t bytes);
    void (*zero)(struct backend *be, void *p, size_t bytes);
    /* Zeroes the bytes as `zero` does, and lets the device have their memory back until they are next
     * written (parameter sharding: the parts of a layer this rank does not own, between the passes that
     * gather it). The CPU returns whole pages to the kernel; the CUDA backend only zeroes for now (giving
     * memory back there needs the driver's virtual memory mapping). */
    void (*release)(struct backend *be, void *p, size_t bytes);
    void (*copy)(struct backend *be, void *dst, const void *src, size_t bytes);
    /* Free and total bytes of the device's memory, as its driver (or the kernel) reports them. */
    void (*mem_info)(struct backend *be, size_t *free_bytes, size_t *total_bytes);

    /* ---- linear algebra ---- */
    /* c[M,N] = alpha * op(a) @ op(b) + beta * c; op(x) is x or x^T (trans_* != 0); a is [M,K] (or
     * [K,M] transposed), b is [K,N] (or [N,K]). */
    void (*gemm)(struct backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);
    /* out[N,OC] (row stride ldo) = beta*out + inp[N,C] (stride ldi) @ weight[OC,C]^T + bias[OC]
     * (bias may be NULL). */
    void (*matmul_forward)(struct backend *be, float *out, int ldo, const float *inp, int ldi, const float *weight,
                           const float *bias, int N, int C, int OC, float beta);
    /* dinp[N,C] += dout @ weight; dweight[OC,C] += dout^T @ inp; dbias[OC] += sum_n dout.
     * Any of dinp, dweight, dbias may be NULL (not wanted). */
    void (*matmul_backward)(struct backend *be, float *dinp, int lddi, float *dweight, float *dbias,
                            const float *dout, int lddo, const float *inp, int ldi, const float *weight, int N, int C,
                            int OC);

    /* ---- elementwise and normalisation ---- */
    /* out[N,C] = wte[ids[n], :] */
    void (*embedding_forward)(struct backend *be, float *out, const int *ids, const float *wte, int N, int C);
    /* dwte[ids[n], :] += dout[n, :], summed in token order whatever the parallelism (deterministic). */
    void (*embedding_backward)(struct backend *be, float *dwte, const float *dout, const int *ids, int N, int C);
    /* RMSNorm over the last D features of each of N×H rows (H heads of D per token, token stride
     * ld*): out = inp * rstd * weight[D], rstd[N,H] = 1/sqrt(mean(inp^2) + eps). H=1, D=C is the
     * ordinary layer norm; H=heads, D=head_dim is Qwen3's q/k norm. out may equal inp (in place). */
    void (*rmsnorm_forward)(struct backend *be, float *out, int ldo, float *rstd, const float *inp, int ldi,
                            const float *weight, int N, int H, int D, float eps);
    /* dinp += ..., dweight[D] += ... (dweight may be NULL). dinp must not alias dout. */
    void (*rmsnorm_backward)(struct backend *be, float *dinp, int lddi, float *dweight, const float *dout, int lddo,
                             const float *inp, int ldi, const float *weight, const float *rstd, int N, int H, int D);
    /* Rotate-half RoPE in place on x[N, H*D] (token stride ldx): for i < D/2,
     * (x_i, x_{i+D/2}) <- (x_i cos - x_{i+D/2} sin, x_{i+D/2} cos + x_i sin) with angle
     * pos[n] * inv_freq[i]; cos_sin[P, D] holds cos in the first D/2 and sin in the last D/2 of row p.
     * rope_backward applies the inverse rotation to a gradient (in place). */
    void (*rope_forward)(struct backend *be, float *x, int ldx, const int *pos, const float *cos_sin, int N, int H,
                         int D);
    void (*rope_backward)(struct backend *be, float *dx, int lddx, const int *pos, const float *cos_sin, int N, int H,
                          int D);
    /* out[N,F] = silu(gate_up[:, :F]) * gate_up[:, F:] (gate_up is [N, 2F]). */
    void (*swiglu_forward)(struct backend *be, float *out, const float *gate_up, int N, int F);
    /* dgate_up[N,2F] = (overwritten, not accumulated) from dout[N,F]. */
    void (*swiglu_backward)(struct backend *be, float *dgate_up, const float *dout, const float *gate_up, int N, int F);
    /* y[n] += alpha * x[n] */
    void (*axpy)(struct backend *be, float *y, const float *x, float alpha, size_t n);
    /* x[n] *= s */
    void (*scale)(struct backend *be, float *x, float s, size_t n);
    /* Row gather/scatter: dst[i,:] = src[rows[i],:] (gather) and dst[rows[i],:] += src[i,:] (scatter;
     * rows distinct). */
    void (*gather_rows)(struct backend *be, float *dst, const float *src, const int *rows, int n_rows, int C);
    void (*scatter_add_rows)(struct backend *be, float *dst, const float *src, const int *rows, int n_rows, int C);
    /* dst[rows[i], :C] = src[i*lds, :C] (rows of a KV cache). */
    void (*set_rows)(struct backend *be, float *dst, const int *rows, const float *src, int lds, int n_rows, int C);

    /* ---- attention ---- */
    /* Causal self-attention inside each segment (segs[n_segs], device memory, covering the tokens;
     * host_segs the same table in host memory, from which a device backend plans its launches without
     * waiting for the device).
     * q[N, H*D] (stride ldq), k and v [N, HKV*D] (strides ldk, ldv); query head h uses kv head
     * h / (H/HKV). out[N, H*D] (contiguous). Only the log-sum-exp of each score row is kept, lse[H, N]:
     * the backward pass recomputes the probabilities block by block (as FlashAttention does), so
     * memory grows with N, not N*T. T >= the longest segment. */
    void (*attention_forward)(struct backend *be, float *out, float *lse, const float *q, int ldq, const float *k,
                              int ldk, const float *v, int ldv, const struct attn_segment *segs,
                              const struct attn_segment *host_segs, int n_segs, int N, int T, int H, int HKV, int D);
    /* dq, dk, dv (all accumulated; GQA heads share dk, dv) from dout[N, H*D]. */
    void (*attention_backward)(struct backend *be, float *dq, int lddq, float *dk, int lddk, float *dv, int lddv,
                               const float *dout, const float *lse, const float *q, int ldq, const float *k, int ldk,
                               const float *v, int ldv, const struct attn_segment *segs,
                               const struct attn_segment *host_segs, int n_segs, int N, int T, int H, int HKV, int D);
    /* Attention of n new query tokens against a KV cache (generation). q[n, H*D] (stride ldq);
     * kc, vc [n_rows, HKV*D] hold the cached keys and values of one layer; query i sees rows
     * first[i] .. first[i]+n_ctx[i]-1 (its own key included). out[n, H*D] contiguous. */
    void (*attention_cached)(struct backend *be, float *out, const float *q, int ldq, const float *kc,
                             const float *vc, const int *first, const int *n_ctx, int n, int H, int HKV, int D);

    /* ---- loss ---- */
    /* For M rows of logits[M,V]: losses[m] = logsumexp(row) - row[targets[m]], lse[m] kept for the
     * backward, correct[m] = 1 when the argmax is the target (ties: lowest index). */
    void (*crossentropy_forward)(struct backend *be, float *losses, float *lse, int *correct, const float *logits,
                                 const int *targets, int M, int V);
    /* In place: logits[m,:] <- scale * weights[m] * (softmax(row) - onehot(target)). */
    void (*crossentropy_backward)(struct backend *be, float *logits, const float *lse, const int *targets,
                                  const float *weights, float scale, int M, int V);
    /* The statistics of M loss rows: last[0..4) = (sum of weights[m] * losses[m], sum of weights,
     * sum of correct, M), and acc[0..4) += last (acc may be NULL). */
    void (*loss_stats)(struct backend *be, double *last, double *acc, const float *losses, const float *weights,
                       const int *correct, int M);

    /* ---- optimiser ---- */
    /* PyTorch AdamW on n floats: p -= lr*wd*p; m,v moments; p -= lr * (m/bc1) / (sqrt(v/bc2) + eps),
     * with bc1 = 1 - beta1^t, bc2 = 1 - beta2^t given by the caller. */
    void (*adamw)(struct backend *be, float *params, const float *grads, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2);
    /* *sumsq (one device double) += sum of x[n]^2, in double precision. */
    void (*sumsq)(struct backend *be, double *sumsq, const float *x, size_t n);
    /* PyTorch's clip_grad_norm_ given the squared norm on the device: x *= max_norm / (norm + 1e-6)
     * when norm = sqrt(*sumsq) exceeds max_norm. */
    void (*clip_by_norm)(struct backend *be, float *x, size_t n, const double *sumsq, float max_norm);

    /* ---- sampling ---- */
    /* One token per row of logits[n, V] (overwritten: scratch) as struct sample_row rows[i] says
     * (rows is device memory), with what `out` asks for (sample_row.h; its arrays device memory):
     * the entropy and log-probs are taken over all V at temperature 1 before anything is cut. */
    void (*sample)(struct backend *be, const struct sample_out *out, float *logits, const struct sample_row *rows,
                   int n, int V);
};

/* Opens the backend of `device`: "cpu", "cuda" (device 0) or "cuda:N". A CUDA device on a machine or
 * a build without one fails at once with "no CUDA device: ...". Close with be->close(be). */
int backend_open(struct backend **out, const char *device, struct whet_err *err);

/* The implementations backend_open chooses from. */
int backend_cpu_open(struct backend **out, struct whet_err *err);
int backend_cuda_open(struct backend **out, int ordinal, struct whet_err *err);

/* "out of <what> memory: needed X GiB, have Y GiB free" (the implementations' alloc error). */
void *backend_out_of_memory(struct whet_err *err, const char *what, size_t needed, size_t have);

#endif
