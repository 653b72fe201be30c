/* tokenizer_internal.h - what the tokenizer's files share; not part of the public API (tokenizer.h).
 *
 *   tokenizer.c              loading tokenizer.json, added tokens, the encode pipeline, decode
 *   tokenizer_unicode.c      NFC, ECMAScript whitespace (UTF-8 repair: common/utf8.h)
 *   tokenizer_pretokenize.c  the GPT-2 byte <-> unicode map, JS regex -> PCRE2, regex splitting
 *   tokenizer_bpe.c          vocabulary and merge hash maps, BPE over one pre-token, the id cache
 *   tokenizer_tiny.c         the tiny tokenizer generator for `whet model init --preset tiny`
 *
 * Vocabulary entries are kept as the raw bytes they stand for (byte-level strings such as "Ġthe" are
 * mapped back to " the" at load), so BPE works on bytes and decode is a concatenation. */
#ifndef WHET_TOKENIZER_INTERNAL_H
#define WHET_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "tokenizer.h"
#include "utf8.h"

/* ---- unicode ----------------------------------------------------------------------------------- */

/* If valid UTF-8 `text` is already in NFC returns 1; otherwise writes its NFC form to `out`, returns 0. */
int nfc_normalize(const char *text, size_t len, struct whet_buf *out);
/* ECMAScript's WhiteSpace or LineTerminator (what JS \s and String.prototype.trim use). */
int js_is_space(uint32_t cp);
/* The ECMAScript \s set written as the inside of a PCRE2 character class. */
extern const char js_space_class[];

/* ---- pre-tokenizer ----------------------------------------------------------------------------- */

/* GPT-2's byte -> code point map (printable bytes stand for themselves, the others for U+0100 on) and
 * its inverse (-1 for code points that stand for no byte). */
uint32_t byte_to_unicode(unsigned char b);
int unicode_to_byte(uint32_t cp);
/* Decodes a byte-level string ("Ġthe") to raw bytes appended to out; returns -1 if a character is not
 * in the map. */
int byte_level_decode(const char *s, size_t len, struct whet_buf *out);

/* One Split step: a compiled regex whose matches and the text between them both become pieces. */
struct tok_split {
    pcre2_code *re;
    int jit; /* JIT compilation succeeded: match with pcre2_jit_match */
};

/* Compiles a pattern as transformers.js builds its RegExp (createPattern, flags "gu") into PCRE2 with
 * the same meaning; `is_regex` 0 means a literal string. */
int split_compile(struct tok_split *s, const char *pattern, int is_regex, struct whet_err *err);
void split_free(struct tok_split *s);
/* An encoder's matching state. The JIT stack is made only when PCRE2's default 32 KiB is too small
 * (long runs of one class), which keeps one-shot encodes cheap. */
struct split_scratch {
    pcre2_match_context *mc;
    pcre2_jit_stack *jit_stack;
};

/* Cuts text into pieces as transformers.js's regexSplit does: the text before each match, then the
 * match (empty ones dropped; after an empty match the search moves on one character). Calls
 * piece(ctx, p, n) for each; stops and returns -1 when it does or when the regex engine fails.
 * `sc` may be NULL (then a JIT stack overflow is an error). */
int split_run(const struct tok_split *s, pcre2_match_data *md, struct split_scratch *sc, const char *text,
              size_t len, int (*piece)(void *ctx, const char *p, size_t n), void *ctx, struct whet_err *err);

/* A pre-tokenizer step: a Split (ByteLevel with use_regex is GPT-2's Split), or ByteLevel's
 * add_prefix_space, which puts a space before a piece that does not start with one. */
enum tok_step_kind { TOK_STEP_SPLIT, TOK_STEP_PREFIX_SPACE };
struct tok_step {
    enum tok_step_kind kind;
    struct tok_split split;
};

/* ---- BPE --------------------------------------------------------------------------------------- */

struct tok_span {
    uint32_t off, len;
};

struct tok_merge_slot {
    uint64_t key; /* (left id << 32 | right id) + 1; 0 marks an empty slot */
    int32_t rank, merged;
};

struct tok_added {
    int32_t id;
    char *content;
    size_t len;
    int lstrip, rstrip;
};

/* A byte trie over the added tokens' contents (children as sibling lists). */
struct tok_trie_node {
    int32_t first_child, next_sibling, added; /* added: index into tok->added, or -1 */
    unsigned char byte;
};

struct tokenizer {
    char *name; /* for error messages */

    /* id -> bytes of the model vocabulary (holes have len 0 and `vocab_has` 0) */
    size_t n_vocab_ids;
    struct tok_span *vocab_span;
    unsigned char *vocab_has;
    char *arena;
    size_t arena_len;

    /* bytes -> id: open addressing over ids, -1 empty */
    int32_t *vocab_slots;
    size_t vocab_mask;

    struct tok_merge_slot *merge_slots;
    size_t merge_mask;
    size_t n_merges;

    int byte_level; /* a ByteLevel pre-tokenizer: pre-tokens are cut into bytes, not characters */
    int32_t byte_id[256];
    int byte_fallback;
    int32_t fallback_id[256]; /* ids of <0xXX> when byte_fallback */
    int32_t unk_id;           /* -1 when there is no unk token: unknown pieces are dropped */
    int fuse_unk;
    int ignore_merges;

    int nfc;
    struct tok_step *steps; /* the pre-tokenizer, applied in order to each piece of the one before */
    int n_steps;

    struct tok_added *added;
    int n_added;
    struct tok_trie_node *trie; /* node 0 is the root */
    int n_trie;
    unsigned char added_first[256]; /* bytes an added token can start with */
    int32_t *added_of_id;           /* [vocab_size]: index into added, or -1 */

    size_t vocab_size;
};

int32_t vocab_lookup(const struct tokenizer *tok, const char *s, size_t len);
void vocab_index(struct tokenizer *tok);
/* Adds merge (left, right) -> merged with the given rank; a pair seen before takes the new rank and
 * result (a later entry wins, as in both the Rust and the JS map); returns 1 then, else 0. */
int merge_add(struct tokenizer *tok, int32_t left, int32_t right, int32_t merged, int32_t rank);
void merge_table_init(struct tokenizer *tok, size_t n);
const struct tok_merge_slot *merge_lookup(const struct tokenizer *tok, int32_t left, int32_t right);

/* Scratch space for BPE and a bounded cache of pre-token -> ids. */
struct bpe_state {
    int32_t *sym;
    int32_t *rank;
    int32_t *start;
    int32_t *next, *prev;
    size_t cap;
    struct bpe_heap_item *heap;
    size_t heap_cap;

    int no_cache; /* a one-shot encode: filling the cache would cost more than it saves */
    struct bpe_cache_slot *cache;
    size_t cache_mask, cache_used;
    struct whet_buf cache_keys;
    int32_t *cache_ids;
    size_t cache_ids_len, cache_ids_cap;
};

void bpe_state_free(struct bpe_state *st);
/* Appends the ids of one pre-token (raw bytes) to ids. `linear_max` chooses the algorithm: words of at
 * most that many symbols use a linear scan for the lowest-ranked pair, longer ones a heap (the tests
 * run both on the same words). */
void bpe_encode_word(const struct tokenizer *tok, struct bpe_state *st, const char *w, size_t len,
                     int32_t **ids, size_t *n, size_t *cap, size_t linear_max);
/* As above through the cache. */
void bpe_encode_cached(const struct tokenizer *tok, struct bpe_state *st, const char *w, size_t len,
                       int32_t **ids, size_t *n, size_t *cap);
void ids_push(int32_t **ids, size_t *n, size_t *cap, int32_t id);

#define BPE_LINEAR_MAX 48

#endif
