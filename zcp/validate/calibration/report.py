"""The calibration study's reports: table.md (every row), summary.md (the compact tables), summary.json and the
plots (type1.png, power.png); part (d)'s markdown comes from zcp.validate.calibration.real_originals."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from zcp.validate.calibration.real_originals import markdown as real_originals_markdown
from zcp.validate.calibration.tests import COMBINED, TEST_LABEL, TESTS, kind_of, rate_ci

# --------------------------------------------------------------------------------------------------
# reports


def _fmt_rate(row: Mapping[str, Any], a: float) -> str:
    return f"{row[f'rate@{a:g}']:.3f} [{row[f'lo@{a:g}']:.3f}, {row[f'hi@{a:g}']:.3f}]"


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def format_rows(rows: Sequence[Mapping[str, Any]], alphas: Sequence[float], title: str, *, effect: bool = False) -> str:
    """Markdown table: one row per (part, regime, metric, test, m, n, accuracy)."""
    a0 = alphas[0]
    head = ["part", "regime", "metric", "test", "m", "n", "accuracy", "mean score"]
    if effect:
        head.append("effect")
    head += [f"rate@{a0:g} [95% CI]"] + [f"rate@{a:g}" for a in alphas[1:]]
    if not effect:
        head += [f"attainable@{a0:g}", "flag"]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["part"], r["regime"], r["metric"], r["test"], str(r["m"]), str(r["n"]), _fmt(r.get("accuracy")),
                 _fmt(r.get("score_mean"))]
        if effect:
            cells.append(_fmt(r.get("effect"), 2))
        cells += [_fmt_rate(r, a0)] + [f"{r[f'rate@{a:g}']:.3f}" for a in alphas[1:]]
        if not effect:
            att = r.get(f"attainable@{a0:g}")
            cells += [_fmt(att) + (" (discrete-limited)" if r.get("discrete_limited") and att is not None else ""),
                      r.get("flag", "")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def max_type1(rows: Sequence[Mapping[str, Any]], alpha: float) -> list[dict[str, Any]]:
    """Per simulated regime, metric kind and test: the largest type-I estimate over the grid (its CI and
    cell), the pooled rate over all cells (with CI), the cells whose whole CI lies above alpha (about 2.5%
    of cells by chance alone when the test is exact), the cells flagged high / low, and for the exact
    binary test the expected rate (its mean attainable size, which the pooled rate should match)."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["part"] not in ("a", "a-joint"):
            continue
        kind = r["metric"] if r["metric"] == COMBINED else kind_of(str(r["metric"]))
        reg = r["regime"]
        groups[(str(reg), kind, str(r["test"]))].append(r)
    a = f"{alpha:g}"
    out = []
    for (reg, kind, test), rs in groups.items():
        worst = max(rs, key=lambda r: r[f"rate@{a}"])
        k = sum(round(r[f"rate@{a}"] * r["replicates"]) for r in rs)
        total = sum(r["replicates"] for r in rs)
        lo, hi = rate_ci(k, total)
        row = {"regime": reg, "kind": kind, "test": test, "cells": len(rs),
               "max_rate": worst[f"rate@{a}"], "lo": worst[f"lo@{a}"], "hi": worst[f"hi@{a}"],
               "at": f"m={worst['m']}, n={worst['n']}, acc={_fmt(worst.get('accuracy'), 2)}",
               "pooled": k / total, "pooled_lo": lo, "pooled_hi": hi,
               "ci_above": sum(r[f"lo@{a}"] > alpha for r in rs),
               "high": sum(r.get("flag") == "high" for r in rs), "low": sum(r.get("flag") == "low" for r in rs)}
        att = [(r[f"attainable@{a}"], r["replicates"]) for r in rs if f"attainable@{a}" in r]
        if att and len(att) == len(rs):
            row["expected"] = sum(x * w for x, w in att) / sum(w for _, w in att)
        out.append(row)
    return out


def pivot_type1(mt: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: tests x regimes, each cell the largest type-I over the grid with its CI."""
    cols = list(dict.fromkeys((r["regime"], r["kind"]) for r in mt))
    tests = list(dict.fromkeys(r["test"] for r in mt))
    by = {(r["regime"], r["kind"], r["test"]): r for r in mt}
    head = ["test", *[reg if reg != "joint" else f"joint: {kind}" for reg, kind in cols]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in tests:
        cells = [TEST_LABEL.get(t, t)]
        for reg, kind in cols:
            r = by.get((reg, kind, t))
            cells.append(f"{r['max_rate']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]" if r else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def convention_summary(rows: Sequence[Mapping[str, Any]], alpha: float, high: float) -> str:
    """Markdown: per (dependence, C) and verdict (multiconv over every (convention, metric); combined, one
    convention's) the largest type-I estimate over the accuracy x m x n grid with its CI and cell, the pooled rate,
    and the cells above `high` (part a-conv)."""
    rs = [r for r in rows if r["part"] == "a-conv"]
    if not rs:
        return ""
    a = f"{alpha:g}"
    lines = ["| regime | verdict | tests | cells | max type-I [95% CI] | at | pooled [95% CI] | cells > "
             f"{high:g} |", "|---|---|---|---|---|---|---|---|"]
    for key in dict.fromkeys((r["regime"], r["metric"]) for r in rs):
        sub = [r for r in rs if (r["regime"], r["metric"]) == key]
        worst = max(sub, key=lambda r: r[f"rate@{a}"])
        k = sum(round(r[f"rate@{a}"] * r["replicates"]) for r in sub)
        total = sum(r["replicates"] for r in sub)
        lo, hi = rate_ci(k, total)
        lines.append(f"| {key[0]} | {key[1]} | {worst.get('n_tests')} | {len(sub)} | {_fmt_rate(worst, alpha)} | "
                     f"m={worst['m']}, n={worst['n']}, acc={_fmt(worst.get('accuracy'), 2)} | {k / total:.4f} "
                     f"[{lo:.4f}, {hi:.4f}] | {sum(r[f'rate@{a}'] > high for r in sub)} |")
    return "\n".join(lines) + "\n"


def attainable_matrix(rows: Sequence[Mapping[str, Any]], alpha: float) -> str:
    """Markdown: the exact binary test's attainable size per (m, n) x accuracy; * = discrete-limited."""
    cells = [r for r in rows if r["part"] == "a" and r["regime"] == "binary" and r["test"] == "permutation"]
    if not cells:
        return ""
    accs = sorted({r["accuracy"] for r in cells})
    lines = ["| m | n | " + " | ".join(f"acc {a:g}" for a in accs) + " |", "|" + "---|" * (len(accs) + 2)]
    for m in sorted({r["m"] for r in cells}):
        for n in sorted({r["n"] for r in cells}):
            by = {r["accuracy"]: r for r in cells if r["m"] == m and r["n"] == n}
            vals = []
            for a in accs:
                r = by.get(a)
                if r is None:
                    vals.append("–")
                    continue
                v = r.get(f"attainable@{alpha:g}", float("nan"))
                vals.append(f"{v:.3f}" + ("*" if r.get("discrete_limited") else ""))
            lines.append(f"| {m} | {n} | " + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


def rate_matrix(rows: Sequence[Mapping[str, Any]], part: str, alpha: float, tests: Sequence[str]) -> str:
    """Markdown: rejection rate (with CI) per (source, metric) x test for a real-data part."""
    rs = [r for r in rows if r["part"] == part]
    if not rs:
        return ""
    keys: list[tuple[str, str, Any]] = []
    for r in rs:
        k = (r["regime"], r["metric"], r["n"])
        if k not in keys:
            keys.append(k)
    tests = [t for t in tests if any(r["test"] == t for r in rs)]
    head = ["source", "metric", "m", "n", "score", *[TEST_LABEL.get(t, t) for t in tests]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for reg, mt, n in keys:
        by = {r["test"]: r for r in rs if (r["regime"], r["metric"], r["n"]) == (reg, mt, n)}
        first = next(iter(by.values()))
        cells = [reg, mt, str(first["m"]), str(n), _fmt(first.get("accuracy"))]
        for t in tests:
            r = by.get(t)
            cells.append(_fmt_rate(r, alpha) + (" ⚑" if r.get("flag") == "high" else "") if r else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def power_matrix(rows: Sequence[Mapping[str, Any]], alpha: float) -> str:
    """Markdown: power per (regime, m, n, accuracy, test) x effect."""
    rs = [r for r in rows if r["part"] == "power"]
    if not rs:
        return ""
    lines = []
    for reg in dict.fromkeys(r["regime"] for r in rs):
        sub = [r for r in rs if r["regime"] == reg]
        effects = sorted({r["effect"] for r in sub})
        head = ["regime", "m", "n", "accuracy", "test", *[f"δ={e:g}" for e in effects]]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        keys = list(dict.fromkeys((r["m"], r["n"], r["accuracy"], r["test"]) for r in sub))
        for m, n, acc, t in keys:
            by = {r["effect"]: r for r in sub if (r["m"], r["n"], r["accuracy"], r["test"]) == (m, n, acc, t)}
            vals = [f"{by[e][f'rate@{alpha:g}']:.3f}" if e in by else "–" for e in effects]
            lines.append(f"| {reg} | {m} | {n} | {acc:g} | {t} | " + " | ".join(vals) + " |")
        lines.append("")
    return "\n".join(lines)


def summary_markdown(rows: Sequence[Mapping[str, Any]], alphas: Sequence[float], info: Mapping[str, Any]) -> str:
    """The compact report for the README: worst type-I per test, discrete-limited cells, (b), (c), power."""
    a0 = alphas[0]
    out = [f"## ZCP test calibration (alpha = {a0:g}; Clopper-Pearson 95% CIs)", ""]
    mt = max_type1(rows, a0)
    if mt:
        out += [f"### Largest type-I error at alpha = {a0:g} over the simulated grid [95% CI]", "", pivot_type1(mt),
                "Detail: the cell of the largest rate; the pooled rate over all cells; cells whose CI lies wholly "
                f"above {a0:g} (~2.5% of cells by chance for an exact test); cells flagged high (> "
                f"{info['flags']['high']:g}) or low (< {info['flags']['low']:g}, not discrete-limited); for the "
                "exact binary test the expected rate = its mean attainable size. Bonferroni (combined) is "
                "conservative by design.", "",
                "| regime | kind | test | cells | max type-I [95% CI] | at | pooled [95% CI] | expected | "
                "CI above α | high | low |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in mt:
            out.append(f"| {r['regime']} | {r['kind']} | {TEST_LABEL.get(r['test'], r['test'])} | {r['cells']} | "
                       f"{r['max_rate']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}] | {r['at']} | "
                       f"{r['pooled']:.4f} [{r['pooled_lo']:.4f}, {r['pooled_hi']:.4f}] | "
                       f"{_fmt(r.get('expected'), 4)} | {r['ci_above']} | {r['high']} | {r['low']} |")
        out.append("")
    cm = convention_summary(rows, a0, info["flags"]["high"])
    if cm:
        out += [f"### Multi-convention verdict on simulated nulls at alpha = {a0:g} [95% CI]", "", cm]
    am = attainable_matrix(rows, a0)
    if am:
        out += [f"### Attainable size of the exact binary test at alpha = {a0:g} (mean over replicates; "
                f"* = discrete-limited, below {info['discrete_below']:g})", "", am]
    for part, title in (("b", "(b) Real-score nulls (pseudo-original = a random reference draw)"),
                        ("c", "(c) Base model on random benchmark subsets (real originals vs references)")):
        rm = rate_matrix(rows, part, a0, [*TESTS, "sign+bootstrap"])
        if rm:
            out += [f"### {title}: rejection rate at alpha = {a0:g}", "", rm]
            bm = info.get("base_model") or {}
            if part == "c" and bm:
                cfg_c = info.get("base_model_settings") or {}
                out += [f"Pool: {bm.get('pool_items')} items with reference draws ({bm.get('items_without_reference')} "
                        f"without any, left out; prompts beyond the model's context ({bm.get('overflow_policy')}): "
                        f"{bm.get('overflow_items')} items, {bm.get('overflow_rows')} reference rows); "
                        f"{bm.get('units')} units probed once ({', '.join(bm.get('probe_metrics', []))}) "
                        f"in {bm.get('scoring_seconds', 0):.0f} s by {bm.get('model')}; {cfg_c.get('subsets')} random "
                        f"subsets of {cfg_c.get('subset_size')} items, B = {cfg_c.get('B')}. The subsets share items, "
                        "so their verdicts are dependent and the CI is nominal.", ""]
            if part == "b":
                out += ["The pseudo-original is a uniform pick among an item's reference draws, so H0 holds by "
                        "construction; m = reference draws left per item.", ""]
    full = info.get("base_model", {}).get("full_pool")
    if full:
        tests = [k[2:] for k in full[0] if k.startswith("p_")]
        out += ["### (c) Whole pool, one test per metric (p-values)", "",
                "| metric | n | S | S_ref | " + " | ".join(tests) + " |", "|" + "---|" * (4 + len(tests))]
        for r in full:
            out.append(f"| {r['metric']} | {r['n']} | {_fmt(r.get('s'))} | {_fmt(r.get('s_ref'))} | "
                       + " | ".join(f"{r['p_' + t]:.3g}" for t in tests) + " |")
        out.append("")
    pm = power_matrix(rows, a0)
    if pm:
        out += [f"### Power at alpha = {a0:g}", "", pm]
    rt = info.get("runtime_seconds")
    if rt:
        out += ["Runtime (s): " + ", ".join(f"{k} {v:.0f}" for k, v in rt.items()), ""]
    return "\n".join(out)


def plot_type1(rows: Sequence[Mapping[str, Any]], path: str | Path, alpha: float, ns: Sequence[int]) -> Path | None:
    """Type-I error versus accuracy: one row of panels per regime (and the joint combined verdict), one
    column per m; one colour per test, one line style per n (named in the panel title); the exact
    binary test's attainable size in dotted grey. The band is [0.03, 0.07]; log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    rs = [r for r in rows if r["part"] == "a" or (r["part"] == "a-joint" and r["metric"] == COMBINED)]
    if not rs:
        return None

    def reg_of(r: Mapping[str, Any]) -> str:
        return r["regime"] if r["part"] == "a" else "joint: combined"

    regs = list(dict.fromkeys(reg_of(r) for r in rs))
    ms = sorted({r["m"] for r in rs})
    tests = list(dict.fromkeys(r["test"] for r in rs))
    colours = dict(zip(tests, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    styles = ["-", "--", "-.", ":"]
    fig, axes = plt.subplots(len(regs), len(ms), figsize=(3.6 * len(ms), 2.8 * len(regs)), squeeze=False,
                             sharex=True, sharey=True)
    floor = 2e-3
    for i, reg in enumerate(regs):
        for j, m in enumerate(ms):
            ax = axes[i][j]
            sub = [r for r in rs if reg_of(r) == reg and r["m"] == m]
            avail = sorted({r["n"] for r in sub})
            use_n = [n for n in ns if n in avail] or ([avail[0], avail[-1]] if len(avail) > 1 else avail)
            for k, n in enumerate(use_n):
                for t in tests:
                    pts = sorted((r["accuracy"], r[f"rate@{alpha:g}"]) for r in sub if r["test"] == t and r["n"] == n)
                    if pts:
                        ax.plot([p[0] for p in pts], [max(p[1], floor) for p in pts], styles[k % 4], marker="o",
                                ms=3, color=colours[t])
                    att = sorted((r["accuracy"], r[f"attainable@{alpha:g}"]) for r in sub
                                 if r["test"] == t and r["n"] == n and f"attainable@{alpha:g}" in r)
                    if att:
                        ax.plot([p[0] for p in att], [max(p[1], floor) for p in att], styles[k % 4], color="grey",
                                lw=0.8, alpha=0.7)
            ax.axhspan(0.03, 0.07, color="green", alpha=0.08)
            ax.axhline(alpha, color="black", lw=0.8)
            ax.set_yscale("log")
            ax.set_ylim(floor * 0.9, 1.05)
            named = ", ".join(f"n={n} {['solid', 'dashed', 'dash-dot', 'dotted'][k % 4]}" for k, n in enumerate(use_n))
            ax.set_title(f"{reg}, m={m}\n({named})", fontsize=8)
            if i == len(regs) - 1:
                ax.set_xlabel("mean accuracy / score")
            if j == 0:
                ax.set_ylabel(f"type-I at α={alpha:g}")
    handles = [Line2D([], [], color=colours[t], marker="o", ms=3, label=TEST_LABEL.get(t, t)) for t in tests]
    handles.append(Line2D([], [], color="grey", lw=0.8, label="attainable size of the exact binary test"))
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=7)
    height = 2.8 * len(regs)  # fixed margins (tight_layout costs seconds on 12 log-scale panels)
    fig.subplots_adjust(left=0.08, right=0.98, top=1 - 0.45 / height, hspace=0.45, wspace=0.08,
                        bottom=(0.55 + 0.14 * math.ceil(len(handles) / 3)) / height)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_power(rows: Sequence[Mapping[str, Any]], path: str | Path, alpha: float) -> Path | None:
    """Power versus effect size: one panel per (regime, m, accuracy); one colour per test, style per n."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rs = [r for r in rows if r["part"] == "power"]
    if not rs:
        return None
    regs = list(dict.fromkeys(r["regime"] for r in rs))
    cols = list(dict.fromkeys((r["m"], r["accuracy"]) for r in rs))
    tests = list(dict.fromkeys(r["test"] for r in rs))
    ns = sorted({r["n"] for r in rs})
    colours = dict(zip(tests, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    styles = ["-", "--", "-.", ":"]
    fig, axes = plt.subplots(len(regs), len(cols), figsize=(3.4 * len(cols), 2.7 * len(regs)), squeeze=False,
                             sharey=True)
    for i, reg in enumerate(regs):
        for j, (m, acc) in enumerate(cols):
            ax = axes[i][j]
            for k, n in enumerate(ns):
                for t in tests:
                    pts = sorted((r["effect"], r[f"rate@{alpha:g}"]) for r in rs
                                 if r["regime"] == reg and r["m"] == m and r["accuracy"] == acc and r["n"] == n
                                 and r["test"] == t)
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], styles[k % 4], marker="o", ms=3,
                                color=colours[t], label=f"{t}, n={n}")
            ax.axhline(alpha, color="black", lw=0.8)
            ax.set_ylim(-0.02, 1.02)
            ax.set_title(f"{reg}, m={m}, acc={acc:g}", fontsize=9)
            ax.set_xlabel("effect δ (probability)" if reg == "binary" else "effect δ (logit)")
            if j == 0:
                ax.set_ylabel(f"power at α={alpha:g}")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colours[t], marker="o", ms=3, label=TEST_LABEL.get(t, t)) for t in tests]
    handles += [Line2D([], [], color="black", ls=styles[k % 4], label=f"n={n}") for k, n in enumerate(ns)]
    fig.legend(handles=handles, loc="lower center", ncol=min(3, len(handles)), fontsize=7)
    height = 2.7 * len(regs)
    fig.subplots_adjust(left=0.1, right=0.98, top=1 - 0.35 / height, hspace=0.6, wspace=0.08,
                        bottom=(0.75 + 0.14 * math.ceil(len(handles) / 3)) / height)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path



def write_calibration_reports(rows: Sequence[Mapping[str, Any]], alphas: Sequence[float], info: Mapping[str, Any],
                              config: Mapping[str, Any], out: str | Path, *, plot_n: Sequence[int]) -> dict[str, Path]:
    """table.md, summary.md, summary.json and the plots into `out`; `config` (the run's, resolved) goes into
    summary.json, `plot_n` (the job's checked `plots.n`) are the n values drawn in type1.png."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    a0 = alphas[0]
    sections = [("a", "(a) Simulated nulls"), ("a-joint", "(a) Joint metrics and the combined verdict"),
                ("a-conv", "(a) Multi-convention verdict (C answer conventions per item; multiconv = Bonferroni over "
                 "every (convention, metric), combined = one convention's verdict)"),
                ("b", "(b) Real-score nulls"), ("c", "(c) Base model on random benchmark subsets")]
    parts = []
    for part, title in sections:
        rs = [r for r in rows if r["part"] == part and part != "d"]
        if rs:
            parts.append(format_rows(rs, alphas, title))
    prs = [r for r in rows if r["part"] == "power"]
    if prs:
        parts.append(format_rows(prs, alphas, "Power", effect=True))
    notes = [f"Rates: share of replicates with p <= alpha; [95% Clopper-Pearson CI]. flag: high = rate@{a0:g} > "
             f"{info['flags']['high']:g}; low = below {info['flags']['low']:g} in a cell that is not discrete-limited "
             f"(the exact binary test's mean attainable size >= {info['discrete_below']:g}). attainable = largest null "
             "tail probability <= alpha of the exact test, averaged over replicates (its actual size)."]
    files: dict[str, Path] = {}
    files["table"] = out / "table.md"
    files["table"].write_text("# ZCP test calibration: every cell\n\n" + "\n".join(notes) + "\n\n" + "\n".join(parts))
    files["summary_md"] = out / "summary.md"
    head = ""
    d_rows = [r for r in rows if r["part"] == "d"]
    if d_rows:  # the headline: the false-positive rate a user meets with real originals
        head = real_originals_markdown(d_rows, info.get("real_originals") or {}, a0) + "\n"
        (out / "real_originals.md").write_text(head)
        files["real_originals"] = out / "real_originals.md"
    files["summary_md"].write_text(head + summary_markdown([r for r in rows if r["part"] != "d"], alphas, info))
    files["summary_json"] = out / "summary.json"
    files["summary_json"].write_text(json.dumps({"config": config, "info": info, "max_type1": max_type1(rows, a0),
                                                 "rows": list(rows)}, indent=1, default=str))
    sim_ns = [int(n) for n in plot_n]
    p = plot_type1(rows, out / "type1.png", a0, sim_ns)
    if p is not None:
        files["type1"] = p
    p = plot_power(rows, out / "power.png", a0)
    if p is not None:
        files["power"] = p
    return files
