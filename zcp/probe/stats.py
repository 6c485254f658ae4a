"""Statistics of the probe: the within-item permutation test and the Sellke calibration to a confidence.

The test itself is pure statistics over scores and lives in zcp.core.permutation (the reference shift report of
the benchmarks layer runs it too); this module adds what the probe knows: a metric's kind from the metric table
(`metric_kind`), so `paired_test(metric, ...)` needs no `kind`. Every name of zcp.core.permutation is re-exported.

The data, H0, the statistic, the test per kind, the calibration and the combination across metrics are stated
once, in zcp.core.permutation's docstring.
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
