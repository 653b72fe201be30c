/* bench_rollout.c - whet's side of the rollout benchmark (tests/bench/rollout/run.sh).
 *
 *   bench_rollout prompts MODEL_DIR N_PROMPTS GREEDY_TOKENS
 *       prints {"prompts": [[ids]…], "greedy": [[ids]…]}: the chat-templated prompts both sides
 *       sample from, and whet's greedy reply to each (GREEDY_TOKENS tokens at most), which the
 *       PyTorch side checks it reproduces (the same model computed the same way).
 *   bench_rollout run MODEL_DIR N_PROMPTS N MAX_TOKENS KV_CACHE REPS
 *       samples N responses to each prompt (temperature 1, seed 1) REPS times and prints one JSON line
 *       with the fastest run's generated tokens, seconds and tokens/s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "model.h"
#include "rng.h"
#include "rollout.h"
#include "tokenizer.h"

static const char *const questions[] = {
    "What is 17 + 25?",
    "Name three colours of the rainbow.",
    "Write one sentence about the sea and the wind.",
    "Explain in a few words why the sky is blue, please.",
    "Which is larger, 3 or 8?",
    "Say hello.",
    "Translate 'good morning' into French.",
    "List two prime numbers.",
};
#define N_QUESTIONS ((int)(sizeof questions / sizeof *questions))

static void die(const char *what, const struct whet_err *err) {
    fprintf(stderr, "bench_rollout: %s: %s\n", what, err->msg);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 4 || (strcmp(argv[1], "prompts") && strcmp(argv[1], "run")) || (!strcmp(argv[1], "run") && argc != 8) ||
        (!strcmp(argv[1], "prompts") && argc != 5)) {
        fprintf(stderr, "usage: bench_rollout prompts MODEL_DIR N_PROMPTS GREEDY_TOKENS\n"
                        "       bench_rollout run MODEL_DIR N_PROMPTS N MAX_TOKENS KV_CACHE REPS\n");
        return 2;
    }
    const char *dir = argv[2];
    int n_prompts = atoi(argv[3]);
    if (n_prompts < 1 || n_prompts > N_QUESTIONS) {
        fprintf(stderr, "bench_rollout: N_PROMPTS must be in [1, %d]\n", N_QUESTIONS);
        return 2;
    }
    struct whet_err err;
    struct tokenizer *tok;
    struct chat_template tpl = {0};
    struct model *m;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (tokenizer_load(path, &tok, &err)) die("tokenizer", &err);
    if (chat_template_load(&tpl, dir, &err)) die("chat template", &err);
    struct model_opts mo = model_opts_default();
    if (model_load(&m, dir, &mo, &err)) die("model", &err);
    int **ids = calloc((size_t)n_prompts, sizeof *ids), *lens = calloc((size_t)n_prompts, sizeof *lens);
    for (int i = 0; i < n_prompts; i++) {
        struct chat_message user = {"user", questions[i], 1};
        int32_t *ids32;
        uint8_t *mask;
        if (chat_tokenize(&ids32, &mask, &lens[i], &tpl, tok, &user, 1, 1, &err)) die("prompt", &err);
        ids[i] = malloc(sizeof(int) * (size_t)lens[i]);
        for (int t = 0; t < lens[i]; t++) ids[i][t] = ids32[t];
        free(ids32);
        free(mask);
    }
    struct rng rng;
    struct rollout_batch b;
    if (!strcmp(argv[1], "prompts")) {
        struct rollout_opts o = {.n = 1, .max_tokens = atoi(argv[4]), .temperature = 0, .top_p = 1, .use_kv_cache = 1};
        rng_seed(&rng, 1);
        if (rollout_generate(&b, m, tok, (const int *const *)ids, lens, n_prompts, &o, &rng, &err)) die("greedy", &err);
        printf("{\"prompts\": [");
        for (int i = 0; i < n_prompts; i++) {
            printf("%s[", i ? ", " : "");
            for (int t = 0; t < lens[i]; t++) printf("%s%d", t ? ", " : "", ids[i][t]);
            printf("]");
        }
        printf("], \"greedy\": [");
        for (int i = 0; i < n_prompts; i++) {
            printf("%s[", i ? ", " : "");
            for (int t = 0; t < b.responses[i].n_tokens; t++) printf("%s%d", t ? ", " : "", b.responses[i].tokens[t]);
            printf("]");
        }
        printf("]}\n");
        rollout_batch_free(&b);
    } else {
        struct rollout_opts o = {.n = atoi(argv[4]), .max_tokens = atoi(argv[5]), .temperature = 1.0f, .top_p = 1,
                                 .use_kv_cache = atoi(argv[6])};
        int reps = atoi(argv[7]);
        double best_s = 1e30;
        long long best_tokens = 0;
        for (int r = 0; r < reps; r++) {
            rng_seed(&rng, 1);
            if (rollout_generate(&b, m, tok, (const int *const *)ids, lens, n_prompts, &o, &rng, &err)) die("run", &err);
            if (b.seconds < best_s) best_s = b.seconds, best_tokens = b.tokens;
            rollout_batch_free(&b);
        }
        printf("{\"impl\": \"whet\", \"kv_cache\": %d, \"prompts\": %d, \"n\": %d, \"max_tokens\": %d, \"tokens\": %lld, "
               "\"seconds\": %.4f, \"tokens_per_s\": %.1f}\n",
               o.use_kv_cache, n_prompts, o.n, o.max_tokens, best_tokens, best_s, best_tokens / best_s);
    }
    for (int i = 0; i < n_prompts; i++) free(ids[i]);
    free(ids);
    free(lens);
    model_free(m);
    chat_template_free(&tpl);
    tokenizer_free(tok);
    return 0;
}
