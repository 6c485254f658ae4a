"""Statistics of the probe: the within-item permutation test and the Sellke calibration to a confidence.

Data: item i has one original score X_i and m_i >= 1 reference scores Y_i1..Y_im (its isomorphic
perturbations). H0: the original is exchangeable with its perturbations (the model treats it like any
other member of its family); H1 (one-sided): the original scores higher.
Statistic: T = sum_i (X_i - mean_j Y_ij).

- Within-item permutation test (default, every metric): under H0 the label "original" is uniform over
  the m_i + 1 versions of item i, independently across items.
  * Binary metrics (acc, con): exact. Item i with k_i ones among its versions contributes
    1 - (k_i - 1)/m_i with probability k_i/(m_i + 1) and -k_i/m_i otherwise; scaled by L = lcm(m_i)
    these are integers, and the null law of T is the convolution of the two-point laws (a sum of
    binomials per (m_i, k_i) class), so p = P(T* >= T_obs) is exact. At m = 1 it is McNemar's exact test.
  * Continuous metrics (p_first, p_all): Monte Carlo over B relabellings, p = (1 + #{T* >= T_obs})/(B + 1),
    never 0 (valid for any B); exact enumeration of all prod_i (m_i + 1) relabellings when that is <= B.
  Why not a sign test on the averaged draws or the paired bootstrap: with m > 1 the sign of
  X_i - mean_j Y_ij is not balanced under H0 (an item at accuracy 0.9 is ahead 24% of the time and behind
  10%), so that sign test rejects 30-85% of true nulls at high accuracy; the bootstrap of the mean rejects
  at n = 1 and ~11% at n = 20 with skewed scores. The paired bootstrap stays available
  (`test="bootstrap"`) for fidelity to the paper's code.
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
from typing import Any

import numpy as np
from scipy import stats as sps

CONTINUOUS = ("p_first", "p_all")
BINARY = ("acc", "con")
DISCRETE = BINARY  # older name
TESTS = ("permutation", "bootstrap")
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


def metric_kind(metric: str) -> str:
    """'binary' for acc/con, 'continuous' for p_first/p_all (and any other score in a continuum)."""
    return "binary" if metric in BINARY else "continuous"


# ---------------------------------------------------------------------------------------------- inputs
def versions_matrix(original: Sequence[float] | np.ndarray, reference: Any, *, metric: str = "",
                    ids: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(V, m): V[i, 0] = X_i, V[i, 1..m_i] = Y_i1..Y_im_i (NaN-padded), m[i] = m_i.

    `reference` is an n x m array, a length-n vector (m = 1), or n sequences of varying length.
    Raises ValueError on a length mismatch, an item without reference draws, or NaN/inf scores
    (naming the items, by `ids` when given).
    """
    x = np.asarray(original, dtype=np.float64).reshape(-1)
    n = x.size
    if isinstance(reference, np.ndarray) and reference.dtype != object and reference.ndim in (1, 2):
        r = reference.astype(np.float64).reshape(n if reference.ndim == 1 else reference.shape[0], -1)
        if r.shape[0] != n:
            raise ValueError(f"{metric}: {n} original scores but {r.shape[0]} reference rows (item-paired)")
        m = np.full(n, r.shape[1], dtype=np.int64)
        v = np.concatenate([x[:, None], r], axis=1)
    else:
        rows = [np.atleast_1d(np.asarray(row, dtype=np.float64)).reshape(-1) for row in reference]
        if len(rows) != n:
            raise ValueError(f"{metric}: {n} original scores but {len(rows)} reference rows (item-paired)")
        m = np.array([row.size for row in rows], dtype=np.int64)
        v = np.full((n, 1 + (int(m.max()) if n else 0)), np.nan)
        v[:, 0] = x
        for i, row in enumerate(rows):
            v[i, 1 : 1 + row.size] = row
    name = (lambda i: str(ids[i])) if ids is not None else (lambda i: f"#{i}")
    empty = np.flatnonzero(m < 1)
    if empty.size:
        raise ValueError(f"{metric}: item(s) without reference draws: {', '.join(name(i) for i in empty[:10])}")
    valid = np.arange(v.shape[1])[None, :] <= m[:, None]
    bad = np.flatnonzero((~np.isfinite(v) & valid).any(axis=1))
    if bad.size:
        raise ValueError(f"{metric}: NaN or infinite scores for item(s) "
                         f"{', '.join(name(i) for i in bad[:10])}{' ...' if bad.size > 10 else ''}")
    return v, m


# ---------------------------------------------------------------------------------------------- binary
@dataclass(frozen=True)
class BinaryNull:
    """Exact null law of the binary permutation statistic, on the integer lattice of T * scale."""

    offset: int  # smallest attainable value of T * scale
    step: int  # lattice spacing of T * scale
    pmf: np.ndarray  # pmf[j] = P(T * scale = offset + j * step)
    t_obs: int  # observed T * scale
    scale: int  # L = lcm of the m_i of the informative items

    def tail(self, t: int) -> float:
        """P(T* * scale >= t)."""
        j = max(0, -(-(t - self.offset) // self.step))
        return float(min(1.0, max(0.0, self.pmf[j:].sum()))) if j < self.pmf.size else 0.0

    @property
    def p_value(self) -> float:
        return self.tail(self.t_obs)

    def attainable_size(self, alpha: float) -> float:
        """The largest null tail probability <= alpha: the best size this exact test can reach here."""
        tails = np.cumsum(self.pmf[::-1])[::-1]
        ok = tails[tails <= alpha + 1e-12]
        return float(ok.max()) if ok.size else 0.0


def binary_null_law(original: Sequence[float] | np.ndarray, reference: Any) -> BinaryNull:
    """Exact within-item permutation null law of T for 0/1 scores (see the module docstring)."""
    v, m = versions_matrix(original, reference, metric="binary")
    valid = np.arange(v.shape[1])[None, :] <= m[:, None]
    vals = v[valid]
    if not np.isin(vals, (0.0, 1.0)).all():
        raise ValueError("binary metric: scores must be 0 or 1 per version (do not average draws before testing)")
    k = np.where(valid, v, 0.0).sum(axis=1).astype(np.int64)
    x = v[:, 0].astype(np.int64)
    informative = (k > 0) & (k < m + 1)
    if not informative.any():
        return BinaryNull(offset=0, step=1, pmf=np.ones(1), t_obs=0, scale=1)
    mi, ki, xi = m[informative], k[informative], x[informative]
    scale = math.lcm(*map(int, np.unique(mi)))
    # contribution * scale: a = scale (m - k + 1) / m if the original is a one, b = -scale k / m otherwise
    b = -(scale // mi) * ki
    jump = (scale // mi) * (mi + 1)
    t_obs = int(np.sum(np.where(xi == 1, b + jump, b)))
    base = int(b.sum())
    step = math.gcd(*map(int, np.unique(jump)))
    # sum over (m, k) classes of jump * Binomial(count, k / (m + 1)), on a lattice of spacing `step`
    pmf = np.ones(1)
    for mm, kk in sorted(set(zip(mi.tolist(), ki.tolist(), strict=True))):
        cnt = int(np.sum((mi == mm) & (ki == kk)))
        bpmf = sps.binom.pmf(np.arange(cnt + 1), cnt, kk / (mm + 1))
        stride = int((scale // mm) * (mm + 1) // step)
        spread = np.zeros(cnt * stride + 1)
        spread[::stride] = bpmf
        pmf = np.convolve(pmf, spread) if pmf.size * spread.size < 4e7 else _fft_convolve(pmf, spread)
    return BinaryNull(offset=base, step=step, pmf=pmf, t_obs=t_obs, scale=scale)


def _fft_convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    from scipy.signal import fftconvolve

    return np.clip(fftconvolve(a, b), 0.0, None)


# ---------------------------------------------------------------------------------------------- continuous
def _contributions(v: np.ndarray, m: np.ndarray) -> np.ndarray:
    """C[i, c] = item i's term of T when version c is labelled original: (m+1)/m V[i,c] - S_i/m (NaN pads)."""
    valid = np.arange(v.shape[1])[None, :] <= m[:, None]
    total = np.where(valid, v, 0.0).sum(axis=1)
    c = (m[:, None] + 1) / m[:, None] * v - (total / m)[:, None]
    return np.where(valid, c, np.nan)


def permutation_pvalue_mc(original: Sequence[float] | np.ndarray, reference: Any, *, B: int = 10_000,
                          seed: int = 0, chunk: int = 4_000_000) -> tuple[float, int, int, bool]:
    """Within-item permutation p for continuous scores: (p, exceed, n_relabellings, exact).

    Exact enumeration when prod(m_i + 1) <= B (p = #{T* >= T_obs} / N, the identity included);
    otherwise B random relabellings and p = (1 + exceed) / (B + 1).
    """
    if B < 1:
        raise ValueError(f"B must be >= 1 Monte Carlo relabellings, got {B}")
    v, m = versions_matrix(original, reference)
    contrib = _contributions(v, m)
    # items whose versions all score the same add a constant 0: they cannot move T
    live = np.nanmax(contrib, axis=1) > np.nanmin(contrib, axis=1)
    c = contrib[live]
    ml = m[live]
    if c.shape[0] == 0:
        return 1.0, 0, 1, True
    t_obs = float(c[:, 0].sum())
    tol = 1e-10 * float(np.nanmax(np.abs(c), axis=1).sum())
    n_total = math.prod(int(k) + 1 for k in ml) if c.shape[0] < 64 else None
    if n_total is not None and n_total <= B:
        sums = np.zeros(1)
        for row, k in zip(c, ml, strict=True):
            sums = (sums[:, None] + row[None, : k + 1]).ravel()
        exceed = int(np.count_nonzero(sums >= t_obs - tol))
        return exceed / n_total, exceed, n_total, True
    rng = np.random.default_rng(seed)
    n = c.shape[0]
    rows = max(1, chunk // n)
    exceed, done = 0, 0
    filled = np.nan_to_num(c, nan=0.0)
    while done < B:
        r = min(rows, B - done)
        pick = (rng.random((r, n)) * (ml + 1)).astype(np.int64)
        t = filled[np.arange(n)[None, :], pick].sum(axis=1)
        exceed += int(np.count_nonzero(t >= t_obs - tol))
        done += r
    return (1 + exceed) / (B + 1), exceed, B, False


def bootstrap_pvalue(diffs: Sequence[float] | np.ndarray, B: int = 10_000, seed: int = 0,
                     chunk: int = 2_000_000) -> float:
    """One-sided paired bootstrap p for H0: mean(diffs) <= 0 (the paper's test); floored at 1/(B+1).

    Kept for fidelity to the paper's code (`stats.test=bootstrap`); anti-conservative at small n and with
    skewed differences. With fewer than two items there is nothing to resample: p = 1.
    """
    if B < 1:
        raise ValueError(f"B must be >= 1 bootstrap samples, got {B}")
    d = np.asarray(diffs, dtype=np.float64)
    if not np.isfinite(d).all():
        raise ValueError("bootstrap: NaN or infinite differences")
    n = d.size
    if n < 2:
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
    """One-sided exact sign test: p = P(Bin(n+ + n-, 1/2) >= n+).

    Valid for one 0/1 reference draw per item (it is then McNemar's exact test, which the permutation
    test reproduces); NOT valid on differences to averaged draws (m > 1). Kept for comparisons.
    """
    d = np.asarray(diffs, dtype=np.float64)
    n_pos = int(np.count_nonzero(d > 0))
    n_neg = int(np.count_nonzero(d < 0))
    n = n_pos + n_neg
    if n == 0:
        return 1.0, 0, 0
    p = float(sps.binom.sf(n_pos - 1, n, 0.5))
    return min(1.0, max(p, 0.0)), n_pos, n_neg


# ---------------------------------------------------------------------------------------------- the test
@dataclass
class TestResult:
    """One metric's paired comparison of a dataset (or variant) against its reference draws."""

    metric: str
    n: int
    s: float
    s_ref: float
    diff: float
    p_value: float
    c_cont: float
    test: str
    p_floor: float
    m: int = 1  # reference draws per item (the largest, when it varies)
    discordant: tuple[int, int] | None = None  # m = 1, binary: (original 1 & ref 0, original 0 & ref 1)
    exceed: int | None = None  # Monte Carlo: #{T* >= T_obs}
    n_relabellings: int | None = None  # Monte Carlo / enumeration size
    exact: bool = True

    def to_dict(self) -> dict:
        d = self.__dict__.copy()
        d["at_floor"] = self.p_value <= self.p_floor
        d["discordant"] = list(self.discordant) if self.discordant is not None else None  # JSON round-trip
        return d


def paired_test(metric: str, original: Sequence[float] | np.ndarray, reference: Any, *, B: int = 10_000,
                seed: int = 0, test: str = "permutation", ids: Sequence[str] | None = None,
                kind: str | None = None) -> TestResult:
    """Test H1: the originals score higher than their references; returns p, C_cont and summaries.

    `original`: one score per item; `reference`: the item's m draws (n x m array, length-n vector for
    m = 1, or n sequences when m varies). `test`: "permutation" (exact for binary metrics, Monte Carlo
    with B relabellings and stream `seed` for continuous ones) or "bootstrap" (the paper's paired
    bootstrap of X_i - mean_j Y_ij). `kind` overrides the metric's kind ("binary" | "continuous").
    """
    if test not in TESTS:
        raise ValueError(f"stats.test must be one of {list(TESTS)}, not {test!r}")
    kind = kind or metric_kind(metric)
    if kind not in ("binary", "continuous"):
        raise ValueError(f"kind must be binary or continuous, not {kind!r}")
    v, m = versions_matrix(original, reference, metric=metric, ids=ids)
    n = v.shape[0]
    valid = np.arange(v.shape[1])[None, :] <= m[:, None]
    ref_mean = (np.where(valid, v, 0.0).sum(axis=1) - v[:, 0]) / np.maximum(m, 1)
    d = v[:, 0] - ref_mean
    s = float(v[:, 0].mean()) if n else float("nan")
    s_ref = float(ref_mean.mean()) if n else float("nan")
    diff = float(d.mean()) if n else 0.0
    m_max = int(m.max()) if n else 0
    disc = None
    if kind == "binary" and m_max == 1 and n:
        disc = (int(np.sum(v[:, 0] > v[:, 1])), int(np.sum(v[:, 0] < v[:, 1])))
    common = {"metric": metric, "n": n, "s": s, "s_ref": s_ref, "diff": diff, "m": m_max, "discordant": disc}
    if n == 0:
        return TestResult(p_value=1.0, c_cont=0.5, test=test, p_floor=0.0, **common)
    if test == "bootstrap":
        if kind == "binary":
            versions_check = v[valid]
            if not np.isin(versions_check, (0.0, 1.0)).all():
                raise ValueError(f"{metric}: binary scores must be 0 or 1 per version")
        p = bootstrap_pvalue(d, B=B, seed=seed)
        return TestResult(p_value=p, c_cont=c_cont(p), test=f"paired_bootstrap_B{B}", p_floor=1.0 / (B + 1),
                          n_relabellings=B, exact=False, **common)
    if kind == "binary":
        try:
            law = binary_null_law(v[:, 0], [row[1 : k + 1] for row, k in zip(v, m, strict=True)])
        except ValueError as e:
            raise ValueError(f"{metric}: {e}") from None
        p = law.p_value
        name = "exact_mcnemar" if m_max == 1 else "exact_permutation"
        return TestResult(p_value=p, c_cont=c_cont(p), test=name, p_floor=0.0, **common)
    p, exceed, n_rel, exact = permutation_pvalue_mc(v[:, 0], [row[1 : k + 1] for row, k in zip(v, m, strict=True)],
                                                    B=B, seed=seed)
    floor = 1.0 / n_rel if exact else 1.0 / (B + 1)
    name = "exact_permutation_enumerated" if exact else f"permutation_mc_B{B}"
    return TestResult(p_value=p, c_cont=c_cont(p), test=name, p_floor=floor, exceed=exceed,
                      n_relabellings=n_rel, exact=exact, **common)


def pooled_mc_pvalue(results: Sequence[TestResult]) -> float:
    """One Monte Carlo p from several independent streams of the same test: (1 + sum #)/(sum B + 1).

    Exact results (binary, enumerated) are identical across streams: their p is returned as is.
    """
    if not results:
        raise ValueError("no results to pool")
    if all(r.exact for r in results) or any(r.exceed is None for r in results):
        return results[0].p_value
    exceed = sum(int(r.exceed) for r in results)  # type: ignore[arg-type]
    total = sum(int(r.n_relabellings) for r in results)  # type: ignore[arg-type]
    return (1 + exceed) / (total + 1)


def combine(p_values: Mapping[str, float], alpha: float = 0.05) -> dict:
    """Bonferroni combination of the metrics' p-values into one verdict (valid under dependence)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if not p_values:
        return {"rule": "bonferroni_min_p", "p_value": 1.0, "c_cont": 0.5, "contaminated": False,
                "alpha": alpha, "metrics": [], "driving_metric": None}
    k = len(p_values)
    metric, p_min = min(p_values.items(), key=lambda kv: kv[1])
    p = min(1.0, k * p_min)
    return {"rule": "bonferroni_min_p", "p_value": p, "c_cont": c_cont(p), "contaminated": bool(p < alpha),
            "alpha": alpha, "metrics": sorted(p_values), "driving_metric": metric}
