"""The answer's class a reference keeps: leading digit, digits, roundness, no special value.

`keeps_answer_class`, `answer_band` and `flexible_class` (the answers whose leading digit cannot be kept
and goes by `lead_transport`), and the question structure a draw is compared on (`_structure`,
`_mismatch`). Part of `zcp.benchmarks.references.gsm8k`.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from zcp.benchmarks.references.gsm8k.program import _Analysis
from zcp.benchmarks.references.matching import answer_digits, tens
from zcp.benchmarks.references.shift import SPECIAL_VALUES

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
    """The class of an answer whose leading digit cannot be kept with its roundness and last digit:
    "one-digit" (|answer| 0-9: the digit is the answer, which must change), "one significant digit" (10, 20,
    ..., 90, 300, 5000: the only number as round, with that leading digit and as many digits, is the answer
    itself) or "two digits ending in 5" (15, 25, ..., 95: the only two-digit number ending in 5 with that
    leading digit); None for every other answer."""
    a = abs(Fraction(answer))
    if a.denominator != 1:
        return None
    if a <= 9:
        return "one-digit"
    if significant_lead(a) * tens(int(a)) == a:
        return "one significant digit"
    if a < 100 and a % 10 == 5:
        return "two digits ending in 5"
    return None


def last_digit_class(value: Fraction | int) -> str:
    """The answer's last written digit as a clean model's number prior sees it: "0" (a whole multiple of 10),
    "5" (the last digit, or the last decimal of a fraction, is 5: 35, 2.5, 0.75) or "other" (0 -> "0")."""
    v = abs(Fraction(value))
    if v.denominator == 1:
        last = int(v) % 10
    else:
        places = 0
        while (v * 10**places).denominator != 1 and places < 12:
            places += 1
        last = int(v * 10**places) % 10 if (v * 10**places).denominator == 1 else -1
    return "0" if last == 0 and v.denominator == 1 else "5" if last == 5 else "other"


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
    40), the same last-digit class (`last_digit_class`: 35 -> 45 or 25, never 36; a one-digit answer, whose
    last digit is its leading digit, goes by `lead_transport` instead), and no special value (0, 1, 10, 100,
    1000)."""
    if (abs(old) > 9 or old.denominator != 1) and last_digit_class(old) != last_digit_class(new):
        return False
    return _tens(old) == _tens(new) and (old.denominator == 1) == (new.denominator == 1) and not is_special(new)


def _class_description(answer: Fraction) -> str:
    digits = f"{answer_digits(answer)} digit{'s' if answer_digits(answer) > 1 else ''}"
    g = _tens(answer)
    form = ("a fraction" if answer.denominator != 1 else "off the multiples of 10" if g == 1
            else f"a multiple of {g} but not of {10 * g}")
    if last_digit_class(answer) == "5" and abs(answer) > 9:
        form += ", ending in 5"
    lead = (f"a leading digit in 2-9 other than {significant_lead(answer)}" if flexible_class(answer)
            else f"leading digit {significant_lead(answer)}")
    return f"{lead}, {digits}, {form}, not 0, 1, 10, 100 or 1000"


def _digit_values(an: _Analysis, changed: dict[Fraction, Fraction]) -> list[Fraction]:
    """The numbers written in digits in the question after a draw (what `zcp.benchmarks.references.shift` reads)."""
    return [changed.get(q.value, q.value) for q in an.quantities if q.kind == "digit"]


Structure = tuple[bool, bool, tuple[bool, ...], bool, bool]


def _structure(answer: Fraction, values: Sequence[Fraction]) -> Structure:
    """(answer equals a question number, answer starts like a question number, which numbers are round,
    answer equals the question's last number, answer starts like it). The last number is where a model
    that copies a number from the question copies from ("... the flock is 20 chickens" -> 20)."""
    leads = {significant_lead(x) for x in values if x != 0}
    last = values[-1] if values else None
    lead = significant_lead(answer) if answer != 0 else -1
    return (answer in values, answer != 0 and lead in leads, tuple(is_round(x) for x in values),
            last is not None and answer == last, last is not None and last != 0 and lead == significant_lead(last))


def _mismatch(base: Structure, other: Structure) -> tuple[int, int, int]:
    """(answer equal to a question number or to the last one differs, answer leading like one or like the
    last one differs, question numbers whose roundness changed): PERFECT is a draw that keeps all of them;
    tuples compare in order of importance."""
    return (int(base[0] != other[0] or base[3] != other[3]), int(base[1] != other[1] or base[4] != other[4]),
            sum(a != b for a, b in zip(base[2], other[2], strict=True)))
