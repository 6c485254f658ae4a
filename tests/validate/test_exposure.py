"""The exposure report collects finished simulation runs and plots C_cont against exposure."""

import json

from zcp.validate.exposure import collect, exposure_level, write_report


def _run(root, name, k, epochs, aof, c_c, c_u):
    d = root / name
    (d / "detect").mkdir(parents=True)
    knobs = {"k": k, "sft_epochs": epochs, "answer_only_fraction": aof, "grpo_steps": 0, "leak_fraction": 1.0}
    (d / "exposure.json").write_text(json.dumps({"knobs": knobs}))
    res = [{"variant": "original", "split": s, "metric": "p_all", "c_cont": c, "s": 0.5, "s_ref": 0.2}
           for s, c in (("C", c_c), ("U", c_u))]
    sim = {"results": {"FT": res, "base": res}, "did": [], "table6": {"rows": [{"split": "U", "base": 0.5, "final": 0.52}]}}
    (d / "detect" / "simulation_summary.json").write_text(json.dumps(sim))
    (d / "run_config.json").write_text(json.dumps({"config": {"stages": ["contaminate", "detect"]}}))


def test_collect_and_report(tmp_path):
    _run(tmp_path, "exposure__a", 1, 1, 0.0, 0.5, 0.5)
    _run(tmp_path, "exposure__b", 6, 3, 0.5, 0.999, 0.52)
    (tmp_path / "exposure__unfinished").mkdir()
    (tmp_path / "other__c").mkdir()
    rows = collect(tmp_path)
    assert [r["run"] for r in rows] == ["exposure__a", "exposure__b"]
    assert rows[1]["FT/C/p_all/c_cont"] == 0.999 and rows[0]["cot_acc/U/final"] == 0.52
    assert exposure_level(rows[1]) == 18
    out = write_report(tmp_path)
    md = (tmp_path / "exposure_report" / "exposure_report.md").read_text()
    assert "CoT only" in md and "0.999 / 0.520" in md and "0.50→0.52" in md
    assert (tmp_path / "exposure_report" / "exposure_report.png").stat().st_size > 1000
    assert len(out["rows"]) == 2
