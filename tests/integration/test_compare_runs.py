"""scripts/compare_runs.py: nothing compared is an error (exit 2, one line), and detection runs are compared by their
records (as sets keyed by unit), results and verdicts, so two runs whose verdicts differ are reported as different."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compare_runs.py"


def _run(*args: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def _rec(oid: str, variant: str, p: float) -> dict:
    return {"prompt_hash": "h", "gold": "3", "p_first": p, "id": oid, "split": "all", "variant": variant,
            "original_id": oid, "draw": 0}


def _detection(d: Path, records: list[dict], contaminated: bool = False, c_cont: float = 0.5,
               output_dir: str = "x") -> Path:
    d.mkdir(parents=True)
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (d / "run_meta.json").write_text(json.dumps({"fingerprint": "f", "n_units": len(records)}))
    verdict = {"split": "all", "variant": "original", "p_value": 0.01 if contaminated else 0.9, "c_cont": c_cont,
               "contaminated": contaminated}
    result = {"split": "all", "variant": "original", "metric": "p_first", "c_cont": c_cont}
    (d / "summary.json").write_text(json.dumps({"results": [result], "verdicts": [verdict], "output_dir": output_dir}))
    return d


RECS = [_rec("a", "original", 0.5), _rec("a", "reference", 0.25), _rec("b", "original", 0.125)]


def test_missing_directory_is_one_line_exit_2(tmp_path):
    _detection(tmp_path / "old", RECS)
    out = _run(tmp_path / "old", tmp_path / "gone")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"error: {tmp_path / 'gone'}: no such directory"]


def test_empty_directories_are_one_line_exit_2(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    out = _run(tmp_path / "a", tmp_path / "b")
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1
    assert "is empty" in out.stderr


def test_nothing_to_compare_is_exit_2(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "notes.txt").write_text("hi")
    out = _run(tmp_path / "a", tmp_path / "b")
    assert out.returncode == 2
    assert "0 files compared" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_identical_detection_runs_in_another_row_order(tmp_path):
    a = _detection(tmp_path / "a", RECS, output_dir="a")
    b = _detection(tmp_path / "b", RECS[::-1], output_dir="b")
    out = _run(a, b)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "identical" in out.stdout


def test_detection_runs_with_other_verdicts_differ(tmp_path):
    a = _detection(tmp_path / "a", RECS, contaminated=False)
    b = _detection(tmp_path / "b", RECS, contaminated=True, c_cont=0.9)
    out = _run(a, b)
    assert out.returncode == 1
    assert "verdict all/original: contaminated False vs True" in out.stdout


def test_detection_runs_with_other_records_differ(tmp_path):
    a = _detection(tmp_path / "a", RECS)
    b = _detection(tmp_path / "b", [RECS[0], _rec("a", "reference", 0.75), _rec("c", "original", 0.1)])
    out = _run(a, b)
    assert out.returncode == 1
    assert "records.jsonl unit ('all', 'reference', 'a', 0): fields differ: ['p_first']" in out.stdout
    assert "only in the old run: 1 unit(s)" in out.stdout and "only in the new run: 1 unit(s)" in out.stdout


def test_simulation_runs_compare_their_detections_by_unit(tmp_path):
    for name, recs in (("a", RECS), ("b", RECS[::-1])):
        run = tmp_path / name
        _detection(run / "detect" / "FT__abc", recs)
        (run / "table6.md").write_text("| x |\n")
    out = _run(tmp_path / "a", tmp_path / "b")
    assert out.returncode == 0, out.stdout + out.stderr
    (tmp_path / "b" / "table6.md").write_text("| y |\n")
    out = _run(tmp_path / "a", tmp_path / "b")
    assert out.returncode == 1 and "table6.md: differs" in out.stdout
