"""scripts/ladder_report.py's sham summary: every sham run's verdicts counted as false positives, with the exact
(Clopper-Pearson) interval that scipy computes, and leak arms never counted."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lr():
    spec = importlib.util.spec_from_file_location("ladder_report", ROOT / "scripts" / "ladder_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(arm: str, c_flag: bool, u_flag: bool, p_first_c: float) -> dict:
    return {"arm": arm, "verdict/C": (0.01 if c_flag else 0.5, c_flag, 0.05, 2),
            "verdict/U": (0.01 if u_flag else 0.5, u_flag, 0.05, 2),
            "C/p_first": (p_first_c, 0.6, None), "C/p_all": (0.9, 0.5, None)}


def test_sham_counts_and_interval(lr):
    rows = [_row("leak", True, True, 0.001), _row("sham", True, False, 0.02), _row("sham", False, False, 0.3),
            _row("sham", False, True, 0.04)]
    s = lr.sham_summary(rows)
    assert s["n_runs"] == 3
    assert (s["flagged/C"]["k"], s["flagged/C"]["n"]) == (1, 3)
    assert (s["flagged/U"]["k"], s["flagged/U"]["n"]) == (1, 3)
    assert s["metric/C/p_first"]["k"] == 2 and s["metric/C/p_all"]["k"] == 0
    ref = stats.binomtest(1, 3).proportion_ci(0.95, method="exact")
    assert s["flagged/C"]["ci"] == pytest.approx((ref.low, ref.high))
    md = lr.sham_markdown(s)
    assert "combined verdict 1 of 3 flagged" in md and "p_first 2/3" in md


def test_no_sham_no_line(lr):
    assert lr.sham_markdown(lr.sham_summary([_row("leak", True, False, 0.01)])) == ""
