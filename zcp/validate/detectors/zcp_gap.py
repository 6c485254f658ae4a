"""ZCP's item-level score from an existing detection run (`zcp_acc`, `zcp_con`, `zcp_p_first`, `zcp_p_all`).

ZCP decides at the benchmark level; to compare it with item-level baselines by AUROC its per-item score is
the item's zero-CoT gap: the original's metric minus the mean of its reference draws (repeated draws of an
item counted once, as the ZCP test does: `zcp.probe.detect.distinct_draws`). Read from a detection run's
records.jsonl (rows with `split`, `variant` "original"/"reference", `original_id`, and `correct`,
`consistent`, `p_first`, `p_all`); no model access. Metrics: acc -> `correct`, con -> `consistent`.

Benchmark decision: ZCP's own test on that metric (the within-item permutation test over all reference
draws, `zcp.probe.stats.paired_test`; exact for acc/con), p < alpha — one metric, without ZCP's Bonferroni
combination over metrics.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from zcp.backends.base import Backend
from zcp.core.items import Item
from zcp.validate.detectors.base import Detector, DetectorContext, DetectorSpec, register_detector

METRICS = ("acc", "con", "p_first", "p_all")
LABELS = {"acc": "ZCP gap (Acc)", "con": "ZCP gap (Con)", "p_first": "ZCP gap (P_first)", "p_all": "ZCP gap (P_all)"}


def _item_versions(records: Sequence[dict[str, Any]], metric: str) -> dict[str, tuple[float, list[float]]]:
    """Per original item: (original's metric, its distinct reference draws' metrics), from one split each."""
    from zcp.probe.detect import distinct_draws
    from zcp.probe.prompts import metric_value

    if metric not in METRICS:
        raise ValueError(f"metric must be one of {list(METRICS)}, not {metric!r}")
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
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {list(METRICS)}, not {metric!r}")
        self.metric = metric

    def skip_reason(self, ctx: DetectorContext, items: Sequence[Item] = ()) -> str | None:
        """Skipped without detection records, or when their run did not probe this metric (e.g. con left out
        of `probe.metrics`): a gap of a metric never measured is not zero, it is missing."""
        reason = super().skip_reason(ctx, items)
        if reason:
            return reason
        from zcp.probe.prompts import metric_field

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


for _m in METRICS:
    register_detector(DetectorSpec(f"zcp_{_m}", LABELS[_m], "records", frozenset({"detection_records"}), "zcp",
                                   {"metric": _m}, cite="ZCP"))(ZCPGap)
