"""The study jobs' config schemas, beside the studies: `ablation` (the paper's ablations, zcp.validate.ablations;
conf/ablations.yaml, evaluate/run_ablations.py) and `report` (the detector study report, zcp.validate.study;
conf/report.yaml, evaluate/run_report.py), with the two jobs' roots.

The metrics they may name come from the probe's metric table (zcp.probe.metrics). Each group registers itself in
the config layer's store when this module is imported (`zcp.config.groups.register_group`), the roots as jobs
`ablations` and `report`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zcp.benchmarks.data_config import DataConfig
from zcp.config.checks import check_seeds, check_value, refuse_shard
from zcp.config.groups import register_group
from zcp.config.jobs import register_job
from zcp.config.model import ModelConfig
from zcp.config.run import RunConfig
from zcp.core.tracking import LoggerConfig
from zcp.probe.metrics import BUILTIN_METRICS, get_metric, metric_names, unknown_metrics
from zcp.probe.probe_config import ProbeGroupConfig, StatsConfig

ABLATIONS = ("truncation", "full_cot", "sample_size")
TRUNCATION_METRICS = tuple(m for m in BUILTIN_METRICS if not get_metric(m).needs_full_cot)  # acc, p_first, p_all


def truncation_metrics() -> list[str]:
    """Registered metrics the truncated-CoT probe can give: those needing no full-CoT generation (not con)."""
    return [m for m in metric_names() if not get_metric(m).needs_full_cot]


@dataclass
class AblationConfig:
    """The paper's ablations (evaluate/run_ablations.py): truncation curve, full-CoT, sample size."""

    ratios: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])  # share of the CoT kept
    unit: str = "auto"  # what the ratio counts: auto (tokens if the backend has a tokenizer, else words) | tokens | words
    metrics: list[str] = field(default_factory=lambda: list(TRUNCATION_METRICS))  # truncation and full-CoT metrics
    max_draws: int | None = None  # reference draws per item probed (the first ones); null = all of the run's
    sizes: list[int] = field(default_factory=lambda: [10, 25, 50, 100, 200])  # N (those <= n; "all" is added)
    subsets: int = 20  # R random item subsets per N
    subset_seed: int = 0
    subset_bootstrap_samples: int = 1000  # B per seed of the continuous metrics' test in each subset
    records: str | None = None  # detection records.jsonl of the N study; null = the run dir's newest detect/FT*/

    def __post_init__(self) -> None:
        check_value(len(self.ratios) >= 1 and all(0.0 <= float(r) <= 1.0 for r in self.ratios), "ablation.ratios",
                    list(self.ratios), "a non-empty list of values in [0, 1]")
        check_value(self.unit in ("auto", "tokens", "words"), "ablation.unit", self.unit, "auto, tokens or words")
        check_value(len(self.metrics) >= 1 and set(self.metrics) <= set(truncation_metrics()), "ablation.metrics",
                    list(self.metrics), f"a non-empty subset of {truncation_metrics()}")
        check_value(self.max_draws is None or self.max_draws >= 1, "ablation.max_draws", self.max_draws, "null or >= 1")
        check_value(len(self.sizes) >= 1 and all(int(n) >= 2 for n in self.sizes), "ablation.sizes", list(self.sizes),
                    "a non-empty list of sizes >= 2")
        check_value(self.subsets >= 1, "ablation.subsets", self.subsets, ">= 1")
        check_value(self.subset_bootstrap_samples >= 1, "ablation.subset_bootstrap_samples",
                    self.subset_bootstrap_samples, ">= 1")


@dataclass
class StudyRunConfig:
    """One contamination condition of the detector study: its run dirs (null: left out of the report)."""

    run_dir: str | None = None  # outputs/contaminate/<run> (detect/FT* gives ZCP)
    ablations_dir: str | None = None  # outputs/ablations/<run> of evaluate/run_ablations.py
    baselines_dir: str | None = None  # output dir of evaluate/run_baselines.py (its summary.json)


@dataclass
class ExposureRunsConfig:
    """The detector study over exposure: contamination runs made with the baselines stage
    (conf/experiment/detector_exposure.yaml), each read from its dir (detect/FT*/ and baselines/)."""

    root: str = "outputs/contaminate"
    name: str | None = None  # collect every <root>/<name>__*/ (a sweep's jobs); null: only `runs`
    runs: list[str] = field(default_factory=list)  # run dirs given one by one (each must exist)


@dataclass
class ReportConfig:
    """The detector study report (evaluate/run_report.py): verbatim vs paraphrased leaks."""

    verbatim: StudyRunConfig = field(default_factory=StudyRunConfig)  # exposure.k=0: the originals leaked
    paraphrased: StudyRunConfig = field(default_factory=StudyRunConfig)  # the demo default (k paraphrases)
    exposure: ExposureRunsConfig = field(default_factory=ExposureRunsConfig)  # both leak kinds over exposure levels
    # more sample-size studies (evaluate/run_ablations.py dirs, e.g. on a larger benchmark for N = 100, 200)
    sample_size_dirs: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=lambda: list(BUILTIN_METRICS))  # ZCP metrics shown
    title: str = "Detector study"

    def __post_init__(self) -> None:
        for key in ("verbatim", "paraphrased"):
            val = getattr(self, key)
            if isinstance(val, dict):
                unknown = sorted(set(val) - set(StudyRunConfig.__dataclass_fields__))
                check_value(not unknown, f"report.{key}", unknown, "free of unknown keys")
                setattr(self, key, StudyRunConfig(**val))
        if isinstance(self.exposure, dict):
            unknown = sorted(set(self.exposure) - set(ExposureRunsConfig.__dataclass_fields__))
            check_value(not unknown, "report.exposure", unknown, "free of unknown keys")
            self.exposure = ExposureRunsConfig(**self.exposure)
        check_value(len(self.metrics) >= 1 and not unknown_metrics(self.metrics), "report.metrics",
                    list(self.metrics), f"a non-empty subset of [{', '.join(metric_names())}]")


@dataclass
class AblationsJob:
    """Top level of conf/ablations.yaml (evaluate/run_ablations.py)."""

    run_dir: str | None = None
    ablations: list[str] = field(default_factory=lambda: list(ABLATIONS))
    seed: int = 0
    seeds: list[int] | None = None
    output_dir: str | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    probe: ProbeGroupConfig = field(default_factory=ProbeGroupConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    stats: StatsConfig = field(default_factory=StatsConfig)
    run: RunConfig = field(default_factory=RunConfig)
    ablation: AblationConfig = field(default_factory=AblationConfig)

    def __post_init__(self) -> None:
        check_value(len(self.ablations) >= 1 and set(self.ablations) <= set(ABLATIONS), "ablations",
                    list(self.ablations), f"a non-empty subset of {list(ABLATIONS)}")
        refuse_shard(self.run.shard, "for evaluate/run_ablations.py (only evaluate/run_detect.py shards)")
        if self.seeds is not None:
            check_seeds(self.seeds, "seeds")


@dataclass
class ReportJob:
    """Top level of conf/report.yaml (evaluate/run_report.py)."""

    output_dir: str | None = None
    report: ReportConfig = field(default_factory=ReportConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)


register_group("ablation", AblationConfig)
register_group("report", ReportConfig)
register_job("ablations", AblationsJob)
register_job("report", ReportJob)
