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
 *   3. the database estimates the job from those (migrations 0008 and 0020, whet_job_estimate: steps,
 *      trained tokens, the device type and count, the expected duration from the throughput finished
 *      jobs measured, the cost at the prices in effect; for reinforcement the rollout tokens, an upper
 *      bound, priced at the rollout line, migration 0026) and reads the tenant's budget (migration 0009),
 *      in one statement (jobs_estimate). Since migration 0054 whet_job_estimate reads its inputs with a
 *      few small statements, each run only when its answer is used (the file with its kept count, the
 *      previous job and the token prices; the fleet's main device type; the throughput with the device's
 *      price; every model's throughput on the device), not one ~90-node plan set up on every create.
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

#include "http.h"

/* Takes "dry_run" out of the body's "whet" object (so the rest is checked as for any create) and
 * returns 1 when it was true, 0 when absent or false, -1 having answered 400 when it is not a boolean. */
int estimate_take_dry_run(struct gw_req *r, json_t *body);

/* A checked create: the model as given, its base model, resolved method and whet object (JSON text). */
struct estimate_req {
    const char *model, *base_model, *method_json, *training_file, *whet_json;
    int dry_run;
};
/* What the estimate starts from, read by the create's lookup (whet_job_create_lookup, migration 0057) as
 * text: the base model's parameters, config.json, object prefix and checksum, the fleet's pools
 * (whet_sizing_pools), and the training file's object key (NULL when there is none), checksum, bytes and
 * lines (the others "" when NULL, as libpq gives them). */
struct estimate_inputs {
    const char *parameters, *config, *object_prefix, *model_sha256, *pools;
    const char *file_key, *file_sha256, *file_bytes, *line_count;
};
/* Called when the job may be created: the estimate (JSON text, in the request's pool) and whether it
 * takes the month's spend past the soft limit (the job then gets a warning event). */
typedef void (*estimate_next_fn)(struct gw_req *r, const char *estimate_json, int soft_alert, void *arg);
/* Answers (the estimate of a dry run, a 429 over the hard cap, a database failure) or calls next. The
 * inputs are read during the call only. */
void estimate_job(struct gw_req *r, const struct estimate_req *q, const struct estimate_inputs *in,
                  estimate_next_fn next, void *arg);
void estimate_prepare(void);
/* Frees the tokenizers dry runs keep (estimate.c); at exit, once no request runs. */
void estimate_free(void);

#endif
