"""kill -9 of each job at a random point, then the same command again: the same records (and reports) as a run
that was never killed. One test per job: the detection (one convention and several), build_data, the baselines, the
calibration's base-model part and the simulation (a shard's is test_shard's).

Each job runs its entry point as a subprocess, SIGKILLed once it has reached a point drawn at random (a record
count, or a file written); the rerun runs the job in this process. The draw's seed is printed with every
assertion; ZCP_KILL_SEED=<n> repeats one. Sizes are small: a run is a few seconds of work past start-up (10-15 s of
CPU a test; the one-convention detection and the simulation are marked slow: make test-all)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from configs import compose

from zcp.benchmarks.loaders import save_items
from zcp.core.items import Item

REPO = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("ZCP_KILL_SEED", random.SystemRandom().randrange(10**6)))
Q = "{n} has {a} pens and gets {b} more. How many pens does {n} have now?"


def _rng(job: str) -> random.Random:
    return random.Random(f"{SEED}:{job}")


def _kill_when(cmd: list[str], reached: Callable[[], bool], what: str, cwd: Path, timeout: float = 300) -> None:
    """Run `cmd` (an entry point) in `cwd` (the test's folder: Hydra's log lands there) and SIGKILL it as soon as
    `reached()`; fails if it ended before."""
    env = {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline and not reached():
        time.sleep(0.01)
    alive = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    assert alive, f"ZCP_KILL_SEED={SEED}: the run ended before {what}: {err.decode()[-2000:]}"


def _lines(*paths: Path) -> int:
    n = 0
    for p in paths:
        with contextlib.suppress(OSError):  # not written yet
            n += p.read_bytes().count(b"\n")
    return n


def _script(name: str, folder: str = "evaluate") -> list[str]:
    return [sys.executable, str(REPO / folder / name)]


# ------------------------------------------------------------------------------------------ detection
@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_tok) -> Path:
    """A tiny model folder and 20 items with 2 reference rows each (60 units a convention)."""
    from zcp.core.testing import tiny_llama

    root = tmp_path_factory.mktemp("sigkill")
    tiny_llama(tiny_tok, hidden=32, layers=2, heads=2).save_pretrained(root / "model")
    tiny_tok.save_pretrained(root / "model")
    rng = random.Random(0)
    items, refs = [], []
    for i in range(20):
        n, a, b = rng.choice(["Ann", "Bob", "Cara"]), rng.randint(10, 99), rng.randint(10, 99)
        items.append(Item(f"q{i:02d}", Q.format(n=n, a=a, b=b), str(a + b)))
        for j in range(2):
            a2, b2 = rng.randint(10, 99), rng.randint(10, 99)
            refs.append(Item(f"q{i:02d}::r{j}", Q.format(n=n, a=a2, b=b2), str(a2 + b2),
                             metadata={"original_id": f"q{i:02d}"}))
    save_items(root / "bench.jsonl", items)
    save_items(root / "ref.jsonl", refs)
    return root


def _detect_overrides(world: Path, out: Path, *extra: str) -> list[str]:
    return [f"model.path={world / 'model'}", f"data.path={world / 'bench.jsonl'}",
            f"data.reference_path={world / 'ref.jsonl'}", "data.format=items", "data.name=bench",
            f"output_dir={out}", "logger=none", "run.progress=false", "probe.metrics=[p_first,p_all]",
            "stats.bootstrap_samples=200", *extra]


def _summary(d: Path) -> dict:
    s = json.loads((d / "summary.json").read_text())
    return {k: v for k, v in s.items() if k not in ("output_dir", "cost_plan")}


@pytest.mark.parametrize("prefill,folders", [
    pytest.param((), ["."], marks=pytest.mark.slow),  # the default suite kills one in test_detect_e2e already
    (("probe.prefill=[probe,hash]",), ["conv-hash", "conv-probe"]),
], ids=["one-convention", "two-conventions"])
def test_a_detection_killed_at_a_random_point_resumes_to_the_same_records(world, tmp_path, prefill, folders):
    from zcp.probe.run import run_detect

    one = tmp_path / "one"
    run_detect(compose("detect", *_detect_overrides(world, one, *prefill)))
    assert sorted(p.parent.name for p in one.glob("conv-*/records.jsonl")) == [f for f in folders if f != "."]
    total = _lines(*(one / f / "records.jsonl" for f in folders))
    assert total == len(folders) * 60
    target = _rng(f"detect{len(folders)}").randint(1, total * 3 // 4)
    out = tmp_path / "killed"
    records = [out / f / "records.jsonl" for f in folders]
    _kill_when([*_script("run_detect.py"), *_detect_overrides(world, out, *prefill, "run.chunk_size=1")],
               lambda: _lines(*records) >= target, f"{target} of {total} records", tmp_path)
    kept = _lines(*records)
    print(f"detection ({len(folders)} folder(s)): killed at {kept} of {total} records (ZCP_KILL_SEED={SEED})")
    assert kept < total and not (out / "summary.json").exists(), (SEED, kept)
    run_detect(compose("detect", *_detect_overrides(world, out, *prefill)))  # the same command, run again
    for f in folders:
        assert (out / f / "records.jsonl").read_bytes() == (one / f / "records.jsonl").read_bytes(), (SEED, f, kept)
        assert _summary(out / f) == _summary(one / f), (SEED, f)
    assert _summary(out) == _summary(one), SEED
    assert (out / "table.md").read_text() == (one / "table.md").read_text()


# ------------------------------------------------------------------------------------------ build_data
BUILD = ["data=wordproblems", "data.n=300", "paraphrase.k=2", "logger=none"]
BUILD_STEPS = ["run_fingerprint.json", "config.yaml", "items.jsonl", "reference.jsonl", "paraphrases.jsonl"]


def test_build_data_killed_at_a_random_point_rebuilds_the_same_files(tmp_path):
    from zcp.benchmarks.build import build_data

    one = tmp_path / "one"
    build_data(compose("build_data", *BUILD, f"output_dir={one}"))
    step = _rng("build_data").choice(BUILD_STEPS)
    out = tmp_path / "killed"
    _kill_when([*_script("run_build_data.py"), *BUILD, f"output_dir={out}"], (out / step).exists,
               f"{step} was written", tmp_path)
    assert not (out / "build_report.json").exists(), (SEED, step)
    print(f"build_data: killed once {step} was written (ZCP_KILL_SEED={SEED})")
    build_data(compose("build_data", *BUILD, f"output_dir={out}"))
    for name in ("items.jsonl", "manifest.json", "reference.jsonl", "paraphrases.jsonl"):
        assert (out / name).read_bytes() == (one / name).read_bytes(), (SEED, step, name)
    r1, r2 = (json.loads((d / "build_report.json").read_text()) for d in (one, out))
    drop = ("seconds", "output_dir")
    assert {k: v for k, v in r2.items() if k not in drop} == {k: v for k, v in r1.items() if k not in drop}


# ------------------------------------------------------------------------------------------ baselines
def _baselines_overrides(world: Path, out: Path) -> list[str]:
    return [f"model.path={world / 'model'}", f"data.path={world / 'bench.jsonl'}", f"data.u_path={world / 'u.jsonl'}",
            f"data.reference_path={world / 'ref.jsonl'}", "detectors=[ppl,zlib,mink20,minkpp20]",
            "bootstrap_samples=200", "logger=none", f"output_dir={out}"]


def test_the_baselines_killed_at_a_random_point_resume_to_the_same_records(world, tmp_path):
    from zcp.core.io import read_jsonl
    from zcp.validate.baselines import run_baselines

    if not (world / "u.jsonl").exists():
        items = [Item(f"u{i:02d}", Q.format(n="Dan", a=i + 20, b=i + 5), str(2 * i + 25)) for i in range(20)]
        save_items(world / "u.jsonl", items)
    one = tmp_path / "one"
    run_baselines(compose("baselines", *_baselines_overrides(world, one)))
    total = _lines(one / "records.jsonl")
    target = _rng("baselines").randint(1, total * 3 // 4)
    out = tmp_path / "killed"
    _kill_when([*_script("run_baselines.py"), *_baselines_overrides(world, out)],
               lambda: _lines(out / "records.jsonl") >= target, f"{target} of {total} records", tmp_path)
    kept = _lines(out / "records.jsonl")
    print(f"baselines: killed at {kept} of {total} records (ZCP_KILL_SEED={SEED})")
    assert kept < total and not (out / "summary.json").exists(), (SEED, kept)
    run_baselines(compose("baselines", *_baselines_overrides(world, out)))

    def rows(d: Path) -> list[str]:
        return sorted(json.dumps(r, sort_keys=True) for r in read_jsonl(d / "records.jsonl"))

    assert rows(out) == rows(one), (SEED, kept)
    s1, s2 = (json.loads((d / "summary.json").read_text()) for d in (one, out))
    assert {k: v for k, v in s2.items() if k != "output_dir"} == {k: v for k, v in s1.items() if k != "output_dir"}
    assert (out / "baselines.md").read_text() == (one / "baselines.md").read_text()


# ------------------------------------------------------------------------------------------ calibration
def _calibration_overrides(world: Path, out: Path, records: Path) -> list[str]:
    return [f"model.path={world / 'model'}", "data=jsonl", "data.name=bench", f"data.path={world / 'bench.jsonl'}",
            f"data.reference_path={world / 'ref.jsonl'}", "parts=[base_model]", "base_model.metrics=[p_first,p_all]",
            "base_model.subsets=10", "base_model.subset_size=8", "base_model.B=99", "base_model.chunk_size=1",
            f"base_model.records_root={records}", "logger=none", "run.progress=false", f"output_dir={out}"]


def test_the_calibrations_base_model_part_killed_at_a_random_point_resumes_to_the_same_records(world, tmp_path):
    from zcp.validate.calibration import run_calibration

    one = tmp_path / "one"
    run_calibration(compose("calibration", *_calibration_overrides(world, one, tmp_path / "rec_one")))
    (ref,) = (tmp_path / "rec_one").glob("*/records.jsonl")
    total = _lines(ref)
    assert total == 60
    target = _rng("calibration").randint(1, total * 3 // 4)
    out, records = tmp_path / "killed", tmp_path / "rec_killed"
    _kill_when([*_script("run_calibration.py"), *_calibration_overrides(world, out, records)],
               lambda: _lines(*records.glob("*/records.jsonl")) >= target, f"{target} of {total} records",
               tmp_path)
    kept = _lines(*records.glob("*/records.jsonl"))
    print(f"calibration: killed at {kept} of {total} records (ZCP_KILL_SEED={SEED})")
    assert kept < total and not (out / "summary.json").exists(), (SEED, kept)
    run_calibration(compose("calibration", *_calibration_overrides(world, out, records)))
    (got,) = records.glob("*/records.jsonl")
    assert got.parent.name == ref.parent.name and got.read_bytes() == ref.read_bytes(), (SEED, kept)

    def plain(d: Path) -> tuple:
        """The summary's results: its rows and the base-model part's info but its timing and folders."""
        s = json.loads((d / "summary.json").read_text())
        info = {k: v for k, v in s["info"]["base_model"].items() if k not in ("scoring_seconds", "records_dir")}
        return s["rows"], info

    assert plain(out) == plain(one), SEED
    assert (out / "table.md").read_text() == (one / "table.md").read_text()


# ------------------------------------------------------------------------------------------ the simulation
SIM = ["benchmark.n=16", "exposure.k=1", "exposure.sft_epochs=1", "exposure.grpo_steps=1", "eval.max_items=2",
       "eval.max_new_tokens=24", "train.grpo.max_completion_length=24", "train.grpo.per_device_train_batch_size=4",
       "train.grpo.num_generations=4", "detect.m=1", "detect.seeds=[0,1]", "stats.bootstrap_samples=500",
       "probe.full_cot_max_tokens=40", "logger=none", "train.sft.warmup_steps=0"]
# where a run can be: each file appears at one stage (data, base evaluation, SFT, GRPO, merge, Table 6, detection
# of FT, then of the base model in the shared directory beside the run)
SIM_POINTS = ["sft_data.jsonl", "eval/base.json", "sft/checkpoint-1/trainer_state.json", "sft_adapter/adapter_config.json",
              "grpo/checkpoint-1/trainer_state.json", "grpo_adapter/adapter_config.json", "model/tokenizer.json",
              "exposure.json", "detect/FT__*/run_meta.json", "detect/FT__*/summary.json", "../base-detect__*/run_meta.json"]


@pytest.mark.slow  # ~35-45 s on two shared cores (two reduced demos and a resume); make test-all
def test_the_simulation_killed_at_a_random_point_resumes_to_the_same_records(tmp_path, monkeypatch):
    from zcp.config import asset_path
    from zcp.simulate.pipeline import run_simulation

    if not Path(asset_path("base_model"), "model.safetensors").exists():
        pytest.skip("the shipped base model is not built")
    runs = {}
    for name in ("one", "killed"):  # each beside its own shared base-model detection (base-detect__<key>/)
        (tmp_path / name).mkdir()
        runs[name] = tmp_path / name / "run"
    monkeypatch.chdir(tmp_path / "one")
    run_simulation(compose("demo", *SIM, f"output_dir={runs['one']}"))
    point = _rng("simulation").choice(SIM_POINTS)
    out = runs["killed"]
    _kill_when([*_script("run_demo.py", "train"), *SIM, f"output_dir={out}"],
               lambda: any(out.glob(point)) if "*" in point else (out / point).exists(), f"{point} was written",
               tmp_path / "killed")
    print(f"simulation: killed once {point} was written (ZCP_KILL_SEED={SEED})")
    assert not (out / "detect" / "simulation_summary.json").exists(), (SEED, point)
    monkeypatch.chdir(tmp_path / "killed")
    run_simulation(compose("demo", *SIM, f"output_dir={out}"))

    def detection_records(run: Path) -> dict[str, bytes]:
        """FT's and the base model's records by label (FT's directory is named by its model folder's path too)."""
        found = [*run.glob("detect/FT__*/records.jsonl"), *run.parent.glob("base-detect__*/records.jsonl")]
        return {p.parent.name.split("__")[0]: p.read_bytes() for p in found}

    got, want = detection_records(out), detection_records(runs["one"])
    assert len(want) == 2 and got == want, (SEED, point)
    for name in ("table6.json", "training_items.jsonl", "manifest.json"):
        assert (out / name).read_bytes() == (runs["one"] / name).read_bytes(), (SEED, point, name)
    s1, s2 = (json.loads((r / "detect" / "simulation_summary.json").read_text()) for r in (runs["one"], out))
    for key in ("results", "verdicts", "did", "table6"):
        assert s2[key] == s1[key], (SEED, point, key)
