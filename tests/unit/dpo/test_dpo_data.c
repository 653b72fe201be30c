/* test_dpo_data.c - DPO preference data: both OpenAI field names (not both at once), answers of one
 * or more assistant turns, errors with file, line and field,
 * only the response scored (never the prompt, nor an assistant turn inside it), the truncation rule
 * counted, pairs kept whole in one row with their two sequences apart, and the trainer config's
 * `beta`. The tokenizer and chat template are those of `whet model init --preset tiny` (ChatML). */
#include <stdlib.h>
#include <unistd.h>

#include "chat_template.h"
#include "dpo_data.h"
#include "model_init.h"
#include "test.h"
#include "tokenizer.h"
#include "trainer_config.h"

static char model_dir[] = "/tmp/whet-dpo-data.XXXXXX";
static struct tokenizer *tok;
static struct chat_template tpl;

static int setup(void) {
    struct whet_err err;
    struct model_init_opts o;
    if (!mkdtemp(model_dir) || model_init_preset(&o, "tiny", &err) || model_init_write(model_dir, &o, &err)) return -1;
    char *path = xasprintf("%s/tokenizer.json", model_dir);
    int rc = tokenizer_load(path, &tok, &err) || chat_template_load(&tpl, model_dir, &err);
    free(path);
    return rc ? -1 : 0;
}

static char *write_jsonl(const char *text) {
    char *path = xasprintf("%s/data-%d.jsonl", model_dir, rand());
    struct whet_err err;
    whet_write_file_atomic(path, text, strlen(text), &err);
    return path;
}

/* Loads `text` as a file; on failure the message is copied to msg. */
static int load(struct dpo_dataset *ds, const char *text, int max_seq_len, char *msg, size_t msg_len) {
    char *path = write_jsonl(text);
    struct whet_err err;
    dpo_dataset_init(ds, max_seq_len);
    int rc = dpo_dataset_load(ds, path, &tpl, tok, &err);
    if (rc && msg) snprintf(msg, msg_len, "%s", err.msg);
    unlink(path);
    free(path);
    return rc;
}

#define PROMPT "{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"Add 2 and 3.\"}]},"
#define GOOD "[{\"role\":\"assistant\",\"content\":\"Sure! 2 + 3 = 5.\"}]"
#define BAD "[{\"role\":\"assistant\",\"content\":\"No.\"}]"

TEST(both_field_names_give_the_same_tokens) {
    struct dpo_dataset a, b;
    char msg[512] = "";
    CHECK_MSG(load(&a, PROMPT "\"preferred_output\":" GOOD ",\"non_preferred_output\":" BAD "}\n", 256, msg,
                   sizeof msg) == 0, "%s", msg);
    CHECK_MSG(load(&b, PROMPT "\"preferred_completion\":\"Sure! 2 + 3 = 5.\",\"non_preferred_completion\":"
                             "{\"role\":\"assistant\",\"content\":\"No.\"}}\n\n", 256, msg, sizeof msg) == 0, "%s", msg);
    CHECK(dpo_num_pairs(&a) == 1 && dpo_num_pairs(&b) == 1);
    if (dpo_num_pairs(&a) == 1 && dpo_num_pairs(&b) == 1) {
        const struct sft_example *x = &a.pairs.examples[0], *y = &b.pairs.examples[0];
        CHECK(x->n == y->n && a.split[0] == b.split[0]);
        CHECK(memcmp(x->ids, y->ids, sizeof(int32_t) * (size_t)x->n) == 0);
        CHECK(memcmp(x->mask, y->mask, (size_t)x->n) == 0);
    }
    dpo_dataset_free(&a);
    dpo_dataset_free(&b);
}

/* A file as a Windows editor saves it, a byte-order mark first and CRLF line ends, gives the same
 * tokens. */
TEST(a_byte_order_mark_and_crlf_change_nothing) {
    struct dpo_dataset a, b;
    char msg[512] = "";
    CHECK_MSG(load(&a, PROMPT "\"preferred_output\":" GOOD ",\"non_preferred_output\":" BAD "}\n", 256, msg,
                   sizeof msg) == 0, "%s", msg);
    CHECK_MSG(load(&b, "\xEF\xBB\xBF" PROMPT "\"preferred_output\":" GOOD ",\"non_preferred_output\":" BAD "}\r\n", 256,
                   msg, sizeof msg) == 0, "%s", msg);
    CHECK(dpo_num_pairs(&a) == 1 && dpo_num_pairs(&b) == 1);
    if (dpo_num_pairs(&a) == 1 && dpo_num_pairs(&b) == 1) {
        const struct sft_example *x = &a.pairs.examples[0], *y = &b.pairs.examples[0];
        CHECK(x->n == y->n && a.split[0] == b.split[0]);
        CHECK(memcmp(x->ids, y->ids, sizeof(int32_t) * (size_t)x->n) == 0);
    }
    dpo_dataset_free(&a);
    dpo_dataset_free(&b);
}

static char *decode(const int32_t *ids, int n) {
    char *out = NULL;
    size_t len;
    struct whet_err err;
    if (tokenizer_decode(tok, ids, (size_t)n, &out, &len, &err)) return xstrdup("");
    return out;
}

/* The chosen and rejected sequences share the rendered prompt token for token; only the tokens
 * after it are scored, in both, and the scored text is the response and its end-of-turn token. */
TEST(only_the_responses_are_scored) {
    struct dpo_dataset ds;
    char msg[512] = "";
    const char *line = "{\"input\":{\"messages\":[{\"role\":\"system\",\"content\":\"Be kind.\"},"
                       "{\"role\":\"user\",\"content\":\"Hello!\"},{\"role\":\"assistant\",\"content\":\"Hi there.\"},"
                       "{\"role\":\"user\",\"content\":\"Add 2 and 3.\"}]},"
                       "\"preferred_output\":" GOOD ",\"non_preferred_output\":" BAD "}\n";
    CHECK_MSG(load(&ds, line, 256, msg, sizeof msg) == 0, "%s", msg);
    if (dpo_num_pairs(&ds) != 1) return;
    const struct sft_example *ex = &ds.pairs.examples[0];
    int split = ds.split[0], nr = ex->n - split;
    int first_c = -1, first_r = -1, end_c = 0, end_r = 0; /* scored spans [first, end) */
    for (int i = 0; i < split; i++)
        if (ex->mask[i]) end_c = i + 1, first_c = first_c < 0 ? i : first_c;
    for (int i = 0; i < nr; i++)
        if (ex->mask[split + i]) end_r = i + 1, first_r = first_r < 0 ? i : first_r;
    CHECK(first_c > 0 && first_c == first_r); /* the prompt ends at the same token in both */
    CHECK(memcmp(ex->ids, ex->ids + split, sizeof(int32_t) * (size_t)first_c) == 0);
    for (int i = first_c; i < end_c; i++) CHECK(ex->mask[i]);     /* one span: the chosen turn */
    for (int i = first_r; i < end_r; i++) CHECK(ex->mask[split + i]); /* and the rejected turn */
    char *text = decode(ex->ids + first_c, end_c - first_c);
    CHECK_STR(text, "Sure! 2 + 3 = 5.<|im_end|>");
    free(text);
    text = decode(ex->ids + split + first_r, end_r - first_r);
    CHECK_STR(text, "No.<|im_end|>");
    free(text);
    text = decode(ex->ids, first_c);
    CHECK_CONTAINS(text, "Hi there.<|im_end|>"); /* the earlier assistant turn is context, unscored */
    free(text);
    CHECK(ds.pairs.n_trained_tokens == (end_c - first_c) + (end_r - first_r));
    dpo_dataset_free(&ds);
}

/* An answer of two assistant messages: two consecutive scored turns. */
TEST(an_answer_may_hold_several_assistant_turns) {
    struct dpo_dataset ds;
    char msg[512] = "";
    CHECK_MSG(load(&ds, PROMPT "\"preferred_output\":[{\"role\":\"assistant\",\"content\":\"Sure!\"},"
                             "{\"role\":\"assistant\",\"content\":\"2 + 3 = 5.\"}],\"non_preferred_output\":" BAD "}\n",
                   256, msg, sizeof msg) == 0, "%s", msg);
    if (dpo_num_pairs(&ds) != 1) return;
    const struct sft_example *ex = &ds.pairs.examples[0];
    int first = -1, end = 0;
    for (int i = 0; i < ds.split[0]; i++)
        if (ex->mask[i]) end = i + 1, first = first < 0 ? i : first;
    char *text = decode(ex->ids + first, end - first);
    CHECK_CONTAINS(text, "Sure!<|im_end|>");
    CHECK_CONTAINS(text, "2 + 3 = 5.<|im_end|>");
    free(text);
    dpo_dataset_free(&ds);
}

static const struct {
    const char *line;
    const char *fragments[3];
} bad_lines[] = {
    {"[1]", {"line 2", "each line must be"}},
    {"{\"input\":3}", {"line 2", "input: missing or not an object"}},
    {"{\"input\":{\"messages\":[]}}", {"line 2", "input.messages: must be a non-empty array"}},
    {PROMPT "\"non_preferred_output\":" BAD "}", {"line 2", "preferred_output: missing", "preferred_completion"}},
    {PROMPT "\"preferred_output\":" GOOD "}", {"line 2", "non_preferred_output: missing"}},
    {PROMPT "\"preferred_output\":[],\"non_preferred_output\":" BAD "}", {"preferred_output", "non-empty array of assistant messages"}},
    {PROMPT "\"preferred_output\":" GOOD ",\"preferred_completion\":\"x\",\"non_preferred_output\":" BAD "}",
     {"line 2", "preferred_completion: give either preferred_output or preferred_completion"}},
    {PROMPT "\"preferred_output\":" GOOD ",\"non_preferred_completion\":[{\"role\":\"assistant\",\"content\":\"a\"},"
            "{\"role\":\"system\",\"content\":\"b\"}]}", {"line 2", "non_preferred_completion[1].role", "\"assistant\""}},
    {PROMPT "\"preferred_output\":" GOOD ",\"non_preferred_output\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     {"line 2", "non_preferred_output[0].role", "\"assistant\""}},
    {PROMPT "\"preferred_output\":[{\"role\":\"assistant\"}],\"non_preferred_output\":" BAD "}",
     {"preferred_output[0].content: missing"}},
    {"{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":7}]},\"preferred_output\":" GOOD
     ",\"non_preferred_output\":" BAD "}", {"line 2", "input.messages[0].content", "string"}},
    {"{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"}]},"
     "\"preferred_output\":" GOOD ",\"non_preferred_output\":" BAD "}", {"input.messages[1]", "must not end with an assistant"}},
    {"{\"input\":{\"messages\":[{\"role\":\"tool\",\"content\":\"a\"}]},\"preferred_output\":" GOOD
     ",\"non_preferred_output\":" BAD "}", {"input.messages[0]", "tool calls"}},
    {"{\"input\":{\"messages\":[{\"role\":\"wizard\",\"content\":\"a\"}]},\"preferred_output\":" GOOD
     ",\"non_preferred_output\":" BAD "}", {"line 2", "preferred_output", "wizard"}},
    {"{not json", {"line 2", "not valid JSON"}},
};

TEST(bad_lines_name_file_line_and_field) {
    for (size_t i = 0; i < sizeof bad_lines / sizeof bad_lines[0]; i++) {
        char *text = xasprintf(PROMPT "\"preferred_output\":" GOOD ",\"non_preferred_output\":" BAD "}\n%s\n",
                               bad_lines[i].line);
        struct dpo_dataset ds;
        char msg[512] = "";
        CHECK_MSG(load(&ds, text, 256, msg, sizeof msg) == -1, "accepted: %s", bad_lines[i].line);
        CHECK_CONTAINS(msg, model_dir); /* the file */
        for (int k = 0; k < 3 && bad_lines[i].fragments[k]; k++) CHECK_CONTAINS(msg, bad_lines[i].fragments[k]);
        dpo_dataset_free(&ds);
        free(text);
    }
}

/* Sequences of n tokens whose second half is scored; ids encode (pair, side, position). */
static void add_pair(struct dpo_dataset *ds, int pair, int nc, int nr) {
    int32_t c[512], r[512];
    uint8_t cm[512], rm[512];
    for (int i = 0; i < nc; i++) c[i] = pair * 10000 + i, cm[i] = i >= nc / 2;
    for (int i = 0; i < nr; i++) r[i] = pair * 10000 + 5000 + i, rm[i] = i >= nr / 2;
    dpo_dataset_add(ds, c, cm, nc, r, rm, nr);
}

TEST(truncation_fits_the_pair_into_a_row) {
    struct dpo_dataset ds;
    dpo_dataset_init(&ds, 64);
    add_pair(&ds, 0, 20, 30); /* fits: kept */
    add_pair(&ds, 1, 20, 60); /* chosen <= 32 kept whole, rejected cut to 44 */
    add_pair(&ds, 2, 50, 40); /* both longer than half: 32 each */
    add_pair(&ds, 3, 10, 200); /* rejected cut to 54: its scored half starts at 100, nothing left */
    CHECK(dpo_num_pairs(&ds) == 3);
    CHECK(ds.n_truncated == 3);
    CHECK(ds.n_truncated_tokens == 16 + (18 + 8) + 146);
    CHECK(ds.n_unscored == 1);
    CHECK(ds.split[0] == 20 && ds.pairs.examples[0].n == 50);
    CHECK(ds.split[1] == 20 && ds.pairs.examples[1].n == 64);
    CHECK(ds.split[2] == 32 && ds.pairs.examples[2].n == 64);
    dpo_dataset_free(&ds);
}

/* The gateway's estimate counts a file line by line without keeping it (count_only): the same figures as
 * the trainer's load, and nothing held. At 64 tokens the second pair is cut; at 16 both are left unscored
 * (the load refuses the file, the count says why). */
TEST(counting_only_gives_the_loaded_figures) {
    const char *lines[] = {
        PROMPT "\"preferred_output\":" GOOD ",\"non_preferred_output\":" BAD "}",
        PROMPT "\"preferred_output\":" GOOD ",\"non_preferred_output\":[{\"role\":\"assistant\",\"content\":\"No, "
               "I would rather not add numbers today, or any other day of the week.\"}]}",
    };
    const struct {
        int max_seq_len, pairs, truncated, unscored;
    } cases[] = {{64, 2, 1, 0}, {16, 0, 2, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct dpo_dataset a, b;
        char msg[512] = "", *text = xasprintf("%s\n%s\n", lines[0], lines[1]);
        int loaded = load(&a, text, cases[c].max_seq_len, msg, sizeof msg);
        dpo_dataset_init(&b, cases[c].max_seq_len);
        b.pairs.count_only = 1;
        struct whet_err err;
        for (int i = 0; i < 2; i++)
            CHECK_MSG(dpo_dataset_add_line(&b, lines[i], strlen(lines[i]), &tpl, tok, &err) == 0, "%s", err.msg);
        CHECK_MSG((loaded == 0) == (cases[c].pairs > 0), "%s", msg);
        CHECK(dpo_num_pairs(&b) == cases[c].pairs && b.n_truncated == cases[c].truncated);
        CHECK(b.n_unscored == cases[c].unscored);
        CHECK(dpo_num_pairs(&a) == dpo_num_pairs(&b) && a.pairs.n_tokens == b.pairs.n_tokens);
        CHECK(a.pairs.n_trained_tokens == b.pairs.n_trained_tokens && a.n_truncated_tokens == b.n_truncated_tokens);
        CHECK(b.split == NULL && b.pairs.examples == NULL);
        dpo_dataset_free(&a);
        dpo_dataset_free(&b);
        free(text);
    }
}

TEST(batches_keep_pairs_whole_and_sequences_apart) {
    struct dpo_dataset ds;
    dpo_dataset_init(&ds, 64);
    int lens[][2] = {{10, 12}, {20, 8}, {30, 30}, {6, 6}, {16, 20}, {9, 13}, {40, 20}};
    int n_pairs = (int)(sizeof lens / sizeof lens[0]);
    for (int p = 0; p < n_pairs; p++) add_pair(&ds, p, lens[p][0], lens[p][1]);
    struct sft_epoch ep;
    sft_epoch_pack(&ep, &ds.pairs, 99, 0, 1, 3);
    /* A step takes batch_size pairs (3, 3, then the 1 left), each pair one packing unit. */
    CHECK(ep.n_steps == 3);
    for (int st = 0; st < ep.n_steps; st++)
        CHECK(dpo_rows_pairs(&ep, ep.step_row[st], ep.step_row[st + 1] - ep.step_row[st]) == (st < 2 ? 3 : 1));
    struct dpo_batch b = {0};
    dpo_batch_fill(&b, &ds, &ep, 0, ep.n_rows);
    CHECK(b.n_pairs == n_pairs && dpo_rows_pairs(&ep, 0, ep.n_rows) == n_pairs);
    int scored[16] = {0}, tokens = 0;
    for (int t = 0; t < b.B * b.T; t++) {
        int s = b.side[t];
        if (b.targets[t] >= 0) {
            CHECK(s >= 0 && s < 2 * n_pairs);
            /* The target is the next token of the same sequence, and that sequence is the side's. */
            CHECK(b.targets[t] == b.ids[t + 1] && b.seq_ids[t] == b.seq_ids[t + 1] && b.positions[t + 1] == b.positions[t] + 1);
            int id_side = (b.ids[t] % 10000) >= 5000;
            CHECK(s % 2 == id_side);
            if (s >= 0) scored[s]++;
        } else {
            CHECK(s == -1);
        }
    }
    /* Each sequence scores its whole second half (the token before a scored one predicts it); the
     * batch's p-th pair is the p-th item of the packing. */
    for (int k = 0; k < ep.n_rows; k++) {
        for (int i = ep.row_start[k]; i < ep.row_start[k + 1]; i++) {
            int item = ep.items[i];
            int p = i, nc = lens[item][0], nr = lens[item][1];
            CHECK(b.pairs[p] == item);
            CHECK(scored[2 * p] == nc - nc / 2 && scored[2 * p + 1] == nr - nr / 2);
            tokens += nc + nr;
        }
    }
    CHECK(b.n_tokens == tokens);
    CHECK(b.n_targets == (int)ds.pairs.n_trained_tokens);
    /* A sequence starts at position 0 with a sequence id of its own. */
    for (int t = 1; t < b.B * b.T; t++)
        if (t % b.T && b.seq_ids[t] != b.seq_ids[t - 1]) CHECK(b.positions[t] == 0);
    dpo_batch_free(&b);
    sft_epoch_free(&ep);
    dpo_dataset_free(&ds);
}

TEST(config_takes_beta_for_dpo) {
    struct trainer_config cfg;
    struct whet_err err = {0};
#define CFG "\"model\":\"m\",\"training_file\":\"t.jsonl\",\"output_dir\":\"out\""
    const char *ok = "{" CFG ",\"method\":\"dpo\",\"hyperparameters\":{\"beta\":0.5}}";
    CHECK_MSG(trainer_config_parse(&cfg, ok, strlen(ok), "job.json", &err) == 0, "%s", err.msg);
    CHECK(cfg.method == TRAINER_DPO);
    CHECK_NEAR(cfg.hp.beta, 0.5, 1e-12);
    trainer_config_free(&cfg);
    const char *dflt = "{" CFG ",\"method\":\"dpo\"}";
    CHECK(trainer_config_parse(&cfg, dflt, strlen(dflt), "job.json", &err) == 0);
    CHECK_NEAR(cfg.hp.beta, 0.1, 1e-12);
    trainer_config_free(&cfg);
    const char *top = "{" CFG ",\"method\":\"dpo\",\"beta\":0.25}";
    CHECK(trainer_config_parse(&cfg, top, strlen(top), "job.json", &err) == 0);
    CHECK_NEAR(cfg.hp.beta, 0.25, 1e-12);
    trainer_config_free(&cfg);
    const char *twice = "{" CFG ",\"method\":\"dpo\",\"beta\":0.25,\"hyperparameters\":{\"beta\":0.5}}";
    CHECK(trainer_config_parse(&cfg, twice, strlen(twice), "job.json", &err) == -1);
    CHECK_CONTAINS(err.msg, "beta: given twice");
    const char *range = "{" CFG ",\"method\":\"dpo\",\"beta\":3}";
    CHECK(trainer_config_parse(&cfg, range, strlen(range), "job.json", &err) == -1);
    CHECK_CONTAINS(err.msg, "job.json: beta: must be a number in (0, 2]");
#undef CFG
}

int main(void) {
    if (setup()) {
        fprintf(stderr, "cannot write the tiny model to %s\n", model_dir);
        return 1;
    }
    RUN(both_field_names_give_the_same_tokens);
    RUN(a_byte_order_mark_and_crlf_change_nothing);
    RUN(only_the_responses_are_scored);
    RUN(an_answer_may_hold_several_assistant_turns);
    RUN(bad_lines_name_file_line_and_field);
    RUN(truncation_fits_the_pair_into_a_row);
    RUN(counting_only_gives_the_loaded_figures);
    RUN(batches_keep_pairs_whole_and_sequences_apart);
    RUN(config_takes_beta_for_dpo);
    tokenizer_free(tok);
    chat_template_free(&tpl);
    char *cmd = xasprintf("rm -rf '%s'", model_dir);
    int rc = system(cmd);
    free(cmd);
    (void)rc;
    return test_summary();
}
