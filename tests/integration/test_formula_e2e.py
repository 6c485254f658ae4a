"""Formula variants (TREAT) end to end on ArithMark: build (references + `paraphrase=formula`), a reduced
contamination of the shipped tiny model with `exposure.paraphraser=formula`, and run_detect with the built
paraphrases as `data.variant_paths`, to a verdict in summary.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from configs import compose

from zcp.benchmarks.arithmark import (
    RECORD_KEYS,
    VARIANT_KEYS,
    evaluate_grouped,
    exact_value,
    generate_arithmark,
    round_result,
    validate_record,
)
from zcp.benchmarks.split import Manifest
from zcp.config import asset_path
from zcp.core.io import read_jsonl, write_jsonl

K = 2


def _variant_record(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: meta[k] for k in (*RECORD_KEYS, *VARIANT_KEYS)}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    """20 ArithMark records of stages 2 and 3, built with references (m=1) and k=2 formula paraphrases of C."""
    from zcp.benchmarks.build import build_data

    root = tmp_path_factory.mktemp("formula_e2e")
    write_jsonl(root / "arithmark.jsonl", generate_arithmark(10, seed=5, stages=(2, 3)))
    cfg = compose("build_data", "data=arithmark", f"data.path={root / 'arithmark.jsonl'}",
                  "paraphrase=formula", f"paraphrase.k={K}", "reference.m=1", "logger=none",
                  f"output_dir={root / 'build'}")
    return root / "build", build_data(cfg)


def test_build_writes_valid_formula_variants_and_reports_them(built):
    out, report = built
    items = {r["id"]: r for r in read_jsonl(out / "items.jsonl")}
    c_ids = Manifest.load(out / "manifest.json").c_ids
    paras = list(read_jsonl(out / "paraphrases.jsonl"))
    assert len(c_ids) == 10 and len(paras) == K * len(c_ids)  # stage 2/3 expressions always admit k=2
    for p in paras:
        orig = items[p["original_id"]]
        meta = p["metadata"]
        assert p["original_id"] in c_ids and meta["paraphraser"] == "formula" and meta["transforms"]
        assert p["question"] == f"{meta['expression']} =" != orig["question"]
        assert p["answer"] == orig["answer"] and meta["options"] == orig["metadata"]["options"]
        # ArithMark's loader reads the variant record, and its value is the original's answer
        validate_record(_variant_record(meta), extra_keys=VARIANT_KEYS, allow_groups=True)
        assert round_result(evaluate_grouped(meta["expression"])) == exact_value(orig["metadata"]["answer"])
    para = report["paraphrase"]
    assert para["paraphraser"] == "formula" and para["k"] == K
    assert para["items"] == para["items_with_k"] == 10 and para["accepted"] == K * 10
    assert para.get("rejected", 0) == sum(para["rejection_reasons"].values()) and not para.get("short")
    assert report["counts"]["paraphrases"] == K * 10 and report["reference"]["method"] == "arithmark"
    on_disk = json.loads((out / "build_report.json").read_text())
    assert on_disk["paraphrase"]["items_with_k"] == 10


def test_built_paraphrases_read_back_as_variant_paths(built):
    """run_detect's loader pairs paraphrases.jsonl (format items, what the build writes) to the C items."""
    from zcp.probe.datasets import load_datasets

    out, _ = built
    data = compose("detect", "data.name=arithmark", f"data.path={out / 'items.jsonl'}", "data.format=items",
                   f"data.reference_path={out / 'reference.jsonl'}", f"data.manifest={out / 'manifest.json'}",
                   f"+data.variant_paths.formula={out / 'paraphrases.jsonl'}")["data"]
    datasets, issues = load_datasets(data)
    by_split = {d.split: d for d in datasets}
    c_ids = Manifest.load(out / "manifest.json").c_ids
    formula = by_split["C"].variants["formula"]
    assert set(formula) == set(c_ids) and all(len(v) == K for v in formula.values())
    assert not by_split["U"].variants["formula"] and not [i for i in issues if "reason" in i]


def test_formula_variants_train_and_probe_end_to_end(built, tmp_path):
    if not Path(asset_path("base_model"), "model.safetensors").exists():
        pytest.skip("the shipped base model is not built")
    from zcp.probe.run import run_detect
    from zcp.simulate.contaminate import contaminate

    out, _ = built
    res = contaminate(compose("contaminate", "benchmark.source=file", f"benchmark.path={out / 'items.jsonl'}",
                              "benchmark.format=items", f"manifest_path={out / 'manifest.json'}",
                              "exposure.paraphraser=formula", f"exposure.k={K}", "exposure.sft_epochs=1",
                              "exposure.grpo_steps=0", "eval.enabled=false", "logger=none",
                              f"output_dir={tmp_path / 'run'}", resolve=True))
    c_ids = set(Manifest.load(out / "manifest.json").c_ids)
    assert set(res.leaked_ids) == c_ids
    leaked = [r for r in read_jsonl(res.run_dir / "sft_data.jsonl") if r["source"] == "benchmark"]
    assert len(leaked) == K * len(c_ids)
    originals = {r["id"]: r for r in read_jsonl(out / "items.jsonl")}
    for r in leaked:  # trained on formula rewrites: other text, the original's answer
        question = r["prompt"][0]["content"]
        orig = originals[r["original_id"]]
        assert question != orig["question"] and question.endswith(" =")
        assert round_result(evaluate_grouped(question[:-2])) == exact_value(orig["metadata"]["answer"])

    det = compose("detect", f"model.path={res.model_dir}", "data.name=arithmark",
                  f"data.path={out / 'items.jsonl'}", "data.format=items",
                  f"data.reference_path={out / 'reference.jsonl'}", f"data.manifest={out / 'manifest.json'}",
                  f"+data.variant_paths.formula={out / 'paraphrases.jsonl'}", "probe.full_cot_max_tokens=40",
                  "stats.bootstrap_samples=500", "logger=none", f"output_dir={tmp_path / 'detect'}")
    run_detect(det)
    summary = json.loads((tmp_path / "detect" / "summary.json").read_text())
    rows = {(r["split"], r["variant"], r["metric"]) for r in summary["results"]}
    assert ("C", "formula", "p_all") in rows and ("C", "original", "p_all") in rows and ("U", "original", "p_all") in rows
    verdicts = {(v["split"], v["variant"]): v for v in summary["verdicts"]}
    assert {("C", "original"), ("C", "formula"), ("U", "original")} <= set(verdicts)
    assert all(isinstance(v["contaminated"], bool) for v in verdicts.values())
    recs = [json.loads(x) for x in (tmp_path / "detect" / "records.jsonl").read_text().splitlines()]
    probed = {r["id"] for r in recs if r["variant"] == "formula"}
    assert probed == {p["id"] for p in read_jsonl(out / "paraphrases.jsonl")}
