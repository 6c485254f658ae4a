"""Void metrics: the one rule saying which metric of a (split, variant) carries no evidence, and the verdict without it.

A metric is VOID for a (split, variant) when
- its S and S_ref are both 0: no item and no reference draw scores (acc of a model that gets nothing right, e.g.
  SmolLM2-135M-Instruct on GSM8K at 0/32): the test compares zeros with zeros, p = 1 by construction, and a
  "no evidence" read from it says nothing of the model's exposure; or
- the malformed rate of the answer it reads is above `threshold` (`stats.void_malformed`, default 0.5) on the
  variant's rows or on the reference rows it is compared with: the zero-CoT answer for metrics needing the greedy
  answer (acc, con), the full-CoT answer for those needing it (con). A malformed answer scores as wrong on every
  version, so once most are malformed most (original, reference) pairs are (0, 0) by construction.
p_first/p_all score the gold answer's tokens and are voided by the first rule only.

A void metric is reported (table.md: VOID and its reason; summary.json: `void` on its result row, `void` on the
verdict) and left out of the combined verdict: Bonferroni over the remaining metrics. Every verdict (the single
run's, the multi-convention combination, the DiD) asks `void_reasons` and `combine_valid`, so the rule is one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zcp.probe.metrics import get_metric, is_metric
from zcp.probe.stats import combine

VOID_MALFORMED = 0.5  # the default of stats.void_malformed (zcp.probe.probe_config.StatsConfig)
REFERENCE = "reference"


def _rate(rows: Mapping[tuple[str, str], Mapping[str, Any]], split: str, variant: str, key: str) -> float:
    """The larger of `key` (a malformed rate) on the variant's rows and on the split's reference rows."""
    return max(float(rows.get((split, v), {}).get(key, 0.0)) for v in (variant, REFERENCE))


def void_reason(result: Mapping[str, Any], malformed: Sequence[Mapping[str, Any]],
                threshold: float = VOID_MALFORMED) -> str | None:
    """Why the metric of one result row (`split`, `variant`, `metric`, `s`, `s_ref`) is void, in one line; None when
    it is not. `malformed` are analyse's malformed rows (per split and variant: the malformed rates)."""
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"the void threshold must lie in [0, 1], not {threshold}")
    split, variant, metric = result["split"], result["variant"], result["metric"]
    if float(result.get("s", 0.0)) == 0.0 and float(result.get("s_ref", 0.0)) == 0.0:
        return "S = S_ref = 0: no item and no reference scores, the test compares zeros (p = 1 by construction)"
    rows = {(m["split"], m["variant"]): m for m in malformed}
    spec = get_metric(metric) if is_metric(metric) else None
    checks = []
    if spec is not None and spec.needs_generation:
        checks.append(("zero_cot_malformed_rate", "zero-CoT"))
    if spec is not None and spec.needs_full_cot:
        checks.append(("full_cot_malformed_rate", "full-CoT"))
    for key, what in checks:
        rate = _rate(rows, split, variant, key)
        if rate > threshold:
            return (f"{rate:.0%} of {what} answers malformed (more than stats.void_malformed = {threshold:g}): a "
                    "malformed answer scores as wrong on every version")
    return None


def mark_void(results: Sequence[dict[str, Any]], malformed: Sequence[Mapping[str, Any]],
              threshold: float = VOID_MALFORMED) -> dict[tuple[str, str], dict[str, str]]:
    """Set `void` (the reason) on each void result row (in place); returns {(split, variant): {metric: reason}}."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for r in results:
        why = void_reason(r, malformed, threshold)
        if why is not None:
            r["void"] = why
            out.setdefault((r["split"], r["variant"]), {})[r["metric"]] = why
    return out


def combine_valid(p_values: Mapping[str, float], void: Mapping[str, str], alpha: float) -> dict[str, Any]:
    """`zcp.probe.stats.combine` over the metrics not in `void` (Bonferroni over the remaining ones), the verdict
    saying which were left out and why (`void`); with every metric void: p = 1, no evidence, and `void_all` True."""
    kept = {m: p for m, p in p_values.items() if m not in void}
    out = combine(kept, alpha)
    left = {m: void[m] for m in p_values if m in void}
    if left:
        out["void"] = left
        out["void_all"] = not kept
    return out


def void_map(results: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, str]]:
    """{(split, variant): {metric: reason}} of the result rows marked VOID (summary.json's `results`), for a verdict
    computed later from other p-values of the same metrics (the DiD's)."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for r in results:
        if r.get("void"):
            out.setdefault((r["split"], r["variant"]), {})[r["metric"]] = r["void"]
    return out
