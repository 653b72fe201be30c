/* trainer_grpo.c - GRPO in `whet train` (the method table's "grpo", trainer_internal.h).
 *
 * A step takes the next batch_size prompts of the epoch's shuffled order and
 *   1. rollout:   rollout.n responses to each (rollout.h), drawn from an RNG seeded by (seed, step), so
 *                 a resumed run draws the same responses;
 *   2. grading:   every response against its prompt's line (the grader's item) in one
 *                 grader_run_batch call (python graders run in parallel sandboxes);
 *   3. advantages per group (grpo.h); with dynamic_sampling the groups whose rewards are all equal
 *                 are dropped and, as DAPO's refill, the next batch_size prompts of the epoch's order
 *                 are sampled (steps 1-3 again, the same RNG continuing) until batch_size groups are
 *                 kept, max_gen_batches batches were drawn or the epoch's prompts run out; kept
 *                 groups beyond batch_size are dropped (DAPO trims to train_batch_size). The step
 *                 trains what was kept; when nothing is, it trains nothing but still counts (its
 *                 prompts are used, the schedule moves on, the metrics line says groups_kept 0). The
 *                 reward figures of the metrics line cover every response sampled (the policy's
 *                 performance, not that of the groups kept), gen_batches says how many batches;
 *   4. reference: (skipped when kl_coef is 0: the KL is then neither in the loss nor measured, and
 *                 the metrics line says "kl": null) the log-probs of every response token under the
 *                 reference: the base weights, i.e. the LoRA adapter switched off
 *                 (model_set_adapter_enabled: the outputs are the base model's bit for bit), or a
 *                 frozen copy for full fine-tuning. A run started from init_adapter has the base
 *                 without that adapter as its reference, as TRL (disable_adapter) and veRL
 *                 (ref_in_actor) do with LoRA;
 *   5. update:    ppo_epochs times: forward over micro-batches of prompt + response rows (loss on the
 *                 response tokens only), the GRPO gradient as per-token weights on the nll
 *                 (model_set_loss_weights), clipping, AdamW. The old log-probs are those of the first
 *                 pass: the weights do not move between the micro-batches of one update, so that pass
 *                 IS the policy that sampled (its ratio is exactly 1), and later epochs see real ratios.
 * The validation figures (when trainer.c's loop asks) are the rewards of the first eval_samples prompts
 * of the validation file, one greedy response each (temperature 0: the policy's best answer, free of
 * sampling noise), graded. The cursor (epoch, position in the epoch's order) and the step are all a
 * checkpoint needs besides the weights and moments: orders and rollouts are functions of the seed.
 * A step that uses up its epoch's prompts moves the cursor to the next epoch at once; so a run with
 * refills stops when n_epochs of prompts are used, possibly before the planned total_steps (the
 * schedule, planned for ceil(prompts / batch_size) steps an epoch, then does not reach its end), as
 * DAPO's does. Departures from DAPO: a refill never crosses into the next epoch, and reaching
 * max_gen_batches trains on the groups kept instead of stopping the run with an error.
 *
 * Every log-prob pass (old, reference, current) is that of softmax(logits / rollout.temperature), as
 * veRL's (model_set_logit_temperature), so the update is on-policy for the distribution the rollouts
 * were sampled from; a greedy rollout (temperature 0) trains on the plain logits. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grader_runner.h"
#include "grpo.h"
#include "judge.h"
#include "model.h"
#include "rft_data.h"
#include "rng.h"
#include "rollout.h"
#include "trainer_internal.h"

/* Everything a step measured, for the metrics line. */
struct step_record {
    double reward_mean, reward_std, pass_rate, entropy, response_length_mean;
    long long rollout_tokens;
    double rollout_s, grading_s, reference_s, update_s;
    int epoch, gen_batches, groups_kept, grader_errors;
    int kl_measured; /* 0 with kl_coef 0: no reference pass, "kl": null */
    struct update_figures {
        double loss, kl, clip_frac, grad_norm, ppo_kl; /* means over the ppo epochs */
    } u;
};

struct grpo_run {
    struct rft_dataset train, valid;
    int *order;      /* [train.n_prompts] prompt indices of epoch order_epoch, shuffled */
    int order_epoch; /* -1: none made yet */
    /* The judge models of a score_model / label_model grader (NULL for none): the run's own, so that
     * co-trained runs (trainer_cotrain.c) each grade with their own judges and judge seed, as alone. */
    struct judge_pool *judges;
    struct step_record last;
    /* Co-trained (trainer_cotrain.c, grpo_cotrain_rollout): the next step's first gen batch as a rollout
     * request, generated with the other runs' before the step; out holds its responses once generated (empty
     * when that failed: the step then generates it alone) and rng the step's RNG after the rollout's draw. */
    struct cotrain_first {
        struct rollout_opts opts;
        struct rng rng;
        const int **ids; /* [batch_size] the request's prompts */
        int *lens;
        struct rollout_batch out;
    } first;
};

#define ROLLOUT_STREAM 0x526f6c6c6f757473ull /* "Rollouts": keeps the rollout seeds apart from the orders' */
#define JUDGE_STREAM 0x6a75646765ull         /* "judge": the judges' sampling seed */

/* ---------------------------------------------------------------- data */

static void report_file(struct run *r, const char *path, const struct rft_dataset *d) {
    trainer_progress(r, "%s: %d prompts, %lld prompt tokens; %d left out (longer than max_seq_len - rollout.max_tokens)",
                     path, d->n_prompts, d->n_tokens, d->n_too_long);
    json_t *ev = json_pack("{s:s, s:s, s:i, s:I, s:i, s:i}", "type", "data", "file", path, "examples", d->n_prompts,
                           "tokens", (json_int_t)d->n_tokens, "truncated_examples", 0, "untrained_examples",
                           d->n_too_long);
    trainer_data_event(r, ev);
}

static int grpo_load_data(struct run *r, struct whet_err *err) {
    const struct trainer_config *cfg = r->cfg;
    int max_prompt = cfg->hp.max_seq_len - cfg->rollout.max_tokens;
    if (max_prompt < 1)
        return whet_errf(err, "hyperparameters.max_seq_len: %d leaves no room for a prompt before rollout.max_tokens "
                              "%d; raise max_seq_len", cfg->hp.max_seq_len, cfg->rollout.max_tokens);
    struct grpo_run *g = r->state = xcalloc(1, sizeof *g);
    g->order_epoch = -1;
    if (rft_dataset_load(&g->train, cfg->training_file, &r->tpl, r->tok, max_prompt, err)) return -1;
    report_file(r, cfg->training_file, &g->train);
    if (cfg->validation_file) {
        if (rft_dataset_load(&g->valid, cfg->validation_file, &r->tpl, r->tok, max_prompt, err)) return -1;
        r->has_valid = 1;
        report_file(r, cfg->validation_file, &g->valid);
    }
    return 0;
}

static int grpo_steps_per_epoch(const struct run *r) {
    const struct grpo_run *g = r->state;
    return sft_steps_in_epoch(g->train.n_prompts, r->cfg->hp.batch_size);
}

static void grpo_free(struct run *r) {
    struct grpo_run *g = r->state;
    if (!g) return;
    rft_dataset_free(&g->train);
    rft_dataset_free(&g->valid); /* zeroed when there is none; partly read when its load failed */
    judge_pool_free(g->judges);
    rollout_batch_free(&g->first.out);
    free(g->first.ids);
    free(g->first.lens);
    free(g->order);
    free(g);
    r->state = NULL;
}

/* Makes g->order the order of the cursor's epoch, moving to the next epoch at the end of one. */
static void ensure_order(struct run *r) {
    struct grpo_run *g = r->state;
    int n = g->train.n_prompts;
    if (r->cursor.position >= n) {
        r->cursor.epoch++;
        r->cursor.position = 0;
    }
    if (g->order_epoch == r->cursor.epoch) return;
    if (!g->order) g->order = xmalloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) g->order[i] = i;
    struct rng rng;
    rng_seed(&rng, rng_stream(r->cfg->seed, (uint64_t)r->cursor.epoch));
    for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)rng_below(&rng, (uint64_t)i + 1), t = g->order[i];
        g->order[i] = g->order[j];
        g->order[j] = t;
    }
    g->order_epoch = r->cursor.epoch;
}

/* ---------------------------------------------------------------- rollouts and grading */

static struct rollout_opts rollout_opts_of(const struct trainer_config *cfg) {
    const struct trainer_rollout *ro = &cfg->rollout;
    return (struct rollout_opts){.n = ro->n, .max_tokens = ro->max_tokens, .temperature = (float)ro->temperature,
                                 .top_p = (float)ro->top_p, .top_k = ro->top_k, .n_stop = ro->n_stop,
                                 .stop = (char **)ro->stop, .use_kv_cache = 1};
}

/* The token ids and lengths of prompts[0..n) into ids[n] and lens[n]: a rollout's prompts. */
static void prompt_arrays(const int **ids, int *lens, const struct rft_prompt *const *prompts, int n) {
    for (int i = 0; i < n; i++) {
        ids[i] = prompts[i]->ids;
        lens[i] = prompts[i]->n;
    }
}

/* Generates for prompts[0..n_prompts) (unless *rb already holds their rollouts: co-training's, generated with
 * the other runs') and grades every response: rewards[] and passed[] in the batch's order (prompt-major);
 * *grader_errors counts the errors graders reported. */
static int rollout_and_grade(struct run *r, struct rollout_batch *rb, const struct rft_prompt *const *prompts,
                             int n_prompts, const struct rollout_opts *opts, struct rng *rng, double *rewards,
                             int *passed, int *grader_errors, double *grade_seconds, struct whet_err *err) {
    if (!rb->responses) {
        const int **ids = xmalloc(sizeof(int *) * (size_t)n_prompts);
        int *lens = xmalloc(sizeof(int) * (size_t)n_prompts);
        prompt_arrays(ids, lens, prompts, n_prompts);
        int rc = rollout_generate(rb, r->model, r->tok, ids, lens, n_prompts, opts, rng, err);
        free(ids);
        free(lens);
        if (rc) return whet_err_prefix(err, "rollout");
    }

    double t0 = whet_now_mono();
    size_t N = (size_t)n_prompts * (size_t)opts->n;
    json_t **samples = xmalloc(sizeof(json_t *) * N), **items = xmalloc(sizeof(json_t *) * N);
    struct grader_result *results = xcalloc(N, sizeof *results);
    for (size_t i = 0; i < N; i++) {
        samples[i] = grader_sample_from_text(rb->responses[i].text);
        items[i] = prompts[rb->responses[i].prompt]->item;
    }
    const struct grpo_run *g = r->state;
    struct grader_run_opts gopts = {.judge = g->judges ? judge_grade : NULL, .judge_ctx = g->judges};
    int rc = grader_run_batch(r->cfg->grader, &gopts, samples, items, N, results, err);
    for (size_t i = 0; i < N; i++) {
        if (!rc) {
            rewards[i] = results[i].reward;
            passed[i] = results[i].passed;
            *grader_errors += (int)results[i].n_errors;
            grader_result_free(&results[i]);
        }
        json_decref(samples[i]);
    }
    free(results);
    free(items);
    free(samples);
    *grade_seconds = whet_now_mono() - t0;
    return rc ? whet_err_prefix(err, "grader") : 0;
}

/* ---------------------------------------------------------------- sequences and micro-batches */

/* One trained response: the row prompt + response, and where its tokens sit in the flat per-token
 * arrays (logp, old, ref). */
struct seq {
    const int *prompt, *response;
    int prompt_len, response_len;
    double advantage, coef;
    size_t offset; /* of its first response token in the flat arrays */
};

struct mbatch {
    int B, T, cap;
    int *ids, *targets; /* [B*T] */
    float *nll, *weights;
};

/* Rows seqs[0..n): token p of a row predicts token p+1; only response tokens are targets, so the
 * response's token k is predicted at position prompt_len − 1 + k. Pads: id 0, no target. */
static void mbatch_fill(struct mbatch *b, const struct seq *seqs, int n) {
    int T = 1;
    for (int i = 0; i < n; i++)
        if (seqs[i].prompt_len + seqs[i].response_len > T) T = seqs[i].prompt_len + seqs[i].response_len;
    if (n * T > b->cap) {
        b->cap = n * T;
        b->ids = xrealloc(b->ids, sizeof(int) * (size_t)b->cap);
        b->targets = xrealloc(b->targets, sizeof(int) * (size_t)b->cap);
        b->nll = xrealloc(b->nll, sizeof(float) * (size_t)b->cap);
        b->weights = xrealloc(b->weights, sizeof(float) * (size_t)b->cap);
    }
    b->B = n, b->T = T;
    for (int i = 0; i < n; i++) {
        int *ids = b->ids + (size_t)i * T, *tg = b->targets + (size_t)i * T;
        const struct seq *s = &seqs[i];
        memset(ids, 0, sizeof(int) * (size_t)T);
        for (int p = 0; p < T; p++) tg[p] = -1;
        memcpy(ids, s->prompt, sizeof(int) * (size_t)s->prompt_len);
        memcpy(ids + s->prompt_len, s->response, sizeof(int) * (size_t)s->response_len);
        for (int k = 0; k < s->response_len; k++) tg[s->prompt_len - 1 + k] = s->response[k];
    }
}

static void mbatch_free(struct mbatch *b) {
    free(b->ids);
    free(b->targets);
    free(b->nll);
    free(b->weights);
}

/* Forward pass of rows seqs[0..n) through `m`; logp[offset + k] = log-prob of response token k. */
static int forward_logps(float *logp, struct model *m, struct mbatch *b, const struct seq *seqs, int n,
                         struct whet_err *err) {
    mbatch_fill(b, seqs, n);
    struct model_batch mb = {b->B, b->T, b->ids, NULL, NULL, b->targets, NULL};
    float loss;
    if (model_forward(m, &mb, &loss, err)) return -1;
    model_get_token_losses(m, b->nll);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < seqs[i].response_len; k++)
            logp[seqs[i].offset + k] = -b->nll[(size_t)i * b->T + seqs[i].prompt_len - 1 + k];
    return 0;
}

/* Micro-batches: the step's rows split into gradient_accumulation_steps parts. */
static int rows_per_micro_batch(const struct run *r, int n_seqs) {
    int parts = r->cfg->hp.gradient_accumulation_steps;
    return (n_seqs + parts - 1) / parts;
}

/* The reference log-probs of every response token (adapter off, or the frozen copy). */
static int reference_pass(struct run *r, float *ref_logp, struct mbatch *b, const struct seq *seqs, int n_seqs,
                          struct whet_err *err) {
    int per = rows_per_micro_batch(r, n_seqs), most;
    struct model *m = trainer_reference(r);
    int passes = trainer_passes(n_seqs, per), rc = trainer_most_passes(r, passes, &most, err);
    model_set_adapter_enabled(m, 0);
    for (int first = 0; first < n_seqs && !rc; first += per)
        rc = forward_logps(ref_logp, m, b, seqs + first, n_seqs - first < per ? n_seqs - first : per, err);
    if (!rc) rc = trainer_idle_reference_passes(r, most - passes, err);
    model_set_adapter_enabled(m, 1);
    return rc;
}

/* ppo_epochs × (forward/backward over the micro-batches, clip, AdamW). old_logp is filled by the first
 * pass (the policy that sampled); ref_logp NULL: no KL term (kl_coef 0). */
static int update_passes(struct run *r, float *logp, float *old_logp, const float *ref_logp, struct mbatch *b,
                         const struct seq *seqs, int n_seqs, double lr, struct update_figures *f,
                         struct whet_err *err) {
    const struct trainer_hparams *hp = &r->cfg->hp;
    struct grpo_loss_opts lo = {hp->clip_ratio_low, hp->clip_ratio_high, GRPO_CLIP_RATIO_C, hp->kl_coef};
    int per = rows_per_micro_batch(r, n_seqs), passes = trainer_passes(n_seqs, per), most;
    double *dl = NULL;
    size_t dl_cap = 0;
    for (int e = 0; e < hp->ppo_epochs; e++) {
        struct grpo_loss_stats st = {0};
        if (trainer_most_passes(r, passes, &most, err)) return -1;
        model_zero_grad(r->model);
        for (int first = 0; first < n_seqs; first += per) {
            int n = n_seqs - first < per ? n_seqs - first : per;
            const struct seq *s = seqs + first;
            if (forward_logps(logp, r->model, b, s, n, err)) {
                free(dl);
                return -1;
            }
            memset(b->weights, 0, sizeof(float) * (size_t)b->B * b->T);
            for (int i = 0; i < n; i++) {
                size_t o = s[i].offset;
                if (e == 0) memcpy(old_logp + o, logp + o, sizeof(float) * (size_t)s[i].response_len);
                if ((size_t)s[i].response_len > dl_cap) {
                    dl_cap = (size_t)s[i].response_len;
                    dl = xrealloc(dl, sizeof(double) * dl_cap);
                }
                grpo_response_loss(dl, &st, logp + o, old_logp + o, ref_logp ? ref_logp + o : NULL, s[i].response_len,
                                   s[i].advantage, s[i].coef, &lo);
                /* The engine's backward is that of Σ w·nll, and nll = −logp: w = −d loss / d logp. */
                for (int k = 0; k < s[i].response_len; k++)
                    b->weights[(size_t)i * b->T + s[i].prompt_len - 1 + k] = (float)-dl[k];
            }
            if (first + per >= n_seqs) trainer_overlap_begin(r); /* the epoch's last backward pass */
            if (model_set_loss_weights(r->model, b->weights, err) || model_backward(r->model, 1.0f, err)) {
                free(dl);
                return -1;
            }
        }
        if (trainer_idle_passes(r, most - passes, 1, err)) {
            free(dl);
            return -1;
        }
        trainer_overlap_end(r);
        /* the figures of the whole batch: every rank's responses */
        double norm, sums[5] = {st.loss, st.kl, st.ppo_kl, (double)st.n_clipped, (double)st.n_tokens};
        if (trainer_sum(r, sums, 5, err) || trainer_optimizer_step(r, lr, &norm, err)) {
            free(dl);
            return -1;
        }
        st.loss = sums[0], st.kl = sums[1], st.ppo_kl = sums[2], st.n_clipped = (long long)sums[3];
        st.n_tokens = (long long)sums[4];
        f->loss += st.loss / hp->ppo_epochs;
        f->kl += st.kl / hp->ppo_epochs;
        f->clip_frac += (double)st.n_clipped / (double)(st.n_tokens ? st.n_tokens : 1) / hp->ppo_epochs;
        f->ppo_kl += st.ppo_kl / (double)(st.n_tokens ? st.n_tokens : 1) / hp->ppo_epochs;
        f->grad_norm += norm / hp->ppo_epochs;
    }
    free(dl);
    return 0;
}

/* ---------------------------------------------------------------- validation */

/* The first eval_samples validation prompts, one greedy response each, graded. */
static int grpo_validate(struct run *r, struct method_text *t, struct whet_err *err) {
    struct grpo_run *g = r->state;
    int M = g->valid.n_prompts;
    if (r->cfg->eval_samples && r->cfg->eval_samples < M) M = r->cfg->eval_samples;
    struct rollout_opts opts = rollout_opts_of(r->cfg);
    opts.n = 1;
    opts.temperature = 0;
    struct rng rng;
    rng_seed(&rng, r->cfg->seed); /* greedy draws nothing; the rollout wants one all the same */
    const int chunk = 64;         /* prompts decoded together: bounds the KV cache */
    double sums[2] = {0, 0}; /* rewards, passed: of this rank's share of the prompts, then of all */
    int share, n_share;
    trainer_rank_rows(r, 0, M, &share, &n_share);
    int rc = model_gather_params(r->model, err); /* ZeRO-3: generation holds the whole model */
    for (int first = share; first < share + n_share && !rc; first += chunk) {
        int n = share + n_share - first < chunk ? share + n_share - first : chunk, errors = 0,
            *passed = xmalloc(sizeof(int) * (size_t)n);
        const struct rft_prompt **prompts = xmalloc(sizeof(*prompts) * (size_t)n);
        double *rewards = xmalloc(sizeof(double) * (size_t)n), seconds;
        for (int i = 0; i < n; i++) prompts[i] = &g->valid.prompts[first + i];
        struct rollout_batch rb = {0};
        rc = rollout_and_grade(r, &rb, prompts, n, &opts, &rng, rewards, passed, &errors, &seconds, err);
        for (int i = 0; i < n && !rc; i++) {
            sums[0] += rewards[i];
            sums[1] += passed[i];
        }
        rollout_batch_free(&rb);
        free(rewards);
        free(prompts);
        free(passed);
    }
    model_release_params(r->model);
    if (rc) return whet_err_prefix(err, "validation");
    if (trainer_sum(r, sums, 2, err)) return -1;
    double reward_mean = M ? sums[0] / M : 0, pass_rate = M ? sums[1] / M : 0;
    snprintf(t->json, sizeof t->json, ",\"valid_reward_mean\":%.9g,\"valid_pass_rate\":%.6f", reward_mean, pass_rate);
    snprintf(t->progress, sizeof t->progress, " valid_reward %.3f", reward_mean);
    return 0;
}

/* ---------------------------------------------------------------- the step */

static void grpo_metrics(const struct run *r, struct method_text *t) {
    const struct step_record *s = &((const struct grpo_run *)r->state)->last;
    char kl[32] = "null";
    if (s->kl_measured) snprintf(kl, sizeof kl, "%.9g", s->u.kl);
    snprintf(t->json, sizeof t->json,
             ",\"reward_mean\":%.9g,\"reward_std\":%.9g,\"pass_rate\":%.6f,\"kl\":%s,\"entropy\":%.9g,\"clip_frac\":%.6f,"
             "\"ppo_kl\":%.9g,\"response_length_mean\":%.4f,\"rollout_tokens\":%lld,\"rollout_tokens_per_s\":%.1f,"
             "\"groups_kept\":%d,\"gen_batches\":%d,\"grader_errors\":%d,\"time_rollout_s\":%.4f,\"time_grading_s\":%.4f,"
             "\"time_reference_s\":%.4f,\"time_update_s\":%.4f",
             s->reward_mean, s->reward_std, s->pass_rate, kl, s->entropy, s->u.clip_frac, s->u.ppo_kl,
             s->response_length_mean, s->rollout_tokens, s->rollout_s > 0 ? (double)s->rollout_tokens / s->rollout_s : 0,
             s->groups_kept, s->gen_batches, s->grader_errors, s->rollout_s, s->grading_s, s->reference_s, s->update_s);
    snprintf(t->progress, sizeof t->progress,
             " reward %.3f pass %.3f kl %s clip %.3f len %.1f | rollout %.2fs grade %.2fs ref %.2fs update %.2fs |",
             s->reward_mean, s->pass_rate, kl, s->u.clip_frac, s->response_length_mean, s->rollout_s, s->grading_s,
             s->reference_s, s->update_s);
}

/* The rollouts of one step: gen batches of up to batch_size prompts each, in the order sampled;
 * the arrays span all of the step's prompts (n_prompts, at most cap) and their responses (×G). */
struct step_samples {
    int G, cap, n_batches, n_prompts, kept;
    struct rollout_batch *batches;     /* [max batches] */
    int *batch_first;                  /* [max batches] index of the batch's first prompt */
    int *share_first;                  /* [max batches] of those, this rank's first (0 alone) */
    const struct rft_prompt **prompts; /* [cap] */
    /* [cap * G], prompt-major, of every rank's responses (a gang sums its shares into them) */
    double *rewards, *adv, *lengths;
    int *passed;                       /* [cap * G] */
    int *keep;                         /* [cap] the group is trained */
};

static void step_samples_init(struct step_samples *ss, int max_batches, int batch_size, int G) {
    memset(ss, 0, sizeof *ss);
    ss->G = G;
    ss->cap = max_batches * batch_size;
    size_t N = (size_t)ss->cap * (size_t)G;
    ss->batches = xcalloc((size_t)max_batches, sizeof *ss->batches);
    ss->batch_first = xcalloc((size_t)max_batches, sizeof(int));
    ss->share_first = xcalloc((size_t)max_batches, sizeof(int));
    ss->lengths = xcalloc(N, sizeof(double));
    ss->prompts = xcalloc((size_t)ss->cap, sizeof *ss->prompts);
    ss->rewards = xcalloc(N, sizeof(double));
    ss->adv = xcalloc(N, sizeof(double));
    ss->passed = xcalloc(N, sizeof(int));
    ss->keep = xcalloc((size_t)ss->cap, sizeof(int));
}

static void step_samples_free(struct step_samples *ss) {
    for (int b = 0; b < ss->n_batches; b++) rollout_batch_free(&ss->batches[b]);
    free(ss->batches);
    free(ss->batch_first);
    free(ss->share_first);
    free(ss->lengths);
    free(ss->prompts);
    free(ss->rewards);
    free(ss->adv);
    free(ss->passed);
    free(ss->keep);
}

/* Sums the ranks' shares of a gen batch (prompts first..first+P) into every rank's arrays: rewards,
 * passed and response lengths, and figures[] = {generated tokens, entropy sum, grader errors}. Alone,
 * it only fills the lengths and figures. */
static int gather_shares(struct run *r, struct step_samples *ss, int first, int P, const struct rollout_batch *rb,
                         int grader_errors, double figures[3], struct whet_err *err) {
    size_t G = (size_t)ss->G, N = (size_t)P * G, own = (size_t)ss->share_first[ss->n_batches - 1] * G;
    double *v = xcalloc(3 * N + 3, sizeof(double));
    for (int i = 0; i < rb->n_prompts * rb->n; i++) {
        size_t at = own + (size_t)i;
        v[at] = ss->rewards[first * G + at];
        v[N + at] = ss->passed[first * G + at];
        v[2 * N + at] = rb->responses[i].n_tokens;
    }
    v[3 * N] = (double)rb->tokens, v[3 * N + 1] = rb->entropy_sum, v[3 * N + 2] = grader_errors;
    int rc = trainer_sum(r, v, (int)(3 * N + 3), err);
    for (size_t i = 0; i < N && !rc; i++) {
        ss->rewards[first * G + i] = v[i];
        ss->passed[first * G + i] = (int)v[N + i];
        ss->lengths[first * G + i] = v[2 * N + i];
    }
    memcpy(figures, v + 3 * N, sizeof(double) * 3);
    free(v);
    return rc;
}

/* The gen batch of the epoch's order from `row` on: its prompts (up to batch_size, as many as are left) into
 * prompts[0..*P), this rank's share [*share, *share + *n_share) of them and its rollout options. */
static void gen_batch(struct run *r, int row, const struct rft_prompt **prompts, int *P, int *share, int *n_share,
                      struct rollout_opts *opts) {
    const struct grpo_run *g = r->state;
    int B = r->cfg->hp.batch_size, left = g->train.n_prompts - row;
    *P = left < B ? left : B;
    for (int i = 0; i < *P; i++) prompts[i] = &g->train.prompts[g->order[row + i]];
    /* In a gang each rank rolls out and grades its share of the prompts, then the shares are summed so that
     * every rank holds every group's rewards (advantages and filtering are the same on all). */
    trainer_rank_rows(r, 0, *P, share, n_share);
    *opts = rollout_opts_of(r->cfg);
    opts->first_slot = *share * opts->n;
}

/* Samples and grades the prompts of the epoch's order from *row on, batch_size at a time, until
 * batch_size groups are kept (every group without dynamic sampling: one batch), max_gen_batches
 * batches were drawn, or the epoch's prompts run out; *row moves past the prompts sampled. With
 * dynamic sampling, kept groups beyond batch_size (from the last batch) are dropped, as DAPO trims
 * its batch to train_batch_size. */
static int sample_groups(struct step_samples *ss, struct step_record *s, struct run *r, int *row, struct rng *rng,
                         struct whet_err *err) {
    const struct trainer_config *cfg = r->cfg;
    struct grpo_run *g = r->state;
    int B = cfg->hp.batch_size, G = ss->G, n_train = g->train.n_prompts;
    int max_batches = cfg->hp.dynamic_sampling ? cfg->hp.max_gen_batches : 1;
    struct rollout_opts opts;
    double entropy_sum = 0;
    while (ss->n_batches < max_batches && *row < n_train && (ss->n_batches == 0 || ss->kept < B)) {
        int P, first = ss->n_prompts, share, n_share;
        gen_batch(r, *row, ss->prompts + first, &P, &share, &n_share, &opts);
        struct rollout_batch *rb = &ss->batches[ss->n_batches];
        if (ss->n_batches == 0) { /* co-trained: the first batch's rollouts, when generated with the other runs' */
            *rb = g->first.out;
            memset(&g->first.out, 0, sizeof g->first.out);
        }
        ss->share_first[ss->n_batches] = share;
        ss->batch_first[ss->n_batches++] = first;
        double *rewards = ss->rewards + (size_t)first * G, grade_s = 0, figures[3] = {0};
        int grader_errors = 0;
        if (rollout_and_grade(r, rb, ss->prompts + first + share, n_share, &opts, rng, rewards + (size_t)share * G,
                              ss->passed + (size_t)(first + share) * G, &grader_errors, &grade_s, err) ||
            gather_shares(r, ss, first, P, rb, grader_errors, figures, err))
            return -1;
        s->grader_errors += (int)figures[2];
        s->rollout_s += rb->seconds;
        s->grading_s += grade_s;
        s->rollout_tokens += (long long)figures[0];
        entropy_sum += figures[1];
        grpo_advantages(ss->adv + (size_t)first * G, rewards, P, G, cfg->hp.norm_adv_by_std);
        int *keep = ss->keep + first;
        if (cfg->hp.dynamic_sampling) grpo_filter_groups(keep, rewards, P, G);
        else
            for (int i = 0; i < P; i++) keep[i] = 1;
        for (int i = 0; i < P; i++) {
            if (!keep[i]) continue;
            if (ss->kept < B) ss->kept++;
            else keep[i] = 0;
        }
        ss->n_prompts += P;
        *row += P;
    }
    s->entropy = s->rollout_tokens ? entropy_sum / (double)s->rollout_tokens : 0;
    return 0;
}

/* The step's trained responses (those of the groups kept) that this rank generated, with advantages
 * and coefficients; the coefficients are of the whole batch's (every rank's) trained responses, of which
 * *n_all says how many there are. */
static int select_sequences(struct seq *seqs, const struct run *r, const struct step_samples *ss, size_t *n_tokens,
                            int *n_all) {
    int n = 0;
    size_t tokens = 0;
    for (int b = 0; b < ss->n_batches; b++) {
        const struct rollout_batch *rb = &ss->batches[b];
        int first = ss->batch_first[b] + ss->share_first[b];
        for (int i = 0; i < rb->n_prompts * rb->n; i++) {
            const struct rollout_response *resp = &rb->responses[i];
            const struct rft_prompt *prompt = ss->prompts[first + resp->prompt];
            if (!ss->keep[first + resp->prompt] || resp->n_tokens < 1) continue;
            seqs[n++] = (struct seq){prompt->ids, resp->tokens, prompt->n, resp->n_tokens,
                                     ss->adv[(size_t)first * ss->G + (size_t)i], 0, tokens};
            tokens += (size_t)resp->n_tokens;
        }
    }
    long long all_tokens = 0;
    *n_all = 0;
    for (int p = 0; p < ss->n_prompts; p++)
        for (int j = 0; j < ss->G && ss->keep[p]; j++) {
            double len = ss->lengths[(size_t)p * ss->G + (size_t)j];
            *n_all += len >= 1;
            all_tokens += (long long)len;
        }
    for (int i = 0; i < n; i++)
        seqs[i].coef = grpo_token_coef(r->cfg->hp.loss_agg, seqs[i].response_len, all_tokens, *n_all);
    *n_tokens = tokens;
    return n;
}

/* The reward figures of every response the step sampled. */
static void reward_figures(struct step_record *s, const struct step_samples *ss) {
    size_t N = (size_t)ss->n_prompts * (size_t)ss->G;
    double sum = 0, sq = 0, pass = 0, len = 0;
    for (size_t i = 0; i < N; i++) {
        sum += ss->rewards[i];
        pass += ss->passed[i];
    }
    for (size_t i = 0; i < N; i++) len += ss->lengths[i];
    s->reward_mean = sum / (double)N;
    for (size_t i = 0; i < N; i++) sq += (ss->rewards[i] - s->reward_mean) * (ss->rewards[i] - s->reward_mean);
    s->reward_std = sqrt(sq / (double)N);
    s->pass_rate = pass / (double)N;
    s->response_length_mean = len / (double)N;
}

/* The RNG of step r->step's rollouts. */
static void step_rng(struct rng *rng, const struct run *r) {
    rng_seed(rng, rng_stream(r->cfg->seed ^ ROLLOUT_STREAM, (uint64_t)r->step));
}

/* Co-training: the first gen batch of the next step (its prompts from r->cursor, its options, the step's RNG)
 * as a request into *q, the run's own arrays until its step (trainer_internal.h). */
static void grpo_cotrain_rollout(struct run *r, struct rollout_request *q) {
    struct grpo_run *g = r->state;
    struct cotrain_first *c = &g->first;
    int B = r->cfg->hp.batch_size, P, share, n_share;
    ensure_order(r);
    const struct rft_prompt **prompts = xmalloc(sizeof *prompts * (size_t)B);
    gen_batch(r, r->cursor.position, prompts, &P, &share, &n_share, &c->opts);
    c->ids = xrealloc(c->ids, sizeof *c->ids * (size_t)B);
    c->lens = xrealloc(c->lens, sizeof *c->lens * (size_t)B);
    prompt_arrays(c->ids, c->lens, prompts + share, n_share);
    free(prompts);
    step_rng(&c->rng, r);
    rollout_batch_free(&c->out);
    *q = (struct rollout_request){r->model, r->tok, c->ids, c->lens, n_share, &c->opts, &c->rng, &c->out};
}

/* The frozen reference of a full fine-tune, when the loss has a KL term, and the grader's judge models. */
static int grpo_prepare(struct run *r, struct whet_err *err) {
    const struct trainer_config *cfg = r->cfg;
    struct grpo_run *g = r->state;
    if (cfg->hp.kl_coef > 0 && !cfg->lora.enabled && trainer_load_reference(r, err)) return -1;
    if (judge_pool_new(&g->judges, cfg->grader, cfg->judge_models, cfg->device, cfg->seed ^ JUDGE_STREAM, err))
        return whet_err_prefix(err, "grader");
    return 0;
}

static int grpo_step(struct run *r, struct step_figures *f, struct whet_err *err) {
    const struct trainer_config *cfg = r->cfg;
    struct grpo_run *g = r->state;
    /* Every pass of the step takes the log-probs of the sampling distribution softmax(z / T). */
    float logit_temperature = cfg->rollout.temperature > 0 ? (float)cfg->rollout.temperature : 1.0f;
    model_set_logit_temperature(r->model, logit_temperature);
    if (r->ref_model) model_set_logit_temperature(r->ref_model, logit_temperature);
    ensure_order(r);
    int G = cfg->rollout.n, row = r->cursor.position;
    struct step_samples ss;
    step_samples_init(&ss, cfg->hp.dynamic_sampling ? cfg->hp.max_gen_batches : 1, cfg->hp.batch_size, G);
    struct seq *seqs = xmalloc(sizeof(struct seq) * (size_t)ss.cap * (size_t)G);
    float *logp = NULL, *old_logp = NULL, *ref_logp = NULL;
    struct mbatch b = {0};
    struct step_record *s = &g->last;
    *s = (struct step_record){.epoch = r->cursor.epoch};

    /* 1, 2, 3: rollouts, grading, advantages and the groups trained; one RNG for all of the step's
     * batches, seeded by (seed, step) (co-trained, past the first batch's draw when that was generated) */
    struct rng rng;
    if (g->first.out.responses) rng = g->first.rng;
    else step_rng(&rng, r);
    int rc = model_gather_params(r->model, err); /* ZeRO-3: generation holds the whole model */
    if (!rc) rc = sample_groups(&ss, s, r, &row, &rng, err);
    model_release_params(r->model);
    if (rc) goto out;
    s->gen_batches = ss.n_batches;
    s->groups_kept = ss.kept;
    reward_figures(s, &ss);

    size_t n_tokens;
    int n_all, n_seqs = select_sequences(seqs, r, &ss, &n_tokens, &n_all);
    double lr = trainer_lr_at(&cfg->hp, r->step, r->total_steps);

    s->kl_measured = cfg->hp.kl_coef > 0;
    if (n_all > 0) { /* (every rank of a gang takes part in the update, with responses of its own or not) */
        logp = xmalloc(sizeof(float) * (n_tokens + 1));
        old_logp = xmalloc(sizeof(float) * (n_tokens + 1));
        /* 4: reference */
        if (s->kl_measured) {
            ref_logp = xmalloc(sizeof(float) * (n_tokens + 1));
            double t_ref = whet_now_mono();
            if ((rc = reference_pass(r, ref_logp, &b, seqs, n_seqs, err))) goto out;
            s->reference_s = whet_now_mono() - t_ref;
        }
        /* 5: updates */
        double t_upd = whet_now_mono();
        if ((rc = update_passes(r, logp, old_logp, ref_logp, &b, seqs, n_seqs, lr, &s->u, err))) goto out;
        s->update_s = whet_now_mono() - t_upd;
        for (int i = 0; i < n_seqs; i++)
            f->tokens += (long long)(seqs[i].prompt_len + seqs[i].response_len) * cfg->hp.ppo_epochs;
    }
    r->cursor.position = row;
    /* An epoch used up moves the cursor on now, so that trainer.c's loop, which stops at n_epochs,
     * sees the end of the data even when refills used the prompts up in fewer steps than planned. */
    if (row >= g->train.n_prompts) {
        r->cursor.epoch++;
        r->cursor.position = 0;
    }
    f->epoch = s->epoch;
    f->loss = s->u.loss;
    f->lr = lr;
    f->grad_norm = s->u.grad_norm;
out:
    step_samples_free(&ss);
    mbatch_free(&b);
    free(logp);
    free(old_logp);
    free(ref_logp);
    free(seqs);
    return rc;
}

const struct trainer_method_ops trainer_grpo_method = {
    .load_data = grpo_load_data,
    .steps_per_epoch = grpo_steps_per_epoch,
    .prepare = grpo_prepare,
    .step = grpo_step,
    .validate = grpo_validate,
    .metrics = grpo_metrics,
    .cotrain_rollout = grpo_cotrain_rollout,
    .free = grpo_free,
};
