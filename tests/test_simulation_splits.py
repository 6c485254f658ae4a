"""The detection stage's inputs: items without any valid perturbation are left out and counted, not fatal."""

from __future__ import annotations

import pytest

from zcp.config import ConfigError
from zcp.data.split import split_items
from zcp.modeling import benchmark_pool
from zcp.simulate import check_reference_source, simulation_splits, word_problem_references


def test_item_without_a_valid_perturbation_is_left_out_and_named():
    items = benchmark_pool(300)
    # bench-00158's program ({'a': 9, 'b': 12}) admits no valid perturbation (found by a 300-item demo run)
    refs = word_problem_references(items, 1, seed=0)
    assert "bench-00158" not in refs
    assert len(refs) == 299 and all(len(v) >= 1 for v in refs.values())
    manifest = split_items(items, c_fraction=0.5, seed=0)
    cfg = {"seed": 0, "detect": {"m": 1, "seeds": [0]}}
    groups, refs2, missing = simulation_splits(cfg, items, manifest)
    assert missing == ["bench-00158"]
    kept = [it.id for g in groups.values() for it in g]
    assert "bench-00158" not in kept and len(kept) == 299
    assert all(len(refs2[i]) >= 1 for i in kept)


def test_reference_source_checked_before_training():
    check_reference_source({"benchmark": {"source": "wordproblems"}})
    check_reference_source({"benchmark": {"source": "file"}, "detect": {"reference_path": "r.jsonl"}})
    with pytest.raises(ConfigError, match=r"detect\.reference_path"):
        check_reference_source({"benchmark": {"source": "file"}, "detect": {}})
