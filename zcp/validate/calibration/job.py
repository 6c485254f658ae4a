"""The calibration job's root schema (conf/calibration.yaml): its parts' settings are the dataclasses of this
package's modules; registered as job `calibration` (zcp.config.jobs.register_job) when the package is imported,
so that the config layer never imports the validate layer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from zcp.benchmarks.data_config import DataConfig
from zcp.config.checks import check_value, refuse_shard, user_key
from zcp.config.groups import LoggerConfig, RunConfig
from zcp.config.jobs import register_job
from zcp.config.model import ModelConfig
from zcp.errors import ConfigError
from zcp.probe.conventions import AUTO, parse_prefill, resolve_entries
from zcp.probe.probe_config import ProbeGroupConfig
from zcp.validate.calibration.real_null import BaseModelSettings, RealNullSettings
from zcp.validate.calibration.real_originals import POOL_KINDS, RealOriginalsSettings
from zcp.validate.calibration.simulated import (
    CONVENTION_DEPENDENCE,
    ConventionGridSettings,
    GridSettings,
    JointSettings,
    PowerSettings,
    SimSpec,
)


@dataclass
class CalibrationFlags:
    """conf/calibration.yaml `flags`: type-I estimates flagged in the report."""

    high: float = 0.07  # flag a type-I estimate above this
    low: float = 0.03  # ... or below this, unless the cell is discrete-limited
    discrete_below: float = 0.03  # discrete-limited: the exact binary test's mean attainable size < this


@dataclass
class CalibrationPlots:
    """conf/calibration.yaml `plots`."""

    n: list[int] = field(default_factory=lambda: [10, 100])  # n values drawn in type1.png


CALIBRATION_PARTS = ("real_originals", "simulation", "joint", "conventions", "power", "real_null", "base_model")


def _check_calibration(job: Any) -> None:
    """Ranges of the calibration job (its parts' settings are plain dataclasses without checks of their own)."""
    check_value(set(job.parts) <= set(CALIBRATION_PARTS), "parts", list(job.parts),
                f"a subset of {list(CALIBRATION_PARTS)}")
    check_value(len(job.alphas) >= 1 and all(0.0 < a < 1.0 for a in job.alphas), "alphas", list(job.alphas),
                "a non-empty list of levels in (0, 1)")
    refuse_shard(job.run.shard, "for evaluate/run_calibration.py (only evaluate/run_detect.py shards)")
    for group in ("simulation", "joint", "conventions", "power", "real_null", "base_model", "real_originals"):
        s = getattr(job, group)
        for key in ("replicates", "replicates_continuous", "replicates_large", "B", "subsets", "subset_size",
                    "null_pools", "chunk_size"):
            if hasattr(s, key):
                check_value(getattr(s, key) >= 1, f"{group}.{key}", getattr(s, key), ">= 1")
        for key in ("m", "n", "sizes"):  # grid dimensions: lists of positive sizes (real_originals.m: one size)
            if hasattr(s, key):
                val = getattr(s, key)
                vals = list(val) if isinstance(val, (list, tuple)) else [val]
                check_value(all(v is None or v >= 1 for v in vals), f"{group}.{key}", val, "sizes >= 1")
    conv = job.conventions
    check_value(all(c >= 2 for c in conv.conventions), "conventions.conventions", list(conv.conventions),
                "conventions per item, each >= 2")
    check_value(set(conv.dependence) <= set(CONVENTION_DEPENDENCE), "conventions.dependence", list(conv.dependence),
                f"a subset of {list(CONVENTION_DEPENDENCE)}")
    check_value(-1.0 <= conv.rho <= 1.0, "conventions.rho", conv.rho, "in [-1, 1]")
    for group in ("simulation", "joint", "conventions", "power"):
        acc = list(getattr(job, group).accuracy)
        check_value(all(0.0 < a < 1.0 for a in acc), f"{group}.accuracy", acc, "a list of values in (0, 1)")
    prefills = list(job.real_originals.prefills)
    try:
        entries = parse_prefill(prefills)
        if entries == AUTO:
            raise ValueError("auto is read, not listed: list the conventions (auto's reading: real_originals.auto_read)")
        resolve_entries(entries, job.probe.zero_cot_prefix, job.probe.answer_suffix)  # a str: ProbeGroupConfig checks it
    except ValueError as e:
        raise ConfigError(f"{user_key('real_originals.prefills')}={prefills!r}: {e}") from None
    check_value(job.real_originals.auto_read >= 0, "real_originals.auto_read", job.real_originals.auto_read,
                ">= 0 (0: no reading)")
    tested = job.real_originals.tested
    check_value(tested is None or set(tested) <= set(job.real_originals.models), "real_originals.tested", tested,
                f"null or names of real_originals.models {list(job.real_originals.models)}")
    for name, pool in dict(job.real_originals.pools).items():
        kind = getattr(pool, "kind", None)
        check_value(kind in POOL_KINDS, f"real_originals.pools.{name}.kind", kind, f"one of {list(POOL_KINDS)}")


def _calibration_job() -> type:
    """The calibration job's root (conf/calibration.yaml): its parts' settings are the dataclasses of
    zcp.validate.calibration's modules (imported here, late: they pull in numpy and scipy); built with
    make_dataclass so that the annotations are the classes themselves."""
    global _CALIBRATION_JOB
    if _CALIBRATION_JOB is not None:
        return _CALIBRATION_JOB
    def group(cls: type) -> Any:
        return field(default_factory=cls)

    spec = [("name", str, "calibration"), ("seed", int, 0), ("output_dir", str | None, None),
            ("parts", list[str], field(default_factory=lambda: list(CALIBRATION_PARTS))),
            ("alphas", list[float], field(default_factory=lambda: [0.05, 0.01])),
            ("flags", CalibrationFlags, group(CalibrationFlags)), ("spec", SimSpec, group(SimSpec)),
            ("simulation", GridSettings, group(GridSettings)), ("joint", JointSettings, group(JointSettings)),
            ("conventions", ConventionGridSettings, group(ConventionGridSettings)),
            ("power", PowerSettings, group(PowerSettings)), ("real_null", RealNullSettings, group(RealNullSettings)),
            ("base_model", BaseModelSettings, group(BaseModelSettings)),
            ("real_originals", RealOriginalsSettings, group(RealOriginalsSettings)),
            ("plots", CalibrationPlots, group(CalibrationPlots)), ("run", RunConfig, group(RunConfig)),
            ("model", ModelConfig, group(ModelConfig)), ("data", DataConfig, group(DataConfig)),
            ("probe", ProbeGroupConfig, group(ProbeGroupConfig)), ("logger", LoggerConfig, group(LoggerConfig))]
    _CALIBRATION_JOB = dataclasses.make_dataclass(
        "CalibrationJob", [(n, t, d if isinstance(d, dataclasses.Field) else field(default=d)) for n, t, d in spec],
        namespace={"__post_init__": _check_calibration,
                   "__doc__": "Top level of conf/calibration.yaml (evaluate/run_calibration.py)."})
    return _CALIBRATION_JOB


_CALIBRATION_JOB: type | None = None


register_job("calibration", _calibration_job)
