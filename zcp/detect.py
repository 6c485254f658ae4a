"""ZCP detection run: probe every item (original, reference, paraphrased variants), resumably, then
test, calibrate, combine, and write records.jsonl, summary.json, table.md, a plot and W&B logs.

Item pairing: a variant row and a reference row belong to the original item they name; per original
item the scores of its rows are averaged (m reference draws, k paraphrases), and the test compares
the per-item averages. Records are appended chunk by chunk, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zcp.backends.base import Backend
from zcp.data.schema import Item
from zcp.io import append_jsonl, read_jsonl, stable_hash
from zcp.probe import ProbeConfig, metric_value, probe_items
from zcp.stats import combine, paired_test

log = logging.getLogger(__name__)

REFERENCE = "reference"
ORIGINAL = "original"
RECORDS = "records.jsonl"
SUMMARY = "summary.json"
TABLE = "table.md"
PLOT = "c_cont.png"
META = "run_meta.json"


@dataclass
class DetectDataset:
    """One benchmark (or one split of it, e.g. C or U) with its reference set and optional variants."""

    split: str
    originals: list[Item]
    reference: dict[str, list[Item]]
    variants: dict[str, dict[str, list[Item]]] = field(default_factory=dict)

    def work(self) -> list[tuple[tuple[str, str, str, int], Item]]:
        """All (key, item) units to probe; key = (split, variant, original_id, draw)."""
        units = [((self.split, ORIGINAL, it.id, 0), it) for it in self.originals]
        groups = {REFERENCE: self.reference, **self.variants}
        for variant, by_orig in groups.items():
            for it in self.originals:
                for j, row in enumerate(by_orig.get(it.id, [])):
                    units.append(((self.split, variant, it.id, j), row))
        return units


@dataclass
class DetectSettings:
    """Statistics and run-time settings of a detection run."""

    seeds: Sequence[int] = (0,)
    bootstrap_samples: int = 10_000
    alpha: float = 0.05
    reference_draws: str = "all"  # all: average all draws per item; per_seed: seed k uses draws j = k mod n_seeds
    chunk_size: int = 64
    progress: bool = True


def _key(rec: dict[str, Any]) -> tuple[str, str, str, int]:
    return (rec["split"], rec["variant"], rec["original_id"], int(rec["draw"]))


def _fingerprint(units: list[tuple[tuple, Item]], backend: Backend, probe: ProbeConfig) -> str:
    h = [getattr(backend, "name", ""), getattr(backend, "fingerprint", ""), repr(probe.__dict__)]
    h += [f"{k}|{it.question}|{it.answer}" for k, it in units]
    return stable_hash("\n".join(map(str, h)), 32)


def _load_existing(path: Path) -> list[dict[str, Any]]:
    """Records already on disk; a half-written last line (killed writer) is dropped and the file repaired."""
    if not path.exists():
        return []
    rows = list(read_jsonl(path, tolerate_partial_last_line=True))
    with open(path, encoding="utf-8") as f:
        n_lines = sum(1 for line in f if line.strip())
    if n_lines != len(rows):
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    return rows


def collect_records(backend: Backend, datasets: Sequence[DetectDataset], probe: ProbeConfig, out_dir: str | Path,
                    settings: DetectSettings) -> list[dict[str, Any]]:
    """Probe every unit not yet in out_dir/records.jsonl (resume), appending chunk by chunk."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    units = [u for ds in datasets for u in ds.work()]
    keys = [k for k, _ in units]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate (split, variant, original_id, draw) units: split names must be unique")
    fp = _fingerprint(units, backend, probe)
    meta_path = out / META
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("fingerprint") != fp:
            raise RuntimeError(f"{out} holds records of another run (model, probe settings or items differ); "
                               "use a new output_dir")
    else:
        meta_path.write_text(json.dumps({"fingerprint": fp, "n_units": len(units)}, indent=2))
    path = out / RECORDS
    existing = _load_existing(path)
    done = {_key(r) for r in existing}
    todo = [(k, it) for k, it in units if k not in done]
    if existing:
        log.info("resuming: %d of %d units already probed", len(done), len(units))
    chunks = [todo[i : i + settings.chunk_size] for i in range(0, len(todo), settings.chunk_size)]
    bar = None
    if settings.progress and chunks:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc="probe", unit="item")
    for chunk in chunks:
        recs = probe_items(backend, [it for _, it in chunk], probe)
        for (split, variant, oid, draw), rec in zip((k for k, _ in chunk), recs, strict=True):
            rec.update(split=split, variant=variant, original_id=oid, draw=draw)
        append_jsonl(path, recs)
        existing.extend(recs)
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    wanted = set(keys)
    return [r for r in existing if _key(r) in wanted]


def _per_item(records: list[dict[str, Any]], metric: str, pick: tuple[int, int] | None) -> dict[str, float]:
    """Average score per original item over its draws.

    With pick = (k, n_seeds) only the draws j with j mod n_seeds == k are used (seed k gets its own
    disjoint share of the m draws; an item with fewer draws than seeds uses draw k mod m).
    """
    by: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in records:
        by[r["original_id"]].append((int(r["draw"]), metric_value(r, metric)))
    out = {}
    for oid, vals in by.items():
        vals.sort()
        if pick is not None:
            k, n_seeds = pick
            chosen = [v for j, (_, v) in enumerate(vals) if j % n_seeds == k] or [vals[k % len(vals)][1]]
        else:
            chosen = [v for _, v in vals]
        out[oid] = float(np.mean(chosen))
    return out


def analyse(records: list[dict[str, Any]], metrics: Sequence[str], settings: DetectSettings) -> dict[str, Any]:
    """Per (split, variant, metric): paired test per seed, mean/std over seeds; verdicts; malformed rates."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["split"], r["variant"])].append(r)
    splits = sorted({s for s, _ in groups})
    results, verdicts, malformed = [], [], []
    for split in splits:
        ref = groups.get((split, REFERENCE), [])
        variants = [v for (s, v) in groups if s == split and v != REFERENCE]
        variants.sort(key=lambda v: (v != ORIGINAL, v))
        for variant in variants:
            recs = groups[(split, variant)]
            per_seed_p: dict[int, dict[str, float]] = defaultdict(dict)
            for metric in metrics:
                per_seed = []
                for k, seed in enumerate(settings.seeds):
                    pick = (k, len(settings.seeds)) if settings.reference_draws == "per_seed" else None
                    s_map = _per_item(recs, metric, None)
                    r_map = _per_item(ref, metric, pick)
                    ids = sorted(set(s_map) & set(r_map))
                    res = paired_test(metric, [s_map[i] for i in ids], [r_map[i] for i in ids],
                                      B=settings.bootstrap_samples,
                                      seed=int(stable_hash(f"{seed}|{split}|{variant}|{metric}", 8), 16))
                    per_seed.append({"seed": seed, **res.to_dict()})
                    per_seed_p[seed][metric] = res.p_value
                arr = {f: np.array([p[f] for p in per_seed], dtype=float) for f in ("s", "s_ref", "p_value", "c_cont", "diff")}
                results.append({
                    "split": split, "variant": variant, "metric": metric, "n": per_seed[0]["n"],
                    "s": float(arr["s"].mean()), "s_std": float(arr["s"].std(ddof=1)) if len(per_seed) > 1 else 0.0,
                    "s_ref": float(arr["s_ref"].mean()),
                    "s_ref_std": float(arr["s_ref"].std(ddof=1)) if len(per_seed) > 1 else 0.0,
                    "diff": float(arr["diff"].mean()),
                    "p_value": float(np.median(arr["p_value"])), "p_value_max": float(arr["p_value"].max()),
                    "c_cont": float(arr["c_cont"].mean()),
                    "c_cont_std": float(arr["c_cont"].std(ddof=1)) if len(per_seed) > 1 else 0.0,
                    "at_floor_all_seeds": all(p["at_floor"] for p in per_seed),
                    "test": per_seed[0]["test"], "per_seed": per_seed,
                })
            combos = [combine(per_seed_p[seed], settings.alpha) for seed in settings.seeds]
            verdicts.append({
                "split": split, "variant": variant, "rule": combos[0]["rule"], "alpha": settings.alpha,
                "metrics": combos[0]["metrics"],
                "p_value": float(np.median([c["p_value"] for c in combos])),
                "c_cont": float(np.mean([c["c_cont"] for c in combos])),
                "contaminated_seeds": sum(c["contaminated"] for c in combos),
                "contaminated": sum(c["contaminated"] for c in combos) * 2 > len(combos),
                "per_seed": combos,
            })
        for variant in sorted({v for (s, v) in groups if s == split}):
            recs = groups[(split, variant)]
            row = {"split": split, "variant": variant, "n_rows": len(recs)}
            if any("malformed" in r for r in recs):
                row["zero_cot_malformed"] = int(sum(bool(r.get("malformed")) for r in recs))
                row["zero_cot_malformed_rate"] = row["zero_cot_malformed"] / len(recs)
            if any("cot_malformed" in r for r in recs):
                row["full_cot_malformed"] = int(sum(bool(r.get("cot_malformed")) for r in recs))
                row["full_cot_malformed_rate"] = row["full_cot_malformed"] / len(recs)
                row["full_cot_acc"] = float(np.mean([bool(r.get("cot_correct")) for r in recs]))
            malformed.append(row)
    return {"results": results, "verdicts": verdicts, "malformed": malformed}


def detect(backend: Backend, datasets: Sequence[DetectDataset], probe: ProbeConfig, out_dir: str | Path,
           settings: DetectSettings | None = None, *, tracker: Any = None, extra: dict[str, Any] | None = None,
           title: str | None = None) -> dict[str, Any]:
    """Probe, test and report; writes records.jsonl, summary.json, table.md and c_cont.png to out_dir."""
    from zcp.report import results_rows, write_reports

    settings = settings or DetectSettings()
    out = Path(out_dir)
    records = collect_records(backend, datasets, probe, out, settings)
    summary: dict[str, Any] = {
        "model": getattr(backend, "name", None),
        "metrics": list(probe.metrics),
        "seeds": list(settings.seeds),
        "bootstrap_samples": settings.bootstrap_samples,
        "alpha": settings.alpha,
        "reference_draws": settings.reference_draws,
        "datasets": [{"split": ds.split, "n_items": len(ds.originals),
                      "n_reference_rows": sum(len(v) for v in ds.reference.values()),
                      "variants": {k: sum(len(x) for x in v.values()) for k, v in ds.variants.items()}}
                     for ds in datasets],
        **analyse(records, probe.metrics, settings),
        **(extra or {}),
    }
    (out / SUMMARY).write_text(json.dumps(summary, indent=2, default=str))
    paths = write_reports(summary, out, title)
    if tracker is not None:
        tracker.table("results", results_rows(summary))
        tracker.table("verdicts", [{k: v[k] for k in ("split", "variant", "p_value", "c_cont", "contaminated")}
                                   for v in summary["verdicts"]])
        tracker.summary({f"{r['split']}/{r['variant']}/{r['metric']}/c_cont": r["c_cont"] for r in summary["results"]})
        tracker.image("c_cont", str(paths["plot"]))
    return summary


def load_datasets(data_cfg: Any) -> tuple[list[DetectDataset], list[dict[str, Any]]]:
    """Datasets named by a `data` config (one, or C and U when a manifest is given), and skipped rows."""
    from zcp.config import to_dict
    from zcp.data.loaders import load_items, load_paired, resolve_path

    d = to_dict(data_cfg)
    if not d.get("reference_path"):
        raise ValueError("data.reference_path is required: the perturbed reference set of the benchmark")
    skipped: list[dict[str, Any]] = []
    items = load_items(d["path"], d.get("format", "items"), fields=d.get("fields") or None, variant=d.get("variant"),
                       limit=d.get("limit"), on_invalid=d.get("on_invalid", "error"), skipped=skipped)
    on_missing = d.get("missing_reference", "error")
    if on_missing not in ("error", "skip"):
        raise ValueError(f"data.missing_reference must be error or skip, not {on_missing!r}")
    reference = load_paired(d["reference_path"], items, d.get("reference_format", "items"),
                            fields=d.get("reference_fields") or None, variant=d.get("reference_variant"),
                            require_all=on_missing == "error")
    variants = {name: load_paired(path, items, d.get("variant_format", "items"), require_all=False,
                                  what=f"'{name}' variant")
                for name, path in (d.get("variant_paths") or {}).items() if path}
    # items without a reference row (rejected by the reference builder): left out and listed in summary.json
    skipped += [{"file": str(d["reference_path"]), "id": it.id, "reason": "no reference row"}
                for it in items if it.id not in reference]
    if d.get("manifest"):
        from zcp.data.split import Manifest

        manifest = Manifest.load(str(resolve_path(d["manifest"])))
        groups = {split: manifest.subset(items, split) for split in ("C", "U")}
    else:
        groups = {d.get("name") or Path(str(d["path"])).stem: items}
    out = []
    for split, sub in groups.items():
        sub = [it for it in sub if it.id in reference]
        ids = {it.id for it in sub}
        out.append(DetectDataset(split, sub, {k: v for k, v in reference.items() if k in ids},
                                 {n: {k: v for k, v in vv.items() if k in ids} for n, vv in variants.items()}))
    return out, skipped


def probe_config(probe_cfg: Any) -> ProbeConfig:
    """ProbeConfig from the `probe` config group."""
    from zcp.config import to_dict

    p = to_dict(probe_cfg)
    known = set(ProbeConfig.__dataclass_fields__)
    return ProbeConfig(**{k: v for k, v in p.items() if k in known})


def run_detect(cfg: Any) -> dict[str, Any]:
    """Entry point of evaluate/run_detect.py: data + model from config, detection, reports, W&B."""
    from zcp.config import build_backend, model_name, run_dir, save_config, to_dict
    from zcp.io import model_fingerprint, seed_everything
    from zcp.tracking import Tracker

    seeds = list(cfg.seeds) if cfg.get("seeds") else [int(cfg.seed)]
    seed_everything(int(seeds[0]))
    weights = {"model": model_fingerprint(cfg.model.get("path")), "adapter": model_fingerprint(cfg.model.get("adapter"))}
    out = run_dir(cfg, "detect", str(cfg.data.get("name", "")), model_name(cfg.model), extra=weights)
    save_config(cfg, out)
    datasets, skipped = load_datasets(cfg.data)
    probe = probe_config(cfg.probe)
    settings = DetectSettings(seeds=seeds, bootstrap_samples=int(cfg.stats.bootstrap_samples),
                              alpha=float(cfg.stats.alpha), reference_draws=str(cfg.stats.reference_draws),
                              chunk_size=int(cfg.run.chunk_size), progress=bool(cfg.run.progress))
    backend = build_backend(cfg.model)
    with Tracker(cfg.get("logger"), run_config=to_dict(cfg), run_dir=str(out), job_type="detect") as tracker:
        summary = detect(backend, datasets, probe, out, settings, tracker=tracker,
                         extra={"skipped_rows": skipped, "output_dir": str(out)},
                         title=f"ZCP on {cfg.data.get('name')} — {model_name(cfg.model)}")
        files = [str(out / SUMMARY), str(out / TABLE), str(out / "config.yaml")]
        if cfg.get("logger") and cfg.logger.get("log_records"):
            files.append(str(out / RECORDS))
        tracker.artifact("detect-results", "zcp-detect", files)
    print((out / TABLE).read_text())
    print(f"wrote {out}")
    return summary
