/* bench_dpo.c - what a DPO step costs next to an SFT step on the same tokens, and where its time goes.
 *
 *   bench_dpo LAYERS HIDDEN HEADS FFN VOCAB PAIRS PROMPT RESPONSE STEPS
 *
 * Writes a random Llama model (model_init_write; multi-head attention, tied embeddings) to a
 * temporary dir and loads it with LoRA r=16 on every linear layer. A micro-batch holds PAIRS rows, each one pair: a PROMPT-token prompt and
 * a RESPONSE-token answer for the chosen and for the rejected sequence, side by side. After a warm-up,
 * STEPS repetitions time, each taking its fastest:
 *   sft        forward + backward of the same batch as SFT (every response token a target, weight 1)
 *   dpo        a DPO micro-batch as the trainer runs it: dpo_forward_backward (one forward, the
 *              per-token weights set, one backward; the reference comes from the table computed
 *              once per run)
 *   reference  the reference pass (adapter off) of the batch, what the table costs once per pair
 *   forward    one forward pass with targets
 * and prints one JSON line with the seconds and the ratio dpo/sft. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpo.h"
#include "model.h"
#include "model_init.h"

static double best_of(double a, double b) { return a < b ? a : b; }

int main(int argc, char **argv) {
    if (argc != 10) {
        fprintf(stderr, "usage: bench_dpo LAYERS HIDDEN HEADS FFN VOCAB PAIRS PROMPT RESPONSE STEPS\n");
        return 2;
    }
    int L = atoi(argv[1]), C = atoi(argv[2]), NH = atoi(argv[3]), F = atoi(argv[4]), V = atoi(argv[5]);
    int pairs = atoi(argv[6]), prompt = atoi(argv[7]), response = atoi(argv[8]), steps = atoi(argv[9]);
    struct whet_err err;
    struct model_init_opts io;
    if (model_init_preset(&io, "tiny", &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    /* Llama with full multi-head attention, like the PyTorch peer (bench_dpo_torch.py). */
    io.arch = ARCH_LLAMA, io.layers = L, io.hidden = C, io.heads = NH, io.kv_heads = NH, io.head_dim = C / NH;
    io.intermediate = F, io.vocab = V;
    char dir[] = "/tmp/whet-bench-dpo.XXXXXX";
    if (!mkdtemp(dir) || model_init_write(dir, &io, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    struct model_opts o = model_opts_default();
    o.train = 1, o.lora_r = 16, o.lora_alpha = 32, o.lora_targets = LORA_ALL, o.seed = 1;
    struct model *m = NULL;
    if (model_load(&m, dir, &o, &err)) return fprintf(stderr, "%s\n", err.msg), 1;

    /* The batch: row p holds pair p, chosen then rejected, each prompt + response tokens. */
    int n_seq = prompt + response, T = 2 * n_seq, N = pairs * T;
    struct dpo_batch b = {.B = pairs, .T = T, .n_pairs = pairs};
    b.ids = malloc(sizeof(int) * N), b.positions = malloc(sizeof(int) * N), b.seq_ids = malloc(sizeof(int) * N);
    b.targets = malloc(sizeof(int) * N), b.side = malloc(sizeof(int) * N);
    unsigned x = 12345;
    for (int t = 0; t < N; t++) {
        int p = t / T, s = (t % T) / n_seq, i = t % n_seq;
        x = x * 1103515245u + 12345u;
        b.ids[t] = (int)((x >> 8) % (unsigned)V);
        b.positions[t] = i, b.seq_ids[t] = s;
        b.side[t] = i >= prompt - 1 && i < n_seq - 1 ? 2 * p + s : -1;
    }
    for (int t = 0; t < N; t++) b.targets[t] = b.side[t] >= 0 ? b.ids[t + 1] : -1;
    b.n_tokens = N;
    struct model_batch mb = {b.B, b.T, b.ids, b.positions, b.seq_ids, b.targets, NULL};
    double *ref = malloc(sizeof(double) * 2 * pairs);

    double t_sft = 1e30, t_dpo = 1e30, t_ref = 1e30, t_fwd = 1e30;
    for (int rep = 0; rep <= steps; rep++) { /* rep 0 warms up */
        float loss;
        double t0 = whet_now_mono();
        if (model_forward(m, &mb, &loss, &err) || model_backward(m, 1.0f, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
        double t1 = whet_now_mono();
        struct dpo_stats st = {0};
        if (dpo_reference_logps(ref, m, NULL, &b, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
        double t2 = whet_now_mono();
        if (dpo_forward_backward(m, &b, ref, 0.1, 1.0 / pairs, &st, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
        double t3 = whet_now_mono();
        if (model_forward(m, &mb, &loss, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
        double t4 = whet_now_mono();
        if (rep == 0) continue;
        t_sft = best_of(t_sft, t1 - t0), t_ref = best_of(t_ref, t2 - t1);
        t_dpo = best_of(t_dpo, t3 - t2), t_fwd = best_of(t_fwd, t4 - t3);
    }
    printf("{\"tokens\": %d, \"sft_s\": %.4f, \"dpo_s\": %.4f, \"reference_s\": %.4f, \"forward_s\": %.4f, "
           "\"dpo_over_sft\": %.2f}\n",
           N, t_sft, t_dpo, t_ref, t_fwd, t_dpo / t_sft);
    model_free(m);
    free(ref);
    free(b.ids), free(b.positions), free(b.seq_ids), free(b.targets), free(b.side);
    char *cmd = xasprintf("rm -rf '%s'", dir);
    int rc = system(cmd);
    free(cmd);
    return rc ? 1 : 0;
}
