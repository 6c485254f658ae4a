"""The adaptive-evader study's readers and report (zcp.validate.evader, evader_report), on hand-made run dirs: the
verdicts, baselines (the answer-likelihood variant kept apart), costs and suppression signals reach the tables; a
suppressed convention is flagged, a clean set is not."""

from __future__ import annotations

import json
from pathlib import Path

from zcp.core.io import write_json, write_jsonl
from zcp.validate.evader import EvaderRun, clean_sets, run_study, suppression_fpr


def _records(conv: str, split: str, orig: int, refs: list[int], n: int = 12) -> list[dict]:
    rows = []
    for i in range(n):
        oid = f"{split}{i}"
        rows.append({"split": split, "variant": "original", "original_id": oid, "draw": 0, "correct": bool(orig),
                     "p_first": 0.5, "p_all": 0.5, "prompt_hash": f"o{oid}", "gold": "1", "convention": conv})
        for j, y in enumerate(refs):
            rows.append({"split": split, "variant": "reference", "original_id": oid, "draw": j, "correct": bool(y),
                         "p_first": 0.5, "p_all": 0.5, "prompt_hash": f"r{oid}{j}", "gold": str(j),
                         "convention": conv})
    return rows


def _detect_dir(d: Path, convs: dict[str, dict[str, tuple[int, list[int]]]], flagged_c: bool) -> Path:
    d.mkdir(parents=True)
    results = []
    for conv, splits in convs.items():
        rows = [r for split, (o, refs) in splits.items() for r in _records(conv, split, o, refs)]
        write_jsonl(d / f"conv-{conv}" / "records.jsonl", rows)
        results += [{"convention": conv, "split": s, "variant": "original", "metric": "acc", "s": float(o),
                     "s_ref": sum(refs) / len(refs)} for s, (o, refs) in splits.items()]
    verdicts = [{"split": "C", "variant": "original", "p_value": 1e-6 if flagged_c else 0.9, "c_cont": 0.99,
                 "contaminated": flagged_c, "driving_convention": "hash", "driving_metric": "acc", "n_tests": 6},
                {"split": "U", "variant": "original", "p_value": 1.0, "c_cont": 0.5, "contaminated": False}]
    write_json(d / "summary.json", {"metrics": ["acc", "p_first"], "verdicts": verdicts,
                                    "conventions": [{"name": c} for c in convs], "convention_results": results})
    return d


def test_the_study_tables_carry_every_signal(tmp_path):
    run = tmp_path / "contaminate" / "evader__x"
    run.mkdir(parents=True)
    write_json(run / "table6.json", {"rows": [{"split": "C_leaked", "n": 12, "base": 0.9, "final": 1.0},
                                              {"split": "U", "n": 12, "base": 0.9, "final": 0.7}]})
    below, above, null = (0, [1, 1, 0]), (1, [0, 0, 1]), (0, [0, 1, 0])
    auto = _detect_dir(run / "detect" / "FT__auto", {"probe": {"C": below, "U": null},
                                                     "hash": {"C": above, "U": null}}, flagged_c=True)
    fixed = _detect_dir(run / "detect" / "FT__fixed", {"probe": {"C": below, "U": null}}, flagged_c=False)
    base = _detect_dir(tmp_path / "contaminate" / "base-detect__y", {"probe": {"C": null, "U": null},
                                                                     "hash": {"C": null, "U": null}}, False)
    bl = tmp_path / "bl"
    entry = {"label": "Perplexity", "auroc": 0.61, "files": {"data": {"decision": True, "p_value": 0.01},
                                                              "u": {"decision": False, "p_value": 0.4}}}
    write_json(bl / "a" / "summary.json", {"detectors": {"ppl": {**entry, "params": {"text": "question"}},
                                                         "trap": {"label": "Trap", "skipped": "no traps"}}})
    write_json(bl / "b" / "summary.json", {"detectors": {"ppl": {**entry, "params": {"text": "chat_answer"}}}})
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps([EvaderRun(label="b1", kind="b", run_dir=str(run), fixed=str(fixed), auto=str(auto),
                                          base_auto=str(base), baselines=[str(bl / "a"), str(bl / "b")]).__dict__]))
    out = tmp_path / "evader.md"
    res = run_study(str(spec), str(out), clean_roots=[str(tmp_path / "contaminate")], work_dir=str(tmp_path / "w"),
                    base_model="unused", B=2000, probe_models=False)
    r = res["runs"][0]
    assert r["zcp_auto"]["C"]["flagged"] and not r["zcp_fixed"]["C"]["flagged"]
    assert r["suppression"]["C"]["suppression"]["flagged"] and r["suppression"]["C"]["contrast"]["flagged"]
    assert not r["suppression"]["U"]["suppression"]["flagged"]
    assert set(r["baselines"]) == {"ppl", "ppl@chat_answer", "trap"}
    assert r["zero_cot"]["hash"]["C"] == 1.0 and r["zero_cot_base"]["probe"]["U"] == 0.0
    text = out.read_text()
    assert "Perplexity (text=chat_answer)" in text and "skipped" in text and "0.90 → 1.00" in text
    assert json.loads(out.with_suffix(".json").read_text())["runs"][0]["label"] == "b1"
    kinds = sorted(k for k, _, _ in clean_sets([str(tmp_path / "contaminate")]))
    assert kinds == ["base model, C", "base model, U", "fine-tuned, U", "fine-tuned, U"]
    fpr = suppression_fpr([str(tmp_path / "contaminate")], B=2000)
    assert fpr["n_sets"] == 4 and fpr["suppression_flagged"] == 0
