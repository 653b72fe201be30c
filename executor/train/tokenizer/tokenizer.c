/* tokenizer.c - loading a Hugging Face tokenizer.json, the encode pipeline, and decode.
 *
 * What is supported, and everything else is refused at load with an error naming the field:
 *   model         BPE: vocab, merges ("a b" strings or [a, b] pairs), unk_token, byte_fallback,
 *                 fuse_unk, ignore_merges (no dropout, no subword prefix/suffix)
 *   normalizer    null, NFC, or a Sequence of those
 *   pre_tokenizer Split (Regex or String pattern, behavior Isolated, invert false), ByteLevel
 *                 (add_prefix_space, use_regex), or a Sequence of them with ByteLevel last
 *   added_tokens  matched in the raw text before normalization, longest first; lstrip/rstrip trim the
 *                 neighbouring text; single_word and normalized are ignored, as transformers.js does
 * post_processor and decoder are not needed for ids (decode of a byte-level vocabulary is exact). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "tokenizer_internal.h"

#define TOKENIZER_MAX_FILE (512u << 20)
#define TOKENIZER_MAX_ID (4 << 20) /* the largest vocabularies today have about 256k ids */

/* GPT-2's pre-tokenizer regex, what ByteLevel uses when use_regex is true. */
static const char gpt2_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- loading ----------------------------------------------------------------------------------- */

static int get_bool(json_t *obj, const char *key, int dflt, int *out, const char *where, struct whet_err *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v)) return whet_errf(err, "%s.%s: expected true or false", where, key);
    *out = json_is_true(v);
    return 0;
}

/* An optional string option that must be absent, null or "" (features whet does not implement). */
static int check_unset_string(json_t *obj, const char *key, const char *where, struct whet_err *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0)) return 0;
    return whet_errf(err, "%s.%s: only null or \"\" is supported", where, key);
}

static const char *type_of(json_t *obj) {
    json_t *t = json_object_get(obj, "type");
    return json_is_string(t) ? json_string_value(t) : NULL;
}

static int add_step(struct tokenizer *tok, enum tok_step_kind kind, const char *pattern, int is_regex,
                    const char *where, struct whet_err *err) {
    tok->steps = xrealloc(tok->steps, (size_t)(tok->n_steps + 1) * sizeof *tok->steps);
    struct tok_step *s = &tok->steps[tok->n_steps];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    if (kind == TOK_STEP_SPLIT && split_compile(&s->split, pattern, is_regex, err) < 0)
        return whet_err_prefix(err, "%s.pattern", where);
    tok->n_steps++;
    return 0;
}

static int load_pre_tokenizer(struct tokenizer *tok, json_t *pt, const char *where, struct whet_err *err) {
    if (!json_is_object(pt)) return whet_errf(err, "%s: expected an object", where);
    const char *type = type_of(pt);
    if (!type) return whet_errf(err, "%s.type: expected a string", where);
    if (tok->byte_level) return whet_errf(err, "%s: only ByteLevel may come last; a step after it is not supported", where);
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(pt, "pretokenizers");
        if (!json_is_array(list)) return whet_errf(err, "%s.pretokenizers: expected an array", where);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", where, i);
            if (load_pre_tokenizer(tok, json_array_get(list, i), sub, err) < 0) return -1;
        }
        return 0;
    }
    if (!strcmp(type, "Split")) {
        json_t *pattern = json_object_get(pt, "pattern");
        json_t *regex = json_object_get(pattern, "Regex"), *string = json_object_get(pattern, "String");
        if (!json_is_string(regex) && !json_is_string(string))
            return whet_errf(err, "%s.pattern: expected {\"Regex\": …} or {\"String\": …}", where);
        json_t *behavior = json_object_get(pt, "behavior");
        if (!json_is_string(behavior) || strcmp(json_string_value(behavior), "Isolated"))
            return whet_errf(err, "%s.behavior: only \"Isolated\" is supported", where);
        int invert = 0;
        if (get_bool(pt, "invert", 0, &invert, where, err) < 0) return -1;
        if (invert) return whet_errf(err, "%s.invert: only false is supported", where);
        return add_step(tok, TOK_STEP_SPLIT, json_string_value(regex ? regex : string), regex != NULL, where, err);
    }
    if (!strcmp(type, "ByteLevel")) {
        int prefix = 0, use_regex = 1;
        if (get_bool(pt, "add_prefix_space", 0, &prefix, where, err) < 0) return -1;
        if (get_bool(pt, "use_regex", 1, &use_regex, where, err) < 0) return -1;
        if (prefix && add_step(tok, TOK_STEP_PREFIX_SPACE, NULL, 0, where, err) < 0) return -1;
        if (use_regex && add_step(tok, TOK_STEP_SPLIT, gpt2_pattern, 1, where, err) < 0) return -1;
        tok->byte_level = 1;
        return 0;
    }
    return whet_errf(err, "%s.type: \"%s\" is not supported (byte-level BPE: Split, ByteLevel, Sequence)", where, type);
}

static int load_normalizer(struct tokenizer *tok, json_t *n, const char *where, struct whet_err *err) {
    if (!n || json_is_null(n)) return 0;
    if (!json_is_object(n)) return whet_errf(err, "%s: expected an object or null", where);
    const char *type = type_of(n);
    if (!type) return whet_errf(err, "%s.type: expected a string", where);
    if (!strcmp(type, "NFC")) {
        tok->nfc = 1;
        return 0;
    }
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list)) return whet_errf(err, "%s.normalizers: expected an array", where);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", where, i);
            if (load_normalizer(tok, json_array_get(list, i), sub, err) < 0) return -1;
        }
        return 0;
    }
    return whet_errf(err, "%s.type: \"%s\" is not supported (null or NFC)", where, type);
}

/* Appends the raw bytes a vocabulary string stands for; returns -1 if it stands for none. */
static int token_bytes(const struct tokenizer *tok, const char *s, size_t len, struct whet_buf *out) {
    if (tok->byte_level) return byte_level_decode(s, len, out);
    whet_buf_append(out, s, len);
    return 0;
}

static int load_vocab(struct tokenizer *tok, json_t *vocab, struct whet_err *err) {
    if (!json_is_object(vocab)) return whet_errf(err, "model.vocab: expected an object of token: id");
    const char *key;
    json_t *v;
    size_t max_id = 0;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= TOKENIZER_MAX_ID)
            return whet_errf(err, "model.vocab[\"%.64s\"]: expected an id between 0 and %d", key, TOKENIZER_MAX_ID - 1);
        if ((size_t)json_integer_value(v) + 1 > max_id) max_id = (size_t)json_integer_value(v) + 1;
    }
    tok->n_vocab_ids = max_id;
    tok->vocab_span = xcalloc(max_id ? max_id : 1, sizeof *tok->vocab_span);
    tok->vocab_has = xcalloc(max_id ? max_id : 1, 1);
    struct whet_buf arena = {0};
    json_object_foreach(vocab, key, v) {
        size_t id = (size_t)json_integer_value(v);
        if (tok->vocab_has[id]) {
            whet_buf_free(&arena);
            return whet_errf(err, "model.vocab[\"%.64s\"]: id %zu is used twice", key, id);
        }
        size_t off = arena.len, klen = strlen(key);
        /* A string outside the byte-level alphabet can never come out of BPE; keep it for decode only. */
        tok->vocab_has[id] = 1;
        if (token_bytes(tok, key, klen, &arena) < 0) {
            arena.len = off;
            whet_buf_append(&arena, key, klen);
            tok->vocab_has[id] = 2;
        }
        tok->vocab_span[id] = (struct tok_span){(uint32_t)off, (uint32_t)(arena.len - off)};
    }
    tok->arena = arena.data;
    tok->arena_len = arena.len;
    vocab_index(tok);
    return 0;
}

/* Splits merge i into its two halves (pointers into the JSON, which outlives this call). */
static int merge_parts(json_t *m, size_t i, const char **a, size_t *alen, const char **b, size_t *blen,
                       struct whet_err *err) {
    if (json_is_string(m)) {
        const char *s = json_string_value(m), *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ') || sp == s || !sp[1])
            return whet_errf(err, "model.merges[%zu]: expected \"LEFT RIGHT\" (two tokens, one space)", i);
        *a = s;
        *alen = (size_t)(sp - s);
        *b = sp + 1;
        *blen = strlen(sp + 1);
        return 0;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *alen = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *blen = json_string_length(json_array_get(m, 1));
        return 0;
    }
    return whet_errf(err, "model.merges[%zu]: expected \"LEFT RIGHT\" or [\"LEFT\", \"RIGHT\"]", i);
}

static int load_merges(struct tokenizer *tok, json_t *merges, struct whet_err *err) {
    if (!json_is_array(merges)) return whet_errf(err, "model.merges: expected an array");
    size_t n = json_array_size(merges);
    merge_table_init(tok, n);
    struct whet_buf left = {0}, right = {0};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;
        if (merge_parts(json_array_get(merges, i), i, &a, &alen, &b, &blen, err) < 0) {
            rc = -1;
            break;
        }
        left.len = right.len = 0;
        /* Halves outside the byte-level alphabet cannot occur in a byte-level word: skip the merge. */
        if (token_bytes(tok, a, alen, &left) < 0 || token_bytes(tok, b, blen, &right) < 0) continue;
        int32_t l = vocab_lookup(tok, left.data, left.len), r = vocab_lookup(tok, right.data, right.len);
        if (l < 0 || r < 0) {
            rc = whet_errf(err, "model.merges[%zu]: token \"%.*s\" is not in model.vocab", i,
                           (int)(l < 0 ? (alen > 64 ? 64 : alen) : (blen > 64 ? 64 : blen)), l < 0 ? a : b);
            break;
        }
        whet_buf_append(&left, right.data, right.len);
        int32_t merged = vocab_lookup(tok, left.data, left.len);
        if (merged < 0) {
            rc = whet_errf(err, "model.merges[%zu]: the merged token \"%.*s%.*s\" is not in model.vocab", i,
                           (int)(alen > 64 ? 64 : alen), a, (int)(blen > 64 ? 64 : blen), b);
            break;
        }
        merge_add(tok, l, r, merged, (int32_t)i);
    }
    whet_buf_free(&left);
    whet_buf_free(&right);
    return rc;
}

static int load_model(struct tokenizer *tok, json_t *model, struct whet_err *err) {
    if (!json_is_object(model)) return whet_errf(err, "model: expected an object");
    const char *type = type_of(model);
    if (type && strcmp(type, "BPE")) return whet_errf(err, "model.type: \"%s\" is not supported (only BPE)", type);
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0))
        return whet_errf(err, "model.dropout: only null is supported");
    if (check_unset_string(model, "continuing_subword_prefix", "model", err) < 0 ||
        check_unset_string(model, "end_of_word_suffix", "model", err) < 0)
        return -1;
    if (get_bool(model, "byte_fallback", 0, &tok->byte_fallback, "model", err) < 0 ||
        get_bool(model, "fuse_unk", 0, &tok->fuse_unk, "model", err) < 0 ||
        get_bool(model, "ignore_merges", 0, &tok->ignore_merges, "model", err) < 0)
        return -1;
    if (load_vocab(tok, json_object_get(model, "vocab"), err) < 0) return -1;
    if (load_merges(tok, json_object_get(model, "merges"), err) < 0) return -1;
    for (int b = 0; b < 256; b++) {
        char c = (char)b, name[8];
        tok->byte_id[b] = vocab_lookup(tok, &c, 1);
        snprintf(name, sizeof name, "<0x%02X>", b);
        tok->fallback_id[b] = tok->byte_fallback ? vocab_lookup(tok, name, 6) : -1;
    }
    tok->unk_id = -1;
    json_t *unk = json_object_get(model, "unk_token");
    if (json_is_string(unk)) {
        struct whet_buf ub = {0};
        if (token_bytes(tok, json_string_value(unk), json_string_length(unk), &ub) == 0)
            tok->unk_id = vocab_lookup(tok, ub.data ? ub.data : "", ub.len);
        whet_buf_free(&ub);
        if (tok->unk_id < 0) return whet_errf(err, "model.unk_token: \"%.64s\" is not in model.vocab", json_string_value(unk));
    } else if (unk && !json_is_null(unk)) {
        return whet_errf(err, "model.unk_token: expected a string or null");
    }
    return 0;
}

static int32_t trie_child(struct tokenizer *tok, int32_t node, unsigned char byte, int create) {
    for (int32_t c = tok->trie[node].first_child; c >= 0; c = tok->trie[c].next_sibling)
        if (tok->trie[c].byte == byte) return c;
    if (!create) return -1;
    tok->trie = xrealloc(tok->trie, (size_t)(tok->n_trie + 1) * sizeof *tok->trie);
    int32_t c = tok->n_trie++;
    tok->trie[c] = (struct tok_trie_node){-1, tok->trie[node].first_child, -1, byte};
    tok->trie[node].first_child = c;
    return c;
}

static int load_added(struct tokenizer *tok, json_t *added, struct whet_err *err) {
    tok->trie = xmalloc(sizeof *tok->trie);
    tok->trie[0] = (struct tok_trie_node){-1, -1, -1, 0};
    tok->n_trie = 1;
    if (!added || json_is_null(added)) return 0;
    if (!json_is_array(added)) return whet_errf(err, "added_tokens: expected an array");
    size_t n = json_array_size(added);
    tok->added = xcalloc(n ? n : 1, sizeof *tok->added);
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(added, i), *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        char where[64];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        if (!json_is_object(a)) return whet_errf(err, "%s: expected an object", where);
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= TOKENIZER_MAX_ID)
            return whet_errf(err, "%s.id: expected an id between 0 and %d", where, TOKENIZER_MAX_ID - 1);
        if (!json_is_string(content) || json_string_length(content) == 0)
            return whet_errf(err, "%s.content: expected a non-empty string", where);
        struct tok_added *t = &tok->added[tok->n_added];
        if (get_bool(a, "lstrip", 0, &t->lstrip, where, err) < 0 || get_bool(a, "rstrip", 0, &t->rstrip, where, err) < 0)
            return -1;
        t->id = (int32_t)json_integer_value(id);
        t->len = json_string_length(content);
        t->content = xmalloc(t->len + 1);
        memcpy(t->content, json_string_value(content), t->len + 1);
        tok->n_added++;
        int32_t node = 0;
        for (size_t k = 0; k < t->len; k++) node = trie_child(tok, node, (unsigned char)t->content[k], 1);
        tok->trie[node].added = tok->n_added - 1; /* a repeated content: the later entry wins */
        tok->added_first[(unsigned char)t->content[0]] = 1;
    }
    return 0;
}

static int load_root(struct tokenizer *tok, json_t *root, struct whet_err *err) {
    if (!json_is_object(root)) return whet_errf(err, "expected a JSON object at the top level");
    if (load_normalizer(tok, json_object_get(root, "normalizer"), "normalizer", err) < 0) return -1;
    json_t *pt = json_object_get(root, "pre_tokenizer");
    if (pt && !json_is_null(pt) && load_pre_tokenizer(tok, pt, "pre_tokenizer", err) < 0) return -1;
    if (!json_object_get(root, "model")) return whet_errf(err, "model: missing");
    if (load_model(tok, json_object_get(root, "model"), err) < 0) return -1;
    if (load_added(tok, json_object_get(root, "added_tokens"), err) < 0) return -1;
    tok->vocab_size = tok->n_vocab_ids;
    for (int i = 0; i < tok->n_added; i++)
        if ((size_t)tok->added[i].id + 1 > tok->vocab_size) tok->vocab_size = (size_t)tok->added[i].id + 1;
    tok->added_of_id = xmalloc((tok->vocab_size ? tok->vocab_size : 1) * sizeof *tok->added_of_id);
    for (size_t i = 0; i < tok->vocab_size; i++) tok->added_of_id[i] = -1;
    for (int i = 0; i < tok->n_added; i++) tok->added_of_id[tok->added[i].id] = i;
    return 0;
}

int tokenizer_load_json(const char *json, size_t len, const char *name, struct tokenizer **out,
                        struct whet_err *err) {
    *out = NULL;
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_ALLOW_NUL, &jerr);
    if (!root) return whet_json_errf(err, name, &jerr);
    struct tokenizer *tok = xcalloc(1, sizeof *tok);
    tok->name = xstrdup(name);
    int rc = load_root(tok, root, err);
    json_decref(root);
    if (rc < 0) {
        tokenizer_free(tok);
        return whet_err_prefix(err, "%s", name);
    }
    *out = tok;
    return 0;
}

int tokenizer_load(const char *path, struct tokenizer **out, struct whet_err *err) {
    char *data;
    size_t len;
    *out = NULL;
    if (whet_read_file(path, TOKENIZER_MAX_FILE, &data, &len, err) < 0) return -1;
    int rc = tokenizer_load_json(data, len, path, out, err);
    free(data);
    return rc;
}

void tokenizer_free(struct tokenizer *tok) {
    if (!tok) return;
    for (int i = 0; i < tok->n_steps; i++) split_free(&tok->steps[i].split);
    free(tok->steps);
    for (int i = 0; i < tok->n_added; i++) free(tok->added[i].content);
    free(tok->added);
    free(tok->trie);
    free(tok->added_of_id);
    free(tok->vocab_span);
    free(tok->vocab_has);
    free(tok->vocab_slots);
    free(tok->merge_slots);
    free(tok->arena);
    free(tok->name);
    free(tok);
}

/* ---- encoding ---------------------------------------------------------------------------------- */

struct tokenizer_encoder {
    const struct tokenizer *tok;
    struct whet_buf repaired, normalized, prefixed;
    pcre2_match_data **md; /* one per step */
    struct split_scratch scratch;
    struct bpe_state bpe;
    /* the output of the call in progress, for the split callbacks */
    int32_t **ids;
    size_t *n, *cap;
    int depth;
    struct whet_err *err;
};

struct tokenizer_encoder *tokenizer_encoder_new(const struct tokenizer *tok) {
    struct tokenizer_encoder *enc = xcalloc(1, sizeof *enc);
    enc->tok = tok;
    enc->md = xcalloc((size_t)tok->n_steps + 1, sizeof *enc->md);
    for (int i = 0; i < tok->n_steps; i++)
        if (tok->steps[i].kind == TOK_STEP_SPLIT) enc->md[i] = pcre2_match_data_create_from_pattern(tok->steps[i].split.re, NULL);
    enc->scratch.mc = pcre2_match_context_create(NULL);
    return enc;
}

void tokenizer_encoder_free(struct tokenizer_encoder *enc) {
    if (!enc) return;
    for (int i = 0; i < enc->tok->n_steps; i++) pcre2_match_data_free(enc->md[i]);
    free(enc->md);
    pcre2_match_context_free(enc->scratch.mc);
    pcre2_jit_stack_free(enc->scratch.jit_stack);
    bpe_state_free(&enc->bpe);
    whet_buf_free(&enc->repaired);
    whet_buf_free(&enc->normalized);
    whet_buf_free(&enc->prefixed);
    free(enc);
}

/* Runs pre-tokenizer steps depth.. on one piece, then BPE on what comes out. */
static int encode_piece(void *ctx, const char *p, size_t n) {
    struct tokenizer_encoder *enc = ctx;
    const struct tokenizer *tok = enc->tok;
    if (enc->depth == tok->n_steps) {
        bpe_encode_cached(tok, &enc->bpe, p, n, enc->ids, enc->n, enc->cap);
        return 0;
    }
    const struct tok_step *step = &tok->steps[enc->depth];
    int rc = 0;
    enc->depth++;
    if (step->kind == TOK_STEP_PREFIX_SPACE) {
        if (n > 0 && p[0] == ' ') {
            rc = encode_piece(enc, p, n);
        } else {
            /* Only one ByteLevel step exists, so this buffer is never in use twice. */
            enc->prefixed.len = 0;
            whet_buf_append(&enc->prefixed, " ", 1);
            whet_buf_append(&enc->prefixed, p, n);
            rc = encode_piece(enc, enc->prefixed.data, enc->prefixed.len);
        }
    } else {
        rc = split_run(&step->split, enc->md[enc->depth - 1], &enc->scratch, p, n, encode_piece, enc, enc->err);
    }
    enc->depth--;
    return rc;
}

/* Encodes text between added tokens: normalize, pre-tokenize, BPE. */
static int encode_section(struct tokenizer_encoder *enc, const char *text, size_t len) {
    if (len == 0) return 0;
    if (enc->tok->nfc && !nfc_normalize(text, len, &enc->normalized)) {
        text = enc->normalized.data;
        len = enc->normalized.len;
    }
    enc->depth = 0;
    return encode_piece(enc, text, len);
}

/* Lengths of ECMAScript whitespace at the end / the start of valid UTF-8 text (String.trimEnd/Start). */
static size_t js_space_suffix(const char *s, size_t len) {
    size_t end = len;
    while (end > 0) {
        size_t k = end - 1;
        while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        uint32_t cp;
        utf8_decode((const unsigned char *)s + k, end - k, &cp);
        if (!js_is_space(cp)) break;
        end = k;
    }
    return len - end;
}

static size_t js_space_prefix(const char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        int k = utf8_decode((const unsigned char *)s + i, len - i, &cp);
        if (!js_is_space(cp)) break;
        i += (size_t)k;
    }
    return i;
}

/* The longest added token starting at text[i], or -1. */
static int added_at(const struct tokenizer *tok, const char *text, size_t len, size_t i) {
    int32_t node = 0, found = -1;
    for (size_t j = i; j < len; j++) {
        int32_t c = tok->trie[node].first_child;
        while (c >= 0 && tok->trie[c].byte != (unsigned char)text[j]) c = tok->trie[c].next_sibling;
        if (c < 0) break;
        node = c;
        if (tok->trie[node].added >= 0) found = tok->trie[node].added;
    }
    return found;
}

int tokenizer_encoder_encode(struct tokenizer_encoder *enc, const char *text, size_t len, int32_t **ids,
                             size_t *n, size_t *cap, struct whet_err *err) {
    const struct tokenizer *tok = enc->tok;
    if (!utf8_repair(text, len, &enc->repaired)) {
        text = enc->repaired.data;
        len = enc->repaired.len;
    }
    enc->ids = ids;
    enc->n = n;
    enc->cap = cap;
    enc->err = err;
    size_t start = 0;
    int strip_next = 0; /* the previous added token has rstrip */
    for (size_t i = 0; i < len;) {
        int a = tok->added_first[(unsigned char)text[i]] ? added_at(tok, text, len, i) : -1;
        if (a < 0) {
            i++;
            continue;
        }
        const struct tok_added *t = &tok->added[a];
        const char *sec = text + start;
        size_t slen = i - start;
        if (strip_next) {
            size_t k = js_space_prefix(sec, slen);
            sec += k;
            slen -= k;
        }
        if (t->lstrip) slen -= js_space_suffix(sec, slen);
        if (encode_section(enc, sec, slen) < 0) return -1;
        ids_push(ids, n, cap, t->id);
        i += t->len;
        start = i;
        strip_next = t->rstrip;
    }
    const char *sec = text + start;
    size_t slen = len - start;
    if (strip_next) {
        size_t k = js_space_prefix(sec, slen);
        sec += k;
        slen -= k;
    }
    return encode_section(enc, sec, slen);
}

int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len, int32_t **ids, size_t *n,
                     struct whet_err *err) {
    struct tokenizer_encoder *enc = tokenizer_encoder_new(tok);
    size_t cap = 0;
    enc->bpe.no_cache = 1;
    *ids = NULL;
    *n = 0;
    int rc = tokenizer_encoder_encode(enc, text, len, ids, n, &cap, err);
    tokenizer_encoder_free(enc);
    if (rc < 0) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return rc;
}

/* ---- decoding and lookups ---------------------------------------------------------------------- */

const char *tokenizer_id_bytes(const struct tokenizer *tok, int32_t id, size_t *len) {
    if (id < 0 || (size_t)id >= tok->vocab_size) return NULL;
    int32_t a = tok->added_of_id[id];
    if (a >= 0) {
        *len = tok->added[a].len;
        return tok->added[a].content;
    }
    if ((size_t)id >= tok->n_vocab_ids || !tok->vocab_has[id]) return NULL;
    *len = tok->vocab_span[id].len;
    return tok->arena + tok->vocab_span[id].off;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, size_t n, char **out, size_t *len,
                     struct whet_err *err) {
    struct whet_buf b = {0};
    whet_buf_reserve(&b, 0); /* an empty decode is "", not NULL */
    b.data[0] = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const char *s = tokenizer_id_bytes(tok, ids[i], &l);
        if (!s) {
            whet_buf_free(&b);
            *out = NULL;
            *len = 0;
            return whet_errf(err, "%s: id %d at position %zu is not in the vocabulary", tok->name, (int)ids[i], i);
        }
        /* byte_fallback's <0xXX> tokens stand for one byte (Hugging Face's ByteFallback decoder). */
        if (tok->byte_fallback && l == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && hex_digit(s[3]) >= 0 &&
            hex_digit(s[4]) >= 0 && tok->added_of_id[ids[i]] < 0) {
            char byte = (char)(hex_digit(s[3]) * 16 + hex_digit(s[4]));
            whet_buf_append(&b, &byte, 1);
        } else {
            whet_buf_append(&b, s, l);
        }
    }
    *out = b.data;
    *len = b.len;
    return 0;
}

int32_t tokenizer_token_id(const struct tokenizer *tok, const char *token) {
    size_t len = strlen(token);
    for (int i = tok->n_added - 1; i >= 0; i--)
        if (tok->added[i].len == len && !memcmp(tok->added[i].content, token, len)) return tok->added[i].id;
    struct whet_buf b = {0};
    int32_t id = -1;
    if (token_bytes(tok, token, len, &b) == 0) id = vocab_lookup(tok, b.data ? b.data : "", b.len);
    whet_buf_free(&b);
    return id;
}

size_t tokenizer_vocab_size(const struct tokenizer *tok) {
    return tok->vocab_size;
}
