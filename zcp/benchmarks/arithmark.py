"""ArithMark: procedurally generated left-to-right arithmetic, scored by log-likelihood multiple choice.

Follows `papers/arithmark.txt`: stage s has s+1 integer operands in [-20, 20] joined by operators from
{+, -, *, /}, evaluated strictly left to right (no precedence); an expression that divides by zero is
rejected and redrawn, and so is one already drawn in its stage (a deviation from the spec: a benchmark
holds each item once, see `generate_arithmark`); the answer is rounded to 4 decimals and an integral result is an int. Each record
has three distractors (answer + offset, |offset| in [0.5, 15.0], random sign): an integer answer gets
two integer distractors and one float, a float answer two floats and one integer. Arithmetic is done
with exact fractions so rounding never depends on binary floating point (0.1 + 0.2 != 0.3).

Also here: the record schema's validation (`validate_record`, `load_arithmark`), the conversion to the shared
`Item` schema, and a grouped grammar (`parse_grouped`, `evaluate_grouped`: parentheses evaluated first, left to right inside)
that reads the formula variants of `zcp.benchmarks.paraphrase.formula` (`load_arithmark(..., allow_groups=True)`);
the spec's flat expressions keep their parse and value under it.

Elsewhere: the matched reference perturbation (`perturb_arithmark`, `special_case_reasons`) in
`zcp.benchmarks.references.arithmark_matched`, the exact law's references in `zcp.benchmarks.references.exact`,
and the evaluation through a `Backend` with its Hydra job (`evaluate_arithmark`, `run_arithmark`) in
`zcp.validate.arithmark_eval`.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

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


# -------------------------------------------------------------------------------------------------- item


def arithmark_question(record: Mapping[str, Any]) -> str:
    """The spec's prompt: the expression followed by ' ='."""
    return f"{record['expression']} ="


def arithmark_to_item(record: Mapping[str, Any]) -> Item:
    """The record as a shared `Item`: question 'EXPR =', answer text, the whole record in metadata."""
    return Item(id=str(record["id"]), question=arithmark_question(record),
                answer=format_number(record["answer"]), solution=None,
                metadata={"source": "arithmark", **dict(record)})
