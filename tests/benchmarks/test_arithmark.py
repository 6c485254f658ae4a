"""ArithMark: spec conformance of the generator, the isomorphic reference, and the MC evaluation."""

from __future__ import annotations

import functools
import json
import random
import re
import subprocess
import sys
from collections import Counter
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zcp.backends.base import ScoreResult
from zcp.benchmarks.arithmark import (
    arithmark_to_item,
    evaluate_expression,
    generate_arithmark,
    load_arithmark,
    make_record,
    validate_record,
)
from zcp.benchmarks.references.arithmark_matched import perturb_arithmark, special_case_reasons
from zcp.core.io import read_jsonl, write_jsonl
from zcp.core.items import Item
from zcp.errors import DataError
from zcp.validate.arithmark_eval import (
    evaluate_arithmark,
    format_arithmark_table,
    run_arithmark,
    summarize_arithmark,
)

ROOT = Path(__file__).resolve().parents[2]
SPEC_KEYS = ["id", "stage", "n_operands", "expression", "options", "answer_index", "answer"]


# ------------------------------------------------------------------ independent reference implementation


def split_expr(expr: str) -> tuple[list[int], list[str]]:
    toks = expr.split(" ")
    return [int(t) for t in toks[0::2]], toks[1::2]


def ltr_fraction(expr: str) -> Fraction:
    """Left-to-right value with Python Fractions (written independently of zcp)."""
    operands, operators = split_expr(expr)
    acc = Fraction(operands[0])
    for op, b in zip(operators, operands[1:], strict=True):
        if op == "/" and b == 0:
            raise ZeroDivisionError
        acc = {
            "+": lambda x, y: x + y,
            "-": lambda x, y: x - y,
            "*": lambda x, y: x * y,
            "/": lambda x, y: x / y,
        }[op](acc, Fraction(b))
    return acc


def spec_round(x: Fraction) -> int | float:
    """Round to 4 decimals via Decimal (half-even on the exact value); integral -> int."""
    with localcontext() as ctx:
        ctx.prec = 60
        d = (Decimal(x.numerator) / Decimal(x.denominator)).quantize(Decimal("0.0001"), ROUND_HALF_EVEN)
    return int(d) if d == d.to_integral_value() else float(d)


def exact(x: int | float) -> Fraction:
    return Fraction(x) if isinstance(x, int) else Fraction(repr(x))


def n_decimals(x: float) -> int:
    return max(0, -Decimal(repr(x)).as_tuple().exponent)


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return generate_arithmark()  # the defaults: 1,000 per stage, seed 0


# ----------------------------------------------------------------------------------- generator: spec


def test_defaults_give_1000_per_stage_with_exact_keys_and_ids(records):
    assert len(records) == 5000
    assert Counter(r["stage"] for r in records) == {s: 1000 for s in (1, 2, 3, 4, 5)}
    assert len({r["id"] for r in records}) == 5000
    for r in records:
        assert list(r) == SPEC_KEYS
        assert re.fullmatch(rf"math_s{r['stage']}_\d{{5}}", r["id"])
    assert records[0]["id"] == "math_s1_00000" and records[-1]["id"] == "math_s5_00999"


def test_operand_counts_range_and_operators(records):
    seen_ops: dict[int, set[str]] = {}
    all_operands = []
    for r in records:
        operands, operators = split_expr(r["expression"])
        assert r["n_operands"] == r["stage"] + 1 == len(operands) == len(operators) + 1
        assert all(-20 <= b <= 20 for b in operands)
        assert set(operators) <= {"+", "-", "*", "/"}
        seen_ops.setdefault(r["stage"], set()).update(operators)
        all_operands += operands
    assert all(ops == {"+", "-", "*", "/"} for ops in seen_ops.values())
    assert {-20, 0, 20} <= set(all_operands)  # the whole range is drawn, ends included
    # text format: single spaces, negative operands with a glued '-', e.g. "-13 * 3 + -1"
    assert all(re.fullmatch(r"-?\d+( [-+*/] -?\d+)+", r["expression"]) for r in records)


def test_answers_are_left_to_right_rounded_and_int_cast(records):
    differs_from_precedence = 0
    for r in records:
        expected = spec_round(ltr_fraction(r["expression"]))
        assert r["answer"] == expected and type(r["answer"]) is type(expected), r
        if isinstance(r["answer"], float):
            assert n_decimals(r["answer"]) <= 4 and exact(r["answer"]).denominator != 1
        try:
            if abs(eval(r["expression"]) - ltr_fraction(r["expression"])) > 1e-6:  # Python precedence
                differs_from_precedence += 1
        except ZeroDivisionError:
            differs_from_precedence += 1
    assert differs_from_precedence > 500  # precedence would give other answers: not what is generated
    kinds = Counter(type(r["answer"]).__name__ for r in records)
    assert kinds["int"] > 0 and kinds["float"] > 0


def test_no_division_by_zero_anywhere(records):
    for r in records:
        operands, operators = split_expr(r["expression"])
        assert all(b != 0 for op, b in zip(operators, operands[1:], strict=True) if op == "/")


def test_distractor_types_offsets_and_options(records):
    positions, signs = Counter(), Counter()
    for r in records:
        opts, a = r["options"], r["answer"]
        assert len(opts) == 4 and opts[r["answer_index"]] == a
        assert type(opts[r["answer_index"]]) is type(a)
        assert len({exact(o) for o in opts}) == 4  # distinct, none equals the answer twice
        distractors = [o for i, o in enumerate(opts) if i != r["answer_index"]]
        kinds = Counter(type(o).__name__ for o in distractors)
        assert kinds == ({"int": 2, "float": 1} if isinstance(a, int) else {"float": 2, "int": 1}), r
        for d in distractors:
            offset = exact(d) - exact(a)
            assert Fraction(1, 2) <= abs(offset) <= 15, r
            signs[offset > 0] += 1
            if isinstance(d, float):
                assert n_decimals(d) <= 4 and exact(d).denominator != 1
        positions[r["answer_index"]] += 1
    assert signs[True] > 4000 and signs[False] > 4000
    assert all(1000 < positions[i] < 1500 for i in range(4))  # shuffled: ~1250 each


def test_json_round_trip_keeps_values_and_types(tmp_path, records):
    write_jsonl(tmp_path / "am.jsonl", records[::50])
    back = list(read_jsonl(tmp_path / "am.jsonl"))
    assert back == records[::50]
    assert [[type(o) for o in r["options"]] for r in back] == [
        [type(o) for o in r["options"]] for r in records[::50]
    ]


def test_seeded_and_reproducible(tmp_path, records):
    a, b = generate_arithmark(40, seed=3), generate_arithmark(40, seed=3)
    write_jsonl(tmp_path / "a.jsonl", a)
    write_jsonl(tmp_path / "b.jsonl", b)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert a != generate_arithmark(40, seed=4)
    # a stage does not depend on which other stages are generated, nor on n
    assert generate_arithmark(40, seed=0, stages=(3,)) == [r for r in records if r["stage"] == 3][:40]


def test_evaluate_expression_examples_and_rules():
    assert evaluate_expression([-13, 3, -1], ["*", "+"]) == -40  # the spec's example
    assert evaluate_expression([7, 2, 4], ["-", "*"]) == 20  # left to right, not 7 - 8
    assert evaluate_expression([-6, 10, 2, 1], ["+", "/", "-"]) == 1
    assert evaluate_expression([1, 3], ["/"]) == 0.3333
    assert evaluate_expression([-2, 3], ["/"]) == -0.6667
    six = evaluate_expression([6, 4, 2], ["/", "*"])
    assert six == 3 and type(six) is int  # 6/4*2 = 3.0 is cast to int
    assert type(evaluate_expression([0, 5], ["/"])) is int  # 0 / 5 is fine
    # exact arithmetic: rounding sees the true value, not a binary float (half-even on ties)
    assert evaluate_expression([1, 20000], ["/"]) == 0 and evaluate_expression([3, 20000], ["/"]) == 0.0002
    with pytest.raises(ZeroDivisionError):
        evaluate_expression([5, 0], ["/"])
    with pytest.raises(ZeroDivisionError):
        evaluate_expression([3, 3, 0], ["-", "/"])  # 0 / 0 after a left-to-right step
    with pytest.raises(ValueError):
        evaluate_expression([1, 2], ["+", "+"])


def test_to_item_and_validation(tmp_path, records):
    r = records[2100]
    assert r["stage"] == 3
    item = arithmark_to_item(r)
    assert isinstance(item, Item) and item.id == r["id"]
    assert item.question == r["expression"] + " =" and item.answer == str(r["answer"])
    assert item.metadata["stage"] == r["stage"] and item.metadata["options"] == r["options"]

    bad = [
        dict(r),
        dict(r, answer=r["answer"] + 1),
        dict(r, expression="1 + 2 + 3 / 0"),
        {k: v for k, v in r.items() if k != "options"},
        dict(r, extra=1),
    ]
    write_jsonl(tmp_path / "bad.jsonl", bad)
    with pytest.raises(DataError) as e:
        load_arithmark(tmp_path / "bad.jsonl")
    assert e.value.row == 2 and e.value.field == "answer" and "bad.jsonl" in str(e.value)
    for rec, field in [
        (bad[2], "expression"),
        (bad[3], "options"),
        (bad[4], "extra"),
        (dict(r, answer_index=(r["answer_index"] + 1) % 4), "answer_index"),
        (dict(r, options=[*r["options"][:3], r["options"][0]]), "options"),
    ]:
        with pytest.raises(DataError) as e:
            validate_record(rec)
        assert e.value.field == field


# -------------------------------------------------------------------------------------------- reference


expressions = (
    st.integers(1, 5)
    .flatmap(
        lambda stage: st.tuples(
            st.just(stage),
            st.lists(st.integers(-20, 20), min_size=stage + 1, max_size=stage + 1),
            st.lists(st.sampled_from("+-*/"), min_size=stage, max_size=stage),
        )
    )
    .filter(lambda t: all(not (op == "/" and b == 0) for op, b in zip(t[2], t[1][1:], strict=True)))
)


@settings(max_examples=150, deadline=None)
@given(expressions, st.integers(0, 2**31))
def test_perturbation_properties(expr, seed):
    stage, operands, operators = expr
    rec = make_record(f"math_s{stage}_00007", stage, operands, operators, random.Random(seed))
    validate_record(rec)
    ref = perturb_arithmark(rec, seed)
    validate_record(ref, extra_keys=("original_id",))
    assert ref["original_id"] == rec["id"] and ref["id"] != rec["id"]
    assert list(ref)[:7] == SPEC_KEYS and ref["stage"] == stage and ref["n_operands"] == stage + 1
    new_operands, new_operators = split_expr(ref["expression"])
    assert new_operators == operators
    assert all(-20 <= b <= 20 for b in new_operands)
    assert all(b != 0 for op, b in zip(new_operators, new_operands[1:], strict=True) if op == "/")
    assert ref["answer"] == spec_round(ltr_fraction(ref["expression"]))  # recomputed
    assert exact(ref["answer"]) != exact(rec["answer"])
    if 0 not in operands:  # same sign, every operand changed (by a factor: the digit count may change)
        for old, new in zip(operands, new_operands, strict=True):
            assert new != old and (new > 0) == (old > 0)
    assert perturb_arithmark(rec, seed) == ref  # deterministic


def test_perturbation_of_a_degenerate_item_still_changes_the_answer():
    rec = make_record("math_s2_00000", 2, [7, -3, 0], ["+", "*"], random.Random(0))  # always 0 if 0 stays
    ref = perturb_arithmark(rec, 1)
    assert rec["answer"] == 0 and ref["answer"] != 0
    assert ref["answer"] == spec_round(ltr_fraction(ref["expression"]))


def test_perturbation_moves_the_answer_both_ways_and_keeps_its_sign_and_digits():
    rec = make_record("math_s2_00001", 2, [-6, 9, 4], ["*", "+"], random.Random(0))
    assert rec["answer"] == -50
    refs = [perturb_arithmark(rec, s) for s in range(60)]
    answers = [exact(r["answer"]) for r in refs]
    assert all(-99 <= a <= -10 for a in answers)  # negative, two digits
    assert 0.35 <= sum(abs(a) > 50 for a in answers) / len(answers) <= 0.65  # as often up as down
    for r in refs:  # operands keep their signs and stay within the spec's range
        operands = split_expr(r["expression"])[0]
        assert operands[0] < 0 < operands[1] and operands[2] > 0 and all(-20 <= b <= 20 for b in operands)


@pytest.fixture(scope="module")
def benchmark_refs(records) -> dict[int, dict]:
    """perturb_arithmark(records[i], 0) for every 25th record (200 of them; ~55 ms each): the magnitude test reads
    all of them, the structure test every other one (records[::50]), the same draws it made itself before."""
    return {i: perturb_arithmark(records[i], 0) for i in range(0, len(records), 25)}


def test_perturbation_keeps_magnitudes_on_the_benchmark(records, benchmark_refs):
    sample = records[::25]
    kept = answers_kept = nonzero = 0
    for i in range(0, len(records), 25):  # records[::25], each with perturb_arithmark(r, 0)
        r, ref = records[i], benchmark_refs[i]
        old, new = split_expr(r["expression"])[0], split_expr(ref["expression"])[0]
        # operands: same sign, within a factor 3 (a log-symmetric step, no longer a digit range)
        kept += all(
            n == 0 if o == 0 else (n > 0) == (o > 0) and 1 / 3 <= abs(n) / abs(o) <= 3
            for o, n in zip(old, new, strict=True)
        )
        a, b = exact(r["answer"]), exact(ref["answer"])
        if a != 0:  # the answer keeps its sign and the digits of its whole part
            nonzero += 1
            answers_kept += (a > 0) == (b > 0) and len(str(int(abs(a)))) == len(str(int(abs(b))))
    assert kept >= 0.97 * len(sample) and answers_kept >= 0.97 * nonzero


def _refs(operands, operators, n=40):
    return _cached_refs(tuple(operands), tuple(operators), n)


@functools.cache
def _cached_refs(operands, operators, n):
    """The 40 draws of one record, made once: two tests read those of [3, 12, 4] * + (they only read them)."""
    operands, operators = list(operands), list(operators)
    rec = make_record(f"math_s{len(operators)}_00042", len(operators), operands, operators, random.Random(0))
    return rec, [perturb_arithmark(rec, s) for s in range(n)]


def test_perturbation_keeps_equal_magnitudes():
    rec, refs = _refs([7, -7, 3], ["*", "+"])  # -46: the two 7s move together, each keeping its sign
    for ref in refs:
        a, b, c = split_expr(ref["expression"])[0]
        assert a == -b > 0 and a != 7 and c > 0 and c != 3
        assert ref["answer"] == spec_round(ltr_fraction(ref["expression"])) != rec["answer"]


def test_perturbation_keeps_round_operands_and_answers():
    _, refs = _refs([10, 7, 20], ["*", "+"])  # 90
    for ref in refs:
        a, b, c = split_expr(ref["expression"])[0]
        assert {a, c} <= {10, 20} and b % 10 != 0
        assert isinstance(ref["answer"], int) and ref["answer"] % 10 == 0 and 10 <= ref["answer"] <= 99
    _, refs = _refs([3, 12, 4], ["*", "+"])  # 40: few draws reach a round answer, most find one
    assert sum(r["answer"] % 10 == 0 and 10 <= r["answer"] <= 99 for r in refs) >= 0.8 * len(refs)
    _, refs = _refs([7, 2], ["/"])  # 3.5: a fraction keeps its one decimal place
    assert all(isinstance(r["answer"], float) and n_decimals(r["answer"]) == 1 for r in refs)


def test_perturbation_keeps_which_operands_the_answer_starts_like():
    _, refs = _refs([3, 12, 4], ["*", "+"])  # 40 starts like 4, the last operand, and like no other
    for ref in refs:
        a, b, c = split_expr(ref["expression"])[0]
        first = str(abs(int(ref["answer"])))[0]
        assert str(c)[0] == first and first not in (str(a)[0], str(b)[0])


def test_perturbation_structure_on_the_benchmark(records, benchmark_refs):
    from zcp.benchmarks.references.arithmark_matched import _structure
    from zcp.benchmarks.references.matching import lost_names

    lost = []
    for i in range(0, len(records), 50):  # records[::50], each with perturb_arithmark(r, 0)
        r, ref = records[i], benchmark_refs[i]
        old, new = _structure(*split_expr(r["expression"])), _structure(*split_expr(ref["expression"]))
        lost.append(lost_names(old.mismatch(new)))
    assert sum(not x for x in lost) >= 0.6 * len(lost)  # ~73% keep everything
    assert sum("equalities" in x for x in lost) <= 0.1 * len(lost)  # mostly answers 0 and x - x


def test_special_case_reasons():
    def reasons(operands, operators):
        return special_case_reasons(
            make_record("math_s1_00000", len(operators), operands, operators, random.Random(0))
        )

    assert [r.split(":")[0] for r in reasons([-11, -11], ["-"])] == [
        "answer 0",
        "operands -11, -11 (equal magnitudes) fix the answer at 0",
    ]
    assert reasons([5, -5], ["/"])[0].startswith("answer -1:") and len(reasons([5, -5], ["/"])) == 2
    assert reasons([4, 4, 2], ["*", "+"]) == [] and reasons([3, 4], ["*"]) == []
    assert special_case_reasons(
        arithmark_to_item(make_record("math_s1_00001", 1, [9, 8], ["-"], random.Random(0)))
    )


# ------------------------------------------------------------------------------------------- evaluation


class FakeBackend:
    """Deterministic backend: `fn(prompt_text, continuation) -> token logprobs`; records every call."""

    supports_prefill = False
    supports_logprobs = True

    def __init__(self, fn, name="fake"):
        self.fn, self.name, self.calls = fn, name, []

    def score(self, requests):
        self.calls.append(list(requests))
        return [ScoreResult(tuple(self.fn(r.prompt, r.continuation))) for r in requests]

    def generate(self, requests):  # pragma: no cover - not used by ArithMark
        raise NotImplementedError


def oracle(prompt, continuation):
    """Knows arithmetic: the true value gets high per-token likelihood, anything else low."""
    assert not prompt.chat and prompt.user.endswith(" =") and continuation.startswith(" ")
    value = spec_round(ltr_fraction(prompt.user[:-2]))
    good = exact(float(continuation) if "." in continuation else int(continuation)) == exact(value)
    return [-0.1 if good else -3.0] * len(continuation)


def length_biased(prompt, continuation):
    """Right answer: 5 tokens of -1 (sum -5, mean -1); wrong: 1 token of -2. Only the mean picks right."""
    value = spec_round(ltr_fraction(prompt.user[:-2]))
    return [-1.0] * 5 if continuation == f" {value}" else [-2.0]


@pytest.fixture(scope="module")
def small(records):
    return [r for r in records if int(r["id"][-5:]) < 60]  # 60 per stage


def test_oracle_backend_scores_100_percent_and_prompt_has_no_option_list(small):
    be = FakeBackend(oracle)
    res = evaluate_arithmark(be, small, batch_size=32)
    assert res["per_stage"] == {s: 1.0 for s in range(1, 6)} and res["average"] == 1.0
    assert res["n_per_stage"] == {s: 60 for s in range(1, 6)} and res["chance"] == 0.25 and res["n"] == 300
    reqs = [q for call in be.calls for q in call]
    assert len(reqs) == 4 * len(small) and all(len(call) <= 32 for call in be.calls)
    first = reqs[:4]
    assert all(q.prompt.user == small[0]["expression"] + " =" for q in first)
    assert [q.continuation for q in first] == [f" {o}" for o in small[0]["options"]]
    assert not any("A." in q.prompt.user or "\n" in q.prompt.user for q in reqs)


def test_scores_are_length_normalised(small):
    res = evaluate_arithmark(FakeBackend(length_biased), small)
    assert res["average"] == 1.0  # with summed log-likelihood the 1-token wrong options would win


def test_constant_backend_is_at_chance(records):
    res = evaluate_arithmark(FakeBackend(lambda p, c: [-1.0]), records[::5], batch_size=256)
    for s, acc in res["per_stage"].items():  # ties go to the first option
        stage = [r for r in records[::5] if r["stage"] == s]
        assert acc == sum(r["answer_index"] == 0 for r in stage) / len(stage)
    assert 0.2 < res["average"] < 0.3


def test_batch_size_does_not_change_results(small):
    def noisy(prompt, continuation):
        return [random.Random(prompt.user + continuation).uniform(-5, 0) for _ in continuation]

    runs = [evaluate_arithmark(FakeBackend(noisy), small[:40], batch_size=b) for b in (1, 7, 500)]
    assert runs[0] == runs[1] == runs[2]


def test_table_matches_the_specs_average_column():
    # Qwen2.5-3B's row in the spec: 97.30 75.60 63.90 55.40 53.50 -> Avg 69.14
    rows = [
        {"stage": s, "correct": i < c}
        for s, c in zip(range(1, 6), (973, 756, 639, 554, 535), strict=True)
        for i in range(1000)
    ]
    table = format_arithmark_table(summarize_arithmark(rows), "Qwen2.5-3B")
    lines = table.splitlines()
    assert lines[0] == "| Model | Stage 1 | Stage 2 | Stage 3 | Stage 4 | Stage 5 | Avg |"
    assert lines[2] == "| Qwen2.5-3B | 97.30% | 75.60% | 63.90% | 55.40% | 53.50% | 69.14% |"


# ----------------------------------------------------------------------------------------------- runner


def _cfg(tmp_path, **kw):
    return {
        "seed": 0,
        "n_per_stage": 6,
        "stages": [1, 2, 3, 4, 5],
        "data_path": None,
        "output_dir": str(tmp_path),
        "chunk_size": 8,
        "model": {"path": None, "name": "oracle"},
        "logger": {"mode": "disabled"},
        **kw,
    }


def test_run_writes_data_and_resumes_evaluation(tmp_path):
    summary = run_arithmark(_cfg(tmp_path / "data"))
    data = list(read_jsonl(tmp_path / "data" / "arithmark.jsonl"))
    assert summary["n_records"] == len(data) == 30 and data == generate_arithmark(6)

    out = tmp_path / "eval"
    be = FakeBackend(oracle)
    summary = run_arithmark(_cfg(out), backend=be)
    assert summary["average"] == 1.0 and (out / "table.md").read_text().startswith("| Model |")
    assert json.loads((out / "summary.json").read_text())["per_stage"] == {str(s): 1.0 for s in range(1, 6)}
    assert len(list(read_jsonl(out / "predictions.jsonl"))) == 30

    lines = (out / "predictions.jsonl").read_text().splitlines()
    (out / "predictions.jsonl").write_text("\n".join(lines[:25]) + "\n" + lines[25][:10])  # killed mid-write
    be2 = FakeBackend(oracle)
    again = run_arithmark(_cfg(out), backend=be2)
    assert sum(len(c) for c in be2.calls) == 4 * 5 and again["average"] == 1.0  # only the 5 missing rows

    # another seed gives other records under the same ids: nothing stale is reused
    be3 = FakeBackend(oracle)
    run_arithmark(_cfg(out, seed=1), backend=be3)
    assert sum(len(c) for c in be3.calls) == 4 * 30


def test_run_loads_an_existing_file(tmp_path):
    write_jsonl(tmp_path / "in.jsonl", generate_arithmark(3, seed=9))
    summary = run_arithmark(
        _cfg(tmp_path / "o", data_path=str(tmp_path / "in.jsonl")), backend=FakeBackend(length_biased)
    )
    assert summary["n"] == 15 and summary["average"] == 1.0


def test_hydra_entry_point(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "evaluate" / "run_arithmark.py"),
            f"hydra.run.dir={out}",
            "n_per_stage=4",
            "seed=5",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"WANDB_MODE": "disabled", "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert list(read_jsonl(out / "arithmark.jsonl")) == generate_arithmark(4, seed=5)


@pytest.mark.slow
def test_tiny_hf_model_end_to_end(tmp_path):
    pytest.importorskip("zcp.backends.hf")
    testing = pytest.importorskip("zcp.core.testing")
    recs = generate_arithmark(4, seed=0)
    tok = testing.train_tokenizer([f"{r['expression']} = {o}" for r in recs for o in r["options"]])
    model = testing.tiny_llama(tok)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    summary = run_arithmark(
        _cfg(tmp_path / "o", n_per_stage=4, model={"path": str(tmp_path / "m"), "device": "cpu"})
    )
    assert summary["n"] == 20 and set(summary["per_stage"]) == {1, 2, 3, 4, 5}
    assert (tmp_path / "o" / "table.md").read_text().count("%") == 6
