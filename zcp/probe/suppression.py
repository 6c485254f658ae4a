"""The suppression signal: originals scoring far BELOW their references, and the contrast signal.

A probe-aware evader trains its model not to answer its leaked items at once under the pre-fills it knows
(zcp.simulate.suppress). That can overshoot: under the suppressed pre-fill the model then answers its leaked
originals *worse* than their references (it learnt to avoid exactly those answers), while under another pre-fill
they may still score above them. Both are departures from the Zero-CoT Probe's null (the original is exchangeable
with its references under every convention), so each is a valid test of it:

* suppression: per (convention, metric) the lower-tail within-item permutation p-value (`lower_tail_test`: the
  probe's `paired_test` on the reversed scores, 1 - x for a binary metric, -x for a continuous one, so it is the
  same exact / Monte Carlo test of the same null, its other tail), Bonferroni over the K (convention, metric) pairs;
* contrast: for an ordered pair of conventions (a, b), "below under a and above under b" is an intersection of two
  one-sided hypotheses, tested by the intersection-union rule p_ab = max(p_low(a), p_high(b)) with p_low / p_high
  each Bonferroni over the metrics of its convention; Bonferroni over the K(K - 1) ordered pairs.

Under H0 each p-value is valid whatever the dependence between conventions and metrics (Bonferroni and the
intersection-union rule need none). Their false-positive rate on clean sets is measured in docs/results/evader.md
(scripts/evader_study.py); this module is the pure statistics, computed from detection records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zcp.probe.metrics import metric_value
from zcp.probe.stats import TestResult, c_cont, metric_kind, paired_test

ORIGINAL, REFERENCE = "original", "reference"


def reversed_scores(values: Any, kind: str) -> Any:
    """The scores with their order reversed: 1 - x for a binary metric (stays 0/1), -x for a continuous one.
    Nested sequences (k paraphrases, m draws per item) are reversed element by element."""
    if isinstance(values, (list, tuple)):
        return [reversed_scores(v, kind) for v in values]
    return 1.0 - float(values) if kind == "binary" else -float(values)


def lower_tail_test(metric: str, original: Any, reference: Any, *, B: int = 10_000, seed: int = 0,
                    kind: str | None = None, ids: Sequence[str] | None = None) -> TestResult:
    """H1: the originals score LOWER than their references. The within-item permutation test of `paired_test` on
    `reversed_scores` (T' = -T, so p = P(T* <= T_obs) under the relabelling null: exact for binary metrics, Monte
    Carlo or enumerated for continuous ones). `s`, `s_ref`, `diff` of the result are on the original scale."""
    kind = kind or metric_kind(metric)
    res = paired_test(metric, reversed_scores(_plain(original), kind), reversed_scores(_plain(reference), kind),
                      B=B, seed=seed, kind=kind, ids=ids)
    back = (lambda x: 1.0 - x) if kind == "binary" else (lambda x: -x)
    res.s, res.s_ref, res.diff = back(res.s), back(res.s_ref), -res.diff
    return res


def _plain(values: Any) -> Any:
    """Arrays and tuples as nested lists of floats (what `reversed_scores` walks)."""
    if hasattr(values, "tolist"):
        values = values.tolist()
    if isinstance(values, (list, tuple)):
        return [_plain(v) for v in values]
    return float(values)


def _bonferroni(ps: Mapping[Any, float]) -> tuple[float, Any]:
    if not ps:
        return 1.0, None
    key, p_min = min(ps.items(), key=lambda kv: kv[1])
    return min(1.0, len(ps) * p_min), key


def item_scores(records: Sequence[Mapping[str, Any]], metric: str, split: str,
                variant: str = ORIGINAL) -> tuple[list[str], list[list[float]], list[list[float]]]:
    """(ids, originals, references) of one split from detection records: per original item its `variant` scores and
    its distinct reference draws (the probe's `distinct_draws` rule: one version per prompt and gold), in draw order;
    items without either side are left out."""
    seen: set[tuple[Any, ...]] = set()
    orig: dict[str, list[tuple[int, float]]] = {}
    refs: dict[str, list[tuple[int, float]]] = {}
    for r in sorted((r for r in records if r["split"] == split), key=lambda r: (r["original_id"], int(r["draw"]))):
        if r["variant"] == REFERENCE:
            key = (r["original_id"], r.get("prompt_hash"), r.get("gold"))
            if r.get("prompt_hash") is not None and key in seen:
                continue
            seen.add(key)
            refs.setdefault(r["original_id"], []).append((int(r["draw"]), metric_value(r, metric)))
        elif r["variant"] == variant:
            orig.setdefault(r["original_id"], []).append((int(r["draw"]), metric_value(r, metric)))
    ids = sorted(set(orig) & set(refs))
    return ids, [[v for _, v in sorted(orig[i])] for i in ids], [[v for _, v in sorted(refs[i])] for i in ids]


def suppression_signal(records: Mapping[str, Sequence[Mapping[str, Any]]], metrics: Sequence[str], split: str, *,
                       B: int = 10_000, seed: int = 0, alpha: float = 0.05) -> dict[str, Any]:
    """The suppression and contrast signals of one split, from detection records per convention
    (`records[convention]`: that convention's records.jsonl rows).

    Returns per (convention, metric) the lower- and upper-tail p-values with S and S_ref, the suppression verdict
    (Bonferroni over the K lower tails: `suppression`) and the contrast verdict (intersection-union over ordered
    pairs of conventions, Bonferroni over the pairs: `contrast`; None with one convention)."""
    rows = []
    low: dict[str, dict[str, float]] = {}
    high: dict[str, dict[str, float]] = {}
    for conv, recs in records.items():
        for metric in metrics:
            ids, a, r = item_scores(recs, metric, split)
            if not ids:
                continue
            lo = lower_tail_test(metric, a, r, B=B, seed=seed, ids=ids)
            hi = paired_test(metric, a, r, B=B, seed=seed, ids=ids, kind=metric_kind(metric))
            low.setdefault(conv, {})[metric] = lo.p_value
            high.setdefault(conv, {})[metric] = hi.p_value
            rows.append({"convention": conv, "metric": metric, "n": lo.n, "s": lo.s, "s_ref": lo.s_ref,
                         "p_lower": lo.p_value, "p_upper": hi.p_value})
    flat = {(c, m): p for c, ps in low.items() for m, p in ps.items()}
    p_sup, drive = _bonferroni(flat)
    out: dict[str, Any] = {
        "split": split, "alpha": alpha, "rows": rows,
        "suppression": {"p_value": p_sup, "c_cont": c_cont(p_sup), "flagged": bool(p_sup < alpha), "n_tests": len(flat),
                        "driving": list(drive) if drive else None},
        "contrast": None,
    }
    convs = [c for c in records if c in low]
    if len(convs) >= 2:
        p_low = {c: _bonferroni(low[c])[0] for c in convs}
        p_high = {c: _bonferroni(high[c])[0] for c in convs}
        pairs = {(a, b): max(p_low[a], p_high[b]) for a in convs for b in convs if a != b}
        p_con, pair = _bonferroni(pairs)
        out["contrast"] = {"p_value": p_con, "c_cont": c_cont(p_con), "flagged": bool(p_con < alpha),
                           "n_pairs": len(pairs), "below_under": pair[0], "above_under": pair[1]}
    return out
