"""The detector study report (evaluate/run_report.py): one markdown page + PNG plots (+ W&B).

For each contamination condition — verbatim leaks (`exposure.k=0`, the originals leaked) and paraphrased
leaks (the demo default) — and for every detector, ZCP's metrics and the baselines:
- item-level AUROC and TPR at 5% FPR of the Dataset C items (leaked) against the Dataset U items (clean);
- the benchmark-level verdict on C and on U (flagged or not, with its p-value or statistic).
ZCP's item score is the item's zero-CoT gap (`zcp.detectors.zcp_item_scores`: the original's metric minus
the mean of its reference draws) read from the run's detection records; ZCP's verdicts are the detection
run's own tests (summary.json: p per metric, Bonferroni-combined verdict). Baselines come from
evaluate/run_baselines.py's summary.json ("data" = C, "u" = U). Then the ablations of each condition
(evaluate/run_ablations.py): the truncation curve, the full-CoT table and the sample-size table.

Labels come from the detector registry (`zcp.detectors.spec_of(name).label`), so a table never names a
detector differently from its plot.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from zcp.io import read_json, read_jsonl, write_json
from zcp.report import c_cont_text

log = logging.getLogger(__name__)

REPO_CONF = Path(__file__).resolve().parents[1] / "conf"
CONDITIONS = (("verbatim", "Verbatim leak (exposure.k=0: the originals)"),
              ("paraphrased", "Paraphrased leak (the demo default)"))


def _label(name: str, fallback: str | None = None) -> str:
    from zcp.detectors import spec_of

    try:
        return spec_of(name).label
    except KeyError:
        return fallback or name


def newest_detection_dir(run_dir: str | Path) -> Path:
    """The newest detect/FT*/ of a contamination run dir holding summary.json and records.jsonl."""
    found = [p.parent for p in Path(run_dir).glob("detect/FT*/summary.json") if (p.parent / "records.jsonl").exists()]
    if not found:
        from zcp.config import ConfigError

        raise ConfigError(f"{run_dir}: no detect/FT*/summary.json with records.jsonl (run its detection stage first)")
    return max(found, key=lambda p: (p / "summary.json").stat().st_mtime)


def zcp_rows(det_dir: str | Path, metrics: list[str]) -> list[dict[str, Any]]:
    """ZCP per metric (and the combined verdict): AUROC / TPR@5%FPR of C vs U item gaps, verdicts on C and U."""
    from zcp.detectors import auroc, tpr_at_fpr, zcp_item_scores

    det = Path(det_dir)
    summary = read_json(det / "summary.json")
    records = list(read_jsonl(det / "records.jsonl"))
    split_of = {r["original_id"]: r["split"] for r in records if r["variant"] == "original"}
    alpha = float(summary.get("alpha", 0.05))
    res = {(r["split"], r["metric"]): r for r in summary["results"] if r["variant"] == "original"}
    rows = []
    for metric in metrics:
        if ("C", metric) not in res:
            continue
        scores = zcp_item_scores(records, metric)
        pos = [s for i, s in scores.items() if split_of.get(i) == "C"]
        neg = [s for i, s in scores.items() if split_of.get(i) == "U"]
        row: dict[str, Any] = {"detector": f"zcp_{metric}", "label": _label(f"zcp_{metric}"), "family": "ZCP",
                               "auroc": auroc(pos, neg), "tpr_at_5fpr": tpr_at_fpr(pos, neg, 0.05),
                               "n_c": len(pos), "n_u": len(neg), "alpha": alpha}
        for split, key in (("C", "c"), ("U", "u")):
            r = res.get((split, metric))
            row[f"{key}_decision"] = None if r is None else bool(r["p_value"] < alpha)
            row[f"{key}_p_value"] = None if r is None else r["p_value"]
            row[f"{key}_c_cont"] = None if r is None else r["c_cont"]
        rows.append(row)
    verdicts = {v["split"]: v for v in summary["verdicts"] if v["variant"] == "original"}
    combined: dict[str, Any] = {"detector": "zcp_combined", "label": "ZCP verdict (Bonferroni over "
                                + ", ".join(summary.get("metrics", metrics)) + ")", "family": "ZCP",
                                "auroc": None, "tpr_at_5fpr": None, "alpha": alpha}
    for split, key in (("C", "c"), ("U", "u")):
        v = verdicts.get(split)
        combined[f"{key}_decision"] = None if v is None else bool(v["contaminated"])
        combined[f"{key}_p_value"] = None if v is None else v["p_value"]
        combined[f"{key}_c_cont"] = None if v is None else v["c_cont"]
    rows.append(combined)
    return rows


def baseline_rows(baselines_dir: str | Path) -> list[dict[str, Any]]:
    """Rows of evaluate/run_baselines.py's summary.json ("data" = C, "u" = U); ZCP's own rows are left to
    `zcp_rows` (read from the detection run, with the combined verdict)."""
    summary = read_json(Path(baselines_dir) / "summary.json")
    rows = []
    for name, d in (summary.get("detectors") or {}).items():
        if name.startswith("zcp_"):
            continue
        files = d.get("files") or {}
        row: dict[str, Any] = {"detector": name, "label": _label(name, d.get("label")), "family": "baseline",
                               "auroc": d.get("auroc"), "tpr_at_5fpr": d.get("tpr_at_5fpr"),
                               "skipped": d.get("skipped"),
                               "n_c": (files.get("data") or {}).get("n"), "n_u": (files.get("u") or {}).get("n")}
        for f, key in (("data", "c"), ("u", "u")):
            x = files.get(f) or {}
            row[f"{key}_decision"] = x.get("decision")
            row[f"{key}_p_value"] = x.get("p_value")
            row[f"{key}_statistic"] = x.get("statistic")
            row[f"{key}_rule"] = x.get("rule")
        rows.append(row)
    return rows


def _num(x: Any, digits: int = 3) -> str:
    return "—" if x is None else f"{float(x):.{digits}f}"


def _verdict(row: dict[str, Any], key: str) -> str:
    d = row.get(f"{key}_decision")
    if d is None:
        return "—"
    word = "flagged" if d else "not flagged"
    if row.get(f"{key}_p_value") is not None:
        extra = f"p={float(row[f'{key}_p_value']):.2g}"
        if row.get(f"{key}_c_cont") is not None:
            c = c_cont_text(float(row[f"{key}_c_cont"]), 0.0, False)
            extra += f", C_cont {c}" if c.startswith(">") else f", C_cont={c}"
        return f"{word} ({extra})"
    if row.get(f"{key}_statistic") is not None:
        return f"{word} (stat={float(row[f'{key}_statistic']):.3g})"
    return word


def detectors_markdown(rows: list[dict[str, Any]]) -> str:
    """Detector table: AUROC, TPR@5%FPR (C vs U items), verdict on C (should flag) and on U (should not)."""
    lines = ["| Detector | AUROC (C vs U) | TPR@5%FPR | verdict on C (leaked) | verdict on U (clean) |",
             "|---|---|---|---|---|"]
    for r in rows:
        if r.get("skipped"):
            lines.append(f"| {r['label']} | skipped: {r['skipped']} | | | |")
            continue
        lines.append(f"| {r['label']} | {_num(r.get('auroc'))} | {_num(r.get('tpr_at_5fpr'))} | "
                     f"{_verdict(r, 'c')} | {_verdict(r, 'u')} |")
    return "\n".join(lines) + "\n"


def plot_auroc(by_condition: dict[str, list[dict[str, Any]]], path: str | Path) -> Path:
    """Grouped bars: item-level AUROC per detector, one bar per condition; 0.5 = chance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    labels = list(dict.fromkeys(r["label"] for rows in by_condition.values() for r in rows
                                if r.get("auroc") is not None))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(labels) + 2), 4.2))
    width = 0.8 / max(1, len(by_condition))
    x = np.arange(len(labels))
    for k, (cond, rows) in enumerate(by_condition.items()):
        val = {r["label"]: r.get("auroc") for r in rows}
        ax.bar(x + k * width, [val.get(lab) if val.get(lab) is not None else np.nan for lab in labels], width,
               label=cond)
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax.set_xticks(x + width * (len(by_condition) - 1) / 2)
    ax.set_xticklabels(labels, rotation=40, ha="right", fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_ylabel("item-level AUROC (C vs U)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_truncation_conditions(curves: dict[str, list[dict[str, Any]]], path: str | Path) -> Path:
    """C_cont on C and U versus the share of the CoT kept, per metric, one line style per condition."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zcp.report import METRIC_LABEL

    metrics = list(dict.fromkeys(r["metric"] for rows in curves.values() for r in rows))
    fig, axes = plt.subplots(1, max(1, len(metrics)), figsize=(4.2 * max(1, len(metrics)), 3.6), squeeze=False)
    for j, m in enumerate(metrics):
        ax = axes[0][j]
        for k, (cond, rows) in enumerate(curves.items()):
            for split, style in (("C", "-"), ("U", ":")):
                rr = sorted((r for r in rows if r["metric"] == m and r["split"] == split), key=lambda r: r["ratio"])
                if rr:
                    ax.plot([r["ratio"] for r in rr], [r["c_cont"] for r in rr], style, marker="o", color=f"C{k}",
                            label=f"{cond} {split}")
        ax.set_title(METRIC_LABEL.get(m, m))
        ax.set_ylim(0.45, 1.02)
        ax.set_xlabel("share of the model's CoT kept (r)")
    axes[0][0].set_ylabel("C_cont")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def build_report(conditions: dict[str, dict[str, Any]], out_dir: str | Path, metrics: list[str],
                 title: str = "Detector study") -> dict[str, Any]:
    """Gather the study's runs into report.md, report.json and PNG plots in `out_dir`.

    `conditions` maps verbatim/paraphrased to {run_dir, ablations_dir, baselines_dir} (None: not run);
    a condition with none of them is left out.
    """
    from zcp.ablations import full_cot_markdown, plot_sample_size, sample_size_markdown, truncation_markdown

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = dict(CONDITIONS)
    report: dict[str, Any] = {"title": title, "conditions": {}}
    parts = [f"# {title}\n",
             "Dataset C was leaked to the model, Dataset U was not. Item-level detectors are scored by AUROC and "
             "TPR at 5% FPR of C items against U items; benchmark-level verdicts should flag C and not U. ZCP's "
             "item score is the item's zero-CoT gap (original minus mean reference draw); its verdicts are the "
             "detection run's tests.\n"]
    detector_rows: dict[str, list[dict[str, Any]]] = {}
    curves: dict[str, list[dict[str, Any]]] = {}
    for cond, src in conditions.items():
        src = {k: v for k, v in (src or {}).items() if v}
        if not src:
            continue
        entry: dict[str, Any] = {"sources": src}
        rows: list[dict[str, Any]] = []
        if src.get("run_dir"):
            det = newest_detection_dir(src["run_dir"])
            entry["detection_dir"] = str(det)
            rows += zcp_rows(det, metrics)
        if src.get("baselines_dir"):
            rows += baseline_rows(src["baselines_dir"])
        entry["detectors"] = rows
        detector_rows[names.get(cond, cond)] = rows
        parts.append(f"## {names.get(cond, cond)}\n\nSources: " + ", ".join(f"{k} `{v}`" for k, v in src.items()) + "\n")
        if rows:
            parts.append("### Detectors\n\n" + detectors_markdown(rows))
        if src.get("ablations_dir"):
            ab = read_json(Path(src["ablations_dir"]) / "summary.json")
            entry["ablations"] = {k: ab[k] for k in ("truncation", "full_cot", "sample_size") if k in ab}
            if "truncation" in ab:
                curves[names.get(cond, cond)] = ab["truncation"]["rows"]
                parts.append(f"### Truncation curve (paper Figure 2; unit: {ab['truncation']['unit']})\n\n"
                             + truncation_markdown(ab["truncation"]["rows"]))
            if "full_cot" in ab:
                parts.append("### Full-CoT ablation (paper Table 17)\n\n" + full_cot_markdown(ab["full_cot"]["rows"]))
            if "sample_size" in ab:
                s = ab["sample_size"]
                parts.append(f"### Sample size (paper Table 18; {s['subsets']} random subsets per N, B = "
                             f"{s['bootstrap_samples']} per seed)\n\n" + sample_size_markdown(s["rows"], s["alpha"]))
                plot_sample_size(s["rows"], out / f"sample_size_{cond}.png", f"C_cont versus N — {names.get(cond, cond)}")
                parts.append(f"![C_cont versus N](sample_size_{cond}.png)\n")
        report["conditions"][cond] = entry
    plots = {}
    if any(r.get("auroc") is not None for rows in detector_rows.values() for r in rows):
        plots["auroc"] = str(plot_auroc(detector_rows, out / "auroc.png"))
        parts.insert(2, "![AUROC per detector](auroc.png)\n")
    if curves:
        plots["truncation"] = str(plot_truncation_conditions(curves, out / "truncation_c_cont.png"))
        parts.append("## Truncation curves side by side\n\n![C_cont versus the share of CoT kept](truncation_c_cont.png)\n")
    report["plots"] = plots
    (out / "report.md").write_text("\n".join(parts))
    write_json(out / "report.json", report)
    return report


def run_report(cfg: Any) -> dict[str, Any]:
    """Entry point of evaluate/run_report.py."""
    from zcp.config import ConfigError, run_dir, save_config, to_dict, validate
    from zcp.tracking import Tracker

    rep = validate(cfg)["report"]
    conditions = {c: vars(getattr(rep, c)) for c, _ in CONDITIONS}
    for cond, src in conditions.items():
        for key, val in src.items():
            if val and not Path(val).exists():
                raise ConfigError(f"report.{cond}.{key}={val}: no such directory")
            if val and key != "run_dir" and not (Path(val) / "summary.json").exists():
                raise ConfigError(f"report.{cond}.{key}={val}: no summary.json (is its run finished?)")
    if not any(v for src in conditions.values() for v in src.values()):
        raise ConfigError("report: set at least one of report.{verbatim,paraphrased}.{run_dir,ablations_dir,baselines_dir}")
    out = run_dir(cfg, "report", "study")
    save_config(cfg, out)
    report = build_report(conditions, out, list(rep.metrics), rep.title)
    with Tracker(cfg.get("logger"), run_config=to_dict(cfg), run_dir=str(out), job_type="report") as tr:
        for cond, entry in report["conditions"].items():
            if entry.get("detectors"):
                tr.table(f"detectors/{cond}", [{k: r.get(k) for k in ("label", "auroc", "tpr_at_5fpr", "c_decision",
                                                                       "u_decision")} for r in entry["detectors"]])
        for key, p in report["plots"].items():
            tr.image(key, p)
        tr.artifact("study-report", "zcp-report", [str(out / "report.md"), str(out / "report.json")])
    print((out / "report.md").read_text())
    print(f"wrote {out}")
    return report
