/* The GRPO rollout engine on the tiny model (random weights from `whet model init --preset tiny`):
 * seeding, greedy decoding agreeing across the n slots of a group, with the no-KV-cache path and with
 * `whet sample`'s sample_run, top-k, stop strings and stop ids, max_tokens, the entropy sum, the KV
 * slot copy against a separate prefill, a training (LoRA) model between steps, option errors, and several
 * requests on adapter views of one base generated together (rollout_generate_many) as one at a time.
 * (The sampling op itself, against a brute-force reference: tests/unit/backend.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_template.h"
#include "model.h"
#include "model_init.h"
#include "rng.h"
#include "rollout.h"
#include "sampler.h"
#include "test.h"
#include "tokenizer.h"

static char root_dir[64], model_dir[256];
static struct model *model;
static struct tokenizer *tok;
#define N_PROMPTS 3
static const char *const prompt_text[N_PROMPTS] = {"What is 2 + 3?", "Name a colour.", "Write a haiku about the sea."};
static int *prompt_ids[N_PROMPTS];
static int prompt_lens[N_PROMPTS];

static int setup(void) {
    struct whet_err err;
    snprintf(root_dir, sizeof root_dir, "/tmp/whet-rollout-XXXXXX");
    if (!mkdtemp(root_dir)) return -1;
    snprintf(model_dir, sizeof model_dir, "%s/model", root_dir);
    struct model_init_opts o;
    if (model_init_preset(&o, "tiny", &err) || model_init_write(model_dir, &o, &err)) goto fail;
    struct model_opts mo = model_opts_default();
    if (model_load(&model, model_dir, &mo, &err)) goto fail;
    char path[300];
    snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
    if (tokenizer_load(path, &tok, &err)) goto fail;
    struct chat_template tpl = {0};
    if (chat_template_load(&tpl, model_dir, &err)) goto fail;
    for (int i = 0; i < N_PROMPTS; i++) {
        struct chat_message user = {"user", prompt_text[i], 1};
        int32_t *ids;
        uint8_t *mask;
        if (chat_tokenize(&ids, &mask, &prompt_lens[i], &tpl, tok, &user, 1, 1, &err)) goto fail;
        prompt_ids[i] = malloc(sizeof(int) * (size_t)prompt_lens[i]);
        for (int t = 0; t < prompt_lens[i]; t++) prompt_ids[i][t] = ids[t];
        free(ids);
        free(mask);
    }
    chat_template_free(&tpl);
    return 0;
fail:
    fprintf(stderr, "setup: %s\n", err.msg);
    return -1;
}

static struct rollout_opts opts_default(void) {
    struct rollout_opts o = {.n = 4, .max_tokens = 12, .temperature = 1.0f, .top_p = 1.0f, .use_kv_cache = 1};
    return o;
}

/* Generates for the first n_prompts prompts; checks it succeeded. */
static void generate(struct rollout_batch *b, const struct rollout_opts *o, int n_prompts, uint64_t seed) {
    struct rng rng;
    rng_seed(&rng, seed);
    struct whet_err err = {0};
    int rc = rollout_generate(b, model, tok, (const int *const *)prompt_ids, prompt_lens, n_prompts, o, &rng, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
}

static int same_response(const struct rollout_response *a, const struct rollout_response *b) {
    return a->n_tokens == b->n_tokens && !memcmp(a->tokens, b->tokens, sizeof(int) * (size_t)a->n_tokens) &&
           !strcmp(a->text, b->text) && a->finish == b->finish;
}

static int same_batch(const struct rollout_batch *a, const struct rollout_batch *b) {
    if (a->n_prompts != b->n_prompts || a->n != b->n) return 0;
    for (int i = 0; i < a->n_prompts * a->n; i++)
        if (!same_response(&a->responses[i], &b->responses[i])) return 0;
    return 1;
}

/* The text a response's tokens decode to, cut before the end token when it ended on one. */
static char *decode_tokens(const int *ids, int n) {
    int32_t *ids32 = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) ids32[i] = ids[i];
    char *text;
    size_t len;
    struct whet_err err;
    CHECK(tokenizer_decode(tok, ids32, (size_t)n, &text, &len, &err) == 0);
    free(ids32);
    return text;
}

TEST(layout_counts_and_seed) {
    struct rollout_opts o = opts_default();
    o.top_p = 0.9f;
    struct rollout_batch a, b, c;
    generate(&a, &o, N_PROMPTS, 7);
    generate(&b, &o, N_PROMPTS, 7);
    generate(&c, &o, N_PROMPTS, 8);
    CHECK(a.n_prompts == N_PROMPTS && a.n == 4);
    long long total = 0;
    for (int i = 0; i < N_PROMPTS * 4; i++) {
        const struct rollout_response *r = &a.responses[i];
        CHECK(r->prompt == i / 4);
        CHECK(r->n_tokens >= 1 && r->n_tokens <= o.max_tokens);
        CHECK(r->finish == ROLLOUT_FINISH_STOP || r->n_tokens == o.max_tokens);
        total += r->n_tokens;
        /* the text is what the tokens decode to, the end-of-turn token left out */
        int n_text = r->n_tokens - (r->finish == ROLLOUT_FINISH_STOP ? 1 : 0);
        char *text = decode_tokens(r->tokens, n_text);
        CHECK_STR(r->text, text);
        free(text);
    }
    CHECK(a.tokens == total);
    CHECK(a.seconds > 0);
    CHECK(same_batch(&a, &b));
    CHECK(a.entropy_sum == b.entropy_sum);
    CHECK(!same_batch(&a, &c));
    /* sampled at temperature 1 from a random model, the n responses of a prompt differ */
    CHECK(!same_response(&a.responses[0], &a.responses[1]) || !same_response(&a.responses[1], &a.responses[2]));
    rollout_batch_free(&a);
    rollout_batch_free(&b);
    rollout_batch_free(&c);
}

TEST(greedy_agrees_across_slots_without_cache_and_with_sample_run) {
    struct rollout_opts o = opts_default();
    o.temperature = 0;
    o.n = 3;
    o.max_tokens = 16;
    struct rollout_batch kv, full, topk1;
    generate(&kv, &o, N_PROMPTS, 1);
    o.use_kv_cache = 0;
    generate(&full, &o, N_PROMPTS, 2);
    o.use_kv_cache = 1;
    o.temperature = 1.0f;
    o.top_k = 1;
    generate(&topk1, &o, N_PROMPTS, 3);
    for (int p = 0; p < N_PROMPTS; p++) {
        for (int j = 1; j < 3; j++) CHECK(same_response(&kv.responses[p * 3], &kv.responses[p * 3 + j]));
        struct sample_opts so = {.model_dir = model_dir, .prompt = prompt_text[p], .max_tokens = 16, .top_p = 1};
        char *text = NULL;
        int n = 0;
        struct whet_err err;
        CHECK_MSG(sample_run(&so, &text, &n, &err) == 0, "%s", err.msg);
        const struct rollout_response *r = &kv.responses[p * 3];
        CHECK_STR(r->text, text);
        CHECK(r->n_tokens == n + (r->finish == ROLLOUT_FINISH_STOP ? 1 : 0));
        free(text);
    }
    CHECK(same_batch(&kv, &full));
    CHECK(same_batch(&kv, &topk1));
    /* at least one response ran to max_tokens, so the comparison covers 16 decode steps */
    int longest = 0;
    for (int i = 0; i < N_PROMPTS * 3; i++)
        if (kv.responses[i].n_tokens > longest) longest = kv.responses[i].n_tokens;
    CHECK(longest == 16);
    rollout_batch_free(&kv);
    rollout_batch_free(&full);
    rollout_batch_free(&topk1);
}

TEST(sampled_without_cache_matches_with_cache) {
    /* the same draws from (nearly) the same logits: the recomputing baseline generates the same text */
    struct rollout_opts o = opts_default();
    o.n = 2;
    o.max_tokens = 8;
    struct rollout_batch kv, full;
    generate(&kv, &o, 2, 11);
    o.use_kv_cache = 0;
    generate(&full, &o, 2, 11);
    CHECK(same_batch(&kv, &full));
    CHECK_NEAR(kv.entropy_sum, full.entropy_sum, 1e-3);
    rollout_batch_free(&kv);
    rollout_batch_free(&full);
}

TEST(stop_string_cuts_the_text) {
    struct rollout_opts o = opts_default();
    o.temperature = 0;
    o.n = 2;
    o.max_tokens = 24;
    struct rollout_batch plain, cut;
    generate(&plain, &o, 1, 1);
    const struct rollout_response *r = &plain.responses[0];
    size_t len = strlen(r->text);
    CHECK(len >= 8);
    if (len < 8) return;
    /* a stop string taken from the middle of the greedy text: the greedy run with it stops at its first
     * occurrence */
    char stop[4];
    memcpy(stop, r->text + len / 2, 3);
    stop[3] = '\0';
    char *stops[] = {"never appears \x01", stop};
    o.stop = stops;
    o.n_stop = 2;
    generate(&cut, &o, 1, 1);
    size_t at = (size_t)(strstr(r->text, stop) - r->text);
    /* the tokens up to the one whose bytes complete the stop string */
    int expect_tokens = 0;
    for (size_t bytes = 0; bytes < at + 3; expect_tokens++) {
        size_t l;
        tokenizer_id_bytes(tok, r->tokens[expect_tokens], &l);
        bytes += l;
    }
    for (int j = 0; j < 2; j++) {
        const struct rollout_response *c = &cut.responses[j];
        CHECK(c->finish == ROLLOUT_FINISH_STOP);
        CHECK(strlen(c->text) == at && !strncmp(c->text, r->text, at));
        CHECK(strstr(c->text, stop) == NULL);
        CHECK(c->n_tokens == expect_tokens);
        CHECK(!memcmp(c->tokens, r->tokens, sizeof(int) * (size_t)c->n_tokens));
    }
    rollout_batch_free(&plain);
    rollout_batch_free(&cut);
}

TEST(stop_ids_and_max_tokens) {
    struct rollout_opts o = opts_default();
    o.temperature = 0;
    o.n = 1;
    o.max_tokens = 5;
    struct rollout_batch b, s;
    generate(&b, &o, N_PROMPTS, 1);
    for (int i = 0; i < N_PROMPTS; i++) {
        CHECK(b.responses[i].n_tokens <= 5);
        if (b.responses[i].n_tokens == 5 && b.responses[i].finish != ROLLOUT_FINISH_STOP)
            CHECK(b.responses[i].finish == ROLLOUT_FINISH_LENGTH);
    }
    CHECK(b.responses[0].finish == ROLLOUT_FINISH_LENGTH && b.responses[0].n_tokens == 5);
    /* the third greedy token of prompt 0 as an extra stop id: the response ends at its first use */
    int stop_id = b.responses[0].tokens[2], first = 0;
    while (b.responses[0].tokens[first] != stop_id) first++;
    o.stop_ids = &stop_id;
    o.n_stop_ids = 1;
    generate(&s, &o, 1, 1);
    CHECK(s.responses[0].finish == ROLLOUT_FINISH_STOP);
    CHECK(s.responses[0].n_tokens == first + 1);
    char *text = decode_tokens(b.responses[0].tokens, first);
    CHECK_STR(s.responses[0].text, text);
    free(text);
    rollout_batch_free(&b);
    rollout_batch_free(&s);
}

/* Entropy of softmax(logits[V]) computed here in the obvious way. */
static double entropy_ref(const float *logits, int V) {
    double max = logits[0], z = 0, h = 0;
    for (int i = 1; i < V; i++) max = fmax(max, logits[i]);
    for (int i = 0; i < V; i++) z += exp(logits[i] - max);
    for (int i = 0; i < V; i++) {
        double p = exp(logits[i] - max) / z;
        if (p > 0) h -= p * log(p);
    }
    return h;
}

TEST(entropy_of_the_first_token) {
    /* one token per response: the entropy sum is n times the entropy of the prompt's next-token
     * distribution, which a plain forward pass gives */
    struct rollout_opts o = opts_default();
    o.max_tokens = 1;
    o.n = 3;
    struct rollout_batch b;
    generate(&b, &o, 1, 5);
    int V = model_get_config(model)->vocab_size, T = prompt_lens[0];
    float *logits = malloc(sizeof(float) * (size_t)T * V), loss;
    struct model_batch mb = {1, T, prompt_ids[0], NULL, NULL, NULL, NULL};
    struct whet_err err;
    CHECK(model_forward(model, &mb, &loss, &err) == 0);
    model_get_logits(model, logits);
    double h = entropy_ref(logits + (size_t)(T - 1) * V, V);
    CHECK_NEAR(b.entropy_sum, 3 * h, 1e-3);
    CHECK(h > 0 && h <= log(V));
    CHECK(b.tokens == 3);
    free(logits);
    rollout_batch_free(&b);
}

TEST(kv_copy_equals_separate_prefill) {
    int V = model_get_config(model)->vocab_size, T = prompt_lens[2];
    struct whet_err err;
    struct kv_cache *c = kv_cache_new(model, 3, T + 4, &err);
    float *l0 = malloc(sizeof(float) * (size_t)V), *l2 = malloc(sizeof(float) * (size_t)V);
    float *step = malloc(sizeof(float) * 2 * (size_t)V);
    CHECK(model_prefill(model, c, 0, prompt_ids[2], T, l0, &err) == 0);
    CHECK(kv_cache_copy_slot(c, 1, 0, &err) == 0);
    CHECK(kv_cache_len(c, 1) == T);
    CHECK(model_prefill(model, c, 2, prompt_ids[2], T, l2, &err) == 0);
    CHECK(!memcmp(l0, l2, sizeof(float) * (size_t)V));
    /* two decode steps: slot 1 (copied) and slot 2 (prefilled) see the same tokens */
    int slots[2] = {1, 2}, ids[2] = {42, 42};
    double max_diff = 0;
    for (int k = 0; k < 2; k++) {
        CHECK(model_decode_step(model, c, slots, ids, 2, step, &err) == 0);
        for (int i = 0; i < V; i++) max_diff = fmax(max_diff, fabs(step[i] - step[V + i]));
        ids[0] = ids[1] = 7 + k;
    }
    CHECK_NEAR(max_diff, 0, 1e-5);
    CHECK(kv_cache_len(c, 1) == T + 2 && kv_cache_len(c, 2) == T + 2 && kv_cache_len(c, 0) == T);
    CHECK(kv_cache_copy_slot(c, 3, 0, &err) == -1);
    CHECK_CONTAINS(err.msg, "outside");
    kv_cache_free(c);
    free(l0);
    free(l2);
    free(step);
}

/* The trainer's model (training mode, LoRA) generates between steps: the same greedy replies as the
 * inference model (LoRA B starts at zero), and a training step after a rollout gives the gradient a
 * fresh model gives (generation left nothing behind in the buffers the backward pass reads). */
TEST(training_model_between_steps) {
    struct model_opts mo = model_opts_default();
    mo.train = 1;
    mo.lora_r = 4;
    mo.seed = 3;
    struct model *train_m = NULL, *fresh = NULL;
    struct whet_err err;
    CHECK_MSG(model_load(&train_m, model_dir, &mo, &err) == 0, "%s", err.msg);
    CHECK_MSG(model_load(&fresh, model_dir, &mo, &err) == 0, "%s", err.msg);
    if (!train_m || !fresh) return;
    struct rollout_opts o = opts_default();
    o.temperature = 0;
    o.n = 2;
    o.max_tokens = 6;
    struct rollout_batch a, b;
    generate(&a, &o, 2, 1);
    struct rng rng;
    rng_seed(&rng, 1);
    CHECK(rollout_generate(&b, train_m, tok, (const int *const *)prompt_ids, prompt_lens, 2, &o, &rng, &err) == 0);
    CHECK(same_batch(&a, &b));
    o.use_kv_cache = 0;
    rollout_batch_free(&b);
    CHECK(rollout_generate(&b, train_m, tok, (const int *const *)prompt_ids, prompt_lens, 2, &o, &rng, &err) == 0);
    CHECK(same_batch(&a, &b));
    int T = prompt_lens[1], *targets = malloc(sizeof(int) * (size_t)T);
    for (int t = 0; t < T; t++) targets[t] = t + 1 < T ? prompt_ids[1][t + 1] : -1;
    struct model_batch mb = {1, T, prompt_ids[1], NULL, NULL, targets, NULL};
    float loss_a, loss_b;
    CHECK(model_forward(train_m, &mb, &loss_a, &err) == 0 && model_backward(train_m, 1.0f / (T - 1), &err) == 0);
    CHECK(model_forward(fresh, &mb, &loss_b, &err) == 0 && model_backward(fresh, 1.0f / (T - 1), &err) == 0);
    CHECK(loss_a == loss_b);
    CHECK(model_grad_norm(train_m) > 0);
    CHECK(model_grad_norm(train_m) == model_grad_norm(fresh));
    free(targets);
    rollout_batch_free(&a);
    rollout_batch_free(&b);
    model_free(train_m);
    model_free(fresh);
}

TEST(option_errors) {
    struct rollout_opts o = opts_default();
    struct rollout_batch b;
    struct rng rng;
    rng_seed(&rng, 1);
    struct whet_err err;
    const int *const *ids = (const int *const *)prompt_ids;
    o.n = 0;
    CHECK(rollout_generate(&b, model, tok, ids, prompt_lens, 1, &o, &rng, &err) == -1);
    CHECK_CONTAINS(err.msg, "n: must be at least 1");
    o = opts_default();
    o.top_p = 0;
    CHECK(rollout_generate(&b, model, tok, ids, prompt_lens, 1, &o, &rng, &err) == -1);
    CHECK_CONTAINS(err.msg, "top_p");
    o = opts_default();
    o.max_tokens = model_get_config(model)->max_position_embeddings;
    CHECK(rollout_generate(&b, model, tok, ids, prompt_lens, 1, &o, &rng, &err) == -1);
    CHECK_CONTAINS(err.msg, "exceed the model's");
    char *empty[] = {""};
    o = opts_default();
    o.stop = empty;
    o.n_stop = 1;
    CHECK(rollout_generate(&b, model, tok, ids, prompt_lens, 1, &o, &rng, &err) == -1);
    CHECK_CONTAINS(err.msg, "stop[0]");
    CHECK(b.responses == NULL);
    rollout_batch_free(&b);
}

/* ---------------------------------------------------------------- several requests on one base */

/* An adapter view of the base `model` with random LoRA B (a new adapter's B is zero: no effect at all). */
static struct model *random_view(int r, uint64_t seed) {
    struct model_opts mo = model_opts_default();
    mo.lora_r = r;
    mo.lora_alpha = (float)(2 * r);
    mo.lora_targets = LORA_ALL;
    mo.seed = seed;
    struct model *v = NULL;
    struct whet_err err;
    CHECK_MSG(model_load_adapter_view(&v, model, &mo, &err) == 0, "%s", err.msg);
    if (!v) return NULL;
    struct rng rng;
    rng_seed(&rng, seed);
    for (int i = 0; i < model_num_tensors(v); i++) {
        const char *name = model_tensor_name(v, i);
        if (!strstr(name, "lora_B")) continue;
        long long n = model_tensor_numel(v, name);
        float *w = malloc(sizeof(float) * (size_t)n);
        for (long long k = 0; k < n; k++) w[k] = rng_uniform_range(&rng, -0.1f, 0.1f);
        CHECK(model_set_param(v, name, w, &err) == 0);
        free(w);
    }
    return v;
}

#define N_REQS 3

/* Three requests: two views of the base (ranks 4 and 8) and the base itself, each its own prompts, group size,
 * max_tokens and sampling options; seeds[i] seeds request i's rng. */
struct reqs {
    struct model *views[N_REQS];
    struct rollout_opts opts[N_REQS];
    struct rng rng[N_REQS];
    struct rollout_batch out[N_REQS];
    struct rollout_request q[N_REQS];
};

static void reqs_init(struct reqs *r, struct model *const *views, float temperature, const uint64_t *seeds) {
    static const int first_prompt[N_REQS] = {0, 1, 0}, n_prompts[N_REQS] = {3, 2, 1};
    static const int n[N_REQS] = {2, 3, 1}, max_tokens[N_REQS] = {10, 6, 12}, top_k[N_REQS] = {0, 20, 0};
    static const float top_p[N_REQS] = {0.9f, 1.0f, 1.0f};
    memset(r, 0, sizeof *r);
    for (int i = 0; i < N_REQS; i++) {
        r->views[i] = views[i];
        r->opts[i] = opts_default();
        r->opts[i].n = n[i], r->opts[i].max_tokens = max_tokens[i], r->opts[i].top_k = top_k[i];
        r->opts[i].temperature = i == 1 && temperature > 0 ? 0.7f * temperature : temperature;
        r->opts[i].top_p = top_p[i];
        rng_seed(&r->rng[i], seeds[i]);
        r->q[i] = (struct rollout_request){views[i], tok, (const int *const *)prompt_ids + first_prompt[i],
                                           prompt_lens + first_prompt[i], n_prompts[i], &r->opts[i], &r->rng[i],
                                           &r->out[i]};
    }
}

/* Request i generated alone on its own view, from the same seed: into *out. */
static void alone(struct rollout_batch *out, const struct reqs *r, int i, uint64_t seed) {
    struct rng rng;
    rng_seed(&rng, seed);
    struct whet_err err = {0};
    const struct rollout_request *q = &r->q[i];
    int rc = rollout_generate(out, q->model, tok, q->prompt_ids, q->prompt_lens, q->n_prompts, q->opts, &rng, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
}

static void reqs_free(struct reqs *r) {
    for (int i = 0; i < N_REQS; i++) rollout_batch_free(&r->out[i]);
}

/* Greedy: every request's responses batched are its responses alone (with and without the KV cache), its
 * own options honoured, and the adapters matter (a view's replies are not the base's). The batched decode sums
 * its products in another order: on this CPU every response is alike, but on another a near tie of the tiny
 * random model's two best tokens could flip one, so at least 90% of the responses are asserted, as for sampled
 * ones. */
TEST(greedy_requests_together_as_one_at_a_time) {
    struct model *views[N_REQS] = {random_view(4, 21), random_view(8, 22), model};
    if (!views[0] || !views[1]) return;
    const uint64_t seeds[N_REQS] = {1, 2, 3};
    for (int kv = 1; kv >= 0; kv--) {
        struct reqs r;
        reqs_init(&r, views, 0, seeds);
        for (int i = 0; i < N_REQS; i++) r.opts[i].use_kv_cache = kv;
        struct whet_err err = {0};
        CHECK_MSG(rollout_generate_many(model, r.q, N_REQS, &err) == 0, "%s", err.msg);
        int same = 0, total = 0;
        for (int i = 0; i < N_REQS; i++) {
            struct rollout_batch a;
            alone(&a, &r, i, seeds[i]);
            CHECK(r.out[i].n == r.opts[i].n && r.out[i].n_prompts == r.q[i].n_prompts);
            CHECK(a.n == r.out[i].n && a.n_prompts == r.out[i].n_prompts);
            for (int s = 0; s < a.n_prompts * a.n; s++, total++) {
                CHECK(r.out[i].responses[s].n_tokens <= r.opts[i].max_tokens);
                same += same_response(&r.out[i].responses[s], &a.responses[s]);
            }
            CHECK(r.out[i].seconds > 0);
            rollout_batch_free(&a);
        }
        CHECK_MSG(same * 10 >= total * 9, "kv cache %d: %d of %d responses as alone", kv, same, total);
        /* the views' adapters were applied: request 0's replies on the plain base differ */
        struct rollout_batch plain;
        r.q[0].model = model;
        alone(&plain, &r, 0, seeds[0]);
        CHECK(!same_batch(&r.out[0], &plain));
        rollout_batch_free(&plain);
        reqs_free(&r);
    }
    model_free(views[0]);
    model_free(views[1]);
}

/* Sampled: each request draws from its own rng (one draw of it, as alone): its responses batched are those it
 * draws alone from the same seed (all of them on this CPU; a token may flip where two were within the rounding
 * of the batched products, so at least 90% are asserted), not those of another seed. */
TEST(sampled_requests_draw_from_their_own_rngs) {
    struct model *views[N_REQS] = {random_view(4, 31), random_view(8, 32), model};
    if (!views[0] || !views[1]) return;
    const uint64_t seeds[N_REQS] = {11, 12, 13};
    struct reqs r;
    reqs_init(&r, views, 1.0f, seeds);
    struct whet_err err = {0};
    CHECK_MSG(rollout_generate_many(model, r.q, N_REQS, &err) == 0, "%s", err.msg);
    int same = 0, other_seed = 0, total = 0;
    for (int i = 0; i < N_REQS; i++) {
        struct rng one;
        rng_seed(&one, seeds[i]);
        rng_u64(&one);
        CHECK(!memcmp(&one, &r.rng[i], sizeof one)); /* one draw of the request's rng */
        struct rollout_batch a, b;
        alone(&a, &r, i, seeds[i]);
        alone(&b, &r, i, seeds[(i + 1) % N_REQS]);
        for (int s = 0; s < a.n_prompts * a.n; s++, total++) {
            same += same_response(&r.out[i].responses[s], &a.responses[s]);
            other_seed += same_response(&r.out[i].responses[s], &b.responses[s]);
        }
        rollout_batch_free(&a);
        rollout_batch_free(&b);
    }
    CHECK_MSG(same * 10 >= total * 9, "%d of %d responses as alone", same, total);
    CHECK_MSG(other_seed * 2 < total, "%d of %d responses as another seed's", other_seed, total);
    reqs_free(&r);
    model_free(views[0]);
    model_free(views[1]);
}

TEST(request_errors) {
    struct model *views[N_REQS] = {model, model, model};
    const uint64_t seeds[N_REQS] = {1, 2, 3};
    struct reqs r;
    reqs_init(&r, views, 1.0f, seeds);
    r.opts[1].n = 0;
    struct whet_err err;
    CHECK(rollout_generate_many(model, r.q, N_REQS, &err) == -1);
    CHECK_CONTAINS(err.msg, "request 1");
    CHECK_CONTAINS(err.msg, "n: must be at least 1");
    for (int i = 0; i < N_REQS; i++) CHECK(r.out[i].responses == NULL);
    r.opts[1].n = 1;
    CHECK(rollout_generate_many(NULL, r.q, N_REQS, &err) == -1);
    CHECK_CONTAINS(err.msg, "without a shared base");
    reqs_free(&r);
}

int main(void) {
    if (setup()) return 1;
    RUN(layout_counts_and_seed);
    RUN(greedy_agrees_across_slots_without_cache_and_with_sample_run);
    RUN(sampled_without_cache_matches_with_cache);
    RUN(stop_string_cuts_the_text);
    RUN(stop_ids_and_max_tokens);
    RUN(entropy_of_the_first_token);
    RUN(kv_copy_equals_separate_prefill);
    RUN(training_model_between_steps);
    RUN(option_errors);
    RUN(greedy_requests_together_as_one_at_a_time);
    RUN(sampled_requests_draw_from_their_own_rngs);
    RUN(request_errors);
    for (int i = 0; i < N_PROMPTS; i++) free(prompt_ids[i]);
    tokenizer_free(tok);
    model_free(model);
    char rm[300];
    snprintf(rm, sizeof rm, "rm -rf '%s'", root_dir);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", root_dir);
    return test_summary();
}
