"""Duplicated items are not independent evidence: a question repeated under another id is refused
(`on_duplicate=error`, the ids named) or counted once (`merge`, the copies listed) on every path that loads a
benchmark; copies with different gold answers fail under both policies; a reference row sharing its
original's answer is warned about per row."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from configs import compose
from fakes import FakeBackend
from omegaconf import OmegaConf

from zcp.benchmarks.loaders import check_duplicates, load_benchmark, save_items
from zcp.core.items import Item
from zcp.errors import ConfigError, DataError


def _items(n: int, prefix: str = "a") -> list[Item]:
    return [Item(f"{prefix}{k}", f"Tom has {k} apples and buys {k + 2} more. How many apples?", str(2 * k + 2))
            for k in range(n)]


def _refs(items: list[Item]) -> list[Item]:
    """One perturbation per item, its answer different from the original's."""
    return [Item(f"{it.id}::r0", it.question.replace("Tom has", "Tom has 1 +"), str(int(it.answer) + 1),
                 metadata={"original_id": it.id}) for it in items]


def _copies(items: list[Item], prefix: str = "b") -> list[Item]:
    """The same questions and answers under new ids."""
    return [Item(f"{prefix}{it.id[1:]}", it.question, it.answer) for it in items]


def _write(tmp_path: Path, name: str, items: list[Item], refs: list[Item] | None = None) -> dict:
    save_items(tmp_path / f"{name}.jsonl", items)
    save_items(tmp_path / f"{name}_ref.jsonl", _refs(items) if refs is None else refs)
    return {"name": name, "path": str(tmp_path / f"{name}.jsonl"),
            "reference_path": str(tmp_path / f"{name}_ref.jsonl")}


# ------------------------------------------------------------------------------------------ the check


def test_duplicated_benchmark_is_refused_naming_the_ids(tmp_path):
    from zcp.probe.datasets import load_datasets

    items = _items(6)
    cfg = _write(tmp_path, "d", items + _copies(items[:3]))
    with pytest.raises(DataError) as e:
        load_datasets(OmegaConf.create(cfg))
    msg = str(e.value)
    assert msg == (f"file {tmp_path / 'd.jsonl'}: 3 question(s) appear more than once (ids a0 = b0, a1 = b1, "
                   "a2 = b2); set data.on_duplicate=merge to count each once")


def test_many_groups_are_summarised_with_their_count():
    items = _items(8)
    with pytest.raises(DataError, match=r"8 question\(s\) appear more than once \(ids a0 = b0 = c0, a1 = b1 = c1, "
                                        r"a2 = b2 = c2, a3 = b3 = c3, a4 = b4 = c4, \.\.\. \(\+3 more\)\)"):
        check_duplicates(items + _copies(items, "b") + _copies(items, "c"), "x.jsonl")


def test_merge_counts_each_question_once_and_lists_the_dropped_rows(tmp_path):
    from zcp.probe.datasets import load_datasets

    items = _items(6)
    copies = _copies(items[:2])
    cfg = _write(tmp_path, "d", items + copies, _refs(items + copies))
    out, issues = load_datasets(OmegaConf.create({**cfg, "on_duplicate": "merge"}))
    (ds,) = out
    assert [it.id for it in ds.originals] == [it.id for it in items]
    assert set(ds.reference) == {it.id for it in items}  # the copies' reference rows are not used
    dropped = [x for x in issues if x.get("field") == "question"]
    assert [(x["id"], x["row"]) for x in dropped] == [("b0", 7), ("b1", 8)]
    assert dropped[0]["file"] == str(tmp_path / "d.jsonl")
    assert dropped[0]["reason"] == ("duplicate of 'a0' (row 1): the same question, counted once "
                                    "(data.on_duplicate=merge)")
    assert all("warning" not in x for x in dropped)  # listed with the skipped rows, not the warnings


def test_merge_with_limit_still_gives_n_distinct_questions(tmp_path):
    items = _items(5)
    save_items(tmp_path / "d.jsonl", [items[0], *_copies(items[:1]), *items[1:]])
    bench = load_benchmark(tmp_path / "d.jsonl", limit=3, on_duplicate="merge")
    assert [it.id for it in bench.items] == ["a0", "a1", "a2"]
    assert [x["id"] for x in bench.skipped] == ["b0"]


def test_merge_under_sample_keeps_the_earliest_row(tmp_path):
    items = _items(30)
    save_items(tmp_path / "d.jsonl", items + _copies(items))
    for seed in range(5):
        bench = load_benchmark(tmp_path / "d.jsonl", sample=45, seed=seed, on_duplicate="merge")
        ids = [it.id for it in bench.items]
        assert len(ids) == 30 and all(i.startswith("a") for i in ids)  # 30 distinct questions: the a-rows
        assert all(x["id"].startswith("b") for x in bench.skipped)


@pytest.mark.parametrize("policy", ["error", "merge"])
def test_copies_with_different_gold_answers_fail_under_both_policies(tmp_path, policy):
    from zcp.probe.datasets import load_datasets

    items = _items(4)
    wrong = Item("b1", items[1].question, "99")
    cfg = _write(tmp_path, "d", [*items, wrong], _refs([*items, wrong]))
    with pytest.raises(DataError) as e:
        load_datasets(OmegaConf.create({**cfg, "on_duplicate": policy}))
    assert str(e.value) == (f"file {tmp_path / 'd.jsonl'}: 1 question(s) appear more than once with different "
                            "gold answers (ids a1 = b1 ('4' vs '99')): they cannot be merged; fix the answers or "
                            "drop the copies")


def test_equivalent_gold_answers_merge():
    a = Item("a", "What is half of 9?", "4.5")
    b = Item("b", "What is half of 9?", "\\frac{9}{2}")
    assert [it.id for it in check_duplicates([a, b], on_duplicate="merge")] == ["a"]


def test_whitespace_only_differences_are_duplicates_and_nothing_else_is_normalised():
    q = "Tom has 3 apples and buys 5 more. How many apples?"
    variants = ["  " + q + "\n", q.replace(" ", "   "), q.replace("buys ", "buys\t\n")]
    for k, text in enumerate(variants):
        with pytest.raises(DataError, match=f"ids a = b{k}"):
            check_duplicates([Item("a", q, "8"), Item(f"b{k}", text, "8")])
    # case, punctuation and digits are the question itself: not duplicates
    for k, text in enumerate([q.lower(), q.replace("?", " ?"), q.replace("3", "03")]):
        kept = check_duplicates([Item("a", q, "8"), Item(f"c{k}", text, "8")])
        assert [it.id for it in kept] == ["a", f"c{k}"]


def test_unknown_policy_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"benchmark\.on_duplicate='skip': must be one of error, merge"):
        check_duplicates(_items(2), on_duplicate="skip", key="benchmark.on_duplicate")


def test_data_config_validates_on_duplicate():
    from zcp.benchmarks.data_config import DataConfig

    assert DataConfig(on_duplicate="merge").on_duplicate == "merge"
    with pytest.raises(ConfigError, match=r"data\.on_duplicate"):
        DataConfig(on_duplicate="skip")
    cfg = compose("detect", "data.path=x.jsonl", "data.reference_path=r.jsonl")
    assert cfg.data.on_duplicate == "error"
    omni = compose("detect", "data=omnimath")
    assert omni.data.on_duplicate == "merge"  # the release's Dataset C repeats 4 questions


# ------------------------------------------------------------------------------------------ every path


def test_build_data_refuses_a_duplicated_file_and_merges_on_request(tmp_path):
    from zcp.benchmarks.build import load_dataset_items

    items = _items(4)
    save_items(tmp_path / "d.jsonl", items + _copies(items[:1]))
    with pytest.raises(DataError, match="ids a0 = b0"):
        load_dataset_items({"path": str(tmp_path / "d.jsonl"), "format": "items"}, 0)
    got, skipped, _ = load_dataset_items({"path": str(tmp_path / "d.jsonl"), "format": "items",
                                          "on_duplicate": "merge"}, 0)
    assert [it.id for it in got] == ["a0", "a1", "a2", "a3"] and [x["id"] for x in skipped] == ["b0"]


def test_arithmark_generator_draws_distinct_expressions_and_files_are_checked(tmp_path):
    from zcp.benchmarks.arithmark import generate_arithmark, n_expressions
    from zcp.benchmarks.build import load_dataset_items
    from zcp.core.io import write_jsonl

    # stage 1 has 6,683 expressions: 1,000 draws with replacement would repeat ~75 of them
    assert n_expressions(1) == 41 * 163
    items, skipped, _ = load_dataset_items({"format": "arithmark", "n_per_stage": 1000}, 0)
    assert len(items) == 5000 and len({it.question for it in items}) == 5000 and not skipped
    assert len({r["expression"] for r in generate_arithmark(n_expressions(1), seed=1, stages=(1,))}) == 6683
    with pytest.raises(ValueError, match="stage 1 has only 6683 distinct expressions"):
        generate_arithmark(6684, stages=(1,))
    records = generate_arithmark(3, seed=2, stages=(1,))
    write_jsonl(tmp_path / "am.jsonl", [*records, {**records[0], "id": "math_s1_copy"}])
    with pytest.raises(DataError, match="ids math_s1_00000 = math_s1_copy"):
        load_dataset_items({"format": "arithmark", "path": str(tmp_path / "am.jsonl")}, 0)


def test_simulation_refuses_c_and_u_files_sharing_a_question(tmp_path):
    from zcp.simulate.contaminate import load_benchmark as sim_benchmark
    from zcp.simulate.contaminate import load_split_files

    c, u = _items(4, "c"), _items(6, "u")  # u0..u3 repeat c0..c3's questions
    save_items(tmp_path / "c.jsonl", c)
    save_items(tmp_path / "u.jsonl", u)
    cfg = {"split": {"c_path": str(tmp_path / "c.jsonl"), "u_path": str(tmp_path / "u.jsonl")}}
    with pytest.raises(DataError, match=r"4 question\(s\) appear more than once \(ids c0 = u0, c1 = u1, c2 = u2, "
                                        r"c3 = u3\); set benchmark\.on_duplicate=merge"):
        load_split_files(cfg)
    merged = {**cfg, "benchmark": {"on_duplicate": "merge"}}
    cs, us = load_split_files(merged)
    assert [it.id for it in cs] == ["c0", "c1", "c2", "c3"] and [it.id for it in us] == ["u4", "u5"]
    assert len(sim_benchmark(merged)) == 6
    # a repeat inside one file of benchmark.source=file
    save_items(tmp_path / "f.jsonl", c + _copies(c[:1]))
    with pytest.raises(DataError, match=r"ids c0 = b0\); set benchmark\.on_duplicate=merge"):
        sim_benchmark({"benchmark": {"source": "file", "path": str(tmp_path / "f.jsonl")}})
    with pytest.raises(ConfigError, match=r"benchmark\.on_duplicate='yes'"):
        load_split_files({**cfg, "benchmark": {"on_duplicate": "yes"}})


def test_simulation_on_duplicate_is_part_of_the_run_dir():
    # (configs written before the key existed are no longer adopted: one claim rule, old dirs refused)
    from zcp.simulate.contaminate import _run_dir

    new = compose("contaminate", resolve=True)
    merge = compose("contaminate", "benchmark.on_duplicate=merge", resolve=True)
    assert new["benchmark"]["on_duplicate"] == "error"
    assert _run_dir(new) == _run_dir(compose("contaminate", resolve=True)) != _run_dir(merge)


def test_baselines_inputs_refuse_a_question_in_both_c_and_u(tmp_path):
    from zcp.validate.baselines import inputs_from_data

    c, u = _items(3, "c"), _items(5, "u")
    save_items(tmp_path / "c.jsonl", c)
    save_items(tmp_path / "u.jsonl", u)
    data = {"path": str(tmp_path / "c.jsonl"), "u_path": str(tmp_path / "u.jsonl"), "name": "x"}
    cfg = OmegaConf.create({"data": data, "model": {"path": "m"}})
    with pytest.raises(DataError, match=r"\(U\): 3 question\(s\) appear more than once \(ids c0 = u0, c1 = u1, "
                                        r"c2 = u2\)"):
        inputs_from_data(cfg)
    cfg = OmegaConf.create({"data": {**data, "on_duplicate": "merge"}, "model": {"path": "m"}})
    inputs = inputs_from_data(cfg)
    assert [it.id for it in inputs.files["data"].originals] == ["c0", "c1", "c2"]
    assert [it.id for it in inputs.files["u"].originals] == ["u3", "u4"]
    assert [(x["id"], x["file"]) for x in inputs.issues] == [(f"u{k}", str(tmp_path / "u.jsonl")) for k in range(3)]


# ------------------------------------------------------------------------------------------ reference answers


def test_reference_answer_equal_to_the_original_is_warned_per_row(tmp_path, caplog):
    from zcp.probe.datasets import load_datasets

    items = _items(5)
    refs = _refs(items)
    refs[1] = Item("a1::r0", refs[1].question, items[1].answer + ".0", metadata={"original_id": "a1"})
    refs[3] = Item("a3::r0", refs[3].question, items[3].answer, metadata={"original_id": "a3"})
    cfg = _write(tmp_path, "d", items, refs)
    with caplog.at_level(logging.WARNING, logger="zcp.benchmarks.loaders"):
        out, issues = load_datasets(OmegaConf.create(cfg))
    ref_file = str(tmp_path / "d_ref.jsonl")
    assert [x for x in issues if "warning" in x] == [
        {"file": ref_file, "row": 2, "id": "a1::r0", "original_id": "a1",
         "warning": "reference answer equals the original's (4)"},
        {"file": ref_file, "row": 4, "id": "a3::r0", "original_id": "a3",
         "warning": "reference answer equals the original's (8)"}]
    assert len(out[0].reference) == 5  # kept: an exact perturbation may share the answer by chance
    lines = [r.getMessage() for r in caplog.records if "gold answer" in r.getMessage()]
    assert lines == [f"{ref_file}: 2 of 5 reference rows have their original's gold answer (kept; listed in "
                     "data_warnings), first row 2"]


def test_paraphrase_variants_sharing_the_answer_are_not_warned(tmp_path):
    from zcp.probe.datasets import load_datasets

    items = _items(3)
    para = [Item(f"{it.id}::p0", it.question + " Count them.", it.answer, metadata={"original_id": it.id})
            for it in items]
    cfg = _write(tmp_path, "d", items)
    save_items(tmp_path / "para.jsonl", para)
    _, issues = load_datasets(OmegaConf.create({**cfg, "variant_paths": {"paraphrased": str(tmp_path / "para.jsonl")}}))
    assert not [x for x in issues if "warning" in x]


# ------------------------------------------------------------------------------------------ end to end


def _world(n: int = 50):
    """A clean model that happens to answer 9 originals and 3 perturbations right (discordant pairs 9 vs 3):
    one copy gives p = P(Bin(12, 1/2) >= 9) = 0.073, two copies P(Bin(24, 1/2) >= 18) = 0.011."""
    items = _items(n)
    refs = _refs(items)
    known = {it.question: it.answer for it in items[:9]}
    known.update({r.question: r.answer for r in refs[20:23]})
    return items, refs, known


def _run_detect(tmp_path, tiny_model, tiny_tok, monkeypatch, name, data_path, ref_path, known, *extra):
    import zcp.backends.registry
    import zcp.config
    from zcp.probe.run import run_detect

    model_dir = tmp_path / "model"
    if not model_dir.exists():
        tiny_model.save_pretrained(model_dir)
        tiny_tok.save_pretrained(model_dir)
    monkeypatch.setattr(zcp.backends.registry, "build_backend", lambda *a, **k: FakeBackend(known))
    cfg = compose("detect", f"model.path={model_dir}", f"data.path={data_path}",
                  f"data.reference_path={ref_path}", "data.name=d", "probe.metrics=[acc]", "logger=none",
                  "run.progress=false", f"output_dir={tmp_path / name}", *extra)
    summary = run_detect(cfg)
    (acc,) = [r for r in summary["results"] if r["variant"] == "original"]
    return acc, json.loads((tmp_path / name / "summary.json").read_text())


def test_duplicated_benchmark_can_no_longer_shrink_p(tmp_path, tiny_model, tiny_tok, monkeypatch):
    from zcp.probe.detect import DetectDataset, DetectSettings, detect
    from zcp.probe.prompts import ProbeConfig

    items, refs, known = _world()
    copies = _copies(items)
    copy_refs = [Item(f"{c.id}::r0", r.question, r.answer, metadata={"original_id": c.id})
                 for c, r in zip(copies, refs, strict=True)]
    save_items(tmp_path / "single.jsonl", items)
    save_items(tmp_path / "single_ref.jsonl", refs)
    save_items(tmp_path / "twice.jsonl", items + copies)
    save_items(tmp_path / "twice_ref.jsonl", refs + copy_refs)

    # what the loaders used to accept: the 50 items listed twice are tested as 100 and p shrinks
    twice = DetectDataset("d", items + copies, {r.metadata["original_id"]: [r] for r in refs + copy_refs})
    before = detect(FakeBackend(known), [twice], ProbeConfig(metrics=("acc",)), tmp_path / "before",
                    DetectSettings(progress=False))["results"][0]
    single, single_summary = _run_detect(tmp_path, tiny_model, tiny_tok, monkeypatch, "single",
                                         tmp_path / "single.jsonl", tmp_path / "single_ref.jsonl", known)
    assert single["n"] == 50 and single["p_value"] == pytest.approx(299 / 4096)
    assert before["n"] == 100 and before["p_value"] < single["p_value"] / 5

    with pytest.raises(DataError, match=r"50 question\(s\) appear more than once \(ids a0 = b0, a1 = b1, "):
        _run_detect(tmp_path, tiny_model, tiny_tok, monkeypatch, "refused", tmp_path / "twice.jsonl",
                    tmp_path / "twice_ref.jsonl", known)
    assert not (tmp_path / "refused" / "summary.json").exists()

    merged, merged_summary = _run_detect(tmp_path, tiny_model, tiny_tok, monkeypatch, "merged",
                                         tmp_path / "twice.jsonl", tmp_path / "twice_ref.jsonl", known,
                                         "data.on_duplicate=merge")
    assert (merged["n"], merged["p_value"], merged["c_cont"]) == (single["n"], single["p_value"], single["c_cont"])
    assert merged_summary["verdicts"] == single_summary["verdicts"]
    dropped = merged_summary["skipped_rows"]
    assert [x["id"] for x in dropped] == [f"b{k}" for k in range(50)]
    assert not single_summary["skipped_rows"]
