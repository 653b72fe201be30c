/* fuzz_tokenizer.c - libFuzzer target for the tokenizer.
 *
 * The first byte picks what the rest is:
 *   even  a tokenizer.json: loading must either fail with a message or give a tokenizer that encodes
 *         and decodes a few texts (and the input itself) without crashing;
 *   odd   text, encoded with the tiny tokenizer (NFC, Qwen's regex, ChatML tokens), with the same
 *         without its added tokens, and with a GPT-2 style one whose added tokens strip whitespace.
 *         Without added tokens decode(encode(x)) must be exactly NFC(x with invalid UTF-8 replaced);
 *         any other result aborts. (With them NFC stops at each added token, so ">" + U+0338 after
 *         "<|im_end|>" stays two characters, as in transformers.js.) */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "tokenizer_internal.h"

static struct tokenizer *tiny, *tiny_plain, *gpt2ish;
static struct tokenizer_encoder *tiny_plain_enc;

static const char gpt2ish_json[] =
    "{\"added_tokens\": [{\"id\": 300, \"content\": \"<s>\", \"lstrip\": true, \"rstrip\": true},"
    " {\"id\": 301, \"content\": \"<s>>\"}, {\"id\": 302, \"content\": \" \"}],"
    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"use_regex\": true},"
    " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"\xC4\xA0\": 2, \"\xC4\xA0" "a\": 3, \"ab\": 4},"
    " \"merges\": [\"\xC4\xA0 a\", \"a b\"], \"unk_token\": \"a\", \"fuse_unk\": true}}";

static void init(void) {
    struct whet_err err;
    char *json;
    if (tokenizer_tiny_json(600, &json, &err) < 0 || tokenizer_load_json(json, strlen(json), "tiny", &tiny, &err) < 0)
        abort();
    json_t *root = json_loads(json, 0, NULL);
    free(json);
    json_object_del(root, "added_tokens");
    json = json_dumps(root, 0);
    json_decref(root);
    if (tokenizer_load_json(json, strlen(json), "tiny_plain", &tiny_plain, &err) < 0) abort();
    free(json);
    tiny_plain_enc = tokenizer_encoder_new(tiny_plain);
    if (tokenizer_load_json(gpt2ish_json, strlen(gpt2ish_json), "gpt2ish", &gpt2ish, &err) < 0) abort();
}

/* Encodes through `enc` (a long-lived encoder, whose cache is then exercised) or one-shot. */
static void encode_decode(const struct tokenizer *tok, struct tokenizer_encoder *enc, const char *text, size_t len,
                          int check_round_trip) {
    int32_t *ids = NULL;
    size_t n = 0, cap = 0, out_len;
    char *out;
    struct whet_err err;
    int rc = enc ? tokenizer_encoder_encode(enc, text, len, &ids, &n, &cap, &err)
                 : tokenizer_encode(tok, text, len, &ids, &n, &err);
    if (rc < 0) { /* a regex limit: an error, not a crash */
        free(ids);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= tokenizer_vocab_size(tok)) abort();
    if (tokenizer_decode(tok, ids, n, &out, &out_len, &err) < 0) abort();
    if (check_round_trip) {
        struct whet_buf repaired = {0}, normalized = {0};
        const char *want = text;
        size_t want_len = len;
        if (!utf8_repair(text, len, &repaired)) {
            want = repaired.data;
            want_len = repaired.len;
        }
        if (!nfc_normalize(want, want_len, &normalized)) {
            want = normalized.data;
            want_len = normalized.len;
        }
        if (out_len != want_len || memcmp(out, want, want_len) != 0) abort();
        whet_buf_free(&repaired);
        whet_buf_free(&normalized);
    }
    free(out);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tiny) init();
    if (size == 0) return 0;
    const char *rest = (const char *)data + 1;
    size_t len = size - 1;
    if (data[0] & 1) {
        encode_decode(tiny, NULL, rest, len, 0);
        encode_decode(tiny_plain, tiny_plain_enc, rest, len, 1);
        encode_decode(gpt2ish, NULL, rest, len, 0);
        return 0;
    }
    struct tokenizer *tok;
    struct whet_err err;
    if (tokenizer_load_json(rest, len, "fuzz.json", &tok, &err) < 0) {
        if (!memchr(err.msg, 0, sizeof err.msg) || strncmp(err.msg, "fuzz.json", 9) != 0) abort();
        return 0;
    }
    static const char *texts[] = {"Hello, world!", "  \t\n", "caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x9A\x80", "\xFF\xC3", ""};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) encode_decode(tok, NULL, texts[i], strlen(texts[i]), 0);
    encode_decode(tok, NULL, rest, len < 512 ? len : 512, 0);
    (void)tokenizer_token_id(tok, "a");
    tokenizer_free(tok);
    return 0;
}
