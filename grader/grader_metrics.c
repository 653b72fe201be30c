/* grader_metrics.c - the text_similarity metrics, each following a named reference implementation.
 *
 *   fuzzy_match  python-Levenshtein's ratio() (= rapidfuzz's fuzz.ratio / 100): the normalised
 *                InDel similarity over Unicode code points, 2·LCS / (|hyp| + |ref|); 1 when both are
 *                empty. No case folding or other preprocessing.
 *   bleu         NLTK 3.8 sentence_bleu(refs=[ref], hyp) with the default weights (0.25 × 4), one
 *                reference and SmoothingFunction().method1 (epsilon 0.1 added to the numerator of
 *                every zero n-gram precision); 0 when no unigram matches, NLTK's brevity penalty.
 *   gleu         NLTK 3.8 sentence_gleu (Google BLEU): n-grams of orders 1..4 together,
 *                matches / max(hyp n-grams, ref n-grams).
 *   meteor       NLTK 3.8 meteor_score with alpha 0.9, beta 3, gamma 0.5 and lower-cased tokens, but
 *                with EXACT matches only: NLTK also matches Porter stems and WordNet synonyms, which
 *                this build does not ship; texts that differ only by word forms score lower here.
 *   rouge_N/L    Google's rouge-score (rouge_scorer, use_stemmer=False) F-measure: tokens are the
 *                runs of [a-z0-9] after lower-casing; rouge-N counts clipped n-gram overlaps,
 *                rouge-L the longest common subsequence of tokens.
 *
 * Tokens for bleu, gleu and meteor are the whitespace-separated words (Python's str.split()), as is
 * usual with NLTK's sentence-level functions. Departures, all at the edges of Unicode: whitespace
 * is ASCII whitespace and \x1c-\x1f (Python's str.split() also splits on U+0085, U+00A0 and the other
 * Unicode spaces), and lower-casing is ASCII only (Python lowers every cased letter; for rouge this
 * differs only for the few non-ASCII letters whose lower case is ASCII, such as the Kelvin sign).
 *
 * Everything works on integer symbols: code points for fuzzy_match, interned token ids for the
 * others. N-gram overlaps come from sorting the n-gram start positions of both sides and merging
 * equal runs; the LCS is the bit-parallel algorithm of Allison-Dix / Hyyrö (64 columns a word) with
 * a dynamic-programming fallback when the bit table would be large. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grader.h"
#include "utf8.h"

/* ---------------------------------------------------------------- symbols */

/* Decodes UTF-8 into code points (bytes that start no well-formed sequence become U+FFFD, one
 * each). Returns the count. */
static size_t decode_code_points(const char *s, uint32_t **out) {
    size_t len = strlen(s), n = 0;
    uint32_t *cp = xmalloc((len + 1) * sizeof *cp);
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        size_t k = utf8_seq_len(p, (size_t)(end - p));
        if (k) utf8_decode(p, k, &cp[n++]);
        else cp[n++] = 0xfffd;
        p += k ? k : 1;
    }
    *out = cp;
    return n;
}

/* Interns tokens (byte slices) into dense ids: equal tokens, equal ids. */
struct interner {
    size_t cap, count;
    struct slot {
        const char *text;
        size_t len;
        uint32_t id;
    } *slots;
};

static uint64_t hash_bytes(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static void interner_init(struct interner *in, size_t expected) {
    in->cap = 16;
    while (in->cap < expected * 2) in->cap *= 2;
    in->count = 0;
    in->slots = xcalloc(in->cap, sizeof *in->slots);
}

static uint32_t interner_id(struct interner *in, const char *text, size_t len) {
    size_t mask = in->cap - 1, i = (size_t)hash_bytes(text, len) & mask;
    while (in->slots[i].text) {
        if (in->slots[i].len == len && memcmp(in->slots[i].text, text, len) == 0) return in->slots[i].id;
        i = (i + 1) & mask;
    }
    in->slots[i] = (struct slot){text, len, (uint32_t)in->count++};
    return in->slots[i].id;
}

static int is_split_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }
static int is_word_char(unsigned char c) { return c && !is_split_space(c); }
static int is_rouge_char(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

/* Both texts' tokens as ids into one array: hyp's first (*nh of them), then ref's (*nr). A token is
 * a run of non-whitespace (rouge = 0) or of [a-z0-9] (rouge = 1); the texts have already been
 * lower-cased where the metric wants that. */
static uint32_t *tokenize_pair(const char *hyp, const char *ref, int rouge, size_t *nh, size_t *nr) {
    int (*in_token)(unsigned char) = rouge ? is_rouge_char : is_word_char;
    size_t lh = strlen(hyp), lr = strlen(ref);
    /* tokens are separated, so a text of L bytes has at most (L + 1) / 2 */
    uint32_t *ids = xmalloc((lh / 2 + lr / 2 + 2) * sizeof *ids);
    struct interner in;
    interner_init(&in, lh / 2 + lr / 2 + 2);
    size_t n = 0;
    const char *texts[2] = {hyp, ref};
    for (int side = 0; side < 2; side++) {
        const unsigned char *p = (const unsigned char *)texts[side];
        while (*p) {
            if (!in_token(*p)) {
                p++;
                continue;
            }
            const unsigned char *start = p;
            while (in_token(*p)) p++;
            ids[n++] = interner_id(&in, (const char *)start, (size_t)(p - start));
        }
        if (side == 0) *nh = n;
    }
    *nr = n - *nh;
    free(in.slots);
    return ids;
}

static char *ascii_lower(const char *s) {
    char *out = xstrdup(s);
    for (char *p = out; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
    return out;
}

/* ---------------------------------------------------------------- n-gram overlap */

struct ngram_order {
    const uint32_t *ids;
    size_t n;
};

static int ngram_cmp(const void *a, const void *b, void *ctx) {
    const struct ngram_order *o = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    for (size_t k = 0; k < o->n; k++) {
        if (o->ids[i + k] != o->ids[j + k]) return o->ids[i + k] < o->ids[j + k] ? -1 : 1;
    }
    return 0;
}

/* Sum over distinct n-grams of min(count in hyp, count in ref): the clipped matches of BLEU, the
 * overlap of ROUGE-N and GLEU. `ids` holds hyp's nh tokens then ref's nr. */
static size_t ngram_overlap(const uint32_t *ids, size_t nh, size_t nr, size_t n) {
    if (nh < n || nr < n) return 0;
    size_t ch = nh - n + 1, cr = nr - n + 1;
    size_t *hs = xmalloc(ch * sizeof *hs), *rs = xmalloc(cr * sizeof *rs);
    for (size_t i = 0; i < ch; i++) hs[i] = i;
    for (size_t i = 0; i < cr; i++) rs[i] = nh + i;
    struct ngram_order o = {ids, n};
    qsort_r(hs, ch, sizeof *hs, ngram_cmp, &o);
    qsort_r(rs, cr, sizeof *rs, ngram_cmp, &o);
    size_t i = 0, j = 0, overlap = 0;
    while (i < ch && j < cr) {
        int c = ngram_cmp(&hs[i], &rs[j], &o);
        if (c < 0) {
            i++;
        } else if (c > 0) {
            j++;
        } else {
            size_t i0 = i, j0 = j;
            while (i < ch && ngram_cmp(&hs[i], &hs[i0], &o) == 0) i++;
            while (j < cr && ngram_cmp(&rs[j], &rs[j0], &o) == 0) j++;
            overlap += (i - i0) < (j - j0) ? (i - i0) : (j - j0);
        }
    }
    free(hs);
    free(rs);
    return overlap;
}

static size_t ngram_count(size_t len, size_t n) { return len >= n ? len - n + 1 : 0; }

/* ---------------------------------------------------------------- longest common subsequence */

static int u32_cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static size_t lcs_dynamic(const uint32_t *a, size_t na, const uint32_t *b, size_t nb) {
    uint32_t *prev = xcalloc(na + 1, sizeof *prev), *cur = xcalloc(na + 1, sizeof *cur);
    for (size_t j = 0; j < nb; j++) {
        for (size_t i = 0; i < na; i++)
            cur[i + 1] = a[i] == b[j] ? prev[i] + 1 : (prev[i + 1] > cur[i] ? prev[i + 1] : cur[i]);
        uint32_t *t = prev;
        prev = cur;
        cur = t;
    }
    size_t out = prev[na];
    free(prev);
    free(cur);
    return out;
}

/* Length of the longest common subsequence of a (na) and b (nb). Bit-parallel over the shorter one:
 * V holds a 0 for each position of `a` that the LCS so far ends on; each symbol y of `b` does
 * U = V & match(y), V = (V + U) | (V - U) (with U a subset of V, V - U = V & ~U); the LCS is the
 * count of zeros. */
static size_t lcs_length(const uint32_t *a, size_t na, const uint32_t *b, size_t nb) {
    if (na > nb) {
        const uint32_t *t = a;
        a = b;
        b = t;
        size_t tn = na;
        na = nb;
        nb = tn;
    }
    if (na == 0) return 0;
    uint32_t *alphabet = xmalloc(na * sizeof *alphabet);
    memcpy(alphabet, a, na * sizeof *alphabet);
    qsort(alphabet, na, sizeof *alphabet, u32_cmp);
    size_t k = 0;
    for (size_t i = 0; i < na; i++)
        if (i == 0 || alphabet[i] != alphabet[k - 1]) alphabet[k++] = alphabet[i];
    size_t words = (na + 63) / 64;
    if (k * words > ((size_t)1 << 22)) { /* 32 MiB of masks: take the quadratic path instead */
        free(alphabet);
        return lcs_dynamic(a, na, b, nb);
    }
    uint64_t *match = xcalloc(k * words, sizeof *match), *v = xmalloc(words * sizeof *v);
    for (size_t i = 0; i < na; i++) {
        uint32_t *at = bsearch(&a[i], alphabet, k, sizeof *alphabet, u32_cmp);
        match[(size_t)(at - alphabet) * words + i / 64] |= 1ull << (i % 64);
    }
    for (size_t w = 0; w < words; w++) v[w] = ~0ull;
    for (size_t j = 0; j < nb; j++) {
        uint32_t *at = bsearch(&b[j], alphabet, k, sizeof *alphabet, u32_cmp);
        if (!at) continue; /* no match anywhere: U = 0 leaves V as it is */
        const uint64_t *m = &match[(size_t)(at - alphabet) * words];
        unsigned carry = 0;
        for (size_t w = 0; w < words; w++) {
            uint64_t u = v[w] & m[w];
            uint64_t sum = v[w] + u + carry;
            carry = (sum < v[w]) || (carry && sum == v[w]);
            v[w] = sum | (v[w] & ~u);
        }
    }
    size_t ones = 0;
    for (size_t w = 0; w < words; w++) {
        uint64_t x = v[w];
        if (w == words - 1 && na % 64) x &= (1ull << (na % 64)) - 1;
        ones += (size_t)__builtin_popcountll(x);
    }
    free(match);
    free(v);
    free(alphabet);
    return na - ones;
}

/* ---------------------------------------------------------------- the metrics */

double grader_fuzzy_match(const char *hyp, const char *ref) {
    uint32_t *a, *b;
    size_t na = decode_code_points(hyp, &a), nb = decode_code_points(ref, &b);
    double out = na + nb == 0 ? 1.0 : 2.0 * (double)lcs_length(a, na, b, nb) / (double)(na + nb);
    free(a);
    free(b);
    return out;
}

double grader_bleu(const char *hyp, const char *ref) {
    size_t nh, nr;
    uint32_t *ids = tokenize_pair(hyp, ref, 0, &nh, &nr);
    double out = 0;
    if (ngram_overlap(ids, nh, nr, 1) > 0) {
        double log_sum = 0;
        for (size_t n = 1; n <= 4; n++) {
            double matches = (double)ngram_overlap(ids, nh, nr, n);
            size_t total = ngram_count(nh, n);
            double denominator = total > 0 ? (double)total : 1.0;
            double p = matches > 0 ? matches / denominator : 0.1 / denominator; /* method1 */
            log_sum += 0.25 * log(p);
        }
        double bp = nh > nr ? 1.0 : exp(1.0 - (double)nr / (double)nh); /* nh > 0: a unigram matched */
        out = bp * exp(log_sum);
    }
    free(ids);
    return out;
}

double grader_gleu(const char *hyp, const char *ref) {
    size_t nh, nr;
    uint32_t *ids = tokenize_pair(hyp, ref, 0, &nh, &nr);
    size_t tp = 0, tpfp = 0, tpfn = 0;
    for (size_t n = 1; n <= 4; n++) {
        tp += ngram_overlap(ids, nh, nr, n);
        tpfp += ngram_count(nh, n);
        tpfn += ngram_count(nr, n);
    }
    free(ids);
    size_t all = tpfp > tpfn ? tpfp : tpfn;
    return all ? (double)tp / (double)all : 0.0;
}

double grader_meteor(const char *hyp, const char *ref) {
    char *lh = ascii_lower(hyp), *lr = ascii_lower(ref);
    size_t nh, nr;
    uint32_t *ids = tokenize_pair(lh, lr, 0, &nh, &nr);
    const uint32_t *h = ids, *r = ids + nh;
    /* NLTK's exact stage walks the hypothesis from its last word to its first and pairs each with the
     * last still-unpaired equal word of the reference. Per id, a stack of reference positions in
     * increasing order gives that pairing: pop the top. */
    size_t n_ids = 0;
    for (size_t i = 0; i < nh + nr; i++)
        if (ids[i] + 1 > n_ids) n_ids = ids[i] + 1;
    size_t *start = xcalloc(n_ids + 1, sizeof *start), *top = xcalloc(n_ids + 1, sizeof *top);
    size_t *positions = xmalloc((nr + 1) * sizeof *positions);
    for (size_t j = 0; j < nr; j++) start[r[j] + 1]++;
    for (size_t id = 0; id < n_ids; id++) start[id + 1] += start[id];
    for (size_t j = 0; j < nr; j++) positions[start[r[j]] + top[r[j]]++] = j;
    size_t *match_ref = xmalloc((nh + 1) * sizeof *match_ref); /* per hyp word: ref position or SIZE_MAX */
    size_t matches = 0;
    for (size_t i = nh; i-- > 0;) {
        uint32_t id = h[i];
        match_ref[i] = SIZE_MAX;
        if (top[id] > 0) {
            match_ref[i] = positions[start[id] + --top[id]];
            matches++;
        }
    }
    double out = 0;
    if (matches > 0) {
        /* chunks: runs of matches adjacent in both texts, taken in hypothesis order */
        size_t chunks = 1, prev_h = SIZE_MAX, prev_r = 0;
        for (size_t i = 0; i < nh; i++) {
            if (match_ref[i] == SIZE_MAX) continue;
            if (prev_h != SIZE_MAX && !(i == prev_h + 1 && match_ref[i] == prev_r + 1)) chunks++;
            prev_h = i;
            prev_r = match_ref[i];
        }
        const double alpha = 0.9, beta = 3, gamma = 0.5;
        double precision = (double)matches / (double)nh, recall = (double)matches / (double)nr;
        double fmean = precision * recall / (alpha * precision + (1 - alpha) * recall);
        double penalty = gamma * pow((double)chunks / (double)matches, beta);
        out = (1 - penalty) * fmean;
    }
    free(match_ref);
    free(positions);
    free(start);
    free(top);
    free(ids);
    free(lh);
    free(lr);
    return out;
}

static double fmeasure(double precision, double recall) {
    return precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0;
}

double grader_rouge_n(const char *hyp, const char *ref, int n) {
    char *lh = ascii_lower(hyp), *lr = ascii_lower(ref);
    size_t nh, nr;
    uint32_t *ids = tokenize_pair(lh, lr, 1, &nh, &nr);
    size_t overlap = n > 0 ? ngram_overlap(ids, nh, nr, (size_t)n) : 0;
    size_t ch = n > 0 ? ngram_count(nh, (size_t)n) : 0, cr = n > 0 ? ngram_count(nr, (size_t)n) : 0;
    double precision = (double)overlap / (double)(ch > 0 ? ch : 1);
    double recall = (double)overlap / (double)(cr > 0 ? cr : 1);
    free(ids);
    free(lh);
    free(lr);
    return fmeasure(precision, recall);
}

double grader_rouge_l(const char *hyp, const char *ref) {
    char *lh = ascii_lower(hyp), *lr = ascii_lower(ref);
    size_t nh, nr;
    uint32_t *ids = tokenize_pair(lh, lr, 1, &nh, &nr);
    double out = 0;
    if (nh > 0 && nr > 0) {
        double lcs = (double)lcs_length(ids, nh, ids + nh, nr);
        out = fmeasure(lcs / (double)nh, lcs / (double)nr);
    }
    free(ids);
    free(lh);
    free(lr);
    return out;
}
