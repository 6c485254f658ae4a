"""False-positive rates of every detector on clean datasets of contamination runs, with Clopper-Pearson CIs.

Usage:
    python scripts/sham_fpr.py outputs/contaminate [--alpha 0.05]

A clean dataset is U of every run, and C of a sham run (exposure.leak_fraction=0: nothing of C leaked;
`experiment=exposure_sham`). For each, the ZCP combined verdict (Bonferroni over the run's metrics) and each
metric's own test (detect/simulation_summary.json, the fine-tuned model), and each baseline detector's
benchmark decision (baselines/summary.json; detectors without a decision rule are left out) count as one
trial. Printed: a markdown table per recipe (answer_only_fraction) and over all, flagged / trials and the
95% CI. Runs share the benchmark and, per split seed, the C/U split: the trials are not independent, so the
CIs are optimistic.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from scipy.stats import binomtest

from zcp.core.io import read_json
from zcp.core.rundir import sweep_runs
from zcp.validate.exposure import run_arm


def clean_datasets(root: Path) -> list[dict]:
    """One row per (run, clean split): recipe, split seed, sham or not, and each detector's flag."""
    rows = []
    for run in sweep_runs(root)[0]:  # the finished runs (zcp.core.rundir: the sweep collectors' one rule)
        cfg = run.config
        exposure_record = run.exposure
        exposure = exposure_record.get("knobs") or {}
        sham = run_arm(exposure_record) == "sham"  # the exposure report's rule (zcp.validate.exposure)
        summary = run.simulation_summary
        base = read_json(run.baselines_summary_path) if run.baselines_summary_path.exists() else None
        for split in (["C", "U"] if sham else ["U"]):
            flags = {}
            for v in summary["verdicts"]["FT"]:
                if v["split"] == split and v["variant"] == "original":
                    flags["zcp combined"] = bool(v["contaminated"])
            for r in summary["results"]["FT"]:
                if r["split"] == split and r.get("variant") == "original":
                    flags[f"zcp {r['metric']}"] = r["p_value"] < summary.get("alpha", 0.05)
            if base is not None:
                file = "data" if split == "C" else "u"
                for name, e in base["detectors"].items():
                    d = (e.get("files") or {}).get(file, {}).get("decision")
                    if d is not None:
                        flags[name] = bool(d)
            rows.append({"run": run.name, "recipe": exposure.get("answer_only_fraction"), "sham": sham,
                         "split_seed": (cfg.get("split") or {}).get("seed", 0), "split": split, "flags": flags})
    return rows


def table(rows: list[dict]) -> str:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        for name, flag in r["flags"].items():
            counts[name][0] += int(flag)
            counts[name][1] += 1
    lines = ["| detector | flagged / clean datasets | rate | 95% CI |", "|---|---|---|---|"]
    for name in sorted(counts, key=lambda n: (not n.startswith("zcp"), n)):
        k, n = counts[name]
        ci = binomtest(k, n).proportion_ci(0.95, method="exact")
        lines.append(f"| {name} | {k} / {n} | {k / n:.3f} | [{ci.low:.3f}, {ci.high:.3f}] |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--sham-only", action="store_true", help="only the sham runs' C and U")
    args = ap.parse_args()
    rows = [r for r in clean_datasets(args.root) if r["sham"] or not args.sham_only]
    if not rows:
        print(f"no finished contamination runs under {args.root}")
        return 1
    for recipe in sorted({r["recipe"] for r in rows}, key=str):
        sub = [r for r in rows if r["recipe"] == recipe]
        print(f"\n### answer_only_fraction = {recipe} ({len(sub)} clean datasets)\n\n{table(sub)}")
    print(f"\n### all ({len(rows)} clean datasets)\n\n{table(rows)}")
    flagged = [f"{r['run']} {r['split']} (split seed {r['split_seed']})" for r in rows if r["flags"].get("zcp combined")]
    print("\nZCP combined flags: " + (", ".join(flagged) if flagged else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
