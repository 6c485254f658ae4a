"""Equivalence-preserving formula transforms: sympy verification and an independent numeric check."""

from __future__ import annotations

import random
import re
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zcp.benchmarks.arithmark import (
    VARIANT_KEYS,
    arithmark_to_item,
    evaluate_exact,
    evaluate_grouped,
    exact_value,
    generate_arithmark,
    grouped_operands,
    load_arithmark,
    make_record,
    parse_expression,
    parse_grouped,
    round_result,
    validate_record,
)
from zcp.benchmarks.paraphrase import FormulaParaphraser, get_paraphraser
from zcp.benchmarks.references import formula
from zcp.benchmarks.references.formula import (
    TRANSFORMS,
    formula_variants,
    parse_formula,
    render,
    transform_expression,
    verify_equivalent,
)
from zcp.core.io import write_jsonl
from zcp.core.items import Item
from zcp.errors import DataError

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


# ------------------------------------------------------------------- ArithMark's grouped grammar


def test_every_flat_expression_parses_and_evaluates_as_before():
    """The grouped grammar changes nothing for the spec's expressions: same operands, operators, value."""
    for r in generate_arithmark(400, seed=0):  # 2,000 spec expressions, all stages
        operands, operators = parse_expression(r["expression"])
        assert parse_grouped(r["expression"]) == (operands, operators)
        assert grouped_operands(r["expression"]) == operands
        assert evaluate_grouped(r["expression"]) == evaluate_exact(operands, operators) == numeric(r["expression"])
        validate_record(r)
        validate_record(r, allow_groups=True)


@settings(max_examples=200, deadline=None)
@given(flat, st.integers(0, 10**6))
def test_flat_expressions_keep_their_value(expr, seed):
    rec = make_record("x_s1_00000", len(expr[1]), *expr, random.Random(seed))
    assert evaluate_grouped(rec["expression"]) == evaluate_exact(*expr)


@pytest.mark.parametrize(("expr", "value"), [
    ("2 + 3 * 4", 20), ("2 + (3 * 4)", 14), ("((1 + 2) * 3) - 4", 5), ("8 * (1 / -4) + 1", -1),
    ("-1 + (-13 * 3)", -40), ("(-2 + 1) * 3", -3), ("((5))", 5), ("3 - -4", 7), ("6 / (1 - 4) * 2", -4),
])
def test_grouped_semantics(expr, value):
    """A group is evaluated first (left to right inside), then stands for its value in the chain."""
    assert evaluate_grouped(expr) == numeric(expr) == value


@pytest.mark.parametrize("bad", ["1 + + 2", "1 2", "1 -2", "1+2", "- 2", "", "(1 + 2", "1 + 2)", "()", "(+ 1)",
                                 "1 (+) 2", "1 + ()", "1 * x", "(1 + 2)(3)"])
def test_malformed_expressions_are_rejected(bad):
    with pytest.raises(ValueError):
        parse_grouped(bad)
    if "(" not in bad and ")" not in bad:  # what the spec grammar rejects, the grouped one rejects too
        with pytest.raises(ValueError):
            parse_expression(bad)


def test_division_by_zero_inside_a_group():
    with pytest.raises(ZeroDivisionError):
        evaluate_grouped("3 / (2 - 2)")


def test_loader_reads_formula_variants_only_when_asked(tmp_path, sample):
    rec = next(r for r in sample if r["stage"] == 2)
    variant = formula_variants(rec, k=6, seed=0)
    grouped = next(v for v in variant if "(" in v["expression"])
    grouped["n_operands"] = len(grouped_operands(grouped["expression"]))
    write_jsonl(tmp_path / "v.jsonl", [rec, grouped])
    assert load_arithmark(tmp_path / "v.jsonl", allow_groups=True)[1] == grouped
    with pytest.raises(DataError, match=r"row 2, field 'transforms'"):
        load_arithmark(tmp_path / "v.jsonl")  # a benchmark file stays flat by default
    write_jsonl(tmp_path / "w.jsonl", [rec, {k: v for k, v in grouped.items() if k != "transforms"}])
    with pytest.raises(DataError, match=r"row 2, field 'expression'"):
        load_arithmark(tmp_path / "w.jsonl")
    wrong = dict(grouped, answer=rec["options"][(rec["answer_index"] + 1) % 4])
    with pytest.raises(DataError, match="field 'answer'"):
        validate_record(wrong, extra_keys=VARIANT_KEYS, allow_groups=True)
    with pytest.raises(DataError, match="field 'n_operands'"):
        validate_record(dict(grouped, n_operands=grouped["n_operands"] + 1), extra_keys=VARIANT_KEYS,
                        allow_groups=True)
    with pytest.raises(DataError, match="operand outside"):
        validate_record(dict(grouped, expression=f"({rec['expression']}) + 21 - 21", n_operands=rec["n_operands"] + 2),
                        extra_keys=VARIANT_KEYS, allow_groups=True)


# ------------------------------------------------------------------------ the formula paraphraser


def _answer_value(v: Item) -> Fraction:
    return round_result(Fraction(numeric(v.metadata["expression"])))


def test_formula_paraphraser_gives_k_verified_variants(sample):
    para = get_paraphraser("formula")
    assert isinstance(para, FormulaParaphraser)
    n_full = n_accepted = 0
    for r in sample:
        item = arithmark_to_item(r)
        variants = para.paraphrase(item, k=6, seed=1)
        n_accepted += len(variants)
        assert [v.id for v in variants] == [f"{item.id}::para{j}" for j in range(len(variants))]
        if r["stage"] >= 2:
            assert len(variants) == 6
        n_full += len(variants) == 6
        texts = [v.question for v in variants]
        assert len(set(texts)) == len(texts) and item.question not in texts
        for v in variants:
            meta = v.metadata
            assert v.question == f"{meta['expression']} =" and v.answer == item.answer
            assert (meta["options"], meta["answer_index"], meta["answer"], meta["stage"]) == \
                (r["options"], r["answer_index"], r["answer"], r["stage"])
            assert meta["original_id"] == item.id and meta["paraphraser"] == "formula" and meta["transforms"]
            assert _answer_value(v) == exact_value(r["answer"])  # the independent stack machine agrees
            assert numeric(meta["expression"]) == numeric(r["expression"])  # exactly, not only after rounding
            validate_record({k: meta[k] for k in (*r, *VARIANT_KEYS)}, extra_keys=VARIANT_KEYS, allow_groups=True)
    report = para.report()
    assert report["paraphraser"] == "formula" and report["items"] == len(sample)
    assert report["items_with_k"] == n_full and report.get("short", 0) == len(sample) - n_full
    assert report["accepted"] == n_accepted
    assert report.get("rejected", 0) == sum(report["rejection_reasons"].values()) - report.get("short", 0)


def test_formula_paraphraser_is_deterministic_and_seeded(sample):
    item = arithmark_to_item(sample[-1])
    first = get_paraphraser("formula").paraphrase(item, k=4, seed=0)
    assert first == get_paraphraser("formula").paraphrase(item, k=4, seed=0)
    assert first != get_paraphraser("formula").paraphrase(item, k=4, seed=1)


def test_flat_preserving_transforms_give_spec_expressions(sample):
    """neg_add and reorder keep an expression flat: such variants are ArithMark expressions as the spec has them."""
    para = get_paraphraser("formula", transforms=["neg_add", "reorder"])
    seen = 0
    for r in sample:
        for v in para.paraphrase(arithmark_to_item(r), k=3, seed=0):
            ops, operators = parse_expression(v.metadata["expression"])
            assert len(ops) == r["n_operands"] and round_result(evaluate_exact(ops, operators)) == exact_value(r["answer"])
            assert set(v.metadata["transforms"]) <= {"neg_add", "reorder"}
            seen += 1
    assert seen >= len(sample)


def test_rejections_are_reported_with_their_reasons(monkeypatch):
    rec = make_record("math_s2_00007", 2, [7, 2, 4], ["-", "*"], random.Random(0))  # 7 - 2 * 4 = 20
    item = arithmark_to_item(rec)
    scripted = iter(["7 - 2 * 4", "7 - 2 * (4", "7 - (2 * 4)", "7 + -2 * 4", "7 + -2 * 4", "(7 - 2) * 4",
                     "7 - 2 * 4 * 21 / 21"])
    monkeypatch.setattr(FormulaParaphraser, "_apply", staticmethod(lambda expr, plan, rng: next(scripted, None)))
    para = get_paraphraser("formula")
    variants = para.paraphrase(item, k=3, seed=0)
    assert [v.question for v in variants] == ["7 + -2 * 4 =", "(7 - 2) * 4 ="]  # short of k=3
    reasons = [r["reason"].split(":")[0] for r in para.rejections]
    assert reasons == ["identical to the original", "not parseable by the ArithMark loader",
                       "not equivalent (sympy)", "identical to another variant",
                       "rejected by the ArithMark loader", "only 2 of 3 valid variants"]
    assert "operand outside" in para.rejections[4]["reason"]  # the loader's range check
    report = para.report()
    assert (report["proposed"], report["accepted"], report["rejected"], report["short"]) == (7, 2, 5, 1)
    assert report["rejection_reasons"]["not equivalent (sympy)"] == 1
    assert report["not_applicable"] > 0  # the scripted plans ran out: the rest "did not apply"


def test_arithmark_evaluator_is_a_second_independent_check(monkeypatch):
    """A rewrite that sympy wrongly accepted is still caught by ArithMark's own evaluator."""
    import zcp.benchmarks.references.formula as ref_formula

    monkeypatch.setattr(ref_formula, "verify_equivalent", lambda a, b: True)
    rec = make_record("math_s2_00007", 2, [7, 2, 4], ["-", "*"], random.Random(0))
    reason = get_paraphraser("formula").check(rec, "7 - (2 * 4)")
    assert reason is not None and reason.startswith("value differs under ArithMark's evaluator")


def test_formula_paraphraser_refuses_non_arithmark_items():
    with pytest.raises(DataError, match=r"ArithMark items: item 'wp1' has no 'expression'"):
        get_paraphraser("formula").paraphrase(Item("wp1", "Tom has 3 apples and gets 4. How many?", "7"), 2)
    with pytest.raises(ValueError, match="unknown transform 'nope'"):
        get_paraphraser("formula", transforms=["nope"])
    rec = make_record("math_s1_00001", 1, [3, 4], ["+"], random.Random(0))
    with pytest.raises(DataError, match="field 'answer'"):
        get_paraphraser("formula").paraphrase(arithmark_to_item(dict(rec, answer=8)), 2)


def test_training_variants_through_make_variants(sample):
    """exposure.paraphraser=formula: make_variants asks the registry for the formula paraphraser."""
    from zcp.simulate.data import make_variants

    items = [arithmark_to_item(r) for r in sample if r["stage"] >= 2][:5]
    variants, short = make_variants(items, 3, seed=0, paraphraser="formula")
    assert not short and len(variants) == 15
    assert all(v.metadata["paraphraser"] == "formula" and v.answer == it.answer
               for it, v in zip([i for i in items for _ in range(3)], variants, strict=True))
