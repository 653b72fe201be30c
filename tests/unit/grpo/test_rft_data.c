/* test_rft_data.c - RFT JSONL for GRPO: the prompt rendered with the chat template and the assistant
 * header, the whole line kept as the grader's item, over-long prompts left out and counted, and every
 * malformed line refused with the file, the line number and the field. The tokenizer and chat template
 * are those of `whet model init --preset tiny` (ChatML). */
#include <stdlib.h>
#include <unistd.h>

#include "chat_template.h"
#include "model_init.h"
#include "rft_data.h"
#include "test.h"
#include "tokenizer.h"

static char model_dir[] = "/tmp/whet-rft-data.XXXXXX";
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

static int load(struct rft_dataset *ds, const char *text, int max_prompt_len, struct whet_err *err) {
    char *path = xasprintf("%s/data.jsonl", model_dir);
    whet_write_file_atomic(path, text, strlen(text), err);
    int rc = rft_dataset_load(ds, path, &tpl, tok, max_prompt_len, err);
    free(path);
    return rc;
}

static char *decode(const int *ids, int n) {
    char *text;
    size_t len;
    struct whet_err err;
    return tokenizer_decode(tok, ids, (size_t)n, &text, &len, &err) ? NULL : text;
}

TEST(prompts_end_with_the_assistant_header_and_keep_their_item) {
    struct rft_dataset ds;
    struct whet_err err = {0};
    const char *text = "{\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
                       "\"Colour of the sky?\"}],\"answer\":\"blue\",\"meta\":{\"k\":[1,2]}}\n"
                       "\n"
                       "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Say \"},"
                       "{\"type\":\"text\",\"text\":\"hi\"}]}],\"answer\":\"hi\"}\n";
    CHECK_MSG(load(&ds, text, 1000, &err) == 0, "%s", err.msg);
    CHECK(ds.n_prompts == 2 && ds.n_lines == 2 && ds.n_too_long == 0);
    char *p0 = decode(ds.prompts[0].ids, ds.prompts[0].n), *p1 = decode(ds.prompts[1].ids, ds.prompts[1].n);
    CHECK_STR(p0, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nColour of the sky?<|im_end|>\n"
                  "<|im_start|>assistant\n");
    CHECK_STR(p1, "<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\n");
    CHECK_STR(json_string_value(json_object_get(ds.prompts[0].item, "answer")), "blue");
    CHECK(json_is_object(json_object_get(ds.prompts[0].item, "meta")));
    CHECK(ds.prompts[0].line == 1 && ds.prompts[1].line == 3);
    CHECK(ds.n_tokens == ds.prompts[0].n + ds.prompts[1].n);
    free(p0);
    free(p1);
    rft_dataset_free(&ds);
}

/* A file as a Windows editor saves it, a byte-order mark first and CRLF line ends, reads the same. */
TEST(a_byte_order_mark_and_crlf_change_nothing) {
    struct rft_dataset ds;
    struct whet_err err = {0};
    const char *text = "\xEF\xBB\xBF{\"messages\":[{\"role\":\"user\",\"content\":\"Colour of the sky?\"}],"
                       "\"answer\":\"blue\"}\r\n"
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"Say hi\"}],\"answer\":\"hi\"}\r\n";
    CHECK_MSG(load(&ds, text, 1000, &err) == 0, "%s", err.msg);
    CHECK(ds.n_prompts == 2);
    char *p0 = ds.n_prompts == 2 ? decode(ds.prompts[0].ids, ds.prompts[0].n) : NULL;
    CHECK_STR(p0, "<|im_start|>user\nColour of the sky?<|im_end|>\n<|im_start|>assistant\n");
    CHECK(ds.n_prompts == 2 && !strcmp(json_string_value(json_object_get(ds.prompts[0].item, "answer")), "blue"));
    free(p0);
    rft_dataset_free(&ds);
}

TEST(long_prompts_are_left_out_and_counted) {
    struct rft_dataset ds;
    struct whet_err err = {0};
    const char *text = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n"
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"a much longer prompt than the first one, with "
                       "many words in it\"}]}\n";
    CHECK_MSG(load(&ds, text, 12, &err) == 0, "%s", err.msg);
    CHECK(ds.n_prompts == 1 && ds.n_too_long == 1 && ds.prompts[0].line == 1);
    rft_dataset_free(&ds);
    CHECK(load(&ds, text, 3, &err) == -1);
    CHECK_CONTAINS(err.msg, "no usable prompts");
    CHECK_CONTAINS(err.msg, "2 longer than 3 tokens");
    rft_dataset_free(&ds);
}

/* The gateway's estimate counts a file line by line without keeping it (count_only): the same prompts and
 * prompt tokens as the trainer's load, the long one left out, and nothing held. */
TEST(counting_only_gives_the_loaded_figures) {
    const char *lines[] = {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"answer\":\"x\"}",
                           "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\","
                           "\"content\":\"Add 2 and 3.\"}]}",
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"a much longer prompt than the others, "
                           "with many words in it, and then some more words\"}]}"};
    struct rft_dataset a, b = {.count_only = 1};
    struct whet_err err = {0};
    char *text = xasprintf("%s\n%s\n%s\n", lines[0], lines[1], lines[2]);
    CHECK_MSG(load(&a, text, 32, &err) == 0, "%s", err.msg); /* the prompts take 10, 28 and 44 tokens */
    for (int i = 0; i < 3; i++)
        CHECK_MSG(rft_dataset_add_line(&b, lines[i], strlen(lines[i]), i + 1, &tpl, tok, 32, &err) == 0, "%s",
                  err.msg);
    CHECK(a.n_prompts == 2 && a.n_too_long == 1);
    CHECK(b.n_prompts == a.n_prompts && b.n_tokens == a.n_tokens && b.n_too_long == a.n_too_long && b.n_lines == 3);
    CHECK(b.prompts == NULL);
    rft_dataset_free(&a);
    rft_dataset_free(&b);
    free(text);
}

static const struct {
    const char *line3; /* after two good lines */
    const char *fragments[2];
} bad_lines[] = {
    {"{\"messages\":", {"line 3", "not valid JSON"}},
    {"[1]", {"line 3", "JSON object"}},
    {"{\"prompt\":\"hi\"}", {"line 3: messages: missing", NULL}},
    {"{\"messages\":[]}", {"line 3: messages", "non-empty array"}},
    {"{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", {"line 3: messages[0].role", "\"user\""}},
    {"{\"messages\":[{\"role\":\"user\"}]}", {"line 3: messages[0].content", "missing"}},
    {"{\"messages\":[{\"role\":\"user\",\"content\":7}]}", {"line 3: messages[0].content", "string"}},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"a\"}]}",
     {"line 3: messages[1].role", "ends with an assistant turn"}},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"q\",\"tool_calls\":[{}]}]}", {"line 3: messages[0].tool_calls", NULL}},
};

TEST(bad_lines_name_the_line_and_the_field) {
    for (size_t i = 0; i < sizeof bad_lines / sizeof bad_lines[0]; i++) {
        char *text = xasprintf("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}\n"
                               "{\"messages\":[{\"role\":\"user\",\"content\":\"b\"}]}\n%s\n", bad_lines[i].line3);
        struct rft_dataset ds;
        struct whet_err err = {0};
        int rc = load(&ds, text, 1000, &err);
        CHECK_MSG(rc == -1, "accepted: %s", bad_lines[i].line3);
        CHECK_CONTAINS(err.msg, "data.jsonl: ");
        for (int f = 0; f < 2 && bad_lines[i].fragments[f]; f++) CHECK_CONTAINS(err.msg, bad_lines[i].fragments[f]);
        rft_dataset_free(&ds);
        free(text);
    }
}

int main(void) {
    if (setup()) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    RUN(prompts_end_with_the_assistant_header_and_keep_their_item);
    RUN(a_byte_order_mark_and_crlf_change_nothing);
    RUN(long_prompts_are_left_out_and_counted);
    RUN(counting_only_gives_the_loaded_figures);
    RUN(bad_lines_name_the_line_and_the_field);
    tokenizer_free(tok);
    chat_template_free(&tpl);
    char *cmd = xasprintf("rm -rf %s", model_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", model_dir);
    free(cmd);
    return test_summary();
}
