"""A disk error while appending records (EFBIG, ENOSPC, ...) is one line saying how many records were kept and that
a rerun resumes (exit 2 at an entry point); the rerun resumes to the records of a run that never failed."""

from __future__ import annotations

import errno
import json

import pytest
from fakes import FakeBackend

import zcp.core.records
from zcp.config import one_line_errors
from zcp.core.items import Item
from zcp.errors import RunDirError
from zcp.probe.detect import DetectDataset, DetectSettings, detect
from zcp.probe.prompts import ProbeConfig

Q = "Tom has {a} apples and buys {b} more. How many apples does Tom have now?"
PROBE = ProbeConfig(metrics=("p_first", "p_all"))
SETTINGS = DetectSettings(progress=False, bootstrap_samples=200, chunk_size=4)


def _data() -> list[DetectDataset]:
    items = [Item(f"i{k}", Q.format(a=k + 3, b=k + 1), str(2 * k + 4)) for k in range(6)]
    ref = {it.id: [Item(f"{it.id}::r0", Q.format(a=k + 30, b=k + 1), str(2 * k + 31),
                        metadata={"original_id": it.id})] for k, it in enumerate(items)}
    return [DetectDataset("D", items, ref)]


def _failing_open(monkeypatch, after: int, code: int) -> None:
    """The records writer's appends fail with OSError `code` from the (after+1)-th on (a full or too large file)."""
    real = open
    count = {"n": 0}

    class Failing:
        def __init__(self, f):
            self.f = f

        def write(self, text):
            raise OSError(code, "simulated: " + errno.errorcode[code])

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def fake(path, mode="r", *a, **kw):
        f = real(path, mode, *a, **kw)
        if mode == "a":
            count["n"] += 1
            if count["n"] > after:
                return Failing(f)
        return f

    monkeypatch.setattr(zcp.core.records, "open", fake, raising=False)


@pytest.mark.parametrize("code", [errno.EFBIG, errno.ENOSPC])
def test_a_disk_error_says_what_was_kept_and_a_rerun_resumes(tmp_path, monkeypatch, code):
    clean = detect(FakeBackend({}), _data(), PROBE, tmp_path / "clean", SETTINGS)
    out = tmp_path / "run"
    _failing_open(monkeypatch, after=1, code=code)
    with pytest.raises(RunDirError) as e:
        detect(FakeBackend({}), _data(), PROBE, out, SETTINGS)
    msg = str(e.value)
    assert "\n" not in msg and str(out / "records.jsonl") in msg and errno.errorcode[code] in msg
    assert "4 records kept" in msg and "a rerun resumes" in msg
    monkeypatch.undo()
    again = detect(FakeBackend({}), _data(), PROBE, out, SETTINGS)
    rows = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert rows == [json.loads(x) for x in (tmp_path / "clean" / "records.jsonl").read_text().splitlines()]
    assert again["verdicts"] == clean["verdicts"]


def test_at_an_entry_point_it_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    _failing_open(monkeypatch, after=0, code=errno.EFBIG)

    @one_line_errors
    def entry() -> None:
        detect(FakeBackend({}), _data(), PROBE, tmp_path / "run", SETTINGS)

    with pytest.raises(SystemExit) as e:
        entry()
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "0 records kept" in err[0]
