"""The detect job's run directory: one rule for every kind of run (`zcp.core.rundir.claim_run_dir`), checked with
the directory locked before any model loads.

- a multi-convention run into a directory holding another configuration's run is refused in one line naming both
  fingerprints, before any model loads and with nothing written; the same configuration resumes;
- a second run on a directory (or shard) another run holds is refused before it builds its model;
- a directory from before the fingerprint, whose config.yaml is this run's, is resumed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from detect_world import Q, build_world, detect_cfg
from fakes import FakeBackend

from zcp.core.rundir import RUN_DIR_SCHEMA, RUN_FINGERPRINT
from zcp.errors import RunDirError


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_tok, tiny_model) -> Path:
    """A model folder (the weights' fingerprint names the run; the backend itself is a FakeBackend) and 4 items with
    one reference row each."""
    return build_world(tmp_path_factory.mktemp("rundir_world"), tiny_tok, tiny_model)


class _Counting(FakeBackend):
    """A FakeBackend with a context of 8 positions and a token per character: no prompt fits."""

    context_length = 8

    def count_tokens(self, prompts, texts=()):
        return [len(p.user) for p in prompts], [len(t) for t in texts]


def _backend(monkeypatch, made: list | None = None, kind: type[FakeBackend] = FakeBackend) -> FakeBackend:
    import zcp.backends.registry

    fb = kind({Q.format(a=10, b=3): "13"})

    def build(*a, **k):
        if made is not None:
            made.append(a)
        return fb

    monkeypatch.setattr(zcp.backends.registry, "build_backend", build)
    return fb


def _never_load(monkeypatch) -> list:
    import zcp.backends.registry

    built: list = []

    def refuse(*a, **k):
        built.append(a)
        raise AssertionError("a model was loaded before the directory was refused")

    monkeypatch.setattr(zcp.backends.registry, "build_backend", refuse)
    return built


def _snapshot(d: Path) -> dict[str, bytes]:
    """Every file under `d` (but the lock file, whose content names the last holder) and its bytes."""
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".lock"}


def _detect(cfg):
    from zcp.probe.run import run_detect

    return run_detect(cfg)


@pytest.mark.parametrize("first", [
    ("probe.prefill=[probe,hash,sentence]",),  # a finished multi-convention run of 3 conventions
    (),  # a finished default (single-convention) run
])
def test_a_multi_convention_run_refuses_another_configurations_directory_before_loading(world, tmp_path,
                                                                                          monkeypatch, first):
    from zcp.config import one_line_errors

    out = tmp_path / "run"
    _backend(monkeypatch)
    _detect(detect_cfg(world, out, *first))
    before = _snapshot(out)
    old = json.loads((out / RUN_FINGERPRINT).read_text())["fingerprint"]
    built = _never_load(monkeypatch)
    with pytest.raises(RunDirError) as e:
        _detect(detect_cfg(world, out, "probe.prefill=[probe,boxed]"))
    msg = str(e.value)
    assert "\n" not in msg and not built
    found = re.search(r"another configuration \(fingerprint ([0-9a-f]{16}); this detect run: ([0-9a-f]{16}); "
                      r"differing: ([^)]*)\)", msg)
    assert found and found.group(1) == old and found.group(2) != old, msg
    assert "probe.prefill" in found.group(3)
    assert _snapshot(out) == before  # nothing written: the old run's records, summary, table, config stay

    def entry_point() -> None:  # what evaluate/run_detect.py makes of it: exit 2, the one line
        _detect(detect_cfg(world, out, "probe.prefill=[probe,boxed]"))

    with pytest.raises(SystemExit) as exit_:
        one_line_errors(entry_point)()
    assert exit_.value.code == 2 and _snapshot(out) == before


def test_the_same_multi_convention_configuration_resumes(world, tmp_path, monkeypatch):
    out = tmp_path / "run"
    _backend(monkeypatch)
    first = _detect(detect_cfg(world, out, "probe.prefill=[probe,hash]"))
    records = {p: p.read_text() for p in out.glob("conv-*/records.jsonl")}
    fb = _backend(monkeypatch)
    again = _detect(detect_cfg(world, out, "probe.prefill=[probe,hash]"))
    assert fb.calls == {"score": 0, "generate": 0}  # nothing probed again
    assert {p: p.read_text() for p in records} == records and again["verdicts"] == first["verdicts"]


def test_a_directory_made_before_the_run_dir_schema_is_refused_in_one_line_before_loading(world, tmp_path,
                                                                                            monkeypatch):
    """An old directory is never adopted nor translated: without the stamp (made before run directories were
    stamped) or with a stamp of no or another schema, the run is refused naming the fingerprints and what to do,
    before any model loads and without writing anything."""
    out = tmp_path / "run"
    _backend(monkeypatch)
    _detect(detect_cfg(world, out))
    stamp = json.loads((out / RUN_FINGERPRINT).read_text())
    assert stamp["schema"] == RUN_DIR_SCHEMA
    built = _never_load(monkeypatch)
    old = {k: v for k, v in stamp.items() if k != "schema"}  # a stamp from before the schema was versioned
    (out / RUN_FINGERPRINT).write_text(json.dumps(old))
    with pytest.raises(RunDirError, match=rf"holds a detect run \(fingerprint {stamp['fingerprint']}\) of run-dir "
                                          rf"schema None, not {RUN_DIR_SCHEMA} \(this detect run: "
                                          rf"{stamp['fingerprint']}\): made by another version of zcp; use another "
                                          "output_dir, "
                                          "or delete .* to rebuild it"):
        _detect(detect_cfg(world, out))
    (out / RUN_FINGERPRINT).unlink()  # a run made before the file existed, whatever its config.yaml says
    with pytest.raises(RunDirError, match=r"holds records\.jsonl but no run_fingerprint\.json \(a run of unknown "
                                          r"configuration; this detect run: fingerprint [0-9a-f]{16}\)"):
        _detect(detect_cfg(world, out))
    assert not built and not (out / RUN_FINGERPRINT).exists()


@pytest.mark.parametrize("extra", [(), ("probe.prefill=[probe,hash]",), ("run.shard=0/2",)])
def test_a_second_run_on_a_busy_directory_is_refused_before_it_loads_a_model(world, tmp_path, monkeypatch, extra):
    """The first run holds the directory (a shard: its shard's) from before its model is built: a second run started
    while the first is loading is refused at once, and never builds its own."""
    import zcp.backends.registry

    out = tmp_path / "run"
    cfg = detect_cfg(world, out, *extra)
    fb = FakeBackend({})
    built: list = []
    refused: list[str] = []

    def build(*a, **k):
        built.append(a)
        if len(built) == 1:  # the first run is loading its model: a second run of the same command starts
            with pytest.raises(RunDirError, match="in use by another run") as e:
                _detect(cfg)
            refused.append(str(e.value))
        return fb

    monkeypatch.setattr(zcp.backends.registry, "build_backend", build)
    _detect(cfg)
    assert len(built) == 1 and len(refused) == 1 and "\n" not in refused[0]


def test_a_run_refused_after_its_model_loaded_leaves_no_directory(world, tmp_path, monkeypatch):
    """The lock (and the fingerprint) are written before the model loads; a run refused later, before anything of it
    was written (here: nothing left to test once the prompts are fitted to the model's context), leaves nothing."""
    _backend(monkeypatch, kind=_Counting)
    out = tmp_path / "new" / "run"
    with pytest.raises(Exception, match=r"nothing left to test|more positions than the model"):
        _detect(detect_cfg(world, out, "data.on_overflow=skip"))
    assert not (tmp_path / "new").exists()
