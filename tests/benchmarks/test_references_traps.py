"""Trap controls (MathTrap): trap variants built by program and validated, and the `trap` detector.

Construction: every word-problem family gets a valid trap kind (re-execution shows a negative or fractional
count, or a missing input), GSM8K rows from the fixture get traps whose chain no longer executes to a valid
answer or lacks a quantity it needs, and validation rejects a "trap" that still has an answer. Detector: a
tiny model fine-tuned to answer C's questions (never the trap texts) answers the memorised number on C's
traps, so the trap detector fires on C; on U (unseen) and on the untrained base model it does not.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

from zcp.benchmarks.references.gsm8k import extract_quantities, gsm8k_item, perturb_gsm8k
from zcp.benchmarks.references.registry import reference_draws
from zcp.benchmarks.references.traps import (
    NO_ANSWER,
    TRAP_KINDS,
    _wp_render,
    reference_traps,
    trap_variants,
    validate_trap,
)
from zcp.benchmarks.wordproblems import FAMILIES, generate_word_problems
from zcp.core.io import read_jsonl
from zcp.core.items import Item
from zcp.validate.baselines import FileData, JobInputs, baselines
from zcp.validate.detectors import get_detector, spec_of
from zcp.validate.detectors.base import DetectorContext
from zcp.validate.detectors.trap import classify_output

REPO = Path(__file__).resolve().parents[2]
GSM8K_ROWS = REPO / "tests" / "fixtures" / "gsm8k" / "test_head12.jsonl"
# With positive inputs a sum or a product never goes negative or fractional: these families only get
# "unanswerable" traps; the others get both kinds.
BOTH_KINDS = {"subtract", "three_step", "divide"}


def _steps(family: str, values: dict[str, int]) -> list[Fraction]:
    """The family's program executed here, independently of the module under test (KeyError: missing input)."""
    env = {k: Fraction(v) for k, v in values.items()}
    out = []
    for op, a, b, res in FAMILIES[family].steps:
        x, y = env[a], env[b]
        env[res] = {"+": x + y, "-": x - y, "*": x * y, "/": x / y}[op]
        out.append(env[res])
    return out


# ------------------------------------------------------------------------------------ word problems
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_word_problem_family_gets_validated_traps(family):
    items = generate_word_problems(4, seed=7, families=[family], id_prefix=family)
    kinds: Counter = Counter()
    for it in items:
        traps = trap_variants(it, 8, seed=0)
        assert traps, it.id
        assert len({t.question for t in traps}) == len(traps)
        assert trap_variants(it, 8, seed=0) == traps  # deterministic in the seed
        for j, t in enumerate(traps):
            meta = t.metadata
            assert t.id == f"{it.id}::trap{j}" and meta["original_id"] == it.id and t.answer == NO_ANSWER
            assert meta["trap_kind"] in TRAP_KINDS and meta["trap_reason"] and meta["original_answer"] == it.answer
            assert t.question != it.question
            assert validate_trap(it, t)
            kinds[meta["trap_kind"]] += 1
            if meta["trap_kind"] == "contradiction":
                # one input changed, and re-executing the program on the trap's values gives an impossible count
                changed = [n for n in it.metadata["values"] if meta["trap_values"][n] != it.metadata["values"][n]]
                assert len(changed) == 1 and str(meta["trap_values"][changed[0]]) in t.question
                results = _steps(family, meta["trap_values"])
                assert any(r < 0 or r.denominator != 1 for r in results), (t.question, results)
            else:
                # the deleted input is missing: the program cannot run, and its number is gone from the text
                assert meta["missing_input"] not in meta["trap_values"]
                with pytest.raises(KeyError):
                    _steps(family, meta["trap_values"])
                assert Counter(re.findall(r"\d+", t.question)) == Counter(str(v) for v in meta["trap_values"].values())
    assert kinds["unanswerable"] >= len(items)
    assert (kinds["contradiction"] > 0) == (family in BOTH_KINDS), kinds


def test_trap_kinds_alternate_and_k_bounds_the_count():
    it = generate_word_problems(1, seed=3, families=["three_step"])[0]
    traps = trap_variants(it, 4, seed=1)
    assert len(traps) == 4 and {t.metadata["trap_kind"] for t in traps} == set(TRAP_KINDS)
    assert [t.metadata["trap_kind"] for t in traps[:2]] != [traps[0].metadata["trap_kind"]] * 2
    add = generate_word_problems(1, seed=3, families=["add"])[0]
    assert len(trap_variants(add, 5, seed=0)) == 2  # two inputs to delete, no contradiction: fewer than k
    with pytest.raises(ValueError, match="k must be"):
        trap_variants(add, 0, seed=0)
    with pytest.raises(ValueError, match="no trap construction"):
        trap_variants(Item("x", "What is 2 + 2?", "4"), 2, seed=0)


def test_validation_rejects_a_trap_that_still_has_an_answer():
    it = generate_word_problems(1, seed=5, families=["subtract"])[0]
    traps = trap_variants(it, 8, seed=0)
    con = next(t for t in traps if t.metadata["trap_kind"] == "contradiction")
    una = next(t for t in traps if t.metadata["trap_kind"] == "unanswerable")
    # the original's own values: re-execution gives the original's answer
    same = dataclasses.replace(con, question=it.question,
                               metadata={**con.metadata, "trap_values": dict(it.metadata["values"])})
    with pytest.raises(ValueError, match="exactly one input"):
        validate_trap(it, same)
    a, b = it.metadata["values"]["a"], it.metadata["values"]["b"]
    valid = {"a": a + 1, "b": b}  # another valid item (a reference, say), rendered like a trap: not a trap
    fake = dataclasses.replace(con, question=_wp_render(it, valid),
                               metadata={**con.metadata, "trap_values": valid, "changed_input": "a"})
    with pytest.raises(ValueError, match="valid answer"):
        validate_trap(it, fake)
    # an "unanswerable" trap whose question still states the deleted number
    stated = dataclasses.replace(una, question=it.question)
    with pytest.raises(ValueError, match="question"):
        validate_trap(it, stated)
    with pytest.raises(ValueError, match="trap_kind"):
        validate_trap(it, dataclasses.replace(con, metadata={**con.metadata, "trap_kind": "paraphrase"}))


def test_reference_draws_get_their_own_traps():
    items = generate_word_problems(6, seed=2, id_prefix="r")
    refs = reference_draws(items, 2, seed=0)
    traps, reasons = reference_traps(refs, 2, seed=0)
    assert not reasons
    for draws in refs.values():
        for r in draws:
            assert traps[r.id] and all(t.metadata["original_id"] == r.id for t in traps[r.id])
            assert all(t.metadata["original_answer"] == r.answer for t in traps[r.id])
            assert all(validate_trap(r, t) for t in traps[r.id])


# -------------------------------------------------------------------------------------------- GSM8K
def test_gsm8k_traps_on_real_rows():
    items = [gsm8k_item(row, i) for i, row in enumerate(read_jsonl(GSM8K_ROWS))]
    got = {}
    for it in items:
        try:
            got[it.id] = trap_variants(it, 4, seed=0)
        except ValueError as e:
            assert "cannot be used" in str(e) or "no valid trap" in str(e)
    assert len(got) >= 9, sorted(got)
    kinds = Counter(t.metadata["trap_kind"] for ts in got.values() for t in ts)
    assert kinds["contradiction"] >= 4 and kinds["unanswerable"] >= 9, kinds
    by_id = {it.id: it for it in items}
    for oid, traps in got.items():
        it = by_id[oid]
        orig_numbers = Counter(q.value for q in extract_quantities(it.question))
        for t in traps:
            assert t.question != it.question and validate_trap(it, t)
            numbers = Counter(q.value for q in extract_quantities(t.question))
            if t.metadata["trap_kind"] == "unanswerable":
                removed = Fraction(t.metadata["removed"])
                assert removed not in numbers and numbers == Counter({v: c for v, c in orig_numbers.items()
                                                                      if v != removed})
                assert "a certain" in t.question.lower()
            else:
                changed = {Fraction(a): Fraction(b) for a, b in t.metadata["changed"].items()}
                assert numbers == Counter(changed.get(v, v) for v in orig_numbers.elements())
                assert "below zero" in t.metadata["trap_reason"]
    # Janet's ducks (row 1): eating more eggs than the ducks lay is one of its traps
    janet = got["gsm8k-00000"]
    assert any(t.metadata["trap_kind"] == "contradiction" and "16-3-4" in t.metadata["trap_reason"] for t in janet)


def test_gsm8k_validation_rejects_a_perturbation_and_a_stated_number():
    it = gsm8k_item(next(iter(read_jsonl(GSM8K_ROWS))), 0)
    ref = perturb_gsm8k(it, 1, seed=0).items[0]  # a valid isomorphic draw: its chain executes to its answer
    fake = Item(f"{it.id}::trap9", ref.question, NO_ANSWER,
                metadata={"trap_kind": "contradiction", "changed": ref.metadata["values"]})
    with pytest.raises(ValueError, match="valid answer"):
        validate_trap(it, fake)
    una = next(t for t in trap_variants(it, 4, seed=0) if t.metadata["trap_kind"] == "unanswerable")
    with pytest.raises(ValueError, match="still states"):
        validate_trap(it, dataclasses.replace(una, question=it.question))


# ------------------------------------------------------------------------------------ classification
def test_outputs_are_classified_apart():
    assert classify_output("3 + 4 = 7.\nThe final answer is: \\[ \\boxed{7} \\]", "7") == ("answer", "7")
    assert classify_output("so \\boxed{7.0}", "7")[0] == "answer"
    assert classify_output("\\boxed{9}", "7") == ("other", "9")
    assert classify_output("Giving away 9 of 5 is impossible. \\boxed{\\text{No solution}}", "7")[0] == "abstain"
    assert classify_output("\\boxed{}", "7") == ("abstain", "")
    assert classify_output("\\boxed{none}", "7")[0] == "abstain"
    assert classify_output("The number of friends is missing, so the answer cannot be determined.", "7") == (
        "abstain", None)
    assert classify_output("7 apples", "7") == ("malformed", None)  # no box: not counted as the answer


# ---------------------------------------------------------------------------------------- detector
@pytest.fixture(scope="module")
def memorised():
    """C (12 items) memorised by a tiny model trained on (question -> boxed answer) of C only; U unseen."""
    from zcp.backends.hf import HFBackend
    from zcp.core.testing import answer_only_completion, tiny_llama, train_memorizer, train_tokenizer

    items = generate_word_problems(24, seed=5, id_prefix="t")
    c, u = items[:12], items[12:]
    refs = reference_draws(items, 1, seed=0)
    tok = train_tokenizer([it.question + " " + answer_only_completion(it.answer) for it in items], vocab_size=400)
    base = tiny_llama(tok, hidden=64, layers=2, heads=4)
    model = train_memorizer(copy.deepcopy(base), tok, [(it.question, answer_only_completion(it.answer)) for it in c],
                            steps=80)
    files = {"data": FileData("data", "C", c, {it.id: refs[it.id] for it in c}),
             "u": FileData("u", "U", u, {it.id: refs[it.id] for it in u})}
    return {"files": files, "model": HFBackend(model, tok, gen_batch_size=256),
            "base": HFBackend(base, tok, gen_batch_size=256)}


def test_trap_detector_fires_on_a_memorising_model_and_not_on_clean(memorised, tmp_path):
    spec = spec_of("trap")
    assert spec.kind == "score" and spec.needs == frozenset({"generation"}) and spec.label == "Trap (MathTrap)"
    det = get_detector("trap", k=2, max_new_tokens=24)
    ctx = DetectorContext(seed=0, bootstrap_samples=2000)
    inputs = JobInputs(memorised["files"], "m", None, None, None, "trap")
    s = baselines(memorised["model"], [det], inputs, tmp_path / "memo", ctx, "fp")
    e = s["detectors"]["trap"]
    c, u = e["files"]["data"], e["files"]["u"]
    assert c["decision"] is True and u["decision"] is False, (c, u)
    # the memorised number on C's traps, not on the references' traps (each scored on its own answer)
    assert c["originals_answer"] >= 0.4 and c["references_answer"] <= 0.1, c
    assert u["originals_answer"] <= 0.1, u
    for f in (c, u):  # the four classes are counted apart and cover every trap
        for g in ("originals", "references"):
            assert f[f"{g}_traps"] == 24 and f[f"{g}_without_traps"] == 0
            assert sum(f[f"{g}_{cls}"] for cls in ("answer", "abstain", "other", "malformed")) == pytest.approx(1.0)
    assert e["auroc"] >= 0.7
    table = (tmp_path / "memo" / "baselines.md").read_text()
    assert "Trap (MathTrap)" in table and "originals_abstain" in table
    # the untrained base model (clean) answers no item's number on its traps: no decision fires
    clean = baselines(memorised["base"], [det], inputs, tmp_path / "clean", ctx, "fp-base")
    assert all(f["decision"] is False for f in clean["detectors"]["trap"]["files"].values())


def test_trap_params_are_typed_in_the_baselines_config():
    from configs import compose

    from zcp.errors import ConfigError
    from zcp.validate.baselines import DEFAULT_DETECTORS, check_config

    cfg = compose("baselines", "data.path=x.jsonl", "params.trap.k=2")
    assert "trap" in cfg.detectors and "trap" in DEFAULT_DETECTORS
    _, params = check_config(cfg)
    assert params["trap"] == {"k": 2, "max_new_tokens": 512}
    with pytest.raises(Exception, match=r"override|merging|not in struct"):
        compose("baselines", "params.trap.kk=2")
    with pytest.raises(ConfigError, match=r"params\.trap"):
        check_config(compose("baselines", "data.path=x.jsonl", "params.trap.k=0"))
