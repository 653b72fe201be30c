#!/usr/bin/python3
"""reference_values.py - prints the expected metric values that test_grader.c checks against.

Run with Debian's python3 after `apt-get install python3-nltk python3-levenshtein` (not a build or CI
dependency: the values it printed are written into test_grader.c). The references:
  fuzzy_match  Levenshtein.ratio (python-Levenshtein)
  bleu         nltk.translate.bleu_score.sentence_bleu, SmoothingFunction().method1
  gleu         nltk.translate.gleu_score.sentence_gleu
  meteor       nltk.translate.meteor_score.meteor_score with an identity stemmer and a WordNet with
               no synsets: NLTK's exact-match stage alone, which is what whet implements
  rouge        Google's rouge-score is not packaged by Debian; rouge() below restates its
               rouge_scorer (tokenize: lower, [^a-z0-9]+ -> space, split; n-gram Counter overlap;
               LCS table; F = 2PR/(P+R)) in a dozen lines, independent of the C code.
Tokens for bleu/gleu/meteor are str.split(), as whet splits them.
"""
import collections
import re

import Levenshtein
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
from nltk.translate.gleu_score import sentence_gleu
from nltk.translate.meteor_score import meteor_score


class IdentityStemmer:
    def stem(self, word):
        return word


class NoWordNet:
    def synsets(self, word):
        return []


def rouge_tokens(text):
    return [t for t in re.sub(r"[^a-z0-9]+", " ", text.lower()).split() if re.match(r"^[a-z0-9]+$", t)]


def fmeasure(p, r):
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def rouge(hyp, ref, n):
    target, prediction = rouge_tokens(ref), rouge_tokens(hyp)
    if n == "l":
        if not target or not prediction:
            return 0.0
        table = [[0] * (len(prediction) + 1) for _ in range(len(target) + 1)]
        for i in range(1, len(target) + 1):
            for j in range(1, len(prediction) + 1):
                table[i][j] = table[i - 1][j - 1] + 1 if target[i - 1] == prediction[j - 1] else max(table[i - 1][j], table[i][j - 1])
        lcs = table[-1][-1]
        return fmeasure(lcs / len(prediction), lcs / len(target))
    grams = lambda toks: collections.Counter(tuple(toks[i:i + n]) for i in range(len(toks) - n + 1))
    t, p = grams(target), grams(prediction)
    overlap = sum(min(c, p[g]) for g, c in t.items())
    return fmeasure(overlap / max(sum(p.values()), 1), overlap / max(sum(t.values()), 1))


PAIRS = [
    ("the cat sat on the mat", "the cat is on the mat"),
    ("It is a guide to action which ensures that the military always obeys the commands of the party",
     "It is a guide to action that ensures that the military will forever heed Party commands"),
    ("the the the the the the the", "the cat is on the mat"),
    ("Paris", "The capital of France is Paris."),
    ("kitten sitting", "sitting kitten"),
    ("Héllo wörld, ça va?", "hello world ca va"),
    ("a b c d e f", "f e d c b a"),
    ("completely different words", "nothing matches here"),
]

LCG_WORDS = "the a cat dog sat on mat is was and of to in it that quick brown fox jumps over lazy".split()


def lcg_text(seed, n):
    """n words drawn by the LCG x = (1103515245 x + 12345) mod 2^31 (test_grader.c draws the same)."""
    out = []
    for _ in range(n):
        seed = (1103515245 * seed + 12345) % 2**31
        out.append(LCG_WORDS[(seed >> 16) % len(LCG_WORDS)])
    return " ".join(out)


# Long texts (200 words): the token LCS spans several 64-bit words.
PAIRS.append((lcg_text(1, 200), lcg_text(2, 200)))

if __name__ == "__main__":
    smooth = SmoothingFunction().method1
    for hyp, ref in PAIRS:
        h, r = hyp.split(), ref.split()
        values = [
            Levenshtein.ratio(hyp, ref),
            sentence_bleu([r], h, smoothing_function=smooth),
            sentence_gleu([r], h),
            meteor_score([r], h, stemmer=IdentityStemmer(), wordnet=NoWordNet()),
        ] + [rouge(hyp, ref, n) for n in (1, 2, 3, 4, 5, "l")]
        if len(hyp) > 200:
            print("    long pair (lcg_text(1, 200), lcg_text(2, 200)): {%s}" % ", ".join("%.12f" % v for v in values))
            continue
        print("    {%s, %s, {%s}}," % (repr(hyp).replace("'", '"'), repr(ref).replace("'", '"'),
                                       ", ".join("%.12f" % v for v in values)))
