"""Validation of paraphrase variants: same numbers, same answer, different text; similarity to the original.

A variant is accepted only if the multiset of numeric values in its text equals the original's (number
words count as their values, so "3" -> "three" is allowed, "3" -> "4" or a dropped number is not), its
answer is equivalent to the original answer, and its text differs from the original. ROUGE-L
(`rouge-score`) and BLEU (`sacrebleu`) to the original are reported per variant, as the ZCP release does.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from zcp.core.answers import answers_equal

_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
         "ninety": 90}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6}
_ADVERBS = {"twice": 2, "thrice": 3}  # "twice as many" and "two times as many" state the same number
_WORD = "|".join(sorted([*_UNITS, *_TENS, *_SCALES], key=len, reverse=True))
_PRONOUN_BEFORE = re.compile(r"\b(each|every|no|which|the|that|this|any|another|per|some)\s+\Z", re.IGNORECASE)
_PRONOUN_AFTER = re.compile(r"\s+(of|another|by)\b|'s\b|’s\b", re.IGNORECASE)
_ADVERB_RE = re.compile(r"\b(twice|thrice)\b", re.IGNORECASE)
# a run of number words: "twenty-five", "two hundred and forty", "three thousand"
_WORD_RUN_RE = re.compile(rf"\b(?:{_WORD})(?:(?:\s+and\s+|[\s-]+)(?:{_WORD}))*\b", re.IGNORECASE)
# digits: 1,000 / 3.5 / .75 / 1/4 (a fraction counts as one value)
_DIGITS_RE = re.compile(r"(?<![\d.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+(?!\.\d))?|(?<![\d.])\.\d+")


def _words_values(run: str) -> list[Fraction]:
    """Values of a run of English number words: "two hundred and forty-five" -> [245], "five five" -> [5, 5].

    A word that cannot extend the number being read (a unit after a unit, a tens word after a unit)
    starts a new number, so adjacent numbers are not merged.
    """
    out: list[int] = []
    total, current, last = 0, 0, None  # last: kind of the previous word
    for w in re.split(r"[\s-]+", run.lower()):
        if w == "and" or not w:
            continue
        kind = "unit" if w in _UNITS else "tens" if w in _TENS else w
        extends = last is not None and (
            (kind == "unit" and last in ("tens", "hundred", "thousand", "million") and not (
                last == "tens" and _UNITS[w] >= 10))
            or (kind == "tens" and last in ("hundred", "thousand", "million"))
            or (kind == "hundred" and last in ("unit", "tens"))
            or (kind in ("thousand", "million") and last in ("unit", "tens", "hundred")))
        if last is not None and not extends:
            out.append(total + current)
            total, current = 0, 0
        if kind == "unit":
            current += _UNITS[w]
        elif kind == "tens":
            current += _TENS[w]
        elif kind == "hundred":
            current = max(current, 1) * 100
        else:  # thousand, million
            total += max(current, 1) * _SCALES[w]
            current = 0
        last = kind
    if last is not None:
        out.append(total + current)
    return [Fraction(v) for v in out]


def numeric_values(text: str) -> Counter:
    """Multiset of the numeric values written in `text` (digits, decimals, fractions, number words, twice)."""
    values: Counter = Counter()
    for m in _DIGITS_RE.finditer(text):
        tok = m.group(0).replace(",", "")
        if "/" in tok:
            num, den = tok.split("/")
            values[Fraction(Fraction(num), int(den)) if int(den) else Fraction(num)] += 1
        else:
            values[Fraction(tok)] += 1
    for m in _WORD_RUN_RE.finditer(text):
        if m.group(0).lower() == "one" and (_PRONOUN_BEFORE.search(text[: m.start()])
                                            or _PRONOUN_AFTER.match(text[m.end():])):
            continue  # "each one", "no one", "one of them": a pronoun, not a quantity
        for v in _words_values(m.group(0)):
            values[v] += 1
    for m in _ADVERB_RE.finditer(text):
        values[Fraction(_ADVERBS[m.group(1).lower()])] += 1
    return values


def _fmt(values: Counter) -> str:
    return ", ".join(f"{v}" + (f" (x{n})" if n > 1 else "") for v, n in sorted(values.items()))


@lru_cache(maxsize=1)
def _rouge():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)


def similarity(original: str, variant: str) -> tuple[float, float]:
    """(ROUGE-L F1, sentence BLEU) of a variant against the original text; BLEU on sacrebleu's 0-100 scale."""
    import sacrebleu

    rouge_l = _rouge().score(original, variant)["rougeL"].fmeasure
    bleu = sacrebleu.sentence_bleu(variant, [original]).score
    return float(rouge_l), float(bleu)


@dataclass(frozen=True)
class VariantCheck:
    """Outcome of validating one variant: `ok`, the rejection `reason`, similarity to the original."""

    ok: bool
    reason: str | None
    rouge_l: float
    bleu: float


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def check_variant(original: str, variant: str, *, original_answer: str | None = None, answer: str | None = None,
                  max_rouge_l: float | None = None, others: tuple[str, ...] = ()) -> VariantCheck:
    """Validate a variant text against the original text (and answers when given).

    Rejects: empty text; text identical to the original (up to case and spaces) or to an already
    accepted variant (`others`); a changed multiset of numeric values (the reason lists what is missing
    and what is extra); an answer not equivalent to the original answer; ROUGE-L above `max_rouge_l`.
    """
    if not variant or not variant.strip():
        return VariantCheck(False, "empty variant", 0.0, 0.0)
    rouge_l, bleu = similarity(original, variant)
    if _norm(variant) == _norm(original):
        return VariantCheck(False, "identical to the original", rouge_l, bleu)
    if any(_norm(variant) == _norm(o) for o in others):
        return VariantCheck(False, "duplicate of another variant", rouge_l, bleu)
    want, got = numeric_values(original), numeric_values(variant)
    if want != got:
        missing, extra = want - got, got - want
        parts = ([f"missing {_fmt(missing)}"] if missing else []) + ([f"extra {_fmt(extra)}"] if extra else [])
        return VariantCheck(False, "numbers changed: " + "; ".join(parts), rouge_l, bleu)
    if original_answer is not None and answer is not None and not answers_equal(answer, original_answer):
        return VariantCheck(False, f"answer changed: {answer!r} != {original_answer!r}", rouge_l, bleu)
    if max_rouge_l is not None and rouge_l > max_rouge_l:
        return VariantCheck(False, f"too close to the original (ROUGE-L {rouge_l:.3f} > {max_rouge_l})", rouge_l, bleu)
    return VariantCheck(True, None, rouge_l, bleu)
