"""The paired tests of the calibration study, vectorised over replicates, and the rows of its tables.

The low module of zcp.validate.calibration (every part uses it): the within-item permutation test (exact for
binary scores, Monte Carlo otherwise), the one-sided paired t-test and Wilcoxon signed-rank test on
d_i = X_i - mean_j Y_ij, and the old tests (exact sign test on d_i; paired bootstrap of the mean), each over the
rows of an (R, n) or (R, n, m) array at once (the library's per-call tests would take hours over the grid);
Clopper-Pearson rejection rates, table rows and their flags, and the per-cell random generator. Why each
shortcut changes no decision: see the package docstring.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import stats as sps

from zcp.core.io import stable_hash
from zcp.probe.metrics import BUILTIN_METRICS, get_metric, is_metric

TESTS = ("permutation", "ttest", "wilcoxon", "sign", "bootstrap")
TEST_LABEL = {
    "permutation": "permutation (exact / MC)",
    "ttest": "paired t (one-sided)",
    "wilcoxon": "Wilcoxon signed-rank",
    "sign": "sign test on averaged draws (old)",
    "bootstrap": "paired bootstrap (old)",
}
REGIMES = ("binary", "symmetric", "skewed")
JOINT_METRICS = ("acc", "con", "p_first", "p_all")  # what simulated.simulate_joint draws: its law is of these four
BINARY_METRICS = tuple(m for m in BUILTIN_METRICS if get_metric(m).kind == "binary")  # acc, con (kind_of reads the table)
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
    """`binary` for the binary regime and a metric the metric table calls binary (acc, con), else `continuous`."""
    if metric_or_regime == "binary":
        return "binary"
    return get_metric(metric_or_regime).kind if is_metric(metric_or_regime) else "continuous"


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


def cell_rng(seed: int, *key: Any) -> np.random.Generator:
    """A generator per grid cell: results do not depend on which other cells run, or in what order."""
    h = int(stable_hash(json.dumps([str(k) for k in key]), 15), 16)
    return np.random.default_rng(np.random.SeedSequence([int(seed), h]))


def progress_bar(total: int, desc: str, enabled: bool) -> Any:
    """A tqdm bar over `total` grid cells, or None when progress is off (the callers update it if present)."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="cell")
