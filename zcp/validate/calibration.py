"""Calibration of the ZCP tests: type-I error under true nulls, and power.

Why this study exists: the tests the probe used before (an exact sign test on per-item averages of the
reference draws; a paired bootstrap of the mean difference) are not valid with m > 1 reference draws
or at small n. The within-item permutation test (zcp.probe.stats) is valid by construction; this module
measures what each test does on data where H0 holds, so the README can show the numbers.

Three kinds of null, one table shape (rejection rate at alpha with a Clopper-Pearson 95% CI):

(a) **Simulated nulls** over a grid (mean accuracy x m x n). Items are heterogeneous: item i has a
    level q_i ~ Beta(kappa mu, kappa (1 - mu)) around the mean accuracy mu, and under H0 the original
    and its m perturbations are i.i.d. given q_i. Regimes: `binary` (Bernoulli(q_i), like acc/con),
    `symmetric` (sigmoid(logit q_i + sigma eps), noise symmetric on the logit scale), `skewed`
    (Beta(kappa_v q_i, kappa_v (1 - q_i)) with kappa_v = 1: spiky near 0 or 1, like p_all of a weak or
    strong model), and `joint` (acc, con, p_first, p_all of one version driven by one shared latent, to
    measure the combined Bonferroni verdict). Power: the original's score is shifted (binary:
    P(correct) = min(1, q_i + delta); continuous: +delta on the logit scale).
(b) **Real-score nulls** from a detection run's records.jsonl: per item one reference draw, picked at
    random, plays the original and the other m - 1 draws are its references. The label is uniform by
    construction, so H0 holds exactly while the scores are a real model's.
(c) **A real model on a real benchmark**: the uncontaminated base model on random item subsets of
    GSM8K, originals against their references: the false-positive rate a user would meet, which also
    includes any systematic difference the perturbation itself introduces.

Tests compared: the permutation test (exact for binary metrics, Monte Carlo for continuous ones), the
one-sided paired t-test and Wilcoxon signed-rank test on d_i = X_i - mean_j Y_ij (scipy), and the old
tests (exact sign test on d_i; paired bootstrap of the mean). In (a), and in (b) for sources with the
same m for every item, they are re-implemented vectorised over replicates (the library's per-call tests
would take hours over the grid): the exact binary test is checked against `zcp.probe.stats.paired_test` on
every binary cell (`library_check` in summary.json), the unit tests check the Monte Carlo and bootstrap
ones against the library and the Wilcoxon against scipy row by row. In (c), and in (b) for ragged
sources, the library's own `paired_test` runs. Two shortcuts keep the grid to minutes and change no
decision: a replicate stops drawing relabellings once its p must exceed max(alphas)
(`sequential_counts`), and the bootstrap of binary scores draws its exceedance count from the exact
bootstrap law (`_lattice_bootstrap_counts`). A Monte Carlo p = (1 + #{T* >= T_obs}) / (B + 1) is a
valid p-value for any B, so B = 999 in the grid gives the same size as the library's B = 10,000
(slightly less power).
"""

from __future__ import annotations

import glob
import json
import logging
import math
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import special as sps_special
from scipy import stats as sps

from zcp.core.io import stable_hash

log = logging.getLogger(__name__)

TESTS = ("permutation", "ttest", "wilcoxon", "sign", "bootstrap")
TEST_LABEL = {
    "permutation": "permutation (exact / MC)",
    "ttest": "paired t (one-sided)",
    "wilcoxon": "Wilcoxon signed-rank",
    "sign": "sign test on averaged draws (old)",
    "bootstrap": "paired bootstrap (old)",
}
REGIMES = ("binary", "symmetric", "skewed")
JOINT_METRICS = ("acc", "con", "p_first", "p_all")
BINARY_METRICS = ("acc", "con")
COMBINED = "combined"
EPS = 1e-12
REL_TOL = 1e-9  # p <= alpha (1 + REL_TOL) rejects: a p equal to alpha up to rounding counts as reaching it


# --------------------------------------------------------------------------------------------------
# rejection rates and their intervals


def rate_ci(k: int | np.ndarray, n: int | np.ndarray, level: float = 0.95) -> tuple[Any, Any]:
    """Clopper-Pearson (exact) interval for k rejections in n replicates; vectorised.

    Identical to scipy.stats.binomtest(k, n).proportion_ci(level, method="exact"), computed from beta
    quantiles so that thousands of table rows cost nothing.
    """
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    a = 1.0 - level
    with np.errstate(invalid="ignore"):
        lo = np.where(k > 0, sps.beta.ppf(a / 2, k, n - k + 1), 0.0)
        hi = np.where(k < n, sps.beta.ppf(1 - a / 2, k + 1, n - k), 1.0)
    if lo.ndim == 0:
        return float(lo), float(hi)
    return lo, hi


def rejects(p: np.ndarray, alpha: float) -> np.ndarray:
    """Rejection indicator p <= alpha (the definition of a level-alpha test; the library's verdict
    uses p < alpha, which can only reject less)."""
    return np.asarray(p) <= alpha * (1 + REL_TOL)


# --------------------------------------------------------------------------------------------------
# simulation


@dataclass(frozen=True)
class SimSpec:
    """Shape of the simulated scores (see the module docstring)."""

    concentration: float = 5.0  # item levels q_i ~ Beta(kappa mu, kappa (1 - mu)): smaller = more heterogeneous
    logit_noise: float = 0.5  # symmetric regime: version score sigmoid(logit q_i + sigma eps)
    beta_concentration: float = 1.0  # skewed regime: version score ~ Beta(kv q_i, kv (1 - q_i))
    joint_noise: float = 1.0  # joint regime: per-version latent z = logit q_i + sigma eps


def _logit(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, EPS, 1 - EPS)
    return np.log(x) - np.log1p(-x)


def item_levels(rng: np.random.Generator, accuracy: float, shape: tuple[int, ...], concentration: float) -> np.ndarray:
    """Heterogeneous item levels q_i ~ Beta(kappa mu, kappa (1 - mu)) with mean mu = accuracy."""
    if not 0.0 < accuracy < 1.0:
        raise ValueError(f"accuracy must lie in (0, 1), got {accuracy}")
    return np.clip(rng.beta(concentration * accuracy, concentration * (1 - accuracy), size=shape), 0.0, 1.0)


def shift_scores(x: np.ndarray, effect: float) -> np.ndarray:
    """Continuous alternative: a score moved by `effect` on the logit scale (stays in (0, 1))."""
    if effect == 0:
        return x
    return np.clip(sps_special.expit(_logit(x) + effect), EPS, 1.0)


def simulate(rng: np.random.Generator, regime: str, accuracy: float, m: int, n: int, replicates: int,
             effect: float = 0.0, spec: SimSpec = SimSpec()) -> tuple[np.ndarray, np.ndarray]:
    """`replicates` simulated benchmarks: originals (R, n) and references (R, n, m).

    Under H0 (effect = 0) the m + 1 versions of an item are i.i.d. given its level q_i. With effect > 0
    the original is favoured: binary P(correct) = min(1, q_i + effect); continuous +effect on the logit.
    """
    shape = (replicates, n)
    q = item_levels(rng, accuracy, shape, spec.concentration)
    if regime == "binary":
        ref = (rng.random((*shape, m)) < q[..., None]).astype(np.float64)
        orig = (rng.random(shape) < np.minimum(1.0, q + effect)).astype(np.float64)
        return orig, ref
    if regime == "symmetric":
        z = _logit(q)[..., None] + spec.logit_noise * rng.standard_normal((*shape, m + 1))
        versions = sps_special.expit(z)
    elif regime == "skewed":
        qc = np.clip(q, 1e-6, 1 - 1e-6)[..., None]
        kv = spec.beta_concentration
        versions = rng.beta(kv * qc, kv * (1 - qc), size=(*shape, m + 1))
    else:
        raise ValueError(f"unknown regime {regime!r}; use one of {REGIMES}")
    versions = np.clip(versions, EPS, 1.0)  # probabilities in (0, 1]
    return shift_scores(versions[..., 0], effect), versions[..., 1:]


def simulate_joint(rng: np.random.Generator, accuracy: float, m: int, n: int, replicates: int,
                   spec: SimSpec = SimSpec()) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The four metrics of each version, dependent through one latent z = logit q_i + sigma eps.

    p_all = sigmoid(z + 0.3 eta), p_first = sigmoid(z + 1 + 0.5 eta') (the first token is easier),
    acc ~ Bernoulli(sigmoid z), full-CoT correct ~ Bernoulli(sigmoid(z + 1.5)), con = both right, or
    both wrong with the same wrong answer (probability 0.2). Versions are i.i.d. given q_i (H0).
    """
    shape = (replicates, n, m + 1)
    q = item_levels(rng, accuracy, (replicates, n), spec.concentration)
    z = _logit(q)[..., None] + spec.joint_noise * rng.standard_normal(shape)
    p_all = np.clip(sps_special.expit(z + 0.3 * rng.standard_normal(shape)), EPS, 1.0)
    p_first = np.clip(sps_special.expit(z + 1.0 + 0.5 * rng.standard_normal(shape)), EPS, 1.0)
    acc = rng.random(shape) < sps_special.expit(z)
    cot = rng.random(shape) < sps_special.expit(z + 1.5)
    con = (acc & cot) | (~acc & ~cot & (rng.random(shape) < 0.2))
    out = {"acc": acc.astype(np.float64), "con": con.astype(np.float64), "p_first": p_first, "p_all": p_all}
    return {k: (v[..., 0], v[..., 1:]) for k, v in out.items()}


# --------------------------------------------------------------------------------------------------
# tests, vectorised over replicates (rows)


def differences(orig: np.ndarray, ref: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """d_i = X_i - mean_j Y_ij per replicate and item; ref is (R, n, m) or, for one replicate, ragged.

    Rounded to 12 decimals so that equal differences are equal: 1 - 2/3 and 1/3 - 0 differ in the last
    bit, and such noise silently breaks the ties of rank tests (scipy's Wilcoxon on unrounded binary
    differences at m = 3 rejects ~28% of true symmetric nulls instead of ~5%).
    """
    orig = np.asarray(orig, dtype=np.float64)
    if isinstance(ref, np.ndarray) and ref.ndim == orig.ndim + 1:
        return np.round(orig - ref.mean(axis=-1), 12)
    return np.round(orig - np.array([np.mean(r) for r in ref]), 12)


def exact_binary(orig: np.ndarray, ones: np.ndarray, versions: int,
                 alphas: Sequence[float] = (0.05, 0.01)) -> tuple[np.ndarray, dict[float, np.ndarray]]:
    """Exact within-item permutation p-values of binary scores, and the attainable size per alpha.

    orig (R, n): the original's 0/1 score; ones (R, n): ones among the item's m + 1 versions (original
    included); versions = m + 1, the same for every item. Under H0 the original is a uniform pick among
    the versions, so it is 1 with probability T_i / (m + 1), independently across items, and
    T = sum_i (X_i - mean_j Y_ij) = sum_i ((m + 1) X_i - T_i) / m is increasing in W = sum_i X_i given
    the counts: p = P(W* >= W_obs), W* a sum of one binomial per count class t (McNemar's exact test at
    m = 1). The classes are convolved by FFT, vectorised over replicates. The attainable size at alpha
    is the largest null tail P(W* >= w) <= alpha: the actual size of the test given the counts.
    (Unequal m_i do not order T by W; the library's `binary_null_law` handles that case.)
    """
    orig = np.atleast_2d(np.asarray(orig, dtype=np.float64))
    ones = np.rint(np.atleast_2d(np.asarray(ones, dtype=np.float64))).astype(np.int64)
    R, n = ones.shape
    size = 1 << int(np.ceil(np.log2(n + 1)))
    spectrum = np.ones((R, size // 2 + 1), dtype=np.complex128)
    shift = (ones == versions).sum(axis=1)  # items whose versions are all 1: X_i = 1 for sure
    k = np.arange(n + 1)[None, :]
    for t in range(1, versions):
        count = (ones == t).sum(axis=1)
        if not count.any():
            continue
        pmf = sps.binom.pmf(k, count[:, None], t / versions)
        spectrum *= np.fft.rfft(pmf, size, axis=1)
    pmf = np.clip(np.fft.irfft(spectrum, size, axis=1)[:, : n + 1], 0.0, None)
    pmf /= pmf.sum(axis=1, keepdims=True)
    sf = np.clip(np.cumsum(pmf[:, ::-1], axis=1)[:, ::-1], 0.0, 1.0)  # sf[:, w] = P(W* - shift >= w)
    sf[sf < 1e-14] = 0.0  # FFT round-off below any level of interest
    w_obs = np.rint(orig.sum(axis=1)).astype(np.int64) - shift
    pvals = sf[np.arange(R), np.clip(w_obs, 0, n)]
    pvals[w_obs > n] = 0.0
    attain = {}
    for a in alphas:
        ok = sf <= a * (1 + REL_TOL)
        attain[a] = np.where(ok, sf, 0.0).max(axis=1)
    return pvals, attain


def _contributions(orig: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """c[r, i, k] = the item's term of T when version k is labelled the original (k = 0: observed)."""
    v = np.concatenate([orig[..., None], ref], axis=-1)
    m = ref.shape[-1]
    return ((m + 1) * v - v.sum(axis=-1, keepdims=True)) / m


def _tol(t: np.ndarray) -> np.ndarray:
    return 1e-9 * np.maximum(1.0, np.abs(t))


def uniform_labels(rng: np.random.Generator, m1: int, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform integers in [0, m1) as uint8 (m1 <= 256): random bits when m1 is 2 or 4, which is several
    times cheaper than bounded integers and exactly uniform."""
    size = math.prod(shape)
    if m1 == 2:
        return np.unpackbits(rng.integers(0, 256, -(-size // 8), dtype=np.uint8))[:size].reshape(shape)
    if m1 == 4:
        b = rng.integers(0, 256, -(-size // 4), dtype=np.uint8)
        out = np.empty((b.size, 4), dtype=np.uint8)
        for j in range(4):
            np.bitwise_and(np.right_shift(b, 2 * j), 3, out=out[:, j])
        return out.reshape(-1)[:size].reshape(shape)
    return rng.integers(0, m1, size=shape, dtype=np.uint8)


def sequential_counts(exceed: Callable[[np.ndarray, int], np.ndarray], R: int, B: int,
                      stop_above: float | None = None) -> np.ndarray:
    """#{Monte Carlo draws at or beyond the observed statistic} out of B, per row.

    `exceed(rows, b)` draws b more resamples for the given rows and returns their exceedance counts.
    With `stop_above` = a level, a row stops drawing once (1 + count) / (B + 1) > stop_above: its full-B
    p-value would exceed that level too, so every rejection decision at a level <= stop_above is the
    one the full B draws give (the returned p is then a lower bound above stop_above). Under H0 most
    rows stop after a few dozen draws, which makes the grid ~5x cheaper without changing any decision.
    """
    count = np.zeros(R, dtype=np.int64)
    active = np.arange(R)
    limit = math.inf if stop_above is None else stop_above * (1 + REL_TOL) * (B + 1)
    block = B if stop_above is None else int(min(B, max(32, 2 * math.ceil(limit))))
    done = 0
    while done < B and active.size:
        b = min(block, B - done)
        count[active] += exceed(active, b)
        done += b
        active = active[(1 + count[active]) <= limit]
    return count


def permutation_mc(orig: np.ndarray, ref: np.ndarray, B: int, rng: np.random.Generator,
                   stop_above: float | None = None, chunk_elements: int = 1 << 23) -> np.ndarray:
    """Within-item permutation p-values (R,) of T = sum_i (X_i - mean_j Y_ij), one-sided (original higher).

    Monte Carlo over B relabellings per replicate, p = (1 + #{T* >= T_obs}) / (B + 1); exact enumeration
    of all (m + 1)^n labellings when that is <= B (p = #{T* >= T_obs} / (m + 1)^n), as the library does.
    `stop_above`: see `sequential_counts` (decisions at levels <= stop_above are unchanged).
    """
    orig = np.asarray(orig, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    R, n, m = ref.shape
    m1 = m + 1
    if m1 > 256:
        raise ValueError(f"m = {m} reference draws: at most 255 supported here")
    c = _contributions(orig, ref)
    t_obs = c[..., 0].sum(axis=-1)
    thr = t_obs - _tol(t_obs)
    if m1**n <= B:
        labels = np.indices((m1,) * n).reshape(n, -1).T  # (m1^n, n)
        t_all = c[:, np.arange(n)[None, :], labels].sum(axis=-1)  # (R, m1^n)
        return (t_all >= thr[:, None]).mean(axis=1)

    def exceed(rows_idx: np.ndarray, b: int) -> np.ndarray:
        out = np.empty(rows_idx.size, dtype=np.int64)
        per = max(1, chunk_elements // (b * n))
        for s in range(0, rows_idx.size, per):
            sel = rows_idx[s : s + per]
            cf = c[sel].reshape(-1)
            base = ((np.arange(sel.size)[:, None, None] * n + np.arange(n)[None, None, :]) * m1).astype(np.int64)
            t_star = cf[base + uniform_labels(rng, m1, (sel.size, b, n))].sum(axis=-1)
            out[s : s + sel.size] = (t_star >= thr[sel, None]).sum(axis=1)
        return out

    return (1 + sequential_counts(exceed, R, B, stop_above)) / (B + 1)


def permutation_pvalues(kind: str, orig: np.ndarray, ref: np.ndarray, B: int, rng: np.random.Generator,
                        alphas: Sequence[float] = (0.05, 0.01), stop_above: float | None = None
                        ) -> tuple[np.ndarray, dict[float, np.ndarray] | None]:
    """The permutation test of a metric kind: exact for `binary` (with attainable sizes), else MC."""
    if kind == "binary":
        ones = orig + ref.sum(axis=-1)
        return exact_binary(orig, ones, ref.shape[-1] + 1, alphas)
    return permutation_mc(orig, ref, B, rng, stop_above), None


def _lattice_bootstrap_counts(z: np.ndarray, B: int, rng: np.random.Generator) -> np.ndarray:
    """#{resample sum >= 2 sum(z)} of B bootstrap resamples, for integer-valued rows z (R, n).

    Given the data, the B resample sums are i.i.d., so the count is Binomial(B, pi) with pi the exact
    bootstrap tail, computed here by FFT (the n-fold convolution of the row's empirical law): the same
    law as resampling B times, at a cost independent of B and n.
    """
    R, n = z.shape
    lo, hi = int(z.min()), int(z.max())
    width = hi - lo + 1
    size = 1 << int(np.ceil(np.log2(n * (width - 1) + 1)))
    counts = np.zeros(R, dtype=np.int64)
    rows = max(1, (1 << 22) // size)
    for s in range(0, R, rows):
        zz = z[s : s + rows] - lo
        flat = (np.arange(zz.shape[0])[:, None] * width + zz).ravel()
        pmf = np.bincount(flat, minlength=zz.shape[0] * width).reshape(-1, width) / n
        law = np.clip(np.fft.irfft(np.fft.rfft(pmf, size, axis=1) ** n, size, axis=1), 0.0, None)
        law = law[:, : n * (width - 1) + 1]
        law /= law.sum(axis=1, keepdims=True)
        sf = np.cumsum(law[:, ::-1], axis=1)[:, ::-1]  # sf[:, j] = P(sum - n lo >= j)
        need = 2 * zz.sum(axis=1) + n * lo  # threshold on (sum - n lo): 2 sum(z) - n lo
        idx = np.clip(need, 0, sf.shape[1])
        tail = np.where(idx < sf.shape[1], sf[np.arange(zz.shape[0]), np.minimum(idx, sf.shape[1] - 1)], 0.0)
        counts[s : s + rows] = rng.binomial(B, np.clip(tail, 0.0, 1.0))
    return counts


def bootstrap_pvalues(d: np.ndarray, B: int, rng: np.random.Generator, lattice: int | None = None,
                      stop_above: float | None = None, chunk_elements: int = 1 << 23) -> np.ndarray:
    """The old test: one-sided paired bootstrap of the mean of d (centred resampling), per row.

    p = (1 + #{mean of a resample of d - mean(d) >= mean(d)}) / (B + 1), as `stats.test=bootstrap`
    (p = 1 below two items). With `lattice` = m (binary scores, so m d is an integer) the count is drawn
    from its exact law (see `_lattice_bootstrap_counts`) instead of by resampling: the same test.
    `stop_above`: see `sequential_counts` (decisions at levels <= stop_above are unchanged).
    """
    d = np.atleast_2d(np.asarray(d, dtype=np.float64))
    R, n = d.shape
    if n < 2:
        return np.ones(R)
    if lattice is not None:
        z = np.rint(d * lattice)
        if np.allclose(z, d * lattice, atol=1e-9):
            return (1 + _lattice_bootstrap_counts(z.astype(np.int64), B, rng)) / (B + 1)
    obs = d.mean(axis=1)
    centred = d - obs[:, None]
    thr = obs - 1e-12 * np.maximum(1.0, np.abs(obs))
    idx_t = np.uint16 if n < 2**16 else np.int64

    def exceed(rows_idx: np.ndarray, b: int) -> np.ndarray:
        out = np.empty(rows_idx.size, dtype=np.int64)
        per = max(1, chunk_elements // (b * n))
        for s in range(0, rows_idx.size, per):
            sel = rows_idx[s : s + per]
            cf = centred[sel].reshape(-1)
            base = (np.arange(sel.size, dtype=np.int64) * n)[:, None, None]
            null = cf[base + rng.integers(0, n, size=(sel.size, b, n), dtype=idx_t)].mean(axis=-1)
            out[s : s + sel.size] = (null >= thr[sel, None]).sum(axis=1)
        return out

    return (1 + sequential_counts(exceed, R, B, stop_above)) / (B + 1)


def sign_pvalues(d: np.ndarray) -> np.ndarray:
    """The old test: one-sided exact sign test on d (exact McNemar for 0/1 pairs), per row."""
    d = np.atleast_2d(np.asarray(d, dtype=np.float64))
    pos = (d > 1e-12).sum(axis=1)
    neg = (d < -1e-12).sum(axis=1)
    tot = pos + neg
    p = np.where(tot > 0, sps.binom.sf(pos - 1, np.maximum(tot, 1), 0.5), 1.0)
    return np.clip(p, 0.0, 1.0)


def ttest_pvalues(d: np.ndarray) -> np.ndarray:
    """One-sided one-sample t-test of mean(d) > 0 (scipy.stats.ttest_1samp), per row; NaN (d constant) -> 1."""
    d = np.atleast_2d(np.asarray(d, dtype=np.float64))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        p = sps.ttest_1samp(d, 0.0, axis=1, alternative="greater").pvalue
    return np.nan_to_num(np.asarray(p, dtype=np.float64), nan=1.0)


def _signed_rank_exact(d: np.ndarray) -> np.ndarray:
    """One-sided signed-rank p by enumerating all 2^n sign patterns (mid-ranks of |d|, zeros dropped),
    per row: what scipy's `method="auto"` does for n <= 13 when there are ties or zeros, vectorised."""
    n = d.shape[1]
    a = np.where(d == 0, np.nan, np.abs(d))
    ranks = np.nan_to_num(sps.rankdata(a, axis=1, nan_policy="omit"), nan=0.0)
    obs = (ranks * (d > 0)).sum(axis=1)
    signs = ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1).astype(np.float64)  # (2^n, n)
    null = ranks @ signs.T  # (R, 2^n): r_plus of every sign pattern
    return (null >= (obs - 1e-9 * np.maximum(1.0, obs))[:, None]).mean(axis=1)


def wilcoxon_pvalues(d: np.ndarray) -> np.ndarray:
    """One-sided Wilcoxon signed-rank test of d > 0 per row, as scipy.stats.wilcoxon(d_row,
    alternative="greater") decides for that row alone (zeros dropped; exact without ties or zeros at
    n <= 50, exact sign enumeration with them at n <= 13, else the normal approximation with tie and
    continuity corrections); all-zero rows -> 1. Rows are grouped so that each group gets the same
    method scipy would pick for a single row (its `auto` choice is made per call, not per row)."""
    d = np.atleast_2d(np.asarray(d, dtype=np.float64))
    R, n = d.shape
    p = np.ones(R)
    srt = np.sort(np.where(d == 0, np.inf, np.abs(d)), axis=1)
    with np.errstate(invalid="ignore"):  # inf - inf between dropped zeros: not a tie
        tied = (d == 0).any(axis=1) | (np.diff(srt, axis=1) == 0).any(axis=1)
    nonzero = (d != 0).any(axis=1)
    groups = [(tied & nonzero, "ties"), (~tied & nonzero, "clean")]
    for mask, what in groups:
        if not mask.any():
            continue
        sub = d[mask]
        if what == "ties" and n <= 13:
            p[mask] = _signed_rank_exact(sub)
            continue
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            p[mask] = np.atleast_1d(sps.wilcoxon(sub, alternative="greater", axis=1).pvalue)
    return np.clip(np.nan_to_num(p, nan=1.0), 0.0, 1.0)


def all_pvalues(kind: str, orig: np.ndarray, ref: np.ndarray, tests: Sequence[str], B: int,
                rng: np.random.Generator, alphas: Sequence[float] = (0.05, 0.01), sequential: bool = True
                ) -> tuple[dict[str, np.ndarray], dict[float, np.ndarray] | None]:
    """p-values (R,) of each requested test on simulated replicates; attainable sizes of the exact test.

    sequential: Monte Carlo tests stop early once a replicate's p must exceed max(alphas), so the
    p-values are exact decisions at every level <= max(alphas) (all the study uses, Bonferroni
    thresholds included) but only lower bounds above it.
    """
    d = differences(orig, ref)
    stop = max(alphas) if sequential else None
    out: dict[str, np.ndarray] = {}
    attain = None
    for t in tests:
        if t == "permutation":
            out[t], attain = permutation_pvalues(kind, orig, ref, B, rng, alphas, stop)
        elif t == "ttest":
            out[t] = ttest_pvalues(d)
        elif t == "wilcoxon":
            out[t] = wilcoxon_pvalues(d)
        elif t == "sign":
            out[t] = sign_pvalues(d)
        elif t == "bootstrap":
            out[t] = bootstrap_pvalues(d, B, rng, lattice=ref.shape[-1] if kind == "binary" else None,
                                       stop_above=stop)
        else:
            raise ValueError(f"unknown test {t!r}; use some of {TESTS}")
    return out, attain


def bonferroni(pvals: Sequence[np.ndarray]) -> np.ndarray:
    """Combined p of k metrics' p-values: min(1, k min p) (valid under any dependence)."""
    arr = np.vstack([np.asarray(p, dtype=np.float64) for p in pvals])
    return np.minimum(1.0, arr.shape[0] * arr.min(axis=0))


# --------------------------------------------------------------------------------------------------
# rows of the tables


def kind_of(metric_or_regime: str) -> str:
    """`binary` for acc/con and the binary regime, else `continuous`."""
    return "binary" if metric_or_regime in (*BINARY_METRICS, "binary") else "continuous"


def rate_row(p: np.ndarray, alphas: Sequence[float], **fields: Any) -> dict[str, Any]:
    """One table row: rejection rates at each alpha with Clopper-Pearson 95% CIs, plus `fields`."""
    p = np.asarray(p)
    row = dict(fields)
    row["replicates"] = int(p.size)
    for a in alphas:
        k = int(rejects(p, a).sum())
        lo, hi = rate_ci(k, p.size)
        row[f"rate@{a:g}"] = k / p.size if p.size else float("nan")
        row[f"lo@{a:g}"] = lo
        row[f"hi@{a:g}"] = hi
    return row


def flag_row(row: dict[str, Any], alpha: float, high: float, low: float) -> dict[str, Any]:
    """Add `flag`: `high` when the type-I estimate exceeds `high`, `low` when it falls below `low` in a
    cell that is not discrete-limited (a low rate there is a wasteful test, not a discreteness bound)."""
    r = row[f"rate@{alpha:g}"]
    flag = ""
    if r > high:
        flag = "high"
    elif r < low and not row.get("discrete_limited"):
        flag = "low"
    row["flag"] = flag
    return row


def _cell_rng(seed: int, *key: Any) -> np.random.Generator:
    """A generator per grid cell: results do not depend on which other cells run, or in what order."""
    h = int(stable_hash(json.dumps([str(k) for k in key]), 15), 16)
    return np.random.default_rng(np.random.SeedSequence([int(seed), h]))


def _bar(total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="cell")


# --------------------------------------------------------------------------------------------------
# (a) simulated nulls, joint verdict, power


@dataclass
class GridSettings:
    """The simulated grid and its Monte Carlo sizes."""

    accuracy: Sequence[float] = (0.05, 0.25, 0.5, 0.75, 0.9, 0.95)
    m: Sequence[int] = (1, 3, 9)
    n: Sequence[int] = (10, 25, 50, 100, 500)
    regimes: Sequence[str] = REGIMES
    tests: Sequence[str] = TESTS
    replicates: int = 1000  # per cell; CI half-width ~0.0135 at a rate of 0.05
    replicates_continuous: int = 800  # continuous cells (Monte Carlo permutation and bootstrap cost B x n each)
    replicates_large: int = 300  # continuous cells with n >= large_n
    large_n: int = 500
    B: int = 999
    library_check: int = 20  # binary cells: replicates re-tested with zcp.probe.stats.paired_test (0 = off)


def _replicates(g: GridSettings, kind: str, n: int) -> int:
    if kind == "binary":
        return g.replicates
    return g.replicates_large if n >= g.large_n else g.replicates_continuous


def _library_check(orig: np.ndarray, ref: np.ndarray, p: np.ndarray, k: int) -> float:
    """Largest |p - p_library| of the exact binary test over the first k replicates."""
    from zcp.probe.stats import paired_test

    worst = 0.0
    for r in range(min(k, orig.shape[0])):
        res = paired_test("acc", orig[r], ref[r], test="permutation")
        worst = max(worst, abs(res.p_value - float(p[r])))
    return worst


def null_grid(g: GridSettings, spec: SimSpec, alphas: Sequence[float], seed: int, *, discrete_below: float,
              progress: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Type-I error of every test in every (regime, accuracy, m, n) cell; returns rows and check info."""
    cells = [(reg, acc, m, n) for reg in g.regimes for acc in g.accuracy for m in g.m for n in g.n]
    rows: list[dict[str, Any]] = []
    worst_lib = 0.0
    bar = _bar(len(cells), "null grid", progress)
    for reg, acc, m, n in cells:
        kind = kind_of(reg)
        rng = _cell_rng(seed, "null", reg, acc, m, n)
        R = _replicates(g, kind, n)
        orig, ref = simulate(rng, reg, acc, m, n, R, spec=spec)
        pv, attain = all_pvalues(kind, orig, ref, g.tests, g.B, rng, alphas)
        if attain is not None and g.library_check:
            worst_lib = max(worst_lib, _library_check(orig, ref, pv["permutation"], g.library_check))
        limited = bool(attain is not None and attain[alphas[0]].mean() < discrete_below)
        realised = float(np.concatenate([orig[..., None], ref], axis=-1).mean())
        for t, p in pv.items():
            row = rate_row(p, alphas, part="a", regime=reg, metric=kind, test=t, m=m, n=n, accuracy=acc,
                           score_mean=realised, discrete_limited=limited)
            if t == "permutation" and attain is not None:
                for a in alphas:
                    row[f"attainable@{a:g}"] = float(attain[a].mean())
            rows.append(row)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return rows, {"library_check_max_abs_diff": worst_lib if g.library_check and "binary" in g.regimes else None}


@dataclass
class JointSettings:
    """The four metrics simulated jointly: the combined Bonferroni verdict's type-I error."""

    accuracy: Sequence[float] = (0.05, 0.25, 0.5, 0.75, 0.9, 0.95)
    m: Sequence[int] = (1, 3, 9)
    n: Sequence[int] = (25, 100)
    tests: Sequence[str] = TESTS
    replicates: int = 800
    B: int = 999


def joint_grid(j: JointSettings, spec: SimSpec, alphas: Sequence[float], seed: int, *, discrete_below: float,
               progress: bool = True) -> list[dict[str, Any]]:
    """Per metric and combined (Bonferroni over the four metrics, per test) type-I error, jointly simulated.

    The `sign + bootstrap` combination is the old library verdict (sign test on acc/con, bootstrap on
    p_first/p_all).
    """
    cells = [(acc, m, n) for acc in j.accuracy for m in j.m for n in j.n]
    rows: list[dict[str, Any]] = []
    bar = _bar(len(cells), "joint", progress)
    for acc, m, n in cells:
        rng = _cell_rng(seed, "joint", acc, m, n)
        data = simulate_joint(rng, acc, m, n, j.replicates, spec)
        per_metric: dict[str, dict[str, np.ndarray]] = {}
        limited = False
        for metric, (orig, ref) in data.items():
            kind = kind_of(metric)
            pv, attain = all_pvalues(kind, orig, ref, j.tests, j.B, rng, alphas)
            lim = bool(attain is not None and attain[alphas[0]].mean() < discrete_below)
            limited = limited or lim
            per_metric[metric] = pv
            for t, p in pv.items():
                row = rate_row(p, alphas, part="a-joint", regime="joint", metric=metric, test=t, m=m, n=n,
                               accuracy=acc, score_mean=float(orig.mean()), discrete_limited=lim)
                if t == "permutation" and attain is not None:
                    for a in alphas:
                        row[f"attainable@{a:g}"] = float(attain[a].mean())
                rows.append(row)
        for t in j.tests:
            p = bonferroni([per_metric[mt][t] for mt in data])
            rows.append(rate_row(p, alphas, part="a-joint", regime="joint", metric=COMBINED, test=t, m=m, n=n,
                                 accuracy=acc, discrete_limited=False))
        if "sign" in j.tests and "bootstrap" in j.tests:
            p = bonferroni([per_metric[mt]["sign" if mt in BINARY_METRICS else "bootstrap"] for mt in data])
            rows.append(rate_row(p, alphas, part="a-joint", regime="joint", metric=COMBINED, test="sign+bootstrap",
                                 m=m, n=n, accuracy=acc, discrete_limited=False))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return rows


@dataclass
class PowerSettings:
    """Power against shifted originals."""

    accuracy: Sequence[float] = (0.5, 0.9)
    m: Sequence[int] = (3,)
    n: Sequence[int] = (25, 100)
    regimes: Sequence[str] = REGIMES
    tests: Sequence[str] = ("permutation", "ttest", "wilcoxon")
    binary_effects: Sequence[float] = (0.0, 0.05, 0.1, 0.2, 0.3)  # P(original correct) = min(1, q_i + delta)
    continuous_effects: Sequence[float] = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0)  # + delta on the logit of the original
    replicates: int = 400
    B: int = 999


def power_grid(pw: PowerSettings, spec: SimSpec, alphas: Sequence[float], seed: int,
               progress: bool = True) -> list[dict[str, Any]]:
    """Rejection rate of each test against each effect size (effect 0 = the null, for reference)."""
    cells = []
    for reg in pw.regimes:
        effects = pw.binary_effects if reg == "binary" else pw.continuous_effects
        cells += [(reg, acc, m, n, e) for acc in pw.accuracy for m in pw.m for n in pw.n for e in effects]
    rows: list[dict[str, Any]] = []
    bar = _bar(len(cells), "power", progress)
    for reg, acc, m, n, e in cells:
        rng = _cell_rng(seed, "power", reg, acc, m, n, e)
        orig, ref = simulate(rng, reg, acc, m, n, pw.replicates, effect=e, spec=spec)
        pv, _ = all_pvalues(kind_of(reg), orig, ref, pw.tests, pw.B, rng, alphas)
        for t, p in pv.items():
            rows.append(rate_row(p, alphas, part="power", regime=reg, metric=kind_of(reg), test=t, m=m, n=n,
                                 accuracy=acc, effect=e))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return rows


# --------------------------------------------------------------------------------------------------
# (b) real-score nulls from detection records


def expand_paths(patterns: Iterable[str]) -> list[Path]:
    """Files named by paths or glob patterns (`**` allowed), sorted, duplicates removed."""
    out: list[Path] = []
    for pat in patterns:
        hits = sorted(glob.glob(str(pat), recursive=True)) if any(ch in str(pat) for ch in "*?[") else [str(pat)]
        for h in hits:
            p = Path(h)
            if p.is_file() and p not in out:
                out.append(p)
    return out


def _has_metric(rec: Mapping[str, Any], metric: str) -> bool:
    from zcp.probe.prompts import metric_value

    try:
        v = metric_value(dict(rec), metric)
    except (KeyError, TypeError, ValueError):
        return False
    return math.isfinite(v)


def reference_draws(records: Iterable[Mapping[str, Any]], metrics: Sequence[str]
                    ) -> tuple[dict[str, dict[str, np.ndarray]], list[str]]:
    """Per split, per original item: its reference draws' scores, an array (draws, metrics) in draw order.

    Only metrics present in every reference record are kept (a run with probe.metrics=[p_first, p_all]
    has no acc); returns the groups and the metrics kept.
    """
    from zcp.probe.prompts import metric_value

    refs = [r for r in records if r.get("variant") == "reference"]
    kept = [mt for mt in metrics if refs and all(_has_metric(r, mt) for r in refs)]
    by: dict[str, dict[str, list[tuple[int, list[float]]]]] = defaultdict(lambda: defaultdict(list))
    for r in refs:
        by[str(r["split"])][str(r["original_id"])].append((int(r["draw"]), [metric_value(dict(r), mt) for mt in kept]))
    out = {split: {oid: np.array([v for _, v in sorted(rows)], dtype=np.float64).reshape(len(rows), len(kept))
                   for oid, rows in items.items()}
           for split, items in by.items()}
    return out, kept


def pseudo_null(draws: Sequence[np.ndarray], rng: np.random.Generator, n_items: int | None = None
                ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """One real-score null replicate: per item a random draw plays the original, the others its references.

    draws: per item an array (m_i, k) of its reference draws' scores (m_i >= 2). Returns the originals
    (n, k), the references (list of (m_i - 1, k) arrays) and the chosen items' indices. The label is a
    uniform pick, so the pseudo-original is exchangeable with its references by construction.
    """
    idx = np.arange(len(draws))
    if n_items is not None and n_items < len(draws):
        idx = np.sort(rng.choice(len(draws), size=n_items, replace=False))
    orig, refs = [], []
    for i in idx:
        a = draws[i]
        if a.shape[0] < 2:
            raise ValueError(f"item {i} has {a.shape[0]} reference draw(s); a real-score null needs >= 2")
        j = int(rng.integers(a.shape[0]))
        orig.append(a[j])
        refs.append(np.delete(a, j, axis=0))
    return np.array(orig), refs, idx


@dataclass
class RealNullSettings:
    """Real-score nulls from detection records."""

    records: Sequence[str] = ()
    metrics: Sequence[str] = JOINT_METRICS
    tests: Sequence[str] = TESTS
    replicates: int = 1000
    n_items: Sequence[int | None] = (None,)  # subsample items per replicate (None: all usable items)
    B: int = 999
    library_check: int = 20  # replicates whose exact binary p is recomputed by zcp.probe.stats.paired_test


def _ref_arg(refs: Sequence[np.ndarray], col: int) -> np.ndarray | list[np.ndarray]:
    """References of one metric for the library: an (n, m) array when rectangular, else a ragged list."""
    cols = [r[:, col] for r in refs]
    if len({c.size for c in cols}) == 1:
        return np.vstack(cols)
    return cols


def run_replicates(orig: Sequence[np.ndarray], refs: Sequence[Sequence[np.ndarray]], metrics: Sequence[str],
                    tests: Sequence[str], B: int, alphas: Sequence[float], seed: int, progress: bool = True,
                    desc: str = "replicates") -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Run the library's tests and the comparators on replicate datasets.

    orig[r]: (n, k) scores of replicate r's originals (k metrics); refs[r]: per item (m_i, k) references.
    The permutation and bootstrap tests are zcp.probe.stats.paired_test (what a user runs); the t, Wilcoxon and
    sign tests are scipy's on d_i. Returns p-values per metric per test (R,), plus the combined p
    (Bonferroni over the metrics, per test) and the attainable size of the exact test for binary metrics.
    """
    from zcp.probe.stats import binary_null_law, paired_test

    R = len(orig)
    out: dict[str, dict[str, np.ndarray]] = {mt: {t: np.ones(R) for t in tests} for mt in metrics}
    attain: dict[str, np.ndarray] = {}
    d = {mt: np.vstack([differences(orig[r][:, k], [x[:, k] for x in refs[r]]) for r in range(R)])
         for k, mt in enumerate(metrics)}
    for mt in metrics:
        for t in tests:
            if t == "ttest":
                out[mt][t] = ttest_pvalues(d[mt])
            elif t == "wilcoxon":
                out[mt][t] = wilcoxon_pvalues(d[mt])
            elif t == "sign":
                out[mt][t] = sign_pvalues(d[mt])
    lib = [t for t in tests if t in ("permutation", "bootstrap")]
    bar = None
    if progress and lib:
        from tqdm.auto import tqdm

        bar = tqdm(total=R, desc=desc, unit="rep")
    for r in range(R):
        for k, mt in enumerate(metrics):
            ref_k = _ref_arg(refs[r], k)
            for t in lib:
                res = paired_test(mt, orig[r][:, k], ref_k, B=B, seed=seed + r, test=t)
                out[mt][t][r] = res.p_value
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    for k, mt in enumerate(metrics):
        if mt in BINARY_METRICS and "permutation" in tests:  # the exact test's attainable size (library law)
            attain[mt] = np.array([[binary_null_law(orig[r][:, k], [x[:, k] for x in refs[r]]).attainable_size(a)
                                    for r in range(R)] for a in alphas])
    combined = {t: bonferroni([out[mt][t] for mt in metrics]) for t in tests}
    out[COMBINED] = combined
    return out, attain


def real_null_study(s: RealNullSettings, alphas: Sequence[float], seed: int, *, discrete_below: float,
                    progress: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Type-I error on real scores: per records file and split, pseudo-originals drawn from the references.

    Sources whose items all have the same number of draws are tested vectorised (as in part (a), with the
    exact binary test checked against the library); ragged ones through zcp.probe.stats.paired_test.
    """
    from zcp.core.io import read_jsonl

    paths = expand_paths(s.records)
    info: dict[str, Any] = {"files": [str(p) for p in paths], "sources": []}
    rows: list[dict[str, Any]] = []
    if not paths:
        info["skipped"] = f"no records file matched {list(s.records)}"
        return rows, info
    for path in paths:
        recs = list(read_jsonl(path, tolerate_partial_last_line=True))
        groups, metrics = reference_draws(recs, s.metrics)
        for split, items in sorted(groups.items()):
            usable = [oid for oid, a in sorted(items.items()) if a.shape[0] >= 2]
            label = _source_label(path, split)
            src = {"source": label, "file": str(path), "split": split, "items": len(items), "usable_items": len(usable),
                   "metrics": metrics, "draws": sorted({int(items[o].shape[0]) for o in usable})}
            info["sources"].append(src)
            if len(usable) < 2 or not metrics:
                src["skipped"] = "fewer than 2 items with >= 2 reference draws, or no metric in every record"
                continue
            draws = [items[o] for o in usable]
            for n_items in s.n_items:
                n_eff = len(usable) if n_items is None else min(int(n_items), len(usable))
                rng = _cell_rng(seed, "real", label, n_eff)
                reps = [pseudo_null(draws, rng, n_eff) for _ in range(s.replicates)]
                if len(src["draws"]) == 1:  # every item has m draws: vectorised over replicates
                    pv, attain, worst = _vectorised_replicates(reps, metrics, s.tests, s.B, rng, alphas,
                                                               s.library_check)
                    src["library_check_max_abs_diff"] = worst
                else:  # ragged: the library, replicate by replicate
                    pv, attain = run_replicates([r[0] for r in reps], [r[1] for r in reps], metrics, s.tests, s.B,
                                                alphas, seed, progress, desc=f"real null {label} n={n_eff}")
                m_label = "/".join(str(x - 1) for x in src["draws"])
                for mt in [*metrics, COMBINED]:
                    score = float(np.mean([a[:, metrics.index(mt)].mean() for a in draws])) if mt in metrics else None
                    lim = bool(mt in attain and attain[mt][0].mean() < discrete_below)
                    for t in s.tests:
                        row = rate_row(pv[mt][t], alphas, part="b", regime=label, metric=mt, test=t, m=m_label,
                                       n=n_eff, accuracy=score, score_mean=score, discrete_limited=lim)
                        if t == "permutation" and mt in attain:
                            for ai, a in enumerate(alphas):
                                row[f"attainable@{a:g}"] = float(attain[mt][ai].mean())
                        rows.append(row)
    return rows, info


def _vectorised_replicates(reps: Sequence[tuple[np.ndarray, list[np.ndarray], np.ndarray]], metrics: Sequence[str],
                           tests: Sequence[str], B: int, rng: np.random.Generator, alphas: Sequence[float],
                           library_check: int) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray], float]:
    """The tests of `all_pvalues` on real-null replicates with the same m per item (the demo's case), and the
    largest |p - p_library| of the exact binary test over the first `library_check` replicates."""
    from zcp.probe.stats import paired_test

    orig = np.stack([r[0] for r in reps])  # (R, n, k)
    ref = np.stack([np.stack(r[1]) for r in reps])  # (R, n, m, k)
    out: dict[str, dict[str, np.ndarray]] = {}
    attain: dict[str, np.ndarray] = {}
    worst = 0.0
    for k, mt in enumerate(metrics):
        o, y = orig[..., k], ref[..., k]
        out[mt], att = all_pvalues(kind_of(mt), o, y, tests, B, rng, alphas)
        if att is not None:
            attain[mt] = np.vstack([att[a] for a in alphas])
            for r in range(min(library_check, o.shape[0])):
                worst = max(worst, abs(paired_test(mt, o[r], y[r]).p_value - float(out[mt]["permutation"][r])))
    out[COMBINED] = {t: bonferroni([out[mt][t] for mt in metrics]) for t in tests}
    return out, attain, worst


def _source_label(path: Path, split: str) -> str:
    """A short name for a records file and split, e.g. demo__ab12/FT/C or base-detect__cd34/U."""
    skip = {"outputs", "contaminate", "detect", ".", "", "/"}
    parts = [p for p in path.parent.parts[-3:] if p not in skip]
    return "/".join([*parts, split])


# --------------------------------------------------------------------------------------------------
# (c) the base model on random subsets of a real benchmark


@dataclass
class BaseModelSettings:
    """Random item subsets of a benchmark, scored once by a real (uncontaminated) model."""

    metrics: Sequence[str] = ("acc", "p_first", "p_all")  # con: a full-CoT generation per unit (slow on CPU)
    tests: Sequence[str] = TESTS
    subsets: int = 200
    subset_size: int = 100
    B: int = 10_000  # the library default: what a user meets
    chunk_size: int = 256
    records_root: str = "outputs/calibration/records"


def item_table(records: Iterable[Mapping[str, Any]], metrics: Sequence[str]
               ) -> tuple[list[str], np.ndarray, list[np.ndarray]]:
    """Originals (n, k) and their reference draws (per item (m_i, k)) from detection records.

    Items are keyed by (split, original_id); items without an original record or without reference
    draws are left out.
    """
    from zcp.probe.prompts import metric_value

    orig: dict[tuple[str, str], list[float]] = {}
    refs: dict[tuple[str, str], list[tuple[int, list[float]]]] = defaultdict(list)
    for r in records:
        key = (str(r["split"]), str(r["original_id"]))
        vals = [metric_value(dict(r), mt) for mt in metrics]
        if r.get("variant") == "original":
            orig[key] = vals
        elif r.get("variant") == "reference":
            refs[key].append((int(r["draw"]), vals))
    keys = sorted(k for k in orig if refs.get(k))
    X = np.array([orig[k] for k in keys], dtype=np.float64).reshape(len(keys), len(metrics))
    Y = [np.array([v for _, v in sorted(refs[k])], dtype=np.float64).reshape(-1, len(metrics)) for k in keys]
    return ["/".join(k) for k in keys], X, Y


def score_benchmark(cfg: Any, s: BaseModelSettings, datasets: Sequence[Any], skipped: Sequence[Mapping[str, Any]],
                    progress: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Probe every original and reference item once with the real probe machinery (resumable, batched).

    `datasets`, `skipped`: zcp.probe.detect.load_datasets(cfg.data). The records live in
    <records_root>/<data>__<model>__<hash of model content, data and probe config>, shared by every
    calibration run with the same model, data and probe settings.
    """
    from zcp.config import build_backend, model_name, to_dict
    from zcp.core.io import model_fingerprint
    from zcp.probe.detect import DetectSettings, collect_records, probe_config

    probe = probe_config(cfg.probe, cfg.model)
    probe.metrics = list(s.metrics)
    key = stable_hash(json.dumps({"model": to_dict(cfg.model), "weights": model_fingerprint(cfg.model.get("path")),
                                  "data": to_dict(cfg.data), "probe": repr(probe.__dict__)},
                                 sort_keys=True, default=str), 10)
    out = Path(s.records_root) / f"{cfg.data.get('name') or 'data'}__{model_name(cfg.model)}__{key}"
    backend = build_backend(cfg.model)
    settings = DetectSettings(chunk_size=s.chunk_size, progress=progress,
                              on_overflow=str(cfg.data.get("on_overflow") or "error"))
    overflow: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    records = collect_records(backend, datasets, probe, out, settings, overflow=overflow)
    secs = time.perf_counter() - t0
    return records, {"records_dir": str(out), "units": len(records), "scoring_seconds": secs,
                     "items": sum(len(ds.originals) for ds in datasets),
                     "items_without_reference": sum(x.get("reason") == "no reference row" for x in skipped),
                     "data_issues": len(skipped), "overflow_policy": settings.on_overflow,
                     "overflow_rows": sum(r.get("action") == "skipped row" for r in overflow),
                     "overflow_items": len({(r["split"], r["original_id"]) for r in overflow
                                            if r.get("action") == "skipped item"}),
                     "model": model_name(cfg.model), "probe_metrics": list(probe.metrics)}


def subset_study(X: np.ndarray, Y: Sequence[np.ndarray], metrics: Sequence[str], s: BaseModelSettings,
                 alphas: Sequence[float], seed: int, *, discrete_below: float, label: str = "base model",
                 progress: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rejection rates over random item subsets (seeded, without replacement), and the full-pool tests.

    The subsets share items, so their verdicts are dependent: the binomial CI is nominal. The full-pool
    rows say whether the whole benchmark shows a systematic original-vs-reference difference, which the
    subset false-positive rate then reflects.
    """
    n_pool = X.shape[0]
    size = min(s.subset_size, n_pool)
    rng = _cell_rng(seed, "subsets", label, size)
    picks = [np.sort(rng.choice(n_pool, size=size, replace=False)) for _ in range(s.subsets)]
    pv, attain = run_replicates([X[p] for p in picks], [[Y[i] for i in p] for p in picks], metrics, s.tests, s.B,
                                 alphas, seed, progress, desc=f"subsets of {size}")
    m_label = "/".join(str(v) for v in sorted({y.shape[0] for y in Y}))
    rows = []
    for mt in [*metrics, COMBINED]:
        score = float(X[:, metrics.index(mt)].mean()) if mt in metrics else None
        lim = bool(mt in attain and attain[mt][0].mean() < discrete_below)
        for t in s.tests:
            row = rate_row(pv[mt][t], alphas, part="c", regime=label, metric=mt, test=t, m=m_label, n=size,
                           accuracy=score, score_mean=score, discrete_limited=lim)
            if t == "permutation" and mt in attain:
                for ai, a in enumerate(alphas):
                    row[f"attainable@{a:g}"] = float(attain[mt][ai].mean())
            rows.append(row)
    full, _ = run_replicates([X], [list(Y)], metrics, s.tests, s.B, alphas, seed, False)
    full_rows = []
    for mt in [*metrics, COMBINED]:
        k = metrics.index(mt) if mt in metrics else None
        r: dict[str, Any] = {"metric": mt, "n": n_pool}
        if k is not None:
            r["s"] = float(X[:, k].mean())
            r["s_ref"] = float(np.mean([y[:, k].mean() for y in Y]))
        for t in s.tests:
            r[f"p_{t}"] = float(full[mt][t][0])
        full_rows.append(r)
    return rows, full_rows


# --------------------------------------------------------------------------------------------------
# reports


def _fmt_rate(row: Mapping[str, Any], a: float) -> str:
    return f"{row[f'rate@{a:g}']:.3f} [{row[f'lo@{a:g}']:.3f}, {row[f'hi@{a:g}']:.3f}]"


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def format_rows(rows: Sequence[Mapping[str, Any]], alphas: Sequence[float], title: str, *, effect: bool = False) -> str:
    """Markdown table: one row per (part, regime, metric, test, m, n, accuracy)."""
    a0 = alphas[0]
    head = ["part", "regime", "metric", "test", "m", "n", "accuracy", "mean score"]
    if effect:
        head.append("effect")
    head += [f"rate@{a0:g} [95% CI]"] + [f"rate@{a:g}" for a in alphas[1:]]
    if not effect:
        head += [f"attainable@{a0:g}", "flag"]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["part"], r["regime"], r["metric"], r["test"], str(r["m"]), str(r["n"]), _fmt(r.get("accuracy")),
                 _fmt(r.get("score_mean"))]
        if effect:
            cells.append(_fmt(r.get("effect"), 2))
        cells += [_fmt_rate(r, a0)] + [f"{r[f'rate@{a:g}']:.3f}" for a in alphas[1:]]
        if not effect:
            att = r.get(f"attainable@{a0:g}")
            cells += [_fmt(att) + (" (discrete-limited)" if r.get("discrete_limited") and att is not None else ""),
                      r.get("flag", "")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def max_type1(rows: Sequence[Mapping[str, Any]], alpha: float) -> list[dict[str, Any]]:
    """Per simulated regime, metric kind and test: the largest type-I estimate over the grid (its CI and
    cell), the pooled rate over all cells (with CI), the cells whose whole CI lies above alpha (about 2.5%
    of cells by chance alone when the test is exact), the cells flagged high / low, and for the exact
    binary test the expected rate (its mean attainable size, which the pooled rate should match)."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["part"] not in ("a", "a-joint"):
            continue
        kind = r["metric"] if r["metric"] == COMBINED else kind_of(str(r["metric"]))
        reg = r["regime"]
        groups[(str(reg), kind, str(r["test"]))].append(r)
    a = f"{alpha:g}"
    out = []
    for (reg, kind, test), rs in groups.items():
        worst = max(rs, key=lambda r: r[f"rate@{a}"])
        k = sum(round(r[f"rate@{a}"] * r["replicates"]) for r in rs)
        total = sum(r["replicates"] for r in rs)
        lo, hi = rate_ci(k, total)
        row = {"regime": reg, "kind": kind, "test": test, "cells": len(rs),
               "max_rate": worst[f"rate@{a}"], "lo": worst[f"lo@{a}"], "hi": worst[f"hi@{a}"],
               "at": f"m={worst['m']}, n={worst['n']}, acc={_fmt(worst.get('accuracy'), 2)}",
               "pooled": k / total, "pooled_lo": lo, "pooled_hi": hi,
               "ci_above": sum(r[f"lo@{a}"] > alpha for r in rs),
               "high": sum(r.get("flag") == "high" for r in rs), "low": sum(r.get("flag") == "low" for r in rs)}
        att = [(r[f"attainable@{a}"], r["replicates"]) for r in rs if f"attainable@{a}" in r]
        if att and len(att) == len(rs):
            row["expected"] = sum(x * w for x, w in att) / sum(w for _, w in att)
        out.append(row)
    return out


def pivot_type1(mt: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: tests x regimes, each cell the largest type-I over the grid with its CI."""
    cols = list(dict.fromkeys((r["regime"], r["kind"]) for r in mt))
    tests = list(dict.fromkeys(r["test"] for r in mt))
    by = {(r["regime"], r["kind"], r["test"]): r for r in mt}
    head = ["test", *[reg if reg != "joint" else f"joint: {kind}" for reg, kind in cols]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in tests:
        cells = [TEST_LABEL.get(t, t)]
        for reg, kind in cols:
            r = by.get((reg, kind, t))
            cells.append(f"{r['max_rate']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]" if r else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def attainable_matrix(rows: Sequence[Mapping[str, Any]], alpha: float) -> str:
    """Markdown: the exact binary test's attainable size per (m, n) x accuracy; * = discrete-limited."""
    cells = [r for r in rows if r["part"] == "a" and r["regime"] == "binary" and r["test"] == "permutation"]
    if not cells:
        return ""
    accs = sorted({r["accuracy"] for r in cells})
    lines = ["| m | n | " + " | ".join(f"acc {a:g}" for a in accs) + " |", "|" + "---|" * (len(accs) + 2)]
    for m in sorted({r["m"] for r in cells}):
        for n in sorted({r["n"] for r in cells}):
            by = {r["accuracy"]: r for r in cells if r["m"] == m and r["n"] == n}
            vals = []
            for a in accs:
                r = by.get(a)
                if r is None:
                    vals.append("–")
                    continue
                v = r.get(f"attainable@{alpha:g}", float("nan"))
                vals.append(f"{v:.3f}" + ("*" if r.get("discrete_limited") else ""))
            lines.append(f"| {m} | {n} | " + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


def rate_matrix(rows: Sequence[Mapping[str, Any]], part: str, alpha: float, tests: Sequence[str]) -> str:
    """Markdown: rejection rate (with CI) per (source, metric) x test for a real-data part."""
    rs = [r for r in rows if r["part"] == part]
    if not rs:
        return ""
    keys: list[tuple[str, str, Any]] = []
    for r in rs:
        k = (r["regime"], r["metric"], r["n"])
        if k not in keys:
            keys.append(k)
    tests = [t for t in tests if any(r["test"] == t for r in rs)]
    head = ["source", "metric", "m", "n", "score", *[TEST_LABEL.get(t, t) for t in tests]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for reg, mt, n in keys:
        by = {r["test"]: r for r in rs if (r["regime"], r["metric"], r["n"]) == (reg, mt, n)}
        first = next(iter(by.values()))
        cells = [reg, mt, str(first["m"]), str(n), _fmt(first.get("accuracy"))]
        for t in tests:
            r = by.get(t)
            cells.append(_fmt_rate(r, alpha) + (" ⚑" if r.get("flag") == "high" else "") if r else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def power_matrix(rows: Sequence[Mapping[str, Any]], alpha: float) -> str:
    """Markdown: power per (regime, m, n, accuracy, test) x effect."""
    rs = [r for r in rows if r["part"] == "power"]
    if not rs:
        return ""
    lines = []
    for reg in dict.fromkeys(r["regime"] for r in rs):
        sub = [r for r in rs if r["regime"] == reg]
        effects = sorted({r["effect"] for r in sub})
        head = ["regime", "m", "n", "accuracy", "test", *[f"δ={e:g}" for e in effects]]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        keys = list(dict.fromkeys((r["m"], r["n"], r["accuracy"], r["test"]) for r in sub))
        for m, n, acc, t in keys:
            by = {r["effect"]: r for r in sub if (r["m"], r["n"], r["accuracy"], r["test"]) == (m, n, acc, t)}
            vals = [f"{by[e][f'rate@{alpha:g}']:.3f}" if e in by else "–" for e in effects]
            lines.append(f"| {reg} | {m} | {n} | {acc:g} | {t} | " + " | ".join(vals) + " |")
        lines.append("")
    return "\n".join(lines)


def summary_markdown(rows: Sequence[Mapping[str, Any]], alphas: Sequence[float], info: Mapping[str, Any]) -> str:
    """The compact report for the README: worst type-I per test, discrete-limited cells, (b), (c), power."""
    a0 = alphas[0]
    out = [f"## ZCP test calibration (alpha = {a0:g}; Clopper-Pearson 95% CIs)", ""]
    mt = max_type1(rows, a0)
    if mt:
        out += [f"### Largest type-I error at alpha = {a0:g} over the simulated grid [95% CI]", "", pivot_type1(mt),
                "Detail: the cell of the largest rate; the pooled rate over all cells; cells whose CI lies wholly "
                f"above {a0:g} (~2.5% of cells by chance for an exact test); cells flagged high (> "
                f"{info['flags']['high']:g}) or low (< {info['flags']['low']:g}, not discrete-limited); for the "
                "exact binary test the expected rate = its mean attainable size. Bonferroni (combined) is "
                "conservative by design.", "",
                "| regime | kind | test | cells | max type-I [95% CI] | at | pooled [95% CI] | expected | "
                "CI above α | high | low |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in mt:
            out.append(f"| {r['regime']} | {r['kind']} | {TEST_LABEL.get(r['test'], r['test'])} | {r['cells']} | "
                       f"{r['max_rate']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}] | {r['at']} | "
                       f"{r['pooled']:.4f} [{r['pooled_lo']:.4f}, {r['pooled_hi']:.4f}] | "
                       f"{_fmt(r.get('expected'), 4)} | {r['ci_above']} | {r['high']} | {r['low']} |")
        out.append("")
    am = attainable_matrix(rows, a0)
    if am:
        out += [f"### Attainable size of the exact binary test at alpha = {a0:g} (mean over replicates; "
                f"* = discrete-limited, below {info.get('discrete_below', 0.03):g})", "", am]
    for part, title in (("b", "(b) Real-score nulls (pseudo-original = a random reference draw)"),
                        ("c", "(c) Base model on random benchmark subsets (real originals vs references)")):
        rm = rate_matrix(rows, part, a0, [*TESTS, "sign+bootstrap"])
        if rm:
            out += [f"### {title}: rejection rate at alpha = {a0:g}", "", rm]
            bm = info.get("base_model") or {}
            if part == "c" and bm:
                cfg_c = info.get("base_model_settings") or {}
                out += [f"Pool: {bm.get('pool_items')} items with reference draws ({bm.get('items_without_reference')} "
                        f"without any, left out; prompts beyond the model's context ({bm.get('overflow_policy')}): "
                        f"{bm.get('overflow_items')} items, {bm.get('overflow_rows')} reference rows); "
                        f"{bm.get('units')} units probed once ({', '.join(bm.get('probe_metrics', []))}) "
                        f"in {bm.get('scoring_seconds', 0):.0f} s by {bm.get('model')}; {cfg_c.get('subsets')} random "
                        f"subsets of {cfg_c.get('subset_size')} items, B = {cfg_c.get('B')}. The subsets share items, "
                        "so their verdicts are dependent and the CI is nominal.", ""]
            if part == "b":
                out += ["The pseudo-original is a uniform pick among an item's reference draws, so H0 holds by "
                        "construction; m = reference draws left per item.", ""]
    full = info.get("base_model", {}).get("full_pool")
    if full:
        tests = [k[2:] for k in full[0] if k.startswith("p_")]
        out += ["### (c) Whole pool, one test per metric (p-values)", "",
                "| metric | n | S | S_ref | " + " | ".join(tests) + " |", "|" + "---|" * (4 + len(tests))]
        for r in full:
            out.append(f"| {r['metric']} | {r['n']} | {_fmt(r.get('s'))} | {_fmt(r.get('s_ref'))} | "
                       + " | ".join(f"{r['p_' + t]:.3g}" for t in tests) + " |")
        out.append("")
    pm = power_matrix(rows, a0)
    if pm:
        out += [f"### Power at alpha = {a0:g}", "", pm]
    rt = info.get("runtime_seconds")
    if rt:
        out += ["Runtime (s): " + ", ".join(f"{k} {v:.0f}" for k, v in rt.items()), ""]
    return "\n".join(out)


def plot_type1(rows: Sequence[Mapping[str, Any]], path: str | Path, alpha: float, ns: Sequence[int]) -> Path | None:
    """Type-I error versus accuracy: one row of panels per regime (and the joint combined verdict), one
    column per m; one colour per test, one line style per n (named in the panel title); the exact
    binary test's attainable size in dotted grey. The band is [0.03, 0.07]; log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    rs = [r for r in rows if r["part"] == "a" or (r["part"] == "a-joint" and r["metric"] == COMBINED)]
    if not rs:
        return None

    def reg_of(r: Mapping[str, Any]) -> str:
        return r["regime"] if r["part"] == "a" else "joint: combined"

    regs = list(dict.fromkeys(reg_of(r) for r in rs))
    ms = sorted({r["m"] for r in rs})
    tests = list(dict.fromkeys(r["test"] for r in rs))
    colours = dict(zip(tests, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    styles = ["-", "--", "-.", ":"]
    fig, axes = plt.subplots(len(regs), len(ms), figsize=(3.6 * len(ms), 2.8 * len(regs)), squeeze=False,
                             sharex=True, sharey=True)
    floor = 2e-3
    for i, reg in enumerate(regs):
        for j, m in enumerate(ms):
            ax = axes[i][j]
            sub = [r for r in rs if reg_of(r) == reg and r["m"] == m]
            avail = sorted({r["n"] for r in sub})
            use_n = [n for n in ns if n in avail] or ([avail[0], avail[-1]] if len(avail) > 1 else avail)
            for k, n in enumerate(use_n):
                for t in tests:
                    pts = sorted((r["accuracy"], r[f"rate@{alpha:g}"]) for r in sub if r["test"] == t and r["n"] == n)
                    if pts:
                        ax.plot([p[0] for p in pts], [max(p[1], floor) for p in pts], styles[k % 4], marker="o",
                                ms=3, color=colours[t])
                    att = sorted((r["accuracy"], r[f"attainable@{alpha:g}"]) for r in sub
                                 if r["test"] == t and r["n"] == n and f"attainable@{alpha:g}" in r)
                    if att:
                        ax.plot([p[0] for p in att], [max(p[1], floor) for p in att], styles[k % 4], color="grey",
                                lw=0.8, alpha=0.7)
            ax.axhspan(0.03, 0.07, color="green", alpha=0.08)
            ax.axhline(alpha, color="black", lw=0.8)
            ax.set_yscale("log")
            ax.set_ylim(floor * 0.9, 1.05)
            named = ", ".join(f"n={n} {['solid', 'dashed', 'dash-dot', 'dotted'][k % 4]}" for k, n in enumerate(use_n))
            ax.set_title(f"{reg}, m={m}\n({named})", fontsize=8)
            if i == len(regs) - 1:
                ax.set_xlabel("mean accuracy / score")
            if j == 0:
                ax.set_ylabel(f"type-I at α={alpha:g}")
    handles = [Line2D([], [], color=colours[t], marker="o", ms=3, label=TEST_LABEL.get(t, t)) for t in tests]
    handles.append(Line2D([], [], color="grey", lw=0.8, label="attainable size of the exact binary test"))
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=7)
    height = 2.8 * len(regs)  # fixed margins (tight_layout costs seconds on 12 log-scale panels)
    fig.subplots_adjust(left=0.08, right=0.98, top=1 - 0.45 / height, hspace=0.45, wspace=0.08,
                        bottom=(0.55 + 0.14 * math.ceil(len(handles) / 3)) / height)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_power(rows: Sequence[Mapping[str, Any]], path: str | Path, alpha: float) -> Path | None:
    """Power versus effect size: one panel per (regime, m, accuracy); one colour per test, style per n."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rs = [r for r in rows if r["part"] == "power"]
    if not rs:
        return None
    regs = list(dict.fromkeys(r["regime"] for r in rs))
    cols = list(dict.fromkeys((r["m"], r["accuracy"]) for r in rs))
    tests = list(dict.fromkeys(r["test"] for r in rs))
    ns = sorted({r["n"] for r in rs})
    colours = dict(zip(tests, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    styles = ["-", "--", "-.", ":"]
    fig, axes = plt.subplots(len(regs), len(cols), figsize=(3.4 * len(cols), 2.7 * len(regs)), squeeze=False,
                             sharey=True)
    for i, reg in enumerate(regs):
        for j, (m, acc) in enumerate(cols):
            ax = axes[i][j]
            for k, n in enumerate(ns):
                for t in tests:
                    pts = sorted((r["effect"], r[f"rate@{alpha:g}"]) for r in rs
                                 if r["regime"] == reg and r["m"] == m and r["accuracy"] == acc and r["n"] == n
                                 and r["test"] == t)
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], styles[k % 4], marker="o", ms=3,
                                color=colours[t], label=f"{t}, n={n}")
            ax.axhline(alpha, color="black", lw=0.8)
            ax.set_ylim(-0.02, 1.02)
            ax.set_title(f"{reg}, m={m}, acc={acc:g}", fontsize=9)
            ax.set_xlabel("effect δ (probability)" if reg == "binary" else "effect δ (logit)")
            if j == 0:
                ax.set_ylabel(f"power at α={alpha:g}")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colours[t], marker="o", ms=3, label=TEST_LABEL.get(t, t)) for t in tests]
    handles += [Line2D([], [], color="black", ls=styles[k % 4], label=f"n={n}") for k, n in enumerate(ns)]
    fig.legend(handles=handles, loc="lower center", ncol=min(3, len(handles)), fontsize=7)
    height = 2.7 * len(regs)
    fig.subplots_adjust(left=0.1, right=0.98, top=1 - 0.35 / height, hspace=0.6, wspace=0.08,
                        bottom=(0.75 + 0.14 * math.ceil(len(handles) / 3)) / height)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------------------
# the entry point's library function


def _settings(cls: Callable[..., Any], d: Mapping[str, Any] | None) -> Any:
    d = dict(d or {})
    known = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    unknown = set(d) - known - {"enabled"}
    if unknown:
        raise ValueError(f"unknown {cls.__name__} key(s) {sorted(unknown)}; known: {sorted(known)}")
    return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in known})


def run_calibration(cfg: Any) -> dict[str, Any]:
    """Entry point of evaluate/run_calibration.py: run the configured parts, write the reports, log to W&B.

    Writes table.md (every row), summary.md (the compact tables), summary.json (config, rows, runtimes,
    skipped parts with the reason), type1.png and power.png to the run directory.
    """
    from zcp.config import model_name, run_dir, save_config, to_dict
    from zcp.core.io import model_fingerprint, seed_everything
    from zcp.core.tracking import Tracker

    c = to_dict(cfg)
    seed = int(c.get("seed", 0))
    seed_everything(seed)
    parts = list(c.get("parts") or [])
    known_parts = {"simulation", "joint", "power", "real_null", "base_model", "real_originals"}
    if set(parts) - known_parts:
        raise ValueError(f"unknown part(s) {sorted(set(parts) - known_parts)}; use some of {sorted(known_parts)}")
    alphas = [float(a) for a in c.get("alphas", [0.05, 0.01])]
    flags = c.get("flags") or {}
    high, low = float(flags.get("high", 0.07)), float(flags.get("low", 0.03))
    discrete_below = float(flags.get("discrete_below", low))
    progress = bool((c.get("run") or {}).get("progress", True))
    spec = _settings(SimSpec, c.get("spec"))
    extra = None
    if "base_model" in parts and cfg.model.get("path"):
        extra = {"model": model_fingerprint(cfg.model.get("path"))}
    out = run_dir(cfg, "calibration", str(c.get("name") or "calibration"), extra=extra)
    save_config(cfg, out)
    bench = None
    if "base_model" in parts and (c.get("data") or {}).get("reference_path"):
        from zcp.probe.detect import load_datasets

        bench = load_datasets(cfg.data)  # before the long parts: a data mistake fails in seconds
    rows: list[dict[str, Any]] = []
    info: dict[str, Any] = {"output_dir": str(out), "alphas": alphas, "discrete_below": discrete_below,
                            "flags": {"high": high, "low": low}, "runtime_seconds": {}, "skipped": {}}
    t_all = time.perf_counter()
    with Tracker(c.get("logger"), run_config=c, run_dir=str(out), job_type="calibration") as tracker:
        if "simulation" in parts:
            t0 = time.perf_counter()
            g = _settings(GridSettings, c.get("simulation"))
            r, chk = null_grid(g, spec, alphas, seed, discrete_below=discrete_below, progress=progress)
            rows += r
            info["simulation"] = {**chk, "B": g.B, "replicates": {"binary": g.replicates,
                                  "continuous": g.replicates_continuous, f"continuous n>={g.large_n}": g.replicates_large}}
            info["runtime_seconds"]["simulation"] = time.perf_counter() - t0
        if "joint" in parts:
            t0 = time.perf_counter()
            j = _settings(JointSettings, c.get("joint"))
            rows += joint_grid(j, spec, alphas, seed, discrete_below=discrete_below, progress=progress)
            info["runtime_seconds"]["joint"] = time.perf_counter() - t0
        if "power" in parts:
            t0 = time.perf_counter()
            pw = _settings(PowerSettings, c.get("power"))
            rows += power_grid(pw, spec, alphas, seed, progress=progress)
            info["runtime_seconds"]["power"] = time.perf_counter() - t0
        if "real_null" in parts:
            t0 = time.perf_counter()
            s = _settings(RealNullSettings, c.get("real_null"))
            r, rinfo = real_null_study(s, alphas, seed, discrete_below=discrete_below, progress=progress)
            rows += r
            info["real_null"] = rinfo
            if "skipped" in rinfo:
                info["skipped"]["real_null"] = rinfo["skipped"]
                log.warning("real_null skipped: %s", rinfo["skipped"])
            info["runtime_seconds"]["real_null"] = time.perf_counter() - t0
        if "base_model" in parts:
            t0 = time.perf_counter()
            s = _settings(BaseModelSettings, c.get("base_model"))
            if bench is None:
                why = ("data.reference_path is not set: build the reference set with "
                       "`python evaluate/run_build_data.py data=gsm8k reference.m=3` and pass "
                       "data.reference_path=<output_dir>/reference.jsonl")
                info["skipped"]["base_model"] = why
                log.warning("base_model skipped: %s", why)
            else:
                records, binfo = score_benchmark(cfg, s, *bench, progress=progress)
                keys, X, Y = item_table(records, list(s.metrics))
                r, full = subset_study(X, Y, list(s.metrics), s, alphas, seed, discrete_below=discrete_below,
                                       label=f"{model_name(cfg.model)} on {c['data'].get('name')}", progress=progress)
                rows += r
                info["base_model"] = {**binfo, "pool_items": len(keys), "full_pool": full}
                info["base_model_settings"] = {"subsets": s.subsets, "subset_size": s.subset_size, "B": s.B}
            info["runtime_seconds"]["base_model"] = time.perf_counter() - t0
        if "real_originals" in parts:
            from zcp.validate.real_originals import RealOriginalsSettings, average_rates, real_originals_study

            t0 = time.perf_counter()
            s = _settings(RealOriginalsSettings, c.get("real_originals"))
            r, rinfo = real_originals_study(s, cfg.probe, c.get("model") or {}, seed, progress=progress)
            rows += r
            info["real_originals"] = {**rinfo, "average": average_rates(r), "average_did": average_rates(r, "did"),
                                      "settings": {"m": s.m, "sizes": list(s.sizes), "subsets": s.subsets,
                                                   "null_pools": s.null_pools, "B": s.B, "alpha": s.alpha}}
            for k, v in rinfo.get("skipped", {}).items():
                info["skipped"][f"real_originals/{k}"] = v
            info["runtime_seconds"]["real_originals"] = time.perf_counter() - t0
        info["runtime_seconds"]["total"] = time.perf_counter() - t_all
        for row in rows:
            if row["part"] not in ("power", "d"):
                flag_row(row, alphas[0], high, low)
        files = write_calibration_reports(rows, alphas, info, c, out)
        tracker.table("calibration", _table_rows(rows))
        tracker.table("max_type1", max_type1(rows, alphas[0]))
        tracker.summary({f"max_type1/{r['regime']}/{r['kind']}/{r['test']}": r["max_rate"]
                         for r in max_type1(rows, alphas[0])})
        for key in ("type1", "power"):
            if key in files:
                tracker.image(key, str(files[key]))
        tracker.artifact("calibration", "zcp-calibration",
                         [str(p) for k, p in files.items() if k in ("summary_md", "table", "summary_json")])
    print(Path(files["summary_md"]).read_text())
    print(f"wrote {out}")
    return {"rows": rows, "info": info, "files": {k: str(v) for k, v in files.items()}}


def _table_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows with one column set and one type per column (W&B tables refuse mixed types): labels as text,
    rates as floats (NaN where a row has none)."""
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    text = {"part", "regime", "metric", "test", "m", "n", "flag", "model", "pool", "kind"}
    out = []
    for r in rows:
        row: dict[str, Any] = {}
        for c in cols:
            v = r.get(c)
            if c in text:
                row[c] = "" if v is None else str(v)
            elif isinstance(v, bool) or c == "discrete_limited":
                row[c] = bool(v)
            else:
                row[c] = float("nan") if v is None else float(v)
        out.append(row)
    return out


def write_calibration_reports(rows: Sequence[Mapping[str, Any]], alphas: Sequence[float], info: Mapping[str, Any],
                              config: Mapping[str, Any], out: str | Path) -> dict[str, Path]:
    """table.md, summary.md, summary.json and the plots into `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    a0 = alphas[0]
    sections = [("a", "(a) Simulated nulls"), ("a-joint", "(a) Joint metrics and the combined verdict"),
                ("b", "(b) Real-score nulls"), ("c", "(c) Base model on random benchmark subsets")]
    parts = []
    for part, title in sections:
        rs = [r for r in rows if r["part"] == part and part != "d"]
        if rs:
            parts.append(format_rows(rs, alphas, title))
    prs = [r for r in rows if r["part"] == "power"]
    if prs:
        parts.append(format_rows(prs, alphas, "Power", effect=True))
    notes = [f"Rates: share of replicates with p <= alpha; [95% Clopper-Pearson CI]. flag: high = rate@{a0:g} > "
             f"{info['flags']['high']:g}; low = below {info['flags']['low']:g} in a cell that is not discrete-limited "
             f"(the exact binary test's mean attainable size >= {info['discrete_below']:g}). attainable = largest null "
             "tail probability <= alpha of the exact test, averaged over replicates (its actual size)."]
    files: dict[str, Path] = {}
    files["table"] = out / "table.md"
    files["table"].write_text("# ZCP test calibration: every cell\n\n" + "\n".join(notes) + "\n\n" + "\n".join(parts))
    files["summary_md"] = out / "summary.md"
    head = ""
    d_rows = [r for r in rows if r["part"] == "d"]
    if d_rows:  # the headline: the false-positive rate a user meets with real originals
        from zcp.validate.real_originals import markdown as real_originals_markdown

        head = real_originals_markdown(d_rows, info.get("real_originals") or {}, a0) + "\n"
        (out / "real_originals.md").write_text(head)
        files["real_originals"] = out / "real_originals.md"
    files["summary_md"].write_text(head + summary_markdown([r for r in rows if r["part"] != "d"], alphas, info))
    files["summary_json"] = out / "summary.json"
    files["summary_json"].write_text(json.dumps({"config": config, "info": info, "max_type1": max_type1(rows, a0),
                                                 "rows": list(rows)}, indent=1, default=str))
    sim_ns = [int(n) for n in ((config.get("plots") or {}).get("n") or [10, 100])]
    p = plot_type1(rows, out / "type1.png", a0, sim_ns)
    if p is not None:
        files["type1"] = p
    p = plot_power(rows, out / "power.png", a0)
    if p is not None:
        files["power"] = p
    return files
