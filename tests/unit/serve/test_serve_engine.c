/* test_serve_engine.c - the model worker's engine (executor/serve) on the tiny model: 16 adapters,
 * requests arriving while others run (continuous batching) through 8 KV slots and 6 adapter cache
 * entries (so adapters are evicted and loaded again), greedy and seeded, n = 1 and 2. Every choice's
 * tokens equal those of its adapter loaded alone and sampled alone with the same seed; stop strings cut
 * the text; cancel ends a request; bad requests are refused with the field, and an adapter that cannot
 * load ends its request with an error event. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "rng.h"
#include "sampler.h"
#include "serve_engine.h"
#include "test.h"
#include "tiny_models.h"
#include "tokenizer.h"

#define N_ADAPTERS 16
#define N_REQ 20
#define MAX_NEW 12
static char root_dir[64], model_dir[128], adapter_dirs[N_ADAPTERS][160];

static int setup(void) {
    struct whet_err err;
    snprintf(root_dir, sizeof root_dir, "/tmp/whet-serve-XXXXXX");
    if (tiny_model_write(root_dir, model_dir, &err)) goto fail;
    for (int k = 0; k < N_ADAPTERS; k++) {
        snprintf(adapter_dirs[k], sizeof adapter_dirs[k], "%s/adapter-%d", root_dir, k);
        unsigned targets = k % 4 == 3 ? LORA_Q | LORA_V | LORA_DOWN : LORA_ALL; /* ranks 2, 4, 6 */
        if (random_adapter_write(model_dir, adapter_dirs[k], 2 + k % 3 * 2, targets, 500 + (uint64_t)k, 0.08f, &err))
            goto fail;
    }
    return 0;
fail:
    fprintf(stderr, "setup: %s\n", err.msg);
    return -1;
}

/* ---------------------------------------------------------------- what the engine emits */

struct choice_out {
    int tokens[MAX_NEW], n_tokens, token_events, completion_tokens;
    float logprobs[MAX_NEW], top1[MAX_NEW];
    int top_ids[MAX_NEW][3];
    enum serve_finish finish;
    int finished;
    char text[512];
    size_t text_len;
};
struct req_out {
    uint64_t id;
    struct choice_out c[2];
};
static struct req_out outs[N_REQ + 8];
static int n_outs;

static void on_event(void *ctx, const struct serve_event *ev) {
    struct req_out *r = ctx;
    CHECK(ev->request == r->id && ev->choice >= 0 && ev->choice < 2);
    struct choice_out *c = &r->c[ev->choice];
    CHECK(!c->finished); /* nothing after the final event */
    if (ev->finish != SERVE_RUNNING) {
        c->finished = 1, c->finish = ev->finish, c->completion_tokens = ev->completion_tokens;
        if (ev->finish == SERVE_ERROR) snprintf(c->text, sizeof c->text, "%.*s", (int)ev->text_len, ev->text);
        return;
    }
    if (c->n_tokens < MAX_NEW) {
        c->logprobs[c->n_tokens] = ev->logprob;
        c->top1[c->n_tokens] = ev->n_top > 0 ? ev->top_logprobs[0] : 0;
        for (int j = 0; j < ev->n_top && j < 3; j++) c->top_ids[c->n_tokens][j] = ev->top_ids[j];
        c->tokens[c->n_tokens++] = ev->token;
    }
    c->token_events++;
    if (c->text_len + ev->text_len < sizeof c->text) {
        memcpy(c->text + c->text_len, ev->text, ev->text_len);
        c->text_len += ev->text_len;
        c->text[c->text_len] = 0;
    }
}

/* ---------------------------------------------------------------- the reference: alone */

struct ref {
    int tokens[MAX_NEW], n_tokens;
    enum serve_finish finish;
};

/* Choice c of a request run alone: its adapter loaded the ordinary way, tokens drawn one by one from
 * (the engine's seed for choice c, the token's index), ending as the engine's rules say. */
static struct ref run_alone(int adapter, const int *prompt, int n_prompt, struct sample_row row, int c, int max_tokens,
                            const struct tokenizer *tok) {
    struct ref out = {.finish = SERVE_LENGTH};
    struct model_opts o = model_opts_default();
    o.adapter_dir = adapter >= 0 ? adapter_dirs[adapter] : NULL;
    struct model *m;
    struct whet_err err;
    CHECK_MSG(model_load(&m, model_dir, &o, &err) == 0, "%s", err.msg);
    struct kv_cache *cache = kv_cache_new(m, 1, 64, &err);
    row.seed = rng_stream(row.seed, (uint64_t)c);
    row.vocab = (int)tokenizer_vocab_size(tok);
    int slot = 0, next;
    row.counter = 0;
    struct sample_out drawn = {.ids = &next};
    CHECK(model_prefill_sample(m, cache, 0, prompt, n_prompt, 1, &row, &drawn, &err) == 0);
    for (;;) {
        out.tokens[out.n_tokens++] = next;
        if (sample_is_end_token(tok, model_get_config(m), next)) {
            out.finish = SERVE_STOP;
            break;
        }
        if (out.n_tokens == max_tokens) break;
        row.counter = (uint32_t)out.n_tokens;
        CHECK(model_decode_sample(m, cache, &slot, &next, 1, &row, &drawn, &err) == 0);
    }
    kv_cache_free(cache);
    model_free(m);
    return out;
}

/* ---------------------------------------------------------------- tests */

static struct serve_engine *open_engine(void) {
    struct serve_engine_opts o = {.model_dir = model_dir, .n_slots = 8, .max_len = 64, .max_adapters = 6};
    struct serve_engine *e = NULL;
    struct whet_err err;
    CHECK_MSG(serve_engine_open(&e, &o, &err) == 0, "%s", err.msg);
    return e;
}

static void prompt_of(int i, int *ids, int *n) {
    *n = 3 + i % 7;
    for (int t = 0; t < *n; t++) ids[t] = (i * 97 + t * 31 + 11) % 2000;
}

TEST(continuous_batching_equals_each_request_alone) {
    struct serve_engine *e = open_engine();
    struct whet_err err;
    int prompts[N_REQ][16], lens[N_REQ];
    struct serve_request reqs[N_REQ];
    n_outs = 0;
    memset(outs, 0, sizeof outs);
    for (int i = 0; i < N_REQ; i++) {
        prompt_of(i, prompts[i], &lens[i]);
        int adapter = i == N_REQ - 1 ? -1 : i % N_ADAPTERS; /* the last on the base alone */
        reqs[i] = (struct serve_request){.adapter = adapter >= 0 ? adapter_dirs[adapter] : NULL,
                                         .prompt = prompts[i],
                                         .n_prompt = lens[i],
                                         .n = i % 5 == 1 ? 2 : 1,
                                         .max_tokens = 4 + i % 9,
                                         .sampling = {.seed = 77 + (uint64_t)i,
                                                      .temperature = i % 3 ? 1.0f : 0,
                                                      .top_p = i % 4 == 2 ? 0.9f : 1,
                                                      .top_k = i % 6 == 5 ? 20 : 0},
                                         .emit = on_event,
                                         .ctx = &outs[i]};
    }
    /* half now, the rest while those run */
    int submitted = 0, busy = 1, steps = 0;
    for (; submitted < N_REQ / 2; submitted++)
        CHECK_MSG(serve_engine_submit(e, &reqs[submitted], &outs[submitted].id, &err) == 0, "%s", err.msg);
    while (busy > 0 && steps < 1000) {
        if (steps % 2 == 1 && submitted < N_REQ) {
            CHECK(serve_engine_submit(e, &reqs[submitted], &outs[submitted].id, &err) == 0);
            submitted++;
        }
        busy = serve_engine_step(e, &err);
        CHECK_MSG(busy >= 0, "%s", err.msg);
        busy += submitted < N_REQ;
        steps++;
    }
    struct serve_stats st = serve_engine_stats(e);
    CHECK(st.running == 0 && st.waiting == 0);
    CHECK_MSG(st.adapter_evictions > 0 && st.adapter_loads >= N_ADAPTERS, "loads %lld evictions %lld", st.adapter_loads,
              st.adapter_evictions);
    int mismatches = 0;
    for (int i = 0; i < N_REQ; i++)
        for (int c = 0; c < reqs[i].n; c++) {
            const struct choice_out *got = &outs[i].c[c];
            struct ref want = run_alone(i == N_REQ - 1 ? -1 : i % N_ADAPTERS, prompts[i], lens[i], reqs[i].sampling, c,
                                        reqs[i].max_tokens, serve_engine_tokenizer(e));
            int same = got->finished && got->finish == want.finish && got->n_tokens == want.n_tokens &&
                       got->completion_tokens == want.n_tokens &&
                       !memcmp(got->tokens, want.tokens, sizeof(int) * (size_t)want.n_tokens);
            if (!same) {
                fprintf(stderr, "request %d choice %d differs from alone (finish %d/%d):", i, c, got->finish,
                        want.finish);
                for (int t = 0; t < got->n_tokens; t++) fprintf(stderr, " %d", got->tokens[t]);
                fprintf(stderr, " | want");
                for (int t = 0; t < want.n_tokens; t++) fprintf(stderr, " %d", want.tokens[t]);
                fprintf(stderr, "\n");
            }
            mismatches += !same;
        }
    CHECK(mismatches == 0);
    serve_engine_close(e);
}

static int done_with(struct serve_engine *e, const struct req_out *r, int n) {
    struct whet_err err;
    for (int steps = 0; steps < 200; steps++) {
        int all = 1;
        for (int c = 0; c < n; c++) all &= r->c[c].finished;
        if (all) return 1;
        if (serve_engine_step(e, &err) < 0) return 0;
    }
    return 0;
}

TEST(stop_strings_cut_the_text) {
    struct serve_engine *e = open_engine();
    struct whet_err err;
    int prompt[16], n;
    prompt_of(3, prompt, &n);
    struct serve_request r = {.adapter = adapter_dirs[3],
                              .prompt = prompt,
                              .n_prompt = n,
                              .n = 1,
                              .max_tokens = 12,
                              .sampling = {.temperature = 0, .top_p = 1},
                              .emit = on_event,
                              .ctx = &outs[0]};
    memset(&outs[0], 0, sizeof outs[0]);
    CHECK(serve_engine_submit(e, &r, &outs[0].id, &err) == 0 && done_with(e, &outs[0], 1));
    struct choice_out full = outs[0].c[0];
    CHECK(full.text_len >= 4);
    /* stop at the text from its third byte on: the reply ends before it */
    char stop[8];
    snprintf(stop, sizeof stop, "%.3s", full.text + 2);
    char *stops[] = {stop};
    r.stop = stops, r.n_stop = 1;
    memset(&outs[1], 0, sizeof outs[1]);
    r.ctx = &outs[1];
    CHECK(serve_engine_submit(e, &r, &outs[1].id, &err) == 0 && done_with(e, &outs[1], 1));
    const struct choice_out *cut = &outs[1].c[0];
    CHECK(cut->finish == SERVE_STOP);
    CHECK_MSG(cut->text_len == (size_t)(strstr(full.text, stop) - full.text), "cut at %zu of \"%s\"", cut->text_len,
              full.text);
    serve_engine_close(e);
}

/* The log-probs a request reports are the trainer's: the nll of the same tokens under a forward pass
 * with targets (what `whet score` reports), to 1e-4; the top log-probs put the greedy token first. */
TEST(logprobs_are_the_trainers) {
    struct serve_engine *e = open_engine();
    struct whet_err err;
    int prompt[16], n;
    prompt_of(6, prompt, &n);
    struct serve_request r = {.adapter = adapter_dirs[5],
                              .prompt = prompt,
                              .n_prompt = n,
                              .n = 2,
                              .max_tokens = 10,
                              .sampling = {.temperature = 0.8f, .top_p = 1, .seed = 11, .top_logprobs = 3},
                              .emit = on_event,
                              .ctx = &outs[0]};
    memset(&outs[0], 0, sizeof outs[0]);
    CHECK(serve_engine_submit(e, &r, &outs[0].id, &err) == 0 && done_with(e, &outs[0], 2));
    struct model_opts o = model_opts_default();
    o.adapter_dir = adapter_dirs[5];
    struct model *m;
    CHECK(model_load(&m, model_dir, &o, &err) == 0);
    for (int c = 0; c < 2; c++) {
        const struct choice_out *got = &outs[0].c[c];
        int ids[32], targets[32], T = n + got->n_tokens;
        float nll[32];
        for (int t = 0; t < T; t++) ids[t] = t < n ? prompt[t] : got->tokens[t - n];
        for (int t = 0; t < T; t++) targets[t] = t + 1 < T && t + 1 >= n ? ids[t + 1] : -1;
        struct model_batch b = {.B = 1, .T = T, .ids = ids, .targets = targets};
        CHECK(model_forward(m, &b, NULL, &err) == 0);
        model_get_token_losses(m, nll);
        double worst = 0;
        for (int k = 0; k < got->n_tokens; k++) {
            double want = -nll[n - 1 + k];
            worst = fmax(worst, fabs(got->logprobs[k] - want));
            CHECK(got->top1[k] >= got->logprobs[k] - 1e-6f); /* the likeliest is at least as likely */
        }
        CHECK_MSG(worst < 1e-4, "choice %d: log-probs differ from the forward pass by %g", c, worst);
    }
    model_free(m);
    serve_engine_close(e);
}

TEST(cancel_and_bad_requests) {
    struct serve_engine *e = open_engine();
    struct whet_err err;
    int prompt[16], n;
    prompt_of(5, prompt, &n);
    struct serve_request r = {.prompt = prompt,
                              .n_prompt = n,
                              .n = 2,
                              .max_tokens = 40,
                              .sampling = {.temperature = 1, .top_p = 1, .seed = 3},
                              .emit = on_event,
                              .ctx = &outs[0]};
    memset(outs, 0, sizeof outs);
    CHECK(serve_engine_submit(e, &r, &outs[0].id, &err) == 0);
    CHECK(serve_engine_step(e, &err) == 1);
    serve_engine_cancel(e, outs[0].id);
    CHECK(serve_engine_step(e, &err) == 0);
    CHECK(outs[0].c[0].finish == SERVE_CANCELLED && outs[0].c[1].finish == SERVE_CANCELLED);
    CHECK(serve_engine_stats(e).running == 0);
    /* refused with the field */
    struct serve_request bad = r;
    bad.n = 9;
    CHECK(serve_engine_submit(e, &bad, &outs[1].id, &err) == -1);
    CHECK_CONTAINS(err.msg, "n: must be between 1 and 8");
    bad = r, bad.max_tokens = 64;
    CHECK(serve_engine_submit(e, &bad, &outs[1].id, &err) == -1);
    CHECK_CONTAINS(err.msg, "exceed the 64 tokens");
    bad = r, bad.sampling.top_p = 0;
    CHECK(serve_engine_submit(e, &bad, &outs[1].id, &err) == -1);
    CHECK_CONTAINS(err.msg, "top_p");
    int bad_ids[2] = {5, 99999};
    bad = r, bad.prompt = bad_ids, bad.n_prompt = 2;
    CHECK(serve_engine_submit(e, &bad, &outs[1].id, &err) == -1);
    CHECK_CONTAINS(err.msg, "prompt token 1");
    /* an adapter that is not there: the request ends with the error, the engine goes on */
    bad = r, bad.adapter = "/nonexistent/adapter", bad.ctx = &outs[2];
    CHECK(serve_engine_submit(e, &bad, &outs[2].id, &err) == 0);
    CHECK(serve_engine_step(e, &err) == 0);
    CHECK(outs[2].c[0].finish == SERVE_ERROR && outs[2].c[1].finish == SERVE_ERROR);
    CHECK_CONTAINS(outs[2].c[0].text, "adapter_config.json");
    serve_engine_close(e);
}

int main(void) {
    if (setup()) return 1;
    RUN(continuous_batching_equals_each_request_alone);
    RUN(stop_strings_cut_the_text);
    RUN(logprobs_are_the_trainers);
    RUN(cancel_and_bad_requests);
    whet_rm_rf(root_dir);
    return test_summary();
}
