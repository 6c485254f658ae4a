"""A GSM8K solution's computation chain: its calculator annotations and plain-text equations as steps.

`parse_chain` turns ``16 - 3 - 4 = <<16-3-4=9>>9`` and ``99 + 5 = $104`` into `Step`s over exact
`Fraction` literals (an annotation that does not evaluate to its stated result is an error) and finds the
step that computes the final answer. Part of `zcp.benchmarks.references.gsm8k`.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from zcp.benchmarks.references.gsm8k.quantities import _DIGIT_RE, _parse_decimal

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
