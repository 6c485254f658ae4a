"""A sweep under the submitit launcher: a bad point is one line and exit 2 like under the basic launcher.

A value the schema refuses is found before any job is submitted (`zcp.config.entry.validate_sweep`); what only the
job finds (here a data file missing at one point) ends that job with its one line, which submitit hands the sweep
process as an UncompletedJobError around the job's log: the entry point prints the job's line, naming the point
and the log, instead of that traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "fixtures" / "gsm8k" / "test_head12.jsonl"

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")


def _build_sweep(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, str(ROOT / "evaluate" / "run_build_data.py"), "-m",
                           "hydra/launcher=submitit_local", "data=gsm8k", "data.limit=4", "paraphrase=none",
                           "logger=none", f"hydra.sweep.dir={tmp_path / 'multirun'}",
                           f"output_dir={tmp_path}/b_${{hydra:job.num}}", *overrides],
                          capture_output=True, text=True, cwd=tmp_path, env=env)


def _lines(out: subprocess.CompletedProcess) -> list[str]:
    return [line for line in out.stderr.splitlines() if line.strip() and "Warning" not in line
            and not line.startswith((" ", "'hydra/launcher", "This behavior", "See https"))]


def test_a_point_the_schema_refuses_is_one_line_before_submitit_starts_a_job(tmp_path):
    out = _build_sweep(tmp_path, f"data.path={DATA}", "split.c_fraction=0.5,1.5")
    assert out.returncode == 2, out.stderr
    assert _lines(out)[-1].startswith("error: sweep point 2 of 2 (split.c_fraction=1.5): split.c_fraction")
    assert not (tmp_path / "multirun").exists() and not list(tmp_path.glob("b_*"))  # nothing submitted


def test_a_point_that_fails_in_its_job_is_the_jobs_one_line_not_submitits_traceback(tmp_path):
    missing = tmp_path / "nowhere.jsonl"
    out = _build_sweep(tmp_path, f"data.path={DATA},{missing}")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "UncompletedJobError" not in out.stderr, out.stderr
    line = _lines(out)[-1]
    assert line.startswith(f"error: sweep point 2 of 2 (data.path={missing}) failed: file {missing}: file not found"
                           " (log: "), line
    log = Path(line.rsplit("(log: ", 1)[1].rstrip(")"))
    assert log.is_file() and f"file {missing}: file not found" in log.read_text()
    assert (tmp_path / "b_0" / "build_report.json").exists()  # the good point's job ran to its end


def test_the_troubleshooting_guide_quotes_the_line():
    doc = (ROOT / "docs" / "detect.md").read_text()
    section = " ".join(doc[doc.index("## Troubleshooting"):].split())
    assert "`error: sweep point 2 of 2 (data.path=<file>) failed: file <file>: file not found (log:" in section
