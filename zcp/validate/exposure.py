"""The exposure study's report: collect every simulation run of a sweep and plot C_cont on C and U
against exposure, one line per contamination format, so that where ZCP fires and where it does not
is visible at a glance.

    python evaluate/run_exposure_report.py root=outputs/contaminate name=exposure

Also runs by itself at the end of `python train/run_demo.py experiment=exposure_sweep` (a Hydra callback).
A sham run (exposure.leak_fraction=0: the recipe on non-benchmark items, nothing of C leaked) is labelled
"sham" in the format column and the plot: it is the fine-tuning's false-positive control, not exposure 0.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from zcp.core.rundir import sweep_runs
from zcp.probe.metrics import metric_label
from zcp.probe.report import c_cont_text
from zcp.simulate.simulation_config import ExposureConfig


def collect(root: str | Path, name: str = "exposure") -> list[dict[str, Any]]:
    """One row per finished run under root/<name>__* (the sweep collector, zcp.core.rundir.sweep_runs): the knobs,
    full-CoT accuracies and FT C_cont per split/metric."""
    rows = []
    for run in sweep_runs(root, f"{name}__*")[0]:
        sim, exp = run.simulation_summary, run.exposure
        row: dict[str, Any] = {"run": run.name, **exp["knobs"], "arm": run_arm(exp),
                               "base_model": Path(str(exp.get("base_model", ""))).name}
        for split_row in (sim.get("table6") or {}).get("rows", []):
            for stage, key in (("before", "base"), ("final", "final")):
                if key in split_row:
                    row[f"cot_acc/{split_row['split']}/{stage}"] = split_row[key]
        for model, results in sim["results"].items():
            for r in results:
                if r["variant"] == "original":
                    row[f"{model}/{r['split']}/{r['metric']}/c_cont"] = r["c_cont"]
                    row[f"{model}/{r['split']}/{r['metric']}/gap"] = r["s"] - r["s_ref"]
        for d in sim.get("did", []):
            row[f"did/{d['split']}/{d['metric']}"] = d["did"]
        rows.append(row)
    return rows


def run_arm(exposure: dict[str, Any]) -> str:
    """A run's arm from its exposure.json: "sham" (leak_fraction=0, nothing of C leaked) or "leak"."""
    if exposure.get("arm"):
        return str(exposure["arm"])
    knobs = exposure.get("knobs") or {}  # a run before leak_fraction existed leaked with the default
    return "sham" if float(knobs.get("leak_fraction", ExposureConfig.leak_fraction)) == 0.0 else "leak"


def exposure_level(row: dict[str, Any]) -> float:
    """Times each leaked item was seen in SFT: paraphrase variants (k, or 1 for verbatim) x epochs."""
    return max(1, int(row["k"])) * float(row["sft_epochs"])


ANSWER_FORMAT_LABEL = {"probe": "probe line", "hash": "`#### N`", "sentence": "`The answer is N.`",
                       "boxed": "bare `\\boxed{N}`", "mix": "mix of the four"}


def format_label(row: dict[str, Any]) -> str:
    """The leak's format: CoT / answer share, and the answer line when it is not the probe's (answer_format);
    "sham, ..." for a sham run (the same format on non-benchmark items)."""
    f = float(row["answer_only_fraction"])
    label = "CoT only" if f == 0 else "answer only" if f == 1 else f"CoT + answer ({f:.0%} answer-only)"
    af = row.get("answer_format") or "probe"
    label = label if af == "probe" else f"{label}, {ANSWER_FORMAT_LABEL.get(af, af)}"
    return f"sham, {label}" if row.get("arm") == "sham" else label


def plot(rows: list[dict[str, Any]], path: str | Path, metrics: tuple[str, ...] = ("p_all", "p_first", "acc", "con")) -> Path:
    """C_cont versus exposure, per metric; solid = C, dashed = U; one colour per format."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = tuple(m for m in metrics if any(f"FT/C/{m}/c_cont" in r for r in rows))
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 4.0), squeeze=False)
    fmts = sorted({format_label(r) for r in rows})
    colours = dict(zip(fmts, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    for ax, metric in zip(axes[0], metrics, strict=True):
        for fmt in fmts:
            for split, ls in (("C", "-"), ("U", "--")):
                pts = defaultdict(list)
                for r in rows:
                    key = f"FT/{split}/{metric}/c_cont"
                    if format_label(r) == fmt and key in r:
                        pts[exposure_level(r)].append(r[key])
                xs = sorted(pts)
                if xs:
                    ys = [sum(pts[x]) / len(pts[x]) for x in xs]
                    ax.plot(xs, ys, ls, marker="o", color=colours[fmt], label=f"{fmt} — {split}")
        ax.axhline(0.5, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        levels = sorted({exposure_level(r) for r in rows})
        ax.set_xticks(levels, [f"{x:g}" for x in levels], fontsize=8, rotation=90)  # close levels stay legible
        ax.minorticks_off()
        ax.set_ylim(0.45, 1.02)
        ax.set_xlabel("exposure (paraphrase variants x SFT epochs)")
        ax.set_title(f"C_cont({metric_label(metric)})")
    axes[0][0].set_ylabel("C_cont")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=min(4, len(labels)), frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))  # the legend sits below the axes, never on the data
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def table(rows: list[dict[str, Any]], metrics: tuple[str, ...] = ("p_all", "p_first", "acc", "con")) -> str:
    """Markdown: one row per run, sorted by format and exposure."""
    metrics = tuple(m for m in metrics if any(f"FT/C/{m}/c_cont" in r for r in rows))
    head = ["format", "k", "epochs", "GRPO steps", "clean share", "CoT acc C before→after", "CoT acc U before→after"]
    head += [f"C_cont {metric_label(m)} C / U" for m in metrics]
    bases = sorted({r.get("base_model") or "" for r in rows})
    with_base = len(bases) > 1
    with_base_cc = any("base/C/p_all/c_cont" in r for r in rows)
    if with_base_cc:
        head.append("base model C_cont P_all C / U")
    if with_base:
        head.insert(0, "base model")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(rows, key=lambda r: (r.get("base_model") or "", format_label(r), exposure_level(r))):
        def acc(split: str, r: dict[str, Any] = r) -> str:
            b, a = r.get(f"cot_acc/{split}/before"), r.get(f"cot_acc/{split}/final")
            return f"{b:.2f}→{a:.2f}" if b is not None and a is not None else "–"

        c_split = "C" if r.get("arm") == "sham" else "C_leaked"  # a sham's C is one split (nothing leaked)
        cells = [format_label(r), str(r["k"]), f"{r['sft_epochs']:g}", str(r["grpo_steps"]),
                 f"{r.get('clean_fraction', 0.0):g}", acc(c_split), acc("U")]
        cells += [" / ".join(c_cont_text(r.get(f"FT/{s}/{m}/c_cont", float("nan")), 0.0, False) for s in ("C", "U"))
                  for m in metrics]
        if with_base_cc:
            cells.append(" / ".join(c_cont_text(r.get(f"base/{s}/p_all/c_cont", float("nan")), 0.0, False)
                                    for s in ("C", "U")))
        if with_base:
            cells.insert(0, r.get("base_model") or "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(root: str | Path = "outputs/contaminate", name: str = "exposure", out: str | Path | None = None) -> dict[str, Any]:
    """Collect the sweep's runs and write exposure_report.{md,json,png}; returns the rows."""
    rows = collect(root, name)
    out_dir = Path(out or Path(root) / f"{name}_report")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "exposure_report.json").write_text(json.dumps(rows, indent=2))
    if rows:
        (out_dir / "exposure_report.md").write_text(table(rows))
        plot(rows, out_dir / "exposure_report.png")
        print(table(rows))
    print(f"{len(rows)} runs collected; report in {out_dir}")
    return {"rows": rows, "dir": str(out_dir)}


try:  # the Hydra callback that writes the report when the sweep ends
    from hydra.experimental.callback import Callback

    class ExposureReportCallback(Callback):
        """Hydra callback: after a multirun, collect the runs and write the exposure report."""

        def __init__(self, root: str = "outputs/contaminate", name: str = "exposure") -> None:
            self.root, self.name = root, name

        def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
            write_report(self.root, self.name)
except ImportError:  # pragma: no cover
    pass
