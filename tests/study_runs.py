"""Hand-made run dirs for the detector-study report tests (tests/validate/test_study.py, tests/simulate/test_sham.py):
a contamination run with a detection, its ablations and its baselines."""


from zcp.core.io import write_json, write_jsonl
from zcp.probe.detect import DetectSettings, analyse


def _detection_records(n=20, m=3):
    """C: the original is right and more likely than its draws (a gap on every item); U: no gap."""
    recs = []
    for split in ("C", "U"):
        for i in range(n):
            oid = f"{split}{i:02d}"
            hit = split == "C"
            recs.append({"id": oid, "split": split, "variant": "original", "original_id": oid, "draw": 0,
                         "prompt_hash": f"h{oid}", "gold": "1", "correct": hit, "consistent": hit,
                         "p_first": 0.8 if hit else 0.3, "p_all": 0.7 if hit else 0.3})
            for j in range(m):
                recs.append({"id": f"{oid}::ref{j}", "split": split, "variant": "reference", "original_id": oid,
                             "draw": j, "prompt_hash": f"h{oid}r{j}", "gold": str(j + 2), "correct": False,
                             "consistent": False, "p_first": 0.3, "p_all": 0.3})
    return recs


def _run_dir(root, name):
    det = root / name / "detect" / "FT__abc"
    det.mkdir(parents=True)
    recs = _detection_records()
    metrics = ["acc", "con", "p_first", "p_all"]
    write_jsonl(det / "records.jsonl", recs)
    write_json(det / "run_meta.json", {"fingerprint": "hand-made", "n_units": len(recs)})  # a finished detection
    write_json(det / "summary.json", {"metrics": metrics, "alpha": 0.05,
                                      **analyse(recs, metrics, DetectSettings(seeds=(0,), bootstrap_samples=500))})
    return root / name


def _ablations_dir(root):
    d = root / "ablations"
    d.mkdir()
    trunc = [{"ratio": r, "split": s, "metric": "p_all", "n": 20, "s": 0.111 + r / 10, "s_ref": 0.222, "diff": -0.1,
              "p_value": 0.4, "c_cont": 0.5, "at_floor": False} for r in (0.0, 0.5, 1.0) for s in ("C", "U")]
    full = [{"split": s, "metric": "acc", "n": 20, "full_s": 0.876, "full_s_ref": 0.865, "full_p_value": 0.6,
             "full_c_cont": 0.5, "zero_s": 0.432, "zero_s_ref": 0.012, "zero_p_value": 1e-5, "zero_c_cont": 0.9991}
            for s in ("C", "U")]
    size = [{"split": s, "n": n, "all": n == 20, "subsets": 1 if n == 20 else 20, "metric": m,
             "detection_rate": 0.65 if s == "C" else 0.05, "c_cont_mean": 0.777, "c_cont_std": 0.044}
            for s in ("C", "U") for n in (10, 20) for m in ("acc", "combined")]
    write_json(d / "summary.json", {"truncation": {"unit": "tokens", "rows": trunc}, "full_cot": {"rows": full},
                                    "sample_size": {"subsets": 20, "bootstrap_samples": 1000, "alpha": 0.05,
                                                    "rows": size}})
    return d


def _baselines_dir(root):
    d = root / "baselines"
    d.mkdir()
    write_json(d / "summary.json", {"model": "m", "files": {"data": {"path": "c.jsonl", "n": 20}, "u": {"path": "u", "n": 20}},
                                    "detectors": {
        "ppl": {"label": "a label the registry overrides", "needs": [], "auroc": 0.6543, "tpr_at_5fpr": 0.1234,
                "files": {"data": {"n": 20, "statistic": 3.21, "decision": True, "rule": "r", "p_value": 0.0123,
                                   "threshold": 0.05},
                          "u": {"n": 20, "statistic": 0.5, "decision": False, "rule": "r", "p_value": 0.4567,
                                "threshold": 0.05}}, "skipped": None},
        "dpcc": {"label": "DPCC", "needs": ["reference"], "auroc": None, "tpr_at_5fpr": None, "files": {},
                 "skipped": "needs a reference set"},
        "zcp_p_all": {"label": "ZCP gap (P_all)", "needs": [], "auroc": 0.4242, "tpr_at_5fpr": 0.0, "files": {},
                      "skipped": None},
    }})
    return d
