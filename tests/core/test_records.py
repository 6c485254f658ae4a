"""zcp.core.records.RecordStore: the one resumable JSONL store of detection and baselines runs."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from zcp.core import records as records_mod
from zcp.core.records import RecordStore
from zcp.errors import DataError


def _key(r):
    return (r["unit"], int(r["draw"]))


def _rows(n, start=0):
    return [{"unit": f"u{k}", "draw": 0, "score": k / 10} for k in range(start, start + n)]


def _write(path, rows, tail=""):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows) + tail, encoding="utf-8")


def test_a_torn_last_line_is_counted_dropped_and_repaired(tmp_path):
    path = tmp_path / "records.jsonl"
    _write(path, _rows(3), tail='{"unit": "u3", "dra')
    store = RecordStore(path, key=_key)
    assert [r["unit"] for r in store.read()] == ["u0", "u1", "u2"]
    assert store.torn == 1 and not store.clean
    loaded = store.load()
    assert [r["unit"] for r in loaded] == ["u0", "u1", "u2"] and store.torn == 1
    assert path.read_text().endswith("}\n") and '"u3"' not in path.read_text()  # the half record is gone
    store.append(_rows(2, start=3))
    again = RecordStore(path, key=_key)
    assert [r["unit"] for r in again.load()] == ["u0", "u1", "u2", "u3", "u4"] and again.torn == 0 and again.clean


def test_a_kill_inside_a_multibyte_character_tears_only_the_last_line(tmp_path):
    path = tmp_path / "records.jsonl"
    whole = json.dumps({"unit": "u1", "draw": 0, "q": "…cut"}, ensure_ascii=False).encode()
    cut = whole[: whole.index("…".encode()) + 1]  # the first byte of a three-byte character
    path.write_bytes(json.dumps({"unit": "u0", "draw": 0, "q": "é"}, ensure_ascii=False).encode() + b"\n" + cut)
    store = RecordStore(path, key=_key)
    assert [r["q"] for r in store.load()] == ["é"] and store.torn == 1


def test_a_broken_line_before_the_last_is_an_error_naming_the_row(tmp_path):
    path = tmp_path / "records.jsonl"
    _write(path, _rows(1), tail='{"unit": "u1", "dra\n' + json.dumps(_rows(1, start=2)[0]) + "\n")
    with pytest.raises(DataError, match=r"row 2") as e:
        RecordStore(path, key=_key).load()
    assert str(path) in str(e.value)


def test_a_last_line_without_its_newline_gets_one_before_the_next_append(tmp_path):
    path = tmp_path / "records.jsonl"
    _write(path, _rows(2))
    path.write_text(path.read_text().rstrip("\n"))
    store = RecordStore(path, key=_key)
    assert len(store.load()) == 2 and store.torn == 0
    store.append(_rows(1, start=2))
    assert [r["unit"] for r in RecordStore(path).read()] == ["u0", "u1", "u2"]


def test_duplicate_keys_keep_the_first_record(tmp_path):
    path = tmp_path / "records.jsonl"
    first, other = _rows(2), {"unit": "u0", "draw": 0, "score": 99.0}
    _write(path, [*first, other])
    store = RecordStore(path, key=_key)
    assert [r["score"] for r in store.load()] == [0.0, 0.1]
    assert len(RecordStore(path).read()) == 2  # the file was rewritten without the copy
    assert store.get(("u0", 0))["score"] == 0.0 and ("u1", 0) in store and ("u9", 0) not in store
    assert store.keys() == [("u0", 0), ("u1", 0)]
    store.append([other])  # the index keeps the first; the file holds what was written, load drops it
    assert store.get(("u0", 0))["score"] == 0.0 and len(store) == 3
    assert [r["score"] for r in RecordStore(path, key=_key).load()] == [0.0, 0.1]


def test_without_a_key_every_record_is_kept_and_lookup_refuses(tmp_path):
    path = tmp_path / "records.jsonl"
    _write(path, [_rows(1)[0], _rows(1)[0]])
    store = RecordStore(path)
    assert len(store.load()) == 2
    with pytest.raises(TypeError, match="no key function"):
        store.get(("u0", 0))


def test_the_callers_keep_rule_drops_records_from_the_file(tmp_path):
    path = tmp_path / "records.jsonl"
    _write(path, _rows(4))
    store = RecordStore(path, key=_key)
    kept = store.load(lambda rows: [r for r in rows if r["unit"] != "u2"])
    assert [r["unit"] for r in kept] == ["u0", "u1", "u3"] == [r["unit"] for r in RecordStore(path).read()]


def test_a_clean_file_is_not_rewritten(tmp_path):
    path = tmp_path / "records.jsonl"
    _write(path, _rows(3))
    before = os.stat(path)
    assert len(RecordStore(path, key=_key).load()) == 3
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert RecordStore(tmp_path / "none.jsonl").load() == [] and not (tmp_path / "none.jsonl").exists()


def test_a_failed_rewrite_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "records.jsonl"
    _write(path, _rows(3))
    old = path.read_bytes()
    store = RecordStore(path, key=_key)
    store.load()
    calls = {"n": 0}
    real = records_mod._line

    def failing(row):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("killed mid-rewrite")
        return real(row)

    monkeypatch.setattr(records_mod, "_line", failing)
    with pytest.raises(RuntimeError, match="mid-rewrite"):
        store.rewrite(_rows(5, start=10))
    assert path.read_bytes() == old
    monkeypatch.setattr(records_mod, "_line", real)
    monkeypatch.setattr(records_mod.os, "replace", lambda *a: (_ for _ in ()).throw(OSError("no rename")))
    with pytest.raises(OSError, match="no rename"):
        store.rewrite(_rows(5, start=10))
    assert path.read_bytes() == old
    monkeypatch.undo()
    store.rewrite(_rows(2, start=10))
    assert [r["unit"] for r in RecordStore(path).read()] == ["u10", "u11"] == [r["unit"] for r in store.records]


def test_a_batch_is_one_write_call_then_flush_and_fsync(tmp_path, monkeypatch):
    path = tmp_path / "records.jsonl"
    writes, syncs = [], []
    real_open, real_fsync = open, os.fsync

    class Spy:
        def __init__(self, f):
            self.f = f

        def write(self, text):
            writes.append(text)
            return self.f.write(text)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(records_mod, "open", lambda *a, **k: Spy(real_open(*a, **k)), raising=False)
    monkeypatch.setattr(records_mod.os, "fsync", lambda fd: (syncs.append(fd), real_fsync(fd)))
    store = RecordStore(path, key=_key)
    store.append(_rows(50))
    store.append([])
    assert len(writes) == 1 and writes[0].count("\n") == 50 and len(syncs) == 1
    RecordStore(path, key=_key, fsync=False).append(_rows(2, start=50))
    assert len(writes) == 2 and len(syncs) == 1
    assert len(RecordStore(path, key=_key).load()) == 52


WRITER = """
import sys
from zcp.core.records import RecordStore
store = RecordStore(sys.argv[1], key=lambda r: (r["unit"], r["draw"]))
print("ready", flush=True)
k = 0
while True:
    store.append([{"unit": f"u{k}-{j}", "draw": j, "pad": "x" * 2000} for j in range(20)])
    k += 1
"""


def test_resume_after_sigkill_keeps_every_whole_record_and_no_half_one(tmp_path):
    path = tmp_path / "records.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while (not path.exists() or path.stat().st_size < 400_000) and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    store = RecordStore(path, key=lambda r: (r["unit"], r["draw"]))
    rows = store.load()
    assert len(rows) >= 100 and all(len(r["pad"]) == 2000 for r in rows)
    assert store.torn in (0, 1) and path.read_bytes().endswith(b"\n")
    store.append([{"unit": "after", "draw": 0, "pad": ""}])
    again = RecordStore(path, key=lambda r: (r["unit"], r["draw"]))
    assert len(again.load()) == len(rows) + 1 and again.torn == 0 and again.clean


def test_lines_split_only_at_newlines(tmp_path):
    """A record holding U+2028 (json.dumps with ensure_ascii=False leaves it raw) is one line, not two."""
    path = tmp_path / "records.jsonl"
    row = {"unit": "u0", "draw": 0, "q": "a\u2028b\x0bc"}
    store = RecordStore(path, key=_key)
    store.append([row])
    assert RecordStore(path, key=_key).load() == [row]


def test_sync_behind_syncs_each_batch_in_the_background_and_raises_its_error(tmp_path, monkeypatch):
    path = tmp_path / "records.jsonl"
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(records_mod.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    store = RecordStore(path, key=_key, sync_behind=True)
    store.append(_rows(3))
    store.append(_rows(2, start=3))  # waits for the first batch's sync before writing
    store.wait()
    assert len(synced) == 2 and [r["unit"] for r in RecordStore(path).read()] == [f"u{k}" for k in range(5)]

    def fail(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(records_mod.os, "fsync", fail)
    store.append(_rows(1, start=5))  # the bytes are written; their sync fails in the background
    with pytest.raises(OSError, match=r"records\.jsonl"):
        store.wait()
    store.wait()  # raised once
