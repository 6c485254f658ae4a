"""Void metrics (zcp.probe.void): S = S_ref = 0, or a malformed rate above stats.void_malformed, voids a metric; it is
reported and left out of the combined verdict (the single run's, and the multi-convention one)."""

import pytest

from zcp.probe.detect import DetectSettings, analyse
from zcp.probe.report import format_table
from zcp.probe.stats import combine
from zcp.probe.void import combine_valid, void_reason


def _records(n=12, acc_orig=False, acc_ref=False, p_orig=0.9, p_ref=0.1, malformed=False, cot_malformed=False):
    """n items, one reference draw each: acc, con and p_all fields as given."""
    recs = []
    for k in range(n):
        for variant, acc, p in (("original", acc_orig, p_orig), ("reference", acc_ref, p_ref)):
            recs.append({"split": "D", "variant": variant, "original_id": f"i{k}", "draw": 0, "correct": acc,
                         "malformed": malformed, "cot_malformed": cot_malformed, "consistent": False,
                         "p_all": p + 0.001 * k})
    return recs


def test_all_zero_metric_is_void_and_left_out_of_the_verdict():
    out = analyse(_records(), ["acc", "p_all"], DetectSettings(seeds=[0], bootstrap_samples=200))
    by = {r["metric"]: r for r in out["results"]}
    assert by["acc"]["s"] == 0 and by["acc"]["s_ref"] == 0
    assert "S = S_ref = 0" in by["acc"]["void"] and "void" not in by["p_all"]
    (v,) = out["verdicts"]
    assert v["metrics"] == ["p_all"] and set(v["void"]) == {"acc"} and not v["void_all"]
    # Bonferroni over the remaining metric: p_all's p alone, not twice it
    assert v["p_value"] == pytest.approx(by["p_all"]["p_value"])
    assert v["p_value"] < combine({"acc": 1.0, "p_all": by["p_all"]["p_value"]})["p_value"]


def test_malformed_rate_above_the_threshold_voids_the_metrics_reading_that_answer():
    recs = _records(acc_orig=True, malformed=True)  # acc scored, but every zero-CoT answer malformed
    out = analyse(recs, ["acc", "con", "p_all"], DetectSettings(seeds=[0], bootstrap_samples=200))
    by = {r["metric"]: r for r in out["results"]}
    assert "zero-CoT answers malformed" in by["acc"]["void"] and "void" not in by["p_all"]
    assert "con" in {m for m in out["verdicts"][0]["void"]}
    # a looser threshold keeps acc (con stays void: S = S_ref = 0)
    out = analyse(recs, ["acc", "con", "p_all"], DetectSettings(seeds=[0], bootstrap_samples=200, void_malformed=1.0))
    by = {r["metric"]: r for r in out["results"]}
    assert "void" not in by["acc"] and "S = S_ref = 0" in by["con"]["void"]


def test_reference_rows_malformed_void_too_and_full_cot_voids_con_only():
    rows = [{"split": "D", "variant": "original", "zero_cot_malformed_rate": 0.0, "full_cot_malformed_rate": 0.0},
            {"split": "D", "variant": "reference", "zero_cot_malformed_rate": 0.6, "full_cot_malformed_rate": 0.0}]
    res = {"split": "D", "variant": "original", "metric": "acc", "s": 0.5, "s_ref": 0.2}
    assert "60% of zero-CoT" in void_reason(res, rows, 0.5)
    assert void_reason(res, rows, 0.6) is None  # "above" the threshold: 0.6 is not
    rows[1].update(zero_cot_malformed_rate=0.0, full_cot_malformed_rate=0.9)
    assert void_reason(res, rows) is None
    assert "full-CoT" in void_reason({**res, "metric": "con"}, rows)
    assert void_reason({**res, "metric": "p_all"}, rows) is None
    with pytest.raises(ValueError, match="void threshold"):
        void_reason(res, rows, 1.5)


def test_every_metric_void_gives_no_evidence():
    v = combine_valid({"acc": 0.001, "con": 0.5}, {"acc": "x", "con": "y"}, 0.05)
    assert v["void_all"] and v["p_value"] == 1.0 and not v["contaminated"] and v["metrics"] == []


def test_table_says_void_and_why():
    out = analyse(_records(), ["acc", "p_all"], DetectSettings(seeds=[0], bootstrap_samples=200))
    md = format_table({**out, "alpha": 0.05, "seeds": [0]})
    assert "| VOID |" in md and "D/original Acc: VOID, S = S_ref = 0" in md


def test_the_did_verdict_leaves_out_the_audited_runs_void_metrics():
    from zcp.probe.did import did_verdicts
    from zcp.probe.void import void_map

    rows = [{"split": "D", "variant": "original", "metric": "acc", "p_value": 0.001},
            {"split": "D", "variant": "original", "metric": "p_all", "p_value": 0.2}]
    (plain,) = did_verdicts(rows, 0.05)
    assert plain["contaminated"] and plain["driving_metric"] == "acc"
    audited = [{"split": "D", "variant": "original", "metric": "acc", "void": "S = S_ref = 0"},
               {"split": "D", "variant": "original", "metric": "p_all"}]
    (v,) = did_verdicts(rows, 0.05, void_map(audited))
    assert not v["contaminated"] and v["metrics"] == ["p_all"] and v["p_value"] == 0.2 and "acc" in v["void"]
