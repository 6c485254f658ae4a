"""Markdown of the adaptive-evader study (zcp.validate.evader): the detector table, the costs, the suppression
signals per convention, and their false-positive rate on clean sets."""

from __future__ import annotations

from typing import Any

# detector rows of the table, in this order (those present in a run's baselines; others follow)
ORDER = ["ppl", "zlib", "mink5", "mink10", "mink20", "mink30", "mink50", "minkpp5", "minkpp10", "minkpp20",
         "minkpp30", "minkpp50", "ref", "dpcc", "recon", "guided", "trap", "zcp_acc", "zcp_con", "zcp_p_first",
         "zcp_p_all"]


def _p(x: Any) -> str:
    if x is None:
        return "–"
    x = float(x)
    return f"{x:.1e}" if x < 1e-3 else f"{x:.3f}"


def _verdict(v: dict[str, Any] | None) -> str:
    if not v:
        return "–"
    text = _p(v.get("p"))
    return f"**{text}**" if v.get("flagged") else text


def _sig(s: dict[str, Any] | None) -> str:
    if not s:
        return "–"
    text = _p(s["p_value"])
    return f"**{text}**" if s["flagged"] else text


def _baseline_cell(row: dict[str, Any] | None) -> str:
    if not row:
        return "–"
    if row.get("skipped"):
        return "skipped"
    parts = []
    for split in ("C", "U"):
        d = row.get(split) or {}
        flag, p = d.get("decision"), d.get("p")
        text = _p(p) if p is not None else ("–" if flag is None else ("yes" if flag else "no"))  # a rule: no p
        parts.append(f"**{text}**" if flag else text)
    auroc = row.get("auroc")
    return f"{parts[0]} / {parts[1]} (AUROC {auroc:.2f})" if auroc is not None else f"{parts[0]} / {parts[1]}"


def _acc(x: Any) -> str:
    return "–" if x is None else f"{float(x):.2f}"


def detector_table(runs: list[dict[str, Any]]) -> list[str]:
    """One row per detector, one column per run: p on C / p on U (bold: flagged at 0.05; a rule-based detector
    without a p, e.g. DPCC: yes / no), AUROC C vs U."""
    head = "| detector | " + " | ".join(r["label"] for r in runs) + " |"
    lines = [head, "|---|" + "---|" * len(runs)]

    def zrow(name: str, key: str) -> str:
        return f"| {name} | " + " | ".join(f"{_verdict(r[key].get('C'))} / {_verdict(r[key].get('U'))}"
                                           for r in runs) + " |"

    lines.append(zrow("ZCP, probe's line (fixed pre-fill)", "zcp_fixed"))
    lines.append(zrow("ZCP, `probe.prefill=auto`", "zcp_auto"))
    lines.append("| suppression (lower tail, Bonferroni) | " + " | ".join(
        f"{_sig(r['suppression']['C']['suppression'])} / {_sig(r['suppression']['U']['suppression'])}"
        for r in runs) + " |")
    lines.append("| contrast (below under one, above under another) | " + " | ".join(
        f"{_sig(r['suppression']['C']['contrast'])} / {_sig(r['suppression']['U']['contrast'])}" for r in runs) + " |")
    names: list[str] = []
    for r in runs:
        names += [n for n in r["baselines"] if n not in names]
    names.sort(key=lambda n: (n.split("@")[0] not in ORDER, ORDER.index(n.split("@")[0]) if n.split("@")[0] in ORDER
                              else 0, "@" in n, n))
    for n in names:
        label = next(r["baselines"][n]["label"] for r in runs if n in r["baselines"])
        lines.append(f"| {label} (`{n}`) | " + " | ".join(_baseline_cell(r["baselines"].get(n)) for r in runs) + " |")
    return lines


def cost_table(runs: list[dict[str, Any]]) -> list[str]:
    """Full-CoT accuracy (Table 6), zero-CoT accuracy on C, U and the neutral set per convention (base model's)."""
    lines = ["| run | full-CoT C (base → final) | full-CoT U (base → final) | convention | zero-CoT C (base) | "
             "zero-CoT U (base) | zero-CoT neutral (base) |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        t6 = r["table6"]
        c, u = t6.get("C_leaked") or {}, t6.get("U") or {}
        fc = f"{_acc(c.get('base'))} → {_acc(c.get('final'))}" if c else "–"
        fu = f"{_acc(u.get('base'))} → {_acc(u.get('final'))}" if u else "–"
        convs = list(r["zero_cot"]) or ["probe"]
        for i, conv in enumerate(convs):
            z, zb = r["zero_cot"].get(conv, {}), r["zero_cot_base"].get(conv, {})
            ne, nb = (r.get("neutral") or {}).get(conv, {}), (r.get("neutral_base") or {}).get(conv, {})
            lines.append(f"| {r['label'] if i == 0 else ''} | {fc if i == 0 else ''} | {fu if i == 0 else ''} | "
                         f"{conv} | {_acc(z.get('C'))} ({_acc(zb.get('C'))}) | {_acc(z.get('U'))} ({_acc(zb.get('U'))}) | "
                         f"{_acc(ne.get('acc'))} ({_acc(nb.get('acc'))}) |")
    return lines


def suppression_detail(runs: list[dict[str, Any]]) -> list[str]:
    """Per run and convention: S and S_ref of each metric on C, the lower- and upper-tail p."""
    lines = ["| run | convention | metric | S (C) | S_ref (C) | p lower (C) | p upper (C) | p lower (U) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        u_rows = {(x["convention"], x["metric"]): x for x in r["suppression"]["U"]["rows"]}
        for x in r["suppression"]["C"]["rows"]:
            ux = u_rows.get((x["convention"], x["metric"]), {})
            lines.append(f"| {r['label']} | {x['convention']} | {x['metric']} | {x['s']:.3f} | {x['s_ref']:.3f} | "
                         f"{_p(x['p_lower'])} | {_p(x['p_upper'])} | {_p(ux.get('p_lower'))} |")
    return lines


def fpr_table(fpr: dict[str, Any]) -> list[str]:
    """Clean sets flagged by each signal."""
    lines = ["| clean set | sets | suppression flagged | sets with >1 convention | contrast flagged |",
             "|---|---|---|---|---|"]
    kinds: dict[str, list[dict[str, Any]]] = {}
    for r in fpr["rows"]:
        kinds.setdefault(r["kind"], []).append(r)
    for kind, rows in kinds.items():
        multi = [r for r in rows if r["conventions"] > 1]
        lines.append(f"| {kind} | {len(rows)} | {sum(r['suppression_flagged'] for r in rows)} | {len(multi)} | "
                     f"{sum(bool(r['contrast_flagged']) for r in multi)} |")
    lines.append(f"| **all** | {fpr['n_sets']} | {fpr['suppression_flagged']} | {fpr['n_multi']} | "
                 f"{fpr['contrast_flagged']} |")
    return lines


def render(result: dict[str, Any]) -> str:
    """The generated part of docs/results/evader.md (the tables; the prose around them is written by hand)."""
    runs, meta = result["runs"], result["meta"]
    out = ["<!-- generated by scripts/evader_study.py: tables below -->", "",
           f"Generated {meta['utc']} UTC at {meta['commit']} on {meta['host']} ({meta['cpus']} CPUs, load "
           f"{', '.join(str(x) for x in meta['load'])}); the study took {meta['seconds']} s.", ""]
    if result.get("commands"):
        out += ["```bash", *result["commands"], "```", ""]
    out += ["### Runs", "", "| run | kind | run dir | fixed | auto | note |", "|---|---|---|---|---|---|"]
    out += [f"| {r['label']} | ({r['kind']}) | `{r['run_dir']}` | `{r['fixed']}` | `{r['auto']}` | {r['note']} |"
            for r in runs]
    out += ["", "### Detectors: p on C / p on U (bold = flagged at α = 0.05), AUROC of C vs U", "",
            *detector_table(runs), "", "### What the evasion costs the evader (zero-CoT accuracy: fine-tuned (base))",
            "", *cost_table(runs), "", "### The suppression signal per convention and metric", "",
            *suppression_detail(runs), "", "### False-positive rate of the suppression signals on clean sets", "",
            *fpr_table(result["fpr"]), ""]
    return "\n".join(out)
