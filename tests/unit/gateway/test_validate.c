/* test_validate.c - the JSONL validators of fine-tuning files: every format, every rule, and that
 * errors name the line and the field. */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "validate.h"

static const char *SFT = "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
                         "{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"hello\"}]}";
static const char *DPO = "{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]},"
                         "\"preferred_output\":[{\"role\":\"assistant\",\"content\":\"hello\"}],"
                         "\"non_preferred_output\":[{\"role\":\"assistant\",\"content\":\"go away\"}]}";
static const char *RFT = "{\"messages\":[{\"role\":\"developer\",\"content\":\"solve\"},"
                         "{\"role\":\"user\",\"content\":\"2+2?\"}],\"answer\":\"4\",\"extra\":{\"k\":[1,2]}}";

/* Validates one line as `expect`; returns the error message ("" when valid). */
static const char *line_error(const char *line, enum validate_format expect) {
    static struct whet_err err;
    enum validate_format found;
    err.msg[0] = 0;
    if (validate_line(line, strlen(line), expect, &found, &err) == 0) return "";
    return err.msg;
}

/* The parallel path must answer exactly as the serial one, errors included: every file checked here is
 * also checked in slices of every size. */
static void check_parallel_agrees(const char *text, enum validate_format expect, const struct validate_limits *lim,
                                  int serial_rc, const struct validate_summary *serial_sum, const char *serial_msg) {
    for (int threads = 2; threads <= 7; threads += 5) {
        for (size_t min_slice = 1; min_slice < 400; min_slice = min_slice * 3 + 1) {
            struct validate_summary sum;
            struct whet_err err = {0};
            int rc = validate_jsonl_parallel(text, strlen(text), expect, lim, threads, min_slice, &sum, &err);
            CHECK_MSG(rc == serial_rc, "threads %d slice %zu: rc %d, serial %d", threads, min_slice, rc, serial_rc);
            if (rc == 0 && serial_rc == 0)
                CHECK(sum.lines == serial_sum->lines && sum.format == serial_sum->format && sum.bytes == serial_sum->bytes &&
                      memcmp(sum.per_format, serial_sum->per_format, sizeof sum.per_format) == 0);
            else
                CHECK_STR(err.msg, serial_msg);
        }
    }
}

static const char *file_error(const char *text, enum validate_format expect, struct validate_summary *sum) {
    static struct whet_err err;
    err.msg[0] = 0;
    int rc = validate_jsonl(text, strlen(text), expect, NULL, sum, &err);
    check_parallel_agrees(text, expect, NULL, rc, sum, err.msg);
    return rc == 0 ? "" : err.msg;
}

TEST(detects_each_format) {
    enum validate_format f = VALIDATE_FORMAT_AUTO;
    CHECK(validate_line(SFT, strlen(SFT), VALIDATE_FORMAT_AUTO, &f, NULL) == 0 && f == VALIDATE_FORMAT_SFT);
    CHECK(validate_line(DPO, strlen(DPO), VALIDATE_FORMAT_AUTO, &f, NULL) == 0 && f == VALIDATE_FORMAT_DPO);
    CHECK(validate_line(RFT, strlen(RFT), VALIDATE_FORMAT_AUTO, &f, NULL) == 0 && f == VALIDATE_FORMAT_RFT);
}

TEST(sft_rules) {
    CHECK_STR(line_error(SFT, VALIDATE_FORMAT_SFT), "");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"robot\",\"content\":\"b\"}]}",
                         VALIDATE_FORMAT_SFT),
              "messages[1].role: expected one of \"system\", \"developer\", \"user\", \"assistant\", \"tool\"");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", VALIDATE_FORMAT_SFT),
              "messages: expected at least one assistant message to train on");
    CHECK_STR(line_error("{\"messages\":[]}", VALIDATE_FORMAT_SFT), "messages: expected at least one message");
    CHECK_STR(line_error("{\"messages\":{}}", VALIDATE_FORMAT_SFT), "messages: expected an array, found an object");
    CHECK_STR(line_error("{}", VALIDATE_FORMAT_SFT), "messages: missing");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"assistant\",\"content\":5}]}", VALIDATE_FORMAT_SFT),
              "messages[0].content: expected a string or an array of content parts, found an integer");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"assistant\"}]}", VALIDATE_FORMAT_SFT), "messages[0].content: missing");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\"}],\"foo\":1}", VALIDATE_FORMAT_SFT),
              "foo: unknown field");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\",\"contnet\":1}]}", VALIDATE_FORMAT_SFT),
              "messages[0].contnet: unknown field");
    CHECK_STR(line_error("[1,2]", VALIDATE_FORMAT_SFT), "expected a JSON object, found an array");
    CHECK_CONTAINS(line_error("{\"messages\":", VALIDATE_FORMAT_SFT), "invalid JSON at column");
    CHECK_CONTAINS(line_error("{\"messages\":[],\"messages\":[]}", VALIDATE_FORMAT_SFT), "duplicate");
}

TEST(sft_weights) {
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\",\"weight\":0},"
                         "{\"role\":\"user\",\"content\":\"c\"},{\"role\":\"assistant\",\"content\":\"d\",\"weight\":1}]}",
                         VALIDATE_FORMAT_SFT),
              "");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"assistant\",\"content\":\"b\",\"weight\":2}]}", VALIDATE_FORMAT_SFT),
              "messages[0].weight: expected 0 or 1");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"assistant\",\"content\":\"b\",\"weight\":0.5}]}", VALIDATE_FORMAT_SFT),
              "messages[0].weight: expected 0 or 1");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"user\",\"content\":\"b\",\"weight\":1},{\"role\":\"assistant\",\"content\":\"x\"}]}",
                         VALIDATE_FORMAT_SFT),
              "messages[0].weight: only assistant messages may carry a weight");
}

TEST(sft_content_parts_and_tools) {
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"look\"},"
                         "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,AA\",\"detail\":\"low\"}}]},"
                         "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"a cat\"}]}]}",
                         VALIDATE_FORMAT_SFT),
              "");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
                         VALIDATE_FORMAT_SFT),
              "messages[0].content[0].type: expected \"text\"");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]},{\"role\":\"assistant\",\"content\":\"x\"}]}",
                         VALIDATE_FORMAT_SFT),
              "messages[0].content[0].text: missing");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"user\",\"content\":[]},{\"role\":\"assistant\",\"content\":\"x\"}]}",
                         VALIDATE_FORMAT_SFT),
              "messages[0].content: expected at least one content part");
    /* A tool-calling assistant turn has no content; the tool answers. */
    CHECK_STR(line_error("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\"}}}],"
                         "\"parallel_tool_calls\":false,\"messages\":[{\"role\":\"user\",\"content\":\"1+1\"},"
                         "{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"add\",\"arguments\":\"{}\"}}]},"
                         "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"2\"},{\"role\":\"assistant\",\"content\":\"2\"}]}",
                         VALIDATE_FORMAT_SFT),
              "");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]}]}", VALIDATE_FORMAT_SFT),
              "messages[0].tool_calls[0].function.arguments: missing");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]},{\"role\":\"assistant\",\"content\":\"x\"}]}",
                         VALIDATE_FORMAT_SFT),
              "messages[0].tool_calls: only assistant messages may call tools");
    CHECK_STR(line_error("{\"tools\":[{\"type\":\"retrieval\"}],\"messages\":[{\"role\":\"assistant\",\"content\":\"x\"}]}", VALIDATE_FORMAT_SFT),
              "tools[0].type: expected \"function\"");
    /* A tool call may leave its type out but not name another; a tool must name it and have a function. */
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"x\",\"function\":{}}]}]}",
                         VALIDATE_FORMAT_SFT),
              "messages[0].tool_calls[0].type: expected \"function\"");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\"}]}]}", VALIDATE_FORMAT_SFT),
              "messages[0].tool_calls[0].function: missing");
    CHECK_STR(line_error("{\"tools\":[{\"function\":{\"name\":\"f\"}}],\"messages\":[{\"role\":\"assistant\",\"content\":\"x\"}]}",
                         VALIDATE_FORMAT_SFT),
              "tools[0].type: expected \"function\"");
    CHECK_STR(line_error("{\"tools\":[{\"type\":\"function\"}],\"messages\":[{\"role\":\"assistant\",\"content\":\"x\"}]}",
                         VALIDATE_FORMAT_SFT),
              "tools[0].function: missing");
    CHECK_STR(line_error("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":1}}],"
                         "\"messages\":[{\"role\":\"assistant\",\"content\":\"x\"}]}",
                         VALIDATE_FORMAT_SFT),
              "tools[0].function.parameters: expected an object, found an integer");
    CHECK_STR(line_error("{\"parallel_tool_calls\":1,\"messages\":[{\"role\":\"assistant\",\"content\":\"x\"}]}", VALIDATE_FORMAT_SFT),
              "parallel_tool_calls: expected a boolean, found an integer");
}

TEST(dpo_rules) {
    CHECK_STR(line_error(DPO, VALIDATE_FORMAT_DPO), "");
    /* The older field names are accepted. */
    CHECK_STR(line_error("{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]},"
                         "\"preferred_completion\":[{\"role\":\"assistant\",\"content\":\"a\"}],"
                         "\"non_preferred_completion\":[{\"role\":\"assistant\",\"content\":\"b\"}]}",
                         VALIDATE_FORMAT_DPO),
              "");
    /* ... and, as the trainer reads them, one assistant message or its plain text. */
    CHECK_STR(line_error("{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]},"
                         "\"preferred_completion\":\"a\",\"non_preferred_completion\":{\"role\":\"assistant\",\"content\":\"b\"}}",
                         VALIDATE_FORMAT_DPO),
              "");
    CHECK_STR(line_error("{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]},"
                         "\"preferred_completion\":\"a\",\"non_preferred_completion\":{\"role\":\"user\",\"content\":\"b\"}}",
                         VALIDATE_FORMAT_DPO),
              "non_preferred_completion[0].role: expected \"assistant\"");
    CHECK_STR(line_error("{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]},"
                         "\"preferred_output\":\"a\",\"non_preferred_output\":[{\"role\":\"assistant\",\"content\":\"b\"}]}",
                         VALIDATE_FORMAT_DPO),
              "preferred_output: expected an array, found a string");
    CHECK_STR(line_error("{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]},"
                         "\"preferred_output\":[{\"role\":\"user\",\"content\":\"a\"}],"
                         "\"non_preferred_output\":[{\"role\":\"assistant\",\"content\":\"b\"}]}",
                         VALIDATE_FORMAT_DPO),
              "preferred_output[0].role: expected \"assistant\"");
    CHECK_STR(line_error("{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]},"
                         "\"preferred_output\":[{\"role\":\"assistant\",\"content\":\"a\"}]}",
                         VALIDATE_FORMAT_DPO),
              "non_preferred_output: missing");
    CHECK_STR(line_error("{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]},"
                         "\"preferred_output\":[{\"role\":\"assistant\",\"content\":\"a\"}],"
                         "\"preferred_completion\":[{\"role\":\"assistant\",\"content\":\"a\"}],"
                         "\"non_preferred_output\":[{\"role\":\"assistant\",\"content\":\"b\"}]}",
                         VALIDATE_FORMAT_DPO),
              "preferred_completion: give either preferred_output or preferred_completion, not both");
    CHECK_STR(line_error("{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]},\"preferred_output\":[],"
                         "\"non_preferred_output\":[{\"role\":\"assistant\",\"content\":\"b\"}]}",
                         VALIDATE_FORMAT_DPO),
              "preferred_output: expected at least one message");
    CHECK_STR(line_error("{\"input\":[],\"preferred_output\":[],\"non_preferred_output\":[]}", VALIDATE_FORMAT_DPO),
              "input: expected an object, found an array");
    CHECK_STR(line_error("{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"x\":1}}", VALIDATE_FORMAT_DPO),
              "input.x: unknown field");
    CHECK_STR(line_error(SFT, VALIDATE_FORMAT_DPO), "messages: unknown field");
    CHECK_STR(line_error("{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":7}]}}", VALIDATE_FORMAT_DPO),
              "input.messages[0].content: expected a string or an array of content parts, found an integer");
    /* The outputs answer the prompt, so the prompt cannot end with an answer of its own. */
    CHECK_STR(line_error("{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
                         "{\"role\":\"assistant\",\"content\":\"hello\"}]},"
                         "\"preferred_output\":[{\"role\":\"assistant\",\"content\":\"a\"}],"
                         "\"non_preferred_output\":[{\"role\":\"assistant\",\"content\":\"b\"}]}",
                         VALIDATE_FORMAT_DPO),
              "input.messages: the prompt must not end with an assistant message (the outputs answer it)");
}

TEST(rft_rules) {
    CHECK_STR(line_error(RFT, VALIDATE_FORMAT_RFT), "");
    CHECK_STR(line_error(SFT, VALIDATE_FORMAT_RFT),
              "messages[2]: the last message must be the user's turn (the model answers it), found \"assistant\"");
    CHECK_STR(line_error("{\"answer\":1}", VALIDATE_FORMAT_RFT), "messages: missing");
    CHECK_STR(line_error("{\"messages\":[{\"role\":\"user\",\"content\":\"q\",\"weight\":1}]}", VALIDATE_FORMAT_RFT),
              "messages[0].weight: only assistant messages may carry a weight");
}

TEST(file_counts_lines_and_format) {
    char *text = NULL;
    size_t n = 0;
    for (int i = 0; i < 5; i++) {
        char *next = xasprintf("%s%s\n", text ? text : "", SFT);
        free(text);
        text = next;
        n++;
    }
    struct validate_summary sum;
    CHECK_STR(file_error(text, VALIDATE_FORMAT_AUTO, &sum), "");
    CHECK(sum.format == VALIDATE_FORMAT_SFT);
    CHECK(sum.lines == n);
    CHECK(sum.per_format[VALIDATE_FORMAT_SFT] == n && sum.per_format[VALIDATE_FORMAT_DPO] == 0);
    CHECK(sum.bytes == strlen(text));
    CHECK_STR(validate_format_name(sum.format), "sft");
    free(text);

    text = xasprintf("%s\r\n%s\r\n%s", DPO, DPO, DPO); /* CRLF and no final newline */
    CHECK_STR(file_error(text, VALIDATE_FORMAT_AUTO, &sum), "");
    CHECK(sum.format == VALIDATE_FORMAT_DPO && sum.lines == 3);
    free(text);

    text = xasprintf("%s\n%s\n\n\n", RFT, RFT); /* trailing blank lines are fine */
    CHECK_STR(file_error(text, VALIDATE_FORMAT_RFT, &sum), "");
    CHECK(sum.format == VALIDATE_FORMAT_RFT && sum.lines == 2 && sum.per_format[VALIDATE_FORMAT_RFT] == 2);
    free(text);
}

TEST(file_errors_name_the_line) {
    struct validate_summary sum;
    char *text = xasprintf("%s\n%s\n{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"bot\",\"content\":\"b\"}]}\n", SFT, SFT);
    CHECK_STR(file_error(text, VALIDATE_FORMAT_AUTO, &sum),
              "line 3: messages[1].role: expected one of \"system\", \"developer\", \"user\", \"assistant\", \"tool\"");
    free(text);
    /* The first line fixes the format: an rft line later in an sft file is an sft line without an answer. */
    text = xasprintf("%s\n%s\n", SFT, RFT);
    CHECK_STR(file_error(text, VALIDATE_FORMAT_AUTO, &sum), "line 2: answer: unknown field");
    free(text);
    /* A preference pair among chat examples is named as such. */
    text = xasprintf("%s\n%s\n", SFT, DPO);
    CHECK_STR(file_error(text, VALIDATE_FORMAT_AUTO, &sum),
              "line 2: dpo example in a file of sft examples (the first line decides the format)");
    free(text);
    text = xasprintf("%s\n%s\n", DPO, RFT);
    CHECK_STR(file_error(text, VALIDATE_FORMAT_AUTO, &sum),
              "line 2: rft example in a file of dpo examples (the first line decides the format)");
    free(text);
    /* Told the format, the line is judged by it. */
    text = xasprintf("%s\n%s\n", SFT, DPO);
    CHECK_STR(file_error(text, VALIDATE_FORMAT_SFT, &sum), "line 2: input: unknown field");
    free(text);
    text = xasprintf("%s\n\n%s\n", SFT, SFT);
    CHECK_STR(file_error(text, VALIDATE_FORMAT_AUTO, &sum),
              "line 2: empty line (examples must follow one another, one per line)");
    free(text);
    text = xasprintf("%s\nnot json\n", SFT);
    CHECK_CONTAINS(file_error(text, VALIDATE_FORMAT_AUTO, &sum), "line 2: invalid JSON at column 3: invalid token near 'not'");
    free(text);
    CHECK_STR(file_error("", VALIDATE_FORMAT_AUTO, &sum), "file has no examples");
    CHECK_STR(file_error("\n\n", VALIDATE_FORMAT_AUTO, &sum), "file has no examples");
    /* Told the method, a file of another format fails on its first line. */
    text = xasprintf("%s\n", SFT);
    CHECK_STR(file_error(text, VALIDATE_FORMAT_DPO, &sum), "line 1: messages: unknown field");
    free(text);
}

TEST(limits) {
    struct validate_limits lim = {.max_line_bytes = 300, .max_lines = 2, .max_total_bytes = 100000, .min_lines = 0};
    struct whet_err err;
    struct validate_summary sum;
    char *text = xasprintf("%s\n%s\n%s\n", SFT, SFT, SFT);
    CHECK(validate_jsonl(text, strlen(text), VALIDATE_FORMAT_AUTO, &lim, &sum, &err) == -1);
    CHECK_STR(err.msg, "line 3: too many examples (at most 2)");
    check_parallel_agrees(text, VALIDATE_FORMAT_AUTO, &lim, -1, &sum, err.msg);
    free(text);

    char long_line[1000];
    memset(long_line, ' ', sizeof long_line);
    long_line[sizeof long_line - 1] = 0;
    text = xasprintf("%s\n%s\n", SFT, long_line);
    CHECK(validate_jsonl(text, strlen(text), VALIDATE_FORMAT_AUTO, &lim, &sum, &err) == -1);
    CHECK_STR(err.msg, "line 2: longer than 300 bytes");
    check_parallel_agrees(text, VALIDATE_FORMAT_AUTO, &lim, -1, &sum, err.msg);
    free(text);

    lim.max_total_bytes = 100;
    CHECK(validate_jsonl(SFT, strlen(SFT), VALIDATE_FORMAT_AUTO, &lim, &sum, &err) == -1);
    CHECK_STR(err.msg, "file is larger than 100 bytes");

    struct validate_limits need = {.min_lines = 10};
    CHECK(validate_jsonl(SFT, strlen(SFT), VALIDATE_FORMAT_AUTO, &need, &sum, &err) == -1);
    CHECK_STR(err.msg, "file has 1 examples; at least 10 are needed");
    check_parallel_agrees(SFT, VALIDATE_FORMAT_AUTO, &need, -1, &sum, err.msg);
}

/* Any chunking of the same bytes gives the same result, including errors. */
TEST(stream_chunking_is_invisible) {
    char *text = xasprintf("%s\r\n%s\n%s\n{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\",\"weight\":3}]}\n", SFT, SFT, SFT);
    size_t len = strlen(text);
    for (size_t chunk = 1; chunk <= len; chunk += 7) {
        struct validate_stream *s = validate_stream_new(VALIDATE_FORMAT_AUTO, NULL);
        struct whet_err err = {0};
        int rc = 0;
        for (size_t off = 0; off < len && rc == 0; off += chunk)
            rc = validate_stream_feed(s, text + off, off + chunk > len ? len - off : chunk, &err);
        if (rc == 0) rc = validate_stream_finish(s, NULL, &err);
        CHECK(rc == -1);
        CHECK_STR(err.msg, "line 4: messages[0].weight: expected 0 or 1");
        /* The stream stays failed. */
        CHECK(validate_stream_feed(s, "x", 1, &err) == -1);
        validate_stream_free(s);
    }
    free(text);
}

/* A byte-order mark before the first line (Windows editors write one) is skipped, in the stream however
 * it is chunked and in the parallel path; anywhere else it is the line's first character. */
TEST(a_leading_byte_order_mark_is_skipped) {
    struct validate_summary sum;
    char *text = xasprintf("\xEF\xBB\xBF%s\r\n%s\r\n", SFT, SFT);
    CHECK_STR(file_error(text, VALIDATE_FORMAT_AUTO, &sum), "");
    CHECK(sum.format == VALIDATE_FORMAT_SFT && sum.lines == 2 && sum.bytes == strlen(text));
    CHECK_STR(file_error(text, VALIDATE_FORMAT_SFT, &sum), "");
    size_t len = strlen(text);
    for (size_t chunk = 1; chunk <= 4; chunk++) {
        struct validate_stream *s = validate_stream_new(VALIDATE_FORMAT_AUTO, NULL);
        struct whet_err err = {0};
        int rc = 0;
        for (size_t off = 0; off < len && rc == 0; off += chunk)
            rc = validate_stream_feed(s, text + off, off + chunk > len ? len - off : chunk, &err);
        if (rc == 0) rc = validate_stream_finish(s, &sum, &err);
        CHECK_MSG(rc == 0 && sum.lines == 2, "chunks of %zu: %s", chunk, err.msg);
        validate_stream_free(s);
    }
    free(text);
    text = xasprintf("%s\n\xEF\xBB\xBF%s\n%s\n", SFT, SFT, SFT);
    CHECK_CONTAINS(file_error(text, VALIDATE_FORMAT_AUTO, &sum), "line 2: invalid JSON at column 1");
    free(text);
}

TEST(method_names) {
    CHECK(validate_format_for_method("supervised") == VALIDATE_FORMAT_SFT);
    CHECK(validate_format_for_method("dpo") == VALIDATE_FORMAT_DPO);
    CHECK(validate_format_for_method("reinforcement") == VALIDATE_FORMAT_RFT);
    CHECK(validate_format_for_method("grpo") == VALIDATE_FORMAT_AUTO);
    CHECK(validate_format_parse("dpo") == VALIDATE_FORMAT_DPO);
    CHECK(validate_format_parse(NULL) == VALIDATE_FORMAT_AUTO);
}

/* Field names come from the file: a long multibyte one cut to fit stays valid UTF-8 in the message. */
TEST(messages_stay_utf8) {
    char key[400] = "";
    for (int i = 0; i < 150; i++) strcat(key, "\xc3\xa9");
    char *text = xasprintf("{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\"}],\"%s\":1}\n", key);
    struct validate_summary sum;
    const char *msg = file_error(text, VALIDATE_FORMAT_SFT, &sum);
    CHECK(strncmp(msg, "line 1: \xc3\xa9", 10) == 0);
    /* Every multibyte sequence in the message is complete. */
    const unsigned char *p = (const unsigned char *)msg;
    int complete = 1;
    while (*p) {
        size_t n = *p < 0x80 ? 1 : *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : 2;
        for (size_t i = 1; i < n; i++)
            if ((p[i] & 0xc0) != 0x80) complete = 0;
        if (!complete) break;
        p += n;
    }
    CHECK(complete);
    free(text);
}

/* Slices split a larger file: counts add up, and a blank line in one slice followed by examples in the
 * next is still an error. */
TEST(parallel_slices) {
    char *text = xstrdup("");
    for (int i = 0; i < 40; i++) {
        char *next = xasprintf("%s%s\n", text, SFT);
        free(text);
        text = next;
    }
    struct validate_summary sum;
    CHECK_STR(file_error(text, VALIDATE_FORMAT_AUTO, &sum), "");
    CHECK(sum.lines == 40);
    struct validate_summary psum;
    CHECK(validate_jsonl_parallel(text, strlen(text), VALIDATE_FORMAT_AUTO, NULL, 4, 64, &psum, NULL) == 0);
    CHECK(psum.lines == 40 && psum.per_format[VALIDATE_FORMAT_SFT] == 40 && psum.bytes == strlen(text));
    size_t half = strlen(text) / 2;
    char *nl = strchr(text + half, '\n');
    char *gap = xasprintf("%.*s\n\n%s", (int)(nl - text), text, nl + 1);
    CHECK_CONTAINS(file_error(gap, VALIDATE_FORMAT_AUTO, &sum), ": empty line (examples must follow one another");
    free(gap);
    char *tail = xasprintf("%s\n\n\n", text);
    CHECK_STR(file_error(tail, VALIDATE_FORMAT_AUTO, &sum), "");
    free(tail);
    free(text);
}

int main(void) {
    RUN(detects_each_format);
    RUN(sft_rules);
    RUN(sft_weights);
    RUN(sft_content_parts_and_tools);
    RUN(dpo_rules);
    RUN(rft_rules);
    RUN(file_counts_lines_and_format);
    RUN(file_errors_name_the_line);
    RUN(limits);
    RUN(stream_chunking_is_invisible);
    RUN(a_leading_byte_order_mark_is_skipped);
    RUN(method_names);
    RUN(messages_stay_utf8);
    RUN(parallel_slices);
    return test_summary();
}
