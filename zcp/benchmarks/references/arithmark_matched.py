"""Matched references for ArithMark: near perturbations of a record that keep its operands' size and structure.

`perturb_arithmark` draws an isomorphic reference record of a `zcp.benchmarks.arithmark` record (same stage and
operators, new operands near the old ones, answer and options recomputed by the generator's `make_record`);
`special_case_reasons` names the records no reference can match. The ``arithmark_matched`` builder of
`zcp.benchmarks.references.builders` calls both; the generator stays in `zcp.benchmarks.arithmark` (the exact
law's references are `zcp.benchmarks.references.exact`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from zcp.benchmarks.arithmark import (
    OPERAND_MAX,
    OPERAND_MIN,
    _to_number,
    evaluate_exact,
    evaluate_expression,
    exact_value,
    make_record,
    parse_expression,
    round_result,
)
from zcp.benchmarks.references.matching import (
    ANSWER_SPREAD,
    Structure,
    answer_bin,
    answer_digits,
    draw_targets,
    fallback_bins,
    keeps_roundness,
    near_log,
    snap_roundness,
    value_classes,
)
from zcp.core.items import Item


def _near_operand(b: int, spread: float, lean: int, rng: random.Random, keep_round: bool = False) -> int:
    """A different operand of the same sign near b: |b| times a log-uniform factor in [1/spread, spread]
    (above 1 half the time; 3 times in 4 when `lean` is +1, 1 in 4 when -1), within the spec's
    [1, 20] magnitudes; with `keep_round`, as round as b at its new size (10 <-> 20, 7 never 10:
    `keeps_roundness`). 0 stays 0; b itself when 20 tries find nothing."""
    if b == 0:
        return 0
    mag = abs(b)
    for _ in range(20):
        y = near_log(mag, spread, lean, rng)
        x = snap_roundness(mag, y) if keep_round else math.floor(y + 0.5)
        if x != mag and 1 <= x <= OPERAND_MAX and (not keep_round or keeps_roundness(mag, x)):
            return int(math.copysign(x, b))
    return b


def _matched_operand(b: int, rng: random.Random) -> int:
    """A different operand with the same sign and digit count (0 has no alternative and stays 0)."""
    if b == 0:
        return 0
    mag = abs(b)
    lo, hi = (1, 9) if mag < 10 else (10, OPERAND_MAX)
    choices = [m for m in range(lo, hi + 1) if m != mag]
    return int(math.copysign(rng.choice(choices), b))


def _relaxed_operand(b: int, rng: random.Random) -> int:
    """Like `_matched_operand`, but a 0 becomes any operand in range."""
    return rng.randint(OPERAND_MIN, OPERAND_MAX) if b == 0 else _matched_operand(b, rng)


def _uniform_operand(b: int, rng: random.Random) -> int:
    return rng.randint(OPERAND_MIN, OPERAND_MAX)


def _leanings(operands: Sequence[int], operators: Sequence[str]) -> list[int]:
    """+1 where a larger |operand| gives a larger |answer| (at the original operands), -1 where smaller."""
    try:
        base = abs(evaluate_exact(operands, operators))
    except ZeroDivisionError:  # pragma: no cover - records never divide by zero
        return [0] * len(operands)
    out = []
    for i in range(len(operands)):
        moved = [Fraction(b) * (Fraction(1001, 1000) if k == i else 1) for k, b in enumerate(operands)]
        try:
            d = abs(evaluate_exact(moved, operators)) - base
        except ZeroDivisionError:
            d = 0
        out.append((d > 0) - (d < 0))
    return out


def _structure(operands: Sequence[int], operators: Sequence[str]) -> Structure:
    """A record's `Structure`: equal operand magnitudes (x - x, x / -x), an answer equal to an operand,
    which operands the answer starts like (its leading digit), the operands' roundness and the
    answer's form (whole and as round, or as many decimals).

    Intermediates are not matched: a left-to-right chain of up to 5 steps over [-20, 20] has many
    chance coincidences, and matching them would narrow the draws to a few references."""
    answer = round_result(evaluate_exact(operands, operators))
    mags = tuple(abs(int(b)) for b in operands)
    return Structure((*(Fraction(m) for m in mags), abs(answer)), mags, answer)


def _classes(operands: Sequence[int]) -> list[list[int]]:
    """Positions of the nonzero operands grouped by magnitude (7 and -7 move together; 0 stays 0)."""
    return [c for c in value_classes([abs(b) for b in operands]) if operands[c[0]] != 0]


def _fixing_classes(operands: Sequence[int], operators: Sequence[str]) -> list[list[int]]:
    """Classes of equal magnitudes that fix the answer (7 - 7 = 0, 5 / -5 = -1 whatever the 7 or 5)."""
    answer = evaluate_exact(operands, operators)
    out = []
    for cls in _classes(operands):
        if len(cls) < 2:
            continue
        fixed = True
        for factor in (Fraction(7, 3), Fraction(11, 5), Fraction(13, 2)):
            moved = [Fraction(b) * (factor if i in cls else 1) for i, b in enumerate(operands)]
            try:
                fixed &= evaluate_exact(moved, operators) == answer
            except ZeroDivisionError:  # pragma: no cover - scaling a nonzero divisor keeps it nonzero
                fixed = False
        if fixed:
            out.append(cls)
    return out


def special_case_reasons(record: Mapping[str, Any] | Item) -> list[str]:
    """Why a record is inherently not exchangeable with its references (see `perturb_arithmark`): an
    answer of 0 or +-1 (the reference must change its answer, and these are special values), or equal
    operands that fix the answer (7 - 7, 5 / -5), which the reference must then draw apart. [] for
    most records. Rule-based (the expression space is too large to scan): a record's references may
    lose other parts of its structure too; each reference's draw prefers the most it can keep."""
    rec = record.metadata if isinstance(record, Item) else record
    operands, operators = parse_expression(str(rec["expression"]))
    answer = round_result(evaluate_exact(operands, operators))
    reasons = []
    if abs(answer) in (0, 1):
        reasons.append(f"answer {_to_number(answer)}: a special value no reference keeps (its answer must differ)")
    for cls in _fixing_classes(operands, operators):
        reasons.append(f"operands {', '.join(str(operands[i]) for i in cls)} (equal magnitudes) fix the answer "
                       f"at {_to_number(answer)}: no reference keeps them equal")
    return reasons


# Operand spreads tried in order while the answer must keep its sign and number of digits and stay
# within a factor 3 (DESIGN: "same order of magnitude, same sign"); then, for the rare expression no
# such draw exists for (e.g. "... * 0"), the old levels that only require a changed answer.
_NEAR_SPREADS = (2.0, 3.0, 20.0)
# From this spread on, a draw of the right size wins over a wider one that keeps more of the structure.
_SIZE_FIRST = 3.0
# ... and that spread draws up to this many times `max_draws` while no draw keeps the structure.
_STRUCTURE_PATIENCE = 5
_PERTURBATION_LEVELS = (_matched_operand, _relaxed_operand, _uniform_operand)


def perturb_arithmark(record: Mapping[str, Any], seed: int, *, max_draws: int = 200) -> dict[str, Any]:
    """Isomorphic reference record: same stage and operators, new operands, recomputed answer and options.

    Every nonzero operand changes by a log-symmetric factor (as likely down as up; up to 2, then 3,
    then anywhere in the spec's [-20, 20]) and keeps its sign; 0 stays 0. The new answer differs from
    the original, keeps its sign and number of digits (whole part) and stays within a factor 3 of it.
    Difficulty matching as for GSM8K (`zcp.benchmarks.references.matching.draw_targets`): the draw aims at a bin of
    the answer's change drawn in the proportions a symmetric log-step within the answer's digit range
    gives, so references are as often larger as smaller; a bin no draw reaches gives way to the
    nearest one reached.

    Structure matching (`zcp.benchmarks.references.matching`, `_structure`): operands of equal magnitude (7 and
    -7) get one new magnitude, an answer equal to an operand's magnitude stays so and no new equality
    appears; the answer starts with the digit of the same operands as before and of no other
    (3 * 12 + 4 = 40 starts like 4 -> 4 * 18 + 8 = 80); 10 and 20 stay round (10 <-> 20) and other
    operands stay off 10 and 20; a whole answer stays whole and as round (30 -> 60, not 29) and does
    not become 0 or +-1, a fraction keeps its decimal places (2.5 -> 3.5, not 3.25). The draws look
    for all of it the record allows (an answer of 0 or +-1, or equal operands that fix the answer,
    can't be kept: `special_case_reasons`) within a factor 2, then 3; failing that, they take the
    draw within a factor 3 that keeps the most (equalities, then the leading digit, then the answer's
    form, then the operands' roundness): the operands' size comes first, and the spread-20 draws
    come in only when nothing within a factor 3 is valid.

    An expression with no draw of the right size falls back to operands of the same digit count,
    then a zero that moves, then any operands, with only a changed answer required. No division is by
    zero. The record gets `original_id` and id `<id>_ref<seed>`.
    """
    operands, operators = parse_expression(str(record["expression"]))
    original = exact_value(evaluate_expression(operands, operators))
    rng = random.Random(f"arithmark-ref:{seed}:{record['id']}")
    target = draw_targets(original, 1, rng)[0]
    leanings = _leanings(operands, operators)
    direction = (target > 0) - (target < 0)
    st_old = _structure(operands, operators)
    classes = _classes(operands)
    class_lean = [(s > 0) - (s < 0) for s in (sum(leanings[i] for i in c) for c in classes)]
    # what no draw can keep: the equalities when they fix the answer, the form of an answer of 0 or +-1
    expected = (int(bool(_fixing_classes(operands, operators))), 0, int(abs(original) in (0, 1)), 0)

    def finish(new: list[int]) -> dict[str, Any]:
        out = make_record(f"{record['id']}_ref{seed}", int(record["stage"]), new, operators, rng)
        out["original_id"] = record["id"]
        return out

    found: dict[tuple[tuple[int, ...], int], list[int]] = {}
    for spread in _NEAR_SPREADS:
        # the last spread within the size limit looks longer for the structure (a round answer, ...)
        for t in range(max_draws * (_STRUCTURE_PATIENCE if spread == _SIZE_FIRST else 1)):
            mode = t % 4  # 0, 1: equal magnitudes as one, roundness kept; 2: any last digit; 3: operands apart
            if mode < 3:
                new = list(operands)
                for cls, lean in zip(classes, class_lean, strict=True):
                    mag = abs(_near_operand(abs(operands[cls[0]]), spread, direction * lean, rng, keep_round=mode < 2))
                    for i in cls:
                        new[i] = int(math.copysign(mag, operands[i]))
            else:
                new = [_near_operand(b, spread, direction * lean, rng) for b, lean in zip(operands, leanings, strict=True)]
            if any(n == b != 0 for n, b in zip(new, operands, strict=True)) or \
                    any(op == "/" and b == 0 for op, b in zip(operators, new[1:], strict=True)):
                continue
            value = exact_value(evaluate_expression(new, operators))
            if value == original or answer_digits(value) != answer_digits(original):
                continue
            if original != 0 and ((value > 0) != (original > 0) or (value < 0) != (original < 0)
                                  or not abs(original) / ANSWER_SPREAD <= abs(value) <= abs(original) * ANSWER_SPREAD):
                continue
            cost = st_old.mismatch(_structure(new, operators))
            found.setdefault((cost, answer_bin(original, value)), new)
            if (expected, target) in found or (t >= max_draws and any(c <= expected for c, _ in found)):
                break
        top = min((c for c, _ in found), default=None)
        if top is not None and (top <= expected or spread >= _SIZE_FIRST):
            got = next(b for b in fallback_bins(target) if (top, b) in found)
            return finish(found[(top, got)])
    for draw_operand in _PERTURBATION_LEVELS:
        for _ in range(max_draws):
            new = [draw_operand(b, rng) for b in operands]
            if any(op == "/" and b == 0 for op, b in zip(operators, new[1:], strict=True)):
                continue
            if exact_value(evaluate_expression(new, operators)) == original:
                continue
            return finish(new)
    raise ValueError(f"no perturbation of {record['id']} changes its answer")  # pragma: no cover
