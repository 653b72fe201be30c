/* estimate.h - a job's estimate before it runs, and the budget's hard cap (budgets.h). POST
 * /v1/fine_tuning/jobs runs its checks (jobs.c), then estimate_job():
 *   1. sizing: the gang the scheduler will choose (scheduler/jobsize and placement's sizing.h, over the
 *      fleet's pools from whet_sizing_pools, migration 0020);
 *   2. a dry run counts the training file's tokens on a worker thread: the object streamed through the
 *      base model's tokenizer and chat template (executor/train's whet_tokenizer and whet_train_data
 *      libraries: the trainer's own line readers, sft_data.h, dpo_data.h, rft_data.h), at most 32 MiB read
 *      (the rest extrapolated); supervised examples and DPO pairs (prompt + chosen, prompt + rejected)
 *      cut at max_seq_len, reinforcement prompts left out past max_seq_len - max_tokens, as the trainer
 *      does. The tokenizer is loaded once per model and kept (a few models, the least recently used
 *      dropped). The count is kept for the create (file_token_counts, migrations 0022 and 0026);
 *   3. the gateway estimates the job from those (job_estimate.h: steps, trained tokens, the device type and
 *      count, the expected duration from the throughput finished jobs measured, the cost at the prices in
 *      effect; for reinforcement the rollout tokens, an upper bound, priced at the rollout line), the arithmetic
 *      of whet_job_estimate (migrations 0008, 0020, 0026, 0054), which the gateway ran inside the create's
 *      insert until migration 0063. Its inputs: the tenant's (the count a dry run kept, the previous job's
 *      tokens a step) and the time come with the create's lookup; the shared ones (the price books, every
 *      model's throughput) from whet_estimate_inputs(), kept here until the lookup shows a newer version;
 *   4. the database reads the tenant's budget and checks the estimate against it, in one statement
 *      (ESTIMATE_SQL): a dry run's own (jobs_estimate), a create's the first part of its insert (jobs.c).
 * With `"whet": {"dry_run": true}` the answer is that estimate, with the budget, and nothing is created;
 * otherwise a job whose estimate would take the month's spend past the tenant's monthly limit, or the
 * calling API key's, is a 429 insufficient_quota, and any other goes on to be created with its estimate.
 * A dry run on a file the trainer would refuse (a line it cannot read, named by its number, or nothing
 * left to train on) is a 400 on training_file: the job would fail. A count that fails otherwise (the
 * model's files missing from the store) is not an error: the estimate says why in `tokenization.error`
 * and falls back to the cheaper guesses. */
#ifndef WHET_GATEWAY_ESTIMATE_H
#define WHET_GATEWAY_ESTIMATE_H

#include <jansson.h>

#include "db.h"
#include "http.h"

/* Takes "dry_run" out of the body's "whet" object (so the rest is checked as for any create) and
 * returns 1 when it was true, 0 when absent or false, -1 having answered 400 when it is not a boolean. */
int estimate_take_dry_run(struct gw_req *r, json_t *body);

/* A checked create: the model as given, its base model, resolved method (JSON text) and its type, the training
 * file and whet object (JSON text), and what a count of the file depends on (estimate_cut, as the lookup was
 * given it). */
struct estimate_req {
    const char *model, *base_model, *method_json, *method_type, *training_file, *whet_json;
    int cut;
    int dry_run;
};
/* What the estimate starts from, read by the create's lookup (whet_job_create_lookup, migrations 0057 and 0063)
 * as text: the base model's parameters, config.json, object prefix and checksum, the fleet's pools
 * (whet_sizing_pools), the training file's object key (NULL when there is none), checksum, bytes and lines,
 * the database's time, the shared inputs' version, the count kept for the file at estimate_cut (NULL when
 * none) and the previous job's trained tokens and steps (NULL when none); the others "" when NULL, as libpq
 * gives them. */
struct estimate_inputs {
    const char *parameters, *config, *object_prefix, *model_sha256, *pools;
    const char *file_key, *file_sha256, *file_bytes, *line_count;
    const char *now, *inputs_version, *kept_count, *prev_trained_tokens, *prev_total_steps;
};
/* The max_seq_len a kept count of the file is keyed by for this job: where the trainer cuts its examples, or
 * for reinforcement the prompts' limit (max_seq_len - rollout.max_tokens). */
int estimate_cut(const char *method_json, const char *whet_json);
/* The estimate's statement: parameters $1..$ESTIMATE_NPARAMS (the ones estimate_job gives: the estimate, the
 * training file, the tenant, the calling API key, whether a dry run), columns the estimate (NULL when the
 * training file went since the lookup found it), the budget's status, over the hard cap, over the soft limit,
 * the calling API key's monthly limit and this month's spend when the estimate would take it past that limit
 * (else NULL). The month's spend sums the tenant's usage, so a create weighs it only when the tenant has a
 * budget (a dry run shows it anyway); without one the create reads a bounded number of rows. OFFSET 0 keeps
 * the budget computed once: pulled up into the outer query, each reference to b was a call of its own (the
 * budget's status up to seven times on a dry run). */
#define ESTIMATE_NPARAMS 5
#define ESTIMATE_SQL                                                                                                   \
    "SELECT e, b, (b ->> 'monthly_limit') IS NOT NULL AND (b ->> 'spent')::numeric + "                                 \
    "(e -> 'cost' ->> 'amount')::numeric > (b ->> 'monthly_limit')::numeric, "                                         \
    "(b ->> 'soft_limit') IS NOT NULL AND (b ->> 'spent')::numeric + "                                                 \
    "(e -> 'cost' ->> 'amount')::numeric >= (b ->> 'soft_limit')::numeric, "                                           \
    "k.monthly_limit, k.spent FROM (SELECT CASE WHEN EXISTS (SELECT 1 FROM files WHERE id = $2 AND tenant_id = $3) "   \
    "THEN $1::jsonb END AS e, "                                                                                        \
    "CASE WHEN $5::boolean OR EXISTS (SELECT 1 FROM budgets WHERE tenant_id = $3 AND "                                 \
    "(monthly_limit IS NOT NULL OR soft_limit IS NOT NULL)) THEN whet_budget_status($3) END AS b "                     \
    "OFFSET 0) s LEFT JOIN LATERAL (SELECT monthly_limit, whet_key_spend(id) AS spent "                                \
    "FROM api_keys WHERE id = $4 AND monthly_limit IS NOT NULL) k "                                                    \
    "ON k.spent + (e -> 'cost' ->> 'amount')::numeric > k.monthly_limit"

/* Called for a create that may go on: ESTIMATE_SQL's parameters (valid during the call; db.h copies what
 * it sends), for the statement that estimates and inserts the job. */
typedef void (*estimate_next_fn)(struct gw_req *r, const char *const *params, void *arg);
/* Answers (the estimate of a dry run, a 400 on a file the trainer would refuse, a database failure) or
 * calls next. The inputs are read during the call only. */
void estimate_job(struct gw_req *r, const struct estimate_req *q, const struct estimate_inputs *in,
                  estimate_next_fn next, void *arg);
/* After ESTIMATE_SQL ran, its columns from `col` of row 0 of `res`: returns 0 when the job may be created;
 * else answers (404 when the training file went since the lookup found it; unless a dry run, 429 when the
 * estimate takes the month's spend past the tenant's hard cap or the API key's limit, with an
 * Idempotency-Key's reservation released first) and returns 1. */
int estimate_refuses(struct gw_req *r, const PGresult *res, int col, const char *training_file, int dry_run);
void estimate_prepare(void);
/* Frees the tokenizers dry runs keep and the shared inputs (estimate.c); at exit, once no request runs. */
void estimate_free(void);

#endif
