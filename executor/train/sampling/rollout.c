/* rollout.c - batched sampling for GRPO (see rollout.h).
 *
 * The n_prompts * n responses each own a KV-cache slot, response j of prompt i slot i*n + j. A
 * prompt's prefill draws the first token of each of its n slots; then every step decodes the last
 * token of every slot still generating in one model_decode_sample, which draws each slot's next token
 * on the device. Slot s's k-th token is drawn from (its seed, k), so the same rng state gives the
 * same responses whatever order or batch the slots run in. Without the KV cache (the benchmark's
 * baseline), each step instead runs the whole sequence of every active slot through model_forward,
 * one batch per prompt (a group's active slots all have the same length), and samples the last
 * positions (model_sample_logits).
 *
 * Several requests (rollout_generate_many) are one generation over all their slots, request-major:
 * each request's slots draw from its own seeds and stop on its own settings, and every pass runs once
 * on the shared base for all of them, each request's rows through its adapter view (model_set_lora_runs
 * before each pass: the slots of a pass are always grouped by request). rollout_generate is its
 * one-request case, on the request's own model. */
#include "rollout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "model.h"
#include "rng.h"
#include "sampler.h"
#include "tokenizer.h"

/* ---------------------------------------------------------------- responses */

static int is_extra_stop_id(const struct rollout_opts *o, int id) {
    for (int i = 0; i < o->n_stop_ids; i++)
        if (o->stop_ids[i] == id) return 1;
    return 0;
}

/* ---------------------------------------------------------------- one generation */

/* A request's part of the generation: its slots are [first, first + n_slots) of the generation's. */
struct part {
    const struct rollout_request *q;
    int first, n_slots, max_prompt;
    uint64_t seed; /* its slots' seeds' base: one draw of its rng */
};

struct gen {
    struct model *m;    /* the passes' model: the one request's own, or the shared base */
    struct model *base; /* the shared base (the passes apply each part's adapter), or NULL */
    struct part *parts;
    int n_slots;
    int *part_of;                   /* [n_slots] */
    struct rollout_response **resp; /* [n_slots] each slot's response, in its request's batch */
    struct lora_run *runs;          /* [requests] a pass's adapters */
};

/* On the shared base, the adapters of the next pass: slots[0..n) (grouped by part) of `per` tokens each.
 * Nothing to do on one request's own model. */
static int set_runs(struct gen *g, const int *slots, int n, int per, struct whet_err *err) {
    if (!g->base) return 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        const struct model *view = g->parts[g->part_of[slots[i]]].q->model;
        if (i == 0 || g->part_of[slots[i]] != g->part_of[slots[i - 1]])
            g->runs[k++] = (struct lora_run){view == g->base ? NULL : view, 0};
        g->runs[k - 1].n_tokens += per;
    }
    return model_set_lora_runs(g->base, g->runs, k, err);
}

/* ---------------------------------------------------------------- tokens without a KV cache */

/* The next token of every active slot, next[r] for act[r] drawn as rows[r] says, by running prompt +
 * response through model_forward, one batch per prompt, and sampling the batch's last positions. */
static int forward_full(int *next, float *entropy, struct gen *g, const int *act, int n_act,
                        const struct sample_row *rows, int **ids, size_t *ids_cap, struct whet_err *err) {
    for (int r0 = 0; r0 < n_act;) {
        const struct part *pt = &g->parts[g->part_of[act[r0]]];
        int p = g->resp[act[r0]]->prompt, r1 = r0;
        while (r1 < n_act && g->part_of[act[r1]] == g->part_of[act[r0]] && g->resp[act[r1]]->prompt == p) r1++;
        int B = r1 - r0, T = pt->q->prompt_lens[p] + g->resp[act[r0]]->n_tokens;
        size_t N = (size_t)B * T;
        if (N + (size_t)B > *ids_cap) {
            *ids_cap = N + (size_t)B;
            *ids = xrealloc(*ids, *ids_cap * sizeof **ids);
        }
        int *last = *ids + N; /* the position whose logits give each row's next token */
        for (int r = r0; r < r1; r++) { /* row r - r0: prompt, then the response so far */
            const struct rollout_response *resp = g->resp[act[r]];
            int *row = *ids + (size_t)(r - r0) * T;
            memcpy(row, pt->q->prompt_ids[p], sizeof(int) * (size_t)pt->q->prompt_lens[p]);
            memcpy(row + pt->q->prompt_lens[p], resp->tokens, sizeof(int) * (size_t)resp->n_tokens);
            last[r - r0] = (r - r0) * T + T - 1;
        }
        struct model_batch batch = {B, T, *ids, NULL, NULL, NULL, NULL};
        struct sample_out drawn = {.ids = next + r0, .entropy = entropy + r0};
        if (set_runs(g, act + r0, B, T, err) || model_forward(g->m, &batch, NULL, err) ||
            model_sample_logits(g->m, last, B, rows + r0, &drawn, err))
            return -1;
        r0 = r1;
    }
    return 0;
}

/* ---------------------------------------------------------------- generation */

static int check_opts(const struct model *m, const int *prompt_lens, int n_prompts, const struct rollout_opts *o,
                      int *max_prompt, struct whet_err *err) {
    if (n_prompts < 1) return whet_errf(err, "rollout: no prompts");
    if (o->n < 1) return whet_errf(err, "rollout: n: must be at least 1");
    if (o->max_tokens < 1) return whet_errf(err, "rollout: max_tokens: must be at least 1");
    if (!(o->temperature >= 0)) return whet_errf(err, "rollout: temperature: must be >= 0");
    if (!(o->top_p > 0 && o->top_p <= 1)) return whet_errf(err, "rollout: top_p: must be in (0, 1]");
    if (o->top_k < 0) return whet_errf(err, "rollout: top_k: must be >= 0");
    for (int i = 0; i < o->n_stop; i++)
        if (!o->stop[i] || !o->stop[i][0]) return whet_errf(err, "rollout: stop[%d]: must be a non-empty string", i);
    *max_prompt = 0;
    for (int i = 0; i < n_prompts; i++) {
        if (prompt_lens[i] < 1) return whet_errf(err, "rollout: prompt %d: empty", i);
        if (prompt_lens[i] > *max_prompt) *max_prompt = prompt_lens[i];
    }
    int max_pos = model_get_config(m)->max_position_embeddings;
    if (*max_prompt + o->max_tokens > max_pos)
        return whet_errf(err, "rollout: the longest prompt (%d tokens) and max_tokens %d exceed the model's %d positions",
                         *max_prompt, o->max_tokens, max_pos);
    return 0;
}

/* The requests' parts of the generation (each takes its draw of its rng first, whatever follows), checked:
 * the sizes of the KV cache it needs (*max_len, *use_kv_cache). */
static int plan_parts(struct gen *g, struct rollout_request *reqs, int n_reqs, int *max_len, int *use_kv_cache,
                      struct whet_err *err) {
    for (int i = 0; i < n_reqs; i++) {
        memset(reqs[i].out, 0, sizeof *reqs[i].out);
        g->parts[i] = (struct part){.q = &reqs[i], .seed = rng_u64(reqs[i].rng)};
    }
    *max_len = 0;
    for (int i = 0, seen = 0; i < n_reqs; i++) {
        struct part *pt = &g->parts[i];
        const struct rollout_opts *o = reqs[i].opts;
        if (reqs[i].n_prompts == 0) continue; /* a rank's empty share */
        if (check_opts(reqs[i].model, reqs[i].prompt_lens, reqs[i].n_prompts, o, &pt->max_prompt, err))
            return n_reqs > 1 ? whet_err_prefix(err, "request %d", i) : -1;
        if (seen++ && o->use_kv_cache != *use_kv_cache)
            return whet_errf(err, "rollout: request %d: use_kv_cache differs from the other requests'", i);
        *use_kv_cache = o->use_kv_cache;
        pt->first = g->n_slots, pt->n_slots = reqs[i].n_prompts * o->n;
        g->n_slots += pt->n_slots;
        if (pt->max_prompt + o->max_tokens > *max_len) *max_len = pt->max_prompt + o->max_tokens;
    }
    return 0;
}

int rollout_generate_many(struct model *base, struct rollout_request *reqs, int n_reqs, struct whet_err *err) {
    if (n_reqs < 1) return whet_errf(err, "rollout: no requests");
    if (!base && n_reqs > 1) return whet_errf(err, "rollout: %d requests without a shared base", n_reqs);
    struct gen g = {.m = base ? base : reqs[0].model, .base = base};
    g.parts = xcalloc((size_t)n_reqs, sizeof *g.parts);
    int max_len, use_kv_cache = 1;
    if (plan_parts(&g, reqs, n_reqs, &max_len, &use_kv_cache, err)) {
        free(g.parts);
        return -1;
    }
    if (g.n_slots == 0) {
        free(g.parts);
        return 0;
    }
    double t0 = whet_now_mono();
    const struct model_config *mc = model_get_config(g.m);
    int n_slots = g.n_slots;
    g.part_of = xmalloc(sizeof(int) * (size_t)n_slots);
    g.resp = xmalloc(sizeof *g.resp * (size_t)n_slots);
    g.runs = xmalloc(sizeof *g.runs * (size_t)n_reqs);
    struct whet_buf *texts = xcalloc((size_t)n_slots, sizeof *texts); /* the responses' texts, growing */
    /* each slot's sampling row; and, in act order, the step's rows, drawn tokens and entropies */
    struct sample_row *rows = xmalloc(sizeof *rows * (size_t)n_slots), *step_rows = xmalloc(sizeof *rows * (size_t)n_slots);
    for (int i = 0; i < n_reqs; i++) {
        const struct part *pt = &g.parts[i];
        const struct rollout_opts *o = pt->q->opts;
        struct rollout_batch *out = pt->q->out;
        if (!pt->n_slots) continue;
        /* a model's vocabulary may be padded past the tokenizer's: those ids are never drawn */
        int V = mc->vocab_size, V_tok = (int)tokenizer_vocab_size(pt->q->tok);
        if (V_tok > V) V_tok = V;
        out->n_prompts = pt->q->n_prompts, out->n = o->n;
        out->responses = xcalloc((size_t)pt->n_slots, sizeof *out->responses);
        for (int k = 0; k < pt->n_slots; k++) {
            int s = pt->first + k;
            struct rollout_response *r = g.resp[s] = &out->responses[k];
            g.part_of[s] = i;
            r->prompt = k / o->n;
            r->tokens = xmalloc(sizeof(int) * (size_t)o->max_tokens);
            r->finish = ROLLOUT_FINISH_LENGTH;
            whet_buf_append(&texts[s], "", 0);
            r->text = texts[s].data; /* the response owns the text; texts[s] only grows it */
            /* slot k draws its tokens from (seed of k, token index): the same rng state, the same responses */
            rows[s] = (struct sample_row){.seed = rng_stream(pt->seed, (uint64_t)(o->first_slot + k)),
                                          .top_k = o->top_k, .temperature = o->temperature, .top_p = o->top_p,
                                          .vocab = V_tok};
        }
    }
    int *picked = xmalloc(sizeof(int) * (size_t)n_slots);
    float *entropy = xmalloc(sizeof(float) * (size_t)n_slots);
    int *act = xmalloc(sizeof(int) * (size_t)n_slots), *next_act = xmalloc(sizeof(int) * (size_t)n_slots);
    int *next_ids = xmalloc(sizeof(int) * (size_t)n_slots);
    int *full_ids = NULL;
    size_t full_ids_cap = 0;
    struct kv_cache *cache = NULL;
    int rc = -1, n_act = n_slots;
    for (int s = 0; s < n_slots; s++) act[s] = s;

    if (use_kv_cache) {
        if (!(cache = kv_cache_new(g.m, n_slots, max_len, err))) goto out;
        for (int i = 0; i < n_reqs; i++) {
            const struct part *pt = &g.parts[i];
            for (int p = 0, n = pt->q->opts->n; p < pt->q->n_prompts; p++) {
                int first = pt->first + p * n, len = pt->q->prompt_lens[p];
                struct sample_out drawn = {.ids = picked + first, .entropy = entropy + first};
                if (set_runs(&g, &first, 1, len, err) ||
                    model_prefill_sample(g.m, cache, first, pt->q->prompt_ids[p], len, n, rows + first, &drawn, err))
                    goto out;
                for (int j = 1; j < n; j++)
                    if (kv_cache_copy_slot(cache, first + j, first, err)) goto out;
            }
        }
    } else if (forward_full(picked, entropy, &g, act, n_act, rows, &full_ids, &full_ids_cap, err)) {
        goto out;
    }

    while (n_act > 0) {
        int n_next = 0;
        for (int r = 0; r < n_act; r++) {
            int s = act[r], id = picked[r];
            const struct rollout_request *q = g.parts[g.part_of[s]].q;
            const struct rollout_opts *o = q->opts;
            struct rollout_response *resp = g.resp[s];
            q->out->entropy_sum += entropy[r];
            resp->tokens[resp->n_tokens++] = id;
            if (sample_is_end_token(q->tok, mc, id) || is_extra_stop_id(o, id)) {
                resp->finish = ROLLOUT_FINISH_STOP;
                continue;
            }
            int stopped = sample_append_text(&texts[s], q->tok, id, o->stop, o->n_stop, err);
            if (stopped < 0) goto out;
            resp->text = texts[s].data;
            if (stopped) {
                resp->finish = ROLLOUT_FINISH_STOP;
                continue;
            }
            if (resp->n_tokens == o->max_tokens) continue; /* finish stays LENGTH */
            next_act[n_next] = s;
            next_ids[n_next++] = id;
        }
        int *tmp = act;
        act = next_act, next_act = tmp, n_act = n_next;
        if (n_act == 0) break;
        for (int r = 0; r < n_act; r++) { /* the slot's next token is its n_tokens-th draw */
            step_rows[r] = rows[act[r]];
            step_rows[r].counter = (uint32_t)g.resp[act[r]]->n_tokens;
        }
        if (use_kv_cache) {
            struct sample_out drawn = {.ids = picked, .entropy = entropy};
            if (set_runs(&g, act, n_act, 1, err) ||
                model_decode_sample(g.m, cache, act, next_ids, n_act, step_rows, &drawn, err))
                goto out;
        } else if (forward_full(picked, entropy, &g, act, n_act, step_rows, &full_ids, &full_ids_cap, err)) {
            goto out;
        }
    }
    /* the generation's time, split by the tokens each request generated */
    long long all = 0;
    for (int s = 0; s < n_slots; s++) g.parts[g.part_of[s]].q->out->tokens += g.resp[s]->n_tokens;
    for (int i = 0; i < n_reqs; i++) all += reqs[i].out->tokens;
    double seconds = whet_now_mono() - t0;
    for (int i = 0; i < n_reqs; i++)
        if (reqs[i].out->tokens) reqs[i].out->seconds = seconds * (double)reqs[i].out->tokens / (double)all;
    rc = 0;
out:
    if (rc) {
        whet_err_prefix(err, "rollout");
        for (int i = 0; i < n_reqs; i++) rollout_batch_free(reqs[i].out);
    }
    if (base) {
        struct whet_err ignored;
        model_set_lora_runs(base, NULL, 0, &ignored);
    }
    kv_cache_free(cache);
    free(texts);
    free(rows);
    free(step_rows);
    free(picked);
    free(entropy);
    free(act);
    free(next_act);
    free(next_ids);
    free(full_ids);
    free(g.parts);
    free(g.part_of);
    free(g.resp);
    free(g.runs);
    return rc;
}

int rollout_generate(struct rollout_batch *out, struct model *m, const struct tokenizer *tok,
                     const int *const *prompt_ids, const int *prompt_lens, int n_prompts,
                     const struct rollout_opts *opts, struct rng *rng, struct whet_err *err) {
    struct rollout_request q = {m, tok, prompt_ids, prompt_lens, n_prompts, opts, rng, out};
    return rollout_generate_many(NULL, &q, 1, err);
}

void rollout_batch_free(struct rollout_batch *b) {
    if (!b) return;
    for (int s = 0; b->responses && s < b->n_prompts * b->n; s++) {
        free(b->responses[s].tokens);
        free(b->responses[s].text);
    }
    free(b->responses);
    memset(b, 0, sizeof *b);
}
