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
    if str(REPO / "scripts") not in sys.path:  # as when the script runs: its folder (scripts/machine.py) importable
        sys.path.insert(0, str(REPO / "scripts"))
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


# --vs-lm-eval: lm-evaluation-harness's HFLM against zcp on the same requests. The default suite has no lm-eval: its
# orchestration is tested with a stand-in side that tokenises and scores by lm-eval's rule on its own (context and
# context + continuation tokenised whole, the continuation = the whole's ids after the context's; a plain forward
# with the log-softmax over the whole vocabulary), and the real HFLM only where lm_eval is importable.


def test_vs_run_figures_are_units_per_second_and_ratios_to_lm_eval():
    fig = bs.vs_run_figures(100, {"lm_eval": 10.0, "zcp_score": 8.0, "zcp_probe": 12.5})
    assert fig["lm_eval_units_per_s"] == pytest.approx(10.0)
    assert fig["zcp_score_units_per_s"] == pytest.approx(12.5)
    assert fig["zcp_probe_units_per_s"] == pytest.approx(8.0)
    assert fig["ratio_zcp_score"] == pytest.approx(1.25)  # zcp units/s over lm-eval's
    assert fig["ratio_zcp_probe"] == pytest.approx(0.8)
    assert "ratio_lm_eval" not in fig and fig["lm_eval_s"] == 10.0


def test_vs_summary_takes_medians_and_judges_each_ratio_against_the_target():
    runs = [bs.vs_run_figures(10, {"lm_eval": 1.0, "zcp_score": s, "zcp_probe": p})
            for s, p in ((0.5, 2.0), (2.0, 0.9), (0.8, 1.1))]
    out = bs.vs_summary(runs)
    assert out["median"]["ratio_zcp_score"] == pytest.approx(1.25)  # of 2.0, 0.5, 1.25
    assert out["median"]["ratio_zcp_probe"] == pytest.approx(1 / 1.1)
    assert out["met"] == {"ratio_zcp_score": True, "ratio_zcp_probe": False}
    assert bs.vs_summary(runs, target=1.3)["met"]["ratio_zcp_score"] is False


def test_sides_rotate_so_each_runs_at_each_place_once_in_three_runs():
    orders = [bs._sides_order(r) for r in range(3)]
    assert all(sorted(o) == sorted(bs.VS_SIDES) for o in orders)
    assert [{o[k] for o in orders} for k in range(3)] == [set(bs.VS_SIDES)] * 3
    assert bs._sides_order(3) == orders[0]


def test_vs_pairs_token_mismatches_and_logprob_gap():
    from zcp.backends.base import Prompt, ScoreRequest
    from zcp.backends.tokenized import ScoringEncoding

    reqs = [ScoreRequest(Prompt("q1", "p{"), "42}"), ScoreRequest(Prompt("q2", "p{"), "7}")]
    assert bs.vs_pairs(["ctx1", "ctx2"], reqs) == [("ctx1", "42}"), ("ctx2", "7}")]
    with pytest.raises(ValueError):
        bs.vs_pairs(["ctx1"], reqs)
    enc = [ScoringEncoding((1, 2, 3), (4, 5)), ScoringEncoding((1, 2), (6,))]
    assert bs.token_mismatches(enc, [([1, 2, 3], [4, 5]), ([1, 2], [6])]) == []
    # the same row, cut elsewhere between context and continuation, is a mismatch too
    assert bs.token_mismatches(enc, [([1, 2], [3, 4, 5]), ([1, 2], [7])]) == [0, 1]
    assert bs.logprob_gap([-1.0, -2.5], [-1.00002, -2.4]) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        bs.logprob_gap([-1.0], [])


def test_vs_models_are_the_given_folders_else_the_shipped_and_the_cached_real_model(tmp_path, monkeypatch, capsys):
    from zcp.config import asset_path

    assert bs.vs_models(["a/one", "b/two"]) == {"one": "a/one", "two": "b/two"}
    monkeypatch.setenv("ZCP_CACHE", str(tmp_path))
    assert bs.vs_models([]) == {"shipped": str(asset_path("base_model"))}
    assert "make real-model" in capsys.readouterr().out
    real = tmp_path / "models" / bs.REAL_MODEL
    real.mkdir(parents=True)
    assert bs.vs_models([]) == {"shipped": str(asset_path("base_model")), "smollm2-135m": str(real)}


class _StandInSide:
    """lm-eval's rule without lm-eval: the chat template + prefix, whole-then-split tokenisation (`shift` moves the
    cut that many tokens into the context: a side tokenising otherwise), one plain forward per request."""

    shift = 0

    def __init__(self, model, tokenizer, batch_size):
        self.model, self.tok, self.calls = model, tokenizer, 0

    def contexts(self, prompts):
        return [self.tok.apply_chat_template([{"role": "user", "content": p.user}], tokenize=False,
                                             add_generation_prompt=True) + p.assistant_prefix for p in prompts]

    def encode(self, pairs):
        out = []
        for c, x in pairs:
            whole = self.tok.encode(c + x, add_special_tokens=False)
            k = len(self.tok.encode(c, add_special_tokens=False)) + self.shift
            out.append((whole[:k], whole[k:]))
        return out

    def loglikelihood(self, pairs):
        import torch

        self.calls += 1
        sums = []
        with torch.inference_mode():
            for ctx, cont in self.encode(pairs):
                lp = torch.log_softmax(self.model(torch.tensor([ctx + cont])).logits[0].float(), -1)
                sums.append(sum(float(lp[len(ctx) - 1 + k, t]) for k, t in enumerate(cont)))
        return sums


def _vs_args(tmp_path, **kw):
    import argparse

    from zcp.config import asset_path

    base = dict(n=12, runs=2, batch_size=4, threads=None, model_dirs=[str(asset_path("base_model"))],
                json=str(tmp_path / "vs.json"))
    return argparse.Namespace(**{**base, **kw})


def test_vs_lm_eval_checks_agreement_then_times_the_sides_interleaved(tmp_path):
    import json

    sides = []

    def build(model, tok, batch_size):
        sides.append(_StandInSide(model, tok, batch_size))
        return sides[-1]

    report = bs.vs_lm_eval(_vs_args(tmp_path), lm_side=build)
    (m,) = report["models"].values()
    assert m["token_mismatches"] == 0 and m["rendering_mismatches"] == 0
    assert m["max_abs_logprob_diff"] < bs.LOGPROB_TOLERANCE and m["max_abs_logprob_diff_probe"] < bs.LOGPROB_TOLERANCE
    assert sides[0].calls == 1 + 2  # the check, then once per run
    from zcp.config.groups import RunConfig

    assert len(m["runs"]) == 2
    assert m["probe_block"] == max(RunConfig.chunk_size, 4 * 4)  # run_detect's chunks at the default chunk size
    for fig in m["runs"]:
        assert fig["ratio_zcp_score"] == pytest.approx(fig["lm_eval_s"] / fig["zcp_score_s"])
        assert fig["zcp_probe_units_per_s"] == pytest.approx(12 / fig["zcp_probe_s"])
    assert m["median"]["ratio_zcp_probe"] == pytest.approx(
        sorted(f["ratio_zcp_probe"] for f in m["runs"])[0] / 2 + sorted(f["ratio_zcp_probe"] for f in m["runs"])[1] / 2)
    assert json.loads((tmp_path / "vs.json").read_text())["models"].keys() == report["models"].keys()
    assert report["batch_size"] == 4 and report["units"] == 12


def test_vs_lm_eval_does_not_time_sides_that_score_other_token_ids(tmp_path):
    class Shifted(_StandInSide):
        shift = 1  # the continuation's first token moved into the context

    report = bs.vs_lm_eval(_vs_args(tmp_path, runs=1), lm_side=Shifted)
    (m,) = report["models"].values()
    assert m["token_mismatches"] == 12
    assert "error" in m and "runs" not in m


def test_lm_eval_side_scores_the_same_token_ids_and_log_probs_as_zcp():
    pytest.importorskip("lm_eval")
    from zcp.backends.hf import HFBackend
    from zcp.config import asset_path

    prompts, reqs = bs._probe_requests(10)
    be = HFBackend.from_pretrained(asset_path("base_model"), device="cpu", dtype="float32", max_batch_size=4)
    side = bs.LmEvalSide(be.model, be.tokenizer, 4)
    contexts = side.contexts(prompts)
    assert contexts == be.render_all(prompts)
    pairs = bs.vs_pairs(contexts, reqs)
    assert bs.token_mismatches(be.encode_for_scoring(reqs), side.encode(pairs)) == []
    zcp = [sum(r.token_logprobs) for r in be.score(reqs)]
    assert bs.logprob_gap(zcp, side.loglikelihood(pairs)) < bs.LOGPROB_TOLERANCE


def test_vs_lm_eval_without_lm_eval_says_how_to_get_it(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "lm_eval" else real(name, *a))
    with pytest.raises(SystemExit, match="make bench-env"):
        bs.vs_lm_eval(_vs_args(tmp_path))
    assert not (tmp_path / "vs.json").exists()
