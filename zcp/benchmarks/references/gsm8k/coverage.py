"""Where a GSM8K reference build loses items, per reason, and the residual shift of what it keeps.

`coverage_table` sorts a build's rejections into the reasons an item gets no reference (or fewer than m):
special cases by rule, special cases the draws show, chains that cannot be trusted (by sub-reason), numbers
tied outside the chain that no draw keeps, and too few valid draws. `build_and_report` runs the same builder
`reference.method=gsm8k` runs (`zcp.benchmarks.references.builders.GSM8KReferences`, special cases dropped)
on a GSM8K JSONL file and returns the coverage table and the per-feature residual shift
(`zcp.benchmarks.references.shift.feature_shift`), so the figures of docs/results/gsm8k_references.md can be
reproduced with one command::

    python -m zcp.benchmarks.references.gsm8k.coverage ../shared/data/gsm8k/test.jsonl --m 3

Part of `zcp.benchmarks.references.gsm8k`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zcp.core.items import Item

# (category, sub-reason, pattern on the rejection text), first match wins; the order is the table's.
_REASONS: tuple[tuple[str, str, str], ...] = (
    ("special case by rule", "the answer is 0, 1, 10, 100 or 1000", r"^special case.*special value"),
    ("special case by rule", "equal question numbers fix the answer", r"^special case.*fix the answer"),
    ("special case found by the draws", "the leading digit cannot be balanced over the benchmark",
     r"^special case.*cannot balance the leading digits"),
    ("special case found by the draws", "no draw keeps the answer's class and the question's structure",
     r"^special case.*keeps both the answer's class"),
    ("special case found by the draws", "no draw keeps the answer's form", r"^special case"),
    ("chain not trusted", "a literal no question number, result or unit explains", r"unbindable"),
    ("chain not trusted", "a value computed in prose without an annotation",
     r"unannotated computation|restates a value computed in the prose|does not evaluate to the annotated"),
    ("chain not trusted", "an intermediate result no later step uses", r"is not used by a later step"),
    ("chain not trusted", "the final answer is no step's result", r"is not the result of any step"),
    ("chain not trusted", "an annotation that does not evaluate as stated",
     r"annotation <<.*>> (evaluates to|does not|has a)"),
    ("chain not trusted", "no calculator annotation or equation", r"no calculator annotations"),
    ("chain not trusted", "no perturbable number feeds the answer",
     r"no question number that feeds|does not depend on any perturbable"),
    ("chain not trusted", "the final answer is not a number", r"final answer .* is not a number"),
    ("too few valid draws", "no valid draw keeps every feature", r"only 0 of \d+ valid draws"),
    ("too few valid draws", "some but fewer than m valid draws", r"only \d+ of \d+ valid draws"),
)


def classify(reason: str) -> tuple[str, str]:
    """(category, sub-reason) of one rejection text of a GSM8K build; ("other", the text) if none fits."""
    text = re.sub(r"^row \d+: ", "", reason)
    for cat, sub, pattern in _REASONS:
        if re.search(pattern, text):
            return cat, sub
    return "other", text[:80]


def coverage_table(items: Sequence[Item], refs: dict[str, list[Item]], rejections: Sequence[dict[str, Any]],
                   m: int) -> dict[str, Any]:
    """Items with m references (covered), with fewer, with none, and the rejections per (category, sub-reason).

    An item with some but fewer than m draws counts under "too few valid draws" and is not covered (the probe
    could use it, but the figure asked for is coverage at m)."""
    n = len(items)
    full = sum(1 for it in items if len(refs.get(it.id, ())) >= m)
    partial = sum(1 for it in items if 0 < len(refs.get(it.id, ())) < m)
    rows: Counter = Counter()
    for r in rejections:
        rows[classify(str(r.get("reason", "")))] += 1
    by_cat: Counter = Counter()
    for (cat, _), c in rows.items():
        by_cat[cat] += c
    return {"items": n, "m": m, "covered": full, "coverage": round(full / n, 4) if n else 0.0,
            "partial": partial, "none": n - full - partial,
            "lost_by_category": dict(by_cat.most_common()),
            "lost_by_reason": [{"category": cat, "reason": sub, "items": c, "share": round(c / n, 4) if n else 0.0}
                               for (cat, sub), c in sorted(rows.items(), key=lambda kv: (-by_cat[kv[0][0]], -kv[1]))]}


def read_items(path: str | Path, limit: int | None = None) -> list[Item]:
    """The rows of a GSM8K JSONL file (question / answer with '#### N') as items, the first `limit` rows."""
    from zcp.benchmarks.references.gsm8k.builder import gsm8k_item
    from zcp.core.io import read_jsonl

    out = []
    for index, row in enumerate(read_jsonl(str(path))):
        if limit is not None and index >= limit:
            break
        out.append(gsm8k_item(row, index, str(path)))
    return out


def build_and_report(items: Sequence[Item], m: int, seed: int = 0) -> dict[str, Any]:
    """Build the references as ``reference.method=gsm8k reference.special_cases=drop`` does and report the
    coverage per reason (`coverage_table`) and the per-feature residual shift (`feature_shift`)."""
    from zcp.benchmarks.references.builders import GSM8KReferences
    from zcp.benchmarks.references.registry import BuildContext
    from zcp.benchmarks.references.shift import feature_shift

    t0 = time.perf_counter()
    rs = GSM8KReferences().build(list(items), m, BuildContext(seed=seed, special_cases="drop"))
    seconds = time.perf_counter() - t0
    return {"coverage": coverage_table(items, rs.refs, rs.rejections, m),
            "feature_shift": feature_shift(list(items), rs.refs), "build_report": rs.report,
            "seconds": round(seconds, 1), "refs": rs.refs}


def format_report(report: dict[str, Any]) -> str:
    """The coverage table and the residual-shift table as markdown."""
    cov, fs = report["coverage"], report["feature_shift"]
    lines = [f"coverage at m = {cov['m']}: {cov['covered']}/{cov['items']} = {100 * cov['coverage']:.1f}% "
             f"({cov['partial']} with fewer than m draws, {cov['none']} with none)", "",
             "| category | reason | items | share of the split |", "|---|---|---:|---:|"]
    lines += [f"| {r['category']} | {r['reason']} | {r['items']} | {100 * r['share']:.1f}% |" for r in cov["lost_by_reason"]]
    lines += ["", f"residual shift over {fs['items']} items with draws (two-sided within-item permutation p, "
              "Bonferroni over the features):", "",
              "| feature | originals | references | difference | p | p (Bonferroni) |", "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {k} | {v['original']:.4f} | {v['reference']:.4f} | {v['difference']:+.4f} | {v['p_two_sided']:.3g} "
              f"| {v['p_bonferroni']:.3g} |" for k, v in fs.get("features", {}).items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: build a GSM8K file's references at m and print the coverage and residual-shift tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", help="a GSM8K JSONL file (question, answer with '#### N')")
    ap.add_argument("--m", type=int, default=3, help="reference draws per item")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=None, help="only the first N rows")
    ap.add_argument("--json", default=None, help="also write the report (without the references) to this file")
    args = ap.parse_args(argv)
    items = read_items(args.path, args.limit)
    report = build_and_report(items, args.m, args.seed)
    print(format_report(report))
    print(f"\nbuilt in {report['seconds']} s")
    if args.json:
        Path(args.json).write_text(json.dumps({k: v for k, v in report.items() if k != "refs"}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
