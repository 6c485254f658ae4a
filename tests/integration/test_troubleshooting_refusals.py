"""docs/detect.md's troubleshooting list quotes this round's refusals as they are printed: each stable part is in the
message made now and in the section (a reworded message, or a line of the guide left behind, fails here)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from zcp.errors import ConfigError, RunDirError

REPO = Path(__file__).resolve().parents[2]


def _section() -> str:
    doc = (REPO / "docs" / "detect.md").read_text()
    return " ".join(doc[doc.index("## Troubleshooting"):].split())


def _message(fn) -> str:
    with pytest.raises((ConfigError, RunDirError)) as e:
        fn()
    return str(e.value)


def test_the_guide_quotes_the_messages_as_printed(tmp_path, monkeypatch):
    from zcp.config.model import check_model_folder
    from zcp.core.records import RecordStore
    from zcp.core.rundir import check_run_dir_usable, claim_run_dir

    claim_run_dir(tmp_path / "b", "build_data", {"seed": 0})
    (tmp_path / "f").write_text("x")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{")
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "config.json").write_text("{}")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "config.json").write_text("{}")
    (tmp_path / "t" / "model.safetensors").write_bytes(b"")
    store = RecordStore(tmp_path / "r" / "records.jsonl")

    def full(*a, **k):
        raise OSError(errno.EFBIG, "File too large")

    printed = {
        "build": _message(lambda: claim_run_dir(tmp_path / "b", "build_data", {"seed": 1})),
        "file": _message(lambda: check_run_dir_usable(tmp_path / "f")),
        "json": _message(lambda: check_model_folder(tmp_path / "m")),
        "weights": _message(lambda: check_model_folder(tmp_path / "w")),
        "tokenizer": _message(lambda: check_model_folder(tmp_path / "t")),
    }
    monkeypatch.setattr("zcp.core.records.open", full, raising=False)
    printed["disk"] = _message(lambda: store.append([{"a": 1}]))
    stable = {
        "build": ["holds a build_data run of another configuration (fingerprint", "this build_data run:",
                  "use another output_dir, or delete"],
        "file": ["is a file, not a directory; use another output_dir"],
        "json": ["config.json is not valid JSON (line 1, column"],
        "weights": ["no weights in the folder (no *.safetensors or pytorch_model*.bin)"],
        "tokenizer": ["no tokenizer in the folder (no tokenizer.json,"],
        "disk": ["failed: File too large (OSError 27 EFBIG);", "records kept there, the batch in flight lost; free "
                 "space (or fix the disk) and run the same command again: a rerun resumes"],
    }
    section = _section()
    for name, parts in stable.items():
        for part in parts:
            assert part in printed[name], (name, part, printed[name])
            assert part in section, (name, part)
    assert json.loads((tmp_path / "b" / "run_fingerprint.json").read_text())["made_of"] == {"seed": 0}
