"""User mistakes end in one line on stderr (exit 2) naming the key or file; bugs keep their traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from zcp.config import check_model_path, one_line_errors
from zcp.errors import ConfigError, DataError

ROOT = Path(__file__).resolve().parents[2]


def test_missing_model_path_is_one_line_before_anything_loads(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a", "question": "1+1?", "answer": "2"}\n')
    env = {**os.environ, "WANDB_MODE": "disabled"}
    env.pop("HYDRA_FULL_ERROR", None)
    out = subprocess.run([sys.executable, str(ROOT / "evaluate" / "run_detect.py"), "model.path=/nonexistent/model",
                          f"data.path={data}", f"data.reference_path={data}", "logger=none",
                          f"output_dir={tmp_path / 'run'}"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == ["error: model.path=/nonexistent/model: no such folder, and not a hub id of the form org/name"]
    assert not (tmp_path / "run").exists()


def test_one_line_errors_only_for_user_mistakes(capsys, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    @one_line_errors
    def bad_data() -> None:
        raise DataError("invalid JSON (Expecting value)", path="x.jsonl", row=3)

    with pytest.raises(SystemExit) as e:
        bad_data()
    assert e.value.code == 2
    assert capsys.readouterr().err == "error: file x.jsonl, row 3: invalid JSON (Expecting value)\n"

    @one_line_errors
    def bug() -> None:
        raise KeyError("a real bug")

    with pytest.raises(KeyError):  # a bug keeps its traceback
        bug()
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(DataError):
        bad_data()


def test_check_model_path(tmp_path):
    check_model_path("Qwen/Qwen2.5-Math-7B-Instruct")  # a hub id: left to the hub
    (tmp_path / "m").mkdir()
    with pytest.raises(ConfigError, match=r"no config\.json"):
        check_model_path(str(tmp_path / "m"))
    (tmp_path / "m" / "config.json").write_text("{}")
    check_model_path(str(tmp_path / "m"))
    for bad in (None, "", "./missing", "/abs/missing", "not a path at all"):
        with pytest.raises(ConfigError):
            check_model_path(bad)
