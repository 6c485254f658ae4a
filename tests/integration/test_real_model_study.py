"""scripts/real_model_study.sh and .py: syntax, option checks, step selection and steps.json, the Table 4 writer.

No model runs here: the steps selected are ones whose inputs are absent, so each fails fast and is recorded."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SH = ROOT / "scripts" / "real_model_study.sh"


def _helper():
    spec = importlib.util.spec_from_file_location("real_model_study", ROOT / "scripts" / "real_model_study.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SH), "--python", sys.executable, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_bash_syntax() -> None:
    assert subprocess.run(["bash", "-n", str(SH)], capture_output=True).returncode == 0


def test_bad_options_refused() -> None:
    for args in (["--size", "huge"], ["--budget", "5m"], ["--steps", "refs,tabel4"], ["--gen-batch", "0"],
                 ["--frobnicate"]):
        r = _run(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)


def test_selected_steps_recorded(tmp_path: Path) -> None:
    # table4 without refs: its input files are absent, so run_detect fails in one line and the step is recorded
    # as an error; gsm8k_null is not selected and must not appear; --budget 0 then records skips
    r = _run("--out", str(tmp_path), "--steps", "table4")
    data = json.loads((tmp_path / "steps.json").read_text())
    assert data["selected"] == ["table4"] and data["size"] == "small"
    assert list(data["steps"]) == ["table4"], r.stdout
    st = data["steps"]["table4"]
    assert st["status"] == "error" and st["rc"] != 0 and st["seconds"] >= 0
    assert (tmp_path / "table4.log").exists() and (tmp_path / "table4").is_dir()
    r = _run("--out", str(tmp_path / "b"), "--steps", "part_d,gsm8k_null", "--budget", "0")
    data = json.loads((tmp_path / "b" / "steps.json").read_text())
    assert {k: v["status"] for k, v in data["steps"].items()} == {"part_d": "skipped", "gsm8k_null": "skipped"}


def test_prepare_pairs_release_rows(tmp_path: Path) -> None:
    build = tmp_path / "b"
    build.mkdir()
    items = [{"id": f"paraphrased_dataset-{k:05d}", "question": f"q{k}", "answer": "1", "metadata":
              {"original_index": str(i)}} for k, i in enumerate((4, 17))]
    (build / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    release = tmp_path / "release.jsonl"
    release.write_text("".join(json.dumps({"original_index": i, "paraphrased_problem": f"p{i}"}) + "\n"
                               for i in (4, 17, 385)))
    assert _helper().prepare(build, release) == {"audited": 2, "paraphrased": 2}
    audited = [json.loads(x) for x in (build / "audited.jsonl").read_text().splitlines()]
    assert [a["original_index"] for a in audited] == ["4", "17"]
    assert "385" not in (build / "paraphrased.jsonl").read_text()


def _result(split: str, variant: str, metric: str, s: float, s_ref: float, p: float, void: str | None = None):
    r = {"split": split, "variant": variant, "metric": metric, "n": 12, "s": s, "s_ref": s_ref, "p_value": p,
         "c_cont": 0.5 if p > 0.3 else 0.9}
    if void:
        r["void"] = void
    return r


def _fabricated_run(tmp_path: Path, audited_flag: bool, control_flag: bool) -> Path:
    run = tmp_path / "run"
    (run / "conv-hash").mkdir(parents=True)
    res = [_result("gsm8k_train_release", "original", "acc", 0.0, 0.0, 1.0, "S = S_ref = 0"),
           _result("gsm8k_train_release", "original", "p_all", 0.11, 0.08, 0.004 if audited_flag else 0.4),
           _result("gsm8k_train_release", "paraphrased", "p_all", 0.1, 0.08, 0.2),
           _result("control", "original", "p_all", 0.12, 0.09, 0.01)]
    ctrl = {"split": "control", "results": [{"split": "gsm8k_train_release", "variant": "original", "metric": "p_all",
                                            "n": 12, "n_control": 20, "gap": 0.03, "gap_control": 0.03, "diff": 0.0,
                                            "p_value": 0.01 if control_flag else 0.5, "c_cont": 0.5}],
            "verdicts": [{"split": "gsm8k_train_release", "variant": "original", "p_value": 0.02 if control_flag
                          else 0.6, "contaminated": control_flag}]}
    (run / "conv-hash" / "summary.json").write_text(json.dumps({"results": res, "control": ctrl}))

    def verdict(split, variant, p):
        v = {"split": split, "variant": variant, "p_value": p, "contaminated": p < 0.05, "driving_metric": "p_all",
             "driving_convention": "hash"}
        return {**v, "primary": {**v, "convention": "hash"}}

    top = {"model": {"name": "smollm2-135m"}, "alpha": 0.05, "conventions": [{"name": "probe"}, {"name": "hash"}],
           "verdicts": [verdict("gsm8k_train_release", "original", 0.008 if audited_flag else 0.8),
                        verdict("gsm8k_train_release", "paraphrased", 0.4), verdict("control", "original", 0.02)]}
    (run / "summary.json").write_text(json.dumps(top))
    return run


def test_table4_writer(tmp_path: Path) -> None:
    mod = _helper()
    md = mod.table4(_fabricated_run(tmp_path, audited_flag=True, control_flag=False))
    assert "primary convention: `hash`" in md
    assert "| D (GSM8K train originals) | acc | 12 | 0.000 | 0.000 | 1.000 | VOID |" in md
    assert "| D (GSM8K train originals) | p_all | 12 | 0.110 | 0.080 | 0.004 | 0.900 |" in md
    assert "| D' (release paraphrases) | p_all |" in md and "| control (GSM8K test) | p_all |" in md
    assert "| D (GSM8K train originals) | 0.008 | contaminated |" in md
    concl = md.split("## Conclusion")[1]
    # the within-item test fires on D and on the control, the control comparison does not
    assert "no audited set stands out" in concl and "not as evidence of a leak" in concl
    md2 = mod.table4(_fabricated_run(tmp_path / "x", audited_flag=True, control_flag=True))
    concl2 = md2.split("## Conclusion")[1]
    assert "D (GSM8K train originals) stand(s) out" in concl2 and "not as evidence" not in concl2


def test_step_record_replaces(tmp_path: Path) -> None:
    mod = _helper()
    sj = tmp_path / "steps.json"
    mod.record_step(sj, "refs", 124, 12.34)
    mod.record_step(sj, "refs", 0, 3.0)
    assert json.loads(sj.read_text())["steps"]["refs"] == {"status": "ok", "rc": 0, "seconds": 3.0, "note": ""}


def test_sham_items_skip_the_audited_rows(tmp_path: Path) -> None:
    rel = tmp_path / "release.jsonl"
    rows = [{"original_index": str(10 + i), "original_problem": f"orig {i}", "original_solution": f"os {i}",
             "original_answer": str(i), "paraphrased_problem": f"para {i}", "paraphrased_solution": f"ps {i}",
             "answer": str(i)} for i in range(5)]
    rel.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "sham.jsonl"
    assert _helper().sham_items(rel, 2, out) == 3
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["id"] for g in got] == ["release-sham-00012", "release-sham-00013", "release-sham-00014"]
    assert got[0]["question"] == "para 2" and got[0]["solution"] == "ps 2" and got[0]["answer"] == "2"
    from zcp.benchmarks.loaders import load_items

    assert [it.question for it in load_items(str(out), format="items")] == ["para 2", "para 3", "para 4"]
