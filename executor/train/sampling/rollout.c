/* rollout.c - batched sampling for GRPO (see rollout.h).
 *
 * The n_prompts * n responses each own a KV-cache slot, response j of prompt i slot i*n + j. A
 * prompt's prefill draws the first token of each of its n slots; then every step decodes the last
 * token of every slot still generating in one model_decode_sample, which draws each slot's next token
 * on the device. Slot s's k-th token is drawn from (its seed, k), so the same rng state gives the
 * same responses whatever order or batch the slots run in. Without the KV cache (the benchmark's
 * baseline), each step instead runs the whole sequence of every active slot through model_forward,
 * one batch per prompt (a group's active slots all have the same length), and samples the last
 * positions (model_sample_logits). */
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

/* ---------------------------------------------------------------- tokens without a KV cache */

/* The next token of every active slot, next[r] for act[r] drawn as rows[r] says, by running prompt +
 * response through model_forward, one batch per prompt, and sampling the batch's last positions. */
static int forward_full(int *next, float *entropy, struct model *m, const struct rollout_batch *b, const int *act,
                        int n_act, const struct sample_row *rows, const int *const *prompt_ids, const int *prompt_lens,
                        int **ids, size_t *ids_cap, struct whet_err *err) {
    for (int r0 = 0; r0 < n_act;) {
        int p = b->responses[act[r0]].prompt, r1 = r0;
        while (r1 < n_act && b->responses[act[r1]].prompt == p) r1++;
        int B = r1 - r0, T = prompt_lens[p] + b->responses[act[r0]].n_tokens;
        size_t N = (size_t)B * T;
        if (N + (size_t)B > *ids_cap) {
            *ids_cap = N + (size_t)B;
            *ids = xrealloc(*ids, *ids_cap * sizeof **ids);
        }
        int *last = *ids + N; /* the position whose logits give each row's next token */
        for (int r = r0; r < r1; r++) { /* row r - r0: prompt, then the response so far */
            const struct rollout_response *resp = &b->responses[act[r]];
            int *row = *ids + (size_t)(r - r0) * T;
            memcpy(row, prompt_ids[p], sizeof(int) * (size_t)prompt_lens[p]);
            memcpy(row + prompt_lens[p], resp->tokens, sizeof(int) * (size_t)resp->n_tokens);
            last[r - r0] = (r - r0) * T + T - 1;
        }
        struct model_batch batch = {B, T, *ids, NULL, NULL, NULL, NULL};
        struct sample_out drawn = {.ids = next + r0, .entropy = entropy + r0};
        if (model_forward(m, &batch, NULL, err) || model_sample_logits(m, last, B, rows + r0, &drawn, err))
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

int rollout_generate(struct rollout_batch *out, struct model *m, const struct tokenizer *tok,
                     const int *const *prompt_ids, const int *prompt_lens, int n_prompts,
                     const struct rollout_opts *opts, struct rng *rng, struct whet_err *err) {
    memset(out, 0, sizeof *out);
    /* slot s draws its k-th token from (seed of s, k): the same rng state gives the same responses */
    uint64_t base = rng_u64(rng);
    if (n_prompts == 0) return 0; /* a rank's empty share */
    int max_prompt = 0;
    if (check_opts(m, prompt_lens, n_prompts, opts, &max_prompt, err)) return -1;
    double t0 = whet_now_mono();
    const struct model_config *mc = model_get_config(m);
    int V = mc->vocab_size, n = opts->n, n_slots = n_prompts * n;
    /* a model's vocabulary may be padded past the tokenizer's: those ids are never drawn */
    int V_tok = (int)tokenizer_vocab_size(tok) < V ? (int)tokenizer_vocab_size(tok) : V;

    out->n_prompts = n_prompts, out->n = n;
    out->responses = xcalloc((size_t)n_slots, sizeof *out->responses);
    struct whet_buf *texts = xcalloc((size_t)n_slots, sizeof *texts); /* the responses' texts, growing */
    for (int s = 0; s < n_slots; s++) {
        struct rollout_response *r = &out->responses[s];
        r->prompt = s / n;
        r->tokens = xmalloc(sizeof(int) * (size_t)opts->max_tokens);
        r->finish = ROLLOUT_FINISH_LENGTH;
        whet_buf_append(&texts[s], "", 0);
        r->text = texts[s].data; /* the response owns the text; texts[s] only grows it */
    }
    /* each slot's sampling row; and, in act order, the step's rows, drawn tokens and entropies */
    struct sample_row *rows = xmalloc(sizeof *rows * (size_t)n_slots), *step_rows = xmalloc(sizeof *rows * (size_t)n_slots);
    int *picked = xmalloc(sizeof(int) * (size_t)n_slots);
    float *entropy = xmalloc(sizeof(float) * (size_t)n_slots);
    int *act = xmalloc(sizeof(int) * (size_t)n_slots), *next_act = xmalloc(sizeof(int) * (size_t)n_slots);
    int *next_ids = xmalloc(sizeof(int) * (size_t)n_slots);
    int *full_ids = NULL;
    size_t full_ids_cap = 0;
    struct kv_cache *cache = NULL;
    int rc = -1, n_act = n_slots;
    for (int s = 0; s < n_slots; s++) {
        act[s] = s;
        rows[s] = (struct sample_row){.seed = rng_stream(base, (uint64_t)(opts->first_slot + s)), .top_k = opts->top_k,
                                      .temperature = opts->temperature, .top_p = opts->top_p, .vocab = V_tok};
    }

    if (opts->use_kv_cache) {
        if (!(cache = kv_cache_new(m, n_slots, max_prompt + opts->max_tokens, err))) goto out;
        for (int p = 0; p < n_prompts; p++) {
            int first = p * n;
            struct sample_out drawn = {.ids = picked + first, .entropy = entropy + first};
            if (model_prefill_sample(m, cache, first, prompt_ids[p], prompt_lens[p], n, rows + first, &drawn, err))
                goto out;
            for (int j = 1; j < n; j++)
                if (kv_cache_copy_slot(cache, first + j, first, err)) goto out;
        }
    } else if (forward_full(picked, entropy, m, out, act, n_act, rows, prompt_ids, prompt_lens, &full_ids,
                            &full_ids_cap, err)) {
        goto out;
    }

    while (n_act > 0) {
        int n_next = 0;
        for (int r = 0; r < n_act; r++) {
            int s = act[r], id = picked[r];
            struct rollout_response *resp = &out->responses[s];
            out->entropy_sum += entropy[r];
            resp->tokens[resp->n_tokens++] = id;
            if (sample_is_end_token(tok, mc, id) || is_extra_stop_id(opts, id)) {
                resp->finish = ROLLOUT_FINISH_STOP;
                continue;
            }
            int stopped = sample_append_text(&texts[s], tok, id, opts->stop, opts->n_stop, err);
            if (stopped < 0) goto out;
            resp->text = texts[s].data;
            if (stopped) {
                resp->finish = ROLLOUT_FINISH_STOP;
                continue;
            }
            if (resp->n_tokens == opts->max_tokens) continue; /* finish stays LENGTH */
            next_act[n_next] = s;
            next_ids[n_next++] = id;
        }
        int *tmp = act;
        act = next_act, next_act = tmp, n_act = n_next;
        if (n_act == 0) break;
        for (int r = 0; r < n_act; r++) { /* the slot's next token is its n_tokens-th draw */
            step_rows[r] = rows[act[r]];
            step_rows[r].counter = (uint32_t)out->responses[act[r]].n_tokens;
        }
        if (opts->use_kv_cache) {
            struct sample_out drawn = {.ids = picked, .entropy = entropy};
            if (model_decode_sample(m, cache, act, next_ids, n_act, step_rows, &drawn, err)) goto out;
        } else if (forward_full(picked, entropy, m, out, act, n_act, step_rows, prompt_ids, prompt_lens, &full_ids,
                                &full_ids_cap, err)) {
            goto out;
        }
    }
    for (int s = 0; s < n_slots; s++) out->tokens += out->responses[s].n_tokens;
    out->seconds = whet_now_mono() - t0;
    rc = 0;
out:
    if (rc) {
        whet_err_prefix(err, "rollout");
        rollout_batch_free(out);
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
    return rc;
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
