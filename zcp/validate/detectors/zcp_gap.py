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

Records of a multi-convention detection (`probe.prefill` a list or `auto`: each record carries `convention`) are read
per convention: an item's score is its largest gap over the conventions, the decision Bonferroni over the
conventions' tests of the metric. So a zcp_* detector reads whatever conventions its detection run probed (it
probes nothing itself: `probe.prefill` is chosen where the records are made, the detection).
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


def _by_convention(records: Sequence[dict[str, Any]], metric: str) -> dict[Any, dict[str, tuple[float, list[float]]]]:
    """`_item_versions` per answer convention: the records of a multi-convention detection (zcp.probe.multiconv) say
    which pre-fill each was probed after (`convention`); records without it are one convention (key None)."""
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[r.get("convention")].append(r)
    return {c: _item_versions(rs, metric) for c, rs in groups.items()}


def _best_gap(by_conv: dict[Any, dict[str, tuple[float, list[float]]]], oid: str) -> tuple[Any, float, list[float]] | None:
    """The convention under which item `oid`'s gap is largest, with its original's metric and reference draws."""
    best = None
    for c, versions in by_conv.items():
        if oid in versions:
            x, ys = versions[oid]
            if best is None or x - np.mean(ys) > best[1] - np.mean(best[2]):
                best = (c, x, ys)
    return best


def zcp_item_scores(records: list[dict[str, Any]], metric: str) -> dict[str, float]:
    """Item id -> original's metric minus the mean of its reference draws (items with both only); for the records
    of several answer conventions, the largest of the item's gaps over the conventions."""
    by_conv = _by_convention(records, metric)
    ids = dict.fromkeys(oid for versions in by_conv.values() for oid in versions)
    out = {}
    for oid in ids:
        best = _best_gap(by_conv, oid)
        if best is not None:
            out[oid] = float(best[1] - np.mean(best[2]))
    return out


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
        """The item's gap, or no score when the detection run has no original+reference rows for it; with several
        answer conventions probed, the largest over them (`convention` says which)."""
        by_conv = _by_convention(ctx.detection_records or [], self.metric)
        out = []
        for it in items:
            best = _best_gap(by_conv, it.id)
            if best is None:
                out.append({"id": it.id, "score": None, "reason": "not in the detection records"})
                continue
            conv, x, ys = best
            row = {"id": it.id, "score": float(x - np.mean(ys)), "original": x, "reference_mean": float(np.mean(ys)),
                   "m": len(ys)}
            if len(by_conv) > 1:
                row["convention"] = conv
            out.append(row)
        return out

    def benchmark_decision(self, records: Sequence[dict[str, Any]], ctx: DetectorContext) -> dict[str, Any]:
        """ZCP's within-item permutation test on this metric over the scored items, p < alpha."""
        from zcp.probe.stats import paired_test

        ids = {str(r["id"]) for r in records if r.get("variant", "original") == "original" and r.get("score") is not None}
        by_conv = {c: {k: v for k, v in versions.items() if k in ids}
                   for c, versions in _by_convention(ctx.detection_records or [], self.metric).items()}
        by_conv = {c: v for c, v in by_conv.items() if v}
        rule = f"ZCP within-item permutation test on {self.metric} over all reference draws, p < {ctx.alpha}"
        if len(by_conv) > 1:
            rule = (f"ZCP within-item permutation test on {self.metric} over all reference draws under each of the "
                    f"{len(by_conv)} answer conventions, Bonferroni over them, p < {ctx.alpha}")
        if not by_conv:
            return {"statistic": float("nan"), "decision": None, "rule": rule, "p_value": None, "threshold": ctx.alpha}
        tests = {}
        for c, versions in by_conv.items():
            keys = sorted(versions)
            tests[c] = paired_test(self.metric, [versions[k][0] for k in keys], [versions[k][1] for k in keys],
                                   B=ctx.bootstrap_samples, seed=ctx.seed, ids=keys)
        conv, res = min(tests.items(), key=lambda kv: kv[1].p_value)
        p = min(1.0, len(tests) * float(res.p_value))
        out = {"statistic": float(res.diff), "decision": bool(p < ctx.alpha), "rule": rule, "p_value": p,
               "threshold": ctx.alpha}
        if len(tests) > 1:
            out["convention"] = conv
        return out


def _register(metric: ProbeMetric) -> None:
    """The zcp_<name> detector of one probe metric (called for every metric of the table, now and later)."""
    register_detector(DetectorSpec(f"zcp_{metric.name}", f"ZCP gap ({metric.label})", "records",
                                   frozenset({"detection_records"}), "zcp", {"metric": metric.name}, cite="ZCP"))(ZCPGap)


on_register(_register)
