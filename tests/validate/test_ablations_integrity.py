"""The ablations read only finished detections, write their own results before the optional r = 0 check, and
the run's detection is found one way everywhere.

Detection runs are hand-made directories (records.jsonl, run_meta.json, summary.json as zcp.probe.detect writes
them); the truncation ablation runs on the fake backend of tests/fakes.py (`zcp.backends.registry.build_backend` patched).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from configs import compose
from fakes import FakeBackend

from zcp.benchmarks.loaders import save_items
from zcp.core.io import write_json, write_jsonl
from zcp.core.items import Item
from zcp.errors import ConfigError
from zcp.simulate.base_model import base_model_path


def _records(n: int = 50, m: int = 3) -> list[dict]:
    """C: a gap on every item (original right, draws wrong); U: none."""
    recs = []
    for split in ("C", "U"):
        for i in range(n):
            oid, hit = f"{split}{i}", split == "C"
            recs.append({"id": oid, "split": split, "variant": "original", "original_id": oid, "draw": 0,
                         "prompt_hash": f"h{oid}", "gold": "1", "correct": hit, "p_first": 0.9 if hit else 0.4,
                         "p_all": 0.9 if hit else 0.4})
            for j in range(m):
                recs.append({"id": f"{oid}::ref{j}", "split": split, "variant": "reference", "original_id": oid,
                             "draw": j, "prompt_hash": f"h{oid}r{j}", "gold": str(j + 2), "correct": False,
                             "p_first": 0.4, "p_all": 0.4})
    return recs


def _detection(d: Path, *, cut: int | None = None, summary: bool = True, partial_line: bool = False,
               n: int = 50) -> Path:
    recs = _records(n)
    d.mkdir(parents=True, exist_ok=True)
    write_jsonl(d / "records.jsonl", recs[:cut] if cut else recs)
    if partial_line:  # a writer killed mid-line
        with open(d / "records.jsonl", "a") as f:
            f.write('{"id": "C9", "split": "C", "vari')
    write_json(d / "run_meta.json", {"fingerprint": "hand-made", "n_units": len(recs)})
    if summary:
        write_json(d / "summary.json", {"metrics": ["acc", "p_first", "p_all"]})
    return d / "records.jsonl"


def _compose(overrides: list[str]):
    return compose("ablations", "logger=none", *overrides)


def test_the_sample_size_study_refuses_an_unfinished_detection(tmp_path):
    """Records cut at 200 of 400 lines, no summary.json: one line naming the dir and what is missing,
    before anything is written (not a table of "C | 44 (all)" for a 50-item C)."""
    from zcp.validate.ablations import run_ablations

    rec = _detection(tmp_path / "det_cut", cut=200, summary=False)
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as e:
        run_ablations(_compose([f"ablation.records={rec}", "ablations=[sample_size]", f"output_dir={out}"]))
    msg = str(e.value)
    assert "det_cut is not finished" in msg and "no summary.json" in msg
    assert "records.jsonl holds 200 of the 400 units" in msg and "\n" not in msg
    assert not out.exists()
    # the finished detection of the same items runs, every C item in the "all" row
    ok = _detection(tmp_path / "det_ok")
    s = run_ablations(_compose([f"ablation.records={ok}", "ablations=[sample_size]", "ablation.sizes=[10]",
                      "ablation.subsets=2", f"output_dir={tmp_path / 'ok'}"]))
    assert {r["n"] for r in s["sample_size"]["rows"] if r["split"] == "C" and r["all"]} == {50}


def _truncation_inputs(tmp_path: Path) -> tuple[list[str], FakeBackend]:
    items = [Item("C0", "Ivy has 7 marbles and gets 18 more. How many?", "25"),
             Item("C1", "Tom has 12 apples and eats 5. How many are left?", "7")]
    refs = [Item("C0::ref0", "Ivy has 9 marbles and gets 13 more. How many?", "22", metadata={"original_id": "C0"}),
            Item("C1::ref0", "Tom has 15 apples and eats 6. How many are left?", "9", metadata={"original_id": "C1"})]
    save_items(tmp_path / "d.jsonl", items)
    save_items(tmp_path / "r.jsonl", refs)
    truth = {it.question: it.answer for it in items + refs}
    overrides = [f"model.path={base_model_path()}", f"data.path={tmp_path / 'd.jsonl'}",
                 f"data.reference_path={tmp_path / 'r.jsonl'}", "data.name=C", "ablation.ratios=[0,1]",
                 "ablations=[truncation]", "probe.metrics=[acc]", "ablation.metrics=[acc]"]
    return overrides, FakeBackend({items[0].question: "25"}, truth)


def test_the_r0_check_against_a_detection_cut_mid_line_is_skipped_with_the_reason(tmp_path, monkeypatch):
    from zcp.validate.ablations import run_ablations

    overrides, fb = _truncation_inputs(tmp_path)
    monkeypatch.setattr("zcp.backends.registry.build_backend", lambda *a, **k: fb)
    rec = _detection(tmp_path / "det_cut", cut=30, partial_line=True)
    s = run_ablations(_compose([*overrides, f"ablation.records={rec}", f"output_dir={tmp_path / 'out'}"]))
    check = s["truncation"]["r0_vs_detection"]
    assert check["units_compared"] == 0 and "det_cut is not finished" in check["skipped"]
    assert {r["ratio"] for r in s["truncation"]["rows"]} == {0.0, 1.0}
    assert "det_cut is not finished" in (tmp_path / "out" / "ablations.md").read_text()


def test_the_ablations_own_results_are_written_before_the_optional_check(tmp_path, monkeypatch):
    """Whatever the r = 0 comparison does, the truncation curve is already in summary.json and ablations.md."""
    import json

    from zcp.validate.ablations import run_ablations

    overrides, fb = _truncation_inputs(tmp_path)
    monkeypatch.setattr("zcp.backends.registry.build_backend", lambda *a, **k: fb)

    def boom(*a, **k):
        raise RuntimeError("the optional comparison failed")

    monkeypatch.setattr("zcp.validate.ablations.compare_with_detection", boom)
    rec = _detection(tmp_path / "det", n=2)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="optional comparison"):
        run_ablations(_compose([*overrides, f"ablation.records={rec}", f"output_dir={out}"]))
    summary = json.loads((out / "summary.json").read_text())
    assert {r["ratio"] for r in summary["truncation"]["rows"]} == {0.0, 1.0}
    assert "Truncation curve" in (out / "ablations.md").read_text()


def test_the_newest_finished_detection_is_found_one_way(tmp_path):
    """A newer detection with a summary.json but records cut short is passed over, with its reason, by the
    one lookup the baselines, the ablations and the study report share."""
    import os

    from zcp.core.rundir import ContaminationRun
    from zcp.validate.study import newest_detection_dir

    run = tmp_path / "run"
    _detection(run / "detect" / "FT__old", n=4)
    _detection(run / "detect" / "FT__new", n=4, cut=10)
    for name, t in (("FT__old", 1_000_000), ("FT__new", 2_000_000)):
        for f in ("records.jsonl", "summary.json"):
            os.utime(run / "detect" / name / f, (t, t))
    found, passed = ContaminationRun(run).newest_detection()
    assert found == run / "detect" / "FT__old"
    assert len(passed) == 1 and "FT__new is not finished: records.jsonl holds 10 of the 32 units" in passed[0]
    assert newest_detection_dir(run) == found
    (run / "detect" / "FT__old" / "summary.json").unlink()
    with pytest.raises(ConfigError, match="no finished detect/FT"):
        newest_detection_dir(run)
    import zcp.validate.ablations
    import zcp.validate.baselines

    # the per-module lookups are gone: every caller goes through zcp.core.rundir.ContaminationRun
    assert not hasattr(zcp.validate.ablations, "newest_detection_records") and not hasattr(zcp.validate.baselines, "_newest_records")
