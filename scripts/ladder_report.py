"""The CoT-only exposure ladder's report (`experiment=paper_recipe_ladder`): one row per rung, its sham beside it.

Usage:
    python scripts/ladder_report.py [--root outputs/contaminate] [--out DIR] [RUN_DIR[=LABEL] ...]

Without run dirs it reads every finished run under <root>/paper_recipe_ladder_*__* (the rung is the run's name after
`paper_recipe_ladder_`, the arm its exposure.json's: leak, or sham = exposure.leak_fraction=0). Given run dirs (e.g.
a resumed detection under another probe, `output_dir=...`), each is one row, labelled LABEL (default: its folder).
Per run, from table6.json, exposure.json, run_config.json and detect/simulation_summary.json: the training knobs
(SFT epochs, LoRA rank or full fine-tuning, learning rates), Table 6 full-CoT accuracy before/after on C (C_leaked
for a leak arm) and U, ZCP's per-metric p-value and C_cont on C and U (the fine-tuned model), its combined verdict
(Bonferroni over the metrics, and over the conventions under probe.prefill=auto, whose per-metric cells give the
smallest p over the conventions and name it), and the difference-in-differences against the base model
per metric (flagged: its smallest p-value times the number of metrics below alpha, the same Bonferroni rule).
Writes ladder_report.md and ladder_report.json to --out (default <root>/paper_recipe_ladder_report) and prints the md.

Why not evaluate/run_exposure_report.py: it groups by one run name and plots C_cont against k x epochs; the ladder's
rungs differ in LoRA rank and full fine-tuning (not on that axis), and the ladder needs the p-values, the verdicts
and the sham arm beside each rung.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from zcp.core.io import read_json
from zcp.core.rundir import ContaminationRun, run_unfinished, sweep_runs
from zcp.validate.exposure import run_arm

PREFIX = "paper_recipe_ladder"
METRICS = ("acc", "con", "p_first", "p_all")


def run_row(path: Path, label: str | None = None) -> dict[str, Any] | None:
    """The report row of one contamination run dir (None when its detection has not finished)."""
    if run_unfinished(path) is not None:  # the sweep collectors' one rule (zcp.core.rundir)
        return None
    run = ContaminationRun(path)
    sim, exp, cfg = run.simulation_summary, run.exposure, run.config
    arm = run_arm(exp)
    name = str(cfg.get("name", path.name))
    knobs = exp["knobs"]
    train = cfg.get("train") or {}
    row: dict[str, Any] = {
        "run": str(path), "label": label or _label(name, path),
        "arm": arm, "sft_epochs": knobs["sft_epochs"], "finetune": train.get("finetune", "lora"),
        "lora_r": knobs["lora_r"], "sft_lr": knobs["lr"], "grpo_lr": (train.get("grpo") or {}).get("learning_rate"),
        "grpo_steps": knobs["grpo_steps"], "n_items": (cfg.get("benchmark") or {}).get("n"),
    }
    c_split = "C" if arm == "sham" else "C_leaked"
    for r in (read_json(path / "table6.json") if (path / "table6.json").exists() else {}).get("rows", []):
        if r["split"] in (c_split, "U"):
            key = "C" if r["split"] == c_split else "U"
            row[f"cot/{key}"] = (r.get("base"), r.get("final"))
    for r in sim["results"].get("FT", []):
        if r["variant"] == "original":
            row[f"{r['split']}/{r['metric']}"] = (r["p_value"], r["c_cont"], r.get("convention"))
    for v in sim["verdicts"].get("FT", []):
        if v["variant"] == "original":
            row[f"verdict/{v['split']}"] = (v["p_value"], bool(v["contaminated"]), v.get("alpha", 0.05),
                                            v.get("n_tests"))
    row.update(probe_outputs(path))
    for split in ("C", "U"):
        did = [d for d in sim.get("did", []) if d["split"] == split and d["variant"] == "original"]
        if did:
            alpha = row.get(f"verdict/{split}", (None, None, 0.05, None))[2]
            p = min(1.0, min(d["p_value"] for d in did) * len(did))
            row[f"did/{split}"] = {"did": {d["metric"]: d["did"] for d in did}, "p": p, "flagged": p < alpha}
    return row


def probe_outputs(path: Path) -> dict[str, Any]:
    """What the probe's prompt did to the fine-tuned model (its detection records, detect/FT__*/records.jsonl): per
    split and version (originals, references), the share of zero-CoT answers that are malformed, zero-CoT accuracy
    and full-CoT accuracy under the probe's prompt (a prompt the model cannot follow makes acc and con mean little)."""
    recs = sorted((path / "detect").glob("FT__*/records.jsonl"))
    if len(recs) != 1 or any(recs[0].parent.glob("conv-*")):  # none, or several conventions (auto): left out
        return {}
    sums: dict[str, list[float]] = {}
    with recs[0].open() as f:
        for line in f:
            r = json.loads(line)
            s = sums.setdefault(f"probe/{r['split']}/{r['variant']}", [0, 0, 0, 0])
            s[0] += 1
            s[1] += bool(r.get("malformed"))
            s[2] += bool(r.get("correct"))
            s[3] += bool(r.get("cot_correct"))
    return {k: {"n": n, "zero_cot_malformed": m / n, "zero_cot_acc": c / n, "full_cot_acc": f / n}
            for k, (n, m, c, f) in sums.items()}


def probe_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: per run, the probe prompt's zero-CoT malformed share / zero-CoT accuracy / full-CoT accuracy on C
    and U, originals and references."""
    cols = [(s, v) for s in ("C", "U") for v in ("original", "reference")]
    head = ["rung", "arm"] + [f"{s} {v}s: malformed / zero-CoT acc / full-CoT acc" for s, v in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = []
        for s, v in cols:
            x = r.get(f"probe/{s}/{v}")
            cells.append("–" if x is None else
                         f"{x['zero_cot_malformed']:.2f} / {x['zero_cot_acc']:.3f} / {x['full_cot_acc']:.2f}")
        if any(c != "–" for c in cells):
            lines.append("| " + " | ".join([r["label"], r["arm"], *cells]) + " |")
    return "\n".join(lines) + "\n"


def _label(name: str, path: Path) -> str:
    """A run's default label: its rung (the name after `paper_recipe_ladder_`), plus what follows the hash in its
    folder's name (a copy probed again, e.g. `..._r1__adbf1526_probe_zcp` -> "r1 probe_zcp"); else the folder."""
    if not name.startswith(PREFIX + "_"):
        return path.name
    tail = path.name.split("__", 1)[1].split("_", 1)[1:] if "__" in path.name else []
    return " ".join([name[len(PREFIX) + 1:], *tail])


def _pv(row: dict[str, Any], split: str) -> str:
    cells = []
    for m in METRICS:
        if f"{split}/{m}" in row:
            p, cc, conv = row[f"{split}/{m}"]  # several conventions (auto): the metric's smallest p, and where
            cells.append(f"{m} {p:.3f} ({cc:.3f})" + (f" [{conv}]" if conv else ""))
    return "; ".join(cells) or "–"


def _verdict(row: dict[str, Any], split: str) -> str:
    v = row.get(f"verdict/{split}")
    if v is None:
        return "–"
    return f"{'**flagged**' if v[1] else 'no'} (p = {v[0]:.3f}" + (f", {v[3]} tests)" if v[3] else ")")


def _did(row: dict[str, Any], split: str) -> str:
    d = row.get(f"did/{split}")
    if d is None:
        return "–"
    vals = " / ".join(f"{d['did'][m]:+.3f}" for m in METRICS if m in d["did"])
    return f"{vals}, {'**flagged**' if d['flagged'] else 'no'} (p = {d['p']:.3f})"


def _cot(row: dict[str, Any], split: str) -> str:
    b, a = row.get(f"cot/{split}", (None, None))
    return "–" if b is None or a is None else f"{100 * b:.0f} → {100 * a:.0f}"


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: per rung its leak arm and its sham arm, one row each, the sham right below its rung."""
    head = ["rung", "arm", "training", "full-CoT % C before → after", "full-CoT % U before → after",
            "ZCP on C: p (C_cont) per metric", "ZCP on U: p (C_cont) per metric", "verdict C", "verdict U",
            "DiD C (acc / con / p_first / p_all)", "DiD U"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        how = (f"{r['finetune']} FT" if r["finetune"] == "full" else f"LoRA r {r['lora_r']}")
        how += f", {r['sft_epochs']:g} ep, lr {r['sft_lr']:g}" + (f" / GRPO {r['grpo_lr']:g}" if r["grpo_lr"] else "")
        lines.append("| " + " | ".join([r["label"], r["arm"], how, _cot(r, "C"), _cot(r, "U"), _pv(r, "C"),
                                        _pv(r, "U"), _verdict(r, "C"), _verdict(r, "U"), _did(r, "C"),
                                        _did(r, "U")]) + " |")
    return "\n".join(lines) + "\n"


def sham_summary(rows: list[dict[str, Any]], level: float = 0.95) -> dict[str, Any]:
    """The sham arms' false positives: each sham run's ZCP verdict on C (the items it stands in for: nothing of C
    was trained on, so a flag there is a false positive of fine-tuning itself) and on U, counted with their
    Clopper-Pearson interval (zcp.validate.calibration.tests.rate_ci); per metric too (p < alpha)."""
    from zcp.validate.calibration.tests import rate_ci

    shams = [r for r in rows if r["arm"] == "sham"]
    out: dict[str, Any] = {"n_runs": len(shams), "level": level}
    for split in ("C", "U"):
        vs = [r[f"verdict/{split}"] for r in shams if f"verdict/{split}" in r]
        k = sum(bool(v[1]) for v in vs)
        out[f"flagged/{split}"] = {"k": k, "n": len(vs), "ci": rate_ci(k, len(vs), level) if vs else None}
        for m in METRICS:
            ps = [(r[f"{split}/{m}"][0], r[f"verdict/{split}"][2]) for r in shams
                  if f"{split}/{m}" in r and f"verdict/{split}" in r]
            if ps:
                km = sum(p < a for p, a in ps)
                out[f"metric/{split}/{m}"] = {"k": km, "n": len(ps), "ci": rate_ci(km, len(ps), level)}
    return out


def sham_markdown(s: dict[str, Any]) -> str:
    """One line per split: the sham arms flagged (combined verdict) and per metric, with the exact interval."""
    if not s["n_runs"]:
        return ""
    lines = [f"Sham arms ({s['n_runs']} runs): false positives, Clopper-Pearson {100 * s['level']:.0f}% interval:", ""]
    for split in ("C", "U"):
        f = s[f"flagged/{split}"]
        if not f["n"]:
            continue
        per = [f"{m} {x['k']}/{x['n']}" for m in METRICS if (x := s.get(f"metric/{split}/{m}"))]
        lines.append(f"- on {split}: combined verdict {f['k']} of {f['n']} flagged [{f['ci'][0]:.3f}, {f['ci'][1]:.3f}]"
                     + (f"; per metric (p < alpha): {', '.join(per)}" if per else ""))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", help="RUN_DIR or RUN_DIR=LABEL (default: <root>/paper_recipe_ladder_*__*)")
    ap.add_argument("--root", default="outputs/contaminate")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    root = Path(a.root)
    if a.runs:
        given = [(Path(x.split("=", 1)[0]), x.split("=", 1)[1] if "=" in x else None) for x in a.runs]
    else:
        given = [(run.path, None) for run in sweep_runs(root, f"{PREFIX}_*__*")[0]]
    rows = [r for p, label in given if (r := run_row(p, label)) is not None]
    rows.sort(key=lambda r: (r["label"], r["arm"] != "leak"))
    out = Path(a.out or root / f"{PREFIX}_report")
    out.mkdir(parents=True, exist_ok=True)
    shams = sham_summary(rows)
    md = table(rows) + "\n" + sham_markdown(shams) + "\nUnder the probe's prompt (the fine-tuned model's detection records):\n\n" + probe_table(rows)
    (out / "ladder_report.md").write_text(md)
    (out / "ladder_report.json").write_text(json.dumps({"runs": rows, "sham": shams}, indent=1, default=str) + "\n")
    print(md, end="")


if __name__ == "__main__":
    main()
