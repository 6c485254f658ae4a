"""The detection stage's inputs: items without any valid perturbation are left out and counted, not fatal."""

from __future__ import annotations

import pytest

from zcp.benchmarks.references.registry import reference_draws
from zcp.benchmarks.split import split_items
from zcp.errors import ConfigError
from zcp.simulate.base_model import benchmark_pool
from zcp.simulate.splits import check_reference_source, simulation_splits


def test_item_without_a_valid_perturbation_is_left_out_and_named():
    items = benchmark_pool(300)
    # the near perturbation of bench-00158 ({'a': 9, 'b': 12}) has no valid draw (found by a 300-item demo run)
    refs = reference_draws(items, 1, seed=0, method="wordproblem_matched", special_cases="keep")
    assert "bench-00158" not in refs
    assert len(refs) == 299 and all(len(v) >= 1 for v in refs.values())
    manifest = split_items(items, c_fraction=0.5, seed=0)
    cfg = {"seed": 0, "detect": {"m": 1, "seeds": [0], "reference": {"method": "wordproblem_matched",
                                                                      "special_cases": "keep"}}}
    groups, refs2, missing = simulation_splits(cfg, items, manifest)
    assert missing == ["bench-00158"]
    kept = [it.id for g in groups.values() for it in g]
    assert "bench-00158" not in kept and len(kept) == 299
    assert all(len(refs2[i]) >= 1 for i in kept)


def test_exact_references_exist_for_every_reserved_item_and_avoid_the_training_data():
    """The exact law draws from the values the shipped corpora do not hold (for 5 of 6 families: the other pool
    items' values); C's values (trained by a fine-tune) are never a reference."""
    from zcp.benchmarks.wordproblems import signature

    items = benchmark_pool(300)
    manifest = split_items(items, c_fraction=0.5, seed=0)
    cfg = {"seed": 0, "detect": {"m": 3, "seeds": [0]}}
    report: dict = {}
    _, refs, missing = simulation_splits(cfg, items, manifest, report=report)
    assert missing == [] and report["law"] == "exact"
    c_sigs = {signature(it) for it in manifest.subset(items, "C")}
    assert all(len(refs[it.id]) == 3 for it in items)
    assert not any(signature(r) in c_sigs for rs in refs.values() for r in rs)


def test_reference_source_checked_before_training(tmp_path):
    check_reference_source({"benchmark": {"source": "wordproblems"}})
    check_reference_source({"benchmark": {"source": "file"}, "detect": {"reference_path": "r.jsonl"}})
    plain = tmp_path / "items.jsonl"  # items without a program to perturb (the method is resolved on the items)
    plain.write_text('{"id": "a", "question": "Name the capital of France.", "answer": "Paris"}\n')
    with pytest.raises(ConfigError, match=r"detect\.reference_path"):
        check_reference_source({"benchmark": {"source": "file", "path": str(plain)}, "detect": {}})
