/* dpo_data.h - preference data for DPO: JSONL pairs to token ids, packed rows, micro-batches.
 *
 * A line is one preference pair in OpenAI's DPO format:
 *   {"input": {"messages": [{"role": "user", "content": "…"}, …]},
 *    "preferred_output": [{"role": "assistant", "content": "…"}],
 *    "non_preferred_output": [{"role": "assistant", "content": "…"}]}
 * (the older names `preferred_completion` / `non_preferred_completion` are read too, as such an
 * array, a single message object or a plain string; giving both names for one side is an error).
 * An answer is normally one assistant message; several are rendered as consecutive assistant turns.
 * Each pair becomes two sequences, the prompt rendered with the model's chat template followed by
 * the chosen / the rejected answer; only the tokens of the answer's turns (their content and
 * end-of-turn tokens) are scored. Assistant turns inside the prompt are context, never scored, and
 * the prompt must not end with one.
 *
 * A pair is the packing unit: its chosen and rejected sequences sit side by side in one row (two
 * segments with their own sequence ids and positions, so attention stays inside each), so the two
 * halves of a pair always share a micro-batch. When the two together exceed max_seq_len they are
 * cut from the end (the response side): a sequence no longer than max_seq_len/2 is kept whole and
 * the other gets the rest, otherwise both get half. Cuts are counted; a pair left with no scored
 * token on either side is skipped and counted.
 *
 * Packing itself (the per-epoch shuffle, steps of batch_size units, first-fit rows, the cursor) is
 * SFT's (sft_data.h), so a DPO step takes batch_size pairs: the dataset keeps each pair as one
 * sft_example holding chosen ++ rejected, plus where the split is. */
#ifndef WHET_DPO_DATA_H
#define WHET_DPO_DATA_H

#include <stdint.h>

#include "sft_data.h"
#include "util.h"

struct chat_template;
struct tokenizer;

struct dpo_dataset {
    struct sft_dataset pairs; /* example i: chosen tokens then rejected tokens; its mask marks scored ones */
    int *split;               /* [n_pairs]: tokens of pair i's chosen sequence (the rejected one starts there) */
    int max_seq_len;
    /* Reported figures. */
    int n_truncated;              /* pairs cut to fit max_seq_len */
    long long n_truncated_tokens; /* tokens those cuts removed */
    int n_unscored;               /* pairs skipped: a side with no scored token left */
};

void dpo_dataset_init(struct dpo_dataset *ds, int max_seq_len);
/* Adds one pair (copied): chosen ids/mask of nc tokens, rejected of nr; truncation as above. */
void dpo_dataset_add(struct dpo_dataset *ds, const int32_t *chosen, const uint8_t *chosen_mask, int nc,
                     const int32_t *rejected, const uint8_t *rejected_mask, int nr);
/* Reads a JSONL file; a bad line is an error "PATH: line N: FIELD: what is wrong". */
int dpo_dataset_load(struct dpo_dataset *ds, const char *path, const struct chat_template *tpl,
                     const struct tokenizer *tok, struct whet_err *err);
/* Adds the pair of one line of such a file (dpo_dataset_load calls it for each); an error is "FIELD: what
 * is wrong". With ds->pairs.count_only set the pair is only counted (the gateway's estimate): its figures
 * and pairs.n_examples, nothing kept, so split stays NULL. */
int dpo_dataset_add_line(struct dpo_dataset *ds, const char *line, size_t len, const struct chat_template *tpl,
                         const struct tokenizer *tok, struct whet_err *err);
void dpo_dataset_free(struct dpo_dataset *ds);
static inline int dpo_num_pairs(const struct dpo_dataset *ds) { return ds->pairs.n_examples; }

/* Parses one line into the two message lists (the prompt, then the chosen / rejected answer's
 * assistant turns, which carry weight 1 while the prompt's assistant turns carry 0). Strings point
 * into *json_root, released by dpo_pair_free. Exposed for tests and upload validation. */
struct chat_message;
int dpo_parse_pair(struct chat_message **chosen, int *n_chosen, struct chat_message **rejected, int *n_rejected,
                   void **json_root, const char *line, size_t len, struct whet_err *err);
void dpo_pair_free(struct chat_message *chosen, struct chat_message *rejected, void *json_root);

/* A micro-batch in model_forward's layout, plus which sequence each scored target belongs to:
 * side[t] = 2*p for the chosen and 2*p+1 for the rejected sequence of the batch's p-th pair,
 * -1 where the target is not scored (prompt, padding). Pad tokens: id 0, target -1, own seq id. */
struct dpo_batch {
    int B, T, cap;
    int *ids, *positions, *seq_ids, *targets, *side; /* [B*T] */
    int *pairs;    /* [n_pairs]: the dataset index of the batch's p-th pair */
    int n_pairs;
    int n_tokens;  /* real (not pad) tokens */
    int n_targets; /* scored targets */
};

/* Fills `b` with rows [row, row + n_rows) of `ep` (a packing of ds->pairs). */
void dpo_batch_fill(struct dpo_batch *b, const struct dpo_dataset *ds, const struct sft_epoch *ep, int row,
                    int n_rows);
void dpo_batch_free(struct dpo_batch *b);
/* Pairs in rows [row, row + n_rows) of `ep`. */
int dpo_rows_pairs(const struct sft_epoch *ep, int row, int n_rows);

#endif
