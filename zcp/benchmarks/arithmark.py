"""ArithMark: procedurally generated left-to-right arithmetic, scored by log-likelihood multiple choice.

Follows `papers/arithmark.txt`: stage s has s+1 integer operands in [-20, 20] joined by operators from
{+, -, *, /}, evaluated strictly left to right (no precedence); an expression that divides by zero is
rejected and redrawn, and so is one already drawn in its stage (a deviation from the spec: a benchmark
holds each item once, see `generate_arithmark`); the answer is rounded to 4 decimals and an integral result is an int. Each record
has three distractors (answer + offset, |offset| in [0.5, 15.0], random sign): an integer answer gets
two integer distractors and one float, a float answer two floats and one integer. Arithmetic is done
with exact fractions so rounding never depends on binary floating point (0.1 + 0.2 != 0.3).

Also here: the isomorphic reference perturbation used by ZCP (`perturb_arithmark`), the conversion to
the shared `Item` schema, the evaluation through the `Backend` interface and the Hydra run function; and
a grouped grammar (`parse_grouped`, `evaluate_grouped`: parentheses evaluated first, left to right inside)
that reads the formula variants of `zcp.benchmarks.paraphrase.formula` (`load_arithmark(..., allow_groups=True)`);
the spec's flat expressions keep their parse and value under it.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

from zcp.backends.base import Backend, Prompt, ScoreRequest
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
from zcp.errors import DataError

STAGES: tuple[int, ...] = (1, 2, 3, 4, 5)
OPERATORS: tuple[str, ...] = ("+", "-", "*", "/")
OPERAND_MIN, OPERAND_MAX = -20, 20
DECIMALS = 4
OFFSET_MIN, OFFSET_MAX = Fraction(1, 2), Fraction(15)
N_OPTIONS = 4
CHANCE = 1 / N_OPTIONS
RECORD_KEYS: tuple[str, ...] = ("id", "stage", "n_operands", "expression", "options", "answer_index", "answer")

log = logging.getLogger(__name__)
_SCALE = 10**DECIMALS
_MAX_DRAWS = 10_000
_TOKEN_RE = re.compile(r"-?\d+|[-+*/]")


# --------------------------------------------------------------------------------------------- numbers


def round_result(value: Fraction) -> Fraction:
    """Round to DECIMALS places, half to even (what Python's `round` does on the exact value)."""
    return Fraction(round(value, DECIMALS))


def _to_number(value: Fraction) -> int | float:
    """An already rounded exact value as the record stores it: int when integral, else float."""
    if value.denominator == 1:
        return int(value)
    return float(value)


def exact_value(x: int | float) -> Fraction:
    """The exact decimal value of a stored number (floats via their shortest repr, so 0.1 -> 1/10)."""
    if isinstance(x, bool):
        raise TypeError("booleans are not ArithMark numbers")
    return Fraction(x) if isinstance(x, int) else Fraction(repr(float(x)))


def format_number(x: int | float) -> str:
    """Text of a stored number as the model sees it: '-40', '-4.2317' (never scientific notation)."""
    if isinstance(x, int) and not isinstance(x, bool):
        return str(x)
    s = repr(float(x))
    if "e" in s or "E" in s:
        s = format(Decimal(s), "f")
    return s


# ----------------------------------------------------------------------------------------- expressions


def evaluate_exact(operands: Sequence[int], operators: Sequence[str]) -> Fraction:
    """Exact left-to-right value (no operator precedence); ZeroDivisionError on any division by 0."""
    if len(operands) < 1 or len(operators) != len(operands) - 1:
        raise ValueError(f"need n operands and n-1 operators, got {len(operands)} and {len(operators)}")
    acc = Fraction(operands[0])
    for op, b in zip(operators, operands[1:], strict=True):
        if op == "+":
            acc += b
        elif op == "-":
            acc -= b
        elif op == "*":
            acc *= b
        elif op == "/":
            if b == 0:
                raise ZeroDivisionError("division by zero in the left-to-right evaluation")
            acc /= b
        else:
            raise ValueError(f"unknown operator {op!r}")
    return acc


def evaluate_expression(operands: Sequence[int], operators: Sequence[str]) -> int | float:
    """Left-to-right value rounded to 4 decimals; an integral result is returned as int."""
    return _to_number(round_result(evaluate_exact(operands, operators)))


def format_expression(operands: Sequence[int], operators: Sequence[str]) -> str:
    """Expression text as in the spec: '-13 * 3 + -1' (a negative operand carries a leading '-')."""
    parts = [str(operands[0])]
    for op, b in zip(operators, operands[1:], strict=True):
        parts += [op, str(b)]
    return " ".join(parts)


def parse_expression(expr: str) -> tuple[list[int], list[str]]:
    """Operands and operators of a flat ArithMark expression; ValueError if it is not one."""
    tokens = expr.split()
    if len(tokens) % 2 == 0 or any(not _TOKEN_RE.fullmatch(t) for t in tokens):
        raise ValueError(f"not an ArithMark expression: {expr!r}")
    operands, operators = tokens[0::2], tokens[1::2]
    if any(o not in OPERATORS for o in operators) or any(o in OPERATORS for o in operands):
        raise ValueError(f"not an ArithMark expression: {expr!r}")
    return [int(o) for o in operands], list(operators)


# Grouped expressions (formula variants, `zcp.benchmarks.paraphrase.formula`). The spec's expressions are flat; TREAT's
# equivalence-preserving rewrites (`zcp.benchmarks.references.formula`) need parentheses to keep a value under
# left-to-right semantics ("a * b + c" commuted is "c + (a * b)", not "c + a * b" = (c + a) * b). The
# extension: a term is an integer literal or a parenthesised chain; a group is evaluated first, left to
# right inside, and then stands for its value in the chain around it. Tokens are separated by whitespace
# as in the spec, except that parentheses may be glued to a literal ("(-2 + 1) * 3", "8 * (1 / -4)"). A
# flat expression is parsed into the same operands and operators as `parse_expression` and has the same
# value: the extension only adds strings the spec grammar rejects.

GroupedTerm = int | tuple[list["GroupedTerm"], list[str]]


def _grouped_tokens(expr: str) -> list[str]:
    tokens: list[str] = []
    for piece in expr.split():
        core = piece.lstrip("(")
        lead = len(piece) - len(core)
        body = core.rstrip(")")
        trail = len(core) - len(body)
        if body and not _TOKEN_RE.fullmatch(body):
            raise ValueError(f"not an ArithMark expression: {expr!r}")
        if body in OPERATORS and (lead or trail):
            raise ValueError(f"not an ArithMark expression: {expr!r} (a parenthesis on an operator)")
        tokens += ["("] * lead + ([body] if body else []) + [")"] * trail
    return tokens


def parse_grouped(expr: str) -> tuple[list[GroupedTerm], list[str]]:
    """Terms and operators of an ArithMark expression with optional parentheses; ValueError if malformed.

    A term is an int or, for a parenthesised group, its own (terms, operators) pair. A flat expression
    gives `parse_expression`'s operands and operators."""
    tokens = _grouped_tokens(expr)
    pos = 0

    def fail(why: str) -> ValueError:
        return ValueError(f"not an ArithMark expression: {expr!r} ({why})")

    def term() -> GroupedTerm:
        nonlocal pos
        if pos >= len(tokens):
            raise fail("an operand is missing at the end")
        tok = tokens[pos]
        pos += 1
        if tok == "(":
            inner = chain()
            if pos >= len(tokens) or tokens[pos] != ")":
                raise fail("a '(' is not closed")
            pos += 1
            return inner
        if tok in OPERATORS or tok == ")":
            raise fail(f"{tok!r} where an operand is expected")
        return int(tok)

    def chain() -> tuple[list[GroupedTerm], list[str]]:
        nonlocal pos
        terms, operators = [term()], []
        while pos < len(tokens) and tokens[pos] in OPERATORS:
            operators.append(tokens[pos])
            pos += 1
            terms.append(term())
        return terms, operators

    root = chain()
    if pos != len(tokens):
        raise fail(f"unexpected {tokens[pos]!r}")
    return root


def grouped_operands(expr: str) -> list[int]:
    """The integer literals of a (grouped or flat) expression, in order of appearance."""
    def walk(t: GroupedTerm) -> list[int]:
        return [t] if isinstance(t, int) else [x for sub in t[0] for x in walk(sub)]

    return walk(parse_grouped(expr))


def evaluate_grouped(expr: str) -> Fraction:
    """Exact value of an expression with optional parentheses: groups first, every chain left to right.

    ValueError if malformed, ZeroDivisionError on any division by 0; a flat expression has exactly the
    value `evaluate_exact` gives its `parse_expression` operands."""
    def value(t: GroupedTerm) -> Fraction:
        if isinstance(t, int):
            return Fraction(t)
        terms, operators = t
        acc = value(terms[0])
        for op, sub in zip(operators, terms[1:], strict=True):
            b = value(sub)
            if op == "+":
                acc += b
            elif op == "-":
                acc -= b
            elif op == "*":
                acc *= b
            else:
                if b == 0:
                    raise ZeroDivisionError("division by zero in the left-to-right evaluation")
                acc /= b
        return acc

    return value(parse_grouped(expr))


# ------------------------------------------------------------------------------------------ generation


def _draw_integer_distractor(answer: Fraction, rng: random.Random) -> Fraction:
    """An integer m with 0.5 <= |m - answer| <= 15 on a random side, uniform over that side's integers."""
    sign = rng.choice((-1, 1))
    if sign > 0:
        lo, hi = math.ceil(answer + OFFSET_MIN), math.floor(answer + OFFSET_MAX)
    else:
        lo, hi = math.ceil(answer - OFFSET_MAX), math.floor(answer - OFFSET_MIN)
    return Fraction(rng.randint(lo, hi))


def _draw_float_distractor(answer: Fraction, rng: random.Random) -> Fraction:
    """answer + a random-sign offset uniform on the 4-decimal grid of [0.5, 15.0]; never integral."""
    while True:
        offset = Fraction(rng.randint(OFFSET_MIN * _SCALE, OFFSET_MAX * _SCALE), _SCALE)
        value = answer + rng.choice((-1, 1)) * offset
        if value.denominator != 1:
            return value


def make_distractors(answer: int | float, rng: random.Random) -> list[int | float]:
    """Three distinct distractors per the spec's type rule (int answer: 2 int + 1 float; float: 2 float + 1 int)."""
    a = exact_value(answer)
    integral = a.denominator == 1
    draws = [_draw_integer_distractor] * (2 if integral else 1) + [_draw_float_distractor] * (1 if integral else 2)
    chosen: list[Fraction] = []
    for draw in draws:
        for _ in range(_MAX_DRAWS):
            d = draw(a, rng)
            if d != a and d not in chosen:
                chosen.append(d)
                break
        else:  # pragma: no cover - 30 integers and ~290,000 grid points to choose from
            raise RuntimeError(f"could not draw distinct distractors for {answer}")
    return [_to_number(d) for d in chosen]


def make_record(record_id: str, stage: int, operands: Sequence[int], operators: Sequence[str],
                rng: random.Random) -> dict[str, Any]:
    """One ArithMark record (exact spec keys) for the given expression; options shuffled with `rng`."""
    answer = evaluate_expression(operands, operators)
    options = [answer, *make_distractors(answer, rng)]
    rng.shuffle(options)
    answer_index = options.index(answer)  # distractors differ from the answer in value
    return {
        "id": record_id,
        "stage": stage,
        "n_operands": len(operands),
        "expression": format_expression(operands, operators),
        "options": options,
        "answer_index": answer_index,
        "answer": answer,
    }


def _draw_expression(n_operands: int, rng: random.Random) -> tuple[list[int], list[str]]:
    """Uniform operands in [-20, 20] and operators; redrawn while any division is by zero."""
    while True:
        operands = [rng.randint(OPERAND_MIN, OPERAND_MAX) for _ in range(n_operands)]
        operators = [rng.choice(OPERATORS) for _ in range(n_operands - 1)]
        if not any(op == "/" and b == 0 for op, b in zip(operators, operands[1:], strict=True)):
            return operands, operators


def _stage_rng(seed: int, stage: int) -> random.Random:
    # One stream per (seed, stage): a stage's problems do not depend on which other stages are built.
    # String seeds are hashed with SHA-512 by `random`, so this is stable across processes.
    return random.Random(f"arithmark:{seed}:stage{stage}")


def n_expressions(stage: int) -> int:
    """How many distinct expressions stage `stage` has: 41 first operands, then per (operator, operand)
    41 * 4 pairs less the division by zero (163); stage 1 has 6,683."""
    n_values = OPERAND_MAX - OPERAND_MIN + 1
    return n_values * (n_values * len(OPERATORS) - 1) ** stage


def generate_arithmark(n_per_stage: int = 1000, seed: int = 0,
                       stages: Sequence[int] = STAGES) -> list[dict[str, Any]]:
    """Generate ArithMark records (ids `math_s{stage}_{i:05d}`), reproducible from `seed`.

    Expressions are distinct within a stage (stages differ in length, so across stages too): a drawn
    expression already in the stage is redrawn. The spec draws with replacement, but a benchmark must not
    hold the same item twice (each copy would count as independent evidence, `zcp.benchmarks.loaders.
    check_duplicates`), and stage 1 has only `n_expressions(1)` = 6,683 expressions: 1,000 draws with
    replacement repeat about 75 of them. Each record is thus a uniform draw among the expressions not yet
    drawn (sampling without replacement); the stream is the spec's until the first repeat, a stage's
    first N records do not depend on n_per_stage, and n_per_stage above a stage's count fails.
    """
    if n_per_stage < 0:
        raise ValueError("n_per_stage must be >= 0")
    records = []
    for stage in stages:
        if stage not in STAGES:
            raise ValueError(f"ArithMark stages are {STAGES}, got {stage}")
        if n_per_stage > n_expressions(stage):
            raise ValueError(f"n_per_stage={n_per_stage}: stage {stage} has only {n_expressions(stage)} distinct "
                             "expressions")
        rng = _stage_rng(seed, stage)
        seen: set[tuple[tuple[int, ...], tuple[str, ...]]] = set()
        for i in range(n_per_stage):
            while True:
                operands, operators = _draw_expression(stage + 1, rng)
                if (key := (tuple(operands), tuple(operators))) not in seen:
                    seen.add(key)
                    break
            records.append(make_record(f"math_s{stage}_{i:05d}", stage, operands, operators, rng))
    return records


# ----------------------------------------------------------------------------------------- validation


VARIANT_KEYS: tuple[str, ...] = ("original_id", "transforms")
"""Extra keys of a formula-variant record (`allow_groups`): its original's id and the transforms applied."""


def validate_record(record: Mapping[str, Any], *, path: str | None = None, row: int | None = None,
                    extra_keys: Sequence[str] = (), allow_groups: bool = False) -> None:
    """Check one record against the spec (keys, counts, range, value, options); raise DataError naming the field.

    `allow_groups` accepts a formula variant of a spec record (`zcp.benchmarks.paraphrase.formula`): the expression
    may hold parentheses (`parse_grouped`) and `n_operands` counts its literals, which need not be
    stage + 1 (a rewrite may add literals: "(E) + 3 - 3"); `stage` stays the original's (in STAGES), the
    literals stay in the spec's range and the answer is the expression's value (`evaluate_grouped`)."""
    def fail(msg: str, field: str) -> DataError:
        return DataError(msg, path=path, row=row, field=field)

    keys = set(record)
    missing = [k for k in RECORD_KEYS if k not in keys]
    if missing:
        raise fail("missing key", missing[0])
    unexpected = sorted(keys - set(RECORD_KEYS) - set(extra_keys))
    if unexpected:
        raise fail("unexpected key", unexpected[0])
    expr = str(record["expression"])
    try:
        operands, operators = (grouped_operands(expr), None) if allow_groups else parse_expression(expr)
    except ValueError as e:
        raise fail(str(e), "expression") from e
    if record["stage"] not in STAGES or (not allow_groups and record["n_operands"] != record["stage"] + 1):
        raise fail(f"stage {record['stage']} must be in {STAGES} with stage+1 operands", "stage")
    if len(operands) != record["n_operands"]:
        raise fail(f"{len(operands)} operands, expected {record['n_operands']}", "n_operands")
    if any(not OPERAND_MIN <= b <= OPERAND_MAX for b in operands):
        raise fail(f"operand outside [{OPERAND_MIN}, {OPERAND_MAX}]", "expression")
    try:
        value = (evaluate_expression(operands, operators) if operators is not None
                 else _to_number(round_result(evaluate_grouped(expr))))
    except ZeroDivisionError as e:
        raise fail("division by zero", "expression") from e
    answer = record["answer"]
    if not isinstance(answer, int | float) or isinstance(answer, bool) or exact_value(answer) != exact_value(value):
        raise fail(f"answer {answer!r} != left-to-right value {value!r}", "answer")
    options = record["options"]
    if not isinstance(options, list) or len(options) != N_OPTIONS:
        raise fail(f"expected a list of {N_OPTIONS} options", "options")
    if any(not isinstance(o, int | float) or isinstance(o, bool) for o in options):
        raise fail("options must be numbers", "options")
    if len({exact_value(o) for o in options}) != N_OPTIONS:
        raise fail("options are not distinct", "options")
    idx = record["answer_index"]
    if not isinstance(idx, int) or not 0 <= idx < N_OPTIONS or exact_value(options[idx]) != exact_value(value):
        raise fail(f"options[{idx}] is not the answer", "answer_index")


def load_arithmark(path: str | Path, *, allow_groups: bool = False) -> list[dict[str, Any]]:
    """Read and validate an ArithMark JSONL file; bad rows raise DataError with file, row and field.

    `allow_groups` reads formula variants too (parenthesised expressions, `transforms`: see `validate_record`)."""
    from zcp.core.io import read_jsonl

    records = []
    extra = VARIANT_KEYS if allow_groups else ("original_id",)
    for row, record in enumerate(read_jsonl(path), start=1):
        validate_record(record, path=str(path), row=row, extra_keys=extra, allow_groups=allow_groups)
        records.append(record)
    return records


# ------------------------------------------------------------------------------------------- reference


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


# --------------------------------------------------------------------------------------- item, scoring


def record_hash(record: Mapping[str, Any]) -> str:
    """Stable short hash of a record's content (ties predictions to the exact record they scored)."""
    from zcp.core.io import stable_hash

    return stable_hash(json.dumps(dict(record), sort_keys=True))


def arithmark_question(record: Mapping[str, Any]) -> str:
    """The spec's prompt: the expression followed by ' ='."""
    return f"{record['expression']} ="


def arithmark_to_item(record: Mapping[str, Any]) -> Item:
    """The record as a shared `Item`: question 'EXPR =', answer text, the whole record in metadata."""
    return Item(id=str(record["id"]), question=arithmark_question(record),
                answer=format_number(record["answer"]), solution=None,
                metadata={"source": "arithmark", **dict(record)})


def score_arithmark(backend: Backend, records: Sequence[Mapping[str, Any]],
                    batch_size: int = 64) -> list[dict[str, Any]]:
    """Per-record predictions: the option with the highest mean token log-likelihood wins (ties: first)."""
    # The options are NOT listed in the prompt: the spec scores each option as the continuation of
    # "EXPR =" ("log-likelihood over ending tokens", the cloze form of lm-eval-harness). Listing A-D
    # would turn the natural continuation into a letter and let the model copy a listed number instead
    # of computing, so the numbers would no longer be comparable to the spec's table.
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    requests = [
        ScoreRequest(Prompt(user=arithmark_question(r), chat=False), " " + format_number(o))
        for r in records for o in r["options"]
    ]
    results = []
    for start in range(0, len(requests), batch_size):
        chunk = requests[start:start + batch_size]
        out = backend.score(chunk)
        if len(out) != len(chunk):
            raise RuntimeError(f"backend returned {len(out)} scores for {len(chunk)} requests")
        results.extend(out)
    rows = []
    for i, r in enumerate(records):
        scores = []
        for res in results[N_OPTIONS * i:N_OPTIONS * (i + 1)]:
            if res.n_tokens == 0:
                raise RuntimeError(f"backend scored an option of {r['id']} with no tokens")
            scores.append(sum(res.token_logprobs) / res.n_tokens)  # length-normalised
        pred = max(range(N_OPTIONS), key=lambda j: (scores[j], -j))
        rows.append({"id": r["id"], "record_hash": record_hash(r), "stage": int(r["stage"]),
                     "expression": r["expression"], "pred_index": pred,
                     "answer_index": int(r["answer_index"]), "correct": pred == int(r["answer_index"]),
                     "option_scores": scores})
    return rows


def summarize_arithmark(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-stage accuracy, their unweighted mean (the spec's Avg), n per stage and chance (0.25)."""
    per_stage: dict[int, list[bool]] = {}
    for row in rows:
        per_stage.setdefault(int(row["stage"]), []).append(bool(row["correct"]))
    accuracy = {s: sum(v) / len(v) for s, v in sorted(per_stage.items())}
    return {
        "per_stage": accuracy,
        "n_per_stage": {s: len(v) for s, v in sorted(per_stage.items())},
        "average": sum(accuracy.values()) / len(accuracy) if accuracy else float("nan"),
        "n": len(rows),
        "chance": CHANCE,
    }


def evaluate_arithmark(backend: Backend, records: Sequence[Mapping[str, Any]],
                       batch_size: int = 64) -> dict[str, Any]:
    """Log-likelihood multiple-choice evaluation: summary (see `summarize_arithmark`) plus per-item `items`."""
    rows = score_arithmark(backend, records, batch_size=batch_size)
    return {**summarize_arithmark(rows), "items": rows}


def format_arithmark_table(results: Mapping[str, Any], model_name: str) -> str:
    """Markdown table shaped like the spec's (Stage 1..5, Avg, in percent)."""
    acc = {int(k): v for k, v in results["per_stage"].items()}
    cells = [f"{100 * acc[s]:.2f}%" if s in acc else "–" for s in STAGES]
    header = "| Model | " + " | ".join(f"Stage {s}" for s in STAGES) + " | Avg |"
    sep = "|" + "---|" * (len(STAGES) + 2)
    return "\n".join([header, sep, f"| {model_name} | " + " | ".join(cells) + f" | {100 * results['average']:.2f}% |"])


# ---------------------------------------------------------------------------------------------- runner


def run_arithmark(cfg: Mapping[str, Any], backend: Backend | None = None) -> dict[str, Any]:
    """Hydra job: build (or load) ArithMark, write it, and evaluate a model if `model.path` (or `backend`) is set.

    Writes to `cfg.output_dir`: arithmark.jsonl; with a model also predictions.jsonl (appended as
    records finish, skipped on restart), summary.json and table.md. Returns the summary (or counts).
    """
    from omegaconf import OmegaConf
    from tqdm import tqdm

    from zcp.core.io import append_jsonl, read_jsonl, seed_everything, sha256_file, write_jsonl
    from zcp.core.tracking import Tracker

    c = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)
    out = Path(c["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    if c.get("data_path"):
        records = load_arithmark(c["data_path"])
    else:
        records = generate_arithmark(int(c["n_per_stage"]), int(c["seed"]), tuple(c["stages"]))
    data_file = out / "arithmark.jsonl"
    write_jsonl(data_file, records)
    summary: dict[str, Any] = {"n_records": len(records), "data_file": str(data_file),
                               "data_sha256": sha256_file(data_file), "seed": c["seed"]}
    model = c.get("model") or {}
    if backend is None and model.get("path"):
        from zcp.config import build_backend  # lazy: torch/transformers only when a model is evaluated

        seed_everything(int(c["seed"]))  # generation has its own seeded streams; this covers the model
        backend = build_backend(model)
    with Tracker(c.get("logger"), run_config=c, run_dir=str(out), job_type="arithmark") as tracker:
        if backend is None:
            tracker.summary(summary)
            (out / "summary.json").write_text(json.dumps(summary, indent=2))
            return summary
        pred_file = out / "predictions.jsonl"
        previous = read_jsonl(pred_file, tolerate_partial_last_line=True) if pred_file.exists() else []
        hashes = {r["id"]: record_hash(r) for r in records}
        # resume: keep a finished row only if it was scored on this very record (same id and content)
        done = {r["id"]: r for r in previous if hashes.get(r["id"]) == r.get("record_hash")}
        write_jsonl(pred_file, [done[r["id"]] for r in records if r["id"] in done])  # drop stale/partial rows
        todo = [r for r in records if r["id"] not in done]
        chunk = max(1, int(c.get("chunk_size", 256)))
        for start in tqdm(range(0, len(todo), chunk), desc="arithmark", unit="chunk"):
            rows = score_arithmark(backend, todo[start:start + chunk], batch_size=N_OPTIONS * chunk)
            append_jsonl(pred_file, rows)
            done.update((r["id"], r) for r in rows)
        result = summarize_arithmark([done[r["id"]] for r in records])
        name = model.get("name") or (Path(model["path"]).name if model.get("path") else backend.name)
        table = format_arithmark_table(result, name)
        summary.update(result, model=name)
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
        (out / "table.md").write_text(table + "\n")
        tracker.summary({f"acc/stage_{s}": a for s, a in result["per_stage"].items()} | {"acc/avg": result["average"]})
        tracker.table("arithmark/accuracy", [{"stage": s, "accuracy": a, "n": result["n_per_stage"][s]}
                                             for s, a in result["per_stage"].items()])
        log.info("ArithMark results\n%s", table)
        return summary
