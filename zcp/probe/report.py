"""Paper-shaped reports: the markdown table (Table 4 / Table 7 layout) and the C_cont plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zcp.probe.metrics import metric_label


def _pm(mean: float, std: float, multi: bool, digits: int = 3) -> str:
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if multi else f"{mean:.{digits}f}"


def c_cont_text(mean: float, std: float, multi: bool) -> str:
    """C_cont as printed: C_cont < 1 always, so a mean that would round to 1.000 prints as `>0.999`."""
    return ">0.999" if mean >= 0.9995 else _pm(mean, std, multi)


def _c(res: dict[str, Any], multi: bool) -> str:
    """C_cont of the test's p, ± the std of the per-seed stability display; `>x` when p is at its floor."""
    if res.get("at_floor"):
        return f">{res['c_cont']:.3f}"
    return c_cont_text(res["c_cont"], res.get("c_cont_std", 0.0), multi)


def coverage_text(c: dict[str, Any]) -> str:
    """One dataset's coverage as the table states it: "gsm8k: n = 26 of 40 items: 14 without a reference row,
    left out" (`c` is an entry of summary.json's `datasets`: n_tested, n_selected, left_out)."""
    text = f"{c['split']}: n = {c['n_tested']} of {c['n_selected']} items"
    if c.get("left_out"):
        text += ": " + ", ".join(f"{n} {why}" for why, n in c["left_out"].items()) + ", left out"
    return text


def overflow_text(overflow: Sequence[dict[str, Any]], policy: str, key: str = "data.on_overflow") -> str:
    """What the context-overflow policy did, in one line (summary.json's `overflow` lists every unit)."""
    items = {(o["split"], o["original_id"]) for o in overflow}
    cuts = [int(o["action"].split()[1]) for o in overflow if str(o.get("action", "")).startswith("truncated")]
    if cuts:
        return (f"{key}={policy}: {len(overflow)} probe prompts of {len(items)} items truncated, every version of "
                f"an item by the same number of leading characters (up to {max(cuts)})")
    rows = sum(o.get("action") == "skipped row" for o in overflow)
    whole = len({(o["split"], o["original_id"]) for o in overflow if o.get("action") == "skipped item"})
    return (f"{key}={policy}: {len(overflow)} probe prompts too long for the model's context: {whole} items left "
            f"out whole, {rows} further rows left out")


def void_lines(results: Sequence[dict[str, Any]], by: str = "") -> list[str]:
    """table.md's lines naming each VOID metric and why (zcp.probe.void), left out of the combined verdict;
    `by` names a field shown before the metric (a multi-convention run's `convention`)."""
    out = []
    for r in results:
        if r.get("void"):
            who = f"{r[by]} " if by else ""
            out.append(f"- {r['split']}/{r['variant']} {who}{metric_label(r['metric'])}: VOID, {r['void']}")
    return ["", "VOID metrics (reported, left out of the combined verdict):", *out] if out else []


def warning_lines(summary: dict[str, Any]) -> list[str]:
    """table.md's `**Warning**:` lines for what summary.json lists besides the malformed answers: the data warnings
    (`data_warnings`: a reference set identical to the data, `data.sample` larger than the data, ...; those of
    single rows counted per file with the first), the repeated questions merged (`skipped_rows` with
    `duplicate_of`, per file) and the units the records held twice with different content (`record_warnings`).
    Each line is preceded by an empty one; none when there is nothing to say (the table is then as without it)."""
    lines: list[str] = []
    rows: dict[str, list[dict[str, Any]]] = {}
    for w in summary.get("data_warnings") or []:
        if "row" in w:
            rows.setdefault(str(w.get("file")), []).append(w)
        else:
            lines.append(f"{w['file']}: {w['warning']}" if w.get("file") else str(w["warning"]))
    for file, ws in rows.items():
        first = ws[0]
        who = f"row {first['row']}" + (f" ({first['id']})" if first.get("id") else "")
        lines.append(f"{file}: {len(ws)} row(s) warned about (listed in summary.json data_warnings), e.g. {who}: "
                     f"{first['warning']}")
    merged: dict[str, list[dict[str, Any]]] = {}
    for r in summary.get("skipped_rows") or []:
        if r.get("duplicate_of"):
            merged.setdefault(str(r.get("file")), []).append(r)
    for file, rs in merged.items():
        shown = ", ".join(f"{r['id']} = {r['duplicate_of']}" for r in rs[:3]) + (", ..." if len(rs) > 3 else "")
        lines.append(f"{file}: {len(rs)} repeated question(s) merged, each counted once with its first copy kept "
                     f"({shown}; listed in summary.json skipped_rows)")
    lines += [str(w["warning"]) for w in summary.get("record_warnings") or []]
    return [x for line in lines for x in ("", f"**Warning**: {line}.")]


def format_table(summary: dict[str, Any], title: str | None = None) -> str:
    """Markdown table: one row per (split, variant); S_ref, S and C_cont per metric; then verdicts.

    Below it: the items left out per dataset ("n = 26 of 40 items: 14 without a reference row, left out"),
    what the context-overflow policy did, warnings that void a metric (malformed answers), the other warnings
    summary.json lists (`warning_lines`), how the prompts were rendered, and the malformed-rate table.
    """
    results = summary["results"]
    metrics: list[str] = []
    for r in results:
        if r["metric"] not in metrics:
            metrics.append(r["metric"])
    multi = len(summary.get("seeds", [0])) > 1
    rows: dict[tuple[str, str], dict[str, dict]] = {}
    for r in results:
        rows.setdefault((r["split"], r["variant"]), {})[r["metric"]] = r
    verdict = {(v["split"], v["variant"]): v for v in summary.get("verdicts", [])}
    head = ["Dataset", "Variant", "n"]
    for m in metrics:
        lab = metric_label(m)
        head += [f"{lab} S_ref", f"{lab} S", f"{lab} C_cont"]
    head += ["Combined C_cont", "Verdict"]
    lines = []
    if title:
        lines += [f"### {title}", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (split, variant), by_m in rows.items():
        first = next(iter(by_m.values()))
        cells = [split, variant, str(first["n"])]
        for m in metrics:
            r = by_m.get(m)
            if r is None:
                cells += ["–", "–", "–"]
                continue
            cells += [_pm(r["s_ref"], r["s_ref_std"], multi), _pm(r["s"], r["s_std"], multi),
                      "VOID" if r.get("void") else _c(r, multi)]
        v = verdict.get((split, variant))
        if v:
            stab = f" (stability: {v['stability_contaminated_seeds']}/{len(v['per_seed'])} seeds)" if multi else ""
            cells += [c_cont_text(v["c_cont"], 0.0, False), ("contaminated" if v["contaminated"] else "no evidence") + stab]
        else:
            cells += ["–", "–"]
        lines.append("| " + " | ".join(cells) + " |")
    seeds = summary.get("seeds", [0])
    note = (f"S_ref and C_cont ± std: stability over seeds {list(seeds)} (Monte Carlo stream"
            + (", reference-draw share" if summary.get("reference_draws") == "per_seed" else "")
            + "); each C_cont is that of one test over all reference draws. " if multi else "")
    lines += ["", note + f"Tests: {', '.join(sorted({r['test'] for r in results}))}; combined: Bonferroni over the "
              f"metrics{' not VOID' if any(r.get('void') for r in results) else ''}, alpha = {summary['alpha']}. "
              "`>x`: Monte Carlo p at its floor 1/(B+1)."]
    lines += void_lines(results)
    left = [coverage_text(c) for c in summary.get("datasets", []) if c.get("left_out")]
    if left:
        lines += ["", "Items left out (listed in summary.json): " + "; ".join(left) + "."]
    if summary.get("overflow"):
        lines += ["", "Context overflow: " + overflow_text(summary["overflow"], summary.get("on_overflow", "?"),
                                                           summary.get("overflow_key", "data.on_overflow")) + "."]
    for w in summary.get("malformed_warnings") or []:
        lines += ["", f"**Warning**: {w['warning']}."]
    lines += warning_lines(summary)
    if summary.get("rendering"):
        from zcp.probe.prompts import describe_rendering

        lines += ["", f"Prompts: {describe_rendering(summary['rendering'])}."]
    mal = summary.get("malformed") or []
    if mal:
        lines += ["", "| Dataset | Variant | rows | zero-CoT malformed | full-CoT malformed | full-CoT acc |", "|---|---|---|---|---|---|"]
        for m in mal:
            zc = f"{m['zero_cot_malformed_rate']:.3f}" if "zero_cot_malformed_rate" in m else "–"
            fc = f"{m['full_cot_malformed_rate']:.3f}" if "full_cot_malformed_rate" in m else "–"
            fa = f"{m['full_cot_acc']:.3f}" if "full_cot_acc" in m else "–"
            lines.append(f"| {m['split']} | {m['variant']} | {m['n_rows']} | {zc} | {fc} | {fa} |")
    return "\n".join(line for line in lines if line is not None) + "\n"


def plot_c_cont(summary: dict[str, Any], path: str | Path, title: str = "Contamination Confidence") -> Path:
    """Grouped bars of C_cont per metric for each (split, variant), with std over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    results = summary["results"]
    metrics: list[str] = []
    groups: list[tuple[str, str]] = []
    for r in results:
        if r["metric"] not in metrics:
            metrics.append(r["metric"])
        if (r["split"], r["variant"]) not in groups:
            groups.append((r["split"], r["variant"]))
    val = {(r["split"], r["variant"], r["metric"]): r for r in results}
    x = np.arange(len(metrics))
    width = 0.8 / max(1, len(groups))
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(metrics), 3.6))
    for gi, (split, variant) in enumerate(groups):
        ys = [val[(split, variant, m)]["c_cont"] if (split, variant, m) in val else 0 for m in metrics]
        es = [val[(split, variant, m)].get("c_cont_std", 0) if (split, variant, m) in val else 0 for m in metrics]
        ax.bar(x + (gi - (len(groups) - 1) / 2) * width, ys, width, yerr=es, capsize=3,
               label=f"{split} / {variant}")
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax.set_xticks(x, [metric_label(m) for m in metrics])
    ax.set_ylim(0.45, 1.02)
    ax.set_ylabel("C_cont")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=max(1, min(4, len(groups))))
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_reports(summary: dict[str, Any], out_dir: str | Path, title: str | None = None) -> dict[str, Path]:
    """Write table.md and c_cont.png beside summary.json."""
    out = Path(out_dir)
    table = out / "table.md"
    table.write_text(format_table(summary, title))
    plot = plot_c_cont(summary, out / "c_cont.png", title or "Contamination Confidence")
    return {"table": table, "plot": plot}


def results_rows(summary: dict[str, Any], keys: Sequence[str] = ("split", "variant", "metric", "n", "s", "s_ref",
                                                                   "p_value", "c_cont")) -> list[dict[str, Any]]:
    """Flat rows of the results for W&B tables."""
    return [{k: r.get(k) for k in keys} for r in summary["results"]]
