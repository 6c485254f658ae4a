"""Statistics of the probe: the within-item permutation test and the Sellke calibration to a confidence.

The test itself is pure statistics over scores and lives in zcp.core.permutation (the reference shift report of
the benchmarks layer runs it too); this module adds what the probe knows: a metric's kind from the metric table
(`metric_kind`), so `paired_test(metric, ...)` needs no `kind`. Every name of zcp.core.permutation is re-exported.

Data: item i has one original score X_i and m_i >= 1 reference scores Y_i1..Y_im (its isomorphic
perturbations). H0: the original is exchangeable with its perturbations (the model treats it like any
other member of its family); H1 (one-sided): the original scores higher.
Statistic: T = sum_i (X_i - mean_j Y_ij).

- Within-item permutation test (default, every metric): under H0 the label "original" is uniform over
  the m_i + 1 versions of item i, independently across items.
  * Binary metrics (kind "binary" in the metric table zcp.probe.metrics: acc, con): exact. Item i with
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

from collections.abc import Sequence
from typing import Any

from zcp.core import permutation as _permutation
from zcp.core.permutation import (  # noqa: F401  (re-exported: the probe's statistics)
    C_MAX,
    MAX_OPTIONS,
    MC_THREADED_DRAWS,
    MC_THREADS,
    P_MIN,
    TESTS,
    TWO_SAMPLE_STATISTICS,
    BinaryNull,
    TestResult,
    TwoSampleResult,
    Versions,
    bf10,
    binary_null_law,
    bootstrap_pvalue,
    c_cont,
    combine,
    combine_conventions,
    item_versions,
    permutation_pvalue_mc,
    pooled_mc_pvalue,
    sign_test_pvalue,
    two_sample_permutation_test,
)
from zcp.probe.metrics import get_metric, is_metric


def metric_kind(metric: str) -> str:
    """A registered metric's kind from the metric table ('binary' for acc/con, 'continuous' for p_first/p_all);
    'continuous' for any other score (a detector's rouge_l, a baseline's score)."""
    return get_metric(metric).kind if is_metric(metric) else "continuous"


def paired_test(metric: str, original: Any, reference: Any, *, B: int = 10_000, seed: int = 0,
                test: str = "permutation", ids: Sequence[str] | None = None, kind: str | None = None) -> TestResult:
    """Test H1: the originals score higher than their references (zcp.core.permutation.paired_test), the scores'
    kind read from the metric table (`metric_kind`) unless `kind` ("binary" | "continuous") overrides it."""
    return _permutation.paired_test(metric, original, reference, kind=kind or metric_kind(metric), B=B, seed=seed,
                                    test=test, ids=ids)
