"""Helpers of scripts/real_model_study.sh (stdlib and the files the project's jobs write; nothing else).

    python scripts/real_model_study.py prepare --build DIR --release FILE   # audited.jsonl + paraphrased.jsonl
    python scripts/real_model_study.py step --steps-json FILE --name N --rc RC --seconds S [--note TEXT]
    python scripts/real_model_study.py table4 --run DIR --out FILE          # the paper's Table 4 layout
    python scripts/real_model_study.py sham-items --release FILE --skip N --out FILE   # a sham arm's stand-ins

`prepare`: run_build_data reads the release's paraphrased layout (data.format=zcp_release data.variant=original)
and writes items.jsonl with ids `paraphrased_dataset-NNNNN` that its reference.jsonl names (original_id); the
release's index stays in each item's metadata only. The detection job reads the audited set and its GSM8K-test
control with ONE format (the control shares the data group's), so both are read as zcp items files, and the
paraphrases (the release rows' `paraphrased_*` fields) pair by `original_index`, which a data row must carry as a
field of its own: `audited.jsonl` is items.jsonl with `original_index` copied up, `paraphrased.jsonl` the release
rows of those items only (a variant row naming an item that is not in the data file is an error).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

METRICS = ("acc", "con", "p_first", "p_all")


def prepare(build: Path, release: Path) -> dict[str, int]:
    """Write build/audited.jsonl and build/paraphrased.jsonl (see the module docstring); return the counts."""
    keep: set[str] = set()
    with (build / "items.jsonl").open(encoding="utf-8") as f, (build / "audited.jsonl").open("w", encoding="utf-8") as g:
        for line in f:
            row = json.loads(line)
            row["original_index"] = str(row["metadata"]["original_index"])
            keep.add(row["original_index"])
            g.write(json.dumps(row) + "\n")
    n_para = 0
    with release.open(encoding="utf-8") as f, (build / "paraphrased.jsonl").open("w", encoding="utf-8") as g:
        for line in f:
            if line.strip() and str(json.loads(line)["original_index"]) in keep:
                g.write(line if line.endswith("\n") else line + "\n")
                n_para += 1
    return {"audited": len(keep), "paraphrased": n_para}


def sham_items(release: Path, skip: int, out: Path) -> int:
    """The release rows after the first `skip` (those a run with benchmark.limit=`skip` does not audit) as a zcp items
    file in their paraphrased form (question = paraphrased_problem, solution = paraphrased_solution): the sham arm's
    stand-ins for C (clean.source=file clean.path=OUT with exposure.leak_fraction=0 exposure.k=0), the same kind of
    text the leak arm trains on (the release's paraphrase of a GSM8K train item with its reasoning chain), none of it
    about an audited item. Returns the number of rows written."""
    n = 0
    with release.open(encoding="utf-8") as f, out.open("w", encoding="utf-8") as g:
        rows = [json.loads(line) for line in f if line.strip()]
        for row in rows[skip:]:
            g.write(json.dumps({"id": f"release-sham-{int(row['original_index']):05d}",
                                "question": row["paraphrased_problem"], "answer": str(row["answer"]),
                                "solution": row["paraphrased_solution"],
                                "metadata": {"original_index": str(row["original_index"]), "source": "release-sham"}})
                    + "\n")
            n += 1
    return n


def record_step(steps_json: Path, name: str, rc: int, seconds: float, note: str = "") -> dict[str, Any]:
    """Add (or replace) one step's entry in steps.json: status, exit code, wall time; written at once."""
    data = json.loads(steps_json.read_text()) if steps_json.exists() else {"steps": {}}
    status = {0: "ok", 124: "timeout", 137: "timeout", -1: "skipped"}.get(rc, "error")
    data["steps"][name] = {"status": status, "rc": rc, "seconds": round(seconds, 1), "note": note}
    tmp = steps_json.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(steps_json)
    return data["steps"][name]


def _fmt(x: Any, nd: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.2e}" if 0 < abs(x) < 10 ** -nd else f"{x:.{nd}f}"
    return str(x)


def _label(split: str, variant: str, control: str) -> str:
    if split == control:
        return "control (GSM8K test)"
    return "D' (release paraphrases)" if variant != "original" else "D (GSM8K train originals)"


def table4(run: Path) -> str:
    """The paper's Table 4 layout from a detection run's summary.json (multi-convention or single), as markdown.

    Per dataset and metric: S, S_ref, p, C_cont (VOID where void) under the declared primary convention (its own
    conv-<name>/summary.json), the within-item verdicts (primary's and over every convention), the control
    comparison (per-item gaps, audited against control), and a conclusion generated from these numbers only."""
    top = json.loads((run / "summary.json").read_text())
    conventions = top.get("conventions") or []
    names = [c["name"] if isinstance(c, dict) else str(c) for c in conventions]
    primary = next((v["primary"]["convention"] for v in top.get("verdicts", []) if v.get("primary")), None)
    conv = primary or (names[0] if names else None)
    own = run / f"conv-{conv}" / "summary.json" if conv else None
    summ = json.loads(own.read_text()) if own is not None and own.exists() else top
    control_split = (summ.get("control") or {}).get("split", "control")
    lines = [f"# Table 4 analogue: {top.get('model', {}).get('name', '?') if isinstance(top.get('model'), dict) else top.get('model')}",
             "", f"Run: `{run.name}`; primary convention: `{conv}` (declared); conventions probed: "
             f"{', '.join(names) or 'one'}; alpha {top.get('alpha')}.", "",
             "| dataset | metric | n | S | S_ref | p | C_cont |", "|---|---|---|---|---|---|---|"]
    for r in summ.get("results", []):
        void = r.get("void")
        lines.append(f"| {_label(r['split'], r['variant'], control_split)} | {r['metric']} | {r['n']} | {_fmt(r['s'])} "
                     f"| {_fmt(r['s_ref'])} | {_fmt(r['p_value'])} | {'VOID' if void else _fmt(r['c_cont'])} |")
    voids = sorted({f"{r['metric']} ({_label(r['split'], r['variant'], control_split)}): {r['void']}"
                    for r in summ.get("results", []) if r.get("void")})
    if voids:
        lines += ["", "VOID (left out of the verdicts):", *[f"- {v}" for v in voids]]
    lines += ["", "## Within-item verdicts (Bonferroni over the metrics not VOID)", "",
              "| dataset | primary p | primary verdict | all conventions p | verdict | driving |", "|---|---|---|---|---|---|"]
    verdicts = {}
    for v in top.get("verdicts", []):
        pr = v.get("primary") or v
        key = _label(v["split"], v["variant"], control_split)
        verdicts[key] = (pr, v)
        lines.append(f"| {key} | {_fmt(pr['p_value'])} | {'contaminated' if pr['contaminated'] else 'not flagged'} "
                     f"| {_fmt(v['p_value'])} | {'contaminated' if v['contaminated'] else 'not flagged'} "
                     f"| {v.get('driving_convention', conv)}/{v.get('driving_metric')} |")
    ctrl = summ.get("control") or {}
    cv = {}
    lines += ["", f"## Against the control set (primary convention `{conv}`: per-item gaps, audited vs control, "
              "one-sided two-sample permutation test)", ""]
    if ctrl:
        lines += ["| dataset | metric | n | n_control | gap | gap_control | diff | p | C_cont |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in ctrl.get("results", []):
            lines.append(f"| {_label(r['split'], r['variant'], control_split)} | {r['metric']} | {r['n']} | "
                         f"{r['n_control']} | {_fmt(r['gap'])} | {_fmt(r['gap_control'])} | {_fmt(r['diff'])} | "
                         f"{_fmt(r['p_value'])} | {_fmt(r['c_cont'])} |")
        for v in ctrl.get("verdicts", []):
            cv[_label(v["split"], v["variant"], control_split)] = v
            lines.append(f"\nControl verdict, {_label(v['split'], v['variant'], control_split)}: p = {_fmt(v['p_value'])}"
                         f" ({'stands out against the control' if v.get('contaminated') else 'not distinguishable from the control'}).")
    else:
        lines.append("No control comparison in this run's summary.")
    lines += ["", "## Conclusion (generated from the numbers above)", "", conclusion(verdicts, cv, top.get("alpha"))]
    return "\n".join(lines) + "\n"


def conclusion(verdicts: dict[str, tuple[dict, dict]], control: dict[str, dict], alpha: Any) -> str:
    """One plain paragraph: which sets the within-item test flags, whether the control fires too, and the
    control comparison's verdicts; the words follow the numbers, nothing else."""
    parts = []
    for key, (pr, allv) in verdicts.items():
        parts.append(f"{key}: the primary convention's within-item test gives p = {_fmt(pr['p_value'])} "
                     f"({'flagged' if pr['contaminated'] else 'not flagged'} at alpha {alpha}), over every convention "
                     f"p = {_fmt(allv['p_value'])} ({'flagged' if allv['contaminated'] else 'not flagged'})")
    text = "; ".join(parts) + "." if parts else "No verdicts in the summary."
    ctrl_flag = any(pr["contaminated"] or v["contaminated"] for k, (pr, v) in verdicts.items() if k.startswith("control"))
    aud_flag = any(pr["contaminated"] or v["contaminated"] for k, (pr, v) in verdicts.items() if not k.startswith("control"))
    if control:
        stand = [k for k, v in control.items() if v.get("contaminated")]
        text += (" Against the control, " + (f"{', '.join(stand)} stand(s) out (the audited items' gaps exceed clean "
                 "GSM8K test items')." if stand else "no audited set stands out (their gaps are not larger than the "
                 "clean GSM8K test items')."))
        if aud_flag and ctrl_flag and not stand:
            text += " The within-item test fires on the control too and the comparison does not: read as the " \
                    "builder's or the model's shape priors, not as evidence of a leak."
        elif aud_flag and not stand:
            text += " A within-item flag without a control comparison that fires is not evidence beyond the " \
                    "builder's residual shift."
    if not aud_flag and not any(v.get("contaminated") for v in control.values()):
        text += " Nothing here is evidence of contamination of GSM8K train in this model."
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--build", type=Path, required=True)
    p.add_argument("--release", type=Path, required=True)
    s = sub.add_parser("step")
    s.add_argument("--steps-json", type=Path, required=True)
    s.add_argument("--name", required=True)
    s.add_argument("--rc", type=int, required=True)
    s.add_argument("--seconds", type=float, required=True)
    s.add_argument("--note", default="")
    t = sub.add_parser("table4")
    t.add_argument("--run", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    h = sub.add_parser("sham-items")
    h.add_argument("--release", type=Path, required=True)
    h.add_argument("--skip", type=int, required=True)
    h.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    if a.cmd == "sham-items":
        print(json.dumps({"written": sham_items(a.release, a.skip, a.out)}))
    elif a.cmd == "prepare":
        print(json.dumps(prepare(a.build, a.release)))
    elif a.cmd == "step":
        print(json.dumps(record_step(a.steps_json, a.name, a.rc, a.seconds, a.note)))
    else:
        a.out.write_text(table4(a.run))
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
