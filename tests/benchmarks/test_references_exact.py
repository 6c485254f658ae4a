"""Exact references: fresh draws from the generator's law are exchangeable with their originals."""

from __future__ import annotations

import numpy as np
import pytest

from zcp.benchmarks.references.exact import ExactWordProblems, word_problem_value_space
from zcp.benchmarks.references.registry import BuildContext, build_references, reference_draws
from zcp.benchmarks.wordproblems import generate_word_problems, signature
from zcp.probe.stats import paired_test


def test_draws_keep_family_template_wording_entities_and_change_the_values():
    items = generate_word_problems(12, seed=3)
    refs = reference_draws(items, 4, seed=1)
    for it in items:
        rs = refs[it.id]
        assert len(rs) == 4 and len({signature(r) for r in rs}) == 4
        for r in rs:
            m, o = r.metadata, it.metadata
            assert (
                m["family"] == o["family"]
                and m["template"] == o["template"]
                and m["entities"] == o["entities"]
            )
            assert m.get("rewording") == o.get("rewording") and signature(r) != signature(it)
            assert m["original_id"] == it.id and m["reference_law"] == "exact"


def test_excluded_and_benchmark_values_are_never_drawn():
    items = generate_word_problems(30, seed=4, families=["multiply"])
    space = word_problem_value_space(
        "multiply",
        type(items[0].metadata["limits"])
        and __import__("zcp.benchmarks.wordproblems", fromlist=["NumberRanges"]).NumberRanges(),
    )
    seen = {f"multiply:a={a},b={b}" for a, b in space[:20]}
    rs = build_references(
        items,
        "wordproblem",
        5,
        BuildContext(seed=0, benchmark=tuple(items), exclude=frozenset(seen), exclude_benchmark="true"),
    )
    bench = {signature(it) for it in items}
    drawn = {signature(r) for v in rs.refs.values() for r in v}
    assert not drawn & seen and not drawn & bench


def test_auto_keeps_draws_off_the_benchmark_only_where_the_family_has_room():
    """exclude_benchmark=auto: off the other items' values only where the values left hold every item's m draws
    apart (left >= items x m); in a crowded family (30 multiply items, 38 values left, 5 draws each) the draws may
    take other items' values (never the item's own nor an excluded one), in a roomy one (three_step) never."""
    from zcp.benchmarks.references.exact import drops_benchmark_values

    assert drops_benchmark_values("auto", 45, 9, 5) and not drops_benchmark_values("auto", 44, 9, 5)
    assert drops_benchmark_values("true", 0, 9, 5) and not drops_benchmark_values("FALSE", 10**6, 1, 1)
    crowded = generate_word_problems(30, seed=4, families=["multiply"])
    rs = build_references(crowded, "wordproblem", 5, BuildContext(seed=0, benchmark=tuple(crowded)))
    fam = rs.report["families"]["multiply"]
    assert fam["benchmark_values_excluded"] is False and fam["benchmark_items"] == 30
    bench = {signature(it) for it in crowded}
    assert {signature(r) for v in rs.refs.values() for r in v} & bench  # other items' values are drawn
    assert all(signature(r) != signature(it) for it in crowded for r in rs.refs[it.id])
    roomy = generate_word_problems(20, seed=4, families=["three_step"])
    rs = build_references(roomy, "wordproblem", 9, BuildContext(seed=0, benchmark=tuple(roomy)))
    assert rs.report["families"]["three_step"]["benchmark_values_excluded"] is True
    bench = {signature(it) for it in roomy}
    assert not {signature(r) for v in rs.refs.values() for r in v} & bench


def test_an_item_that_is_no_draw_of_the_generator_is_rejected_with_the_reason():
    it = generate_word_problems(1, seed=0, families=["add"])[0]
    it.metadata["values"] = {"a": 250, "b": 3}
    rs = ExactWordProblems().build([it], 3, BuildContext())
    assert not rs.refs and "not a valid draw" in rs.rejections[0]["reason"]


@pytest.mark.parametrize(
    ("families", "n", "exclude_benchmark", "lo", "hi", "sims"),
    [
        (None, 60, "auto", 0.0, 0.12, 80),  # every family, 10 items each
        (
            ["multiply"],
            40,
            "true",
            0.01,
            0.12,
            120,
        ),  # 40 of multiply's 88 value pairs, draws kept off the benchmark's
        (["multiply"], 40, "false", 0.0, 0.03, 120),  # draws may take other items' values: conservative
        (["multiply"], 40, "auto", 0.0, 0.03, 120),  # 48 values left < 40 x 3 draws: auto is "false"
    ],
)
def test_within_item_check_on_exact_draws_rejects_at_about_its_level(
    families, n, exclude_benchmark, lo, hi, sims
):
    """Over many generated benchmarks the two-sided within-item test of a feature of the answer (here: 'the
    answer has two or more digits', exact binary test) rejects at about 5% when the draws are exact.

    `sims` benchmarks per case. The every-family case (60 items, ~85 ms a benchmark) runs 80, not 120: it only
    bounds the rate from above (<= 0.12: <= 9 of 80), and a law whose rate is 0.25 still fails with probability
    0.998 (binomial; 0.9998 at 120), one at 0.2 with 0.97 (0.99), one at 0.15 with 0.78 (0.81). Drawing each
    item's references from the first half of its candidates gives 0.50 over the 80 (fails), from the first 70%
    0.125 (fails; 0.117 over 120, which passed); the exact law 0.0375 (0.033 over 120). The multiply cases keep
    120: they are cheap and the lower bound 0.01 needs them."""
    b = ExactWordProblems()
    ps = []
    for s in range(sims):
        items = generate_word_problems(n, seed=5000 + s, families=families)
        rs = b.build(
            items, 3, BuildContext(seed=s, benchmark=tuple(items), exclude_benchmark=exclude_benchmark)
        )
        x = [float(len(it.answer) >= 2) for it in items]
        y = [[float(len(r.answer) >= 2) for r in rs.refs[it.id]] for it in items]
        up = paired_test("acc", x, y).p_value
        down = paired_test("acc", [1 - v for v in x], [[1 - v for v in r] for r in y]).p_value
        ps.append(min(1.0, 2 * min(up, down)))
    rate = float(np.mean(np.array(ps) <= 0.05))
    assert lo <= rate <= hi, rate


def test_the_reserved_pool_passes_the_feature_check():
    from zcp.benchmarks.references.exclusions import exclusion_keys
    from zcp.simulate.base_model import benchmark_pool

    items = benchmark_pool(300)
    keys, report = exclusion_keys("auto", items)
    assert len(keys) > 12_000 and report[0]["source"].startswith("corpus:")
    rs = build_references(items, "wordproblem", 9, BuildContext(seed=0, benchmark=tuple(items), exclude=keys))
    assert len(rs.refs) == 300
    assert not any(signature(r) in keys for v in rs.refs.values() for r in v)  # nothing the corpora hold
    assert rs.report["exchangeability"]["min_p_bonferroni"] >= 0.01
