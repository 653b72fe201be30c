/* tokenizer_tiny.c - the tokenizer of `whet model init --preset tiny`: a real byte-level BPE, learned
 * here from a small built-in corpus, so demos and tests need no download.
 *
 * Training is classic BPE (Sennrich et al.): pre-tokenize the corpus with Qwen's regex, count the
 * words, and repeatedly merge the most frequent adjacent pair (ties: the smaller pair of ids) until
 * the vocabulary has vocab_size - 3 tokens; the three ChatML special tokens take the last ids. The
 * built-in text runs out of pairs after about 1800 merges, so it is followed by 2 * vocab_size
 * deterministic compounds of its own words (" quick"+"model"), which keep later merges English-like.
 * Everything depends on vocab_size alone: the same argument writes the same bytes. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "tokenizer_internal.h"

#define TINY_MIN_VOCAB (256 + 3)

static const char qwen_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

static const char *const special_tokens[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

static const char chatml_template[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static const char tiny_corpus[] =
    "The tiny model is a small language model that whet writes for demos and tests. It has a real tokenizer,\n"
    "so the text you give it is split into tokens exactly as a large model would split it, only with fewer\n"
    "tokens in the vocabulary. Fine-tuning teaches a model new behaviour from examples: a user asks a\n"
    "question, the assistant answers, and the training loss is measured only on the answer.\n"
    "A good assistant is helpful, honest and harmless. It says when it does not know something, it\n"
    "explains its reasoning step by step, and it keeps its answers short when a short answer will do.\n"
    "Once upon a time there was a little robot who wanted to learn how to write poems. Every morning she\n"
    "read the books in the library, and every evening she wrote a new line. After many days her poems\n"
    "were beautiful, and the people of the town came to listen to her reading them aloud in the square.\n"
    "What is the capital of France? The capital of France is Paris. What is two plus two? Two plus two is\n"
    "four. Which planet is the largest in our solar system? Jupiter is the largest planet. How many days\n"
    "are there in a week? There are seven days in a week: Monday, Tuesday, Wednesday, Thursday, Friday,\n"
    "Saturday and Sunday. Water boils at one hundred degrees Celsius at sea level.\n"
    "Scheduling jobs on a cluster of machines means choosing, for every job, which nodes and devices it\n"
    "runs on. A fair scheduler shares the machines between tenants, respects their quotas and priorities,\n"
    "and preempts a running job only when that loses the least work. Checkpoints make preemption cheap.\n"
    "The learning rate warms up linearly and then decays along a cosine curve. Gradients are clipped by\n"
    "their global norm, accumulated over several micro-batches, and applied by the AdamW optimizer with\n"
    "weight decay. LoRA adds two small matrices to each linear layer and trains only those.\n"
    "I'm sure you'll like it; we've tried it and it's good. They're here, aren't they? You'd think so.\n"
    "Please summarize the following article in three sentences. Translate this sentence into French.\n"
    "Write a function that returns the sum of a list of numbers. Explain why the sky is blue.\n"
    "The weather today is sunny with a light breeze from the west, and tomorrow it may rain.\n"
    "def fibonacci(n):\n"
    "    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
    "    a, b = 0, 1\n"
    "    for _ in range(n):\n"
    "        a, b = b, a + b\n"
    "    return a\n"
    "\n"
    "class Tokenizer:\n"
    "    def __init__(self, vocab, merges):\n"
    "        self.vocab = vocab\n"
    "        self.merges = {pair: rank for rank, pair in enumerate(merges)}\n"
    "\n"
    "    def encode(self, text: str) -> list[int]:\n"
    "        return [self.vocab[token] for token in self.split(text)]\n"
    "\n"
    "import json\n"
    "with open(\"data.jsonl\") as f:\n"
    "    for line in f:\n"
    "        example = json.loads(line)\n"
    "        print(example[\"messages\"][0][\"content\"])\n"
    "\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "\n"
    "static int compare_ints(const void *a, const void *b) {\n"
    "    int x = *(const int *)a, y = *(const int *)b;\n"
    "    return (x > y) - (x < y);\n"
    "}\n"
    "\n"
    "int main(int argc, char **argv) {\n"
    "    if (argc < 2) {\n"
    "        fprintf(stderr, \"usage: %s FILE\\n\", argv[0]);\n"
    "        return 2;\n"
    "    }\n"
    "    size_t n = 0;\n"
    "    int *values = malloc(1024 * sizeof *values);\n"
    "    qsort(values, n, sizeof *values, compare_ints);\n"
    "    free(values);\n"
    "    return 0;\n"
    "}\n"
    "\n"
    "function greet(name) {\n"
    "  const message = `Hello, ${name}!`;\n"
    "  console.log(message);\n"
    "  return message.length;\n"
    "}\n"
    "\n"
    "SELECT tenant_id, count(*) AS jobs FROM fine_tuning_jobs WHERE status = 'running' GROUP BY tenant_id;\n"
    "{\"messages\": [{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"}, {\"role\": \"user\",\n"
    "\"content\": \"Hi!\"}, {\"role\": \"assistant\", \"content\": \"Hello! How can I help you today?\"}]}\n"
    "git commit -m \"fix the build\" && make -j8 && ./run_tests --verbose 2>&1 | tee log.txt\n"
    "The numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 2024 3.14 -1 42 are written digit by digit.\n"
    "Questions, answers, examples, instructions, conversations, documents, summaries, translations,\n"
    "programs, functions, variables, parameters, gradients, optimizers, schedulers, checkpoints.\n"
    "Although the river was wide and the current strong, the travellers crossed it before nightfall,\n"
    "because the old ferryman knew every stone beneath the water and never hurried his boat.\n";

/* ---- training ---------------------------------------------------------------------------------- */

struct tiny_word {
    int32_t *sym;
    size_t n;
    int64_t count;
};

struct tiny_pairs {
    uint64_t *key; /* (a << 32 | b) + 1, 0 empty */
    int64_t *count;
    size_t mask;
};

static int64_t *pair_slot(struct tiny_pairs *p, int32_t a, int32_t b) {
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & p->mask;
    while (p->key[h] && p->key[h] != key) h = (h + 1) & p->mask;
    p->key[h] = key;
    return &p->count[h];
}

static void word_pairs(struct tiny_pairs *p, const struct tiny_word *w, int64_t sign) {
    for (size_t i = 0; i + 1 < w->n; i++) *pair_slot(p, w->sym[i], w->sym[i + 1]) += sign * w->count;
}

struct word_collect {
    struct whet_buf *words; /* each word: 4-byte length, then bytes */
};

static int collect_word(void *ctx, const char *p, size_t n) {
    struct word_collect *c = ctx;
    uint32_t len = (uint32_t)n;
    whet_buf_append(c->words, &len, sizeof len);
    whet_buf_append(c->words, p, n);
    return 0;
}

/* The words collected in `words`, in order, as pointers to their length fields (an array the caller
 * frees); their count in *n. */
static char **word_list(const struct whet_buf *words, size_t *n) {
    size_t count = 0;
    for (size_t off = 0; off < words->len; count++) {
        uint32_t len;
        memcpy(&len, words->data + off, 4);
        off += 4 + len;
    }
    char **list = xmalloc(count * sizeof *list);
    count = 0;
    for (size_t off = 0; off < words->len;) {
        uint32_t len;
        memcpy(&len, words->data + off, 4);
        list[count++] = words->data + off;
        off += 4 + len;
    }
    *n = count;
    return list;
}

static int cmp_bytes(const void *a, const void *b) {
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    uint32_t lx, ly;
    memcpy(&lx, x, 4);
    memcpy(&ly, y, 4);
    int c = memcmp(x + 4, y + 4, lx < ly ? lx : ly);
    return c ? c : (lx > ly) - (lx < ly);
}

/* Learns merges: fills `tokens` (the bytes of each id, ids 0..255 the bytes in GPT-2's order) and
 * `merges` (pairs of ids) until there are `target` tokens. */
static int tiny_train(int target, struct whet_buf *tokens, struct tok_span *spans, int32_t **merges,
                      int *n_merges, struct whet_err *err) {
    /* The corpus: the built-in text, then compounds of its words. */
    struct tok_split split = {0};
    if (split_compile(&split, qwen_pattern, 1, err) < 0) return -1;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(split.re, NULL);
    struct whet_buf raw = {0};
    struct word_collect wc = {&raw};
    split_run(&split, md, NULL, tiny_corpus, sizeof tiny_corpus - 1, collect_word, &wc, err);
    size_t n_base;
    char **base = word_list(&raw, &n_base);
    /* Compounds are made of the distinct words of at least two letters. */
    qsort(base, n_base, sizeof *base, cmp_bytes);
    size_t n_distinct = 0;
    for (size_t i = 0; i < n_base; i++) {
        uint32_t len, letters = 0;
        memcpy(&len, base[i], 4);
        for (uint32_t k = 0; k < len; k++) letters += (base[i][4 + k] | 0x20) >= 'a' && (base[i][4 + k] | 0x20) <= 'z';
        if (letters >= 2 && (n_distinct == 0 || cmp_bytes(&base[i], &base[n_distinct - 1]) != 0)) base[n_distinct++] = base[i];
    }
    n_base = n_distinct;
    struct whet_buf extra = {0};
    char buf[256];
    uint64_t x = RNG_GOLDEN; /* xorshift64: pairs of words drawn the same way every time */
    for (int i = 0; i < 2 * target; i++) {
        rng_xorshift64(&x);
        const char *a = base[(x >> 11) % n_base], *b = base[(x >> 37) % n_base];
        uint32_t la, lb;
        memcpy(&la, a, 4);
        memcpy(&lb, b, 4);
        if (la + lb + 1 > sizeof buf) continue;
        buf[0] = ' ';
        size_t n = 1;
        for (uint32_t k = 0; k < la; k++)
            if ((a[4 + k] >= 'a' && a[4 + k] <= 'z') || (a[4 + k] >= 'A' && a[4 + k] <= 'Z')) buf[n++] = a[4 + k];
        for (uint32_t k = 0; k < lb; k++)
            if (b[4 + k] >= 'a' && b[4 + k] <= 'z') buf[n++] = b[4 + k];
        if (n > 2) {
            buf[n++] = '\n';
            whet_buf_append(&extra, buf, n);
        }
    }
    wc.words = &raw;
    split_run(&split, md, NULL, extra.data, extra.len, collect_word, &wc, err);
    pcre2_match_data_free(md);
    split_free(&split);
    whet_buf_free(&extra);
    free(base);

    /* Distinct words in byte order, with counts. */
    size_t n_all;
    char **all = word_list(&raw, &n_all);
    qsort(all, n_all, sizeof *all, cmp_bytes);

    int32_t byte_id[256];
    for (int b = 0; b < 256; b++) {
        /* GPT-2's order is the order of the bytes' code points in the byte-level alphabet. */
        int32_t rank = 0;
        for (int o = 0; o < 256; o++) rank += byte_to_unicode((unsigned char)o) < byte_to_unicode((unsigned char)b);
        byte_id[b] = rank;
    }
    for (int id = 0; id < 256; id++)
        for (int b = 0; b < 256; b++)
            if (byte_id[b] == id) {
                char c = (char)b;
                spans[id] = (struct tok_span){(uint32_t)tokens->len, 1};
                whet_buf_append(tokens, &c, 1);
            }

    struct tiny_word *words = xcalloc(n_all, sizeof *words);
    size_t n_words = 0;
    for (size_t i = 0; i < n_all; i++) {
        if (n_words && cmp_bytes(&all[i], &all[i - 1]) == 0) {
            words[n_words - 1].count++;
            continue;
        }
        uint32_t len;
        memcpy(&len, all[i], 4);
        struct tiny_word *w = &words[n_words++];
        w->sym = xmalloc((len ? len : 1) * sizeof *w->sym);
        w->n = len;
        w->count = 1;
        for (uint32_t k = 0; k < len; k++) w->sym[k] = byte_id[(unsigned char)all[i][4 + k]];
    }
    free(all);
    whet_buf_free(&raw);

    struct tiny_pairs pairs;
    size_t slots = 1 << 16;
    while (slots < 8 * (size_t)target) slots *= 2;
    pairs.key = xcalloc(slots, sizeof *pairs.key);
    pairs.count = xcalloc(slots, sizeof *pairs.count);
    pairs.mask = slots - 1;
    for (size_t i = 0; i < n_words; i++) word_pairs(&pairs, &words[i], 1);

    /* The bytes of each token, to spot a merge whose result already exists. */
    int n_tokens = 256, rc = 0;
    *n_merges = 0;
    struct whet_buf cat = {0};
    while (n_tokens < target) {
        size_t best = SIZE_MAX;
        for (size_t h = 0; h <= pairs.mask; h++)
            if (pairs.key[h] && pairs.count[h] > 0 &&
                (best == SIZE_MAX || pairs.count[h] > pairs.count[best] ||
                 (pairs.count[h] == pairs.count[best] && pairs.key[h] < pairs.key[best])))
                best = h;
        if (best == SIZE_MAX) {
            rc = whet_errf(err, "vocab_size %d: the built-in corpus runs out of pairs at %d tokens", target + 3,
                           n_tokens + 3);
            break;
        }
        int32_t a = (int32_t)((pairs.key[best] - 1) >> 32), b = (int32_t)((pairs.key[best] - 1) & 0xffffffffu);
        cat.len = 0;
        whet_buf_append(&cat, tokens->data + spans[a].off, spans[a].len);
        whet_buf_append(&cat, tokens->data + spans[b].off, spans[b].len);
        int32_t m = -1;
        for (int t = 0; t < n_tokens && m < 0; t++)
            if (spans[t].len == cat.len && !memcmp(tokens->data + spans[t].off, cat.data, cat.len)) m = t;
        if (m < 0) {
            m = n_tokens++;
            spans[m] = (struct tok_span){(uint32_t)tokens->len, (uint32_t)cat.len};
            whet_buf_append(tokens, cat.data, cat.len);
        }
        /* More merges than tokens when a result already exists (("ab", "c") after ("a", "bc")). */
        *merges = xrealloc(*merges, 2 * (size_t)(*n_merges + 1) * sizeof **merges);
        (*merges)[2 * *n_merges] = a;
        (*merges)[2 * *n_merges + 1] = b;
        (*n_merges)++;
        for (size_t i = 0; i < n_words; i++) {
            struct tiny_word *w = &words[i];
            size_t k = 0;
            while (k + 1 < w->n && !(w->sym[k] == a && w->sym[k + 1] == b)) k++;
            if (k + 1 >= w->n) continue;
            word_pairs(&pairs, w, -1);
            size_t o = 0;
            for (size_t j = 0; j < w->n; j++) {
                if (j + 1 < w->n && w->sym[j] == a && w->sym[j + 1] == b) {
                    w->sym[o++] = m;
                    j++;
                } else {
                    w->sym[o++] = w->sym[j];
                }
            }
            w->n = o;
            word_pairs(&pairs, w, 1);
        }
    }
    whet_buf_free(&cat);
    for (size_t i = 0; i < n_words; i++) free(words[i].sym);
    free(words);
    free(pairs.key);
    free(pairs.count);
    return rc;
}

/* ---- writing ----------------------------------------------------------------------------------- */

/* The byte-level spelling of raw bytes ("Ġthe" for " the"). */
static json_t *byte_level_string(const char *s, size_t len) {
    struct whet_buf b = {0};
    char u[4];
    for (size_t i = 0; i < len; i++) whet_buf_append(&b, u, (size_t)utf8_encode(byte_to_unicode((unsigned char)s[i]), u));
    json_t *j = json_stringn(b.data ? b.data : "", b.len);
    whet_buf_free(&b);
    return j;
}

static json_t *byte_level_step(void) {
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0);
}

int tokenizer_tiny_json(int vocab_size, char **json, struct whet_err *err) {
    *json = NULL;
    if (vocab_size < TINY_MIN_VOCAB || vocab_size > TOKENIZER_TINY_MAX_VOCAB)
        return whet_errf(err, "vocab_size %d: the tiny tokenizer has between %d and %d tokens (a model's embedding may be larger)",
                         vocab_size, TINY_MIN_VOCAB, TOKENIZER_TINY_MAX_VOCAB);
    int target = vocab_size - 3, n_merges = 0;
    struct whet_buf tokens = {0};
    struct tok_span *spans = xcalloc((size_t)target, sizeof *spans);
    int32_t *merges = NULL; /* pairs of ids */
    if (tiny_train(target, &tokens, spans, &merges, &n_merges, err) < 0) {
        whet_buf_free(&tokens);
        free(spans);
        free(merges);
        return -1;
    }
    json_t *vocab = json_object(), *merge_list = json_array(), *added = json_array();
    for (int id = 0; id < target; id++) {
        json_t *s = byte_level_string(tokens.data + spans[id].off, spans[id].len);
        json_object_set_new(vocab, json_string_value(s), json_integer(id));
        json_decref(s);
    }
    for (int i = 0; i < n_merges; i++) {
        json_t *pair = json_array();
        for (int k = 0; k < 2; k++)
            json_array_append_new(pair, byte_level_string(tokens.data + spans[merges[2 * i + k]].off, spans[merges[2 * i + k]].len));
        json_array_append_new(merge_list, pair);
    }
    for (int k = 0; k < 3; k++)
        json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", target + k, "content",
                                               special_tokens[k], "single_word", 0, "lstrip", 0, "rstrip", 0,
                                               "normalized", 0, "special", 1));
    json_t *root = json_pack(
        "{s:s, s:n, s:n, s:o, s:{s:s}, s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, o]}, s:o, s:o, "
        "s:{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:b, s:o, s:o}}",
        "version", "1.0", "truncation", "padding", "added_tokens", added, "normalizer", "type", "NFC",
        "pre_tokenizer", "type", "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex", qwen_pattern,
        "behavior", "Isolated", "invert", 0, byte_level_step(), "post_processor", byte_level_step(), "decoder",
        byte_level_step(), "model", "type", "BPE", "dropout", "unk_token", "continuing_subword_prefix", "",
        "end_of_word_suffix", "", "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 0, "vocab", vocab, "merges",
        merge_list);
    *json = json_dumps(root, JSON_INDENT(1));
    json_decref(root);
    whet_buf_free(&tokens);
    free(spans);
    free(merges);
    if (!*json) return whet_errf(err, "tiny tokenizer: cannot serialize the JSON");
    return 0;
}

static char *tiny_config_json(int vocab_size) {
    json_t *decoder = json_object();
    for (int k = 0; k < 3; k++) {
        char id[16];
        snprintf(id, sizeof id, "%d", vocab_size - 3 + k);
        json_object_set_new(decoder, id,
                            json_pack("{s:s, s:b, s:b, s:b, s:b, s:b}", "content", special_tokens[k], "lstrip", 0,
                                      "normalized", 0, "rstrip", 0, "single_word", 0, "special", 1));
    }
    json_t *root = json_pack("{s:b, s:b, s:o, s:[s, s], s:n, s:s, s:b, s:s, s:s, s:i, s:s, s:b, s:s, s:n}",
                             "add_bos_token", 0, "add_prefix_space", 0, "added_tokens_decoder", decoder,
                             "additional_special_tokens", special_tokens[1], special_tokens[2], "bos_token",
                             "chat_template", chatml_template, "clean_up_tokenization_spaces", 0, "eos_token",
                             special_tokens[2], "errors", "replace", "model_max_length", 32768, "pad_token",
                             special_tokens[0], "split_special_tokens", 0, "tokenizer_class", "Qwen2Tokenizer",
                             "unk_token");
    char *s = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    return s;
}

int tokenizer_write_tiny(const char *dir, int vocab_size, struct whet_err *err) {
    char *json, *config = NULL;
    if (tokenizer_tiny_json(vocab_size, &json, err) < 0) return -1;
    if (whet_mkdir_p(dir, err) < 0) {
        free(json);
        return -1;
    }
    int rc = whet_write_file_in(dir, "tokenizer.json", json, strlen(json), err);
    free(json);
    if (rc == 0) {
        config = tiny_config_json(vocab_size);
        rc = whet_write_file_in(dir, "tokenizer_config.json", config, strlen(config), err);
        free(config);
    }
    return rc;
}
