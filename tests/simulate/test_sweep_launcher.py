"""The exposure sweep through hydra-submitit-launcher's local executor: a 2-point tiny sweep
(`experiment=exposure_sweep`, exposure.k=1,2) run with `hydra/launcher=submitit_local` gives the same run dirs
(hash names), the same training data and adapters and the same exposure report as the basic launcher, with
its two jobs in parallel processes (their logged time spans overlap; the basic launcher's follow each other).

Slow (two sweeps of two tiny contaminations + detection, minutes on 2 shared cores): `make test-launch`. The
configs' composition (local vs SLURM: same jobs, other launcher fields) is tested in test_launch.py.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from pathlib import Path

import pytest
from launch_runs import ENTRY, build_tiny_base, launch_env, run_logged, tiny_overrides

pytestmark = pytest.mark.slow

DETECT = ["detect.m=1", "detect.seeds=[0]", "stats.bootstrap_samples=200", "probe.metrics=[acc,p_all]",
          "probe.zero_cot_max_tokens=8", "probe.full_cot_max_tokens=16"]
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]", re.M)


def _sweep(cwd: Path, base: Path, launcher: str):
    """The exposure sweep reduced to exposure.k=1,2 (answer share and epochs fixed) on the tiny model, in `cwd`."""
    cwd.mkdir(parents=True)
    overrides = [*tiny_overrides(base, k="1,2", sft_epochs=2, grpo_steps=1), *DETECT,
                 "experiment=exposure_sweep", f"hydra/launcher={launcher}", "logger=none",
                 "name=exposure", "exposure.answer_only_fraction=0.5", "exposure.sft_epochs=2"]  # the experiment's name
    return run_logged([sys.executable, str(ENTRY), *overrides], cwd / "sweep.log", cwd=cwd, env=launch_env())


def _spans(cwd: Path) -> list[tuple[datetime, datetime]]:
    """The first and last logged time of each sweep job (Hydra's per-job log, <sweep dir>/<n>/*.log)."""
    spans = []
    for log in sorted(cwd.glob("outputs/hydra-multirun/*/[0-9]*/*.log")):
        stamps = [datetime.strptime(s, "%Y-%m-%d %H:%M:%S,%f") for s in STAMP.findall(log.read_text())]
        assert stamps, log
        spans.append((stamps[0], stamps[-1]))
    return spans


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("sweeps")
    base = build_tiny_base(root / "tiny_base")
    out = {}
    for launcher in ("basic", "submitit_local"):
        res = _sweep(root / launcher, base, launcher)
        assert res.returncode == 0, res.log[-3000:]
        out[launcher] = (root / launcher, res)
    print(f"\nsweep seconds: basic {out['basic'][1].seconds}, submitit_local {out['submitit_local'][1].seconds}")
    return out


def test_same_run_dirs_data_adapters_and_report(sweeps):
    from safetensors.torch import load_file

    (basic, _), (local, _) = sweeps["basic"], sweeps["submitit_local"]
    names = sorted(p.name for p in (basic / "outputs/contaminate").iterdir())
    assert names == sorted(p.name for p in (local / "outputs/contaminate").iterdir())
    runs = [n for n in names if n.startswith("exposure__")]
    assert len(runs) == 2 and any(n.startswith("base-detect__") for n in names) and "exposure_report" in names
    for run in runs:
        a, b = basic / "outputs/contaminate" / run, local / "outputs/contaminate" / run
        for name in ("manifest.json", "sft_data.jsonl", "grpo_data.jsonl"):
            assert (a / name).read_bytes() == (b / name).read_bytes(), (run, name)
        for adapter in ("sft_adapter", "grpo_adapter"):
            x, y = (load_file(d / adapter / "adapter_model.safetensors") for d in (a, b))
            assert x.keys() == y.keys() and all(x[k].equal(y[k]) for k in x), (run, adapter)
    rep_a = json.loads((basic / "outputs/contaminate/exposure_report/exposure_report.json").read_text())
    rep_b = json.loads((local / "outputs/contaminate/exposure_report/exposure_report.json").read_text())
    assert len(rep_a) == 2 and {r["k"] for r in rep_a} == {1, 2}
    assert rep_a == rep_b
    assert (basic / "outputs/contaminate/exposure_report/exposure_report.md").read_text() == \
        (local / "outputs/contaminate/exposure_report/exposure_report.md").read_text()


def test_submitit_jobs_ran_in_parallel_processes(sweeps):
    (basic, _), (local, _) = sweeps["basic"], sweeps["submitit_local"]
    # one folder per job, named by its id, which for the local executor is the job's pid (and "%j", the
    # submission's own folder, written before the ids exist)
    jobs = [p.name for p in local.glob("outputs/hydra-multirun/*/.submitit/*") if p.is_dir() and p.name != "%j"]
    assert len(jobs) == 2 and all(j.isdigit() for j in jobs), jobs
    (a0, a1), (b0, b1) = _spans(local)
    assert a0 < b1 and b0 < a1, "the submitit_local jobs did not overlap"
    first, second = sorted(_spans(basic))
    assert first[1] <= second[0]  # the basic launcher runs them one after the other in its own process
