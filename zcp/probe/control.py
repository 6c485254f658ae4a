"""A control benchmark in the detect job: the audited set's per-item gaps against a clean set's.

Why. The within-item test asks whether an original scores higher than its own reference draws. A model that
cannot solve the items (SmolLM2-135M on GSM8K: 0% zero-CoT accuracy) still has priors over number shapes (last
digit, roundness, magnitude, digits of the question); p_first/p_all then measure those priors, and any shape
feature the reference builder does not match between originals and draws shows up as a gap on a clean model.
A control set of the same kind that the model cannot have seen in the audited way (GSM8K test when auditing
GSM8K train), with references built by the same builder, carries the same builder bias: comparing the audited
gaps with the control's cancels what the two share.

What. `data.control_path` and `data.control_reference_path` name the control and its references; it is read with
the data group's format, fields, pairing and selection (`data.limit` / `data.sample`), probed in the same run as
split `control` (its records carry split `control`: they resume like any other), and gets its own within-item
test in the results. Per audited split and variant and per metric, `compare_with_control` tests H0: the audited
items' gaps gap_i = X_i - mean_j Y_ij and the control's are exchangeable (one population) against H1: the
audited gaps are larger, by the two-sample permutation test of `zcp.probe.stats.two_sample_permutation_test`
(Welch's t; exact enumeration for tiny sets, else Monte Carlo with the run's B per seed, the seeds' streams
pooled). The metrics are combined by Bonferroni, as the within-item verdict is. The block is summary.json's
`control` and a section of table.md.

What it assumes: the control is clean and drawn from the same population as the audited set (same benchmark,
another split); a control the model saw too, or of another difficulty, moves the comparison either way.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from zcp.benchmarks.data_config import DataConfig
from zcp.benchmarks.dataset import read_data
from zcp.benchmarks.loaders import resolve_path
from zcp.core.io import stable_hash
from zcp.core.items import Item
from zcp.errors import ConfigError, DataError
from zcp.probe.metrics import metric_label
from zcp.probe.stats import c_cont, two_sample_permutation_test

CONTROL = "control"  # the control set's split name (records, results, verdicts)
STATISTIC = "welch"  # the two-sample test's statistic (zcp.probe.stats.TWO_SAMPLE_STATISTICS)


@dataclasses.dataclass(frozen=True)
class ControlRead:
    """The control set as read: its selected items with a reference row, their rows, and what was left out."""

    items: list[Item]
    references: dict[str, list[Item]]
    without_reference: list[str]
    issues: list[dict[str, Any]]


def _norm(question: str) -> str:
    return re.sub(r"\s+", " ", question).strip()


def read_control(d: DataConfig, audited: Sequence[Item], audited_splits: Sequence[str]) -> ControlRead | None:
    """The control set named by `d.control_path` / `d.control_reference_path` (None when no control is set).

    Checked before any model loads: both files exist (ConfigError naming the key), no audited split is named
    `control`, and the control shares no question with the audited items (DataError: a control that holds
    audited items is no control). The control is read with the data's format, fields, pairing, selection and
    policies (`zcp.benchmarks.dataset.read_data`), without U, manifest or variants.
    """
    if not d.control_path:
        return None
    for key in ("control_path", "control_reference_path"):
        value = getattr(d, key)
        if not value or not Path(resolve_path(value)).is_file():
            raise ConfigError(f"data.{key}={value!r}: no such file")
    if CONTROL in audited_splits:
        raise ConfigError(f"data.name={d.name!r}: the split name {CONTROL!r} is the control set's (data.control_path); "
                          "name the audited data otherwise")
    sub = dataclasses.replace(d, name=CONTROL, path=d.control_path, reference_path=d.control_reference_path,
                              u_path=None, u_reference_path=None, manifest=None, variant_paths={},
                              control_path=None, control_reference_path=None)
    read = read_data(sub)
    (group,) = read.groups.values()
    items = group.with_reference(read.references)
    if not items:
        raise DataError(f"nothing left to test in the control set: none of its {len(group.items)} selected item(s) "
                        "has a reference row", path=str(resolve_path(d.control_reference_path)))
    seen = {_norm(it.question): it.id for it in audited}
    shared = [(it.id, seen[_norm(it.question)]) for it in group.items if _norm(it.question) in seen]
    if shared:
        raise DataError(f"the control set shares {len(shared)} question(s) with the audited data (first: control "
                        f"{shared[0][0]!r} = {shared[0][1]!r}): a control must be disjoint from what is audited",
                        path=str(resolve_path(d.control_path)))
    ids = {it.id for it in items}
    return ControlRead(items, {k: v for k, v in read.references.items() if k in ids}, list(group.without_reference),
                       read.issues)


def compare_with_control(audited: Mapping[tuple[str, str], Mapping[str, Mapping[str, float]]],
                         control: Mapping[str, Mapping[str, float]], metrics: Sequence[str], *,
                         seeds: Sequence[int], B: int, alpha: float,
                         void: Mapping[tuple[str, str], Mapping[str, str]] | None = None,
                         control_void: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The control block: per audited (split, variant) and metric the two-sample test of the gaps, and a verdict.

    `audited[(split, variant)][metric]` and `control[metric]` map item id -> gap (the item's original-side mean
    minus the mean of its reference draws). Each seed runs one Monte Carlo stream of B relabellings (seeded from
    the seed, split, variant and metric, as the within-item test's are); the streams are pooled into one p,
    (1 + sum #)/(sum B + 1). Exact enumeration (C(n + n_control, n) <= B) needs no stream.

    `void` ({(split, variant): {metric: reason}}, `zcp.probe.void.mark_void`'s map of the within-item results) and
    `control_void` ({metric: reason}, the control's): a metric void on the audited side or on the control is
    tested and shown but
    marked `void` and left out of the verdict (`combine_valid`), as the within-item verdict leaves it out: a metric
    that means nothing on one side (acc at 0% accuracy on both: every gap is 0, p = 1) must not dilute the others.
    """
    from zcp.probe.void import combine_valid

    void, control_void = void or {}, control_void or {}
    results, verdicts = [], []
    for (split, variant), by_metric in audited.items():
        pooled: dict[str, float] = {}
        off: dict[str, str] = {}
        for metric in metrics:
            mine = void.get((split, variant), {}).get(metric)
            if mine or control_void.get(metric):
                off[metric] = (f"void on the audited set: {mine}" if mine else
                               f"void on the control set: {control_void[metric]}")
        for metric in metrics:
            a = [by_metric.get(metric, {})[i] for i in sorted(by_metric.get(metric, {}))]
            b = [control.get(metric, {})[i] for i in sorted(control.get(metric, {}))]
            if not a or not b:
                continue
            runs = [two_sample_permutation_test(a, b, B=B, statistic=STATISTIC,
                                                seed=int(stable_hash(f"{s}|control|{split}|{variant}|{metric}", 8), 16))
                    for s in seeds]
            main = runs[0]
            if main.exact:
                p, floor, n_rel = main.p_value, main.p_floor, main.n_relabellings
            else:
                n_rel = sum(r.n_relabellings for r in runs)
                p, floor = (1 + sum(r.exceed for r in runs)) / (n_rel + 1), 1.0 / (n_rel + 1)
            pooled[metric] = p
            results.append({"split": split, "variant": variant, "metric": metric, "n": main.n_a,
                            "n_control": main.n_b, "gap": main.mean_a, "gap_control": main.mean_b, "diff": main.diff,
                            "statistic": main.statistic, "t_obs": main.t_obs, "p_value": p, "c_cont": c_cont(p),
                            "p_floor": floor, "at_floor": p <= floor * (1 + 1e-9), "exact": main.exact,
                            "n_relabellings": n_rel, **({"void": off[metric]} if metric in off else {})})
        if pooled:
            verdicts.append({"split": split, "variant": variant,
                             **combine_valid(pooled, {m: w for m, w in off.items() if m in pooled}, alpha)})
    return {"split": CONTROL, "test": f"two_sample_permutation_{STATISTIC}", "alternative": "audited gaps larger",
            "results": results, "verdicts": verdicts}


def control_markdown(block: Mapping[str, Any]) -> str:
    """table.md's section for the control block (empty when there is none)."""
    if not block or not block.get("results"):
        return ""
    lines = ["", "## Against the control set", "",
             "Per-item gap = original minus the mean of its reference draws; the audited gaps against the control "
             f"set's ({block['test']}, one-sided: audited larger). The builder's biases shared by both sets cancel.",
             "", "| split | variant | metric | n | n control | gap | gap control | diff | p | C_cont |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in block["results"]:
        p = f"≤ {r['p_floor']:.2g}" if r["at_floor"] and not r["exact"] else f"{r['p_value']:.3g}"
        label = (metric_label(r["metric"]) + (f" [`{r['convention']}`]" if r.get("convention") else "")
                 + (" (VOID)" if r.get("void") else ""))
        lines.append(f"| {r['split']} | {r['variant']} | {label} | {r['n']} | {r['n_control']} "
                     f"| {r['gap']:.4g} | {r['gap_control']:.4g} | {r['diff']:.4g} | {p} | {r['c_cont']:.3f} |")
    lines += ["", "| split | variant | combined p (Bonferroni) | C_cont | contaminated vs control |", "|---|---|---|---|---|"]
    for v in block["verdicts"]:
        said = ("no: every metric is VOID" if v.get("void_all") else
                f"{'yes' if v['contaminated'] else 'no'} (driven by {metric_label(v['driving_metric'])}"
                + (f" under `{v['driving_convention']}`" if v.get("driving_convention") else "") + ")")
        lines.append(f"| {v['split']} | {v['variant']} | {v['p_value']:.3g} | {v['c_cont']:.3f} | {said} |")
    voided = [r for r in block["results"] if r.get("void")]
    if voided:
        lines += ["", "VOID rows are left out of the combined p (Bonferroni over the others): "
                  + "; ".join(f"{r['split']}/{r['variant']} {metric_label(r['metric'])}: {r['void']}" for r in voided)]
    return "\n".join(lines) + "\n"
