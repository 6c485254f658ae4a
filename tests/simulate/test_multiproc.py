"""The contamination pipeline under `accelerate launch` with two CPU processes (gloo), as a user runs it:
train/run_contaminate.py with launch/accelerate/cpu_2proc.yaml, on a tiny locally built model.

* the run finishes (split, data, SFT, GRPO, merge, Table 6, then ZCP detection), and rank 0 alone writes the run's
  files and W&B runs (offline): every write of each rank is recorded (tests/simulate/rank_audit.py);
* SFT with 2 processes x batch 2 equals 1 process x batch 2 x gradient accumulation 2 (the same global batch of
  4 in the same order): the adapters agree to 1e-6 (measured: bit-identical) and so do the loss curves. GRPO is
  compared by its shape only (steps, prompts per step): each rank samples its own completions from its own RNG
  stream, so the weights of 1 and 2 processes are not expected to agree;
* SIGKILL of rank 1, then of rank 0, mid-SFT: each rerun of the same command skips the finished stages, resumes
  SFT from its newest checkpoint and the last one finishes, with the same SFT adapter as the uninterrupted run.

Slow (several minutes on 2 shared cores): `make test-launch`. The figures (times, agreement) are printed (-s).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from launch_runs import (
    build_tiny_base,
    command,
    launch_env,
    newest_checkpoint,
    rank_pids,
    run_logged,
    tiny_overrides,
)

pytestmark = pytest.mark.slow

SFT_EPOCHS = 4  # 12 examples / global batch 4 = 3 optimizer steps per epoch: 12 SFT steps
SFT_STEPS = 12
ADAPTER_TOL = 1e-6  # float32 all-reduce vs accumulation may differ in summation order; measured 0.0 here
LOSS_RTOL = 1e-5
DETECT = ["stages=[contaminate,detect]", "detect.m=1", "detect.seeds=[0]", "stats.bootstrap_samples=200",
          "probe.metrics=[acc,p_all]", "probe.zero_cot_max_tokens=8", "probe.full_cot_max_tokens=16"]
FIGURES: dict[str, object] = {}


@pytest.fixture(scope="module", autouse=True)
def _print_figures():
    """Print what the tests measured (times, agreement) when the module ends: `pytest -s` shows them."""
    yield
    print("\nlaunch figures:", json.dumps(FIGURES, indent=1, default=str))


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return build_tiny_base(tmp_path_factory.mktemp("tiny_base"))


@pytest.fixture(scope="module")
def runs(base, tmp_path_factory) -> dict:
    """One process with accumulation 2, and two processes (audited, with the detection stage) with accumulation 1."""
    root = tmp_path_factory.mktemp("launch")
    one_dir, two_root = root / "one" / "run", root / "two"
    one = run_logged(command([*tiny_overrides(base, accumulation=2, sft_epochs=SFT_EPOCHS), f"output_dir={one_dir}",
                              f"hydra.run.dir={root / 'hydra-one'}"]),
                     root / "one.log", cwd=root, env=launch_env())
    assert one.returncode == 0, one.log[-3000:]
    two = run_logged(command([*tiny_overrides(base, accumulation=1, sft_epochs=SFT_EPOCHS), *DETECT,
                              f"output_dir={two_root / 'run'}", f"hydra.run.dir={root / 'hydra-two'}"],
                             processes=2, audit=True),
                     root / "two.log", cwd=root,
                     env=launch_env(ZCP_AUDIT_DIR=str(root / "audit"), ZCP_AUDIT_ROOT=str(two_root)))
    assert two.returncode == 0, two.log[-3000:]
    FIGURES.update({"one_process_s": one.seconds, "two_processes_s": two.seconds})
    return {"root": root, "one": one_dir, "two": two_root / "run", "two_root": two_root, "two_log": two.log,
            "audit": root / "audit"}


def _events(audit: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in (audit / f"rank{rank}.jsonl").read_text().splitlines()]


def _adapter(run: Path, stage: str) -> dict:
    from safetensors.torch import load_file

    return load_file(run / f"{stage}_adapter" / "adapter_model.safetensors")


def _max_abs_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _log_history(run: Path, trainer: str) -> list[dict]:
    """The trainer's logged steps (loss, epoch, ...) from its newest checkpoint's trainer_state.json."""
    step = newest_checkpoint(run / trainer)
    state = json.loads((run / trainer / f"checkpoint-{step}" / "trainer_state.json").read_text())
    return [h for h in state["log_history"] if "loss" in h]


def test_two_processes_finish_and_rank0_alone_writes(runs):
    run, log = runs["two"], runs["two_log"]
    assert log.count("stage split: running") == 1 and log.count("stage sft: running") == 2  # main-only vs all ranks
    for name in ("manifest.json", "sft_data.jsonl", "exposure.json", "table6.json", "model/config.json",
                 "eval/final.json", "detect/simulation_summary.json", "detect/table7.md"):
        assert (run / name).is_file(), name
    rank0, rank1 = _events(runs["audit"], 0), _events(runs["audit"], 1)
    # rank 1 writes nothing but the trainers' per-rank checkpoint folders (each rank keeps its RNG state there) and
    # the probe files of the writability checks every rank makes before training (zcp.core.io.check_writable)
    written = [e for e in rank1 if not Path(e["path"]).name.startswith(".zcp-write-check-")]
    assert written and all(e["path"].split("/")[:2] in (["run", "sft"], ["run", "grpo"]) for e in written), written
    assert not [e for e in rank1 if e["event"] == "wandb.init"]
    renamed = {e["path"] for e in rank0 if e["event"] == "os.rename"}  # every run file is written atomically
    for name in ("manifest.json", "benchmark_items.jsonl", "sft_data.jsonl", "grpo_data.jsonl", "training_items.jsonl",
                 "eval/base.json", "eval/final.json", "exposure.json", "table6.json", "model", "sft_adapter",
                 "grpo_adapter", "run_config.json"):
        assert f"run/{name}" in renamed, name
    inits = sorted(e["job_type"] for e in rank0 if e["event"] == "wandb.init")
    assert inits == ["contaminate", "grpo", "sft", "simulate-detect"]
    offline = sorted(p.parent.name for p in runs["two_root"].rglob("offline-run-*/run-*.wandb"))
    assert len(offline) == len(inits)  # one W&B run dir per rank-0 init: none from rank 1
    assert not (runs["root"] / "wandb").exists() and not (runs["root"] / "outputs").exists()  # nothing strays


def test_sft_equals_one_process_with_gradient_accumulation(runs):
    """2 processes x batch 2 x accumulation 1 == 1 process x batch 2 x accumulation 2: same adapter, same losses."""
    diff = _max_abs_diff(_adapter(runs["one"], "sft"), _adapter(runs["two"], "sft"))
    one, two = _log_history(runs["one"], "sft"), _log_history(runs["two"], "sft")
    assert [h["step"] for h in one] == [h["step"] for h in two] == list(range(1, SFT_STEPS + 1))
    loss_rel = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(one, two, strict=True))
    FIGURES.update({"sft_adapter_max_abs_diff": diff, "sft_loss_max_rel_diff": loss_rel,
                    "sft_losses": [round(h["loss"], 4) for h in two]})
    assert diff <= ADAPTER_TOL and loss_rel <= LOSS_RTOL, (diff, loss_rel)


def test_grpo_same_schedule_and_table6_base_identical(runs):
    """GRPO: the same steps over the same prompts per step (epoch progress); its sampled completions differ by rank
    (the weights are reported, not compared). Table 6 before training is rank 0's evaluation of the same model."""
    one, two = _log_history(runs["one"], "grpo"), _log_history(runs["two"], "grpo")
    assert [(h["step"], h["epoch"]) for h in one] == [(h["step"], h["epoch"]) for h in two]
    a, b = _adapter(runs["one"], "grpo"), _adapter(runs["two"], "grpo")
    moved = any("lora_B" in k and float(b[k].abs().sum()) > 0 for k in b)  # PEFT starts B at zero
    # the weights move iff some step had a gradient (a step whose groups all got equal rewards has none)
    assert moved == any(h["grad_norm"] > 0 for h in two), two
    FIGURES.update({"grpo_adapter_max_abs_diff": _max_abs_diff(a, b),
                    "grpo_loss": {"one": [h["loss"] for h in one], "two": [h["loss"] for h in two]}})
    t1 = json.loads((runs["one"] / "table6.json").read_text())
    t2 = json.loads((runs["two"] / "table6.json").read_text())
    assert [(r["split"], r["base"]) for r in t1["rows"]] == [(r["split"], r["base"]) for r in t2["rows"]]


def _kill_when(proc: subprocess.Popen, trainer_dir: Path, step: int, rank: int, timeout: float = 900) -> int:
    """SIGKILL `rank` of a running launch once its trainer has a complete checkpoint at `step` or later."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        reached = newest_checkpoint(trainer_dir)
        if reached >= step:
            pids = rank_pids(proc.pid)
            assert set(pids) == {0, 1}, pids
            os.kill(pids[rank], signal.SIGKILL)
            return reached
        time.sleep(0.02)
    raise AssertionError(f"no checkpoint-{step} before the run ended (rc {proc.poll()})")


def test_sigkill_either_rank_mid_sft_and_rerun_resumes(base, runs, tmp_path):
    out = tmp_path / "run"
    cmd = command([*tiny_overrides(base, accumulation=1, sft_epochs=SFT_EPOCHS), f"output_dir={out}",
                   f"hydra.run.dir={tmp_path / 'hydra'}"], processes=2)
    env = launch_env()
    logs, killed_at, seconds = [], [], []
    for attempt, (rank, step) in enumerate([(1, 3), (0, 7)]):
        log = tmp_path / f"attempt{attempt}.log"
        t0 = time.time()
        with open(log, "w") as fh:
            proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=fh, stderr=subprocess.STDOUT)
            try:
                killed_at.append(_kill_when(proc, out / "sft", step, rank))
                rc = proc.wait(timeout=300)
            finally:
                if proc.poll() is None:
                    proc.kill()
        seconds.append(round(time.time() - t0, 1))
        logs.append(log.read_text())
        assert rc != 0 and not (out / "sft_adapter").exists(), f"attempt {attempt}: rc {rc}"
    last = run_logged(cmd, tmp_path / "final.log", cwd=tmp_path, env=env)
    seconds.append(last.seconds)
    assert last.returncode == 0, last.log[-3000:]
    for log in (logs[1], last.log):  # each rerun: finished stages skipped, SFT resumed from a checkpoint
        for stage in ("split", "data", "eval_base"):
            assert f"stage {stage}: done already, skipped" in log, stage
        assert "SFT: resuming from" in log and "checkpoint-" in log
    assert "stage merge: running" in last.log and (out / "exposure.json").is_file()
    assert (out / "model" / "config.json").is_file() and (out / "grpo_adapter" / "adapter_config.json").is_file()
    diff = _max_abs_diff(_adapter(out, "sft"), _adapter(runs["two"], "sft"))
    FIGURES.update({"killed_rank1_at_step": killed_at[0], "killed_rank0_at_step": killed_at[1],
                    "kill_and_resume_s": seconds, "resumed_sft_adapter_max_abs_diff": diff})
    assert diff <= ADAPTER_TOL, diff
