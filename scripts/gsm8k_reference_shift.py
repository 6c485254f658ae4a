"""Coverage and per-feature exchangeability of the GSM8K reference builder, as a table.

    .venv/bin/python scripts/gsm8k_reference_shift.py --m 9 --policy drop keep
    .venv/bin/python scripts/gsm8k_reference_shift.py --m 3 --limit 200 --policy drop   # quicker

Builds the references of a GSM8K file (default: ../shared/data/gsm8k/test.jsonl, 1,319 rows) with
`reference.method=gsm8k` through `zcp.benchmarks.references.registry.build_references`, once per special-case policy
(`reference.special_cases`: drop / keep), and prints for each: coverage (items with at least one draw / all),
how many items were special cases, and the `zcp.benchmarks.references.shift.feature_shift` report (per feature: the mean
over originals, over references, the two-sided within-item permutation p and its Bonferroni adjustment; then
the leading-digit distributions). Builds and feature tests are deterministic in --seed, so the figures
regenerate exactly. --json writes the full reports to a file.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from zcp.benchmarks.loaders import load_items
from zcp.benchmarks.references.registry import BuildContext, build_references

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k" / "test.jsonl"


def measure(path: Path, m: int, seed: int, policy: str, limit: int | None = None) -> dict[str, Any]:
    """Build the GSM8K references of `path` under `policy` and return coverage, timing and the shift report."""
    items = load_items(path, format="gsm8k", limit=limit)
    t0 = time.perf_counter()
    out = build_references(items, "gsm8k", m, BuildContext(seed=seed, special_cases=policy))
    seconds = time.perf_counter() - t0
    covered = sum(1 for it in items if out.refs.get(it.id))
    full = sum(1 for it in items if len(out.refs.get(it.id, [])) >= m)
    return {"path": str(path), "m": m, "seed": seed, "policy": policy, "items": len(items), "covered": covered,
            "full": full, "coverage": covered / len(items), "seconds": round(seconds, 1),
            "special_cases": out.report.get("special_cases"), "lead_transport": out.report.get("lead_transport"),
            "structure_balance": out.report.get("structure_balance"), "exchangeability": out.report["exchangeability"]}


def format_table(res: dict[str, Any]) -> str:
    """The printed form of one `measure` result."""
    ex = res["exchangeability"]
    lines = [f"policy={res['policy']}  m={res['m']}  seed={res['seed']}  items={res['items']}  "
             f"covered={res['covered']} ({res['coverage']:.1%})  all m draws={res['full']}  "
             f"special cases={res['special_cases']}  build {res['seconds']} s",
             f"{'feature':40s} {'original':>9s} {'reference':>9s} {'p':>8s} {'p_bonf':>8s}"]
    for name, r in ex.get("features", {}).items():
        lines.append(f"{name:40s} {r['original']:9.4f} {r['reference']:9.4f} {r['p_two_sided']:8.4f} "
                     f"{r['p_bonferroni']:8.4f}")
    if "min_p_bonferroni" in ex:
        lines.append(f"min Bonferroni p = {ex['min_p_bonferroni']:.4g}; leading-digit total variation = "
                     f"{ex['leading_digit']['total_variation']:.4f}")
        lo, lr = ex["leading_digit"]["original"], ex["leading_digit"]["reference"]
        lines.append("leading digit  " + "  ".join(f"{d}: {lo[d]:.3f}/{lr[d]:.3f}" for d in lo))
    if res.get("lead_transport"):
        lt = res["lead_transport"]
        lines.append(f"leading digit by transport: {lt['items']} items ({lt.get('by_class')}), {lt['left_out']} left out; "
                     f"originals {lt['original']} references {lt['reference']}")
    if res.get("structure_balance"):
        lines.append(f"structure balance: {res['structure_balance']}")
    for w in ex.get("warnings", []):
        lines.append(f"WARNING {w}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """CLI entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--path", type=Path, default=DEFAULT_PATH, help="GSM8K JSONL file")
    ap.add_argument("--m", type=int, default=9, help="reference draws per item")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=None, help="only the first N rows")
    ap.add_argument("--policy", nargs="+", choices=("drop", "keep"), default=["drop", "keep"])
    ap.add_argument("--json", type=Path, default=None, help="write the full reports here")
    args = ap.parse_args(argv)
    results = []
    for policy in args.policy:
        res = measure(args.path, args.m, args.seed, policy, args.limit)
        results.append(res)
        print(format_table(res), flush=True)
        print()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
