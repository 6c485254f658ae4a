"""The numbers written in a GSM8K text and the calendar/clock check of a rewritten one.

`extract_quantities` reads digits ("1,000", "$1.50", "25%"), and cardinal words ("three"), marking the
occurrences that are not plain quantities (ordinals, fractions, times, ranges, years); the constants the
chain may use without the question writing them (unit conversions, fraction words); exact decimal
printing (`format_number`) and rewriting a number in the style of the one it replaces, with its article
(`_substitute`); and `scan_impossible_quantities` ("30 hours a day"), which every reference must pass.
Part of `zcp.benchmarks.references.gsm8k` (the package docstring describes the whole method).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

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
