"""The baselines job's schema (conf/baselines.yaml): the detectors to run, their parameters, the inputs.

Stored in Hydra's ConfigStore as `baselines_schema` (the file's defaults name it) and registered as job
`baselines` (zcp.config.jobs.register_job) on import, so the config layer never imports the validate layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore

from zcp.benchmarks.data_config import DataConfig
from zcp.config.checks import check_value
from zcp.config.groups import LoggerConfig
from zcp.config.jobs import register_job
from zcp.config.model import ModelConfig
from zcp.errors import ConfigError
from zcp.probe.metrics import BUILTIN_METRICS
from zcp.probe.probe_config import StatsConfig

# conf/baselines.yaml's `detectors` (a test pins them equal): the baselines, then one zcp_<metric> per built-in metric
DEFAULT_DETECTORS = ["ppl", "zlib", "mink5", "mink10", "mink20", "mink30", "mink50", "minkpp5", "minkpp10",
                     "minkpp20", "minkpp30", "minkpp50", "ref", "dpcc", "recon", "guided", "trap",
                     *(f"zcp_{m}" for m in BUILTIN_METRICS)]


@dataclass
class BaselinesConfig:
    """Schema of conf/baselines.yaml (the primary config): unknown keys and wrong types fail at compose.

    `params`: per detector name, its constructor parameters (e.g. params.recon.temperature=0.7); checked
    by building every selected detector before anything is read or loaded.
    """

    seed: int = 0
    run_dir: Any = None  # outputs/contaminate/<run>: C, U, model, reference model and references from it
    output_dir: Any = None  # null: outputs/baselines/<data>__<model>__<config hash>; rerun = resume
    detectors: list[str] = field(default_factory=lambda: list(DEFAULT_DETECTORS))
    params: dict[str, Any] = field(default_factory=dict)
    alpha: float = StatsConfig.alpha  # level of the reference-set and guided-instruction tests (as stats.alpha)
    bootstrap_samples: int = StatsConfig.bootstrap_samples  # Monte Carlo relabellings of those tests (as stats's B)
    zcp_records: Any = None  # a ZCP detection run's records.jsonl (zcp_* detectors)
    progress: bool = False  # the backend's progress bars
    # typed loosely for composition (each is its own group); zcp.config.schemas.validate checks them as `schema`
    model: Any = field(default=None, metadata={"schema": ModelConfig})
    data: Any = field(default=None, metadata={"schema": DataConfig})
    ref_model: Any = field(default=None, metadata={"schema": ModelConfig})
    logger: Any = field(default=None, metadata={"schema": LoggerConfig})

    def __post_init__(self) -> None:
        check_value(0.0 < self.alpha < 1.0, "alpha", self.alpha, "in (0, 1)")
        check_value(self.bootstrap_samples >= 1, "bootstrap_samples", self.bootstrap_samples, ">= 1")
        check_value(len(self.detectors) >= 1, "detectors", list(self.detectors), "a non-empty list")
        check_value(len(set(self.detectors)) == len(self.detectors), "detectors", list(self.detectors),
                    "a list without repeats")
        check_detectors(list(self.detectors), dict(self.params or {}))


def check_detectors(detectors: list[str], params: dict[str, Any]) -> None:
    """Every detector name known, every params entry (selected or not: a typo must not pass silently) a known
    detector given a mapping of parameters its constructor takes; ConfigError naming the key."""
    from zcp.validate.detectors import (  # the registry, its built-in detectors registered
        get_detector,
        spec_of,
    )

    for name in detectors:
        try:
            spec_of(name)
        except KeyError as e:
            raise ConfigError(f"detectors: {e.args[0]}") from None
    for name, value in params.items():
        try:
            spec_of(name)
        except KeyError as e:
            raise ConfigError(f"params: {e.args[0]}") from None
        check_value(value is None or isinstance(value, dict), f"params.{name}", value,
                    "a mapping of the detector's parameters")
    for name in sorted(set(detectors) | set(params)):
        try:
            get_detector(name, **dict(params.get(name) or {}))
        except ValueError as e:
            raise ConfigError(f"params.{name}: {e}") from None


def register_schema() -> None:
    """Store the primary config's schema as `baselines_schema` (conf/baselines.yaml's defaults name it)."""
    ConfigStore.instance().store(name="baselines_schema", node=BaselinesConfig)
    register_job("baselines", BaselinesConfig)


register_schema()
