/* sft_data.h - supervised fine-tuning data: JSONL chat files to token ids, packed rows, a cursor.
 *
 * A training or validation file holds one JSON object per line in OpenAI's chat format,
 * {"messages": [{"role": "system"|"user"|"assistant", "content": "…", "weight": 0|1}, …]}; each line is
 * rendered with the model's chat template and tokenized once (sft_dataset_load). An example longer
 * than max_seq_len is cut to max_seq_len tokens and counted (truncation is reported, never silent).
 *
 * Steps and packing: `batch_size` is OpenAI's, the number of training examples in one optimizer step.
 * Per epoch the examples are shuffled (deterministically from the seed and the epoch number) and cut
 * into consecutive groups of batch_size (the last group of an epoch may be smaller): one group per
 * step, so an epoch takes ceil(examples / batch_size) steps however long the examples are. A step's
 * examples are packed into rows of at most max_seq_len tokens, an example never split between rows:
 * each goes into the first of the step's rows that still has room for it, else starts a new row
 * (first-fit). Each token of a row carries its position inside its own example (RoPE restarts at 0)
 * and the example's sequence id, so attention never crosses example boundaries.
 *
 * gradient_accumulation_steps (a whet extension) only bounds memory: a step's rows go through the
 * model in that many micro-batches of ceil(rows / gradient_accumulation_steps) rows, and the gradient
 * is that of the step's loss over all its trained tokens whichever the split. The position in the
 * stream is the cursor (epoch, examples of the epoch's order already trained), which is all a
 * checkpoint needs to continue exactly, since every epoch's order and packing is a function of the
 * seed. */
#ifndef WHET_SFT_DATA_H
#define WHET_SFT_DATA_H

#include <jansson.h>
#include <stdint.h>

#include "util.h"

struct chat_template;
struct tokenizer;

struct sft_example {
    int32_t *ids;  /* [n] */
    uint8_t *mask; /* [n] 1: this token is a trained target (predicted from the one before) */
    int n;
    int n_trained; /* trained targets: mask[1..n) set */
};

struct sft_dataset {
    int n_examples, cap;
    struct sft_example *examples;
    int max_seq_len;
    /* Reported figures. */
    long long n_tokens;           /* after truncation */
    long long n_trained_tokens;   /* targets that carry loss, after truncation */
    int n_truncated;              /* examples cut to max_seq_len */
    long long n_truncated_tokens; /* tokens those cuts removed */
    int n_untrained;              /* examples left with no trained token after the cut (skipped) */
    /* 1: sft_dataset_add counts an example in the figures above (and n_examples) without keeping it,
     * for a set that is only measured (the gateway's estimate, gateway/estimate.h), never packed. */
    int count_only;
};

void sft_dataset_init(struct sft_dataset *ds, int max_seq_len);
/* Adds one tokenized example (copied), truncating it to max_seq_len; examples with no trained
 * target after truncation are counted in n_untrained and not kept. */
void sft_dataset_add(struct sft_dataset *ds, const int32_t *ids, const uint8_t *mask, int n);
/* Reads a JSONL file: every non-blank line must be a JSON object with a `messages` array of
 * system/user/assistant turns and at least one trained assistant turn; any other line is an error
 * "PATH: line N: …". */
int sft_dataset_load(struct sft_dataset *ds, const char *path, const struct chat_template *tpl,
                     const struct tokenizer *tok, struct whet_err *err);
/* Adds the example of one line of such a file (sft_dataset_load calls it for each). */
int sft_dataset_add_line(struct sft_dataset *ds, const char *line, size_t len, const struct chat_template *tpl,
                         const struct tokenizer *tok, struct whet_err *err);
void sft_dataset_free(struct sft_dataset *ds);

/* Parses one line into messages (roles/contents point into the returned JSON, which the caller
 * releases with json_decref through sft_messages_free). Exposed for tests and the gateway-side
 * validation. */
struct chat_message;
/* The text of an OpenAI message `content`: a string, or an array of text parts joined. When parts were
 * joined the text is in *joined, which the caller frees (else *joined is NULL and the text points into
 * the JSON). NULL with "FIELD.content…: what is wrong" in err otherwise. */
const char *sft_content_text(json_t *content, const char *field, char **joined, struct whet_err *err);
int sft_parse_messages(struct chat_message **msgs, int *n_msgs, void **json_root, const char *line, size_t len,
                       struct whet_err *err);
/* What a parsed line owns (the `json_root` of sft_parse_messages and dpo_parse_pair): the JSON and
 * the texts joined from array contents. sft_messages_free releases it with the messages. */
struct sft_parsed_line {
    json_t *root;
    int n_joined;
    char **joined;
};
void sft_messages_free(struct chat_message *msgs, void *json_root);

/* ---------------------------------------------------------------- packing */

/* The packing of one epoch: step s holds the examples order[s*batch_size ..] in rows
 * [step_row[s], step_row[s+1]); row r holds the examples items[row_start[r] .. row_start[r+1]). */
struct sft_epoch {
    int epoch;
    int n_steps, n_rows;
    int *step_row;  /* [n_steps + 1] */
    int *row_start; /* [n_rows + 1] */
    int *items;     /* example indices in packing order */
};

/* Packs epoch `epoch` into steps of batch_size examples; shuffled by (seed, epoch) unless `shuffle` is
 * 0 (validation: the file's order). */
void sft_epoch_pack(struct sft_epoch *ep, const struct sft_dataset *ds, uint64_t seed, int epoch, int shuffle,
                    int batch_size);
void sft_epoch_free(struct sft_epoch *ep);
/* Optimizer steps in an epoch of n_examples examples (DPO: pairs, GRPO: prompts): ceil(n / batch_size). */
int sft_steps_in_epoch(int n_examples, int batch_size);
/* Rows per micro-batch when a step's n_rows rows go through the model in grad_accum micro-batches. */
int sft_rows_per_micro_batch(int n_rows, int grad_accum);

/* A micro-batch in the layout model_forward takes: B rows of T tokens, T the longest row used
 * (pad tokens have id 0, target -1 and a sequence id of their own). */
struct sft_batch {
    int B, T, cap;
    int *ids, *positions, *seq_ids, *targets; /* [B*T] */
    int n_tokens;   /* real (not pad) tokens */
    int n_targets;  /* trained targets */
};

/* The width T of a micro-batch of rows [row, row + *n_rows) of `ep`: its longest row (at least 1).
 * Clamps *n_rows to the rows the epoch has left. */
int sft_batch_width(const struct sft_dataset *ds, const struct sft_epoch *ep, int row, int *n_rows);
/* Fills `b` with rows [row, row + n_rows) of `ep`. */
void sft_batch_fill(struct sft_batch *b, const struct sft_dataset *ds, const struct sft_epoch *ep, int row,
                    int n_rows);
void sft_batch_free(struct sft_batch *b);
/* Trained targets in rows [row, row + n_rows) of `ep` (what sft_batch_fill would count). */
int sft_rows_targets(const struct sft_dataset *ds, const struct sft_epoch *ep, int row, int n_rows);

/* Where the next training step starts: `position` examples (DPO: pairs, GRPO: prompts) of epoch
 * `epoch`'s shuffled order are trained, so the step is position / batch_size of that epoch. */
struct sft_cursor {
    int epoch;
    int position;
};

/* The next training step of a packed set: makes `ep` the packing of the cursor's epoch (moving the
 * cursor to the next epoch when its epoch is used up), sets [*first_row, *first_row + *n_rows) to the
 * step's rows, and moves the cursor past the step's examples. Returns the step's epoch. */
int sft_take_step(struct sft_epoch *ep, struct sft_cursor *c, const struct sft_dataset *ds, uint64_t seed,
                  int batch_size, int *first_row, int *n_rows);

#endif
