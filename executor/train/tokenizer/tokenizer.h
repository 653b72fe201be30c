/* tokenizer.h - Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3, Qwen2/3) in plain C.
 *
 * Encoding follows transformers.js (@lenml/tokenizers), the reference the tests compare with, id for id:
 *   1. invalid UTF-8 is replaced first, each maximal ill-formed subsequence by U+FFFD (what TextDecoder
 *      and Python's errors="replace" do), so any byte string has one well-defined encoding;
 *   2. added tokens (special or not) are found in the raw text, longest match first, left to right;
 *      lstrip/rstrip trim the whitespace of the neighbouring text;
 *   3. each stretch of text between them is normalized (NFC when the file asks for it), cut into
 *      pre-tokens by the Split regex (PCRE2, JIT) and/or ByteLevel, and every pre-token is turned into
 *      ids by BPE: the lowest-ranked adjacent pair merges first, the leftmost on ties.
 * No special tokens are added (no BOS/EOS); that is the chat template's job.
 *
 * A loaded tokenizer is immutable and may be shared by threads. Encoding scratch space and the cache of
 * pre-token ids live in a `struct tokenizer_encoder`, one per thread; tokenizer_encode() makes a
 * throw-away one for callers that encode rarely. The encoder does no I/O. */
#ifndef WHET_TOKENIZER_H
#define WHET_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct tokenizer;
struct tokenizer_encoder;

/* Loads a tokenizer.json; errors name the file and the field ("tokenizer.json: model.merges[12]: …"). */
int tokenizer_load(const char *path, struct tokenizer **out, struct whet_err *err);
/* The same from memory; `name` stands for the file in error messages. */
int tokenizer_load_json(const char *json, size_t len, const char *name, struct tokenizer **out,
                        struct whet_err *err);
void tokenizer_free(struct tokenizer *tok);

/* Encodes `len` bytes of text (any bytes; see 1. above) into a fresh array `*ids` of `*n` ids that the
 * caller frees. Fails only on a regex engine error (e.g. a match limit), never on the text itself. */
int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len, int32_t **ids, size_t *n,
                     struct whet_err *err);

/* Per-thread encoding state: scratch buffers and a bounded pre-token -> ids cache. */
struct tokenizer_encoder *tokenizer_encoder_new(const struct tokenizer *tok);
void tokenizer_encoder_free(struct tokenizer_encoder *enc);
/* Appends the ids of `text` to the growable array `*ids` (`*n` used, `*cap` allocated; start with
 * NULL, 0, 0 and free it when done). */
int tokenizer_encoder_encode(struct tokenizer_encoder *enc, const char *text, size_t len, int32_t **ids,
                             size_t *n, size_t *cap, struct whet_err *err);

/* Decodes ids to the bytes they stand for (added tokens as their text) into a fresh NUL-terminated
 * buffer `*out` of `*len` bytes the caller frees. An id outside the vocabulary is an error. */
int tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, size_t n, char **out, size_t *len,
                     struct whet_err *err);
/* The bytes one id stands for (not NUL-terminated), or NULL for an unknown id. */
const char *tokenizer_id_bytes(const struct tokenizer *tok, int32_t id, size_t *len);

/* The id of a token spelled as in tokenizer.json ("<|im_start|>", or "Ġthe" for byte-level vocab
 * entries), or -1 if there is none. */
int32_t tokenizer_token_id(const struct tokenizer *tok, const char *token);
/* 1 + the largest id of the vocabulary and the added tokens (what Hugging Face's len(tokenizer) says). */
size_t tokenizer_vocab_size(const struct tokenizer *tok);

/* Writes DIR/tokenizer.json and DIR/tokenizer_config.json for `whet model init --preset tiny`: a real
 * byte-level BPE (the 256 bytes, then merges learned from a small built-in English and code corpus up
 * to vocab_size - 3 tokens, Qwen's pre-tokenizer regex, NFC) with the ChatML special tokens
 * <|endoftext|>, <|im_start|>, <|im_end|> as the last three ids, and a ChatML chat_template. The same
 * vocab_size always gives byte-identical files. */
#define TOKENIZER_TINY_VOCAB 2048
#define TOKENIZER_TINY_MAX_VOCAB 8192 /* the built-in corpus has no more merges to learn */
int tokenizer_write_tiny(const char *dir, int vocab_size, struct whet_err *err);
/* The tiny tokenizer.json itself, as a fresh NUL-terminated string (for tests and the fuzzer). */
int tokenizer_tiny_json(int vocab_size, char **json, struct whet_err *err);

#endif
