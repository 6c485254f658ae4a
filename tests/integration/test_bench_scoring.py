"""scripts/bench_scoring.py --end-to-end: the small model it builds, its benchmark, and the figures it derives
(marginal rate of whole run_detect runs against the raw forward), without timing anything real."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("bench_scoring", REPO / "scripts" / "bench_scoring.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_scoring"] = mod
    spec.loader.exec_module(mod)
    return mod


bs = _load()


def test_items_are_distinct_questions():
    items = bs._items(3000)
    assert len(items) == 3000 == len({q for q, _ in items})


def test_small_model_is_a_2x96_llama_with_the_shipped_tokenizer_that_loads_and_scores(tmp_path):
    from transformers import AutoTokenizer

    from zcp.backends.base import Prompt, ScoreRequest
    from zcp.backends.hf import HFBackend
    from zcp.config import asset_path

    path = bs.small_model(tmp_path / "small")
    backend = HFBackend.from_pretrained(path, device="cpu")
    cfg = backend.model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size) == (2, 96)
    assert backend.tokenizer.get_vocab() == AutoTokenizer.from_pretrained(asset_path("base_model")).get_vocab()
    (res,) = backend.score([ScoreRequest(Prompt("Mia has 3 stickers.", "The final answer is: \\[ \\boxed{"), "3}")])
    assert res.n_tokens >= 2 and all(math.isfinite(x) and x < 0 for x in res.token_logprobs)


def test_e2e_figures_are_the_marginal_rate_against_the_best_raw_forward(tmp_path, monkeypatch):
    walls = iter([(10.0, 18.0), (30.0, 58.0), (9.0, 17.0), (31.0, 60.0)])  # (wall, cpu): small, large, small, large
    monkeypatch.setattr(bs, "_run_detect", lambda root, model, *extra, tree=None: next(walls))
    raw_calls = []
    clock = {"t": 0.0}

    def fake_perf_counter():
        return clock["t"]

    def raw():  # 2 s of wall, 3.5 s of CPU, 4 s wall on the second call
        raw_calls.append(1)
        clock["t"] += 2.0 if len(raw_calls) != 2 else 4.0

    monkeypatch.setattr(bs.time, "perf_counter", fake_perf_counter)
    monkeypatch.setattr(bs.time, "process_time", lambda: clock["t"] * 1.75)
    sizes = {500: tmp_path / "500", 5000: tmp_path / "5000"}
    for p in sizes.values():
        p.mkdir()
    fig = bs._e2e_once("m", sizes, raw, repeats=5, extra=(), best_of=2)
    assert len(raw_calls) == 5  # before each of the 4 runs and after the last
    assert (fig["wall_small_s"], fig["wall_s"]) == (9.0, 30.0)  # the best of two, per size
    assert fig["marginal_units_per_s"] == pytest.approx(4500 / 21.0)
    assert fig["raw_units_per_s"] == pytest.approx(5000 / 2.0)  # the fastest raw forward
    assert fig["ratio"] == pytest.approx((4500 / 21.0) / 2500)
    assert fig["host_ms_per_unit"] == pytest.approx(1e3 * (21.0 / 4500 - 2.0 / 5000))
    assert fig["ratio_cpu"] == pytest.approx((4500 / (58.0 - 17.0)) / (5000 / 3.5))


def test_machine_state_and_cpu_split_state_the_load_a_run_ran_under():
    state = bs.machine_state()
    assert state["time_utc"][:2] == "20" and len(state["loadavg"]) == 3
    before = {"jiffies": {"busy": 100, "idle": 300, "steal": 0}}
    after = {"jiffies": {"busy": 250, "idle": 330, "steal": 20}}
    assert bs.cpu_split(before, after) == {"busy": 0.75, "idle": 0.15, "steal": 0.1}
    assert bs.cpu_split({}, after) == {}


def test_bound_derives_both_ceilings_from_its_measurements_and_restores_the_threads(tmp_path):
    import argparse
    import json

    import torch

    threads = torch.get_num_threads()
    out = tmp_path / "bound.json"
    report = bs.bound(argparse.Namespace(n=40, repeats=1, json=str(out)))
    assert torch.get_num_threads() == threads
    assert json.loads(out.read_text())["models"] == report["models"]
    assert set(report["models"]) == {"shipped", "small"}
    for name, m in report["models"].items():
        assert min(m["raw_ms_per_unit"], m["raw_1thread_ms_per_unit"], m["render_ms_per_unit"],
                   m["tokenise_ms_per_unit"]) > 0
        assert m["sequential_bound"] == pytest.approx(
            m["raw_ms_per_unit"] / (m["raw_ms_per_unit"] + m["render_ms_per_unit"] + m["tokenise_ms_per_unit"]))
        assert 0 < m["sequential_bound"] < 1
        assert m["overlapped_bound"] == pytest.approx(m["raw_ms_per_unit"] / m["raw_1thread_ms_per_unit"])
        assert m["target"] == bs.E2E_TARGETS[name]
        assert m["target_excluded"] == (max(m["sequential_bound"], m["overlapped_bound"]) < m["target"])


def test_every_phase_names_a_function_that_exists():
    import importlib

    for label, module, attr in bs.PHASES:
        owner = importlib.import_module(module)
        for part in attr.split("."):
            owner = getattr(owner, part)
        assert callable(owner), label
    assert len({label for label, _, _ in bs.PHASES}) == len(bs.PHASES)


def test_phases_are_marginal_per_unit_from_the_fastest_run_of_each_size(tmp_path, monkeypatch):
    import argparse
    import json
    import subprocess
    import tempfile
    import types

    labels = [label for label, _, _ in bs.PHASES] + [bs.WHOLE]
    # child outputs in call order: small, large, small, large; each phase's seconds = base x size factor x noise
    noise = iter([1.0, 1.0, 2.0, 1.5])
    calls = []
    real_run = subprocess.run

    def fake_run(cmd, **kw):
        if "--phases-child" not in cmd:  # e.g. git, for the report's commit
            return real_run(cmd, **kw)
        size = int(Path(next(a for a in cmd if a.startswith("data.path="))[10:]).parent.name)
        calls.append(size)
        f = next(noise)
        got = {k: (0.001 * size * (2 if k == "    forward" else 1) + 1.0) * f for k in labels}
        got[bs.WHOLE] = (0.01 * size + 3.0) * f
        return types.SimpleNamespace(stdout="some log line\nPHASES " + json.dumps(got) + "\n")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(tempfile, "TemporaryDirectory", lambda: _Dir(tmp_path))
    out = tmp_path / "phases.json"
    args = argparse.Namespace(small_model=False, model="m", small_scale=1, model_scale=2, n=50, n_small=10, runs=2,
                              detect_args=["run.chunk_size=8"], json=str(out))
    report = bs.phases(args)
    assert calls == [20, 100, 20, 100] and report["units"] == [20, 100]
    assert report["ms_per_unit"]["    forward"] == pytest.approx(1e3 * 0.002)  # the fastest run of each size
    assert report["ms_per_unit"][bs.WHOLE] == pytest.approx(1e3 * 0.01)
    assert report["host_ms_per_unit"] == pytest.approx(8.0)
    assert report["ratio"] == pytest.approx(0.2)
    assert report["host_allowed_ms_per_unit"] == {"0.8": pytest.approx(0.5), "0.9": pytest.approx(2 / 0.9 - 2)}
    assert json.loads(out.read_text())["ms_per_unit"] == pytest.approx(report["ms_per_unit"])
    assert (tmp_path / "100" / "data.jsonl").exists() and (tmp_path / "100" / "ref.jsonl").exists()


class _Dir:
    def __init__(self, path):
        self.path = path

    def __enter__(self):
        return str(self.path)

    def __exit__(self, *exc):
        return False


def test_a_phases_child_times_each_phase_of_a_real_run_detect(tmp_path):
    import json
    import os
    import subprocess

    from zcp.config import asset_path

    bs._write_benchmark(tmp_path, 40)
    cmd = [sys.executable, str(REPO / "scripts" / "bench_scoring.py"), "--phases-child",
           f"model.path={asset_path('base_model')}", f"data.path={tmp_path / 'data.jsonl'}",
           f"data.reference_path={tmp_path / 'ref.jsonl'}", "logger=none", f"output_dir={tmp_path / 'out'}",
           "probe.metrics=[p_first,p_all]", "run.progress=false", "stats.bootstrap_samples=200"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "WANDB_MODE": "disabled"}).stdout
    got = json.loads(next(line for line in out.splitlines() if line.startswith("PHASES "))[7:])
    assert set(got) == {label for label, _, _ in bs.PHASES} | {bs.WHOLE}  # every wrapper was reached
    assert all(v > 0 for v in got.values())
    assert got["    forward"] < got["  score"] < got["probe and record"] < got[bs.WHOLE]
    assert len((tmp_path / "out" / "records.jsonl").read_text().splitlines()) == 40
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["verdicts"]


def test_a_failed_phases_child_exits_non_zero(tmp_path):
    import os
    import subprocess

    cmd = [sys.executable, str(REPO / "scripts" / "bench_scoring.py"), "--phases-child",
           f"model.path={tmp_path / 'absent'}", f"data.path={tmp_path / 'absent.jsonl'}", "logger=none"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env={**os.environ, "WANDB_MODE": "disabled"})
    assert r.returncode != 0 and "PHASES" not in r.stdout
