"""ZCP's item-level score from an existing detection run: one `zcp_<metric>` detector per probe metric.

ZCP decides at the benchmark level; to compare it with item-level baselines by AUROC its per-item score is
the item's zero-CoT gap: the original's metric minus the mean of its reference draws (repeated draws of an
item counted once, as the ZCP test does: `zcp.probe.detect.distinct_draws`). Read from a detection run's
records.jsonl (rows with `split`, `variant` "original"/"reference", `original_id`, and the metric's record
field); no model access. The detectors are generated from the metric table (zcp.probe.metrics): `zcp_acc`,
`zcp_con`, `zcp_p_first`, `zcp_p_all` for the built-in metrics, and one for each metric registered later
(`on_register`), labelled "ZCP gap (<metric label>)"; the record field and per-version value come from the table.

Benchmark decision: ZCP's own test on that metric (the within-item permutation test over all reference
draws, `zcp.probe.stats.paired_test`; exact for binary metrics), p < alpha — one metric, without ZCP's Bonferroni
combination over metrics.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from zcp.backends.base import Backend
from zcp.core.items import Item
from zcp.probe.metrics import ProbeMetric, is_metric, metric_field, metric_names, metric_value, on_register
from zcp.validate.detectors.base import Detector, DetectorContext, DetectorSpec, register_detector


def _check_metric(metric: str) -> None:
    if not is_metric(metric):
        raise ValueError(f"metric must be one of {list(metric_names())}, not {metric!r}")


def _item_versions(records: Sequence[dict[str, Any]], metric: str) -> dict[str, tuple[float, list[float]]]:
    """Per original item: (original's metric, its distinct reference draws' metrics), from one split each."""
    from zcp.probe.detect import distinct_draws

    _check_metric(metric)
    split_of: dict[str, str] = {}
    orig: dict[str, float] = {}
    refs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        oid = str(r.get("original_id", r.get("id")))
        split = str(r.get("split", ""))
        if split_of.setdefault(oid, split) != split:
            continue  # an item reported again under another split (C_leaked, ...): its first split only
        if r.get("variant") == "original":
            orig[oid] = metric_value(r, metric)
        elif r.get("variant") == "reference":
            refs[oid].append(r)
    return {oid: (x, [metric_value(r, metric) for r in distinct_draws(refs[oid])])
            for oid, x in orig.items() if refs.get(oid)}


def zcp_item_scores(records: list[dict[str, Any]], metric: str) -> dict[str, float]:
    """Item id -> original's metric minus the mean of its reference draws (items with both only)."""
    return {oid: float(x - np.mean(ys)) for oid, (x, ys) in _item_versions(records, metric).items()}


class ZCPGap(Detector):
    """Per-item ZCP gap read from detection records."""

    def __init__(self, metric: str = "p_all") -> None:
        _check_metric(metric)
        self.metric = metric

    def skip_reason(self, ctx: DetectorContext, items: Sequence[Item] = ()) -> str | None:
        """Skipped without detection records, or when their run did not probe this metric (e.g. con left out
        of `probe.metrics`): a gap of a metric never measured is not zero, it is missing."""
        reason = super().skip_reason(ctx, items)
        if reason:
            return reason
        key = metric_field(self.metric)
        if not any(key in r for r in ctx.detection_records or [] if r.get("variant") == "original"):
            return f"the detection records hold no {self.metric} (not among that run's probe.metrics)"
        return None

    def score_items(self, backend: Backend, items: Sequence[Item], ctx: DetectorContext) -> list[dict[str, Any]]:
        """The item's gap, or no score when the detection run has no original+reference rows for it."""
        versions = _item_versions(ctx.detection_records or [], self.metric)
        out = []
        for it in items:
            if it.id not in versions:
                out.append({"id": it.id, "score": None, "reason": "not in the detection records"})
                continue
            x, ys = versions[it.id]
            out.append({"id": it.id, "score": float(x - np.mean(ys)), "original": x, "reference_mean": float(np.mean(ys)),
                        "m": len(ys)})
        return out

    def benchmark_decision(self, records: Sequence[dict[str, Any]], ctx: DetectorContext) -> dict[str, Any]:
        """ZCP's within-item permutation test on this metric over the scored items, p < alpha."""
        from zcp.probe.stats import paired_test

        ids = {str(r["id"]) for r in records if r.get("variant", "original") == "original" and r.get("score") is not None}
        versions = {k: v for k, v in _item_versions(ctx.detection_records or [], self.metric).items() if k in ids}
        rule = f"ZCP within-item permutation test on {self.metric} over all reference draws, p < {ctx.alpha}"
        if not versions:
            return {"statistic": float("nan"), "decision": None, "rule": rule, "p_value": None, "threshold": ctx.alpha}
        keys = sorted(versions)
        res = paired_test(self.metric, [versions[k][0] for k in keys], [versions[k][1] for k in keys],
                          B=ctx.bootstrap_samples, seed=ctx.seed, ids=keys)
        return {"statistic": float(res.diff), "decision": bool(res.p_value < ctx.alpha), "rule": rule,
                "p_value": float(res.p_value), "threshold": ctx.alpha}


def _register(metric: ProbeMetric) -> None:
    """The zcp_<name> detector of one probe metric (called for every metric of the table, now and later)."""
    register_detector(DetectorSpec(f"zcp_{metric.name}", f"ZCP gap ({metric.label})", "records",
                                   frozenset({"detection_records"}), "zcp", {"metric": metric.name}, cite="ZCP"))(ZCPGap)


on_register(_register)
