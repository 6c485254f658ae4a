"""run_build_data's directory is its configuration's: another configuration's build (other seed, other m, other
data) is refused in one line naming both fingerprints before anything is written, the same configuration is a
no-op once finished (or rebuilds what is missing), and two builds cannot share one directory at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from configs import compose

import zcp.config  # noqa: F401  (registers the ${zcp.asset:...} resolver)
from zcp.benchmarks.build import build_data
from zcp.core.io import RunLock
from zcp.core.rundir import RUN_FINGERPRINT
from zcp.errors import RunDirError

ROOT = Path(__file__).resolve().parents[2]
BUILD_FILES = ("items.jsonl", "manifest.json", "reference.jsonl", "paraphrases.jsonl", "build_report.json",
               "config.yaml")


def _cfg(src: Path, out: Path, *extra: str):
    return compose("build_data", "data=gsm8k", f"data.path={src}", "data.limit=6", "reference.m=2",
                   "paraphrase.k=1", "logger=none", f"output_dir={out}", *extra)


def _snapshot(out: Path) -> dict[str, bytes]:
    return {n: (out / n).read_bytes() for n in BUILD_FILES if (out / n).exists()}


@pytest.fixture
def src(shared_data, tmp_path) -> Path:
    p = tmp_path / "test.jsonl"
    p.write_text("".join((shared_data / "gsm8k" / "test.jsonl").read_text().splitlines(keepends=True)[:8]))
    return p


@pytest.mark.parametrize("other", [("seed=1",), ("reference.m=3",), ("data.limit=5",)])
def test_another_configuration_is_refused_before_anything_is_written(src, tmp_path, other):
    out = tmp_path / "build"
    build_data(_cfg(src, out))
    before = _snapshot(out)
    fp = (out / RUN_FINGERPRINT).read_text()
    with pytest.raises(RunDirError) as e:
        build_data(_cfg(src, out, *other))
    msg = str(e.value)
    assert "\n" not in msg and "holds a build_data run of another configuration" in msg
    assert other[0].split("=")[0] in msg  # names what differs
    assert msg.count("fingerprint") >= 1 and len([w for w in msg.split() if len(w.strip("(),;:")) == 16]) >= 2
    assert _snapshot(out) == before and (out / RUN_FINGERPRINT).read_text() == fp


def test_other_data_under_the_same_path_is_refused(src, tmp_path):
    out = tmp_path / "build"
    build_data(_cfg(src, out))
    before = _snapshot(out)
    lines = src.read_text().splitlines(keepends=True)
    src.write_text("".join(lines[::-1]))  # the same file name, other content
    with pytest.raises(RunDirError, match="another configuration"):
        build_data(_cfg(src, out))
    assert _snapshot(out) == before


def test_the_same_configuration_is_a_no_op_once_finished_and_rebuilds_what_is_missing(src, tmp_path):
    out = tmp_path / "build"
    first = build_data(_cfg(src, out))
    before = _snapshot(out)
    stamps = {n: (out / n).stat().st_mtime_ns for n in before}
    again = build_data(_cfg(src, out))
    assert again["files"] == first["files"] and _snapshot(out) == before
    assert {n: (out / n).stat().st_mtime_ns for n in before} == stamps  # nothing rewritten
    (out / "reference.jsonl").unlink()  # a killed build (or a lost file): the same configuration rebuilds
    build_data(_cfg(src, out))
    after = _snapshot(out)
    assert after.pop("build_report.json") and after == {n: b for n, b in before.items() if n != "build_report.json"}


def test_a_directory_of_unknown_origin_is_refused(src, tmp_path):
    out = tmp_path / "build"
    out.mkdir()
    (out / "reference.jsonl").write_text('{"id": "x"}\n')
    with pytest.raises(RunDirError, match=r"no run_fingerprint\.json"):
        build_data(_cfg(src, out))
    assert (out / "reference.jsonl").read_text() == '{"id": "x"}\n' and not (out / "items.jsonl").exists()


def test_a_build_running_in_the_directory_refuses_a_second(src, tmp_path):
    out = tmp_path / "build"
    with RunLock(out), pytest.raises(RunDirError, match="in use by another run"):
        build_data(_cfg(src, out))
    assert not (out / "items.jsonl").exists()


def test_the_entry_point_refuses_in_one_line_exit_2(src, tmp_path):
    out = tmp_path / "build"
    build_data(_cfg(src, out))
    env = {**os.environ, "WANDB_MODE": "disabled"}
    env.pop("HYDRA_FULL_ERROR", None)
    run = subprocess.run([sys.executable, str(ROOT / "evaluate" / "run_build_data.py"), "data=gsm8k",
                          f"data.path={src}", "data.limit=6", "reference.m=2", "paraphrase.k=1", "logger=none",
                          f"output_dir={out}", "seed=7"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: output_dir=") and "seed" in lines[0]


def test_the_same_data_moved_elsewhere_is_the_same_build(src, tmp_path):
    out = tmp_path / "build"
    build_data(_cfg(src, out))
    moved = tmp_path / "moved" / src.name
    moved.parent.mkdir()
    moved.write_bytes(src.read_bytes())
    fp = (out / RUN_FINGERPRINT).read_text()
    build_data(_cfg(moved, out))  # no refusal: the data's content is what the build is made of
    assert (out / RUN_FINGERPRINT).read_text() == fp
