"""Exact isomorphic perturbation of GSM8K items, re-executing the solution's own arithmetic.

A GSM8K solution writes its steps as calculator annotations (``16 - 3 - 4 = <<16-3-4=9>>9``) and
sometimes as plain equations (``99 + 5 = $104``). They form the item's computation chain. This module

1. parses every step into an expression over exact `Fraction` literals; an annotation that does not
   evaluate to its stated result rejects the item with that reason;
2. reads the numbers written in the question (digits, "1,000", "$1.50", "25%", "three", ...) and finds
   every reading of every literal of the chain: a question number (a percentage also as p/100, 1-p/100,
   ...), the result of an earlier step, or a constant (0, 1, 2, a unit the text names such as 60
   minutes or 7 days, a fraction word such as "half"). Equal question numbers are one variable: they
   get the same new value, so the chain stays right whichever occurrence the author meant;
3. keeps all readings of a literal equal. Where they could diverge (a literal equals a question number
   *and* an earlier result), the equality becomes a constraint between the variables, solved with sympy
   for one of them, which is then computed from the others; where that is impossible the variables are
   left unchanged. Unit constants named in the text, ordinals, fractions, times, years, 0 and 1 are
   never perturbed;
4. draws new values for the question numbers that feed the chain: each is the old value times a
   log-symmetric factor (as likely down as up, so the references are not systematically larger than a
   benchmark whose numbers skew small), round numbers stay round and the others off the multiples of
   10, integers stay integers and decimals stay decimals, percentages in (0, 100], and no new value
   repeats a number of the question (equal numbers stay the only equal ones); re-executes the chain and
   validates: every whole intermediate stays whole, signs are kept, decimals stay short, every reading
   of every literal still agrees, the final answer changes but keeps its sign and number of digits and
   never becomes 0, 1, 10, 100 or 1000, and the rewritten question contains exactly the new numbers
   and no impossible calendar or clock quantity ("30 hours a day", `scan_impossible_quantities`);
5. rewrites the question and the worked solution (the steps, the numbers of the prose around them; a
   whole number prints without ".0", "a"/"an" before a rewritten number agrees with it) and checks
   that every rewritten step evaluates to its stated result.

Matching what a clean model responds to (issue 17; measured by `zcp.benchmarks.references.shift.feature_shift`).
The test needs each original to be exchangeable with its draws, and a clean model's zero-CoT scores
respond to the answer's leading digit (the first answer token of a digit-split tokenizer), special
values, round numbers, an answer that repeats or starts like a number of the question, and the
question's round numbers. So:

- **The answer's class** (`keeps_answer_class`): a reference answer keeps the original's first
  significant digit, sign, number of digits, roundness (the largest power of ten dividing it: 250 stays
  a multiple of 10 but not of 100, 1500 of 100 but not of 1000, 48 off the multiples of 10) and
  whole-ness, and is never a special value (0, 1, 10, 100, 1000). Within the class (`answer_band`:
  48 -> 41..49, 250 -> 210..290) the m draws target bins of the answer's log-change in
  the proportions a symmetric log-step restricted to the band gives (`draw_targets` with bounds), so
  references are about as often larger as smaller: the former digit-range difficulty targeting, kept
  and narrowed to the band (the leading-digit rule subsumes the digit count it kept).
- **Answers whose leading digit cannot be kept**: a one-digit answer (the digit is the answer, which
  must change), an answer with one significant digit (20, 90, 300, 5000: the only number that round
  with that digit and as many digits is itself), and an
  answer whose program gives no valid draw its leading digit (35 = 5 x 7 reaches 28 and 42, never 3x)
  keep everything else and take a new leading digit. How many of an item's draws go to each digit is a
  benchmark-level transport (`lead_transport`: a linear program over the digits each item's valid draws
  reach, other than its own), so that the references' leading-digit distribution, item-averaged as the
  test averages them, equals the originals'; near digits first. Where the draws cannot balance a digit,
  items with it are left out under ``special_cases="drop"`` (kept, unbalanced, under "keep").
- **The question's structure**: equal question numbers are one variable and move together, and no new
  equality appears; the builder takes only draws with as many round question numbers as the original
  (`structure="require"`); draws whose answer equals / starts like a question number as the original's
  does come first (`_pick`), and what the items cannot keep of these two is balanced over the benchmark
  (`balance_structure`, swapping draws of the same target).
- **Special cases** (`special_case_reasons`, and what the draws show): an answer of 0, 1, 10, 100 or
  1000, equal question numbers that fix the answer, an item no valid draw keeps the answer's form for
  (a round answer with no round alternative), or keeps it together with the question's round numbers.
  The builder (`build_gsm8k_references`, `reference.special_cases`) drops them with the reason or keeps
  them with flagged draws.

The executed chain is the source of truth for the new answer. An item is rejected, with its reason,
whenever the chain cannot be trusted: a literal no reading explains, a value computed in prose without
an annotation (``= 7`` in the text), an intermediate result no later step uses (a hidden comparison or
step), a final answer no step computes. Nothing is dropped silently.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from zcp.benchmarks.references.matching import (  # re-exported: the GSM8K API and its tests use these names
    ANSWER_SPREAD,
    SPREAD,
    answer_bin,
    answer_digits,
    draw_targets,
    fallback_bins,
    p_larger,  # noqa: F401 - re-exported for callers of zcp.benchmarks.references.gsm8k
    tens,
)
from zcp.benchmarks.references.matching import round_quantum as _quantum
from zcp.benchmarks.references.matching import roundness as _roundness
from zcp.benchmarks.references.shift import SPECIAL_VALUES
from zcp.core.io import read_jsonl, stable_hash
from zcp.core.items import Item
from zcp.errors import DataError

__all__ = [
    "LEAD_TARGETS",
    "Chain",
    "DrawPool",
    "PerturbResult",
    "Step",
    "answer_band",
    "answer_digits",
    "article_for",
    "balance_structure",
    "build_gsm8k_references",
    "calendar_limit",
    "choose_draws",
    "collect_draws",
    "extract_quantities",
    "flexible_class",
    "format_number",
    "gsm8k_item",
    "is_round",
    "is_special",
    "keeps_answer_class",
    "keeps_answer_form",
    "lead_transport",
    "parse_chain",
    "perturb_gsm8k",
    "perturb_gsm8k_file",
    "scan_impossible_quantities",
    "significant_lead",
    "special_case_reasons",
]

# ------------------------------------------------------------------------------------------- numbers

# A drawn question number is its old value times a log-uniform factor in [1/SPREAD, SPREAD] (later in the
# attempt budget up to MAX_SPREAD); a value solved from the others must also stay within MAX_SPREAD.
# (SPREAD and ANSWER_SPREAD, the difficulty-matching bins and `_roundness` live in zcp.benchmarks.references.matching,
# shared with the word-problem and ArithMark references.)
MAX_SPREAD = 3.0

NUMBER_WORDS: dict[str, int] = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30,
    "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
}
_WORD_OF: dict[int, str] = {v: k for k, v in NUMBER_WORDS.items()}
_UNITS = "one|two|three|four|five|six|seven|eight|nine"
_WORD_RE = re.compile(
    r"\b(" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r")(?:-(" + _UNITS + r"))?\b",
    re.IGNORECASE)
_DIGIT_RE = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+")

# Words that stand for a fixed number: the values they explain are never perturbed (the word stays).
SPECIAL_WORDS: dict[str, tuple[Fraction, ...]] = {
    "twice": (Fraction(2),), "double": (Fraction(2),), "doubles": (Fraction(2),), "doubled": (Fraction(2),),
    "half": (Fraction(2), Fraction(1, 2)), "halves": (Fraction(2), Fraction(1, 2)),
    "halfway": (Fraction(2), Fraction(1, 2)), "pair": (Fraction(2),), "pairs": (Fraction(2),),
    "couple": (Fraction(2),), "twins": (Fraction(2),), "second": (Fraction(2),),
    "triple": (Fraction(3),), "tripled": (Fraction(3),), "thrice": (Fraction(3),),
    "third": (Fraction(3), Fraction(1, 3)), "thirds": (Fraction(3), Fraction(1, 3)),
    "triplets": (Fraction(3),), "quadruple": (Fraction(4),),
    "quarter": (Fraction(4), Fraction(1, 4), Fraction(25)), "quarters": (Fraction(4), Fraction(1, 4), Fraction(25)),
    "fourth": (Fraction(4), Fraction(1, 4)), "fifth": (Fraction(5), Fraction(1, 5)),
    "sixth": (Fraction(6),), "tenth": (Fraction(10),), "dozen": (Fraction(12),), "dozens": (Fraction(12),),
    "score": (Fraction(20),), "nickel": (Fraction(5),), "nickels": (Fraction(5),), "dime": (Fraction(10),),
    "dimes": (Fraction(10),), "century": (Fraction(100),), "decade": (Fraction(10),),
    "decades": (Fraction(10),),
}

# Unit constants: a question number equal to one of these values is left unchanged when the text
# (question or solution) names the matching units, because the chain may use the value as the unit
# conversion rather than as the quantity (e.g. "12 eggs a month ... per year" uses 12 twice).
# "a+b": both words must appear (4 weeks a month needs "week" and "month").
UNIT_CONSTANTS: dict[int, tuple[str, ...]] = {
    2: ("half", "twice", "double", "pair", "couple", "both", "pint+quart", "weekend", "saturday+sunday"),
    3: ("third", "triple", "thrice", "feet+yard", "foot+yard"),
    4: ("quarter", "fourth", "week+month", "quart+gallon", "season+year"),
    5: ("fifth", "nickel", "weekday", "workday", "work day", "school day", "monday+friday"),
    6: ("sixth", "half dozen", "half-dozen"),
    7: ("week",),
    8: ("pint+gallon", "ounce+cup"),
    10: ("tenth", "dime", "decade", "cm+mm", "centimeter+millimeter"),
    12: ("dozen", "month+year", "inch+foot", "inch+feet", "annual"),
    16: ("ounce+pound", "cup+gallon"),
    20: ("score",),
    24: ("hour+day",),
    25: ("quarter",),
    28: ("february",),
    30: ("month+day", "minute+hour", "half+hour", "half-hour"),
    31: ("month+day",),
    36: ("inch+yard",),
    50: ("half dollar", "cent"),
    52: ("week+year",),
    60: ("minute+hour", "seconds+minute"),
    100: ("percent", "%", "cent", "century", "meter+centimeter", "meter+cm"),
    360: ("degree",),
    365: ("day+year",),
    366: ("day+year",),
    1000: ("thousand", "kilo", "milli", "kg", "km", "ml", "mg"),
    1440: ("minute+day",),
    3600: ("seconds+hour",),
    5280: ("feet+mile", "foot+mile"),
}
# Fractions an unexplained chain literal may be, with the words that must appear in the text for it.
IMPLICIT_FRACTIONS: dict[Fraction, tuple[str, ...]] = {
    Fraction(1, 2): ("half", "halves", "twice", "double"), Fraction(1, 3): ("third",),
    Fraction(2, 3): ("third",), Fraction(1, 4): ("quarter", "fourth"), Fraction(3, 4): ("quarter", "fourth"),
    Fraction(1, 5): ("fifth",), Fraction(1, 10): ("tenth", "percent", "%", "dime"),
    Fraction(1, 100): ("percent", "%", "cent"), Fraction(1, 1000): ("kilo", "milli", "thousand"),
    Fraction(1, 60): ("minute", "hour", "seconds"), Fraction(3, 2): ("half",), Fraction(1, 12): ("month", "year", "inch", "foot", "dozen"),
}


def _unit_constant(value: Fraction, context: str) -> bool:
    """Whether the value is a unit conversion (or fraction word) whose units the text names."""
    if value.denominator == 1 and int(value) in UNIT_CONSTANTS:
        return _mentions(context, UNIT_CONSTANTS[int(value)])
    return value in IMPLICIT_FRACTIONS and _mentions(context, IMPLICIT_FRACTIONS[value])


def _implicit_constant(value: Fraction, context: str) -> bool:
    """Whether a literal found nowhere in the question may be an implicit constant."""
    # 2 is by far the commonest implicit factor (both, pairs, back and forth, the mean of two, two
    # sides); a 2 computed in prose rather than given is caught by the '= 2' check
    return value in (0, 1, 2) or _unit_constant(value, context)


def _mentions(text: str, words: Sequence[str]) -> bool:
    """Whether the text names any of the words (a word starts at a word boundary; "a+b" needs both)."""
    low = text.lower()

    def has(w: str) -> bool:
        return (w in low) if not w.isalpha() else re.search(r"\b" + w, low) is not None

    return any(all(has(part) for part in w.split("+")) for w in words)


def _parse_decimal(text: str) -> Fraction:
    return Fraction(text.replace(",", ""))


def format_number(value: Fraction, decimals: int = 0, commas: bool = False) -> str:
    """Exact decimal text of a terminating Fraction, at least `decimals` places; raises if it does not terminate."""
    sign = "-" if value < 0 else ""
    v = abs(value)
    places = 0
    while (v * 10**places).denominator != 1:
        places += 1
        if places > 12:
            raise ValueError(f"{value} has no short decimal expansion")
    places = max(places, decimals)
    scaled = int(v * 10**places)
    whole, frac = divmod(scaled, 10**places)
    whole_text = f"{whole:,}" if commas else str(whole)
    return sign + whole_text + (f".{frac:0{places}d}" if places else "")


def _decimal_places(value: Fraction) -> int | None:
    places = 0
    while (value * 10**places).denominator != 1:
        places += 1
        if places > 12:
            return None
    return places


@dataclass
class Quantity:
    """One number written in a text: its span, value and how it is written."""

    start: int
    end: int
    text: str
    value: Fraction
    kind: str  # "digit" | "word"
    decimals: int = 0
    commas: bool = False
    percent: bool = False
    money: bool = False
    frozen: str | None = None  # why this occurrence must not change (ordinal, fraction, time, ...)

    def render(self, new: Fraction) -> str:
        """The new value written the way this occurrence was written."""
        if self.kind == "word" and new.denominator == 1 and int(new) in _WORD_OF:
            word = _WORD_OF[int(new)]
            return word.capitalize() if self.text[:1].isupper() else word
        if self.kind == "word" and new.denominator == 1 and 20 < new < 100:
            tens, unit = divmod(int(new), 10)
            word = _WORD_OF[tens * 10] + ("-" + _WORD_OF[unit] if unit else "")
            return word.capitalize() if self.text[:1].isupper() else word
        return _render_token(self.text, new)


def _render_places(old_text: str, new: Fraction) -> int:
    """Decimal places to print a new value with, in the style of the number it replaces.

    The old number's places are kept ("$1.50" -> "$2.25"), except that a whole new value replacing a
    number with a fractional part prints without them (10.5 -> 16, never "16.0"); a whole number
    that was written with zeros ("$2.00") keeps them ("$3.00").
    """
    decimals = len(old_text.split(".")[1]) if "." in old_text else 0
    if decimals and new.denominator == 1 and _parse_decimal(old_text).denominator != 1:
        return 0
    return decimals


def _render_token(old_text: str, new: Fraction) -> str:
    """The new value written the way a digit number `old_text` was written (places, commas, a bare '.5')."""
    text = format_number(new, _render_places(old_text, new), "," in old_text and abs(new) >= 1000)
    if old_text.startswith(".") and text.startswith("0."):
        text = text[1:]
    return text


def article_for(value: Fraction) -> str:
    """'a' or 'an' before a number read aloud: 'an' for 8, 11, 18, 80-89, 800-899, 8,000, 11,000, 18,500 ..."""
    whole = str(int(abs(value)))
    lead = whole[: len(whole) % 3 or 3]  # the group read first: "eleven thousand", "eight hundred"
    return "an" if lead.startswith("8") or lead in ("11", "18") else "a"


_ARTICLE_RE = re.compile(r"(?<![A-Za-z'’])(an?|An?|AN)(\s+\$?\s?)\Z")


def _substitute(text: str, repl: Sequence[tuple[int, int, str, Fraction, Fraction]]) -> str:
    """Replace spans (start, end, new text, old value, new value), fixing an article right before each.

    "an 8-hour shift" -> "a 5-hour shift", "a 7-hour" -> "an 8-hour" ("a $8" -> "an $11"); an article
    that did not agree with the old number (the author's own style) is left as it was.
    """
    for s, e, r, old, new in sorted(repl, key=lambda t: t[0], reverse=True):
        text = text[:s] + r + text[e:]
        m = _ARTICLE_RE.search(text, max(0, s - 8), s)
        if m and m.group(1).lower() == article_for(old) and article_for(old) != article_for(new):
            art = article_for(new)
            word = art.capitalize() if m.group(1)[0].isupper() else art
            if m.group(1).isupper() and len(m.group(1)) > 1:
                word = art.upper()
            text = text[:m.start(1)] + word + text[m.end(1):]
    return text


def extract_quantities(text: str) -> list[Quantity]:
    """Numbers written in `text` (digits with commas/decimals, $, %, cardinal words), in order.

    Occurrences that are not plain quantities (ordinals "5th", fractions "1/4", times "3:30", ranges
    "3-4", words before "hundred") are returned with `frozen` set to the reason.
    """
    out: list[Quantity] = []
    for m in _DIGIT_RE.finditer(text):
        s, e = m.start(), m.end()
        raw = m.group(0)
        before, after = text[s - 1:s] if s else "", text[e:e + 1]
        if before.isalnum() or before == "_":
            continue  # part of a word or identifier ("A4", "x2")
        frozen = None
        if after.isalpha():
            frozen = "attached to a word (ordinal or unit)"
        elif (after == "/" and text[e + 1:e + 2].isdigit()) or (before == "/" and text[s - 2:s - 1].isdigit()):
            frozen = "part of a fraction"
        elif (after == ":" and text[e + 1:e + 2].isdigit()) or (before == ":" and text[s - 2:s - 1].isdigit()):
            frozen = "part of a time or ratio"
        elif (after == "-" and text[e + 1:e + 2].isdigit()) or (before == "-" and text[s - 2:s - 1].isdigit()):
            frozen = "part of a range"
        elif before == "-" and s >= 2 and text[s - 2].isalpha():
            frozen = "part of a compound word"
        elif before == "^" or after == "^":
            frozen = "part of a power"
        elif re.fullmatch(r"1[89]\d\d|20\d\d", raw) and before != "$":
            frozen = "a year"
        tail = text[e:e + 9].lower()
        percent = bool(re.match(r"\s?(%|percent)", tail))
        money = before == "$" or (s >= 2 and text[s - 2:s] == "$ ")
        decimals = len(raw.split(".")[1]) if "." in raw else 0
        out.append(Quantity(s, e, raw, _parse_decimal(raw), "digit", decimals, "," in raw, percent, money, frozen))
    for m in _WORD_RE.finditer(text):
        value = NUMBER_WORDS[m.group(1).lower()] + (NUMBER_WORDS[m.group(2).lower()] if m.group(2) else 0)
        tail = text[m.end():m.end() + 12].lower()
        frozen = None
        if re.match(r"[\s-]+(hundred|thousand|million|billion)", tail):
            frozen = "multiplied by a scale word"
        elif re.match(r"[\s-]*(of (us|them|those|these|the)|another|other)\b", tail) and value == 1:
            frozen = "pronoun use"
        percent = bool(re.match(r"\s?(%|percent)", tail))
        out.append(Quantity(m.start(), m.end(), m.group(0), Fraction(value), "word", percent=percent, frozen=frozen))
    out.sort(key=lambda q: q.start)
    return out


# ---------------------------------------------------------------------------- calendar and clock

# Lengths in seconds: (shortest, longest). A count of `unit` in one `period` can be at most
# longest(period) / shortest(unit) (rounded down), except where a partial unit is still a unit.
_TIME_LENGTH: dict[str, tuple[int, int]] = {
    "second": (1, 1), "minute": (60, 60), "hour": (3600, 3600), "day": (86400, 86400),
    "week": (7 * 86400, 7 * 86400), "fortnight": (14 * 86400, 14 * 86400),
    "month": (28 * 86400, 31 * 86400), "year": (365 * 86400, 366 * 86400),
}
_COUNT_OVERRIDES: dict[tuple[str, str], int] = {("month", "year"): 12, ("week", "month"): 5, ("week", "year"): 53}
_MONTH_DAYS: dict[str, int] = {
    "january": 31, "february": 29, "march": 31, "april": 30, "may": 31, "june": 30, "july": 31,
    "august": 31, "september": 30, "october": 31, "november": 30, "december": 31,
}
_UNIT_WORDS: dict[str, str] = {
    "second": "second", "seconds": "second", "sec": "second", "secs": "second",
    "minute": "minute", "minutes": "minute", "min": "minute", "mins": "minute",
    "hour": "hour", "hours": "hour", "hr": "hour", "hrs": "hour",
    "day": "day", "days": "day", "night": "day", "nights": "day",
    "week": "week", "weeks": "week", "fortnight": "fortnight", "fortnights": "fortnight",
    "month": "month", "months": "month",
}
_PERIOD_WORDS: dict[str, str] = {
    "minute": "minute", "hour": "hour", "day": "day", "night": "day", "workday": "day", "weekday": "day",
    "week": "week", "workweek": "week", "fortnight": "fortnight", "month": "month", "year": "year",
    "daily": "day", "nightly": "day", "weekly": "week", "monthly": "month", "yearly": "year",
    "annually": "year", "hourly": "hour",
}
_UNIT_ALT = "|".join(sorted(_UNIT_WORDS, key=len, reverse=True))
_PERIOD_ALT = "minute|hour|day|night|workday|weekday|week|workweek|fortnight|month|year"
_STOP = ("a|an|per|each|every|in|of|out|for|to|and|or|than|that|which|ago|later|before|after|from|with|on|at|"
         "by|is|are|was|were|more|less|fewer|longer|shorter|left|until|since|then|so|but|if|when")
_MID = rf"(?:\s+(?!(?:{_STOP})\b)[a-z]+(?:\s+of)?){{0,3}}?"
_PER = r"(?:\s+(?:a|an|per|each|every|in\s+(?:a|an|one|each|every|the|a\s+single)|of\s+(?:a|an|each|every|the)|" \
       r"out\s+of\s+(?:a|an|the|each|every))\s+|\s*/\s*)"
_RATE_RE = re.compile(rf"\s*(?P<unit>{_UNIT_ALT})\b(?:\s+of(?=\s))?{_MID}{_PER}(?P<period>{_PERIOD_ALT})\b",
                      re.IGNORECASE)
_ADVERB_RE = re.compile(rf"\s*(?P<unit>{_UNIT_ALT})\b{_MID}\s+(?P<period>daily|nightly|weekly|monthly|yearly|"
                        r"annually|hourly)\b", re.IGNORECASE)
_COMPOUND_RE = re.compile(r"\s*-\s*(?P<unit>second|minute|hour|day|week|month)s?(?:\s*-\s*|\s+)"
                          r"(?:(?:work|school|business|working)\s*-?\s*)?(?P<period>day|week|month|year|"
                          r"workday|workweek)\b", re.IGNORECASE)
_MONTH_RE = re.compile(r"\s*days?\s+(?:in|of)\s+(?:the\s+month\s+of\s+)?(?P<month>" + "|".join(_MONTH_DAYS) + r")\b",
                       re.IGNORECASE)
_CLOCK_RE = re.compile(r"\s*(?:a\.m\.|p\.m\.|am|pm|o['’]clock)(?![a-z])", re.IGNORECASE)
_HAS_RE = re.compile(rf"\b(?:a|an|one|each|every|the)\s+(?P<period>{_PERIOD_ALT})\s+(?:has|have|had|contains|"
                     r"lasts|is|consists\s+of)\s+\Z", re.IGNORECASE)
_HAS_UNIT_RE = re.compile(rf"\s*(?P<unit>{_UNIT_ALT})\b", re.IGNORECASE)


def calendar_limit(unit: str, period: str) -> int | None:
    """The most `unit`s (second ... month) one `period` (minute ... year) can hold; None if unit >= period."""
    u, p = _UNIT_WORDS.get(unit.lower(), unit.lower()), _PERIOD_WORDS.get(period.lower(), period.lower())
    if (u, p) in _COUNT_OVERRIDES:
        return _COUNT_OVERRIDES[(u, p)]
    if u not in _TIME_LENGTH or p not in _TIME_LENGTH or _TIME_LENGTH[u][1] >= _TIME_LENGTH[p][0]:
        return None
    return _TIME_LENGTH[p][1] // _TIME_LENGTH[u][0]


def scan_impossible_quantities(text: str) -> list[str]:
    """Calendar and clock quantities no calendar or clock allows, as the text phrases them.

    "30 hours a day", "90 days a month", "8 days a week", "13 months a year", "70 minutes an hour",
    "a 30-hour day", "31 days in April", "a week has 9 days", "14 pm": any number of time units per
    period above the period's length (hours per day <= 24, days per week <= 7, days per month <= 31,
    weeks per month <= 5, months per year <= 12, minutes per hour <= 60, hours per week <= 168, days
    per year <= 366, ...), and clock hours outside 1-12 before am/pm/o'clock. Numbers are read as
    `extract_quantities` reads them (digits or words); returns the offending phrases in text order.
    """
    found: list[str] = []
    for q in extract_quantities(text):
        tail = text[q.end:q.end + 120]
        value = q.value
        for rx in (_RATE_RE, _ADVERB_RE, _COMPOUND_RE):
            m = rx.match(tail)
            if m:
                limit = calendar_limit(m.group("unit"), m.group("period"))
                if limit is not None and value > limit:
                    found.append(text[q.start:q.end + m.end()])
                break
        m = _MONTH_RE.match(tail)
        if m and value > _MONTH_DAYS[m.group("month").lower()]:
            found.append(text[q.start:q.end + m.end()])
        m = _CLOCK_RE.match(tail) if text[q.start - 1:q.start] != ":" else None  # "2:38 am": minutes
        if m and not (1 <= value <= 12 or (value < 13 and value.denominator != 1)):
            found.append(text[q.start:q.end + m.end()])
        before = _HAS_RE.search(text[max(0, q.start - 40):q.start])
        unit = _HAS_UNIT_RE.match(tail) if before else None
        if before and unit:
            limit = calendar_limit(unit.group("unit"), before.group("period"))
            if limit is not None and value > limit:
                found.append(text[q.start - len(before.group(0)):q.end + unit.end()])
    return found


# -------------------------------------------------------------------------------------------- chain

_ANN_RE = re.compile(r"<<([^<>]*)>>")
_LIT_RE = re.compile(r"\d+(?:\.\d*)?|\.\d+")
_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
}
# A plain-text equation outside the annotations, e.g. "so the boots cost 99 + 5 = $104" or
# "7 puppies / 20 puppies * 100% = 35%": numbers (with $, %, up to two unit words), operators, parentheses.
_VNUM = r"\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?|\$?\s?\.\d+%?"
_VUNIT = r"(?:/[A-Za-z]+)?(?:\s+(?!(?:minus|plus|times|divided|multiplied|equals)\b)[A-Za-z]+(?:/[A-Za-z]+)?){0,2}"
_VTERM = rf"(?:\(\s*)*(?:{_VNUM}){_VUNIT}(?:\s*\))*"
_VOP = r"(?:\s*(?:[-+*/×÷−–x]|minus|plus|times|divided by|multiplied by)\s*|(?=\())"
_VEQ = r"\s*(?:=|equals)\s*"
_VISIBLE_RE = re.compile(
    rf"(?<![\w.,/$])(?P<lhs>{_VTERM}(?:{_VOP}{_VTERM})+){_VEQ}\$?\s?"
    rf"(?P<rhs>(?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?|\.\d+)(?![\d/]|\.\d|,\d)")
_VISIBLE_OPS = {"×": "*", "x": "*", "÷": "/", "−": "-", "–": "-"}


@dataclass
class Step:
    """One computation step: a calculator annotation ``<<expr=result>>`` or a plain-text ``a op b = c``.

    `spans` locate the literals and `result_spans` the stated result, as absolute offsets in the
    solution; `start`/`end` delimit the whole step there.
    """

    expr: str
    tree: ast.expr  # parsed expression over names _0, _1, ... (one per literal)
    literals: list[Fraction]
    spans: list[tuple[int, int]]
    result: Fraction
    result_spans: list[tuple[int, int]]
    start: int
    end: int
    visible: bool = False

    def evaluate(self, values: Sequence[Any]) -> Any:
        """Value of the expression with the given literal values (exact with Fractions, symbolic with sympy)."""
        return _eval(self.tree, values)


def _eval(node: ast.expr, values: Sequence[Any]) -> Any:
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval(node.left, values), _eval(node.right, values))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
        return _eval(node.operand, values)
    if isinstance(node, ast.Name) and node.id.startswith("_"):
        return values[int(node.id[1:])]
    raise ValueError(f"unsupported syntax {type(node).__name__}")


@dataclass
class Chain:
    """The computation chain of a GSM8K solution: its steps in text order and the final answer."""

    steps: list[Step]
    answer: Fraction
    final_step: int  # index of the (last) step whose result is the final answer

    def execute(self, literal_values: Sequence[Sequence[Fraction]]) -> list[Fraction]:
        """Results of every step given each step's literal values (ZeroDivisionError propagates)."""
        return [st.evaluate(vals) for st, vals in zip(self.steps, literal_values, strict=True)]


def _annotation_steps(solution: str) -> list[Step]:
    steps = []
    for m in _ANN_RE.finditer(solution):
        body = m.group(1)
        if body.count("=") != 1:
            raise ValueError(f"annotation <<{body}>> does not have the form expression=result")
        lhs, rhs = body.split("=")
        if "," in lhs:
            raise ValueError(f"annotation <<{body}>> has a comma inside the expression")
        base = m.start(1)
        lits: list[Fraction] = []
        spans: list[tuple[int, int]] = []

        def slot(mm: re.Match[str], lits: list[Fraction] = lits, spans: list[tuple[int, int]] = spans,
                 base: int = base) -> str:
            lits.append(_parse_decimal(mm.group(0).rstrip(".") or "0"))
            spans.append((base + mm.start(), base + mm.end()))
            return f" _{len(lits) - 1} "

        code = _LIT_RE.sub(slot, lhs)
        try:
            tree = ast.parse(code.strip(), mode="eval").body
            value = _eval(tree, lits)
        except (SyntaxError, ValueError, ZeroDivisionError) as e:
            raise ValueError(f"annotation <<{body}>> does not evaluate ({e})") from e
        try:
            stated = _parse_decimal(rhs.strip())
        except (ValueError, ZeroDivisionError) as e:
            raise ValueError(f"annotation <<{body}>> has a non-numeric result") from e
        if value != stated:
            rounded = abs(value - stated) < Fraction(1, 100) * max(1, abs(stated))
            raise ValueError(f"annotation <<{body}>> evaluates to {float(value):g}, not {rhs.strip()}"
                             + (" (a rounded result)" if rounded else ""))
        rs = m.start(1) + len(lhs) + 1 + (len(rhs) - len(rhs.lstrip()))
        step = Step(lhs, tree, lits, spans, value, [(rs, rs + len(rhs.strip()))], m.start(), m.end())
        if len(lits) == 1 and isinstance(tree, ast.Name):
            step = _merge_restatement(solution, step)
        steps.append(step)
    return steps


_VISIBLE_LHS_RE = re.compile(rf"(?P<lhs>{_VTERM}(?:{_VOP}{_VTERM})+){_VEQ}\$?\s?\Z")


def _merge_restatement(solution: str, step: Step) -> Step:
    """``7.5 / .5 = <<15=15>>15``: the annotation only restates a value computed in the prose before it.

    The prose expression becomes the step (its literals are bound like any other), and both numbers
    of the annotation are its result. A prose expression that does not give the value is an error.
    """
    lo = max(0, step.start - 200)
    m = _VISIBLE_LHS_RE.search(solution[lo:step.start])
    if m is None:
        return step
    lhs, base = m.group("lhs"), lo + m.start("lhs")
    parsed = _parse_visible(lhs, base)
    if parsed is None or parsed[0] != step.result:
        raise ValueError(f"'{lhs.strip()} = <<{step.expr}=...>>' does not evaluate to the annotated value")
    value, tree, lits, spans = parsed
    return Step(lhs, tree, lits, spans, value, [*step.spans, *step.result_spans], base, step.end)


def _parse_visible(lhs: str, base: int) -> tuple[Fraction, ast.expr, list[Fraction], list[tuple[int, int]]] | None:
    """Parse a prose arithmetic expression (absolute offset `base`); None if it is not one."""
    lits: list[Fraction] = []
    spans: list[tuple[int, int]] = []
    code, pos = [], 0
    for nm in _DIGIT_RE.finditer(lhs):
        code.append(_visible_ops(lhs[pos:nm.start()]))
        lits.append(_parse_decimal(nm.group(0)))
        spans.append((base + nm.start(), base + nm.end()))
        code.append(f" _{len(lits) - 1} ")
        pos = nm.end()
    code.append(_visible_ops(lhs[pos:]))
    text = re.sub(r"(_\d+|\))\s*(?=\()", r"\1*", "".join(code))  # implicit product: 2(40+9)
    text = re.sub(r"\)\s*(?=_\d)", ")*", text)
    try:
        tree = ast.parse(text.strip(), mode="eval").body
        return _eval(tree, lits), tree, lits, spans
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None


def _visible_ops(gap: str) -> str:
    """The operators of the text between two numbers of a plain-text equation (unit words, $ and % dropped)."""
    gap = re.sub(r"/\s*[A-Za-z]+", " ", gap)  # "miles/day": a unit, not a division
    for word, op in (("divided by", "/"), ("multiplied by", "*"), ("times", "*"), ("minus", "-"), ("plus", "+")):
        gap = re.sub(rf"\b{word}\b", op, gap)
    gap = re.sub(r"[A-Za-wyz][A-Za-z]*|x[A-Za-z]+", " ", gap).replace("$", "").replace("%", "")
    return "".join(_VISIBLE_OPS.get(ch, ch) for ch in gap)


def _visible_steps(solution: str, taken: list[tuple[int, int]]) -> list[Step]:
    steps = []
    for m in _VISIBLE_RE.finditer(solution):
        if any(m.start() < e and s < m.end() for s, e in taken):
            continue
        parsed = _parse_visible(m.group("lhs"), m.start("lhs"))
        if parsed is None:
            continue
        value, tree, lits, spans = parsed
        lhs = m.group("lhs")
        if value != _parse_decimal(m.group("rhs")):
            continue  # not an equation after all (e.g. part of a longer expression)
        steps.append(Step(lhs, tree, lits, spans, value, [m.span("rhs")], m.start(), m.end(), visible=True))
    return steps


def parse_chain(solution: str, answer: str) -> Chain:
    """Parse a solution's calculator annotations and plain-text equations into a `Chain`.

    Raises ValueError with the reason (an annotation that does not evaluate to its stated result, no
    computation at all, a final answer that no step computes).
    """
    steps = _annotation_steps(solution)
    steps += _visible_steps(solution, [(s.start, s.end) for s in steps])
    steps.sort(key=lambda st: st.start)
    if not steps:
        raise ValueError("the solution has no calculator annotations or equations")
    try:
        final = _parse_decimal(answer.strip())
    except (ValueError, ZeroDivisionError) as e:
        raise ValueError(f"final answer {answer!r} is not a number") from e
    finals = [i for i, st in enumerate(steps) if st.result == final]
    if not finals:
        raise ValueError(f"final answer {answer} is not the result of any step of the solution")
    return Chain(steps, final, finals[-1])


def _residual_text(solution: str, chain: Chain) -> str:
    """The solution with every step (and the result written after an annotation) replaced by '§'."""
    chars = list(solution)
    for st in chain.steps:
        end = st.end
        if not st.visible:
            m = re.match(r"\s*\$?\s?[\d,]*\.?\d*", solution[end:])
            end += m.end() if m else 0
        for i in range(st.start, end):
            chars[i] = "§" if i == st.start else ""
    return "".join(chars)


# ------------------------------------------------------------------------------------------ binding

# A source of a literal: ("c", value) constant; ("q", var, form) question variable; ("r", step) result.
Source = tuple
_PERCENT_FORMS: dict[str, Callable[[Any], Any]] = {
    "x": lambda x: x,
    "x/100": lambda x: x / 100,
    "1-x/100": lambda x: 1 - x / 100,
    "1+x/100": lambda x: 1 + x / 100,
    "100-x": lambda x: 100 - x,
    "100+x": lambda x: 100 + x,
}
_PLAIN_FORMS = {"x": _PERCENT_FORMS["x"]}
_CENT_FORMS = {"x": _PERCENT_FORMS["x"], "x/100": _PERCENT_FORMS["x/100"]}


@dataclass
class Variable:
    """A question value (all its occurrences: they change together) that may be perturbed."""

    value: Fraction
    occurrences: list[Quantity]
    percent: bool
    forms: dict[str, Callable[[Any], Any]]

    @property
    def decimals(self) -> int:
        """Most decimal places any occurrence is written with ($1.50 -> 2)."""
        return max((q.decimals for q in self.occurrences), default=0)

    def draw(self, rng: random.Random, keep_roundness: bool = True, spread: float = SPREAD,
             lean: int = 0) -> Fraction:
        """A new value near this one: the value times a log-uniform factor in [1/spread, spread].

        The factor is as likely to be below 1 as above it, so a draw goes down as often as up and
        keeps the value's order of magnitude (a benchmark's numbers skew small; a draw uniform over
        the digit range would make references systematically larger); `lean` +1 (-1) makes the factor
        above (below) 1 three times in four, for a draw aimed at a larger (smaller) answer. The result is rounded to the
        written decimals and must pass `admissible`; with `keep_roundness` a round number stays round at
        its new magnitude (100 -> 70 or 200, 15 -> 5 or 25), a whole multiple of 10 stays one (10 -> 20,
        never 7) and any other whole number stays off them (7 -> 12, never 10; 23 -> 31, never 30). Returns the old value when 20 tries fail.
        """
        scale = 10**self.decimals
        u = int(self.value * scale)
        g = _roundness(u) if keep_roundness else 1
        round_class, tenth = keep_roundness, 10 * scale  # "$10.00": a multiple of 10 in dollars
        log_s = math.log(spread)
        whole = self.value.denominator == 1
        top = 100 * scale if self.percent and self.value <= 100 else None
        for _ in range(20):
            step = rng.uniform(0.0, log_s)
            up = rng.random() < (0.75 if lean > 0 else 0.25 if lean < 0 else 0.5)
            x = u * math.exp(step if up else -step)
            q = _quantum(g, u, x) if g > 1 else 1
            k = max(1, math.floor(x / q + 0.5)) * q
            # the checks of `admissible`, on integers (this loop is the hot path of a reference build)
            if k == u or k < 2 or (k % scale == 0) != whole or (top is not None and k > top) \
                    or not u <= k * MAX_SPREAD or not k <= u * MAX_SPREAD:
                continue
            if round_class and (k % tenth == 0) != (u % tenth == 0):
                continue  # a multiple of 10 stays one (10 -> 20, never 7) and any other number stays off them
            return Fraction(k, scale)
        return self.value

    def admissible(self, new: Fraction, spread: float = MAX_SPREAD) -> bool:
        """Whether a new (drawn or solved) value keeps this variable's kind: the written decimals, whole
        stays whole and a fraction stays a fraction ("$1.50" never becomes "$2.00"), at least 2 in the
        last written place, within a factor `spread` of the old value, percentages in (0, 100]."""
        u = new * 10**self.decimals
        if u.denominator != 1 or u < 2 or (new.denominator == 1) != (self.value.denominator == 1):
            return False
        if self.percent and self.value <= 100 and new > 100:
            return False
        return float(self.value) <= float(new) * spread and float(new) <= float(self.value) * spread


@dataclass
class _Analysis:
    question: str
    chain: Chain
    quantities: list[Quantity]
    variables: list[Variable]
    candidates: list[list[list[Source]]]  # per step, per literal: every reading of the literal
    bindings: list[list[Source]]  # per step, per literal: the reading used
    free: list[int]  # variables drawn at random
    dependent: dict[int, Any]  # variables computed from the free ones (sympy expressions)
    symbols: list[Any]
    frozen_values: dict[str, str]  # value -> reason it stays (for the report)
    relations: list[tuple[Any, str, tuple[Any, ...]]] = field(default_factory=list)  # checked per draw
    compiled: dict[int, Any] | None = None
    used: set[int] = field(default_factory=set)  # variables some literal of the chain may stand for
    answer_vars: set[int] = field(default_factory=set)  # variables the symbolic answer depends on


def _analyse(item: Item, strict: bool = True) -> _Analysis:
    """Parse, bind and disambiguate; raises ValueError with the reason when the item cannot be used.

    `strict=False` returns the analysis even when nothing can be perturbed or the answer depends on no
    perturbable number (`special_case_reasons` inspects such items: x - x, x / x). The analysis (sympy
    work) is cached per item text: the builder asks for the special-case rules and then for the draws."""
    an = _analysis_of(item.id, item.question, item.solution, item.answer)
    if strict and not an.free:
        raise ValueError("no question number that feeds the computation can be perturbed"
                         + (f" (kept: {an.frozen_values})" if an.frozen_values else ""))
    if strict and not an.answer_vars & (set(an.free) | set(an.dependent)):
        raise ValueError("the final answer does not depend on any perturbable question number")
    return an


@functools.lru_cache(maxsize=2048)
def _analysis_of(item_id: str, question: str, solution: str | None, answer: str) -> _Analysis:
    import sympy

    item = Item(id=item_id, question=question, answer=answer, solution=solution)

    if not item.solution:
        raise ValueError("no worked solution")
    chain = parse_chain(item.solution, item.answer)
    question = item.question
    context = question + " " + _ANN_RE.sub(" ", item.solution)
    quantities = extract_quantities(question)
    cents = _mentions(question, ("cent",))

    special: dict[Fraction, str] = {}  # values a word of the question stands for (twice, half, dozen)
    for word in re.findall(r"[a-z]+", question.lower()):
        for v in SPECIAL_WORDS.get(word, ()):
            special.setdefault(v, f"'{word}' in the question")
    for m in re.finditer(r"(?<![\d.])(\d+)/(\d+)(?![\d.])", question):  # "1/4 pound": the fraction is a constant
        if int(m.group(2)):
            special.setdefault(Fraction(int(m.group(1)), int(m.group(2))), "a fraction in the question")

    by_value: dict[Fraction, list[Quantity]] = {}
    for q in quantities:
        by_value.setdefault(q.value, []).append(q)
    variables: list[Variable] = []
    frozen_values: dict[str, str] = {}
    constants: set[Fraction] = set(special)  # values that stay as they are
    for value, occ in by_value.items():
        reason = next((q.frozen for q in occ if q.frozen), None)
        if reason is None and value in (0, 1):
            reason = "0 and 1 are structural"
        if reason is None and value in special:
            reason = special[value]
        if reason is None and value.denominator == 1 and int(value) in UNIT_CONSTANTS \
                and _mentions(context, UNIT_CONSTANTS[int(value)]):
            reason = "possible unit constant"
        if reason is None and value == 100 and any(q.percent for q in occ):
            reason = "100%"
        if reason is None and re.search(rf"\bthere (?:are|is|were|was) {re.escape(format_number(value))}\s+[a-z]+\s+"
                                        r"(?:in|from|between|per|a|an|each)\b", item.solution, re.IGNORECASE):
            reason = "stated as a fact in the solution"  # "there are 5 days from Monday to Friday"
        if reason is not None:
            frozen_values[format_number(value)] = reason
            constants.add(value)
            continue
        percent = any(q.percent for q in occ)
        forms = _PERCENT_FORMS if percent else (_CENT_FORMS if cents else _PLAIN_FORMS)
        variables.append(Variable(value, occ, percent, dict(forms)))

    residual = _residual_text(item.solution, chain)
    candidates: list[list[list[Source]]] = []
    for k, st in enumerate(chain.steps):
        per_lit = []
        for lit in st.literals:
            cands: list[Source] = [("r", j) for j in range(k) if chain.steps[j].result == lit]
            cands += [("q", vi, "x") for vi, var in enumerate(variables) if var.value == lit]
            if lit in constants or (cands and _unit_constant(lit, context)):
                cands.append(("c", lit))  # e.g. 60 may be an earlier result or the minutes in an hour
            if not cands:
                # a derived form of a percentage (25% -> .25, .75, 75, 1.25) only explains a literal that
                # is neither an earlier result nor a number of the question: those readings come first
                for vi, var in enumerate(variables):
                    cands += [("q", vi, name) for name, f in var.forms.items() if name != "x" and f(var.value) == lit]
            if not cands:
                if not _implicit_constant(lit, context):
                    raise ValueError(f"literal {format_number(lit)} in '{st.expr.strip()}' is neither a number of "
                                     "the question, an earlier result nor a unit constant named in the text "
                                     "(unbindable)")
                cands.append(("c", lit))
            if isinstance(st.tree, ast.Name) and not any(c[0] == "r" for c in cands):
                line = item.solution[:st.start].rsplit("\n", 1)[-1]
                if re.search(r"[-+*/×÷x]\s*\$?\.?\d|divided|times|minus|plus|multipl|sum|product", line):
                    raise ValueError(f"'<<{st.expr.strip()}=...>>' restates a value computed in the prose")
            if re.search(r"=\s*\$?\s?" + re.escape(format_number(lit)) + r"(?![\d.]\d|\s*[-+*/x×÷−]\s*\$?\.?\d)",
                         residual) \
                    and not any(c[0] == "r" for c in cands):
                raise ValueError(f"literal {format_number(lit)} in '{st.expr}' may come from an "
                                 "unannotated computation")
            per_lit.append(cands)
        candidates.append(per_lit)

    # Disambiguation. A literal may have several sources that agree on the original numbers (it equals
    # a question number and an earlier result, say). Rather than guess which one the author meant, keep
    # the readings equal: the equality becomes a constraint between the variables (solved with sympy
    # for some of them, which are then computed from the others); when that is impossible the variables
    # involved are frozen. Either way the re-executed chain is right under every reading.
    symbols = [sympy.Symbol(f"v{i}") for i in range(len(variables))]
    original = {symbols[i]: sympy.Rational(v.value.numerator, v.value.denominator) for i, v in enumerate(variables)}
    constraints: list[Any] = []
    frozen: set[int] = set()
    solution: dict[int, Any] = {}
    rng = random.Random(int(stable_hash(item.id), 16))
    for _ in range(3 * len(variables) + 3):
        bound = _bind(chain, candidates, variables, symbols, frozen, solution, rng)
        if isinstance(bound, tuple):
            bindings, sym_results = bound
            break
        exprs = bound
        involved = {int(str(s)[1:]) for e in exprs for s in e.free_symbols}
        trial = _solve(constraints + [exprs[0] - e for e in exprs[1:]], symbols, original, frozen)
        if trial is not None:
            constraints += [exprs[0] - e for e in exprs[1:]]
            solution = trial
        else:
            frozen |= involved
            solution = _solve(constraints, symbols, original, frozen) or {}
            for vi in involved:
                frozen_values[format_number(variables[vi].value)] = "ambiguous reading in the solution"
    else:  # pragma: no cover - each round freezes or constrains at least one variable
        raise ValueError("could not disambiguate the chain")

    # coincidences among the question's numbers become constraints too (solved like the readings), or,
    # when they cannot be solved for, checks every draw must pass
    used_now = {c[1] for per_lit in candidates for cands in per_lit for c in cands if c[0] == "q"}
    to_solve, checks = _relations(quantities, variables, used_now)
    for target, kind, terms in to_solve:
        expr = symbols[target] - _relation_value(kind, [symbols[t] for t in terms])
        trial = _solve([*constraints, expr], symbols, original, frozen)
        if trial is not None:
            constraints.append(expr)
            solution = trial
        else:
            checks.append((target, kind, terms))
    # variables the solver fixed to a constant are frozen too
    for vi, expr in list(solution.items()):
        if not expr.free_symbols:
            frozen.add(vi)
            del solution[vi]
            frozen_values[format_number(variables[vi].value)] = "fixed by an ambiguous reading"
    used_results = {c[1] for per_lit in candidates for cands in per_lit for c in cands if c[0] == "r"}
    for k, st in enumerate(chain.steps):
        if k != chain.final_step and k not in used_results:
            raise ValueError(f"the result {format_number(st.result)} of '{st.expr.strip()}' is not used by a later "
                             "step (an unannotated computation or a comparison may follow)")
    # every question number some literal may stand for feeds the computation (all readings agree)
    used = {c[1] for per_lit in candidates for cands in per_lit for c in cands if c[0] == "q"}
    dependent = {vi: e for vi, e in solution.items() if vi not in frozen}
    free = sorted(vi for vi in used if vi not in frozen and vi not in solution)
    # a variable the dependents are computed from is free even if the chain does not use it directly
    for e in dependent.values():
        free = sorted(set(free) | {int(str(s)[1:]) for s in e.free_symbols})
    final_syms = getattr(sym_results[chain.final_step], "free_symbols", set())
    answer_vars = {int(str(s)[1:]) for s in final_syms}
    return _Analysis(question, chain, quantities, variables, candidates, bindings, free, dependent, symbols,
                     frozen_values, checks, used=used, answer_vars=answer_vars)


def _relations(quantities: list[Quantity], variables: list[Variable], used: set[int]
               ) -> tuple[list[tuple[Any, str, tuple[Any, ...]]], list[tuple[Any, str, tuple[Any, ...]]]]:
    """Arithmetic coincidences among the question's numbers that a draw must keep: (to solve, to check).

    "her 5 friends. 2 of her friends ... the other 3 friends" (5 = 2 + 3) or "5 workers ... 2 of the
    workers ..., another 2 workers ... the fifth worker" (5 = 2 + 2 + 1) are never computed by the chain,
    but a draw that changes the 2 must change the 5 with it, or leave both. Two kinds are recorded:
    a number the chain does not use that equals the sum of two or three other occurrences (plus 0 or 1)
    or the product of two (checked on every draw); and a variable equal to the sum of two or three
    other variables (kept by solving for one of them). Terms are variable indices or constant values.
    """
    var_of = {v.value: vi for vi, v in enumerate(variables)}
    occ = [(var_of.get(q.value, q.value), q.value) for q in quantities if q.value not in (0, 1) and not q.frozen]
    unused = {q.value for q in quantities if not q.frozen and q.value not in (0, 1)
              and (q.value not in var_of or var_of[q.value] not in used)}
    solve: list[tuple[Any, str, tuple[Any, ...]]] = []
    check: list[tuple[Any, str, tuple[Any, ...]]] = []
    seen: set[tuple] = set()
    for t_idx, (target, t_val) in enumerate(occ):
        others = [o for i, o in enumerate(occ) if i != t_idx]
        for size in (2, 3):
            for combo in combinations(others, size):
                terms = tuple(term for term, _ in combo)
                moving = [x for x in (target, *terms) if isinstance(x, int) and x in used]
                if not moving:
                    continue
                total = sum(v for _, v in combo)
                rels = [(f"sum+{c}", total + c) for c in (0, 1)]
                if size == 2:
                    rels.append(("prod", combo[0][1] * combo[1][1]))
                for kind, value in rels:
                    if value != t_val:
                        continue
                    key = (target, kind, tuple(sorted(map(str, terms))))
                    if key in seen:
                        continue
                    seen.add(key)
                    if t_val in unused:
                        check.append((target, kind, terms))
                    elif kind == "sum+0" and all(isinstance(x, int) for x in (target, *terms)):
                        solve.append((target, kind, terms))
    return solve, check


def _relation_value(kind: str, vals: Sequence[Any]) -> Any:
    if kind == "prod":
        return vals[0] * vals[1]
    return sum(vals[1:], vals[0]) + int(kind[-1])


def _solve(constraints: list[Any], symbols: list[Any], original: dict[Any, Any],
           frozen: set[int]) -> dict[int, Any] | None:
    """Solve the equality constraints for some variables, on the branch through the original values.

    Equations are solved one at a time, each for the variable whose solution is a polynomial in the
    others if there is one (so that whole inputs give whole values), else the largest one.
    """
    import sympy

    subs = {symbols[i]: original[symbols[i]] for i in frozen}
    solution: dict[Any, Any] = {}
    for c in constraints:
        eq = sympy.cancel(sympy.together(c.subs(subs).subs(solution)))
        eq = sympy.fraction(eq)[0]
        if eq == 0:
            continue
        if not eq.free_symbols:
            return None
        best = None
        for sym in sorted(eq.free_symbols, key=lambda x: -original[x]):
            try:
                roots = sympy.solve(eq, sym)
            except (NotImplementedError, ValueError):  # pragma: no cover - sympy gives up
                continue
            for root in roots:
                if not root.is_rational_function(*eq.free_symbols):
                    continue  # e.g. a square root from a product relation: not exactly computable
                if sympy.simplify(root.subs(original) - original[sym]) != 0:
                    continue
                poly = not sympy.fraction(sympy.together(root))[1].free_symbols
                if best is None or (poly and not best[2]):
                    best = (sym, root, poly)
                break
            if best is not None and best[2]:
                break
        if best is None:
            return None
        sym, root = best[0], best[1]
        solution = {k: sympy.simplify(v.subs(sym, root)) for k, v in solution.items()}
        solution[sym] = root
    return {int(str(sym)[1:]): expr for sym, expr in solution.items()}


def _bind(chain: Chain, candidates: list[list[list[Source]]], variables: list[Variable], symbols: list[Any],
          frozen: set[int], solution: dict[int, Any], rng: random.Random):
    """One source per literal and the symbolic step results; or, at the first literal whose readings
    disagree under the current constraints, the symbolic values of those readings."""
    import sympy

    def sym_var(vi: int) -> Any:
        v = variables[vi].value
        if vi in frozen:
            return sympy.Rational(v.numerator, v.denominator)
        return solution.get(vi, symbols[vi])

    sym_results: list[Any] = []
    bindings: list[list[Source]] = []
    # two generic points satisfying the constraints, to compare readings quickly and exactly
    free_syms = {s for vi in range(len(variables)) for s in getattr(sym_var(vi), "free_symbols", set())}
    points = [{s: sympy.Rational(rng.randint(10**6, 10**7), rng.randint(2, 97)) for s in free_syms}
              for _ in range(2)]

    def sym_of(src: Source) -> Any:
        if src[0] == "c":
            return sympy.Rational(src[1].numerator, src[1].denominator)
        if src[0] == "r":
            return sym_results[src[1]]
        return variables[src[1]].forms[src[2]](sym_var(src[1]))

    for k, st in enumerate(chain.steps):
        row: list[Source] = []
        for cands in candidates[k]:
            exprs = [sympy.sympify(sym_of(c)) for c in cands]
            if len(cands) > 1:
                sigs = {tuple(e.subs(p) for p in points) for e in exprs}
                if len(sigs) > 1:
                    return exprs
            # equivalent readings: prefer the latest earlier result, then a question number
            row.append(next((c for c in reversed(cands) if c[0] == "r"), None)
                       or next((c for c in cands if c[0] == "q"), cands[0]))
        try:
            sym_results.append(sympy.sympify(st.evaluate([sym_of(src) for src in row])))
        except ZeroDivisionError:  # pragma: no cover - the original chain evaluated, so no literal zero divisor
            sym_results.append(sympy.nan)
        bindings.append(row)
    return bindings, sym_results


# ------------------------------------------------------------------------------------- perturbation


@dataclass
class _Draw:
    values: dict[int, Fraction]  # variable -> new value (only those that changed)
    literals: list[list[Fraction]]
    results: list[Fraction]


def _try(an: _Analysis, new: dict[int, Fraction]) -> tuple[_Draw | None, str]:
    """Re-execute the chain with new variable values and check the constraints."""
    chain = an.chain
    results: list[Fraction] = []
    literals: list[list[Fraction]] = []
    for k, st in enumerate(chain.steps):
        vals = []
        for src in an.bindings[k]:
            if src[0] == "c":
                vals.append(src[1])
            elif src[0] == "r":
                vals.append(results[src[1]])
            else:
                var = an.variables[src[1]]
                vals.append(var.forms[src[2]](new.get(src[1], var.value)))
        try:
            res = st.evaluate(vals)
        except ZeroDivisionError:
            return None, "division by zero"
        old = st.result
        if old.denominator == 1 and res.denominator != 1:
            return None, "a whole intermediate became fractional"
        if (old > 0) != (res > 0) or (old < 0) != (res < 0):
            return None, "an intermediate changed sign"
        places = _decimal_places(res)
        if places is None or places > max(2, _decimal_places(old) or 0):
            return None, "an intermediate needs too many decimals"
        if any((_decimal_places(v) is None) or _decimal_places(v) > 4 for v in vals):
            return None, "a literal needs too many decimals"
        literals.append(vals)
        results.append(res)
    # independent check: every reading of every literal still gives the same value, so the new chain
    # is right whichever source the author meant
    for k, per_lit in enumerate(an.candidates):
        for cands, val in zip(per_lit, literals[k], strict=True):
            for c in cands:
                alt = c[1] if c[0] == "c" else results[c[1]] if c[0] == "r" else \
                    an.variables[c[1]].forms[c[2]](new.get(c[1], an.variables[c[1]].value))
                if alt != val:
                    return None, "the readings of a literal disagree"
    def value(t: Any) -> Fraction:
        return new.get(t, an.variables[t].value) if isinstance(t, int) else t

    for target, kind, terms in an.relations:
        if _relation_value(kind, [value(t) for t in terms]) != value(target):
            return None, "a relation between the question's numbers would break"
    answer = results[chain.final_step]
    if answer == chain.answer:
        return None, "the final answer did not change"
    if answer_digits(answer) != answer_digits(chain.answer):
        return None, "the final answer changed its number of digits"
    if not chain.answer / ANSWER_SPREAD <= answer <= chain.answer * ANSWER_SPREAD:
        return None, f"the final answer moved by more than a factor {ANSWER_SPREAD:g}"
    return _Draw(dict(new), literals, results), ""


def _compiled(an: _Analysis) -> dict[int, Any]:
    """The dependent variables' sympy expressions as compiled Python over Fractions (subs is too slow)."""
    if an.compiled is None:
        an.compiled = {}
        for vi, expr in an.dependent.items():
            text = re.sub(r"(?<![\w.])(\d+)(?![\w.])", r"F(\1)", str(expr))  # exact: F(3)/F(2), not 1.5
            an.compiled[vi] = compile(text, f"<dependent v{vi}>", "eval")
    return an.compiled


def _dependents(an: _Analysis, new: dict[int, Fraction]) -> dict[int, Fraction]:
    """The solved variables' values for drawn values `new` (raises ZeroDivisionError etc. when undefined)."""
    env = {f"v{vi}": new.get(vi, v.value) for vi, v in enumerate(an.variables)}
    return {vi: Fraction(eval(code, {"F": Fraction, "__builtins__": {}}, env))  # our own sympy output
            for vi, code in _compiled(an).items()}


def _leanings(an: _Analysis) -> dict[int, int]:
    """For each free variable, +1 if raising it raises |answer| (at the original values), -1 if it
    lowers it, 0 if neither or unknown: which way to lean a draw that should make the answer larger."""
    out: dict[int, int] = {}
    for vi in an.free:
        new = {vi: an.variables[vi].value * Fraction(1001, 1000)}
        try:
            new.update(_dependents(an, new))
            results: list[Fraction] = []
            for k, st in enumerate(an.chain.steps):
                vals = [src[1] if src[0] == "c" else results[src[1]] if src[0] == "r" else
                        an.variables[src[1]].forms[src[2]](new.get(src[1], an.variables[src[1]].value))
                        for src in an.bindings[k]]
                results.append(st.evaluate(vals))
        except (ZeroDivisionError, TypeError, ValueError, NameError):
            out[vi] = 0
            continue
        delta = abs(results[an.chain.final_step]) - abs(an.chain.answer)
        out[vi] = (delta > 0) - (delta < 0)
    return out


_STAGE_SPREAD = (SPREAD, 2.5, MAX_SPREAD)


def _sample(an: _Analysis, rng: random.Random, stage: int, direction: int = 0,
            leanings: dict[int, int] | None = None) -> tuple[dict[int, Fraction] | None, str]:
    """Draw new values near the old ones (`Variable.draw`): stage 0 all free variables, round numbers
    stay round (and the others off the multiples of 10), factors in [1/2, 2]; stage 1 factors up to 2.5,
    half the draws with any last digit; stage 2 up to 3 and also a random subset of the free variables
    (the others keep their values).

    `direction` (+1 a larger answer, -1 a smaller one) leans each draw the way that moves the answer
    there (`leanings`), 3 times in 4; the draws of both directions together stay symmetric."""
    chosen = list(an.free)
    if stage >= 2 and len(chosen) > 1:
        chosen = rng.sample(chosen, rng.randint(1, len(chosen) - 1))
    keep = stage == 0 or rng.random() < 0.5
    new = {vi: an.variables[vi].draw(rng, keep_roundness=keep, spread=_STAGE_SPREAD[stage],
                                     lean=direction * (leanings or {}).get(vi, 0))
           for vi in chosen}
    if an.dependent:
        try:
            solved = _dependents(an, new)
        except (ZeroDivisionError, TypeError, ValueError, NameError):
            return None, "a constrained value is undefined"
        for vi, fval in solved.items():
            if not an.variables[vi].admissible(fval):
                return None, "a constrained value left its range"
            new[vi] = fval
    new = {vi: v for vi, v in new.items() if v != an.variables[vi].value}
    return (new or None), "no value changed"


# ---------------------------------------------------------------------------------------- rewriting


def _rewrite_question(an: _Analysis, new: dict[int, Fraction]) -> str:
    repl = [(q.start, q.end, q.render(val), q.value, val) for vi, val in new.items()
            for q in an.variables[vi].occurrences]
    return _substitute(an.question, repl)


def _rewrite_solution(an: _Analysis, draw: _Draw, solution: str) -> str:
    """Rewrite every step (annotations and plain-text equations), the numbers around them and nothing else."""
    chain = an.chain
    global_map: dict[Fraction, set[Fraction]] = {}  # old value -> new value(s), for the prose
    for vi, var in enumerate(an.variables):
        newx = draw.values.get(vi, var.value)
        for f in var.forms.values():
            global_map.setdefault(f(var.value), set()).add(f(newx))
    for st, res in zip(chain.steps, draw.results, strict=True):
        global_map.setdefault(st.result, set()).add(res)
    known_constant = {src[1] for row in an.bindings for src in row if src[0] == "c"} | {Fraction(0), Fraction(1)}

    pieces: list[str] = []
    pos = 0
    after_annotation: tuple[Fraction, Fraction] | None = None
    for k, st in enumerate(chain.steps):
        local: dict[Fraction, list[Fraction]] = {}
        for old, new in zip(st.literals, draw.literals[k], strict=True):
            local.setdefault(old, []).append(new)
        pieces.append(_map_text(solution[pos:st.start], local, global_map, known_constant, after_annotation))
        repl = [*zip(st.spans, draw.literals[k], strict=True), *((sp, draw.results[k]) for sp in st.result_spans)]
        pieces.append(_substitute(solution[st.start:st.end],
                                  [(s - st.start, e - st.start, _render_token(solution[s:e], v),
                                    _parse_decimal(solution[s:e]), v) for (s, e), v in repl]))
        pos = st.end
        after_annotation = None if st.visible else (st.result, draw.results[k])
    pieces.append(_map_text(solution[pos:], {}, global_map, known_constant, after_annotation))
    return "".join(pieces)


def _map_text(text: str, local: dict[Fraction, list[Fraction]], global_map: dict[Fraction, set[Fraction]],
              known_constant: set[Fraction], after_annotation: tuple[Fraction, Fraction] | None) -> str:
    """Replace the numbers of a prose segment; raise ValueError when a number has no single new value."""
    used: Counter = Counter()
    repl: list[tuple[int, int, str, Fraction, Fraction]] = []
    for n, q in enumerate(extract_quantities(text)):
        old = q.value
        if q.kind == "word" and old not in local:
            continue  # "one of them", "these two groups": only words of the step at hand are rewritten
        if n == 0 and after_annotation is not None and not text[:q.start].strip(" $") \
                and old == after_annotation[0]:
            new = after_annotation[1]  # the result written right after <<...>>
        elif old in local:
            lst = local[old]
            new = lst[min(used[old], len(lst) - 1)]
            used[old] += 1
        elif old in global_map:
            options = global_map[old]
            if len(options) > 1:
                if old in known_constant and old in options:
                    continue
                raise ValueError(f"the solution's number {q.text} has several readings")
            new = next(iter(options))
        elif old in known_constant or q.frozen:
            continue
        else:
            raise ValueError(f"the solution's number {q.text} is not explained by the chain")
        if new != old:
            repl.append((q.start, q.end, q.render(new), old, new))
    return _substitute(text, repl)


# ------------------------------------------------------------------------------- the answer's class

# Leading digits a flexible answer (see `flexible_class`) may be given: 1 would make it 1 or 10, special values.
LEAD_TARGETS = tuple(range(2, 10))
PERFECT = (0, 0, 0)


def significant_lead(value: Fraction | int) -> int:
    """The first significant digit of |value| (48 -> 4, 0.75 -> 7, -300 -> 3; 0 -> 0): the answer's first
    token under a digit-split tokenizer, and the digit `zcp.benchmarks.references.shift` reports."""
    a = abs(Fraction(value))
    if a == 0:
        return 0
    while a >= 10:
        a /= 10
    while a < 1:
        a *= 10
    return int(a)


def _exponent(a: Fraction) -> int:
    """floor(log10 a) for a > 0, exactly."""
    e = len(str(int(a))) - 1 if a >= 1 else 0
    while a < Fraction(10) ** e:
        e -= 1
    return e


def is_round(value: Fraction | int) -> bool:
    """A whole nonzero multiple of 10 (what `zcp.benchmarks.references.shift` counts as a round answer)."""
    v = Fraction(value)
    return v.denominator == 1 and v != 0 and v % 10 == 0


def is_special(value: Fraction | int) -> bool:
    """A whole value whose magnitude is one of `zcp.benchmarks.references.shift.SPECIAL_VALUES` (0, 1, 10, 100, 1000)."""
    v = Fraction(value)
    return v.denominator == 1 and abs(v) in SPECIAL_VALUES


def flexible_class(answer: Fraction | int) -> str | None:
    """The class of an answer whose leading digit cannot be kept with its roundness: "one-digit" (|answer|
    0-9: the digit is the answer, which must change) or "one significant digit" (10, 20, ..., 90, 300,
    5000: the only number as round, with that leading digit and as many digits, is the answer itself);
    None for every other answer."""
    a = abs(Fraction(answer))
    if a.denominator != 1:
        return None
    if a <= 9:
        return "one-digit"
    if significant_lead(a) * tens(int(a)) == a:
        return "one significant digit"
    return None


def _tens(value: Fraction) -> int:
    """The largest power of ten dividing a whole value (1 for 23, 10 for 250, 100 for 1500); 0 otherwise."""
    return tens(int(value)) if value.denominator == 1 else 0


def answer_band(answer: Fraction | int) -> tuple[Fraction, Fraction] | None:
    """(lo, hi): the smallest and largest |reference answer| that keeps the answer's class (for a fraction,
    hi is the open end): same leading digit, digits and roundness, never a special value. 48 -> (41, 49);
    250 -> (210, 290); 1500 -> (1100, 1900); 2.5 -> (2, 3). None for a `flexible_class` answer."""
    a = abs(Fraction(answer))
    if a == 0 or flexible_class(a):
        return None
    d, e = significant_lead(a), _exponent(a)
    lo, hi = d * Fraction(10) ** e, (d + 1) * Fraction(10) ** e
    if a.denominator != 1:
        return lo, hi
    step = _tens(a)  # lo = d * 10^e is rounder than the answer: never in its class
    return lo + step, hi - step


def keeps_answer_class(old: Fraction, new: Fraction) -> bool:
    """Whether a reference answer keeps the original's class beyond the sign and digits `_try` checks: its
    form (`keeps_answer_form`) and the same first significant digit, or for a `flexible_class` answer
    another one (its references' digits are matched to the benchmark's by `lead_transport`)."""
    if not keeps_answer_form(old, new):
        return False
    same = significant_lead(new) == significant_lead(old)
    return not same if flexible_class(old) else same


def keeps_answer_form(old: Fraction, new: Fraction) -> bool:
    """`keeps_answer_class` but for the leading digit: whole stays whole, as round as before (the same
    largest power of ten dividing it: 250 -> 270, 1500 -> 1200, 300 -> 700, 48 -> 43, never 1510, 250 or
    40), and no special value (0, 1, 10, 100, 1000)."""
    return _tens(old) == _tens(new) and (old.denominator == 1) == (new.denominator == 1) and not is_special(new)


def _class_description(answer: Fraction) -> str:
    digits = f"{answer_digits(answer)} digit{'s' if answer_digits(answer) > 1 else ''}"
    g = _tens(answer)
    form = ("a fraction" if answer.denominator != 1 else "off the multiples of 10" if g == 1
            else f"a multiple of {g} but not of {10 * g}")
    lead = (f"a leading digit in 2-9 other than {significant_lead(answer)}" if flexible_class(answer)
            else f"leading digit {significant_lead(answer)}")
    return f"{lead}, {digits}, {form}, not 0, 1, 10, 100 or 1000"


def _digit_values(an: _Analysis, changed: dict[Fraction, Fraction]) -> list[Fraction]:
    """The numbers written in digits in the question after a draw (what `zcp.benchmarks.references.shift` reads)."""
    return [changed.get(q.value, q.value) for q in an.quantities if q.kind == "digit"]


def _structure(answer: Fraction, values: Sequence[Fraction]) -> tuple[bool, bool, tuple[bool, ...]]:
    """(answer equals a question number, answer starts like a question number, which numbers are round)."""
    leads = {significant_lead(x) for x in values if x != 0}
    return (answer in values, answer != 0 and significant_lead(answer) in leads, tuple(is_round(x) for x in values))


def _mismatch(base: tuple[bool, bool, tuple[bool, ...]], other: tuple[bool, bool, tuple[bool, ...]]
              ) -> tuple[int, int, int]:
    """(answer-equals-a-question-number differs, answer-leads-like-one differs, question numbers whose
    roundness changed): PERFECT is a draw that keeps all three; tuples compare in order of importance."""
    return (int(base[0] != other[0]), int(base[1] != other[1]),
            sum(a != b for a, b in zip(base[2], other[2], strict=True)))


# --------------------------------------------------------------------------------------------- API


@dataclass
class PerturbResult:
    """Reference draws for one item: `items` (up to m), and `reason` when fewer than m were produced.

    `special_case`: why no draw can keep the answer's class (`keeps_answer_class`), when none can; its
    draws (under ``special_cases="keep"``) are then the best of the others, flagged in their metadata."""

    original_id: str
    items: list[Item] = field(default_factory=list)
    reason: str | None = None
    attempts: int = 0
    special_case: list[str] = field(default_factory=list)
    picks: list[tuple[Any, bool]] = field(default_factory=list, repr=False)  # the draws behind `items`

    @property
    def ok(self) -> bool:
        """True when all m draws were produced."""
        return self.reason is None


@dataclass
class _Cand:
    draw: _Draw
    answer: Fraction
    mismatch: tuple[int, int, int]
    round_delta: int = 0  # round question numbers in the draw minus in the original
    item: Item | None = None  # the validated reference (made as draw 0), None until checked

    @property
    def clean(self) -> bool:
        """Keeps the question's round numbers: as many of its numbers are multiples of 10 as in the original
        (what `structure="require"` insists on; the answer equal to or starting like a question number is
        only preferred, `_pick`)."""
        return self.round_delta == 0


@dataclass
class DrawPool:
    """The valid draws of one item, collected once (`collect_draws`) and chosen from later (`choose_draws`):
    the benchmark builder collects every item first, so that the leading digits of the references whose
    leading digit must change can be matched across the benchmark (`lead_transport`)."""

    item: Item
    m: int
    reason: str | None = None  # why the item has no draws at all (its chain cannot be used)
    analysis: _Analysis | None = None
    flexible: str | None = None
    matched: dict[int, list[_Cand]] = field(default_factory=dict)  # by bin (banded answers) or leading digit
    alt: dict[int, list[_Cand]] = field(default_factory=dict)  # banded answers: the form kept, another leading digit
    outside: dict[int, list[_Cand]] = field(default_factory=dict)  # draws off the class, by digit-range bin
    targets: list[int] = field(default_factory=list)  # bins of the m draws (banded answers)
    outside_targets: list[int] = field(default_factory=list)
    rng: random.Random = field(default_factory=random.Random)
    attempts: int = 0
    failures: Counter = field(default_factory=Counter)
    base_findings: tuple[Counter, int] | None = None
    base: tuple[bool, bool, tuple[bool, ...]] | None = None  # the original's `_structure`

    def validate_alt(self) -> None:
        """Check the rewritten items of the other-leading-digit draws now (they are checked lazily), so that
        `lead_capacity` counts only draws that pass every check."""
        self.alt = self._validated(self.alt)

    def validate_outside(self) -> None:
        """Check the rewritten items of the draws off the answer's class now (they are checked lazily)."""
        self.outside = self._validated(self.outside)

    def _validated(self, pools: dict[int, list[_Cand]]) -> dict[int, list[_Cand]]:
        if self.analysis is None:
            return pools
        out: dict[int, list[_Cand]] = {}
        for k, cands in pools.items():
            ok = []
            for c in cands:
                if c.item is None:
                    try:
                        c.item = _make_reference(self.item, self.analysis, c.draw, 0, self.base_findings)
                    except ValueError:
                        continue
                ok.append(c)
            out[k] = ok
        return out

    @property
    def answer(self) -> Fraction:
        """The original's final answer."""
        return self.analysis.chain.answer if self.analysis else Fraction(0)

    @property
    def lead_by_flow(self) -> bool:
        """Whether the draws' leading digits are chosen by `lead_transport`: a flexible answer, or one whose
        program gives no draw its leading digit but some draws its form (35 = 5 x 7: 28 or 42, never 3x)."""
        return self.flexible is not None or (not any(self.matched.values()) and any(self.alt.values()))

    def lead_capacity(self, clean: bool = False) -> dict[int, int]:
        """For a `lead_by_flow` item: how many draws (the answer's form kept; with `clean`, also the question's
        structure, `_Cand.clean`) reach each other leading digit."""
        pools = self.matched if self.flexible else self.alt
        counts = {k: sum(1 for c in v if c.clean or not clean) for k, v in sorted(pools.items())}
        return {k: n for k, n in counts.items() if n}


def collect_draws(item: Item, m: int, seed: int, max_attempts: int = 1000) -> DrawPool:
    """Sample and validate the draws of one item (see `perturb_gsm8k`); deterministic in (item id, seed).

    The loop ends when every target has its draws with the question's whole structure kept (`_mismatch`
    PERFECT), or the item has m such draws anywhere after 40% of the budget, or every target has its draws
    after 70% of it, or at the end of the budget (three times the budget while no draw at all was valid)."""
    where = f"row {item.metadata['row']}: " if "row" in item.metadata else ""
    rng = random.Random(int(stable_hash(f"gsm8k-ref|{item.id}|{seed}"), 16))
    try:
        an = _analyse(item)
    except ValueError as e:
        return DrawPool(item, m, reason=where + str(e), rng=rng)
    answer = an.chain.answer
    flexible = flexible_class(answer)
    own = significant_lead(answer)
    if flexible:
        targets: list[int] = []
        need = {d: m for d in LEAD_TARGETS if d != own}
    else:
        targets = draw_targets(answer, m, rng, bounds=answer_band(answer))
        need = dict(Counter(targets))
    pool = DrawPool(item, m, analysis=an, flexible=flexible, targets=targets,
                    outside_targets=draw_targets(answer, m, rng), rng=rng,
                    base_findings=_findings(item.question, item.solution or ""))
    question_values = {q.value for q in an.quantities}
    base = pool.base = _structure(answer, _digit_values(an, {}))
    base_round = sum(base[2])
    perfect: Counter = Counter()
    seen: set[tuple] = set()
    seen_valid = False
    leanings = _leanings(an)
    fails = pool.failures
    # an item with no valid draw at all after the budget gets up to twice as much again (low-yield
    # programs: a divisibility constraint, a value solved from the others)
    while pool.attempts < max_attempts or (pool.attempts < 3 * max_attempts and not seen_valid):
        short_perfect = [k for k in need if perfect[k] < need[k]]
        short_any = [k for k in need if len(pool.matched.get(k, ())) < need[k]]
        done = pool.attempts / max_attempts
        if not short_perfect or (not flexible and done >= 0.4 and sum(perfect.values()) >= m) \
                or (not short_any and done >= 0.7):
            break
        pool.attempts += 1
        att = pool.attempts
        stage = 0 if att <= 0.4 * max_attempts else (1 if att <= 0.7 * max_attempts else 2)
        target = short_perfect[att % len(short_perfect)]
        direction = (target > own) - (target < own) if flexible else (target > 0) - (target < 0)
        new, why = _sample(an, rng, stage, direction, leanings)
        if new is None:
            fails[why] += 1
            continue
        vals = list(new.values())
        if len(set(vals)) != len(vals) or any(v in question_values for v in vals):
            fails["new values collide with each other or with a number of the question"] += 1
            continue
        key = tuple(sorted(new.items()))
        if key in seen:
            continue
        seen.add(key)
        draw, why = _try(an, new)
        if draw is None:
            fails[why] += 1
            continue
        seen_valid = True
        new_answer = draw.results[an.chain.final_step]
        if is_special(new_answer):
            fails["the answer became 0, 1, 10, 100 or 1000"] += 1
            continue
        changed = {an.variables[vi].value: v for vi, v in new.items()}
        st = _structure(new_answer, _digit_values(an, changed))
        cand = _Cand(draw, new_answer, _mismatch(base, st), sum(st[2]) - base_round)
        if not keeps_answer_class(answer, new_answer):
            fails["the answer lost its leading digit or roundness"] += 1
            if keeps_answer_form(answer, new_answer):
                d = significant_lead(new_answer)
                if len(pool.alt.setdefault(d, [])) < m:
                    pool.alt[d].append(cand)
            b = answer_bin(answer, new_answer)
            if len(pool.outside.setdefault(b, [])) < m:
                pool.outside[b].append(cand)
            continue
        k = significant_lead(new_answer) if flexible else answer_bin(answer, new_answer)
        have = pool.matched.setdefault(k, [])
        # a bin no draw targets keeps up to m draws too: the fallback of a target bin nothing reaches
        if not (len(have) < (need.get(k, 0) or m) or (cand.mismatch == PERFECT and perfect[k] < m)):
            continue
        try:
            cand.item = _make_reference(item, an, draw, 0, pool.base_findings)
        except ValueError as e:
            fails[str(e)] += 1
            continue
        have.append(cand)
        perfect[k] += cand.mismatch == PERFECT
    return pool


def _pick(pools: dict[int, list[_Cand]], keys: Sequence[int], balance: int, pool: DrawPool,
          clean_only: bool = False) -> _Cand | None:
    """Take the best draw of `pools[k]` over `keys` (in order of preference): the structure first (answer
    equal to / starting like a question number kept), then the running roundness balance of the item's
    draws (`balance`: round question numbers gained so far), then the key's rank. A draw whose rewritten
    item fails a check (`_make_reference`) is discarded and the next one taken. `clean_only`: only a draw
    that keeps the balance at 0."""
    an = pool.analysis
    assert an is not None
    while True:
        best, where = None, None
        for rank, k in enumerate(keys):
            for idx, c in enumerate(pools.get(k, ())):
                if clean_only and balance + c.round_delta:
                    continue
                score = (c.mismatch[0], c.mismatch[1], abs(balance + c.round_delta), rank, idx)
                if best is None or score < best:
                    best, where = score, (k, idx)
        if where is None:
            return None
        c = pools[where[0]].pop(where[1])
        if c.item is None:
            try:
                c.item = _make_reference(pool.item, an, c.draw, 0, pool.base_findings)
            except ValueError:
                continue
        return c


def _unmatched_reason(pool: DrawPool) -> str:
    answer = pool.answer
    others = [c for v in pool.outside.values() for c in v]
    if is_round(answer) and not any(_tens(c.answer) == _tens(answer) for c in others):
        g = _tens(answer)
        return (f"the round answer {format_number(answer)} has no round alternative (no valid draw is a multiple of "
                f"{g} but not of {10 * g})")
    return (f"no valid reference keeps the answer's class ({_class_description(answer)}); "
            f"{len(others)} valid draw(s) found do not")


def choose_draws(pool: DrawPool, lead_counts: dict[int, int] | None = None, special_cases: str = "keep",
                 fill: bool = True, structure: str = "prefer") -> PerturbResult:
    """Up to m references from a `DrawPool`.

    An answer that keeps its leading digit: each draw targets a bin of the answer's change within its class
    (`draw_targets` with `answer_band`). A `DrawPool.lead_by_flow` answer: `lead_counts` (leading digit ->
    number of draws, from `lead_transport`); without them, the bins of the answer's change within its digit
    range (`draw_targets`), so that its draws are about as often smaller as larger.
    Within a target, `_pick` prefers the draws whose answer equals / starts like a question number as the
    original's does, then those that keep the item's round question numbers in balance, then the nearest
    bin; with ``structure="require"`` (the benchmark builder) an item takes only draws with as many round
    question numbers as the original (`_Cand.clean`), fewer than m if need be.

    Special cases (`PerturbResult.special_case`): an item none of whose valid draws keeps the answer's form,
    or (``structure="require"``) none of whose class-keeping draws keeps the structure. ``special_cases=
    "drop"`` returns no draws for it, ``"keep"`` the best of the others. `fill` tops up an item with fewer
    than m class-keeping draws by the best of the others (`perturb_gsm8k`'s default; the benchmark builder
    does not fill). Every draw's metadata says whether it keeps the class (``answer_class_kept``).
    """
    item, m = pool.item, pool.m
    if pool.analysis is None:
        return PerturbResult(item.id, reason=pool.reason)
    where = f"row {item.metadata['row']}: " if "row" in item.metadata else ""
    picks: list[tuple[_Cand, bool]] = []
    balance = 0
    if not pool.flexible and not any(pool.matched.values()):
        pool.validate_alt()  # whether the leading digit goes by transport depends on draws that pass every check
    by_flow = pool.lead_by_flow

    def take(pools: dict[int, list[_Cand]], keys: Sequence[int], kept: bool, clean_only: bool) -> None:
        nonlocal balance
        c = _pick(pools, keys, balance, pool, clean_only)
        if c is not None:
            picks.append((c, kept))
            balance += c.round_delta

    def take_class(clean_only: bool, counts: dict[int, int] | None) -> None:
        if by_flow:
            src = {k: list(v) for k, v in (pool.matched if pool.flexible else pool.alt).items() if v}
            if counts is None:  # no transport: the digit-range difficulty bins, as often smaller as larger
                by_bin: dict[int, list[_Cand]] = {}
                for c in (c for v in src.values() for c in v):
                    by_bin.setdefault(answer_bin(pool.answer, c.answer), []).append(c)
                for t in pool.outside_targets:
                    take(by_bin, fallback_bins(t), True, clean_only)
                return
            for d in sorted(counts):  # the transport's counts: a digit that runs out is not made up elsewhere
                for _ in range(counts[d]):
                    take(src, [d], True, clean_only)
        else:
            src = {k: list(v) for k, v in pool.matched.items()}
            for t in pool.targets:
                take(src, fallback_bins(t), True, clean_only)

    take_class(structure == "require", lead_counts)
    special: list[str] = []
    has_class = bool(pool.lead_capacity()) if by_flow else any(pool.matched.values())
    if not picks and has_class:  # only under structure="require"
        special = [f"no valid reference keeps both the answer's class ({_class_description(pool.answer)}) and "
                   "the question's round numbers (as many multiples of 10)"]
        if special_cases == "keep":
            take_class(False, None)
    elif not picks and any(pool.outside.values()):
        pool.validate_outside()  # a special case only if some other draw passes every check
        if any(pool.outside.values()):
            special = [_unmatched_reason(pool)]
    if special and special_cases == "drop":
        return PerturbResult(item.id, reason=where + special[0], attempts=pool.attempts, special_case=special)
    if (special and not picks) or (fill and len(picks) < m):
        outside = {b: list(v) for b, v in pool.outside.items()}
        for t in pool.outside_targets:
            if len(picks) >= m:
                break
            take(outside, fallback_bins(t), False, False)
    return _finish(pool, picks, special)


def _finish(pool: DrawPool, picks: Sequence[tuple[_Cand, bool]], special: list[str]) -> PerturbResult:
    """The PerturbResult of the chosen draws (numbered, metadata) and the reason when fewer than m."""
    item, m = pool.item, pool.m
    where = f"row {item.metadata['row']}: " if "row" in item.metadata else ""
    by_flow = pool.lead_by_flow
    items = []
    for j, (c, kept) in enumerate(picks):
        assert c.item is not None
        meta = {**c.item.metadata, "draw": j, "answer_class_kept": kept}
        if by_flow and kept:
            meta["answer_lead_by_flow"] = True
        if special:
            meta["special_case"] = list(special)
        items.append(Item(id=f"{item.id}::ref{j}", question=c.item.question, answer=c.item.answer,
                          solution=c.item.solution, metadata=meta))
    reason = None
    if len(items) < m:
        kept_n = sum(k for _, k in picks)
        top = pool.failures.most_common(1)[0][0] if pool.failures else "no new combination of values"
        reason = (f"{where}only {len(items)} of {m} valid draws in {pool.attempts} attempts"
                  + (f" ({kept_n} keep the answer's class)" if kept_n < len(items) else "")
                  + f" (most frequent failure: {top})")
    return PerturbResult(item.id, items, reason, pool.attempts, special, picks=list(picks))


def perturb_gsm8k(item: Item, m: int, seed: int, max_attempts: int = 1000,
                  lead_counts: dict[int, int] | None = None, special_cases: str = "keep",
                  fill: bool = True, structure: str = "prefer") -> PerturbResult:
    """Up to `m` distinct exact isomorphic perturbations of a GSM8K item, or the reason why not.

    Draws change every free question quantity at once, each by a log-symmetric factor around its old
    value, keeping round numbers round and the others off the multiples of 10; later in the attempt
    budget they drop the roundness half the time and widen the factor, then also try subsets (a
    divisibility constraint can make changing all of them at once impossible). Each draw is re-executed
    and validated (see the module docstring): the answer keeps its sign and number of digits, never
    becomes 0, 1, 10, 100 or 1000, no new value repeats a number of the question, and no calendar or
    clock quantity becomes impossible.

    Matching (module docstring, "The answer's class"): a reference answer keeps the original's leading
    digit and roundness (`keeps_answer_class`), in bins of the answer's change within that class
    (`draw_targets` with `answer_band`); a one-digit or one-significant-digit answer, or one no draw can keep
    the leading digit of, gets `lead_counts` draws per new leading digit (`lead_transport`, in the
    benchmark builder; default: the answer's digit-range bins, as often smaller as larger). Draws that keep the question's
    structure come first (`_pick`). Items no draw can keep the answer's form for: `special_cases` and
    `fill`, see `choose_draws`. Deterministic in (item id, seed).
    """
    return choose_draws(collect_draws(item, m, seed, max_attempts), lead_counts, special_cases, fill, structure)


def lead_transport(rows: Sequence[tuple[int, dict[int, int]]], m: int, digits: Sequence[int] = LEAD_TARGETS,
                   drop_unbalanced: bool = True, tolerance: float = 2.0
                   ) -> tuple[list[dict[int, int] | None], dict[str, Any]]:
    """How many draws of each item go to each new leading digit, so that the references' leading digits
    have the originals' distribution although no reference keeps its own original's digit.

    `rows`: per item, (the original answer's leading digit, draws available per other leading digit).
    Item i gets m_i = min(m, its draws) draws, x_id of them with leading digit d (at most the draws it has
    there); digit d then holds sum_i x_id / m_i of the references' mass (the feature report averages an
    item's draws), which should equal the number of originals with leading digit d. A linear program
    (scipy HiGHS) minimises the total mismatch, and, at a hundredth of the weight, the moves' log-length
    |ln(d / own)| (near digits first: the difficulty stays close). With `drop_unbalanced`, while some digit
    is off by more than `tolerance` items, one item is left out (None in the result): for a digit short of
    mass, an item with that leading digit (the least reachable first; it has nowhere to be balanced from),
    for a digit with too much, the item sending the largest share there. Counts are whole: each row's x is
    rounded by largest remainders. The report gives the originals' and the references' digit masses.
    """
    from scipy.optimize import linprog

    digits = list(digits)
    caps = [{d: c for d, c in cap.items() if d in digits and d != own and c > 0} for own, cap in rows]
    active = [i for i, c in enumerate(caps) if c]
    out: list[dict[int, int] | None] = [None] * len(rows)
    dropped: list[int] = []
    x_best: dict[tuple[int, int], float] = {}
    while active:
        var = [(i, d) for i in active for d in caps[i]]
        mi = {i: min(m, sum(caps[i].values())) for i in active}
        counts = Counter(rows[i][0] for i in active if rows[i][0] in digits)
        total = sum(counts.values())
        target = [counts[d] * len(active) / total if total else len(active) / len(digits) for d in digits]
        nv, nd = len(var), len(digits)
        cost = [0.01 * abs(math.log(d / max(rows[i][0], 1))) / mi[i] for i, d in var] + [1.0] * (2 * nd)
        a_eq, b_eq = [], []
        for i in active:
            a_eq.append([1.0 if vi == i else 0.0 for vi, _ in var] + [0.0] * (2 * nd))
            b_eq.append(float(mi[i]))
        for j, d in enumerate(digits):
            row = [1.0 / mi[vi] if vd == d else 0.0 for vi, vd in var] + [0.0] * (2 * nd)
            row[nv + j], row[nv + nd + j] = -1.0, 1.0  # mass - excess + shortfall = target
            a_eq.append(row)
            b_eq.append(target[j])
        bounds = [(0.0, float(caps[i][d])) for i, d in var] + [(0.0, None)] * (2 * nd)
        res = linprog(cost, A_eq=a_eq, b_eq=b_eq, bounds=bounds, method="highs")
        if not res.success:  # pragma: no cover - the program is always feasible (the slacks absorb anything)
            break
        x_best = {v: float(res.x[k]) for k, v in enumerate(var)}
        excess, short = res.x[nv:nv + nd], res.x[nv + nd:]
        worst = int(np.argmax(np.maximum(excess, short)))
        if not drop_unbalanced or max(excess[worst], short[worst]) <= tolerance:
            break
        d = digits[worst]
        if short[worst] > excess[worst]:  # the least reachable item with that digit first
            ranked = [(sum(caps[i].values()), -i, i) for i in active if rows[i][0] == d]
        else:  # the item sending the largest share there first
            ranked = [(-x_best[(i, d)] / mi[i], -i, i) for i in active if x_best.get((i, d), 0.0) > 0]
        if not ranked:
            break
        victim = min(ranked)[2]
        active.remove(victim)
        dropped.append(victim)
    for i in active:
        mi_ = min(m, sum(caps[i].values()))
        xs = {d: x_best.get((i, d), 0.0) for d in caps[i]}
        whole = {d: math.floor(v + 1e-9) for d, v in xs.items()}
        rest = sorted(xs, key=lambda d: -(xs[d] - whole[d]))
        for d in rest[: max(0, mi_ - sum(whole.values()))]:
            whole[d] += 1
        out[i] = {d: c for d, c in whole.items() if c}
    mass = Counter()
    for i in active:
        n_i = sum(out[i].values()) or 1
        for d, c in out[i].items():
            mass[d] += c / n_i
    report = {"items": len(active), "left_out": len(dropped),
              "original": dict(sorted(Counter(rows[i][0] for i in active).items())),
              "reference": {d: round(v, 2) for d, v in sorted(mass.items())}}
    return out, report


def _candidates(pool: DrawPool) -> list[_Cand]:
    """Every class-keeping draw of a pool (for a leading digit chosen by transport: those of other digits)."""
    src = pool.matched if (pool.flexible or not pool.lead_by_flow) else pool.alt
    return [c for v in src.values() for c in v]


def _key(pool: DrawPool, c: _Cand) -> int:
    return significant_lead(c.answer) if pool.lead_by_flow else answer_bin(pool.answer, c.answer)


STRUCTURE_FEATURES = ("answer equals a question number", "answer starts like a question number")


def balance_structure(results: dict[str, PerturbResult], pools: dict[str, DrawPool], tolerance: float = 0.5
                      ) -> dict[str, Any]:
    """Balance, over the benchmark, what no item can keep alone: the answer equal to or starting like a
    question number (`_structure`). For each, B = sum over items of (the original's value - the mean over
    its draws) is what the probe's statistic T = sum_i (X_i - mean_j Y_ij) gains from that feature under a
    clean model that responds to it additively; `_pick` keeps it per item where it can, and what is left
    (items none of whose draws keep it) is offset here by swapping draws for others of the same target
    (bin or leading digit) and round numbers that carry the other value, first in items whose own
    original has that value (which also improves the item), then in the others, in a fixed pseudo-random
    item order, until |B| <= `tolerance` items. Updates `results` in place; returns B before and after.
    """
    entries = []
    for i in sorted(results, key=lambda i: stable_hash(f"balance|{i}")):
        res, pool = results[i], pools.get(i)
        if pool is None or pool.base is None or res.special_case or not res.picks:
            continue
        entries.append((i, pool, list(res.picks)))

    def bit(pool: DrawPool, c: _Cand, f: int) -> bool:
        assert pool.base is not None
        return pool.base[f] != bool(c.mismatch[f])

    def total(f: int) -> float:
        return sum(pool.base[f] - sum(bit(pool, c, f) for c, _ in picks) / len(picks)  # type: ignore[index]
                   for _, pool, picks in entries)

    report: dict[str, Any] = {}
    changed: set[str] = set()
    for f, name in enumerate(STRUCTURE_FEATURES):
        b = before = total(f)
        want = b > 0  # the draws' value that reduces |B|: True when the originals have it more often
        for improving in (True, False):
            for i, pool, picks in entries:
                if abs(b) <= tolerance:
                    break
                if (pool.base[f] == want) != improving:  # type: ignore[index]
                    continue
                picked = {id(c) for c, _ in picks}
                spare = [c for c in _candidates(pool) if id(c) not in picked and bit(pool, c, f) == want]
                for n, (p, kept) in enumerate(picks):
                    if abs(b) <= tolerance:
                        break
                    if not kept or bit(pool, p, f) == want:
                        continue
                    for c in spare:
                        if _key(pool, c) != _key(pool, p) or c.round_delta != p.round_delta \
                                or bit(pool, c, 1 - f) != bit(pool, p, 1 - f):
                            continue
                        if c.item is None:
                            try:
                                c.item = _make_reference(pool.item, pool.analysis, c.draw, 0, pool.base_findings)
                            except ValueError:
                                spare.remove(c)
                                continue
                        spare.remove(c)
                        picks[n] = (c, kept)
                        b += (-1 if want else 1) / len(picks)
                        changed.add(i)
                        break
        report[name] = {"before": round(before, 2), "after": round(b, 2)}
    for i, pool, picks in entries:
        if i in changed:
            results[i] = _finish(pool, picks, results[i].special_case)
    report["items_changed"] = len(changed)
    return report


def special_case_reasons(item: Item, m: int = 9, seed: int = 0, scan: bool = False) -> list[str]:
    """Why a GSM8K item is inherently not exchangeable with any reference: [] for most items.

    Rules (no draws needed): an answer of 0, 1, 10, 100 or 1000 (`is_special`: the answer must change,
    and a clean model gives special values more mass than ordinary ones); equal question numbers that fix
    the answer (they are one variable, and the answer does not change when it does: "12 + 12 = 24
    shared among 12" -> 2, x - x, x / x). With `scan`, also what the item's draws show (`collect_draws`
    with m and seed): no valid draw keeps the answer's form (`keeps_answer_form`), e.g. a round answer
    with no round alternative. The benchmark builder finds these while building, and also leaves out an
    item whose leading digit no draw keeps when the benchmark cannot balance it (`lead_transport`).
    Items whose chain cannot be used at all are not special cases (their rejection names the reason).
    """
    reasons: list[str] = []
    try:
        answer = Fraction(str(item.answer).strip().replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return reasons
    if is_special(answer):
        reasons.append(f"the answer {format_number(answer)} is a special value (0, 1, 10, 100, 1000): "
                       "every reference changes it")
    try:
        an = _analyse(item, strict=False)
    except ValueError:
        return reasons
    perturbable = set(an.free) | set(an.dependent)
    if not an.answer_vars & perturbable:
        equal = [an.variables[vi] for vi in sorted(an.used & perturbable) if len(an.variables[vi].occurrences) > 1]
        if equal:
            v = equal[0]
            reasons.append(f"the equal question numbers {format_number(v.value)} ({len(v.occurrences)} times) fix "
                           f"the answer at {format_number(an.chain.answer)}: no reference changes it")
    if scan and not reasons:
        res = choose_draws(collect_draws(item, m, seed), special_cases="drop", fill=False, structure="require")
        reasons += res.special_case
    return reasons


def build_gsm8k_references(items: Sequence[Item], m: int, seed: int = 0, special_cases: str = "drop",
                           flagged: dict[str, list[str]] | None = None,
                           progress: Callable[[Sequence[Item], str], Any] | None = None
                           ) -> tuple[dict[str, list[Item]], list[dict[str, Any]], dict[str, Any]]:
    """References of a GSM8K benchmark: (draws by original id, rejections, report).

    Every item's draws are collected first (`collect_draws`); the items whose leading digit must change
    (`DrawPool.lead_by_flow`) get their new digits from one `lead_transport` per class (one-digit, round
    two-digit, leading digit fixed by the program), and each item's draws are chosen without filling
    (`choose_draws`, fill=False). `flagged`: ids of items that are special cases by rule
    (`special_case_reasons`) and were kept: their draws' metadata names the reasons. Special cases found
    here (no draw keeps the answer's form; a leading digit the transport cannot balance) are dropped (a
    rejection prefixed "special case (reference.special_cases=drop): ") or kept with flagged draws.
    """
    flagged = flagged or {}
    pools: dict[str, DrawPool] = {}
    results: dict[str, PerturbResult] = {}
    flow: dict[str, DrawPool] = {}
    for it in (progress(items, "reference (gsm8k)") if progress else items):
        pool = pools[it.id] = collect_draws(it, m, seed)
        if pool.lead_by_flow:
            flow[it.id] = pool
        else:
            results[it.id] = choose_draws(pool, special_cases=special_cases, fill=False, structure="require")
    counts: dict[str, dict[int, int]] = {}
    left_out: dict[str, str] = {}
    for p in flow.values():
        p.validate_alt()
    ids = [i for i, p in flow.items() if p.lead_capacity(clean=True)]
    rows = [(significant_lead(flow[i].answer), flow[i].lead_capacity(clean=True)) for i in ids]
    got, flow_report = lead_transport(rows, m, range(1, 10), drop_unbalanced=special_cases == "drop")
    flow_report["by_class"] = dict(sorted(Counter(flow[i].flexible or "leading digit fixed by the program"
                                                  for i in ids).items()))
    for i, (own, _), c in zip(ids, rows, got, strict=True):
        if c is None:
            left_out[i] = (f"no draw keeps the answer's leading digit {own}, and the other references cannot "
                           "balance the leading digits without it")
        else:
            counts[i] = c
    for i, pool in flow.items():
        if i in left_out:
            results[i] = PerturbResult(i, reason=left_out[i], attempts=pool.attempts, special_case=[left_out[i]])
        else:
            results[i] = choose_draws(pool, counts.get(i), special_cases=special_cases, fill=False,
                                      structure="require")
    balance = balance_structure(results, pools)
    refs: dict[str, list[Item]] = {}
    rejections: list[dict[str, Any]] = []
    found = {"kept": 0, "dropped": 0, "leading digit balanced by transport": len(counts),
             "left out by the transport": len(left_out)}
    for it in items:
        res = results[it.id]
        if res.special_case:
            found["dropped" if special_cases == "drop" else "kept"] += 1
        draws = list(res.items)
        if it.id in flagged:
            draws = [Item(id=r.id, question=r.question, answer=r.answer, solution=r.solution,
                          metadata={**r.metadata,
                                    "special_case": [*flagged[it.id], *r.metadata.get("special_case", [])]})
                     for r in draws]
        if draws:
            refs[it.id] = draws
        if res.special_case and special_cases == "drop":
            rejections.append({"id": it.id, "row": it.metadata.get("row"), "kept": 0,
                               "reason": "special case (reference.special_cases=drop): " + "; ".join(res.special_case)})
        elif res.reason:
            rejections.append({"id": it.id, "row": it.metadata.get("row"), "reason": res.reason, "kept": len(draws)})
    return refs, rejections, {"found_by_draws": found, "lead_transport": flow_report, "structure_balance": balance}


def _findings(question: str, solution: str) -> tuple[Counter, int]:
    """Impossible calendar/clock phrases of a question (as a multiset) and how many its solution has."""
    return Counter(scan_impossible_quantities(question)), len(scan_impossible_quantities(_ANN_RE.sub(" ", solution)))


def _make_reference(item: Item, an: _Analysis, draw: _Draw, j: int,
                    base_findings: tuple[Counter, int] | None = None) -> Item:
    """Rewrite question and solution for a validated draw, and check both against the chain and the calendar."""
    question = _rewrite_question(an, draw.values)
    changed = {an.variables[vi].value: v for vi, v in draw.values.items()}
    got = Counter(q.value for q in extract_quantities(question))
    if got != Counter(changed.get(q.value, q.value) for q in an.quantities):
        raise ValueError("the rewritten question does not contain exactly the new numbers")
    if set(changed) & set(got):
        raise ValueError("the rewritten question still contains a perturbed number")
    answer = draw.results[an.chain.final_step]
    solution = _rewrite_solution(an, draw, item.solution or "")
    check = parse_chain(solution, format_number(answer))  # every rewritten step evaluates as stated
    if [s.result for s in check.steps] != draw.results:
        raise ValueError("the rewritten solution does not re-execute to the new chain")
    # no impossible calendar or clock quantity ("30 hours a day") that the original did not have; an
    # aggregate the original's solution already states ("12000 minutes a day" of patient time) may change
    q_found, s_found = _findings(question, solution)
    q_base, s_base = base_findings or _findings(item.question, item.solution or "")
    if q_found - q_base or s_found > s_base:
        raise ValueError(f"an impossible calendar or clock quantity: {sorted((q_found - q_base) or ['in the solution'])[0]}")
    values = {format_number(an.variables[vi].value): format_number(v) for vi, v in sorted(draw.values.items())}
    return Item(
        id=f"{item.id}::ref{j}",
        question=question,
        answer=format_number(answer),
        solution=solution,
        metadata={"original_id": item.id, "draw": j, "values": values, "source": "gsm8k",
                  "method": "gsm8k-annotations", "kept": dict(an.frozen_values)},
    )


def gsm8k_item(row: dict[str, Any], index: int, path: str | None = None) -> Item:
    """The Item of one GSM8K row (0-based index), the convention of `zcp.benchmarks.loaders` (format gsm8k)."""
    q, a = row.get("question"), row.get("answer")
    if not isinstance(q, str) or not q.strip():
        raise DataError("missing or empty", path=path, row=index + 1, field="question")
    if not isinstance(a, str) or "####" not in a:
        raise DataError("no '#### <final answer>' marker", path=path, row=index + 1, field="answer")
    solution, _, final = a.rpartition("####")
    final = final.strip().replace(",", "")
    if not final:
        raise DataError("empty final answer after '####'", path=path, row=index + 1, field="answer")
    meta: dict[str, Any] = {"row": index + 1}
    if path:
        meta["source_file"] = Path(path).name
    return Item(id=str(row.get("id") or f"gsm8k-{index:05d}"), question=q, answer=final,
                solution=solution.strip(), metadata=meta)


def gsm8k_answer_text(item: Item) -> str:
    """The item's solution in GSM8K's own format, ending with ``#### answer``."""
    return f"{(item.solution or '').rstrip()}\n#### {item.answer}"


def perturb_gsm8k_file(path: str | Path, m: int, seed: int) -> tuple[list[Item], list[dict[str, Any]]]:
    """Perturb every row of a GSM8K JSONL file; returns (reference items, rejections with file/row/reason).

    Row by row with `perturb_gsm8k`'s defaults (special cases kept, short items filled, no benchmark-level
    matching: for that, `build_gsm8k_references`). Every row with fewer than m draws gets a rejection (its
    partial draws are still returned, counted in `kept`), and so does every unreadable row: nothing is
    dropped silently.
    """
    path = str(path)
    refs: list[Item] = []
    rejections: list[dict[str, Any]] = []
    for index, row in enumerate(read_jsonl(path)):
        try:
            item = gsm8k_item(row, index, path)
        except DataError as e:
            rejections.append({"file": path, "row": index + 1, "id": f"gsm8k-{index:05d}",
                               "reason": str(e), "kept": 0})
            continue
        res = perturb_gsm8k(item, m, seed)
        refs.extend(res.items)
        if res.reason is not None:
            rejections.append({"file": path, "row": index + 1, "id": item.id, "reason": res.reason,
                               "kept": len(res.items)})
    return refs, rejections
