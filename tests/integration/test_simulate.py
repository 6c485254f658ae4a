"""The main job's pipeline (conf/demo.yaml) with a reduced configuration: contaminate the shipped base
model for a few steps, then detection on C and U for FT and base, Table 7 analogue, DiD and plot."""

import json

import pytest
from configs import compose

from zcp.config import asset_path
from zcp.simulate.pipeline import run_simulation

REDUCED = [
    "benchmark.n=16", "exposure.k=1", "exposure.sft_epochs=1", "exposure.grpo_steps=1", "eval.max_items=2",
    "eval.max_new_tokens=24", "train.grpo.max_completion_length=24", "train.grpo.per_device_train_batch_size=4",
    "train.grpo.num_generations=4", "detect.m=1", "detect.seeds=[0,1]", "stats.bootstrap_samples=500",
    "probe.full_cot_max_tokens=40", "logger=none",
    "train.sft.warmup_steps=0",  # its one SFT step must run at a learning rate above 0 (else the model is unchanged)
]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    from pathlib import Path

    if not Path(asset_path("base_model"), "model.safetensors").exists():
        pytest.skip("the shipped base model is not built")
    out = tmp_path_factory.mktemp("sim") / "run"
    cfg = compose("demo", *REDUCED, f"output_dir={out}")
    return out, run_simulation(cfg)


def test_demo_pipeline_writes_everything(sim):
    out, res = sim
    det = out / "detect"
    for name in ("table7.md", "did.md", "c_cont_C_vs_U.png", "simulation_summary.json"):
        assert (det / name).exists(), name
    summ = json.loads((det / "simulation_summary.json").read_text())
    assert set(summ["results"]) == {"FT", "base"} and summ["seeds"] == [0, 1]
    splits = {r["split"] for r in summ["results"]["FT"]}
    assert splits == {"C", "U"}
    exposure = json.loads((out / "exposure.json").read_text())
    assert sorted(exposure["leaked_ids"]) == sorted(res["contamination"].leaked_ids)
    # detection read the manifest: C in detection is exactly the manifest's C
    manifest = json.loads((out / "manifest.json").read_text())
    recs = [json.loads(x) for x in (next(det.glob("FT__*")) / "records.jsonl").read_text().splitlines()]
    assert {r["original_id"] for r in recs if r["split"] == "C"} == set(manifest["c_ids"])
    # two seeds x m=1: two reference draws per item, disjoint between seeds
    draws = {(r["original_id"], r["draw"]) for r in recs if r["variant"] == "reference"}
    assert len(draws) == 2 * 16
    table7 = (det / "table7.md").read_text()
    assert "| FT | C |" in table7 and "| base | U |" in table7 and "±" in table7
    assert len(summ["did"]) == 2 * 4


def test_rerun_resumes_without_recomputing(sim, tmp_path):
    out, first = sim
    cfg = compose("demo", *REDUCED, f"output_dir={out}")
    again = run_simulation(cfg)
    assert "sft" not in again["contamination"].stages_run
    assert again["detection"]["results"] == first["detection"]["results"]


def test_baselines_stage_runs_the_baselines_on_the_run(sim):
    """stages=[contaminate, detect, baselines]: the finished stages are skipped, the baselines (composed from
    conf/baselines.yaml with the run's baselines_overrides) score C and U into <run>/baselines/."""
    out, first = sim
    cfg = compose("demo", *REDUCED, f"output_dir={out}", "stages=[contaminate,detect,baselines]",
                  "baselines_overrides=['detectors=[ppl,mink20,zcp_p_all]','bootstrap_samples=200']")
    res = run_simulation(cfg)
    assert "sft" not in res["contamination"].stages_run
    assert res["detection"]["results"] == first["detection"]["results"]
    summ = json.loads((out / "baselines" / "summary.json").read_text())
    assert set(summ["detectors"]) == {"ppl", "mink20", "zcp_p_all"}
    manifest = json.loads((out / "manifest.json").read_text())
    for name, d in summ["detectors"].items():
        assert 0.0 <= d["auroc"] <= 1.0, name
        assert d["files"]["data"]["n"] == len(manifest["c_ids"]) and d["files"]["u"]["n"] == len(manifest["u_ids"])
    # the zcp_* item scores are the run's own detection records
    assert summ["records_path"].startswith(str(out / "detect"))


@pytest.mark.parametrize("overrides, match", [
    (["stages=[contaminate,baselines]"], "baselines needs detect"),
    (["stages=[contaminate,detect,baselines]", "baselines_overrides=['detectors=[nope]']"], "detectors"),
    (["stages=[contaminate,detect,baselines]", "baselines_overrides=['+params.ppl.bogus=1']"], "params.ppl"),
    (["stages=[contaminate,detec]"], "stages: unknown"),
])
def test_stage_errors_come_before_training(tmp_path, overrides, match):
    from zcp.errors import ConfigError

    out = tmp_path / "run"
    cfg = compose("demo", *REDUCED, f"output_dir={out}", *overrides)
    with pytest.raises(ConfigError, match=match):
        run_simulation(cfg)
    assert not (out / "sft_data.jsonl").exists() and not (out / "sft").exists()
