"""Are two runs the same? Compares what a simulation (demo / contamination) run or a detection run writes.

Usage:
    python scripts/compare_runs.py OLD_RUN_DIR NEW_RUN_DIR [--base-old DIR --base-new DIR]

Used as the behaviour-identity check of a restructure: run `make demo` (or `train/run_demo.py`) at the commit
before and after, then compare the two `outputs/contaminate/demo__*` dirs. Compared:
- the data the run trained on and evaluated (benchmark_items, variants, training_items, sft_data, grpo_data),
- the full-CoT evaluations (eval/*.jsonl) and Table 6 (table6.md, table6.json),
- the detection records of each detect run (detect/<label>__<hash>/records.jsonl, matched by label: the hash is
  of the config, which may name moved modules) and their table.md / summary.json, Table 7 and the DiD table.
A detection run (a dir holding records.jsonl or summary.json, e.g. run_detect's output_dir, and each of its
conv-<name>/ convention dirs) is compared by its records as a set of rows keyed by their unit (split, variant,
original_id, draw: a resumed or merged run may hold them in another order), its summary.json's results and verdicts
(a verdict that flips is named) and its table.md. Other JSONL files are compared row by row on every field; floats
must be equal exactly (the same computation on the same machine gives the same bits). Run dirs' hashes, timestamps
and paths (run_meta.json, manifest.json) are not compared.
Exit status 0 when everything compared is identical, 1 otherwise (each difference printed), 2 (one line on stderr)
when there is nothing to compare: a directory that is missing, not a directory, or empty, or no file of a run
found in either; "0 files compared: identical" would prove nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from zcp.core.rundir import DETECTION_RECORDS, DETECTION_SUMMARY, DETECTION_UNIT

FILES = ["benchmark_items.jsonl", "variants.jsonl", "training_items.jsonl", "sft_data.jsonl", "grpo_data.jsonl",
         "eval/base.jsonl", "eval/after_sft.jsonl", "eval/final.jsonl", "table6.md", "table6.json",
         "detect/table7.md", "detect/did.md"]
PER_DETECT = ["records.jsonl", "table.md"]  # with summary.json, the files of a detection run compared
CONVENTION_DIRS = "conv-*"  # a multi-convention detection run's per-convention dirs (each a detection run)
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


def _unit(row: dict[str, Any]) -> tuple:
    return tuple(row.get(k) for k in DETECTION_UNIT)


def compare_records(a: Path, b: Path, name: str) -> list[str]:
    """Differences between two detection records files, as sets of rows keyed by their unit (row order ignored)."""
    if not a.exists() or not b.exists():
        return [] if a.exists() == b.exists() else [f"{name}: only in {'new' if b.exists() else 'old'} run"]
    ra, rb = ({_unit(r): r for r in _jsonl(p)} for p in (a, b))
    diffs = []
    for side, only in (("old", set(ra) - set(rb)), ("new", set(rb) - set(ra))):
        if only:
            diffs.append(f"{name}: only in the {side} run: {len(only)} unit(s), e.g. {sorted(only, key=str)[0]}")
    for k in sorted(set(ra) & set(rb), key=str):
        x, y = ra[k], rb[k]
        if x != y:
            keys = sorted(f for f in set(x) | set(y) if x.get(f) != y.get(f))
            diffs.append(f"{name} unit {k}: fields differ: {keys}")
    return diffs[:20] + ([f"{name}: ... {len(diffs) - 20} more"] if len(diffs) > 20 else [])


def compare_summary(a: Path, b: Path, name: str) -> list[str]:
    """Differences between two detection summaries: each verdict that differs (named by split/variant, the flip
    of `contaminated` first), then the results (per split, variant, metric) that differ."""
    if not a.exists() or not b.exists():
        return [] if a.exists() == b.exists() else [f"{name}: only in {'new' if b.exists() else 'old'} run"]
    sa, sb = json.loads(a.read_text()), json.loads(b.read_text())
    diffs = []
    for part, key in (("verdicts", ("split", "variant")), ("results", ("split", "variant", "metric")),
                      ("convention_results", ("convention", "split", "variant", "metric"))):
        xa = {tuple(r.get(k) for k in key): _strip(r) for r in sa.get(part) or []}
        xb = {tuple(r.get(k) for k in key): _strip(r) for r in sb.get(part) or []}
        what = part.rstrip("s")
        for k in sorted(set(xa) | set(xb), key=str):
            label = "/".join(map(str, k))
            if k not in xa or k not in xb:
                diffs.append(f"{name}: {what} {label} only in the {'new' if k in xb else 'old'} run")
            elif xa[k] != xb[k]:
                x, y = xa[k], xb[k]
                if part == "verdicts" and x.get("contaminated") != y.get("contaminated"):
                    diffs.append(f"{name}: verdict {label}: contaminated {x.get('contaminated')} vs "
                                 f"{y.get('contaminated')}")
                else:
                    keys = sorted(f for f in set(x) | set(y) if x.get(f) != y.get(f))
                    diffs.append(f"{name}: {what} {label}: fields differ: {keys}")
    return diffs


def is_detection_run(d: Path) -> bool:
    """Whether `d` is a detection run's dir (it holds records.jsonl or summary.json)."""
    return (d / DETECTION_RECORDS).exists() or (d / DETECTION_SUMMARY).exists()


def compare_detection(old: Path, new: Path, prefix: str = "") -> tuple[list[str], int]:
    """(differences, files compared) between two detection runs, their conv-<name>/ dirs included."""
    diffs: list[str] = []
    n = 0
    for name in [*PER_DETECT, DETECTION_SUMMARY]:
        if not (old / name).exists() and not (new / name).exists():
            continue
        n += 1
        label = f"{prefix}{name}"
        if name == DETECTION_RECORDS:
            diffs += compare_records(old / name, new / name, label)
        elif name == DETECTION_SUMMARY:
            diffs += compare_summary(old / name, new / name, label)
        else:
            diffs += compare_file(old / name, new / name, label)
    co = {p.name for p in old.glob(CONVENTION_DIRS) if p.is_dir()}
    cn = {p.name for p in new.glob(CONVENTION_DIRS) if p.is_dir()}
    if co != cn:
        diffs.append(f"{prefix}convention dirs: {sorted(co)} vs {sorted(cn)}")
    for conv in sorted(co & cn):
        d, k = compare_detection(old / conv, new / conv, f"{prefix}{conv}/")
        diffs += d
        n += k
    return diffs, n


def compare_runs(old: Path, new: Path) -> tuple[list[str], int]:
    """(differences, number of files compared) between two run dirs: detection runs when either is one (it holds
    records.jsonl or summary.json), else simulation runs (their files and their detect/<label>__<hash>/ runs)."""
    if is_detection_run(old) or is_detection_run(new):
        return compare_detection(old, new)
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
        d, k = compare_detection(lo[label], ln[label], f"detect/{label}/")
        diffs += d
        n += k
    return diffs, n


def _unusable(d: Path) -> str | None:
    """Why `d` cannot be compared (one line), or None."""
    if not d.exists():
        return f"{d}: no such directory"
    if not d.is_dir():
        return f"{d}: not a directory"
    if not any(d.iterdir()):
        return f"{d}: the directory is empty (no run there)"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--base-old", type=Path, help="the base model's detect run of the old run (base-detect__*)")
    ap.add_argument("--base-new", type=Path, help="... of the new run")
    args = ap.parse_args()
    dirs = [args.old, args.new] + ([args.base_old, args.base_new] if args.base_old and args.base_new else [])
    for d in dirs:
        why = _unusable(d)
        if why:
            print(f"error: {why}", file=sys.stderr)
            return 2
    diffs, n = compare_runs(args.old, args.new)
    if args.base_old and args.base_new:
        d, k = compare_detection(args.base_old, args.base_new, "base-detect/")
        diffs += d
        n += k
    if n == 0:
        print(f"error: 0 files compared: neither {args.old} nor {args.new} holds a file of a detection or simulation "
              "run", file=sys.stderr)
        return 2
    for d in diffs:
        print(d)
    print(f"{n} files compared: {'identical' if not diffs else f'{len(diffs)} differences'}")
    return 0 if not diffs else 1


if __name__ == "__main__":
    sys.exit(main())
