"""The jobs' root schemas (`JOBS`: the top level of conf/<job>.yaml for each entry point), built from the
groups of zcp.config.groups; `job_schema(job)` gives one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from zcp.config.checks import (
    check_seeds,
    check_value,
    refuse_shard,
)
from zcp.config.conform import MESSAGE_PREFIX
from zcp.config.groups import (  # noqa: F401
    ABLATIONS,
    AblationConfig,
    BaseModelConfig,
    BenchmarkConfig,
    CleanConfig,
    CotConfig,
    DataConfig,
    EvalConfig,
    ExposureConfig,
    LoggerConfig,
    ParaphraseConfig,
    ProbeGroupConfig,
    ReferenceBuildConfig,
    ReferenceShiftConfig,
    ReportConfig,
    RunConfig,
    SimDetectConfig,
    SimParaphraseConfig,
    SimRunConfig,
    SimSplitConfig,
    SplitConfig,
    StatsConfig,
    TrainConfig,
    _num,
)
from zcp.config.model import ModelConfig


# --------------------------------------------------------------------------------------------- the jobs' roots
@dataclass
class DetectJob:
    """Top level of conf/detect.yaml (evaluate/run_detect.py)."""

    seed: int = 0
    seeds: list[int] | None = None  # stability display seeds (null = [seed])
    output_dir: str | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    probe: ProbeGroupConfig = field(default_factory=ProbeGroupConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    stats: StatsConfig = field(default_factory=StatsConfig)
    run: RunConfig = field(default_factory=RunConfig)
    base_model: BaseModelConfig = field(default_factory=BaseModelConfig)

    def __post_init__(self) -> None:
        if self.seeds is not None:
            check_seeds(self.seeds, "seeds")
        if self.base_model.path is not None:  # zcp.probe.shard shards the audited model's run only
            refuse_shard(self.run.shard, "with base_model.path (the base model's DiD runs in one process)")
        d = self.data  # the control set and its references (zcp.probe.control) come together
        check_value(bool(d.control_path) == bool(d.control_reference_path), "data.control_reference_path",
                    d.control_reference_path, f"set exactly when data.control_path is (here {d.control_path!r})")


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
class BuildDataJob:
    """Top level of conf/build_data.yaml (evaluate/run_build_data.py)."""

    seed: int = 0
    output_dir: str | None = None
    log_reference_to_wandb: bool = False
    data: DataConfig = field(default_factory=DataConfig)
    reference: ReferenceBuildConfig = field(default_factory=ReferenceBuildConfig)
    paraphrase: ParaphraseConfig = field(default_factory=ParaphraseConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    reference_shift: ReferenceShiftConfig = field(default_factory=ReferenceShiftConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)


SIM_STAGES = ("contaminate", "detect", "baselines")  # zcp.simulate.pipeline.SIM_STAGES


@dataclass
class SimulationJob:
    """Top level of conf/contaminate.yaml and conf/demo.yaml (train/run_contaminate.py, train/run_demo.py).

    `train` comes before `exposure`: the exposure knobs default to the profile's values, so a bad
    `train.sft.learning_rate` is named as the key the user set, not as `exposure.lr`."""

    seed: int = 0
    name: str = "contaminate"
    output_dir: str | None = None
    manifest_path: str | None = None
    stages: list[str] = field(default_factory=lambda: ["contaminate"])
    baselines_overrides: list[str] = field(default_factory=list)
    model: ModelConfig = field(default_factory=ModelConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    exposure: ExposureConfig = field(default_factory=ExposureConfig)
    detect: SimDetectConfig = field(default_factory=SimDetectConfig)
    stats: StatsConfig = field(default_factory=StatsConfig)
    run: SimRunConfig = field(default_factory=SimRunConfig)  # detection's probing and the training stages' limit
    probe: ProbeGroupConfig = field(default_factory=ProbeGroupConfig)
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    split: SimSplitConfig = field(default_factory=SimSplitConfig)
    paraphrase: SimParaphraseConfig = field(default_factory=SimParaphraseConfig)
    clean: CleanConfig = field(default_factory=CleanConfig)
    cot: CotConfig = field(default_factory=CotConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    data: DataConfig | None = None  # benchmark.source=data: the `data` group (+data=gsm8k)

    def __post_init__(self) -> None:
        check_value(len(self.stages) >= 1 and set(self.stages) <= set(SIM_STAGES), "stages", list(self.stages),
                    f"a non-empty subset of {list(SIM_STAGES)}")
        refuse_shard(self.run.shard, "for a simulation (only evaluate/run_detect.py shards)")


@dataclass
class ReportJob:
    """Top level of conf/report.yaml (evaluate/run_report.py)."""

    output_dir: str | None = None
    report: ReportConfig = field(default_factory=ReportConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)


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
class NumberLimits:
    """pretrain_base's `limits` (zcp.benchmarks.wordproblems.NumberRanges)."""

    min_operand: int = 2
    max_operand: int = 20
    max_factor: int = 9
    max_multiplicand: int = 12
    max_answer: int = 999

    def __post_init__(self) -> None:
        check_value(1 <= self.min_operand <= self.max_operand, "limits.min_operand", self.min_operand,
                    "in [1, limits.max_operand]")
        for key in ("max_factor", "max_multiplicand", "max_answer"):
            check_value(getattr(self, key) >= 1, f"limits.{key}", getattr(self, key), ">= 1")


@dataclass
class PretrainBaseJob:
    """Top level of conf/pretrain_base.yaml (train/run_pretrain_base.py), and the recipe of the shipped base model:
    `zcp.simulate.base_model.PretrainConfig` is this class, so each default is defined here, once, and recipe.json
    records these fields (all but `logger`). The defaults are the shipped checkpoint's recipe."""

    seed: int = 0  # drives the corpus, the tokenizer input order, init and batch order
    out_dir: str = "zcp/assets/base_model"
    init_from: str | None = None  # continue from a trained model folder (its tokenizer and weights)
    n_train: int = 150000  # corpus items: chain-of-thought word problems and drills, the reserved pool excluded
    rewording_fraction: float = 0.3  # share of items using rewording templates
    drill_fraction: float = 0.4  # share of bare arithmetic drills
    answer_only_fraction: float = 0.0  # share of items whose assistant turn is the final-answer line only
    families: list[str] | None = None  # word-problem families (null: all, as the reserved pool needs)
    reserve_seed: int = 9173  # zcp.benchmarks.reserved.BENCHMARK_SEED (a test pins them equal)
    reserve_n: int = 300  # zcp.benchmarks.reserved.RESERVED_BENCHMARK_ITEMS
    limits: NumberLimits = field(default_factory=NumberLimits)
    vocab_size: int = 768
    hidden_size: int = 96
    num_layers: int = 8
    num_heads: int = 4
    intermediate_size: int = 288
    max_position_embeddings: int = 256
    batch_size: int = 32
    lr: float = 0.004
    min_lr_ratio: float = 0.05
    warmup_steps: int = 100
    weight_decay: float = 0.01
    max_steps: int = 3300
    max_minutes: float = 40.0
    threads: int = 1
    bf16: bool = True
    compile: bool = True
    bucket_widths: list[int] = field(default_factory=lambda: [44, 60, 76, 100])
    n_eval: int = 300  # held-out evaluation: the first n_eval items of the reserved (never seen) pool
    eval_batch_size: int = 100
    max_new_tokens: int = 80
    logger: LoggerConfig = field(default_factory=LoggerConfig)  # not part of the recipe

    def __post_init__(self) -> None:
        for key in ("rewording_fraction", "drill_fraction", "answer_only_fraction"):
            check_value(0.0 <= getattr(self, key) <= 1.0, key, getattr(self, key), "in [0, 1]")
        for key in ("n_train", "vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                    "max_position_embeddings", "batch_size", "max_steps", "threads", "eval_batch_size", "max_new_tokens"):
            check_value(getattr(self, key) >= 1, key, getattr(self, key), ">= 1")
        check_value(self.lr > 0, "lr", self.lr, "> 0")
        check_value(self.hidden_size % self.num_heads == 0, "num_heads", self.num_heads, "a divisor of hidden_size")
        check_value(bool(self.out_dir), "out_dir", self.out_dir, "a folder path (the shipped model: zcp/assets/base_model)")


@dataclass
class ExposureReportJob:
    """Arguments of evaluate/run_exposure_report.py (root=, name=, out=)."""

    root: str = "outputs/contaminate"
    name: str = "exposure"
    out: str | None = None


# job name -> its root schema (a class, or a function giving it: imported late)
JOBS: dict[str, Any] = {
    "detect": DetectJob, "ablations": AblationsJob, "build_data": BuildDataJob, "contaminate": SimulationJob,
    "demo": SimulationJob, "report": ReportJob, "arithmark": ArithMarkJob, "pretrain_base": PretrainBaseJob,
    "exposure_report": ExposureReportJob,
}


def register_job(name: str, root: Any) -> None:
    """Add a job's root schema (a dataclass, or a function giving it) under `name`: a job defined above the
    config layer (zcp.validate.baselines, zcp.validate.calibration) registers its own root when imported, as its
    entry point does before validating; the config layer never imports the jobs that use it."""
    JOBS[name] = root


# the jobs whose module registers their root, and that module (named in the error for an unimported one)
REGISTERED_BY = {"baselines": "zcp.validate.baselines", "calibration": "zcp.validate.calibration"}


def job_schema(job: str) -> type:
    """The root dataclass of a job (`JOBS`)."""
    if job not in JOBS and job in REGISTERED_BY:
        raise KeyError(f"job {job!r} is registered by {REGISTERED_BY[job]}: import it before validating")
    if job not in JOBS:
        raise KeyError(f"unknown job {job!r}; known: {sorted(JOBS)}")
    node = JOBS[job]
    return node if dataclasses.is_dataclass(node) else node()




MESSAGE_PREFIX[NumberLimits] = "limits"
