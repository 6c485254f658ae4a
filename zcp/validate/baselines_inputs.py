"""What a baselines job reads: its C and U items with their reference sets, from a contamination run dir
(`inputs_from_run_dir`: the same units as the run's ZCP detection) or from data files (`inputs_from_data`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zcp.core.items import Item
from zcp.core.rundir import (
    BENCHMARK_ITEMS,
    DETECTION_RECORDS,
    EXPOSURE,
    MANIFEST,
    MODEL,
    RUN_CONFIG,
    ContaminationRun,
)
from zcp.errors import ConfigError

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

    run = ContaminationRun(run_dir).require(MANIFEST, BENCHMARK_ITEMS, EXPOSURE, RUN_CONFIG, MODEL)
    items = load_items(run.items_path, "items")
    manifest = Manifest.load(run.manifest_path)
    groups, refs, _ = simulation_splits(run.config, items, manifest, run_dir=run.path)
    files = {}
    for key, split in (("data", "C"), ("u", "U")):
        sub = groups[split]
        files[key] = FileData(key, f"{run.items_path}#{split}", sub, {it.id: refs[it.id] for it in sub})
    det, passed = run.newest_detection()
    note = None
    if passed:
        note = passed[0] if det is None else None
        log.warning("%s%s", "; ".join(passed), f"; using {det}" if det is not None else "")
    return JobInputs(files, str(run.model_path), None, ref_override or run.exposure.get("base_model"),
                     str(det / DETECTION_RECORDS) if det is not None else None, run.name, detection_note=note)


def inputs_from_data(cfg: Any) -> JobInputs:
    """C (data.path) and optional U (data.u_path, or a data.manifest split), with optional references.

    `cfg`: the job's checked BaselinesConfig, or a config with `data`, `model` and optional `ref_model`
    (each built into its schema, zcp.config.schemas.group_config: the defaults are the dataclasses').

    The data is read by `zcp.benchmarks.dataset.read_data` (the one reader of a `data` config): a question
    repeated within a file, or in both C and U (one benchmark), is refused (`data.on_duplicate=error`) or kept
    once (`merge`: its first copy, C's when in both; the copies left out are listed with the data issues).
    Items without a reference row (`data.missing_reference=skip`) stay: only the reference-based detectors
    need one; they are listed with the data issues."""
    from zcp.benchmarks.data_config import DataConfig
    from zcp.benchmarks.dataset import GENERATED_FORMATS, read_data
    from zcp.config.model import ModelConfig
    from zcp.config.schemas import group_config

    d = group_config(DataConfig, getattr(cfg, "data", None), "data")
    if not d.path and d.format not in GENERATED_FORMATS:
        raise ConfigError("data.path is required (or run_dir=outputs/contaminate/<run>)")
    read = read_data(d)
    files: dict[str, FileData] = {}
    for key, g in zip(("data", "u"), read.groups.values(), strict=False):  # C (or the one group), then U
        files[key] = FileData(key, g.path, g.items,
                              {it.id: read.references[it.id] for it in g.items if it.id in read.references})
    m = group_config(ModelConfig, getattr(cfg, "model", None), "model")
    ref_model = getattr(cfg, "ref_model", None)  # null: no reference model unless a run dir names one
    ref = group_config(ModelConfig, ref_model, "ref_model").path if ref_model is not None else None
    return JobInputs(files, str(m.path), m.adapter, ref, None, read.name, read.issues)


# ------------------------------------------------------------------------------------------ detection records
