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
   benchmark whose numbers skew small), round numbers stay round, integers stay integers and decimals
   stay decimals, percentages in (0, 100]; re-executes the chain and validates: every whole
   intermediate stays whole, signs are kept, decimals stay short, every reading of every literal still
   agrees, the final answer changes but keeps its sign and number of digits, and the rewritten question
   contains exactly the new numbers and no impossible calendar or clock quantity ("30 hours a day",
   `scan_impossible_quantities`);
5. rewrites the question and the worked solution (the steps, the numbers of the prose around them; a
   whole number prints without ".0", "a"/"an" before a rewritten number agrees with it) and checks
   that every rewritten step evaluates to its stated result.

Difficulty matching: the m draws of an item target bins of the answer's log-change (smaller or larger,
by up to or beyond a factor sqrt 2) in the proportions a symmetric log-step restricted to the answer's
digit range gives (`draw_targets`), so over a benchmark references are about as often larger as smaller
and the leading digits of the answers keep their distribution (what the zero-CoT probe's p_first scores).

The executed chain is the source of truth for the new answer. An item is rejected, with its reason,
whenever the chain cannot be trusted: a literal no reading explains, a value computed in prose without
an annotation (``= 7`` in the text), an intermediate result no later step uses (a hidden comparison or
step), a final answer no step computes. Nothing is dropped silently.
"""

from __future__ import annotations

import ast
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

from zcp.data.schema import DataError, Item
from zcp.io import read_jsonl, stable_hash
from zcp.reference.matching import (  # re-exported: the GSM8K API and its tests use these names
    ANSWER_SPREAD,
    SPREAD,
    answer_bin,
    answer_digits,
    draw_targets,
    fallback_bins,
    p_larger,  # noqa: F401 - re-exported for callers of zcp.reference.gsm8k
)
from zcp.reference.matching import round_quantum as _quantum
from zcp.reference.matching import roundness as _roundness

__all__ = [
    "Chain",
    "PerturbResult",
    "Step",
    "answer_digits",
    "article_for",
    "calendar_limit",
    "extract_quantities",
    "format_number",
    "gsm8k_item",
    "parse_chain",
    "perturb_gsm8k",
    "perturb_gsm8k_file",
    "scan_impossible_quantities",
]

# ------------------------------------------------------------------------------------------- numbers

# A drawn question number is its old value times a log-uniform factor in [1/SPREAD, SPREAD] (later in the
# attempt budget up to MAX_SPREAD); a value solved from the others must also stay within MAX_SPREAD.
# (SPREAD and ANSWER_SPREAD, the difficulty-matching bins and `_roundness` live in zcp.reference.matching,
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
        written decimals, a round number stays round at its new magnitude (100 -> 70 or 200, 15 ->
        10, 8 or 25), and it must pass `admissible`. Returns the old value when 20 tries fail.
        """
        scale = 10**self.decimals
        u = int(self.value * scale)
        g = _roundness(u) if keep_roundness else 1
        log_s = math.log(spread)
        whole = self.value.denominator == 1
        top = 100 * scale if self.percent and self.value <= 100 else None
        for _ in range(20):
            step = rng.uniform(0.0, log_s)
            up = rng.random() < (0.75 if lean > 0 else 0.25 if lean < 0 else 0.5)
            x = u * math.exp(step if up else -step)
            q = _quantum(g, u, x)
            k = max(1, math.floor(x / q + 0.5)) * q
            # the checks of `admissible`, on integers (this loop is the hot path of a reference build)
            if k == u or k < 2 or (k % scale == 0) != whole or (top is not None and k > top) \
                    or not u <= k * MAX_SPREAD or not k <= u * MAX_SPREAD:
                continue
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


def _analyse(item: Item) -> _Analysis:
    """Parse, bind and disambiguate; raises ValueError with the reason when the item cannot be used."""
    import sympy

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
    if not free:
        raise ValueError("no question number that feeds the computation can be perturbed"
                         + (f" (kept: {frozen_values})" if frozen_values else ""))
    final_syms = getattr(sym_results[chain.final_step], "free_symbols", set())
    if not {int(str(s)[1:]) for s in final_syms} & (set(free) | set(dependent)):
        raise ValueError("the final answer does not depend on any perturbable question number")
    return _Analysis(question, chain, quantities, variables, candidates, bindings, free, dependent, symbols,
                     frozen_values, checks)


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
    stay round, factors in [1/2, 2]; stage 1 any last digit, factors up to 2.5; stage 2 up to 3 and
    also a random subset of the free variables (the others keep their values).

    `direction` (+1 a larger answer, -1 a smaller one) leans each draw the way that moves the answer
    there (`leanings`), 3 times in 4; the draws of both directions together stay symmetric."""
    chosen = list(an.free)
    if stage >= 2 and len(chosen) > 1:
        chosen = rng.sample(chosen, rng.randint(1, len(chosen) - 1))
    new = {vi: an.variables[vi].draw(rng, keep_roundness=stage == 0, spread=_STAGE_SPREAD[stage],
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


# --------------------------------------------------------------------------------------------- API


@dataclass
class PerturbResult:
    """Reference draws for one item: `items` (up to m), and `reason` when fewer than m were produced."""

    original_id: str
    items: list[Item] = field(default_factory=list)
    reason: str | None = None
    attempts: int = 0

    @property
    def ok(self) -> bool:
        """True when all m draws were produced."""
        return self.reason is None


def perturb_gsm8k(item: Item, m: int, seed: int, max_attempts: int = 1000) -> PerturbResult:
    """Up to `m` distinct exact isomorphic perturbations of a GSM8K item, or the reason why not.

    Draws change every free question quantity at once, each by a log-symmetric factor around its old
    value, keeping round numbers round; later in the attempt budget they drop the roundness and widen
    the factor, then also try subsets (a divisibility constraint can make changing all of them at once
    impossible). Each draw is re-executed and validated (see the module docstring); the answer keeps
    its sign and number of digits, and no calendar or clock quantity becomes impossible.

    Difficulty matching: each of the m draws targets a bin of the answer's change (smaller or larger,
    by up to or beyond a factor sqrt 2; `draw_targets`), and proposals lean the way that moves the
    answer there (`_leanings`). A bin no valid draw reaches within the budget is given up for the
    nearest one that has draws (an answer of 10 cannot get smaller and keep two digits).
    Deterministic in (item id, seed).
    """
    where = f"row {item.metadata['row']}: " if "row" in item.metadata else ""
    try:
        an = _analyse(item)
    except ValueError as e:
        return PerturbResult(item.id, reason=where + str(e))
    rng = random.Random(int(stable_hash(f"gsm8k-ref|{item.id}|{seed}"), 16))
    answer = an.chain.answer
    wanted = draw_targets(answer, m, rng)
    need = Counter(wanted)
    old_perturbed = {an.variables[vi].value for vi in [*an.free, *an.dependent]}
    found: dict[int, list[_Draw]] = {b: [] for b in (-2, -1, 0, 1, 2)}  # validated draws, by bin
    spare: dict[int, list[_Draw]] = {b: [] for b in (-2, -1, 0, 1, 2)}  # draws of full bins, checked when used
    seen: set[tuple] = set()
    reasons: Counter = Counter()
    base_findings = _findings(item.question, item.solution or "")
    leanings = _leanings(an)
    attempts = 0
    while attempts < max_attempts:
        short = [b for b in need if len(found[b]) < need[b]]
        if not short:
            break
        attempts += 1
        stage = 0 if attempts <= 0.4 * max_attempts else (1 if attempts <= 0.7 * max_attempts else 2)
        target = short[attempts % len(short)]
        new, why = _sample(an, rng, stage, (target > 0) - (target < 0), leanings)
        if new is None:
            reasons[why] += 1
            continue
        vals = list(new.values())
        if len(set(vals)) != len(vals) or any(v in old_perturbed for v in vals):
            reasons["new values collide with each other or with the numbers they replace"] += 1
            continue
        key = tuple(sorted(new.items()))
        if key in seen:
            continue
        seen.add(key)
        draw, why = _try(an, new)
        if draw is None:
            reasons[why] += 1
            continue
        b = answer_bin(answer, draw.results[an.chain.final_step])
        if len(found[b]) >= need.get(b, 0):
            if len(spare[b]) < m:
                spare[b].append(draw)
            continue
        try:
            _make_reference(item, an, draw, 0, base_findings)
        except ValueError as e:
            reasons[str(e)] += 1
            continue
        found[b].append(draw)
    chosen: list[_Draw] = []
    for target in wanted:
        for b in fallback_bins(target):
            pick = _take(found[b]) or _take_valid(spare[b], item, an, base_findings)
            if pick is not None:
                chosen.append(pick)
                break
    items = [_make_reference(item, an, draw, j, base_findings) for j, draw in enumerate(chosen)]
    reason = None
    if len(items) < m:
        top = reasons.most_common(1)[0][0] if reasons else "no new combination of values"
        reason = f"{where}only {len(items)} of {m} valid draws in {attempts} attempts (most frequent failure: {top})"
    return PerturbResult(item.id, items, reason, attempts)


def _take(pool: list[_Draw]) -> _Draw | None:
    return pool.pop(0) if pool else None


def _take_valid(pool: list[_Draw], item: Item, an: _Analysis, base_findings: tuple[Counter, int]) -> _Draw | None:
    """The first draw of `pool` whose rewritten item passes every check (removed from the pool)."""
    while pool:
        draw = pool.pop(0)
        try:
            _make_reference(item, an, draw, 0, base_findings)
        except ValueError:
            continue
        return draw
    return None


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
    """The Item of one GSM8K row (0-based index), the convention of `zcp.data.loaders` (format gsm8k)."""
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

    Every row with fewer than m draws gets a rejection (its partial draws are still returned, counted
    in `kept`), and so does every unreadable row: nothing is dropped silently.
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
