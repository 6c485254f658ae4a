"""What a baselines job reads: its C and U items with their reference sets, from a contamination run dir
(`inputs_from_run_dir`: the same units as the run's ZCP detection) or from data files (`inputs_from_data`).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zcp.core.io import read_json
from zcp.core.items import Item
from zcp.errors import ConfigError, DataError

log = logging.getLogger("zcp.validate.baselines")  # the job's logger


@dataclass
class FileData:
    """One benchmark file of the job: its originals and (optional) reference items per original id."""

    name: str  # "data" (C) or "u" (U)
    path: str
    originals: list[Item]
    references: dict[str, list[Item]] = field(default_factory=dict)

    def units(self, with_references: bool) -> list[tuple[str, str, int, Item]]:
        """(variant, original_id, draw, item) of the originals, then of their references if asked."""
        out = [("original", it.id, 0, it) for it in self.originals]
        if with_references:
            out += [("reference", it.id, j, r) for it in self.originals for j, r in enumerate(self.references.get(it.id, []))]
        return out


@dataclass
class JobInputs:
    """What a run reads: files, the model and reference model paths, detection records, the name."""

    files: dict[str, FileData]
    model_path: str
    adapter: str | None
    ref_path: str | None
    records_path: str | None
    name: str
    issues: list[dict[str, Any]] = field(default_factory=list)
    ref_fingerprint: str | None = None  # the reference model's content (None: use ref_path)
    records_hash: str | None = None  # content hash of the detection records the zcp_* detectors read
    detection_note: str | None = None  # why a run dir's detection records are not used (unfinished ones)
    skip: dict[str, str] = field(default_factory=dict)  # detector -> reason it is skipped whatever its inputs


# ------------------------------------------------------------------------------------------ checks
def inputs_from_run_dir(run_dir: str | Path, ref_override: str | None = None) -> JobInputs:
    """C, U, model, reference model, references and detection records of a contamination run directory."""
    from zcp.benchmarks.loaders import load_items
    from zcp.benchmarks.split import Manifest
    from zcp.simulate.splits import simulation_splits

    run = Path(run_dir)
    for name in ("manifest.json", "benchmark_items.jsonl", "exposure.json", "run_config.json", "model"):
        if not (run / name).exists():
            raise ConfigError(f"run_dir={run_dir}: no {name} there (not a finished contamination run directory)")
    items = load_items(run / "benchmark_items.jsonl", "items")
    manifest = Manifest.load(run / "manifest.json")
    conf = (read_json(run / "run_config.json") or {}).get("config") or {}
    groups, refs, _ = simulation_splits(conf, items, manifest, run_dir=run)
    files = {}
    for key, split in (("data", "C"), ("u", "U")):
        sub = groups[split]
        files[key] = FileData(key, f"{run / 'benchmark_items.jsonl'}#{split}", sub, {it.id: refs[it.id] for it in sub})
    exposure = read_json(run / "exposure.json")
    from zcp.probe.detect import RECORDS as DET_RECORDS
    from zcp.probe.detect import newest_finished_detection

    det, passed = newest_finished_detection(run)
    note = None
    if passed:
        note = passed[0] if det is None else None
        log.warning("%s%s", "; ".join(passed), f"; using {det}" if det is not None else "")
    return JobInputs(files, str(run / "model"), None, ref_override or exposure.get("base_model"),
                     str(det / DET_RECORDS) if det is not None else None, run.name, detection_note=note)


def inputs_from_data(cfg: Any) -> JobInputs:
    """C (data.path) and optional U (data.u_path, or a data.manifest split), with optional references.

    `cfg`: the job's checked BaselinesConfig, or a config with `data`, `model` and optional `ref_model`
    (each built into its schema, zcp.config.schemas.group_config: the defaults are the dataclasses').

    A question repeated within a file, or in both C and U (one benchmark), is refused
    (`data.on_duplicate=error`) or kept once (`merge`: its first copy, C's when in both; the copies left
    out are listed with the data issues)."""
    from zcp.benchmarks.loaders import check_duplicates, field_map, load_benchmark, load_paired, resolve_path
    from zcp.benchmarks.split import Manifest
    from zcp.config.model import ModelConfig
    from zcp.config.schemas import DataConfig, group_config

    d = group_config(DataConfig, getattr(cfg, "data", None), "data")
    if not d.path:
        raise ConfigError("data.path is required (or run_dir=outputs/contaminate/<run>)")
    fmt = d.format
    fields = field_map(dataclasses.asdict(d.fields), where="data.fields")
    on_duplicate = d.on_duplicate
    issues: list[dict[str, Any]] = []

    def load(path: str, ref_path: str | None, name: str) -> tuple[Any, dict[str, list[Item]]]:
        bench = load_benchmark(path, fmt, fields=fields, variant=d.variant, limit=d.limit, sample=d.sample,
                               seed=d.sample_seed, on_invalid=d.on_invalid, on_duplicate=on_duplicate)
        issues.extend([*bench.skipped, *bench.warnings])
        refs: dict[str, list[Item]] = {}
        if ref_path:
            rf = d.reference_format
            own = field_map(d.reference_fields, where="data.reference_fields") or (fields if rf == fmt else {})
            refs = load_paired(ref_path, bench, rf, fields=own, variant=d.reference_variant,
                               pair_by=d.pair_by, require_all=d.missing_reference == "error", warnings=issues)
        return bench, refs

    bench, refs = load(d.path, d.reference_path, "data")
    files: dict[str, FileData] = {}
    if d.manifest:
        if d.u_path:
            raise ConfigError("data.manifest and data.u_path: give one way to name U")
        manifest = Manifest.load(str(resolve_path(d.manifest)))
        by_id = {it.id: it for it in bench.items}
        for key, split, ids in (("data", "C", manifest.c_ids), ("u", "U", manifest.u_ids)):
            missing = [i for i in ids if i not in set(bench.ids)]
            if missing:
                raise DataError(f"{len(missing)} id(s) of split {split} are not in data file {bench.path}, first "
                                f"{missing[0]!r}", path=str(d.manifest), field="id")
            sub = [by_id[i] for i in ids if i in by_id]
            files[key] = FileData(key, f"{bench.path}#{split}", sub, {i.id: refs.get(i.id, []) for i in sub})
    else:
        files["data"] = FileData("data", bench.path, bench.items, refs)
        if d.u_path:
            ub, urefs = load(d.u_path, d.u_reference_path, "u")
            # an id names one item: in C and in U it would be leaked and clean at once (U = C, or a U cut
            # from the same file with an overlap) and the AUROC of C vs U would measure nothing
            c_ids = set(bench.ids)
            shared = [it.id for it in ub.items if it.id in c_ids]
            if shared:
                raise DataError(f"U shares {len(shared)} of its {len(ub.items)} item id(s) with C ({bench.path}), "
                                f"first {shared[0]!r}: C and U must be disjoint", path=ub.path, field="id")
            # C and U are one benchmark: a question in both keeps C's copy (first), U's is listed as left out
            both = check_duplicates(bench.items + ub.items, ub.path, on_duplicate, dropped=issues,
                                    name=f"data files {bench.path} (C) and {ub.path} (U)")
            u_items = both[len(bench.items):]
            if not u_items:
                raise DataError(f"no item of U is left: all {len(ub.items)} of its questions are in C "
                                f"({bench.path}); C and U must be disjoint", path=ub.path, field="question")
            u_ids = {it.id for it in u_items}
            files["u"] = FileData("u", ub.path, u_items, {k: v for k, v in urefs.items() if k in u_ids})
        elif d.u_reference_path:
            raise ConfigError("data.u_reference_path is set without data.u_path")
    m = group_config(ModelConfig, getattr(cfg, "model", None), "model")
    ref_model = getattr(cfg, "ref_model", None)  # null: no reference model unless a run dir names one
    ref = group_config(ModelConfig, ref_model, "ref_model").path if ref_model is not None else None
    return JobInputs(files, str(m.path), m.adapter, ref, None, str(d.name or Path(str(d.path)).stem), issues)


# ------------------------------------------------------------------------------------------ detection records
