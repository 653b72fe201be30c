/* bench_rollouts.c - the rollout engine's side of tests/bench/cotrain/grpo.sh: JOBS adapter views of one base
 * (random LoRA B, rank 8: each its own replies), each with PROMPTS prompts x N responses of up to MAX_TOKENS tokens
 * at its own temperature and seed, generated one job after another (rollout_generate on each view, as co-trained
 * GRPO runs did before their rollouts were batched) and all at once (rollout_generate_many on the base), REPS
 * times alternately. Prints one JSON line per way with its fastest rep's generated tokens, wall and CPU seconds
 * and tokens/s, and how many responses the two ways drew alike.
 *
 *   bench_rollouts MODEL_DIR JOBS PROMPTS N MAX_TOKENS REPS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat_template.h"
#include "model.h"
#include "rng.h"
#include "rollout.h"
#include "tokenizer.h"

static void die(const char *what, const struct whet_err *err) {
    fprintf(stderr, "bench_rollouts: %s: %s\n", what, err->msg);
    exit(1);
}

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A view of base with LoRA B drawn uniformly from [-0.1, 0.1] (a new adapter's B is zero: the base's replies). */
static struct model *view_of(struct model *base, uint64_t seed) {
    struct model_opts mo = model_opts_default();
    mo.lora_r = 8, mo.lora_alpha = 16, mo.lora_targets = LORA_ALL, mo.seed = seed;
    struct model *v;
    struct whet_err err;
    if (model_load_adapter_view(&v, base, &mo, &err)) die("adapter view", &err);
    struct rng rng;
    rng_seed(&rng, seed);
    for (int i = 0; i < model_num_tensors(v); i++) {
        const char *name = model_tensor_name(v, i);
        if (!strstr(name, "lora_B")) continue;
        size_t n = (size_t)model_tensor_numel(v, name);
        float *w = malloc(sizeof(float) * n);
        for (size_t k = 0; k < n; k++) w[k] = rng_uniform_range(&rng, -0.1f, 0.1f);
        if (model_set_param(v, name, w, &err)) die("adapter B", &err);
        free(w);
    }
    return v;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: bench_rollouts MODEL_DIR JOBS PROMPTS N MAX_TOKENS REPS\n");
        return 2;
    }
    const char *dir = argv[1];
    int jobs = atoi(argv[2]), prompts = atoi(argv[3]), n = atoi(argv[4]), max_tokens = atoi(argv[5]), reps = atoi(argv[6]);
    if (jobs < 1 || prompts < 1 || n < 1 || max_tokens < 1 || reps < 1) {
        fprintf(stderr, "bench_rollouts: every count must be at least 1\n");
        return 2;
    }
    struct whet_err err;
    struct tokenizer *tok;
    struct chat_template tpl = {0};
    struct model *base;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (tokenizer_load(path, &tok, &err)) die("tokenizer", &err);
    if (chat_template_load(&tpl, dir, &err)) die("chat template", &err);
    struct model_opts mo = model_opts_default();
    if (model_load(&base, dir, &mo, &err)) die("model", &err);
    /* job j's prompt i: "Question <j * prompts + i>: reply with one word." */
    int P = jobs * prompts, **ids = calloc((size_t)P, sizeof *ids), *lens = calloc((size_t)P, sizeof *lens);
    for (int p = 0; p < P; p++) {
        char text[64];
        snprintf(text, sizeof text, "Question %d: reply with one word.", p);
        struct chat_message user = {"user", text, 1};
        int32_t *t;
        uint8_t *mask;
        if (chat_tokenize(&t, &mask, &lens[p], &tpl, tok, &user, 1, 1, &err)) die("prompt", &err);
        ids[p] = malloc(sizeof(int) * (size_t)lens[p]);
        for (int k = 0; k < lens[p]; k++) ids[p][k] = t[k];
        free(t);
        free(mask);
    }
    struct model **views = calloc((size_t)jobs, sizeof *views);
    struct rollout_opts *opts = calloc((size_t)jobs, sizeof *opts);
    struct rng *rngs = calloc((size_t)jobs, sizeof *rngs);
    struct rollout_batch *alone = calloc((size_t)jobs, sizeof *alone), *together = calloc((size_t)jobs, sizeof *together);
    struct rollout_request *q = calloc((size_t)jobs, sizeof *q);
    for (int j = 0; j < jobs; j++) {
        views[j] = view_of(base, (uint64_t)j + 1);
        opts[j] = (struct rollout_opts){.n = n, .max_tokens = max_tokens, .temperature = 0.9f - 0.1f * (float)(j % 4),
                                        .top_p = 1, .use_kv_cache = 1};
        q[j] = (struct rollout_request){views[j], tok, (const int *const *)ids + j * prompts, lens + j * prompts,
                                        prompts, &opts[j], &rngs[j], &together[j]};
    }
    double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}}; /* [one after another, together][wall, cpu] */
    long long tokens[2] = {0, 0};
    for (int rep = 0; rep < reps; rep++)
        for (int way = 0; way < 2; way++) {
            for (int j = 0; j < jobs; j++) {
                rollout_batch_free(way ? &together[j] : &alone[j]);
                rng_seed(&rngs[j], (uint64_t)j + 1);
            }
            double t0 = whet_now_mono(), c0 = cpu_now();
            for (int j = 0; j < jobs && !way; j++)
                if (rollout_generate(&alone[j], views[j], tok, q[j].prompt_ids, q[j].prompt_lens, prompts, &opts[j],
                                     &rngs[j], &err))
                    die("rollout", &err);
            if (way && rollout_generate_many(base, q, jobs, &err)) die("rollouts together", &err);
            double wall = whet_now_mono() - t0, cpu = cpu_now() - c0;
            if (wall < best[way][0]) best[way][0] = wall;
            if (cpu < best[way][1]) best[way][1] = cpu;
            tokens[way] = 0;
            for (int j = 0; j < jobs; j++) tokens[way] += way ? together[j].tokens : alone[j].tokens;
        }
    int same = 0;
    for (int j = 0; j < jobs; j++)
        for (int s = 0; s < prompts * n; s++) {
            const struct rollout_response *a = &alone[j].responses[s], *b = &together[j].responses[s];
            same += a->n_tokens == b->n_tokens && !memcmp(a->tokens, b->tokens, sizeof(int) * (size_t)a->n_tokens);
        }
    static const char *const way_name[2] = {"one after another", "together"};
    for (int way = 0; way < 2; way++)
        printf("{\"rollouts\": \"%s\", \"jobs\": %d, \"rows_per_job\": %d, \"tokens\": %lld, \"wall_s\": %.4f, "
               "\"cpu_s\": %.4f, \"tokens_per_s\": %.1f}\n",
               way_name[way], jobs, prompts * n, tokens[way], best[way][0], best[way][1], tokens[way] / best[way][0]);
    printf("{\"responses\": %d, \"drawn_alike\": %d, \"together_against_one_after_another\": %.2f, \"cpu\": %.2f}\n",
           jobs * prompts * n, same, best[0][0] / best[1][0], best[0][1] / best[1][1]);
    for (int j = 0; j < jobs; j++) {
        rollout_batch_free(&alone[j]);
        rollout_batch_free(&together[j]);
        model_free(views[j]);
    }
    for (int p = 0; p < P; p++) free(ids[p]);
    free(ids), free(lens), free(views), free(opts), free(rngs), free(alone), free(together), free(q);
    chat_template_free(&tpl);
    tokenizer_free(tok);
    model_free(base);
    return 0;
}
