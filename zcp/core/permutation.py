"""The within-item permutation test and the Sellke calibration to a confidence: pure statistics over scores.

The probe's statistics (zcp.probe.stats adds the metric table's kinds), the reference shift report
(zcp.benchmarks.references.shift) and the detectors read the same test from here, the lowest layer that owns it.

Data: item i has one original score X_i and m_i >= 1 reference scores Y_i1..Y_im (its isomorphic
perturbations). H0: the original is exchangeable with its perturbations (the model treats it like any
other member of its family); H1 (one-sided): the original scores higher.
Statistic: T = sum_i (X_i - mean_j Y_ij).

- Within-item permutation test (default, every metric): under H0 the label "original" is uniform over
  the m_i + 1 versions of item i, independently across items.
  * Binary scores (kind "binary"; the probe's metric table zcp.probe.metrics: acc, con): exact. Item i with
    k_i ones among its versions contributes 1 - (k_i - 1)/m_i with probability k_i/(m_i + 1) and -k_i/m_i
    otherwise; scaled by L = lcm(m_i) these are integers, and the null law of T is the convolution of the
    two-point laws (a sum of binomials per (m_i, k_i) class), so p = P(T* >= T_obs) is exact. At m = 1 it
    is McNemar's exact test.
  * Continuous metrics (p_first, p_all, and any score that is not a registered binary metric): Monte Carlo
    over B relabellings, p = (1 + #{T* >= T_obs})/(B + 1), never 0 (valid for any B); exact enumeration
    of all prod_i (m_i + 1) relabellings when that is <= B.
  With k_i original-side versions per item (k paraphrases tested against m references) the same test
  labels a uniformly chosen k_i-subset of the k_i + m_i versions "original" (hypergeometric counts for
  binary metrics), and T uses the per-item mean of each side.
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
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

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


# ---------------------------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class Versions:
    """Per-item scores, NaN-padded: a[i, :k_i] original-side versions, r[i, :m_i] reference draws."""

    a: np.ndarray
    r: np.ndarray
    k: np.ndarray
    m: np.ndarray

    @property
    def n(self) -> int:
        return int(self.k.size)

    def a_mean(self) -> np.ndarray:
        return np.nansum(self.a, axis=1) / self.k

    def r_mean(self) -> np.ndarray:
        return np.nansum(self.r, axis=1) / self.m

    def item(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.a[i, : self.k[i]], self.r[i, : self.m[i]]


def _padded(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """(matrix, counts) from an n-vector (one per item), an n x k array, or n sequences (NaN-padded)."""
    if isinstance(values, np.ndarray) and values.dtype != object:
        arr = values.astype(np.float64)
        arr = arr.reshape(-1, 1) if arr.ndim <= 1 else arr.reshape(arr.shape[0], -1)
        return arr, np.full(arr.shape[0], arr.shape[1], dtype=np.int64)
    rows = [np.atleast_1d(np.asarray(row, dtype=np.float64)).reshape(-1) for row in values]
    counts = np.array([row.size for row in rows], dtype=np.int64)
    if counts.size and (counts == counts[0]).all():
        return (np.stack(rows) if counts[0] else np.zeros((len(rows), 0))), counts
    mat = np.full((len(rows), int(counts.max()) if rows else 0), np.nan)
    for i, row in enumerate(rows):
        mat[i, : row.size] = row
    return mat, counts


def item_versions(original: Any, reference: Any, *, metric: str = "",
                  ids: Sequence[str] | None = None) -> Versions:
    """Per-item original-side scores and reference draws, validated.

    `original`: one score per item (n-vector), or k_i scores per item (n x k array or n sequences, e.g.
    k paraphrases); `reference`: m_i draws per item (n x m array, n-vector for m = 1, or n sequences).
    Raises ValueError on a length mismatch, an item without scores, or NaN/inf (naming the items).
    """
    a, k = _padded(original)
    r, m = _padded(reference)
    if r.shape[0] != a.shape[0]:
        raise ValueError(f"{metric}: {a.shape[0]} items but {r.shape[0]} reference rows (item-paired)")
    name = (lambda i: str(ids[i])) if ids is not None else (lambda i: f"#{i}")

    def listed(idx: np.ndarray) -> str:
        return ", ".join(name(int(i)) for i in idx[:10]) + (" ..." if idx.size > 10 else "")

    empty = np.flatnonzero((k < 1) | (m < 1))
    if empty.size:
        raise ValueError(f"{metric}: item(s) without original or reference scores: {listed(empty)}")
    in_a = np.arange(a.shape[1])[None, :] < k[:, None]
    in_r = np.arange(r.shape[1])[None, :] < m[:, None]
    bad = np.flatnonzero((~np.isfinite(a) & in_a).any(axis=1) | (~np.isfinite(r) & in_r).any(axis=1))
    if bad.size:
        raise ValueError(f"{metric}: NaN or infinite scores for item(s) {listed(bad)}")
    return Versions(a=a, r=r, k=k, m=m)


def _check_binary(v: Versions, metric: str) -> None:
    ok = (np.isin(v.a, (0.0, 1.0)) | np.isnan(v.a)).all() and (np.isin(v.r, (0.0, 1.0)) | np.isnan(v.r)).all()
    if not ok:
        raise ValueError(f"{metric}: binary scores must be 0 or 1 per version (do not average draws before testing)")


# ---------------------------------------------------------------------------------------------- binary
@dataclass(frozen=True)
class BinaryNull:
    """Exact null law of the binary permutation statistic, on the integer lattice of T * scale."""

    offset: int  # smallest attainable value of T * scale
    step: int  # lattice spacing of T * scale
    pmf: np.ndarray  # pmf[j] = P(T * scale = offset + j * step)
    t_obs: int  # observed T * scale
    scale: int  # lcm of k_i * m_i over the informative items

    def tail(self, t: int) -> float:
        """P(T* * scale >= t), summed with `math.fsum` (correctly rounded: the same bits on every CPU)."""
        j = max(0, -(-(t - self.offset) // self.step))
        return float(min(1.0, max(0.0, math.fsum(self.pmf[j:].tolist())))) if j < self.pmf.size else 0.0

    @property
    def p_value(self) -> float:
        return self.tail(self.t_obs)

    def attainable_size(self, alpha: float) -> float:
        """The largest null tail probability <= alpha: the best size this exact test can reach here."""
        tails = np.cumsum(self.pmf[::-1])[::-1]
        ok = tails[tails <= alpha + 1e-12]
        return float(ok.max()) if ok.size else 0.0


def _convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The convolution of two pmfs, with the same bits on every machine.

    `out[t]` is the sum of `b[i] * a[t - i]` over the nonzero `b[i]` in increasing `i`, added one shifted row
    at a time: elementwise products and sums only, each rounded by IEEE rules whatever SIMD width runs them.
    `np.convolve` goes through the BLAS dot, whose kernel (and so its summation order and last bits) depends
    on the CPU (OpenBLAS picks Haswell, SkylakeX, ... at run time), so an exact test's p-value differed between
    machines; an FFT's round-off is absolute, not relative, so it floored far-out p-values near 1e-15 (the exact
    tail of a 10,000-item benchmark can be below 1e-200). Zeros of `b` (every other entry of
    a strided class, the underflowed tails of a large binomial) are skipped, and each row only covers `a`'s
    nonzero span: adding exact zeros changes no bit, so this is the full sum at a fraction of its cost.
    """
    if a.size < b.size:
        a, b = b, a
    out = np.zeros(a.size + b.size - 1)
    live = np.flatnonzero(a)
    if live.size == 0:
        return out
    lo, hi = int(live[0]), int(live[-1]) + 1
    row = a[lo:hi]
    for i in np.flatnonzero(b).tolist():
        out[i + lo:i + hi] += b[i] * row
    return out


def _power(pmf: np.ndarray, c: int) -> np.ndarray:
    """The c-fold convolution of a pmf (repeated squaring)."""
    out, base = np.ones(1), pmf
    while c:
        if c & 1:
            out = _convolve(out, base)
        c >>= 1
        if c:
            base = _convolve(base, base)
    return out


def binary_null_law(original: Any, reference: Any) -> BinaryNull:
    """Exact within-item permutation null law of T for 0/1 scores.

    Item i has k_i original-side and m_i reference versions, K_i ones among them; under H0 the number of
    ones labelled original is hypergeometric (k_i draws from k_i + m_i versions holding K_i ones), and the
    item's term j/k - (K - j)/m, times k m, is the integer j (k + m) - K k. The law of T is the convolution
    of these (a binomial per class when k = 1).
    """
    v = item_versions(original, reference, metric="binary")
    _check_binary(v, "binary")
    ones_a = np.nansum(v.a, axis=1).astype(np.int64)
    big = ones_a + np.nansum(v.r, axis=1).astype(np.int64)
    live = (big > 0) & (big < v.k + v.m)
    if not live.any():
        return BinaryNull(offset=0, step=1, pmf=np.ones(1), t_obs=0, scale=1)
    kk, mm, bb, jj = v.k[live], v.m[live], big[live], ones_a[live]
    keys, counts = np.unique(np.stack([kk, mm, bb], axis=1), axis=0, return_counts=True)
    classes = {tuple(int(x) for x in key): int(c) for key, c in zip(keys, counts, strict=True)}
    scale = math.lcm(*{k * m for k, m, _ in classes})
    jumps = {(k, m): (scale // (k * m)) * (k + m) for k, m, _ in classes}
    step = math.gcd(*jumps.values())

    def term(k: int, m: int, big_k: int, j: int) -> int:  # item term of T, times `scale`
        return (scale // (k * m)) * (j * (k + m) - big_k * k)

    unit = scale // (kk * mm)
    t_obs = int(np.sum(unit * (jj * (kk + mm) - bb * kk)))
    pmf, offset = np.ones(1), 0
    for (k, m, big_k), count in sorted(classes.items()):
        j_lo, j_hi = max(0, big_k - m), min(k, big_k)
        stride = jumps[(k, m)] // step
        if k == 1:  # count Bernoulli(K/(m+1)) terms: a binomial
            single = sps.binom.pmf(np.arange(count + 1), count, big_k / (m + 1))
            spread = np.zeros(count * stride + 1)
            spread[::stride] = single
        else:
            hyp = sps.hypergeom.pmf(np.arange(j_lo, j_hi + 1), k + m, big_k, k)
            one = np.zeros((j_hi - j_lo) * stride + 1)
            one[::stride] = hyp
            spread = _power(one, count)
        offset += count * term(k, m, big_k, j_lo)
        pmf = _convolve(pmf, spread)
    return BinaryNull(offset=offset, step=step, pmf=pmf, t_obs=t_obs, scale=scale)


# ---------------------------------------------------------------------------------------------- continuous
MAX_OPTIONS = 200_000  # relabellings enumerated per item (C(k + m, k)); beyond this the input is refused
# Monte Carlo relabellings are drawn in blocks on up to MC_THREADS threads once n x B reaches MC_THREADED_DRAWS
# (a detection's statistics run after its forward passes, when the cores are free)
MC_THREADS = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))
MC_THREADED_DRAWS = 1 << 22


def _options(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """All values of an item's term of T over its C(k+m, k) labellings; index 0 is the observed one."""
    from itertools import combinations

    v = np.concatenate([x, y])
    k, m = x.size, y.size
    total = v.sum()
    if k == 1:
        sums = v
    else:
        n_opt = math.comb(k + m, k)
        if n_opt > MAX_OPTIONS:
            raise ValueError(f"{k} original-side and {m} reference versions give {n_opt} labellings per item; "
                             f"at most {MAX_OPTIONS} are supported")
        sums = v[np.array(list(combinations(range(k + m), k)))].sum(axis=1)
    return (1.0 / k + 1.0 / m) * sums - total / m


def _option_matrix(v: Versions) -> tuple[np.ndarray, np.ndarray]:
    """Row i: every value of item i's term over its labellings (index 0 observed), NaN-padded; and counts."""
    if (v.k == 1).all():  # one original per item: m + 1 labellings, vectorised
        full = np.concatenate([v.a, v.r], axis=1)
        total = np.nansum(full, axis=1)
        return (1.0 + 1.0 / v.m)[:, None] * full - (total / v.m)[:, None], v.m + 1
    opts = [_options(*v.item(i)) for i in range(v.n)]
    sizes = np.array([o.size for o in opts], dtype=np.int64)
    mat = np.full((v.n, int(sizes.max())), np.nan)
    for i, o in enumerate(opts):
        mat[i, : o.size] = o
    return mat, sizes


def permutation_pvalue_mc(original: Any, reference: Any, *, B: int = 10_000, seed: int = 0,
                          chunk: int = 1 << 18) -> tuple[float, int, int, bool]:
    """Within-item permutation p for continuous scores: (p, exceed, n_relabellings, exact).

    Exact enumeration when prod_i C(k_i + m_i, k_i) <= B (p = #{T* >= T_obs} / N, the identity included);
    otherwise B random relabellings and p = (1 + exceed) / (B + 1), valid for any B.

    The Monte Carlo draws relabelling b's pick for item i as floor(u_bi * size_i) from one stream of uniforms
    u (`numpy.random.default_rng(seed)`, row by row) and sums the picked terms of each row in item order, so
    the result depends on the seed alone, not on `chunk` (the relabellings of a block, held in memory at once:
    small enough to stay in cache) nor on how many threads count the blocks (`MC_THREADS`; a block's
    uniforms come from the stream advanced to its first draw). The picked terms are gathered with a flat
    `take` (when every item has two labellings, the one-original one-reference case, the pick is u >= 1/2,
    which is floor(2u)): the same values in the same order as indexing the option matrix, so the same sums and
    the same count, about twice as fast on one thread.
    """
    if B < 1:
        raise ValueError(f"B must be >= 1 Monte Carlo relabellings, got {B}")
    v = item_versions(original, reference)
    mat, sizes = _option_matrix(v)
    # items whose labellings all give the same term add a constant: they cannot move T
    spread = np.nanmax(mat, axis=1) > np.nanmin(mat, axis=1)
    mat, sizes = mat[spread], sizes[spread]
    if mat.shape[0] == 0:
        return 1.0, 0, 1, True
    t_obs = float(mat[:, 0].sum())
    tol = 1e-10 * float(np.nanmax(np.abs(mat), axis=1).sum())
    n = mat.shape[0]
    n_total = math.prod(int(s) for s in sizes) if n < 64 else None
    if n_total is not None and n_total <= B:
        sums = np.zeros(1)
        for row, size in zip(mat, sizes, strict=True):
            sums = (sums[:, None] + row[None, :size]).ravel()
        exceed = int(np.count_nonzero(sums >= t_obs - tol))
        return exceed / n_total, exceed, n_total, True
    mat = np.nan_to_num(mat, nan=0.0)
    rows = max(1, chunk // n)
    bound = t_obs - tol
    two = bool((sizes == 2).all())
    flat = np.ascontiguousarray(mat).ravel()
    base = np.arange(n, dtype=np.int64) * mat.shape[1]  # row starts in `flat`
    width = sizes.astype(np.float64)  # u * sizes multiplies in float64 either way
    stream = np.random.default_rng(seed)

    def count(u: np.ndarray) -> int:
        """#{T* >= T_obs} over the relabellings whose uniforms are the rows of `u`."""
        if two:  # floor(2u) is 1 exactly when u >= 1/2 (2u is exact)
            pick = (u >= 0.5).view(np.uint8).astype(np.int64)
        else:
            u *= width
            pick = u.astype(np.int64)
        pick += base
        return int(np.count_nonzero(flat.take(pick).sum(axis=1) >= bound))

    def block(start: int, r: int) -> int:
        """Relabellings start .. start + r - 1: the stream's draws from start * n on (one 64-bit draw per
        uniform), from a copy of the generator advanced to there."""
        bits = type(stream.bit_generator)()
        bits.state = stream.bit_generator.state
        bits.advance(start * n)
        return count(np.random.Generator(bits).random((r, n)))

    blocks = [(start, min(rows, B - start)) for start in range(0, B, rows)]
    workers = min(MC_THREADS, len(blocks)) if n * B >= MC_THREADED_DRAWS else 1
    if workers > 1 and hasattr(stream.bit_generator, "advance"):
        # numpy releases the GIL in these loops: the blocks are counted in parallel, the sum is the same
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            exceed = sum(pool.map(lambda b: block(*b), blocks))
    else:
        exceed = sum(count(stream.random((r, n))) for _, r in blocks)
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
    k: int = 1  # original-side versions per item (e.g. k paraphrases; the largest)
    discordant: tuple[int, int] | None = None  # m = 1, binary: (original 1 & ref 0, original 0 & ref 1)
    exceed: int | None = None  # Monte Carlo: #{T* >= T_obs}
    n_relabellings: int | None = None  # Monte Carlo / enumeration size
    exact: bool = True

    def to_dict(self) -> dict:
        d = self.__dict__.copy()
        d["at_floor"] = self.p_value <= self.p_floor
        d["discordant"] = list(self.discordant) if self.discordant is not None else None  # JSON round-trip
        return d


def paired_test(metric: str, original: Any, reference: Any, *, kind: str, B: int = 10_000, seed: int = 0,
                test: str = "permutation", ids: Sequence[str] | None = None) -> TestResult:
    """Test H1: the originals score higher than their references; returns p, C_cont and summaries.

    `original`: one score per item (or k_i per item, e.g. k paraphrases, as an n x k array or n
    sequences); `reference`: the item's m draws (n x m array, length-n vector for m = 1, or n sequences
    when m varies). `test`: "permutation" (exact for binary metrics, Monte Carlo with B relabellings and
    stream `seed` for continuous ones) or "bootstrap" (the paper's paired bootstrap of the per-item
    mean differences). `kind`: the scores' kind, "binary" or "continuous" (zcp.probe.stats.paired_test reads a
    metric's kind from the metric table); `metric` names the scores in results and messages.
    """
    if test not in TESTS:
        raise ValueError(f"stats.test must be one of {list(TESTS)}, not {test!r}")
    if kind not in ("binary", "continuous"):
        raise ValueError(f"kind must be binary or continuous, not {kind!r}")
    if B < 1:
        raise ValueError(f"B must be >= 1 (Monte Carlo relabellings or bootstrap samples), got {B}")
    v = item_versions(original, reference, metric=metric, ids=ids)
    if kind == "binary":
        _check_binary(v, metric)
    n = v.n
    a_mean, r_mean = v.a_mean(), v.r_mean()
    d = a_mean - r_mean
    m_max = int(v.m.max()) if n else 0
    k_max = int(v.k.max()) if n else 0
    disc = None
    if kind == "binary" and m_max == 1 and k_max == 1:
        disc = (int(np.sum(a_mean > r_mean)), int(np.sum(a_mean < r_mean)))
    common = {"metric": metric, "n": n, "s": float(a_mean.mean()) if n else float("nan"),
              "s_ref": float(r_mean.mean()) if n else float("nan"), "diff": float(d.mean()) if n else 0.0,
              "m": m_max, "k": k_max, "discordant": disc}
    if n == 0:
        return TestResult(p_value=1.0, c_cont=0.5, test=test, p_floor=0.0, **common)
    originals = [v.item(i)[0] for i in range(n)] if k_max > 1 or (v.k != k_max).any() else v.a
    refs = [v.item(i)[1] for i in range(n)] if (v.m != m_max).any() else v.r
    if test == "bootstrap":
        p = bootstrap_pvalue(d, B=B, seed=seed)
        exceed = round(p * (B + 1)) - 1 if n >= 2 else None
        return TestResult(p_value=p, c_cont=c_cont(p), test=f"paired_bootstrap_B{B}", p_floor=1.0 / (B + 1),
                          exceed=exceed, n_relabellings=B, exact=False, **common)
    if kind == "binary":
        p = binary_null_law(originals, refs).p_value
        name = "exact_mcnemar" if m_max == 1 and k_max == 1 else "exact_permutation"
        return TestResult(p_value=p, c_cont=c_cont(p), test=name, p_floor=0.0, **common)
    p, exceed, n_rel, exact = permutation_pvalue_mc(originals, refs, B=B, seed=seed)
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


def combine_conventions(p_values: Mapping[str, Mapping[str, float]], alpha: float = 0.05) -> dict:
    """`combine` over several answer conventions (zcp.probe.multiconv): Bonferroni on the smallest of every
    (convention, metric) p-value, `p_values[convention][metric]`, so one verdict covers every convention probed.

    With one convention it is exactly `combine` of its metrics (the single-convention verdict, unchanged).
    Otherwise the result adds `conventions`, `driving_convention` and `n_tests` (K, the number of p-values): the
    tests share items (and the full-CoT generation), so they are dependent and Bonferroni, valid under any
    dependence, is used, at a cost of at most the factor K.
    """
    if len(p_values) == 1:
        return combine(next(iter(p_values.values())), alpha)
    out = combine({}, alpha)
    flat = [(c, m, float(p)) for c, ps in p_values.items() for m, p in ps.items()]
    out.update(conventions=list(p_values), driving_convention=None, n_tests=len(flat))
    if not flat:
        return out
    conv, metric, p_min = min(flat, key=lambda t: t[2])
    p = min(1.0, len(flat) * p_min)
    out.update(p_value=p, c_cont=c_cont(p), contaminated=bool(p < alpha),
               metrics=sorted({m for _, m, _ in flat}), driving_metric=metric, driving_convention=conv)
    return out


# ---------------------------------------------------------------------------------------------- two samples
TWO_SAMPLE_STATISTICS = ("welch", "mean")


@dataclass(frozen=True)
class TwoSampleResult:
    """A two-sample permutation test of H1: the first sample's values are larger than the second's."""

    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    diff: float  # mean_a - mean_b
    statistic: str  # welch (Welch's t) | mean (the difference of means)
    t_obs: float
    p_value: float
    exceed: int  # #{T* >= T_obs}: enumerated (the observed labelling included) or among the B random ones
    n_relabellings: int
    exact: bool
    p_floor: float

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "at_floor": self.p_value <= self.p_floor * (1 + 1e-9)}


def _two_sample_stats(z: np.ndarray, z2: np.ndarray, picks: np.ndarray, statistic: str) -> np.ndarray:
    """The statistic of each row of `picks` (the indices, into the pooled centred values z, labelled sample a)."""
    n, n_a = z.size, picks.shape[1]
    n_b = n - n_a
    s_a = z.take(picks).sum(axis=1)
    s_b = z.sum() - s_a
    diff = s_a / n_a - s_b / n_b
    if statistic == "mean":
        return diff
    q_a = z2.take(picks).sum(axis=1)
    q_b = z2.sum() - q_a
    var_a = np.maximum(q_a - s_a * s_a / n_a, 0.0) / max(n_a - 1, 1)
    var_b = np.maximum(q_b - s_b * s_b / n_b, 0.0) / max(n_b - 1, 1)
    se = np.sqrt(var_a / n_a + var_b / n_b)
    # no spread in either sample: +-inf by the sign of the difference, 0 when the means are equal
    out = np.where(diff > 0, np.inf, np.where(diff < 0, -np.inf, 0.0))
    return np.divide(diff, se, out=out, where=se > 0)


def two_sample_permutation_test(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
                                B: int = 10_000, seed: int = 0, statistic: str = "welch",
                                chunk: int = 1 << 18) -> TwoSampleResult:
    """One-sided two-sample permutation test of H0: the values of `a` and `b` are exchangeable (one population)
    against H1: `a`'s are larger. The detection's control comparison: `a` the audited set's per-item gaps
    (original minus the mean of its reference draws), `b` a clean control set's.

    Under H0 which n_a of the n_a + n_b pooled values carry the label "a" is uniform over the C(n_a + n_b, n_a)
    subsets. `statistic`: welch (default) = Welch's t, (mean_a - mean_b) / sqrt(s_a^2/n_a + s_b^2/n_b); mean =
    mean_a - mean_b. Both give an exact test under exchangeability; Welch's t keeps the level asymptotically
    when the two sets' gaps have equal means but unequal spreads (e.g. m reference draws per item in one set, one
    in the other), which the difference of means does not when n_a != n_b (Romano 1990; Chung & Romano 2013).
    Exact enumeration when C(n_a + n_b, n_a) <= B (p = #{T* >= T_obs} / C, the observed subset included);
    otherwise B uniformly random subsets from `numpy.random.default_rng(seed)` and p = (1 + #)/(B + 1), never 0.
    """
    if statistic not in TWO_SAMPLE_STATISTICS:
        raise ValueError(f"statistic must be one of {list(TWO_SAMPLE_STATISTICS)}, not {statistic!r}")
    if B < 1:
        raise ValueError(f"B must be >= 1 Monte Carlo relabellings, got {B}")
    xa = np.asarray(a, dtype=np.float64).reshape(-1)
    xb = np.asarray(b, dtype=np.float64).reshape(-1)
    if xa.size < 1 or xb.size < 1:
        raise ValueError(f"two-sample test: both samples need a value (got {xa.size} and {xb.size})")
    if not (np.isfinite(xa).all() and np.isfinite(xb).all()):
        raise ValueError("two-sample test: NaN or infinite values")
    n_a, n = xa.size, xa.size + xb.size
    pooled = np.concatenate([xa, xb])
    z = pooled - pooled.mean()  # centred: the sums of squares lose less to cancellation
    z[np.abs(z) <= 1e-12 * max(1.0, float(np.abs(pooled).max()))] = 0.0  # equal values stay equal after centring
    z2 = z * z
    t_obs = float(_two_sample_stats(z, z2, np.arange(n_a)[None, :], statistic)[0])
    scale = 1.0 if statistic == "welch" else float(np.abs(z).max())
    bound = t_obs - 1e-9 * max(abs(t_obs) if math.isfinite(t_obs) else 0.0, scale)
    common = {"n_a": n_a, "n_b": xb.size, "mean_a": float(xa.mean()), "mean_b": float(xb.mean()),
              "diff": float(xa.mean() - xb.mean()), "statistic": statistic, "t_obs": t_obs}
    total = math.comb(n, n_a)
    if total <= B:
        from itertools import combinations, islice

        every, exceed, rows = combinations(range(n), n_a), 0, max(1, chunk // n)
        while picks := list(islice(every, rows)):
            exceed += int(np.count_nonzero(_two_sample_stats(z, z2, np.array(picks, dtype=np.int64), statistic) >= bound))
        return TwoSampleResult(p_value=exceed / total, exceed=exceed, n_relabellings=total, exact=True,
                               p_floor=1.0 / total, **common)
    rng = np.random.default_rng(seed)
    rows = max(1, chunk // n)
    exceed = 0
    for start in range(0, B, rows):
        r = min(rows, B - start)
        picks = rng.permuted(np.broadcast_to(np.arange(n, dtype=np.int64), (r, n)), axis=1)[:, :n_a]
        exceed += int(np.count_nonzero(_two_sample_stats(z, z2, picks, statistic) >= bound))
    return TwoSampleResult(p_value=(1 + exceed) / (B + 1), exceed=exceed, n_relabellings=B, exact=False,
                           p_floor=1.0 / (B + 1), **common)

