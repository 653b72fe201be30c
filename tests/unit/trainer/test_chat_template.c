/* Chat templates: whet's ChatML / Qwen3 / Llama 3 renderings against the real Jinja templates, the
 * token ids against transformers.js encoding the rendered text, and the loss mask against the
 * assistant turns found in the reference text (tests/fixtures/sft/chat_reference.json, written by
 * make_chat_reference.py). */
#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

#include "chat_template.h"
#include "test.h"
#include "tokenizer.h"

static json_t *reference;

static const char *source_dir(void) {
    const char *s = getenv("WHET_SOURCE_DIR");
    return s ? s : ".";
}

/* The k-th trained stretch the reference text implies: what follows the k-th assistant header, up
 * to and including the end-of-turn token. */
static char *expected_span(const char *text, const char *header, const char *end_token, int k) {
    const char *p = text;
    for (int i = 0; i <= k; i++) {
        p = strstr(p, header);
        if (!p) return NULL;
        p += strlen(header);
    }
    const char *e = strstr(p, end_token);
    if (!e) return NULL;
    e += strlen(end_token);
    char *out = malloc((size_t)(e - p) + 1);
    memcpy(out, p, (size_t)(e - p));
    out[e - p] = 0;
    return out;
}

static int straddling; /* trained runs that began inside the header */

static void check_case(json_t *c, const char *name, struct tokenizer *tok, const struct chat_template *tpl) {
    int conv_index = (int)json_integer_value(json_object_get(c, "conversation"));
    int gen = json_is_true(json_object_get(c, "add_generation_prompt"));
    json_t *conv = conv_index < 0 ? json_object_get(reference, "prompt")
                                  : json_array_get(json_object_get(reference, "conversations"), (size_t)conv_index);
    int n = (int)json_array_size(conv);
    struct chat_message msgs[16];
    int trained_assistant[16], n_assistant = 0, n_trained = 0;
    for (int i = 0; i < n; i++) {
        json_t *m = json_array_get(conv, (size_t)i);
        msgs[i].role = json_string_value(json_object_get(m, "role"));
        msgs[i].content = json_string_value(json_object_get(m, "content"));
        json_t *w = json_object_get(m, "weight");
        msgs[i].weight = w ? (int)json_integer_value(w) : 1;
        if (!strcmp(msgs[i].role, "assistant")) {
            trained_assistant[n_assistant++] = msgs[i].weight;
            n_trained += msgs[i].weight;
        }
    }
    const char *want_text = json_string_value(json_object_get(c, "text"));
    struct chat_rendered r;
    struct whet_err err;
    CHECK(chat_render(&r, tpl, msgs, n, gen, &err) == 0);
    CHECK_MSG(r.text && !strcmp(r.text, want_text), "%s conversation %d:\n got: %s\nwant: %s", name, conv_index, r.text,
              want_text);
    CHECK(r.n_spans == (size_t)n_trained);
    chat_rendered_free(&r);

    int32_t *ids;
    uint8_t *mask;
    int n_ids;
    CHECK(chat_tokenize(&ids, &mask, &n_ids, tpl, tok, msgs, n, gen, &err) == 0);
    json_t *want_ids = json_object_get(c, "ids");
    int same = n_ids == (int)json_array_size(want_ids);
    for (int i = 0; same && i < n_ids; i++) same = ids[i] == json_integer_value(json_array_get(want_ids, (size_t)i));
    CHECK_MSG(same, "%s conversation %d: ids differ from transformers.js (%d vs %zu tokens)", name, conv_index, n_ids,
              json_array_size(want_ids));

    /* Runs of trained tokens, decoded, must be exactly the trained assistant turns of the text. */
    const char *header = tpl->family == CHAT_CHATML ? "<|im_start|>assistant\n" : "<|start_header_id|>assistant<|end_header_id|>\n\n";
    const char *end_token = tpl->family == CHAT_CHATML ? "<|im_end|>" : "<|eot_id|>";
    int run = 0, k = 0;
    for (int i = 0; i < n_ids;) {
        if (!mask[i]) {
            i++;
            continue;
        }
        int j = i;
        while (j < n_ids && mask[j]) j++;
        char *got;
        size_t len;
        CHECK(tokenizer_decode(tok, ids + i, (size_t)(j - i), &got, &len, &err) == 0);
        while (k < n_assistant && !trained_assistant[k]) k++;
        char *want = expected_span(want_text, header, end_token, k);
        /* A token straddling the header's last bytes and the content is trained too: the run may
         * start with a few bytes of the header's end, never more. */
        size_t lead = want && len >= strlen(want) ? len - strlen(want) : 0;
        int ok = want && len >= strlen(want) && !strcmp(got + lead, want) && lead < strlen(header) &&
                 !strncmp(got, header + strlen(header) - lead, lead);
        CHECK_MSG(ok, "%s conversation %d: trained run %d is \"%s\", want \"%s\"", name, conv_index, run, got,
                  want ? want : "(none)");
        if (lead) straddling++;
        free(want);
        free(got);
        k++;
        run++;
        i = j;
    }
    CHECK_MSG(run == n_trained, "%s conversation %d: %d trained runs, want %d", name, conv_index, run, n_trained);
    free(ids);
    free(mask);
}

TEST(matches_jinja_and_transformers_js) {
    char *path = xasprintf("%s/tests/fixtures/sft/chat_reference.json", source_dir());
    json_error_t jerr;
    reference = json_load_file(path, 0, &jerr);
    free(path);
    CHECK_MSG(reference != NULL, "chat_reference.json: %s", jerr.text);
    if (!reference) return;
    json_t *templates = json_object_get(reference, "templates");
    const char *name;
    json_t *t;
    int n_cases = 0;
    json_object_foreach(templates, name, t) {
        struct chat_template tpl;
        struct whet_err err;
        CHECK(chat_template_detect(&tpl, json_string_value(json_object_get(t, "chat_template")), &err) == 0);
        char *tok_path = xasprintf("%s/%s", source_dir(), json_string_value(json_object_get(t, "tokenizer")));
        struct tokenizer *tok = NULL;
        CHECK_MSG(tokenizer_load(tok_path, &tok, &err) == 0, "%s", err.msg);
        free(tok_path);
        if (!tok) continue;
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(reference, "cases"), i, c) {
            if (strcmp(json_string_value(json_object_get(c, "template")), name)) continue;
            check_case(c, name, tok, &tpl);
            n_cases++;
        }
        tokenizer_free(tok);
        chat_template_free(&tpl);
    }
    CHECK(n_cases == 24);
    CHECK(straddling == 1); /* chatml conversation 2: "\n" + "\n\nLeading" pre-tokenizes as "\n\n\n" */
    json_decref(reference);
}

TEST(detects_family_and_refuses_unknown) {
    struct chat_template tpl;
    struct whet_err err;
    CHECK(chat_template_detect(&tpl, "{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}", &err) == -1);
    CHECK_CONTAINS(err.msg, "ChatML");
    CHECK(chat_template_detect(&tpl, "{{ '<|start_header_id|>' }}{% if add_generation_prompt %}{% endif %}", &err) == 0);
    CHECK(tpl.family == CHAT_LLAMA3 && !tpl.always_generation_prompt && !tpl.llama3_date_header);
    chat_template_free(&tpl);
}

/* Templates not in the fixture: their printed forms, transcribed from the Jinja sources. */
TEST(qwen25_default_system_and_llama31_date_header) {
    struct chat_template tpl;
    struct whet_err err;
    struct chat_message msgs[2] = {{"user", "Hi", 1}, {"assistant", " Hello ", 1}};
    struct chat_rendered r;
    CHECK(chat_template_detect(&tpl, "<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                                     "assistant.<|im_end|> add_generation_prompt", &err) == 0);
    CHECK(chat_render(&r, &tpl, msgs, 2, 0, &err) == 0);
    CHECK_STR(r.text, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n Hello <|im_end|>\n");
    chat_rendered_free(&r);
    chat_template_free(&tpl);
    CHECK(chat_template_detect(&tpl, "<|start_header_id|> Cutting Knowledge Date add_generation_prompt", &err) == 0);
    CHECK(chat_render(&r, &tpl, msgs, 2, 1, &err) == 0);
    CHECK_STR(r.text, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                      "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\n");
    CHECK(r.n_spans == 1);
    if (r.n_spans == 1) CHECK(!strncmp(r.text + r.spans[0][0], "Hello<|eot_id|>", r.spans[0][1] - r.spans[0][0]));
    chat_rendered_free(&r);
    chat_template_free(&tpl);
}

TEST(roles_are_checked) {
    struct chat_template tpl;
    struct whet_err err;
    struct chat_rendered r;
    CHECK(chat_template_detect(&tpl, "<|im_start|>", &err) == 0);
    struct chat_message late_system[2] = {{"user", "a", 1}, {"system", "b", 1}};
    CHECK(chat_render(&r, &tpl, late_system, 2, 0, &err) == -1);
    CHECK_CONTAINS(err.msg, "messages[1]");
    struct chat_message tool[1] = {{"tool", "x", 1}};
    CHECK(chat_render(&r, &tpl, tool, 1, 0, &err) == -1);
    CHECK_CONTAINS(err.msg, "messages[0].role");
    chat_template_free(&tpl);
}

static int load_config_text(struct chat_template *tpl, const char *json, struct whet_err *err) {
    char dir[] = "/tmp/whet-tpl-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *path = xasprintf("%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "w");
    fputs(json, f);
    fclose(f);
    int rc = chat_template_load(tpl, dir, err);
    unlink(path);
    rmdir(dir);
    free(path);
    return rc;
}

TEST(load_takes_list_form_and_falls_back_on_special_tokens) {
    struct chat_template tpl;
    struct whet_err err;
    CHECK(load_config_text(&tpl, "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}, "
                                 "{\"name\": \"default\", \"template\": \"<|start_header_id|>\"}]}", &err) == 0);
    CHECK(tpl.family == CHAT_LLAMA3 && tpl.always_generation_prompt);
    chat_template_free(&tpl);
    CHECK(load_config_text(&tpl, "{\"added_tokens_decoder\": {\"151644\": {\"content\": \"<|im_start|>\"}}}", &err) == 0);
    CHECK(tpl.family == CHAT_CHATML && !tpl.always_generation_prompt && !tpl.default_system);
    chat_template_free(&tpl);
    CHECK(load_config_text(&tpl, "{\"added_tokens_decoder\": {}}", &err) == -1);
    CHECK_CONTAINS(err.msg, "tokenizer_config.json: chat_template: missing");
    CHECK(load_config_text(&tpl, "{\"chat_template\": \"{{ messages }}\"}", &err) == -1);
    CHECK_CONTAINS(err.msg, "tokenizer_config.json: chat_template: not a template whet knows");
    CHECK(load_config_text(&tpl, "{\"chat_template\": ", &err) == -1);
    CHECK_CONTAINS(err.msg, "tokenizer_config.json: line 1");
}

int main(void) {
    RUN(matches_jinja_and_transformers_js);
    RUN(detects_family_and_refuses_unknown);
    RUN(qwen25_default_system_and_llama31_date_header);
    RUN(roles_are_checked);
    RUN(load_takes_list_form_and_falls_back_on_special_tokens);
    return test_summary();
}
