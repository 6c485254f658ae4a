"""Equivalence-preserving formula transforms: sympy verification and an independent numeric check."""

from __future__ import annotations

import random
import re
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zcp.data.arithmark import generate_arithmark, make_record
from zcp.reference import formula
from zcp.reference.formula import (
    TRANSFORMS,
    formula_variants,
    parse_formula,
    render,
    transform_expression,
    verify_equivalent,
)

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}


def numeric(expr: str) -> Fraction:
    """Independent evaluator: a stack machine with Fractions; all operators have equal precedence and
    associate left, parentheses group, and a '-' glued to digits is a negative literal."""
    tokens = re.findall(r"-\d+|\d+|[-+*/()]", expr)
    assert "".join(tokens) == expr.replace(" ", ""), expr
    stack: list[list] = [[]]  # each frame: [value] or [value, op]
    for tok in tokens:
        if tok == "(":
            stack.append([])
            continue
        if tok in OPS:
            stack[-1].append(tok)
            continue
        value = stack.pop()[0] if tok == ")" else Fraction(int(tok))
        frame = stack[-1]
        if frame:
            left, op = frame
            frame[:] = [OPS[op](left, value)]
        else:
            frame.append(value)
    assert len(stack) == 1 and len(stack[0]) == 1, expr
    return stack[0][0]


def rounded(x: Fraction) -> Fraction:
    return Fraction(round(x, 4))


@pytest.fixture(scope="module")
def sample() -> list[dict]:
    return generate_arithmark(40, seed=11)  # 200 records, all stages


def test_numeric_helper_uses_left_to_right_semantics():
    assert numeric("2 + 3 * 4") == 20 and numeric("2 + (3 * 4)") == 14 and numeric("3 - -4") == 7
    assert numeric("((1 + 2) * 3) - 4") == 5 and numeric("-1 + (-13 * 3)") == -40


@pytest.mark.parametrize(("expr", "name", "expected"), [
    ("5 - -3", "neg_add", "5 + 3"),
    ("5 - 3 * 2 - 7", "neg_add", "5 + -3 * 2 + -7"),
    ("8 / -4 + 1", "recip", "8 * (1 / -4) + 1"),
    ("1 + 2 * 3 - 4", "parenthesize", "((1 + 2) * 3) - 4"),
    ("2 * 3", "commute", "3 * 2"),
    ("-13 * 3", "commute", "3 * -13"),
    ("1 - 2 + 3", "reorder", "1 + 3 - 2"),
    ("6 * 5 / 3", "reorder", "6 / 3 * 5"),
])
def test_known_rewrites(expr, name, expected):
    assert transform_expression(expr, name, random.Random(0)) == expected
    assert numeric(expected) == numeric(expr)


def test_commute_can_move_a_later_operand_to_the_front():
    outs = {transform_expression("-13 * 3 + -1", "commute", random.Random(s)) for s in range(20)}
    assert outs == {"3 * -13 + -1", "-1 + (-13 * 3)"}


def test_not_applicable_returns_none():
    assert transform_expression("5 - 3 / 2", "commute", 0) is None  # no + or *
    assert transform_expression("4 + 4", "commute", 0) is None  # swapping changes nothing
    assert transform_expression("5 * 3 - 2", "recip", 0) is None
    assert transform_expression("5 * 3 + 2", "neg_add", 0) is None
    assert transform_expression("5 * 3", "parenthesize", 0) is None
    assert transform_expression("5 * 3 + 2", "reorder", 0) is None  # * then + do not commute
    with pytest.raises(KeyError):
        transform_expression("1 + 2", "nope", 0)


def test_slack_forms_keep_the_value():
    forms = Counter()
    for s in range(30):
        out = transform_expression("7 - 2 * 4", "slack", random.Random(s))
        assert out is not None and numeric(out) == 20 and verify_equivalent("7 - 2 * 4", out)
        r = re.findall(r"-?\d+", out.replace("(7 - 2 * 4)", ""))
        assert len(r) == 2 and r[0] == r[1] != "0"  # the same slack term enters and leaves
        forms[out.index("(7 - 2 * 4)") == 0, "*" in out.replace("2 * 4", "")] += 1
    assert len(forms) == 3  # (E) + r - r, r + (E) - r, (E) * r / r


def test_verify_equivalent_is_exact_and_left_to_right():
    assert verify_equivalent("1 - -1", "2") and verify_equivalent("1 / 3 * 3", "1")
    assert not verify_equivalent("2 + 3 * 4", "2 + (3 * 4)")  # 20 vs 14
    assert not verify_equivalent("1 / 3", "0.3333") and not verify_equivalent("1 / 3", "3333 / 10001")
    assert not verify_equivalent("5 / 0", "5 / 0")  # undefined is never equivalent
    assert not verify_equivalent("1 + + 2", "3") and not verify_equivalent("(1 + 2", "3")
    assert not verify_equivalent("1 - - 2", "3")  # a sign must be glued to its digits


def test_every_transform_on_the_benchmark_is_equivalent(sample):
    applied = Counter()
    for r in sample:
        expr = r["expression"]
        for name in TRANSFORMS:
            out = TRANSFORMS[name](expr, random.Random(r["id"]))
            if out is None:
                continue
            applied[name] += 1
            assert out != expr
            assert verify_equivalent(expr, out)
            assert numeric(out) == numeric(expr), (name, expr, out)
            assert render(parse_formula(out)) == out  # the text is canonical: it parses back to itself
    assert set(applied) == set(TRANSFORMS) and min(applied.values()) >= 40


def test_a_wrong_rewrite_is_never_returned(monkeypatch):
    def broken(tree, rng):  # swaps the operands of a subtraction: not equivalent
        return formula.BinOp(tree.op, tree.right, tree.left) if isinstance(tree, formula.BinOp) else None

    monkeypatch.setitem(formula._TREE_TRANSFORMS, "commute", broken)
    assert transform_expression("9 - 4", "commute", 0) is None
    assert transform_expression("4 + 9", "commute", 0) == "9 + 4"  # fine where it happens to hold


def test_formula_variants(sample):
    for r in sample:
        variants = formula_variants(r, k=6, seed=3)
        assert variants == formula_variants(r, k=6, seed=3)
        if r["stage"] >= 2:
            assert len(variants) == 6
        assert len(variants) >= 4
        texts = [v["expression"] for v in variants]
        assert len(set(texts)) == len(texts) and r["expression"] not in texts
        for j, v in enumerate(variants):
            assert v["id"] == f"{r['id']}_f{j}" and v["original_id"] == r["id"]
            assert (v["answer"], v["options"], v["answer_index"]) == (r["answer"], r["options"], r["answer_index"])
            assert v["transforms"] and set(v["transforms"]) <= set(TRANSFORMS)
            assert rounded(numeric(v["expression"])) == Fraction(repr(r["answer"]) if isinstance(r["answer"], float)
                                                                 else r["answer"])
    assert formula_variants(sample[0], k=6, seed=3) != formula_variants(sample[0], k=6, seed=4)


def test_formula_variants_rejects_a_record_with_a_wrong_answer(sample):
    with pytest.raises(ValueError):
        formula_variants(dict(sample[0], answer=sample[0]["answer"] + 1), k=2, seed=0)


flat = st.integers(1, 5).flatmap(lambda n: st.tuples(
    st.lists(st.integers(-20, 20), min_size=n + 1, max_size=n + 1),
    st.lists(st.sampled_from("+-*/"), min_size=n, max_size=n),
)).filter(lambda t: all(not (op == "/" and b == 0) for op, b in zip(t[1], t[0][1:], strict=True)))


@settings(max_examples=150, deadline=None)
@given(flat, st.lists(st.sampled_from(sorted(TRANSFORMS)), min_size=1, max_size=4), st.integers(0, 10**6))
def test_chains_of_transforms_preserve_the_value(expr, names, seed):
    operands, operators = expr
    rec = make_record("x_s1_00000", len(operators), operands, operators, random.Random(seed))
    text, rng = rec["expression"], random.Random(seed)
    for name in names:
        out = transform_expression(text, name, rng)
        if out is not None:
            assert numeric(out) == numeric(text)
            text = out
    assert numeric(text) == numeric(rec["expression"]) and verify_equivalent(rec["expression"], text)
