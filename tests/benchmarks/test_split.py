"""C/U split: evenness, stratification, determinism, manifest round trip and bad-manifest errors."""

from __future__ import annotations

import json
import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zcp
from zcp.benchmarks.arithmark import arithmark_to_item, generate_arithmark
from zcp.benchmarks.split import Manifest, split_items
from zcp.core.io import write_jsonl
from zcp.core.items import Item
from zcp.errors import DataError


def make_items(sizes: dict[str, int]) -> list[Item]:
    return [Item(id=f"{fam}-{i}", question="q", answer="1", metadata={"family": fam, "difficulty": i % 3})
            for fam, n in sizes.items() for i in range(n)]


ITEMS = make_items({"add": 11, "mul": 8, "two_step": 5, "three_step": 1})


def stratum_counts(m: Manifest, items: list[Item], key: str) -> dict[str, Counter]:
    by_id = {it.id: str(it.metadata[key]) for it in items}
    out: dict[str, Counter] = {}
    for which, ids in (("C", m.c_ids), ("U", m.u_ids)):
        for i in ids:
            out.setdefault(by_id[i], Counter())[which] += 1
    return out


def test_even_unstratified_split_partitions_the_items():
    m = split_items(ITEMS, seed=0)
    assert abs(len(m.c_ids) - len(m.u_ids)) <= 1
    assert set(m.c_ids).isdisjoint(m.u_ids) and set(m.c_ids) | set(m.u_ids) == {it.id for it in ITEMS}
    assert m.seed == 0 and m.c_fraction == 0.5 and m.stratify_by is None
    assert m.created_by == f"zcp {zcp.__version__}"


@pytest.mark.parametrize("key", ["family", "difficulty"])
def test_stratified_split_is_even_in_every_stratum(key):
    m = split_items(ITEMS, seed=1, stratify_by=key)
    counts = stratum_counts(m, ITEMS, key)
    assert all(abs(c["C"] - c["U"]) <= 1 for c in counts.values())
    assert abs(len(m.c_ids) - len(m.u_ids)) <= 1  # odd strata do not all push the same way
    assert m.strata == {k: {"C": c["C"], "U": c["U"]} for k, c in counts.items()}


def test_stratified_by_stage_on_arithmark():
    items = [arithmark_to_item(r) for r in generate_arithmark(7, seed=0)]
    m = split_items(items, seed=0, stratify_by="stage")
    assert m.strata == {str(s): m.strata[str(s)] for s in range(1, 6)}
    assert all(sorted(c.values()) == [3, 4] for c in m.strata.values())
    assert abs(len(m.c_ids) - len(m.u_ids)) == 1  # 35 items


def test_split_is_seeded_and_independent_of_input_order():
    a = split_items(ITEMS, seed=7, stratify_by="family")
    shuffled = ITEMS[:]
    random.Random(0).shuffle(shuffled)
    b = split_items(shuffled, seed=7, stratify_by="family")
    assert set(a.c_ids) == set(b.c_ids)
    assert a == split_items(ITEMS, seed=7, stratify_by="family")
    others = {frozenset(split_items(ITEMS, seed=s, stratify_by="family").c_ids) for s in range(8, 14)}
    assert len(others | {frozenset(a.c_ids)}) > 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=6), st.floats(0.05, 0.95), st.integers(0, 10**6))
def test_any_fraction_gives_floor_or_ceil_per_stratum(sizes, frac, seed):
    items = make_items({f"f{i}": n for i, n in enumerate(sizes)})
    m = split_items(items, seed=seed, c_fraction=frac, stratify_by="family")
    for k, c in stratum_counts(m, items, "family").items():
        n = c["C"] + c["U"]
        assert c["C"] in (math.floor(frac * n), math.ceil(frac * n)), (k, c, frac)
    assert len(m.c_ids) == math.floor(frac * len(items) + 0.5)


def test_manifest_round_trip_and_source_hash(tmp_path):
    src = tmp_path / "items.jsonl"
    write_jsonl(src, [it.to_dict() for it in ITEMS])
    m = split_items(ITEMS, seed=3, stratify_by="family", source_path=src)
    assert m.source_path == str(src) and len(m.source_sha256) == 64
    m.save(tmp_path / "split.json")
    d = json.loads((tmp_path / "split.json").read_text())
    assert d["n_c"] == len(m.c_ids) and d["format"] == "zcp.split_manifest/1"
    back = Manifest.load(tmp_path / "split.json")
    assert back == m
    back.check_source(src)
    with src.open("a") as f:
        f.write("\n")
    with pytest.raises(DataError) as e:
        back.check_source(src)
    assert e.value.field == "source_sha256"


def test_subset_and_labels():
    m = split_items(ITEMS, seed=2)
    c, u = m.subset(ITEMS, "C"), m.subset(ITEMS[::-1], "U")
    assert [it.id for it in c] == m.c_ids and [it.id for it in u] == m.u_ids
    assert all(m.label(it.id) == "C" for it in c) and m.labels()[u[0].id] == "U"
    with pytest.raises(DataError) as e:
        m.subset(ITEMS[1:], "C" if ITEMS[0].id in m.c_ids else "U")
    assert ITEMS[0].id in str(e.value) and e.value.field == "id"
    with pytest.raises(DataError):
        m.subset([*ITEMS, ITEMS[0]], "C")
    with pytest.raises(ValueError):
        m.subset(ITEMS, "X")
    with pytest.raises(KeyError):
        m.label("nope")


def test_bad_input_to_split():
    with pytest.raises(DataError) as e:
        split_items(ITEMS, seed=0, stratify_by="stage")
    assert e.value.field == "metadata.stage"
    with pytest.raises(DataError):
        split_items([*ITEMS, ITEMS[0]], seed=0)
    with pytest.raises(ValueError):
        split_items(ITEMS, seed=0, c_fraction=1.0)


@pytest.mark.parametrize(("edit", "field"), [
    (lambda d: d.pop("c_ids"), "c_ids"),
    (lambda d: d.update(u_ids=[1, 2]), "u_ids"),
    (lambda d: d.update(u_ids=d["u_ids"] + d["c_ids"][:1]), "u_ids"),
    (lambda d: d.update(c_ids=d["c_ids"] + d["c_ids"][:1]), "c_ids"),
    (lambda d: d.update(seed="0"), "seed"),
    (lambda d: d.update(c_fraction=1.5), "c_fraction"),
    (lambda d: d.update(n_c=0), "n_c"),
    (lambda d: d.update(format="other/9"), "format"),
    (lambda d: d.update(source_sha256=5), "source_sha256"),
])
def test_bad_manifests_name_file_and_field(tmp_path, edit, field):
    m = split_items(ITEMS, seed=0)
    d = m.to_dict()
    edit(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(DataError) as e:
        Manifest.load(path)
    assert e.value.field == field and "bad.json" in str(e.value)


def test_unreadable_manifest(tmp_path):
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(DataError, match=r"x\.json"):
        Manifest.load(tmp_path / "x.json")
    with pytest.raises(DataError, match=r"missing\.json"):
        Manifest.load(tmp_path / "missing.json")
