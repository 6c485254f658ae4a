"""Are two simulation runs the same? Compares what a demo / contamination run writes, file by file.

Usage:
    python scripts/compare_runs.py OLD_RUN_DIR NEW_RUN_DIR [--base-old DIR --base-new DIR]

Used as the behaviour-identity check of a restructure: run `make demo` (or `train/run_demo.py`) at the commit
before and after, then compare the two `outputs/contaminate/demo__*` dirs. Compared:
- the data the run trained on and evaluated (benchmark_items, variants, training_items, sft_data, grpo_data),
- the full-CoT evaluations (eval/*.jsonl) and Table 6 (table6.md, table6.json),
- the detection records of each detect run (detect/<label>__<hash>/records.jsonl, matched by label: the hash is
  of the config, which may name moved modules) and their table.md / summary.json, Table 7 and the DiD table.
Records are compared row by row on every field; floats must be equal exactly (the same computation on the same
machine gives the same bits). Run dirs' hashes, timestamps and paths (run_meta.json, manifest.json) are not.
Exit status 0 when everything compared is identical, 1 otherwise (each difference printed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

FILES = ["benchmark_items.jsonl", "variants.jsonl", "training_items.jsonl", "sft_data.jsonl", "grpo_data.jsonl",
         "eval/base.jsonl", "eval/after_sft.jsonl", "eval/final.jsonl", "table6.md", "table6.json",
         "detect/table7.md", "detect/did.md"]
PER_DETECT = ["records.jsonl", "table.md"]
SUMMARY_SKIP = {"run_dir", "output_dir", "created", "elapsed_s", "timestamp", "wall_s", "config_hash", "paths"}


def _label_dirs(detect_dir: Path) -> dict[str, Path]:
    """detect/<label>__<hash> -> {label: dir}."""
    out: dict[str, Path] = {}
    for d in sorted(detect_dir.glob("*__*")):
        if d.is_dir():
            out[d.name.rsplit("__", 1)[0]] = d
    return out


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _strip(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in SUMMARY_SKIP}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def compare_file(a: Path, b: Path, name: str) -> list[str]:
    """Differences between two files of one run (empty: identical)."""
    if not a.exists() and not b.exists():
        return []
    if not a.exists() or not b.exists():
        return [f"{name}: only in {'new' if b.exists() else 'old'} run"]
    if a.suffix == ".jsonl":
        ra, rb = _jsonl(a), _jsonl(b)
        if len(ra) != len(rb):
            return [f"{name}: {len(ra)} vs {len(rb)} rows"]
        diffs = []
        for i, (x, y) in enumerate(zip(ra, rb, strict=True)):
            if x != y:
                keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
                diffs.append(f"{name} row {i + 1}: fields differ: {keys}")
        return diffs[:10] + ([f"{name}: ... {len(diffs) - 10} more rows"] if len(diffs) > 10 else [])
    if a.suffix == ".json":
        return [] if _strip(json.loads(a.read_text())) == _strip(json.loads(b.read_text())) else [f"{name}: differs"]
    return [] if a.read_bytes() == b.read_bytes() else [f"{name}: differs"]


def compare_runs(old: Path, new: Path) -> tuple[list[str], int]:
    """(differences, number of files compared) between two simulation run dirs."""
    diffs: list[str] = []
    n = 0
    for name in FILES:
        if (old / name).exists() or (new / name).exists():
            n += 1
            diffs += compare_file(old / name, new / name, name)
    lo, ln = _label_dirs(old / "detect"), _label_dirs(new / "detect")
    if set(lo) != set(ln):
        diffs.append(f"detect runs: {sorted(lo)} vs {sorted(ln)}")
    for label in sorted(set(lo) & set(ln)):
        for name in [*PER_DETECT, "summary.json"]:
            n += 1
            diffs += compare_file(lo[label] / name, ln[label] / name, f"detect/{label}/{name}")
    return diffs, n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--base-old", type=Path, help="the base model's detect run of the old run (base-detect__*)")
    ap.add_argument("--base-new", type=Path, help="... of the new run")
    args = ap.parse_args()
    diffs, n = compare_runs(args.old, args.new)
    if args.base_old and args.base_new:
        for name in [*PER_DETECT, "summary.json"]:
            n += 1
            diffs += compare_file(args.base_old / name, args.base_new / name, f"base-detect/{name}")
    for d in diffs:
        print(d)
    print(f"{n} files compared: {'identical' if not diffs else f'{len(diffs)} differences'}")
    return 0 if not diffs else 1


if __name__ == "__main__":
    sys.exit(main())
