"""The jobs' root schemas (`JOBS`: the top level of conf/<job>.yaml for each entry point); `job_schema(job)` gives one.

A root lives beside the job that reads it and registers itself with `register_job` when its module is imported:
detect (zcp.probe.probe_config), build_data (zcp.benchmarks.data_config), contaminate and demo
(zcp.simulate.simulation_config), pretrain_base (zcp.simulate.train_config), ablations and report
(zcp.validate.study_config), baselines (zcp.validate.baselines_config), calibration (zcp.validate.calibration). Each
entry point imports its job's module before Hydra composes its config. Defined here: the roots that need no group
of a higher layer (arithmark, exposure_report).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from zcp.config.checks import check_value
from zcp.config.model import ModelConfig
from zcp.core.tracking import LoggerConfig


@dataclass
class ArithMarkJob:
    """Top level of conf/arithmark.yaml (evaluate/run_arithmark.py)."""

    seed: int = 0
    n_per_stage: int = 1000
    stages: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    data_path: str | None = None
    output_dir: Any = None
    chunk_size: int = 256
    model: ModelConfig = field(default_factory=ModelConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)

    def __post_init__(self) -> None:
        check_value(self.n_per_stage >= 1, "n_per_stage", self.n_per_stage, ">= 1")
        check_value(len(self.stages) >= 1 and set(self.stages) <= {1, 2, 3, 4, 5}, "stages", list(self.stages),
                    "a non-empty subset of [1, 2, 3, 4, 5]")
        check_value(self.chunk_size >= 1, "chunk_size", self.chunk_size, ">= 1")


@dataclass
class ExposureReportJob:
    """Arguments of evaluate/run_exposure_report.py (root=, name=, out=)."""

    root: str = "outputs/contaminate"
    name: str = "exposure"
    out: str | None = None


# job name -> its root schema (a class, or a function giving it: imported late)
JOBS: dict[str, Any] = {"arithmark": ArithMarkJob, "exposure_report": ExposureReportJob}


def register_job(name: str, root: Any) -> None:
    """Add a job's root schema (a dataclass, or a function giving it) under `name`: a job's root registers itself
    when its module is imported, as its entry point does before validating; the config layer never imports the
    jobs that use it."""
    JOBS[name] = root


# the jobs whose module registers their root, and that module (named in the error for an unimported one)
REGISTERED_BY = {"detect": "zcp.probe.probe_config", "build_data": "zcp.benchmarks.data_config",
                 "contaminate": "zcp.simulate.simulation_config", "demo": "zcp.simulate.simulation_config",
                 "pretrain_base": "zcp.simulate.train_config", "ablations": "zcp.validate.study_config",
                 "report": "zcp.validate.study_config", "baselines": "zcp.validate.baselines",
                 "calibration": "zcp.validate.calibration"}


def job_schema(job: str) -> type:
    """The root dataclass of a job (`JOBS`)."""
    if job not in JOBS and job in REGISTERED_BY:
        raise KeyError(f"job {job!r} is registered by {REGISTERED_BY[job]}: import it before validating")
    if job not in JOBS:
        raise KeyError(f"unknown job {job!r}; known: {sorted(JOBS)}")
    node = JOBS[job]
    return node if dataclasses.is_dataclass(node) else node()
