"""Hydra's own errors at an entry point are the project's one line and exit 2 (a misspelt key without `+`, a config
group option that does not exist), and a `-m` sweep is validated at every point before its first job starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _entry(script: str, *overrides: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, str(ROOT / script), *overrides], capture_output=True, text=True,
                          cwd=cwd, env=env)


def _lines(out: subprocess.CompletedProcess) -> list[str]:
    return [line for line in out.stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("override,line", [
    ("probe.zero_cot_prefx=x", "error: probe: unknown key 'zero_cot_prefx'; did you mean 'zero_cot_prefix'?"),
    ("seeed=3", "error: unknown top-level key 'seeed'; did you mean 'seed'?"),
])
def test_a_misspelt_key_without_plus_is_one_line_exit_2(tmp_path, override, line):
    out = _entry("evaluate/run_detect.py", override, "logger=none", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert _lines(out) == [line]


def test_a_value_hydra_cannot_merge_names_why(tmp_path):
    out = _entry("evaluate/run_detect.py", "stats.alpha=abc", "logger=none", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert _lines(out) == ["error: Error merging override stats.alpha=abc: Value 'abc' of type 'str' could not be "
                           "converted to Float"]


def test_a_config_option_that_does_not_exist_is_one_line_exit_2(tmp_path):
    out = _entry("evaluate/run_detect.py", "model=nosuch", "logger=none", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    (line,) = _lines(out)
    assert line.startswith("error: model=nosuch: no such option of the config group model; choose from [")
    assert "'tiny'" in line and "'schema'" not in line


def test_a_sweep_is_validated_at_every_point_before_the_first_job(tmp_path, shared_data):
    src = shared_data / "gsm8k" / "test.jsonl"
    out = _entry("evaluate/run_build_data.py", "-m", "data=gsm8k", f"data.path={src}", "data.limit=4",
                 "paraphrase=none", "logger=none", "seed=0,1", "split.c_fraction=0.5,1.5",
                 f"output_dir={tmp_path}/b_${{seed}}_${{split.c_fraction}}", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    (line,) = _lines(out)
    assert line.startswith("error: sweep point 2 of 4 (seed=0 split.c_fraction=1.5): split.c_fraction")
    assert not list(tmp_path.glob("b_*")) and not (tmp_path / "multirun").exists()  # no job started


def test_a_sweep_with_a_misspelt_key_is_one_line(tmp_path):
    out = _entry("evaluate/run_detect.py", "-m", "logger=none", "seeed=1,2", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert _lines(out) == ["error: sweep point 1 of 2 (seeed=1): unknown top-level key 'seeed'; "
                           "did you mean 'seed'?"]


def test_a_good_sweep_runs_every_point(tmp_path, shared_data):
    src = shared_data / "gsm8k" / "test.jsonl"
    out = _entry("evaluate/run_build_data.py", "-m", "data=gsm8k", f"data.path={src}", "data.limit=4",
                 "paraphrase=none", "logger=none", "seed=0,1", f"output_dir={tmp_path}/b_${{seed}}",
                 f"hydra.sweep.dir={tmp_path}/multirun", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.glob("b_*")) == ["b_0", "b_1"]
    assert all((tmp_path / name / "build_report.json").exists() for name in ("b_0", "b_1"))


def test_a_sweep_the_config_defines_is_validated_before_its_first_job(tmp_path):
    # experiment=exposure_sweep sets hydra.mode=MULTIRUN and its own hydra.sweeper.params (12 points), no -m
    out = _entry("train/run_contaminate.py", "experiment=exposure_sweep", "stats.alpha=2", "logger=none",
                 cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert _lines(out) == ["error: sweep point 1 of 12 (exposure.answer_only_fraction=0.0 exposure.k=1 "
                           "exposure.sft_epochs=2): stats.alpha=2.0: must be in (0, 1)"]
    assert not any(tmp_path.iterdir())  # no job started: no multirun/ or outputs/ dir
