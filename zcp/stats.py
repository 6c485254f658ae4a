"""Statistics of the probe: one-sided paired tests and the Sellke calibration to a confidence.

H0: S(D) <= S(D~) (no contamination), tested on item-paired scores.
- Continuous metrics (p_first, p_all): one-sided paired bootstrap of the mean difference
  (Efron & Tibshirani 1993, sec. 16.4: resample the centred differences so the null holds),
  p = (1 + #{null mean >= observed mean}) / (B + 1), which is never 0.
- Discrete metrics (acc, con): one-sided exact sign test on the items whose scores differ. With one
  reference draw per item the scores are 0/1 and this is exactly the exact McNemar test on the
  discordant pairs; with m > 1 draws averaged per item it is the sign test on the paired differences.
- Calibration (Sellke, Bayarri & Berger 2001): BF10 = 1 / (-e p ln p) for p < 1/e, else 1;
  C_cont = BF10 / (1 + BF10), in [0.5, 1).
- Combination across metrics: Bonferroni on the smallest p. The metrics are computed on the same
  items and are strongly dependent, so Fisher's or Stouffer's rules (which assume independence) would
  overstate the evidence; Bonferroni is valid under any dependence, at a cost of at most a factor k.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

CONTINUOUS = ("p_first", "p_all")
DISCRETE = ("acc", "con")
C_MAX = math.nextafter(1.0, 0.0)  # C_cont is < 1 by definition; keep that true in floating point
P_MIN = 1e-300  # an exact test's p can underflow to 0; floor it so BF10 stays finite


def bf10(p: float) -> float:
    """Sellke-Bayarri-Berger upper bound on the Bayes factor: 1/(-e p ln p) for p < 1/e, else 1."""
    if not 0.0 <= p <= 1.0 or math.isnan(p):
        raise ValueError(f"p-value must lie in [0, 1], got {p}")
    p = max(p, P_MIN)
    if p >= 1.0 / math.e:
        return 1.0
    return 1.0 / (-math.e * p * math.log(p))


def c_cont(p: float) -> float:
    """Contamination Confidence BF10 / (1 + BF10) in [0.5, 1): 0.5 means no evidence."""
    b = bf10(p)
    return min(b / (1.0 + b), C_MAX)


def bootstrap_pvalue(diffs: Sequence[float] | np.ndarray, B: int = 10_000, seed: int = 0,
                     chunk: int = 2_000_000) -> float:
    """One-sided paired bootstrap p for H0: mean(diffs) <= 0; never 0 (floored at 1/(B+1))."""
    d = np.asarray(diffs, dtype=np.float64)
    n = d.size
    if n == 0:
        return 1.0
    observed = d.mean()
    centred = d - observed
    rng = np.random.default_rng(seed)
    exceed = 0
    rows = max(1, chunk // n)
    done = 0
    while done < B:
        b = min(rows, B - done)
        idx = rng.integers(0, n, size=(b, n))
        null_means = centred[idx].mean(axis=1)
        # a tolerance so that ties in exact arithmetic are not lost to rounding
        exceed += int(np.count_nonzero(null_means >= observed - 1e-12 * max(1.0, abs(observed))))
        done += b
    return (1 + exceed) / (B + 1)


def sign_test_pvalue(diffs: Sequence[float] | np.ndarray) -> tuple[float, int, int]:
    """One-sided exact sign test (exact McNemar for 0/1 pairs): p = P(Bin(n+ + n-, 1/2) >= n+)."""
    d = np.asarray(diffs, dtype=np.float64)
    n_pos = int(np.count_nonzero(d > 0))
    n_neg = int(np.count_nonzero(d < 0))
    n = n_pos + n_neg
    if n == 0:
        return 1.0, 0, 0
    p = float(sps.binom.sf(n_pos - 1, n, 0.5))
    return min(1.0, max(p, 0.0)), n_pos, n_neg


@dataclass
class TestResult:
    """One metric's paired comparison of a dataset (or variant) against its reference."""

    metric: str
    n: int
    s: float
    s_ref: float
    diff: float
    p_value: float
    c_cont: float
    test: str
    p_floor: float
    discordant: tuple[int, int] | None = None

    def to_dict(self) -> dict:
        d = self.__dict__.copy()
        d["at_floor"] = self.p_value <= self.p_floor
        d["discordant"] = list(self.discordant) if self.discordant is not None else None  # JSON round-trip
        return d


def paired_test(metric: str, s: Sequence[float], s_ref: Sequence[float], *, B: int = 10_000,
                seed: int = 0) -> TestResult:
    """Test S(D) > S(D~) on item-paired scores with the metric's test; returns the calibrated result."""
    a = np.asarray(s, dtype=np.float64)
    r = np.asarray(s_ref, dtype=np.float64)
    if a.shape != r.shape:
        raise ValueError("scores and reference scores must be item-paired (same length)")
    if np.isnan(a).any() or np.isnan(r).any():
        raise ValueError(f"{metric}: NaN scores; drop unpaired items before testing")
    d = a - r
    if metric in DISCRETE:
        p, n_pos, n_neg = sign_test_pvalue(d)
        test, floor, disc = "exact_sign_mcnemar", 0.0, (n_pos, n_neg)
    else:
        p = bootstrap_pvalue(d, B=B, seed=seed)
        test, floor, disc = f"paired_bootstrap_B{B}", 1.0 / (B + 1), None
    return TestResult(metric=metric, n=int(a.size), s=float(a.mean()) if a.size else float("nan"),
                      s_ref=float(r.mean()) if r.size else float("nan"), diff=float(d.mean()) if d.size else 0.0,
                      p_value=float(p), c_cont=c_cont(p), test=test, p_floor=floor, discordant=disc)


def combine(p_values: Mapping[str, float], alpha: float = 0.05) -> dict:
    """Bonferroni combination of the metrics' p-values into one verdict (valid under dependence)."""
    if not p_values:
        return {"rule": "bonferroni_min_p", "p_value": 1.0, "c_cont": 0.5, "contaminated": False,
                "alpha": alpha, "metrics": [], "driving_metric": None}
    k = len(p_values)
    metric, p_min = min(p_values.items(), key=lambda kv: kv[1])
    p = min(1.0, k * p_min)
    return {"rule": "bonferroni_min_p", "p_value": p, "c_cont": c_cont(p), "contaminated": bool(p < alpha),
            "alpha": alpha, "metrics": sorted(p_values), "driving_metric": metric}
