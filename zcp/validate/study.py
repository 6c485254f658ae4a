"""The detector study report (evaluate/run_report.py): one markdown page + PNG plots (+ W&B).

For each contamination condition — verbatim leaks (`exposure.k=0`, the originals leaked) and paraphrased
leaks (the demo default) — and for every detector, ZCP's metrics and the baselines:
- item-level AUROC and TPR at 5% FPR of the Dataset C items (leaked) against the Dataset U items (clean);
- the benchmark-level verdict on C and on U (flagged or not, with its p-value or statistic).
ZCP's item score is the item's zero-CoT gap (`zcp.validate.detectors.zcp_item_scores`: the original's metric minus
the mean of its reference draws) read from the run's detection records; ZCP's verdicts are the detection
run's own tests (summary.json: p per metric, Bonferroni-combined verdict). Baselines come from
evaluate/run_baselines.py's summary.json ("data" = C, "u" = U). Then the ablations of each condition
(evaluate/run_ablations.py): the truncation curve, the full-CoT table and the sample-size table. Then,
over exposure (`report.exposure`: the runs of conf/experiment/detector_exposure.yaml, made with the
simulation's baselines stage), every detector's AUROC / TPR@5%FPR and verdicts per leak kind and exposure level.

Labels come from the detector registry (`zcp.validate.detectors.spec_of(name).label`), so a table never names a
detector differently from its plot.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from zcp import REPO_ROOT
from zcp.core.io import read_json, write_json
from zcp.core.records import RecordStore
from zcp.core.rundir import (
    BASELINES,
    BASELINES_SUMMARY,
    DETECTION_RECORDS,
    DETECTION_SUMMARY,
    ContaminationRun,
    sweep_runs,
)
from zcp.probe.metrics import BUILTIN_METRICS
from zcp.probe.probe_config import StatsConfig
from zcp.probe.report import c_cont_text
from zcp.validate.study_config import ReportJob  # noqa: F401  (registers the report job and its groups)

log = logging.getLogger(__name__)

REPO_CONF = REPO_ROOT / "conf"
CONDITIONS = (("verbatim", "Verbatim leak (exposure.k=0: the originals)"),
              ("paraphrased", "Paraphrased leak (the demo default)"))


def _label(name: str, fallback: str | None = None) -> str:
    from zcp.validate.detectors import spec_of

    try:
        return spec_of(name).label
    except KeyError:
        return fallback or name


def newest_detection_dir(run_dir: str | Path) -> Path:
    """The newest finished detect/FT*/ of a contamination run dir (`zcp.core.rundir.ContaminationRun.newest_detection`,
    the lookup the baselines and ablations use too); ConfigError naming what is missing when none is finished."""
    found, passed = ContaminationRun(run_dir).newest_detection()
    if found is None:
        from zcp.errors import ConfigError

        if passed:
            raise ConfigError(f"{run_dir}: no finished detect/FT*/ ({passed[0]})")
        raise ConfigError(f"{run_dir}: no detect/FT*/summary.json with records.jsonl (run its detection stage first)")
    if passed:
        log.warning("%s; using %s", "; ".join(passed), found)
    return found


def zcp_rows(det_dir: str | Path, metrics: list[str]) -> list[dict[str, Any]]:
    """ZCP per metric (and the combined verdict): AUROC / TPR@5%FPR of C vs U item gaps, verdicts on C and U."""
    from zcp.validate.detectors import auroc, tpr_at_fpr, zcp_item_scores

    det = Path(det_dir)
    summary = read_json(det / DETECTION_SUMMARY)
    records = RecordStore(det / DETECTION_RECORDS).read()
    split_of = {r["original_id"]: r["split"] for r in records if r["variant"] == "original"}
    alpha = float(summary.get("alpha", StatsConfig.alpha))  # a detection's summary.json (an old one: the default)
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


def non_default_params(name: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """The parameters of a detector run that differ from its registry defaults (e.g. {"text": "chat_answer"})."""
    from zcp.validate.detectors import get_detector

    try:
        defaults = get_detector(name).params()
    except (KeyError, ValueError):
        return dict(params or {})
    return {k: v for k, v in (params or {}).items() if defaults.get(k) != v}


def baseline_rows(baselines_dir: str | Path) -> list[dict[str, Any]]:
    """Rows of evaluate/run_baselines.py's summary.json ("data" = C, "u" = U); ZCP's own rows are left to
    `zcp_rows` (read from the detection run, with the combined verdict). A detector run with parameters other
    than its defaults is a row of its own: `ppl[text=chat_answer]`, labelled "Perplexity (text=chat_answer)"."""
    summary = read_json(Path(baselines_dir) / "summary.json")
    rows = []
    for name, d in (summary.get("detectors") or {}).items():
        if name.startswith("zcp_"):
            continue
        files = d.get("files") or {}
        extra = ", ".join(f"{k}={v}" for k, v in sorted(non_default_params(name, d.get("params")).items()))
        row: dict[str, Any] = {"detector": f"{name}[{extra}]" if extra else name,
                               "label": _label(name, d.get("label")) + (f" ({extra})" if extra else ""),
                               "family": "baseline",
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

    from zcp.probe.metrics import metric_label

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
        ax.set_title(metric_label(m))
        ax.set_ylim(0.45, 1.02)
        ax.set_xlabel("share of the model's CoT kept (r)")
    axes[0][0].set_ylabel("C_cont")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


# ------------------------------------------------------------------------------------ over exposure

LEAK_KIND = {"verbatim": "Verbatim leak (k = 0: the originals)", "paraphrased": "Paraphrased leak (k paraphrases)",
             "sham": "Sham fine-tune (leak_fraction = 0: nothing of C leaked)"}
# the lines of the exposure plot: every ZCP metric and one representative of each baseline family
EXPOSURE_PLOT_DETECTORS = (*(f"zcp_{m}" for m in BUILTIN_METRICS), "ppl", "zlib", "mink20", "minkpp20",
                           "ref", "dpcc", "recon", "guided", "ppl[text=chat_answer]", "mink20[text=chat_answer]",
                           "minkpp20[text=chat_answer]", "ref[text=chat_answer]")


def exposure_run_dirs(root: str | Path, name: str | None, runs: list[str] | tuple[str, ...] = ()) -> list[Path]:
    """The runs of the study over exposure: `runs` plus every <root>/<name>__*/ (when `name` is set), finished or
    not (`collect_exposure` says why one is left out)."""
    dirs = [Path(r) for r in runs]
    if name:
        dirs += sorted(p for p in Path(root).glob(f"{name}__*") if p.is_dir())
    return list(dict.fromkeys(dirs))


def collect_exposure(dirs: list[Path], metrics: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """One entry per finished run (the sweep collector's rule, zcp.core.rundir.sweep_runs) that ran the baselines
    stage: its exposure knobs, leak kind (k = 0: verbatim; a sham run, leak_fraction = 0, is kind "sham" at the
    level of its sham items, never exposure 0 of a leak), exposure level (`zcp.validate.exposure.exposure_level`)
    and detector rows (ZCP from detect/FT*/, baselines from baselines/). The other runs are returned apart, with
    why."""
    from zcp.errors import ConfigError
    from zcp.validate.exposure import exposure_level, run_arm

    finished, left_out = sweep_runs(None, runs=dirs)
    unfinished = [{"run": str(d), "missing": why} for d, why in left_out]
    entries = []
    for run in finished:
        d = run.path
        record = run.exposure
        knobs = record["knobs"]
        try:
            det = newest_detection_dir(d)
        except ConfigError:
            unfinished.append({"run": str(d), "missing": "no detect/FT*/summary.json (detection not finished)"})
            continue
        if not run.baselines_summary_path.exists():
            unfinished.append({"run": str(d), "missing": "no baselines/summary.json (ran without the baselines stage)"})
            continue
        rows = zcp_rows(det, metrics)
        # the stage's baselines/, then any further run_baselines.py output in the run dir (baselines_*/, e.g.
        # the likelihood detectors with other parameters); a detector already shown is not repeated
        for b in sorted(d.glob(f"{BASELINES}*/{BASELINES_SUMMARY}"),
                        key=lambda p: (p.parent.name != BASELINES, p.parent.name)):
            seen = {r["detector"] for r in rows}
            rows += [r for r in baseline_rows(b.parent) if r["detector"] not in seen]
        kind = "sham" if run_arm(record) == "sham" else "verbatim" if int(knobs["k"]) == 0 else "paraphrased"
        entries.append({"run": str(d), "knobs": knobs, "kind": kind,
                        "level": exposure_level(knobs), "detection_dir": str(det), "detectors": rows})
    entries.sort(key=lambda e: (list(LEAK_KIND).index(e["kind"]), e["level"], int(e["knobs"]["k"])))
    return entries, unfinished


def _level_label(e: dict[str, Any]) -> str:
    k = int(e["knobs"]["k"])
    return f"{e['level']:g} ({'originals' if k == 0 else f'k={k}'} x {float(e['knobs']['sft_epochs']):g} ep)"


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "—"
    if r.get("skipped"):
        return "skipped"
    yn = {True: "yes", False: "no", None: "—"}
    return (f"{_num(r.get('auroc'), 2)} / {_num(r.get('tpr_at_5fpr'), 2)}, "
            f"C {yn[r.get('c_decision')]}, U {yn[r.get('u_decision')]}")


def exposure_markdown(entries: list[dict[str, Any]], kind: str) -> str:
    """Rows = detectors, columns = exposure levels of one leak kind; a cell is
    `AUROC / TPR@5%FPR, C <flagged?>, U <flagged?>`."""
    es = [e for e in entries if e["kind"] == kind]
    if not es:
        return ""
    order = list(dict.fromkeys((r["detector"], r["label"]) for e in es for r in e["detectors"]))
    head = ["Detector", *[_level_label(e) for e in es]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for det, label in order:
        by = [next((r for r in e["detectors"] if r["detector"] == det), None) for e in es]
        reasons = {r.get("skipped") if r is not None else None for r in by}
        if len(reasons) == 1 and None not in reasons:  # skipped at every level for one reason: said once
            lines.append(f"| {label} | skipped at every level: {reasons.pop()} |" + " |" * (len(by) - 1))
            continue
        lines.append(f"| {label} | " + " | ".join(_cell(r) for r in by) + " |")
    return "\n".join(lines) + "\n"


def plot_exposure(entries: list[dict[str, Any]], path: str | Path,
                  detectors: tuple[str, ...] = EXPOSURE_PLOT_DETECTORS) -> Path:
    """Item-level AUROC (C vs U) versus exposure, one panel per leak kind; ZCP solid, baselines dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in LEAK_KIND if any(e["kind"] == k for e in entries)]
    fig, axes = plt.subplots(1, max(1, len(kinds)), figsize=(5.2 * max(1, len(kinds)), 4.2), squeeze=False,
                             sharey=True)
    present = [d for d in detectors if any(r["detector"] == d and r.get("auroc") is not None
                                           for e in entries for r in e["detectors"])]
    cmap = plt.get_cmap("tab20")
    colours = {d: cmap(i % 20) for i, d in enumerate(present)}
    labels = {r["detector"]: r["label"] for e in entries for r in e["detectors"]}
    for ax, kind in zip(axes[0], kinds, strict=False):
        es = [e for e in entries if e["kind"] == kind]
        for d in present:
            pts = [(e["level"], r["auroc"]) for e in es for r in e["detectors"]
                   if r["detector"] == d and r.get("auroc") is not None]
            if not pts:
                continue
            pts.sort()
            zcp = d.startswith("zcp_")
            ax.plot([x for x, _ in pts], [y for _, y in pts], "-" if zcp else "--", marker="o" if zcp else ".",
                    color=colours[d], lw=1.8 if zcp else 1.0, label=labels.get(d, d))
        ax.axhline(0.5, color="grey", lw=0.8, ls=":")
        levels = sorted({e["level"] for e in es})
        ax.set_xscale("log")
        ax.set_xticks(levels, [f"{x:g}" for x in levels], fontsize=8)
        ax.minorticks_off()
        ax.set_ylim(0.0, 1.02)
        ax.set_xlabel("exposure (variants x SFT epochs)")
        ax.set_title(LEAK_KIND[kind], fontsize=10)
    axes[0][0].set_ylabel("item-level AUROC (C vs U)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=min(4, max(1, len(labels))), frameon=False)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def exposure_section(entries: list[dict[str, Any]], unfinished: list[dict[str, str]], out: Path) -> tuple[str, str | None]:
    """Markdown of the study over exposure (one table per leak kind, the AUROC plot) and the plot's path."""
    parts = ["## Detectors versus exposure\n",
             "Each run leaks Dataset C at one exposure level (exposure = paraphrase variants, or 1 for the originals, "
             "x SFT epochs) and runs ZCP and the baselines on C and U. Cell: item-level AUROC / TPR@5%FPR of C vs U, "
             "then the benchmark-level verdict on C (should be yes) and on U (should be no).\n"]
    if entries:
        k0 = entries[0]["knobs"]
        parts.append("Leak format of these runs: " + ", ".join(f"{k}={k0.get(k)}" for k in (
            "answer_only_fraction", "answer_format", "clean_fraction", "grpo_steps", "lora_r", "lr")) + ".\n")
    for kind, title in LEAK_KIND.items():
        md = exposure_markdown(entries, kind)
        if md:
            parts.append(f"### {title}\n\n" + md)
    plot = None
    if any(r.get("auroc") is not None for e in entries for r in e["detectors"]):
        plot = str(plot_exposure(entries, out / "auroc_vs_exposure.png"))
        parts.append("![AUROC versus exposure](auroc_vs_exposure.png)\n")
    if unfinished:
        parts.append(f"Left out ({len(unfinished)} run(s) not finished): "
                     + "; ".join(f"`{u['run']}`: {u['missing']}" for u in unfinished) + "\n")
    return "\n".join(parts), plot


def build_report(conditions: dict[str, dict[str, Any]], out_dir: str | Path, metrics: list[str],
                 title: str = "Detector study", exposure_dirs: list[Path] | None = None,
                 sample_size_dirs: list[str] | None = None) -> dict[str, Any]:
    """Gather the study's runs into report.md, report.json and PNG plots in `out_dir`.

    `conditions` maps verbatim/paraphrased to {run_dir, ablations_dir, baselines_dir} (None: not run);
    a condition with none of them is left out. `exposure_dirs`: contamination runs made with the baselines
    stage at several exposure levels (`collect_exposure`), shown as one table per leak kind and a plot.
    `sample_size_dirs`: more ablations dirs whose sample-size study is shown (a larger benchmark's run).
    """
    from zcp.validate.ablations import (
        full_cot_markdown,
        plot_sample_size,
        sample_size_markdown,
        truncation_markdown,
    )

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
    for k, d in enumerate(sample_size_dirs or []):
        ab = read_json(Path(d) / "summary.json")
        s = ab.get("sample_size")
        if not s:
            raise ValueError(f"{d}/summary.json: no sample_size study (run it with ablations=[sample_size])")
        n_c = max((r["n"] for r in s["rows"] if r["split"] == "C"), default=0)
        n_u = max((r["n"] for r in s["rows"] if r["split"] == "U"), default=0)
        parts.append(f"## Sample size on `{Path(d).name}` ({n_c} C / {n_u} U items; {s['subsets']} random subsets "
                     f"per N, B = {s['bootstrap_samples']} per seed)\n\n" + sample_size_markdown(s["rows"], s["alpha"]))
        plot_sample_size(s["rows"], out / f"sample_size_extra{k}.png", f"C_cont versus N — {Path(d).name}")
        parts.append(f"![C_cont versus N](sample_size_extra{k}.png)\n")
        report.setdefault("sample_size", {})[str(d)] = s
    if exposure_dirs:
        entries, unfinished = collect_exposure(exposure_dirs, metrics)
        md, plot = exposure_section(entries, unfinished, out)
        parts.append(md)
        report["exposure"] = {"runs": entries, "unfinished": unfinished}
        if plot:
            plots["auroc_vs_exposure"] = plot
    report["plots"] = plots
    (out / "report.md").write_text("\n".join(parts))
    write_json(out / "report.json", report)
    return report


def run_report(cfg: Any) -> dict[str, Any]:
    """Entry point of evaluate/run_report.py."""
    from zcp.config import run_dir, save_config, to_dict, validate
    from zcp.core.tracking import Tracker
    from zcp.errors import ConfigError

    rep = validate(cfg)["report"]
    conditions = {c: vars(getattr(rep, c)) for c, _ in CONDITIONS}
    for cond, src in conditions.items():
        for key, val in src.items():
            if val and not Path(val).exists():
                raise ConfigError(f"report.{cond}.{key}={val}: no such directory")
            if val and key != "run_dir" and not (Path(val) / "summary.json").exists():
                raise ConfigError(f"report.{cond}.{key}={val}: no summary.json (is its run finished?)")
    for d in rep.sample_size_dirs:
        if not (Path(d) / "summary.json").exists():
            raise ConfigError(f"report.sample_size_dirs: {d}: no summary.json (is its run finished?)")
    for r in rep.exposure.runs:
        if not Path(r).is_dir():
            raise ConfigError(f"report.exposure.runs: {r}: no such directory")
    exposure_dirs = exposure_run_dirs(rep.exposure.root, rep.exposure.name, list(rep.exposure.runs))
    if rep.exposure.name and not any(d.name.startswith(f"{rep.exposure.name}__") for d in exposure_dirs):
        raise ConfigError(f"report.exposure.name={rep.exposure.name}: no {rep.exposure.root}/{rep.exposure.name}__*/ "
                          "run directory (run conf/experiment/detector_exposure.yaml first)")
    if not any(v for src in conditions.values() for v in src.values()) and not exposure_dirs \
            and not rep.sample_size_dirs:
        raise ConfigError("report: set at least one of report.{verbatim,paraphrased}.{run_dir,ablations_dir,baselines_dir}"
                          ", report.exposure.{name,runs} or report.sample_size_dirs")
    out = run_dir(cfg, "report", "study")
    save_config(cfg, out)
    report = build_report(conditions, out, list(rep.metrics), rep.title, exposure_dirs, list(rep.sample_size_dirs))
    with Tracker(cfg.get("logger"), run_config=to_dict(cfg), run_dir=str(out), job_type="report") as tr:
        for cond, entry in report["conditions"].items():
            if entry.get("detectors"):
                tr.table(f"detectors/{cond}", [{k: r.get(k) for k in ("label", "auroc", "tpr_at_5fpr", "c_decision",
                                                                       "u_decision")} for r in entry["detectors"]])
        for e in (report.get("exposure") or {}).get("runs", []):
            tr.table(f"exposure/{e['kind']}/{e['level']:g}", [{k: r.get(k) for k in ("label", "auroc", "tpr_at_5fpr",
                                                                                    "c_decision", "u_decision")}
                                                            for r in e["detectors"]])
        for key, p in report["plots"].items():
            tr.image(key, p)
        tr.artifact("study-report", "zcp-report", [str(out / "report.md"), str(out / "report.json")])
    print((out / "report.md").read_text())
    print(f"wrote {out}")
    return report
