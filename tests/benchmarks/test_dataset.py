"""zcp.benchmarks.dataset.read_data, the one reader of a `data` config: every case the four jobs read
(generation, selection, invalid and repeated rows, references and variants with their formats, field maps and
pairing, missing references, the C/U groups of a manifest or of two files), each error naming its file, row,
field or key; and the four adapters (detect, baselines, run_build_data, the simulation) reading one config alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zcp.benchmarks.dataset import DataRead, read_data
from zcp.benchmarks.loaders import save_items
from zcp.benchmarks.split import Manifest, split_items
from zcp.core.items import Item
from zcp.errors import ConfigError, DataError

RELEASE = Path(__file__).resolve().parents[1] / "fixtures" / "zcp-release"
PARAPHRASED = RELEASE / "gsm8k_train_paraphrased_dataset_rows1-3.jsonl"  # original_index 4, 17, 26
QUESTION = "Tom has {a} apples and buys {b} more. How many apples does he have?"


def _items(n: int, prefix: str = "i", start: int = 0) -> list[Item]:
    return [Item(f"{prefix}{k}", QUESTION.format(a=k, b=k + 2), str(2 * k + 2)) for k in range(start, start + n)]


def _refs(items: list[Item], m: int = 1) -> list[Item]:
    """m perturbations per item, each with another answer."""
    return [Item(f"{it.id}::r{j}", it.question.replace("Tom has", f"Tom has {j + 1} +"), str(int(it.answer) + j + 1),
                 metadata={"original_id": it.id}) for it in items for j in range(m)]


def _files(tmp_path: Path, n: int = 6, with_ref: int | None = None, name: str = "d") -> dict:
    items = _items(n)
    save_items(tmp_path / f"{name}.jsonl", items)
    save_items(tmp_path / f"{name}_ref.jsonl", _refs(items[: n if with_ref is None else with_ref]))
    return {"name": name, "path": str(tmp_path / f"{name}.jsonl"), "reference_path": str(tmp_path / f"{name}_ref.jsonl")}


def _ids(items: list[Item]) -> list[str]:
    return [it.id for it in items]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ------------------------------------------------------------------------------------------ one file


def test_a_file_with_references_and_variants_is_one_group_named_after_the_data(tmp_path):
    cfg = _files(tmp_path)
    items = _items(6)
    para = [Item(f"{it.id}::p0", it.question + " Count them.", it.answer, metadata={"original_id": it.id})
            for it in items[:2]]
    save_items(tmp_path / "para.jsonl", para)
    read = read_data({**cfg, "variant_paths": {"paraphrased": str(tmp_path / "para.jsonl")}})
    assert isinstance(read, DataRead) and read.name == "d" and read.path == cfg["path"]
    assert _ids(read.items) == [f"i{k}" for k in range(6)]
    assert {k: _ids(v) for k, v in read.references.items()} == {f"i{k}": [f"i{k}::r0"] for k in range(6)}
    assert {k: _ids(v) for k, v in read.variants["paraphrased"].items()} == {"i0": ["i0::p0"], "i1": ["i1::p0"]}
    (g,) = read.groups.values()
    assert (g.name, g.path, _ids(g.items), g.reference_path, g.without_reference) == (
        "d", cfg["path"], _ids(read.items), cfg["reference_path"], [])
    assert read.issues == [] and read.benchmark.ids == _ids(items)


def test_the_group_is_the_file_stem_when_the_data_has_no_name(tmp_path):
    cfg = _files(tmp_path, name="bench")
    assert list(read_data({**cfg, "name": ""}).groups) == ["bench"]


def test_limit_and_sample_select_before_pairing(tmp_path):
    cfg = _files(tmp_path, n=10)
    first = read_data({**cfg, "limit": 3})
    assert _ids(first.items) == ["i0", "i1", "i2"] and sorted(first.references) == ["i0", "i1", "i2"]
    drawn = [_ids(read_data({**cfg, "sample": 4, "sample_seed": s}).items) for s in (0, 0, 1)]
    assert drawn[0] == drawn[1] != drawn[2] and all(len(d) == 4 for d in drawn)
    assert all(d == sorted(d, key=lambda i: int(i[1:])) for d in drawn)  # kept in file order
    assert set(read_data({**cfg, "sample": 4, "sample_seed": 0}).references) == set(drawn[0])


def test_invalid_rows_fail_naming_file_row_and_field_or_are_skipped(tmp_path):
    path = _write(tmp_path / "bad.jsonl", [{"id": "a", "question": "1+1?", "answer": "2"},
                                           {"id": "b", "question": "2+2?"}, {"id": "c", "question": "3+3?", "answer": "6"}])
    with pytest.raises(DataError, match=rf"file {path}, row 2, field 'answer'"):
        read_data({"path": str(path)})
    read = read_data({"path": str(path), "on_invalid": "skip"})
    assert _ids(read.items) == ["a", "c"]
    assert [(x["row"], x["field"]) for x in read.issues] == [(2, "answer")] and read.skipped == read.issues


def test_a_repeated_question_is_refused_naming_the_key_or_merged(tmp_path):
    items = _items(3)
    save_items(tmp_path / "d.jsonl", [*items, Item("copy", items[1].question, items[1].answer)])
    with pytest.raises(DataError, match=r"ids i1 = copy\); set data\.on_duplicate=merge"):
        read_data({"path": str(tmp_path / "d.jsonl")})
    with pytest.raises(DataError, match=r"set benchmark\.on_duplicate=merge"):
        read_data({"path": str(tmp_path / "d.jsonl")}, duplicate_key="benchmark.on_duplicate")
    read = read_data({"path": str(tmp_path / "d.jsonl"), "on_duplicate": "merge"})
    assert _ids(read.items) == ["i0", "i1", "i2"] and [x["id"] for x in read.issues] == ["copy"]


def test_path_is_required_unless_the_format_generates(tmp_path):
    with pytest.raises(ConfigError, match=r"data\.path is required for data\.format=items"):
        read_data({"format": "items"})


# ------------------------------------------------------------------------------------------ generated items


def test_word_problems_are_generated_from_the_generator_seed_else_the_run_seed():
    a = read_data({"format": "wordproblems", "n": 8}, seed=1, items_only=True)
    assert len(a.items) == 8 and a.path is None and a.name == "custom"
    assert _ids(read_data({"format": "wordproblems", "n": 8}, seed=1).items) == _ids(a.items)
    other = read_data({"format": "wordproblems", "n": 8}, seed=2).items
    assert [it.question for it in other] != [it.question for it in a.items]
    pinned = read_data({"format": "wordproblems", "n": 8, "generator_seed": 1}, seed=2).items
    assert [it.question for it in pinned] == [it.question for it in a.items]
    # seed None: data.sample_seed (the run's seed in a composed job)
    assert [it.question for it in read_data({"format": "wordproblems", "n": 8, "sample_seed": 1}).items] == \
        [it.question for it in a.items]
    assert _ids(read_data({"format": "wordproblems", "n": 8, "limit": 3}, seed=1).items) == _ids(a.items)[:3]
    drawn = read_data({"format": "wordproblems", "n": 8, "sample": 3}, seed=1).items
    assert len(drawn) == 3 and set(_ids(drawn)) <= set(_ids(a.items))


def test_arithmark_is_generated_or_read_from_records_checked_for_repeats(tmp_path):
    from zcp.benchmarks.arithmark import generate_arithmark
    from zcp.core.io import write_jsonl

    gen = read_data({"format": "arithmark", "n_per_stage": 2}, seed=0)
    assert len(gen.items) == 10 and gen.items[0].metadata["source"] == "arithmark" and gen.path is None
    records = generate_arithmark(3, seed=2, stages=(1,))
    write_jsonl(tmp_path / "am.jsonl", [*records, {**records[0], "id": "math_s1_copy"}])
    cfg = {"format": "arithmark", "path": str(tmp_path / "am.jsonl")}
    with pytest.raises(DataError, match=rf"file {tmp_path / 'am.jsonl'}: 1 question\(s\).*math_s1_00000 = math_s1_copy"):
        read_data(cfg)
    merged = read_data({**cfg, "on_duplicate": "merge"})
    assert _ids(merged.items) == [r["id"] for r in records] and merged.path == str(tmp_path / "am.jsonl")
    assert [x["id"] for x in merged.skipped] == ["math_s1_copy"]


def test_generated_items_pair_with_a_reference_file(tmp_path):
    items = read_data({"format": "wordproblems", "n": 4}, seed=3).items
    save_items(tmp_path / "ref.jsonl", _refs(items))
    read = read_data({"format": "wordproblems", "n": 4, "reference_path": str(tmp_path / "ref.jsonl")}, seed=3)
    assert sorted(read.references) == sorted(_ids(items))


# ------------------------------------------------------------------------------------------ references


def test_missing_reference_fails_naming_the_key_or_is_listed(tmp_path):
    cfg = _files(tmp_path, n=5, with_ref=3)
    with pytest.raises(DataError, match=r"2 original item\(s\) have no reference row: i3, i4 \(of 5 selected\); "
                                        r"set data\.missing_reference=skip"):
        read_data(cfg)
    read = read_data({**cfg, "missing_reference": "skip"})
    (g,) = read.groups.values()
    assert g.without_reference == ["i3", "i4"] and _ids(g.with_reference(read.references)) == ["i0", "i1", "i2"]
    assert read.issues == [{"file": cfg["reference_path"], "id": i, "reason": "no reference row"} for i in ("i3", "i4")]


def test_pair_by_position_and_the_field_maps_of_data_and_reference(tmp_path):
    data = _write(tmp_path / "d.jsonl", [{"uid": f"u{k}", "problem": f"What is {k} + 2?", "final": str(k + 2)}
                                         for k in range(3)])
    ref = _write(tmp_path / "r.jsonl", [{"pos": k, "q": f"What is {k} + 3?", "a": str(k + 3)} for k in (2, 0, 1)])
    fields = {"id": "uid", "question": "problem", "answer": "final"}
    base = {"path": str(data), "format": "jsonl", "fields": fields, "reference_path": str(ref),
            "reference_format": "jsonl", "pair_by": "position"}
    with pytest.raises(DataError, match=rf"file {ref}, row 1, field 'problem': missing"):
        read_data(base)  # a reference file in the data's format and no map of its own: the data's field names
    read = read_data({**base, "reference_fields": {"original_index": "pos", "question": "q", "answer": "a"}})
    assert _ids(read.items) == ["u0", "u1", "u2"]
    assert {k: v[0].answer for k, v in read.references.items()} == {"u0": "3", "u1": "4", "u2": "5"}
    with pytest.raises(DataError, match=r"field 'data\.reference_fields': unknown key 'nope'"):
        read_data({**base, "reference_fields": {"nope": "x"}})


def test_a_reference_row_naming_an_item_not_in_the_file_fails_naming_file_and_row(tmp_path):
    cfg = _files(tmp_path, n=3)
    save_items(tmp_path / "d_ref.jsonl", [*_refs(_items(3)), Item("z::r0", "What?", "1", metadata={"original_id": "z"})])
    with pytest.raises(DataError, match=rf"file {tmp_path / 'd_ref.jsonl'}, row 4, field 'original_id': names "
                                        "original 'z'"):
        read_data(cfg)


def test_release_variants_read_with_the_data_format_and_the_variant_prefix():
    cfg = {"path": str(PARAPHRASED), "format": "zcp_release", "variant": "original",
           "reference_path": str(PARAPHRASED), "reference_format": "zcp_release", "reference_variant": "paraphrased",
           "variant_paths": {"paraphrased": str(PARAPHRASED)}}
    read = read_data(cfg)
    para = read.variants["paraphrased"]
    assert [para[it.id][0].answer for it in read.items] == ["624", "43", "400"]
    assert [para[it.id][0].question[:20] for it in read.items] == [
        "Throughout each week", "A cargo trailer hold", "Sam ends up marooned"]
    assert len([x for x in read.issues if "warning" in x]) == 3 and not read.skipped  # answers shared: warned


# ------------------------------------------------------------------------------------------ groups


def test_a_manifest_splits_the_selected_items_in_its_order_and_its_ids_are_checked(tmp_path):
    cfg = _files(tmp_path, n=10)
    manifest = split_items(_items(10), seed=1)
    manifest.save(tmp_path / "manifest.json")
    read = read_data({**cfg, "manifest": str(tmp_path / "manifest.json"), "limit": 6})
    assert list(read.groups) == ["C", "U"]
    c, u = read.groups["C"], read.groups["U"]
    assert _ids(c.items) == [i for i in manifest.c_ids if i in set(_ids(read.items))]
    assert _ids(u.items) == [i for i in manifest.u_ids if i in set(_ids(read.items))]
    assert sorted(_ids(c.items) + _ids(u.items)) == sorted(_ids(read.items)) and c.path == f"{cfg['path']}#C"
    Manifest(c_ids=["i0", "nope"], u_ids=["i1"], seed=0, c_fraction=0.5).save(tmp_path / "bad.json")
    with pytest.raises(DataError, match=rf"file {tmp_path / 'bad.json'}, field 'id': 1 id\(s\) of split C are not "
                                        r"in data file .*, first 'nope'"):
        read_data({**cfg, "manifest": str(tmp_path / "bad.json")})


def test_a_u_file_is_read_as_c_and_paired_with_its_own_references(tmp_path):
    c, u = _items(3, "c"), _items(3, "u", start=10)
    save_items(tmp_path / "c.jsonl", c)
    save_items(tmp_path / "u.jsonl", u)
    save_items(tmp_path / "u_ref.jsonl", _refs(u, m=2))
    save_items(tmp_path / "para.jsonl", [Item(f"{it.id}::p", it.question + " Now.", it.answer,
                                              metadata={"original_id": it.id}) for it in (c[0], u[0])])
    read = read_data({"path": str(tmp_path / "c.jsonl"), "u_path": str(tmp_path / "u.jsonl"),
                      "u_reference_path": str(tmp_path / "u_ref.jsonl"), "limit": 2,
                      "variant_paths": {"paraphrased": str(tmp_path / "para.jsonl")}})
    assert {k: _ids(g.items) for k, g in read.groups.items()} == {"C": ["c0", "c1"], "U": ["u10", "u11"]}
    assert read.groups["U"].path == str(tmp_path / "u.jsonl") and read.groups["C"].reference_path is None
    assert sorted(read.references) == ["u10", "u11"] and all(len(v) == 2 for v in read.references.values())
    assert sorted(read.variants["paraphrased"]) == ["c0", "u10"]  # variants pair to C's and U's items alike
    assert _ids(read.items) == ["c0", "c1", "u10", "u11"]


def test_c_and_u_files_must_be_disjoint_in_ids_and_questions(tmp_path):
    c = _items(3, "c")
    save_items(tmp_path / "c.jsonl", c)
    base = {"path": str(tmp_path / "c.jsonl"), "u_path": str(tmp_path / "u.jsonl")}
    save_items(tmp_path / "u.jsonl", [Item("c1", "Something else?", "1")])
    with pytest.raises(DataError, match=r"field 'id': U shares 1 of its 1 item id\(s\) with C .*first 'c1'"):
        read_data(base)
    save_items(tmp_path / "u.jsonl", [Item("u0", c[0].question, c[0].answer), *_items(2, "u", start=5)])
    with pytest.raises(DataError, match=r"\(U\): 1 question\(s\) appear more than once \(ids c0 = u0\)"):
        read_data(base)
    read = read_data({**base, "on_duplicate": "merge"})
    assert _ids(read.groups["U"].items) == ["u5", "u6"] and [x["id"] for x in read.issues] == ["u0"]
    save_items(tmp_path / "u.jsonl", [Item("u0", c[0].question, c[0].answer)])
    with pytest.raises(DataError, match=r"field 'question': no item of U is left"):
        read_data({**base, "on_duplicate": "merge"})


def test_keys_that_contradict_each_other_fail_before_any_file_is_read(tmp_path):
    missing = str(tmp_path / "none.jsonl")
    with pytest.raises(ConfigError, match=r"data\.manifest and data\.u_path: give one way to name U"):
        read_data({"path": missing, "manifest": missing, "u_path": missing})
    with pytest.raises(ConfigError, match=r"data\.u_reference_path is set without data\.u_path"):
        read_data({"path": missing, "u_reference_path": missing})


def test_items_only_reads_no_reference_variant_manifest_or_u_file(tmp_path):
    cfg = _files(tmp_path, n=4)
    missing = str(tmp_path / "none.jsonl")
    read = read_data({**cfg, "reference_path": missing, "manifest": missing, "u_path": missing,
                      "variant_paths": {"paraphrased": missing}}, items_only=True)
    assert _ids(read.items) == ["i0", "i1", "i2", "i3"] and not read.references and not read.variants
    assert list(read.groups) == ["d"]


# ------------------------------------------------------------------------------------------ the four adapters


def test_the_four_jobs_read_one_data_config_alike(tmp_path):
    """detect, baselines, run_build_data and the simulation (benchmark.source=data) select the same items from
    one `data` config (field map, on_invalid=skip, limit), and the simulation's reference keys follow them."""
    from omegaconf import OmegaConf

    from zcp.benchmarks.build import load_dataset_items
    from zcp.probe.datasets import load_datasets
    from zcp.simulate.benchmark import load_benchmark
    from zcp.simulate.splits import benchmark_keys
    from zcp.validate.baselines_inputs import inputs_from_data

    rows = [{"uid": f"u{k}", "problem": QUESTION.format(a=k, b=1), "final": str(k + 1)} for k in range(6)]
    rows[1] = {"uid": "u1", "problem": "no answer here"}
    data = _write(tmp_path / "d.jsonl", rows)
    ref = _write(tmp_path / "r.jsonl", [{"id": f"u{k}::r", "original_id": f"u{k}", "question": f"{k} + 9?",
                                         "answer": str(k + 9)} for k in range(6)])
    d = {"name": "d", "path": str(data), "format": "jsonl", "on_invalid": "skip", "limit": 3,
         "fields": {"id": "uid", "question": "problem", "answer": "final"},
         "reference_path": str(ref), "reference_format": "items"}
    want = ["u0", "u2", "u3"]
    (ds,), issues = load_datasets(OmegaConf.create(d))
    assert _ids(ds.originals) == want and sorted(ds.reference) == want and issues[0]["row"] == 2
    inputs = inputs_from_data(OmegaConf.create({"data": d, "model": {"path": "m"}}))
    assert _ids(inputs.files["data"].originals) == want and inputs.issues == issues and inputs.name == "d"
    items, skipped, source = load_dataset_items(d, 0)
    assert _ids(items) == want and skipped == issues[:1] and source == str(data.resolve())
    sim = {"benchmark": {"source": "data"}, "data": d}
    assert _ids(load_benchmark(sim)) == want
    keys = benchmark_keys(sim, load_benchmark(sim))
    assert keys.ids == ["u0", "u1", "u2", "u3", "u4", "u5"] and _ids(keys.items) == want


def test_detect_needs_a_reference_set_for_every_split(tmp_path):
    from zcp.probe.datasets import load_datasets

    cfg = _files(tmp_path, n=3)
    with pytest.raises(ConfigError, match=r"data\.reference_path is required"):
        load_datasets({**cfg, "reference_path": None})
    save_items(tmp_path / "u.jsonl", _items(2, "u", start=20))
    with pytest.raises(ConfigError, match=r"data\.u_path needs data\.u_reference_path"):
        load_datasets({**cfg, "u_path": str(tmp_path / "u.jsonl")})
    save_items(tmp_path / "u_ref.jsonl", _refs(_items(2, "u", start=20)))
    out, _ = load_datasets({**cfg, "u_path": str(tmp_path / "u.jsonl"), "u_reference_path": str(tmp_path / "u_ref.jsonl")})
    assert [(d.split, _ids(d.originals), sorted(d.reference)) for d in out] == [
        ("C", ["i0", "i1", "i2"], ["i0", "i1", "i2"]), ("U", ["u20", "u21"], ["u20", "u21"])]


def test_the_simulation_reads_benchmark_limit_or_the_data_selection_not_both(tmp_path):
    from zcp.simulate.benchmark import load_benchmark

    cfg = _files(tmp_path, n=5)
    assert _ids(load_benchmark({"benchmark": {"source": "data", "limit": 2}, "data": cfg})) == ["i0", "i1"]
    assert _ids(load_benchmark({"benchmark": {"source": "data"}, "data": {**cfg, "limit": 3}})) == ["i0", "i1", "i2"]
    with pytest.raises(ConfigError, match=r"benchmark\.limit=2 and data\.sample both select"):
        load_benchmark({"benchmark": {"source": "data", "limit": 2}, "data": {**cfg, "sample": 3}})
    with pytest.raises(ConfigError, match=r"data\.path is required for benchmark\.source=data"):
        load_benchmark({"benchmark": {"source": "data"}, "data": {"format": "wordproblems"}})
