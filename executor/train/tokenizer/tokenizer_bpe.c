/* tokenizer_bpe.c - byte-pair encoding of one pre-token, and the hash maps it runs on.
 *
 * The vocabulary maps raw bytes to ids; the merges map a pair of ids to (rank, merged id). A pre-token
 * starts as one symbol per byte (byte-level models) or per character, and the adjacent pair with the
 * lowest rank merges until none is left, the leftmost first on equal ranks: what the Rust tokenizers
 * and transformers.js's priority queue both do. Pre-tokens are short, so a linear scan for the best
 * pair beats a heap; a heap with lazy deletion keeps long ones (a run of 100k spaces) O(n log n).
 * A bounded cache maps recent pre-tokens to their ids; it is per encoder, so the tokenizer itself
 * stays immutable. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

static uint64_t hash_bytes(const char *s, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

void ids_push(int32_t **ids, size_t *n, size_t *cap, int32_t id) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *ids = xrealloc(*ids, *cap * sizeof **ids);
    }
    (*ids)[(*n)++] = id;
}

/* ---- vocabulary: bytes -> id ------------------------------------------------------------------- */

void vocab_index(struct tokenizer *tok) {
    size_t entries = 0, slots = 16;
    for (size_t id = 0; id < tok->n_vocab_ids; id++) entries += tok->vocab_has[id] == 1;
    while (slots < 2 * entries) slots *= 2;
    tok->vocab_mask = slots - 1;
    tok->vocab_slots = xmalloc(slots * sizeof *tok->vocab_slots);
    for (size_t i = 0; i < slots; i++) tok->vocab_slots[i] = -1;
    for (size_t id = 0; id < tok->n_vocab_ids; id++) {
        if (tok->vocab_has[id] != 1) continue; /* 2: kept for decode only */
        const struct tok_span *sp = &tok->vocab_span[id];
        size_t h = hash_bytes(tok->arena + sp->off, sp->len) & tok->vocab_mask;
        /* Two ids with the same bytes: the first one wins, as a later map insert would not in JS. */
        while (tok->vocab_slots[h] >= 0) {
            const struct tok_span *o = &tok->vocab_span[tok->vocab_slots[h]];
            if (o->len == sp->len && memcmp(tok->arena + o->off, tok->arena + sp->off, sp->len) == 0) break;
            h = (h + 1) & tok->vocab_mask;
        }
        if (tok->vocab_slots[h] < 0) tok->vocab_slots[h] = (int32_t)id;
    }
}

int32_t vocab_lookup(const struct tokenizer *tok, const char *s, size_t len) {
    size_t h = hash_bytes(s, len) & tok->vocab_mask;
    for (;;) {
        int32_t id = tok->vocab_slots[h];
        if (id < 0) return -1;
        const struct tok_span *sp = &tok->vocab_span[id];
        if (sp->len == len && memcmp(tok->arena + sp->off, s, len) == 0) return id;
        h = (h + 1) & tok->vocab_mask;
    }
}

/* ---- merges: (left, right) -> rank, merged ----------------------------------------------------- */

static size_t merge_hash(uint64_t key, size_t mask) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

void merge_table_init(struct tokenizer *tok, size_t n) {
    size_t slots = 16;
    while (slots < 2 * n) slots *= 2;
    tok->merge_mask = slots - 1;
    tok->merge_slots = xcalloc(slots, sizeof *tok->merge_slots);
}

int merge_add(struct tokenizer *tok, int32_t left, int32_t right, int32_t merged, int32_t rank) {
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    size_t h = merge_hash(key, tok->merge_mask);
    while (tok->merge_slots[h].key) {
        if (tok->merge_slots[h].key == key) {
            tok->merge_slots[h].rank = rank;
            tok->merge_slots[h].merged = merged;
            return 1;
        }
        h = (h + 1) & tok->merge_mask;
    }
    tok->merge_slots[h] = (struct tok_merge_slot){key, rank, merged};
    tok->n_merges++;
    return 0;
}

const struct tok_merge_slot *merge_lookup(const struct tokenizer *tok, int32_t left, int32_t right) {
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    size_t h = merge_hash(key, tok->merge_mask);
    for (;;) {
        const struct tok_merge_slot *s = &tok->merge_slots[h];
        if (s->key == key) return s;
        if (!s->key) return NULL;
        h = (h + 1) & tok->merge_mask;
    }
}

/* ---- BPE over one word ------------------------------------------------------------------------- */

struct bpe_heap_item {
    int32_t rank, pos, left, right;
};

static int heap_less(const struct bpe_heap_item *a, const struct bpe_heap_item *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(struct bpe_state *st, size_t *n, struct bpe_heap_item it) {
    if (*n == st->heap_cap) {
        st->heap_cap = st->heap_cap ? 2 * st->heap_cap : 256;
        st->heap = xrealloc(st->heap, st->heap_cap * sizeof *st->heap);
    }
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(&it, &st->heap[parent])) break;
        st->heap[i] = st->heap[parent];
        i = parent;
    }
    st->heap[i] = it;
}

static struct bpe_heap_item heap_pop(struct bpe_state *st, size_t *n) {
    struct bpe_heap_item top = st->heap[0], last = st->heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&st->heap[c + 1], &st->heap[c])) c++;
        if (!heap_less(&st->heap[c], &last)) break;
        st->heap[i] = st->heap[c];
        i = c;
    }
    if (*n) st->heap[i] = last;
    return top;
}

static void state_reserve(struct bpe_state *st, size_t n) {
    if (n <= st->cap) return;
    size_t cap = st->cap ? st->cap : 64;
    while (cap < n) cap *= 2;
    st->sym = xrealloc(st->sym, cap * sizeof *st->sym);
    st->rank = xrealloc(st->rank, cap * sizeof *st->rank);
    st->start = xrealloc(st->start, cap * sizeof *st->start);
    st->next = xrealloc(st->next, cap * sizeof *st->next);
    st->prev = xrealloc(st->prev, cap * sizeof *st->prev);
    st->cap = cap;
}

/* Linear scan: rank[i] is the rank of the pair (sym[i], sym[i+1]), start[i] its merged id. */
static size_t merge_linear(const struct tokenizer *tok, struct bpe_state *st, size_t m) {
    int32_t *sym = st->sym, *rank = st->rank, *merged = st->start;
    for (size_t i = 0; i + 1 < m; i++) {
        const struct tok_merge_slot *s = merge_lookup(tok, sym[i], sym[i + 1]);
        rank[i] = s ? s->rank : INT32_MAX;
        merged[i] = s ? s->merged : -1;
    }
    while (m > 1) {
        int32_t best = INT32_MAX;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++)
            if (rank[i] < best) {
                best = rank[i];
                bi = i;
            }
        if (best == INT32_MAX) break;
        sym[bi] = merged[bi];
        memmove(sym + bi + 1, sym + bi + 2, (m - bi - 2) * sizeof *sym);
        memmove(rank + bi + 1, rank + bi + 2, (m - bi - 2) * sizeof *rank);
        memmove(merged + bi + 1, merged + bi + 2, (m - bi - 2) * sizeof *merged);
        m--;
        for (size_t i = bi ? bi - 1 : 0; i <= bi && i + 1 < m; i++) {
            const struct tok_merge_slot *s = merge_lookup(tok, sym[i], sym[i + 1]);
            rank[i] = s ? s->rank : INT32_MAX;
            merged[i] = s ? s->merged : -1;
        }
    }
    return m;
}

/* Heap with lazy deletion: an entry is stale when its left node died or either symbol changed. */
static size_t merge_heap(const struct tokenizer *tok, struct bpe_state *st, size_t m) {
    int32_t *sym = st->sym, *next = st->next, *prev = st->prev;
    size_t hn = 0;
    for (size_t i = 0; i < m; i++) {
        next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
        prev[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < m; i++) {
        const struct tok_merge_slot *s = merge_lookup(tok, sym[i], sym[i + 1]);
        if (s) heap_push(st, &hn, (struct bpe_heap_item){s->rank, (int32_t)i, sym[i], sym[i + 1]});
    }
    while (hn) {
        struct bpe_heap_item it = heap_pop(st, &hn);
        int32_t p = it.pos, q = next[p];
        if (sym[p] != it.left || q < 0 || sym[q] != it.right) continue;
        sym[p] = merge_lookup(tok, it.left, it.right)->merged;
        sym[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        if (prev[p] >= 0) {
            const struct tok_merge_slot *s = merge_lookup(tok, sym[prev[p]], sym[p]);
            if (s) heap_push(st, &hn, (struct bpe_heap_item){s->rank, prev[p], sym[prev[p]], sym[p]});
        }
        if (next[p] >= 0) {
            const struct tok_merge_slot *s = merge_lookup(tok, sym[p], sym[next[p]]);
            if (s) heap_push(st, &hn, (struct bpe_heap_item){s->rank, p, sym[p], sym[next[p]]});
        }
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) sym[k++] = sym[i];
    return k;
}

/* Appends the symbol for a unit (a byte or a character) that is not in the vocabulary. */
static size_t push_unknown(const struct tokenizer *tok, struct bpe_state *st, size_t m, const char *u, size_t n) {
    if (tok->byte_fallback) {
        int all = 1;
        for (size_t i = 0; i < n; i++) all &= tok->fallback_id[(unsigned char)u[i]] >= 0;
        if (all) {
            for (size_t i = 0; i < n; i++) st->sym[m++] = tok->fallback_id[(unsigned char)u[i]];
            return m;
        }
    }
    if (tok->unk_id < 0) return m; /* no unk token: the piece is dropped, as the Rust library does */
    if (tok->fuse_unk && m > 0 && st->sym[m - 1] == tok->unk_id) return m;
    st->sym[m++] = tok->unk_id;
    return m;
}

void bpe_encode_word(const struct tokenizer *tok, struct bpe_state *st, const char *w, size_t len,
                     int32_t **ids, size_t *n, size_t *cap, size_t linear_max) {
    if (len == 0) return;
    if (tok->ignore_merges) {
        int32_t id = vocab_lookup(tok, w, len);
        if (id >= 0) {
            ids_push(ids, n, cap, id);
            return;
        }
    }
    state_reserve(st, len); /* at most one symbol per byte, byte fallback included */
    size_t m = 0;
    for (size_t i = 0; i < len;) {
        size_t ulen = 1;
        int32_t id;
        if (tok->byte_level) {
            id = tok->byte_id[(unsigned char)w[i]];
        } else {
            uint32_t cp;
            ulen = (size_t)utf8_decode((const unsigned char *)w + i, len - i, &cp);
            id = vocab_lookup(tok, w + i, ulen);
        }
        if (id >= 0) st->sym[m++] = id;
        else m = push_unknown(tok, st, m, w + i, ulen);
        i += ulen;
    }
    if (m == 0) return;
    m = m <= linear_max ? merge_linear(tok, st, m) : merge_heap(tok, st, m);
    for (size_t i = 0; i < m; i++) ids_push(ids, n, cap, st->sym[i]);
}

/* ---- cache ------------------------------------------------------------------------------------- */

struct bpe_cache_slot {
    uint64_t hash; /* 0: empty */
    uint32_t key_off, key_len, ids_off, ids_n;
};

#define CACHE_SLOTS (1u << 15)
#define CACHE_MAX_WORD 64

void bpe_encode_cached(const struct tokenizer *tok, struct bpe_state *st, const char *w, size_t len,
                       int32_t **ids, size_t *n, size_t *cap) {
    if (len > CACHE_MAX_WORD || st->no_cache) {
        bpe_encode_word(tok, st, w, len, ids, n, cap, BPE_LINEAR_MAX);
        return;
    }
    if (!st->cache) {
        st->cache = xcalloc(CACHE_SLOTS, sizeof *st->cache);
        st->cache_mask = CACHE_SLOTS - 1;
    }
    uint64_t hv = hash_bytes(w, len) | 1;
    size_t h = hv & st->cache_mask;
    for (;;) {
        struct bpe_cache_slot *s = &st->cache[h];
        if (!s->hash) break;
        if (s->hash == hv && s->key_len == len && memcmp(st->cache_keys.data + s->key_off, w, len) == 0) {
            for (uint32_t i = 0; i < s->ids_n; i++) ids_push(ids, n, cap, st->cache_ids[s->ids_off + i]);
            return;
        }
        h = (h + 1) & st->cache_mask;
    }
    /* A miss: encode, then remember (starting afresh when half full). */
    size_t first = *n;
    bpe_encode_word(tok, st, w, len, ids, n, cap, BPE_LINEAR_MAX);
    if (st->cache_used >= CACHE_SLOTS / 2) {
        memset(st->cache, 0, CACHE_SLOTS * sizeof *st->cache);
        st->cache_used = 0;
        st->cache_keys.len = 0;
        st->cache_ids_len = 0;
        h = hv & st->cache_mask;
    }
    size_t count = *n - first;
    if (st->cache_ids_len + count > st->cache_ids_cap) {
        st->cache_ids_cap = st->cache_ids_cap ? 2 * st->cache_ids_cap : 4096;
        while (st->cache_ids_cap < st->cache_ids_len + count) st->cache_ids_cap *= 2;
        st->cache_ids = xrealloc(st->cache_ids, st->cache_ids_cap * sizeof *st->cache_ids);
    }
    if (count) memcpy(st->cache_ids + st->cache_ids_len, *ids + first, count * sizeof **ids);
    st->cache[h] = (struct bpe_cache_slot){hv, (uint32_t)st->cache_keys.len, (uint32_t)len,
                                           (uint32_t)st->cache_ids_len, (uint32_t)count};
    whet_buf_append(&st->cache_keys, w, len);
    st->cache_ids_len += count;
    st->cache_used++;
}

void bpe_state_free(struct bpe_state *st) {
    free(st->sym);
    free(st->rank);
    free(st->start);
    free(st->next);
    free(st->prev);
    free(st->heap);
    free(st->cache);
    whet_buf_free(&st->cache_keys);
    free(st->cache_ids);
    memset(st, 0, sizeof *st);
}
