"""Equivalence-preserving rewrites of ArithMark-style expressions, used as "evasive" variants.

In the spirit of TREAT (`papers/treat.txt`): the formula's form changes, its value does not. The
expressions use ArithMark's semantics: binary operators are applied strictly left to right (no
precedence), parentheses group, and a '-' glued to digits is a negative literal ("3 - -4"). So
"2 + 3 * 4" is (2 + 3) * 4 = 20; a sub-expression in the right operand must be parenthesised.

Transforms (each returns None when it does not apply or would not change the text):
  commute        swap the operands of one + or * step ("a * b + c" -> "b * a + c", or
                 "a * b + c" -> "c + (a * b)")
  reorder        swap two adjacent steps of the same kind ("x + a - b" -> "x - b + a",
                 "x * a / b" -> "x / b * a")
  neg_add        subtraction as addition of the negative ("a - 5" -> "a + -5", "a - -5" -> "a + 5")
  recip          division as multiplication by the reciprocal ("a / 4" -> "a * (1 / 4)")
  slack          a residual form of the same target: "(E) + r - r", "r + (E) - r" or "(E) * r / r"
  parenthesize   make the left-to-right order explicit ("a + b * c - d" -> "((a + b) * c) - d")

Every output is checked by `verify_equivalent` (sympy, exact rationals, left-to-right semantics)
against the input before it is returned; a rewrite that fails the check is discarded (None).
`propose_rewrite` gives the unverified text, for callers that report why a rewrite was rejected.

The `formula` paraphraser (`zcp.benchmarks.paraphrase.formula`) builds ArithMark variants from these rewrites;
ArithMark's loader reads their parentheses through its grouped grammar
(`zcp.benchmarks.arithmark.parse_grouped`, `load_arithmark(..., allow_groups=True)`).
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import sympy as sp

ADDITIVE = frozenset("+-")
MULTIPLICATIVE = frozenset("*/")


@dataclass(frozen=True)
class Num:
    """An integer literal (negative literals are written with a glued '-': "-13")."""

    value: int
    paren: bool = False


@dataclass(frozen=True)
class BinOp:
    """`left op right`; `paren` asks the renderer for explicit parentheses around this node."""

    op: str
    left: Node
    right: Node
    paren: bool = False


Node = Num | BinOp

_OPERATORS = "+-*/"


def _tokenize(expr: str) -> list[str]:
    """Tokens; a '-' glued to digits where an operand is expected ("3 - -4", "(-2 + 1)") is a literal."""
    tokens: list[str] = []
    pos, n = 0, len(expr)
    while pos < n:
        ch = expr[pos]
        if ch.isspace():
            pos += 1
            continue
        operand_expected = not tokens or tokens[-1] in _OPERATORS or tokens[-1] == "("
        m = re.compile(r"-?\d+" if operand_expected else r"\d+").match(expr, pos)
        if m:
            tokens.append(m.group())
            pos = m.end()
        elif ch in _OPERATORS or ch in "()":
            tokens.append(ch)
            pos += 1
        else:
            raise ValueError(f"unexpected character {ch!r} at {pos} in {expr!r}")
    return tokens


def parse_formula(expr: str) -> Node:
    """Parse a left-to-right expression with optional parentheses; ValueError if malformed."""
    tokens = _tokenize(expr)
    pos = 0

    def atom() -> Node:
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError(f"unexpected end of {expr!r}")
        tok = tokens[pos]
        pos += 1
        if tok == "(":
            node = chain()
            if pos >= len(tokens) or tokens[pos] != ")":
                raise ValueError(f"missing ')' in {expr!r}")
            pos += 1
            return replace(node, paren=True)
        if re.fullmatch(r"-?\d+", tok):
            return Num(int(tok))
        raise ValueError(f"unexpected {tok!r} in {expr!r}")

    def chain() -> Node:
        nonlocal pos
        node = atom()
        while pos < len(tokens) and tokens[pos] in _OPERATORS:
            op = tokens[pos]
            pos += 1
            node = BinOp(op, node, atom())
        return node

    root = chain()
    if pos != len(tokens):
        raise ValueError(f"unexpected {tokens[pos]!r} in {expr!r}")
    return root


def render(node: Node) -> str:
    """Text of a tree under left-to-right semantics (a compound right operand is always parenthesised)."""
    if isinstance(node, Num):
        text = str(node.value)
    else:
        right = render(node.right)
        if isinstance(node.right, BinOp) and not node.right.paren:
            right = f"({right})"
        text = f"{render(node.left)} {node.op} {right}"
    return f"({text})" if node.paren else text


def to_sympy(node: Node) -> sp.Expr:
    """The exact value as a sympy number (Rationals; a division by zero gives zoo)."""
    if isinstance(node, Num):
        return sp.Integer(node.value)
    a, b = to_sympy(node.left), to_sympy(node.right)
    if node.op == "+":
        return a + b
    if node.op == "-":
        return a - b
    if node.op == "*":
        return a * b
    return a / b


def verify_equivalent(expr_a: str, expr_b: str) -> bool:
    """True iff both parse and have the same finite exact value (sympy Rationals, left to right)."""
    try:
        va, vb = to_sympy(parse_formula(expr_a)), to_sympy(parse_formula(expr_b))
    except ValueError:
        return False
    if not (va.is_Rational and vb.is_Rational):  # zoo / nan from a division by zero
        return False
    return bool(va == vb)


# ------------------------------------------------------------------------------------------ transforms

TreePath = tuple[str, ...]


def _nodes(node: Node, path: TreePath = ()) -> list[tuple[TreePath, Node]]:
    """All nodes with their paths ('l'/'r' steps from the root), pre-order."""
    out: list[tuple[TreePath, Node]] = [(path, node)]
    if isinstance(node, BinOp):
        out += _nodes(node.left, (*path, "l")) + _nodes(node.right, (*path, "r"))
    return out


def _replace_at(node: Node, path: TreePath, new: Node) -> Node:
    if not path:
        return new
    assert isinstance(node, BinOp)
    if path[0] == "l":
        return replace(node, left=_replace_at(node.left, path[1:], new))
    return replace(node, right=_replace_at(node.right, path[1:], new))


def _rewrite_one(tree: Node, rng: random.Random, rewrite: Callable[[Node], Node | None]) -> Node | None:
    """Apply `rewrite` at one node chosen at random among those where it changes the text."""
    base = render(tree)
    options = []
    for path, node in _nodes(tree):
        new = rewrite(node)
        if new is not None:
            candidate = _replace_at(tree, path, new)
            if render(candidate) != base:
                options.append(candidate)
    return rng.choice(options) if options else None


def _rewrite_all(tree: Node, rewrite: Callable[[Node], Node | None]) -> Node:
    """Apply `rewrite` bottom-up wherever it applies."""
    if isinstance(tree, BinOp):
        tree = replace(tree, left=_rewrite_all(tree.left, rewrite), right=_rewrite_all(tree.right, rewrite))
    new = rewrite(tree)
    return tree if new is None else new


def _commute(tree: Node, rng: random.Random) -> Node | None:
    def swap(n: Node) -> Node | None:
        if isinstance(n, BinOp) and n.op in "+*":
            return BinOp(n.op, n.right, n.left, n.paren)
        return None

    return _rewrite_one(tree, rng, swap)


def _reorder(tree: Node, rng: random.Random) -> Node | None:
    def swap_steps(n: Node) -> Node | None:
        # (X op1 a) op2 b == (X op2 b) op1 a when both steps are additive or both multiplicative
        if isinstance(n, BinOp) and isinstance(n.left, BinOp) and not n.left.paren:
            inner = n.left
            if {inner.op, n.op} <= ADDITIVE or {inner.op, n.op} <= MULTIPLICATIVE:
                return BinOp(inner.op, BinOp(n.op, inner.left, n.right), inner.right, n.paren)
        return None

    return _rewrite_one(tree, rng, swap_steps)


def _neg_add(tree: Node, rng: random.Random) -> Node | None:
    def negate(n: Node) -> Node | None:
        if isinstance(n, BinOp) and n.op == "-" and isinstance(n.right, Num):
            return BinOp("+", n.left, Num(-n.right.value, n.right.paren), n.paren)
        return None

    return _rewrite_all(tree, negate)


def _recip(tree: Node, rng: random.Random) -> Node | None:
    def reciprocal(n: Node) -> Node | None:
        if isinstance(n, BinOp) and n.op == "/" and isinstance(n.right, Num) and n.right.value != 0:
            return BinOp("*", n.left, BinOp("/", Num(1), Num(n.right.value), paren=True), n.paren)
        return None

    return _rewrite_all(tree, reciprocal)


def _slack(tree: Node, rng: random.Random) -> Node | None:
    r = rng.randint(1, 20) * rng.choice((-1, 1))
    inner = replace(tree, paren=isinstance(tree, BinOp))
    form = rng.randrange(3)
    if form == 0:  # (E) + r - r
        return BinOp("-", BinOp("+", inner, Num(r)), Num(r))
    if form == 1:  # r + (E) - r
        return BinOp("-", BinOp("+", Num(r), inner), Num(r))
    return BinOp("/", BinOp("*", inner, Num(r)), Num(r))  # (E) * r / r, r != 0


def _parenthesize(tree: Node, rng: random.Random) -> Node | None:
    def mark_left_spine(n: Node, is_root: bool) -> Node:
        if not isinstance(n, BinOp):
            return n
        return replace(n, left=mark_left_spine(n.left, False), paren=n.paren or not is_root)

    return mark_left_spine(tree, True)


_TREE_TRANSFORMS: dict[str, Callable[[Node, random.Random], Node | None]] = {
    "commute": _commute,
    "reorder": _reorder,
    "neg_add": _neg_add,
    "recip": _recip,
    "slack": _slack,
    "parenthesize": _parenthesize,
}


def propose_rewrite(expr: str, name: str, rng: random.Random | int) -> str | None:
    """The UNVERIFIED text of transform `name` on `expr`; None when the transform does not apply.

    The text may equal the input (a swap of equal operands) and is not checked for equivalence: callers
    that report why a rewrite was rejected (`zcp.benchmarks.paraphrase.formula`) verify it themselves; everyone
    else wants `transform_expression`."""
    if name not in _TREE_TRANSFORMS:
        raise KeyError(f"unknown transform {name!r}; known: {sorted(_TREE_TRANSFORMS)}")
    if not isinstance(rng, random.Random):
        rng = random.Random(rng)
    new_tree = _TREE_TRANSFORMS[name](parse_formula(expr), rng)
    return None if new_tree is None else render(new_tree)


def transform_expression(expr: str, name: str, rng: random.Random | int) -> str | None:
    """Rewrite `expr` with transform `name`; None when it does not apply, changes nothing or fails verification."""
    text = propose_rewrite(expr, name, rng)
    if text is None or text == expr.strip() or not verify_equivalent(expr, text):
        return None
    return text


def rewrite_plans(rng: random.Random, names: Sequence[str] | None = None, max_steps: int = 2) -> list[tuple[str, ...]]:
    """The order in which rewrites are tried: every single transform (shuffled), then every sequence of
    2 distinct ones (shuffled), ... up to `max_steps`; `names` restricts the transforms (default: all)."""
    names = list(_TREE_TRANSFORMS if names is None else names)
    unknown = [n for n in names if n not in _TREE_TRANSFORMS]
    if unknown:
        raise KeyError(f"unknown transform {unknown[0]!r}; known: {sorted(_TREE_TRANSFORMS)}")
    plans: list[tuple[str, ...]] = []
    for steps in range(1, max_steps + 1):
        level = list(itertools.permutations(names, steps))
        rng.shuffle(level)
        plans += level
    return plans


def _string_transform(name: str) -> Callable[[str, random.Random | int], str | None]:
    def apply(expr: str, rng: random.Random | int) -> str | None:
        return transform_expression(expr, name, rng)

    apply.__name__ = name
    apply.__doc__ = f"Verified `{name}` rewrite of an expression (None if not applicable)."
    return apply


TRANSFORMS: dict[str, Callable[[str, random.Random | int], str | None]] = {
    name: _string_transform(name) for name in _TREE_TRANSFORMS
}
"""name -> callable(expr, rng) -> verified rewritten text or None."""


def formula_variants(record: Mapping[str, Any], k: int = 6, seed: int = 0) -> list[dict[str, Any]]:
    """Up to k distinct verified rewrites of an ArithMark record (same answer and options).

    Single transforms are tried first (in a seeded order), then pairs. Each variant is a copy of the
    record with a new `expression`, id `<id>_f<j>`, `original_id` and the `transforms` applied; fewer
    than k come back when the expression admits fewer distinct rewrites.
    """
    from zcp.benchmarks.arithmark import exact_value, round_result

    rng = random.Random(f"formula:{seed}:{record['id']}")
    expr = str(record["expression"]).strip()
    target = to_sympy(parse_formula(expr))
    if not target.is_Rational or exact_value(record["answer"]) != round_result(Fraction(int(target.p), int(target.q))):
        raise ValueError(f"record {record['id']}: answer {record['answer']} is not the value of {expr!r}")
    seen, variants = {expr}, []
    for plan in rewrite_plans(rng):
        if len(variants) >= k:
            break
        text: str | None = expr
        for name in plan:
            text = transform_expression(text, name, rng)
            if text is None:
                break
        if text is None or text in seen or not verify_equivalent(expr, text):
            continue
        seen.add(text)
        variants.append({**dict(record), "id": f"{record['id']}_f{len(variants)}", "expression": text,
                         "original_id": record["id"], "transforms": list(plan)})
    return variants
