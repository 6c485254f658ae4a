"""`probe.prefill` through the jobs: evaluate/run_detect.py (with the base model's DiD) and the simulation's detection
stage, on tiny local models (nothing downloaded)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from configs import compose
from omegaconf import OmegaConf

from zcp import REPO_ROOT
from zcp.benchmarks.loaders import save_items
from zcp.core.io import read_jsonl
from zcp.core.items import Item
from zcp.errors import ConfigError

GSM8K = REPO_ROOT / "tests" / "fixtures" / "gsm8k" / "test_head12.jsonl"


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_tok, tiny_model):
    """6 items with 2 reference draws each; the audited model (also its own base model here)."""
    root = tmp_path_factory.mktemp("conv_world")
    tiny_model.save_pretrained(root / "model")
    tiny_tok.save_pretrained(root / "model")
    rng = random.Random(0)
    items, refs = [], []
    for i in range(6):
        a, b = rng.randint(10, 99), rng.randint(1, 9)
        items.append(Item(f"q{i}", f"Ann has {a} pens and gets {b} more. How many pens?", str(a + b)))
        for j in range(2):
            c = rng.randint(10, 99)
            refs.append(Item(f"q{i}::r{j}", f"Ann has {c} pens and gets {b} more. How many pens?", str(c + b),
                             metadata={"original_id": f"q{i}"}))
    save_items(root / "data.jsonl", items)
    save_items(root / "ref.jsonl", refs)
    return root


def _detect_cfg(root: Path, *extra: str):
    return compose("detect", f"model.path={root / 'model'}", f"data.path={root / 'data.jsonl'}",
                   f"data.reference_path={root / 'ref.jsonl'}", "data.name=toy", "logger=none",
                   "probe.full_cot_max_tokens=12", "probe.zero_cot_max_tokens=6", "run.progress=false",
                   "stats.bootstrap_samples=200", *extra)


def test_run_detect_probes_each_listed_convention_and_the_did_per_convention(world, tmp_path, capsys):
    from zcp.probe.run import run_detect

    out = tmp_path / "run"
    summary = run_detect(_detect_cfg(world, f"output_dir={out}", "probe.prefill=[probe,hash]",
                                     f"base_model.path={world / 'model'}"))
    assert [c["name"] for c in summary["conventions"]] == ["probe", "hash"]
    for name, prefix in (("probe", "The final answer is: \\[ \\boxed{"), ("hash", "#### ")):
        recs = list(read_jsonl(out / f"conv-{name}" / "records.jsonl"))
        assert len(recs) == 6 + 12 and {r["convention"] for r in recs} == {name}
        assert (out / f"conv-{name}" / "base" / "records.jsonl").exists() and (out / f"conv-{name}" / "did.md").exists()
        assert json.loads((out / f"conv-{name}" / "summary.json").read_text())["convention"]["prefill"] == prefix
    on_disk = json.loads((out / "summary.json").read_text())
    (v,) = on_disk["verdicts"]
    # every answer of the toy model is malformed: acc and con are VOID under both pre-fills (zcp.probe.void)
    kept = [r for r in on_disk["convention_results"] if not r.get("void")]
    assert len(on_disk["convention_results"]) == 2 * 4 and {r["metric"] for r in kept} == {"p_first", "p_all"}
    assert v["n_tests"] == len(kept) == 4 and set(v["conventions"]) == {"probe", "hash"}
    # the base model is the audited model: exactly no DiD under either pre-fill, one verdict over both
    did = on_disk["did"]
    assert set(did["per_convention"]) == {"probe", "hash"}
    assert all(r["did"] == 0.0 for b in did["per_convention"].values() for r in b["rows"])
    assert [(d["split"], d["contaminated"]) for d in did["verdicts"]] == [("toy", False)]
    assert (out / "config.yaml").exists() and "| toy | original | **all** |" in (out / "table.md").read_text()
    assert "**all**" in capsys.readouterr().out


def test_run_detect_with_one_other_convention_is_the_plain_run_and_sharding_several_is_refused(world, tmp_path):
    from zcp.probe.run import run_detect

    out = tmp_path / "hash"
    summary = run_detect(_detect_cfg(world, f"output_dir={out}", "probe.prefill=hash", "probe.metrics=[acc,p_all]"))
    assert summary["convention"]["name"] == "hash" and summary["prefill"] == "hash"
    assert {r["convention"] for r in read_jsonl(out / "records.jsonl")} == {"hash"}
    with pytest.raises(ConfigError, match=r"^run\.shard=0/2 with probe\.prefill='auto'"):
        run_detect(_detect_cfg(world, f"output_dir={tmp_path / 'x'}", "probe.prefill=auto", "run.shard=0/2"))


@pytest.fixture(scope="module")
def gsm_model(tmp_path_factory) -> Path:
    """A 2-layer Llama with its own BPE tokenizer (and chat template), trained on nothing: saved to a folder."""
    from zcp.benchmarks.loaders import load_items
    from zcp.core.testing import tiny_llama, train_tokenizer

    items = load_items(str(GSM8K), format="gsm8k")
    tok = train_tokenizer([t for it in items for t in (it.question, it.solution or "", it.answer)], vocab_size=300)
    path = tmp_path_factory.mktemp("gsm_model")
    tiny_llama(tok, hidden=32, layers=2, heads=2, max_positions=512).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_the_simulations_detection_stage_reads_auto_from_the_ft_model_and_probes_the_base_alike(tmp_path, gsm_model):
    from zcp.benchmarks.split import split_items
    from zcp.simulate.contaminate import ContaminationResult, load_benchmark
    from zcp.simulate.pipeline import run_detection_stage

    ref = tmp_path / "reference.jsonl"
    from zcp.benchmarks.loaders import load_items

    rows = [{"id": f"{it.id}::ref0", "original_id": it.id, "question": it.question + " Count one more.",
             "answer": str(int(float(it.answer.replace(",", ""))) + 1)} for it in load_items(str(GSM8K), format="gsm8k")]
    ref.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = compose("demo", "benchmark.source=file", f"benchmark.path={GSM8K}", "benchmark.format=gsm8k",
                  "benchmark.limit=8", f"detect.reference_path={ref}", "detect.m=1", "detect.seeds=[0]",
                  f"model.path={gsm_model}", "probe.metrics=[acc,p_all]", "probe.full_cot_max_tokens=16",
                  "probe.zero_cot_max_tokens=6", "probe.prefill=auto", "probe.auto.neutral_n=3",
                  "probe.auto.min_share=0.01", "detect.base_model=true", "stats.bootstrap_samples=200", "logger=none",
                  "run.progress=false", resolve=True)
    run_dir = tmp_path / "runs" / "a"
    run_dir.mkdir(parents=True)
    manifest = split_items(load_benchmark(cfg), seed=int(cfg["seed"]), c_fraction=float(cfg["split"]["c_fraction"]))
    manifest.save(run_dir / "manifest.json")
    result = ContaminationResult(run_dir=run_dir, model_dir=gsm_model, sft_adapter_dir=run_dir / "sft_adapter",
                                 grpo_adapter_dir=None, manifest_path=run_dir / "manifest.json",
                                 exposure_path=run_dir / "exposure.json", table6={"stages": [], "rows": []},
                                 leaked_ids=list(manifest.c_ids))
    sim = run_detection_stage(cfg, result)
    chosen = sim["auto"]["chosen"]
    assert chosen[0] == "probe" and sim["prefill"] == "auto"
    assert [c["name"] for c in sim["conventions"]] == chosen
    ft = next((run_dir / "detect").glob("FT__*"))
    base = next((tmp_path / "runs").glob("base-detect__*"))
    for name in chosen:  # the base model is probed with the conventions read from the FT model
        assert (ft / f"conv-{name}" / "records.jsonl").exists() and (base / f"conv-{name}" / "records.jsonl").exists()
    assert {d["convention"] for d in sim["did"]} == set(chosen)
    assert {v["split"] for v in sim["verdicts"]["FT"]} == {"C", "U"}
    assert "n_tests" in sim["verdicts"]["FT"][0] or len(chosen) == 1


def test_the_default_prefill_leaves_the_run_dirs_name_as_before_the_key_existed(world):
    from zcp.config import run_dir
    from zcp.probe.multiconv import without_default_prefill

    default = _detect_cfg(world)
    stripped = without_default_prefill(default)
    assert "prefill" not in stripped.probe and "auto" not in stripped.probe
    old = OmegaConf.create(OmegaConf.to_container(default, resolve=True))  # the config as it was: no such keys
    del old.probe["prefill"], old.probe["auto"], old.probe["primary"], old.probe["answer_space"]
    del old.stats["void_malformed"]
    assert run_dir(stripped, "detect", "toy") == run_dir(old, "detect", "toy")
    auto = without_default_prefill(_detect_cfg(world, "probe.prefill=auto"))
    assert auto.probe.prefill == "auto" and "auto" in auto.probe
    listed = without_default_prefill(_detect_cfg(world, "probe.prefill=[probe,hash]", "probe.auto.min_share=0.5"))
    assert list(listed.probe.prefill) == ["probe", "hash"] and "auto" not in listed.probe
