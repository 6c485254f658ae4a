"""The benchmark-side config schemas, beside the loaders, builders and paraphrasers that own their choices:
`data` (a benchmark file with its reference set and variants, zcp.benchmarks.loaders and zcp.benchmarks.dataset),
`reference` (the builder registry, zcp.benchmarks.references.registry), `reference_shift` (the shift report),
`split` (zcp.benchmarks.split), `paraphrase` (the paraphraser registry) and the build_data job's root
(conf/build_data.yaml, evaluate/run_build_data.py).

Valid choices come from each owner: the file layouts (`zcp.benchmarks.loaders.FORMATS`) and the generated formats
(`GENERATED_FORMATS`, read by zcp.benchmarks.dataset), the pairing keys and duplicate policies of the loaders, the
registered reference builders and paraphrasers. Each group registers itself in the config layer's store when this
module is imported (`zcp.config.groups.register_group`), the root as job `build_data`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from zcp.benchmarks.loaders import DUPLICATE_POLICIES, PAIR_BY
from zcp.benchmarks.loaders import FORMATS as FILE_FORMATS
from zcp.benchmarks.paraphrase import paraphraser_class, paraphraser_names
from zcp.benchmarks.references.registry import (
    EXCLUDE_BENCHMARK,
    SPECIAL_CASE_POLICIES,
    available_reference_methods,
)
from zcp.config.checks import check_value, key_alias, unknown_key_message
from zcp.config.conform import MESSAGE_PREFIX
from zcp.config.groups import register_group
from zcp.config.jobs import register_job
from zcp.config.model import model_config
from zcp.core.tracking import LoggerConfig
from zcp.errors import ConfigError

GENERATED_FORMATS = ("wordproblems", "arithmark")  # formats a benchmark can be generated in (no data.path)
# every `data.format`: the file layouts (items, the default, first) and the generated ones
FORMATS = (*sorted(FILE_FORMATS, key=lambda f: f != "items"), *GENERATED_FORMATS)
OVERFLOW_POLICIES = ("error", "skip", "truncate")  # a probe prompt longer than the model's context (zcp.probe.detect)


@dataclass
class ReferenceChoice:
    """Which reference builder and what it must avoid (zcp.benchmarks.references.registry; see conf/reference/auto.yaml)."""

    method: str = "auto"  # a registered builder, auto (from the data) or none
    exclude: list[str] = field(default_factory=lambda: ["auto"])  # values the model trained on: auto | corpus:DIR | items:FILE
    exclude_benchmark: str = "auto"  # keep draws off the other benchmark items' values: auto | true | false
    special_cases: str = "drop"  # matched builders: an item no valid reference can match: drop | keep

    def __post_init__(self) -> None:
        methods = available_reference_methods()
        check_value(self.method in methods, "reference.method", self.method, f"one of {methods}")
        check_value(str(self.exclude_benchmark).lower() in EXCLUDE_BENCHMARK, "reference.exclude_benchmark",
                    self.exclude_benchmark, f"one of {list(EXCLUDE_BENCHMARK)}")
        check_value(self.special_cases in SPECIAL_CASE_POLICIES, "reference.special_cases", self.special_cases,
                    f"one of {list(SPECIAL_CASE_POLICIES)}")


@dataclass
class FieldsConfig:
    """Source field names of a JSONL/JSON/parquet file (null: the default name)."""

    id: str | None = None
    question: str | None = None
    answer: str | None = None
    solution: str | None = None
    metadata: str | None = None
    original_id: str | None = None  # reference/variant rows: the original item's id
    original_index: str | None = None  # data rows: the source benchmark's index (default original_index|index|idx)
    original_question: str | None = None  # reference/variant rows: the original's text, checked when present


@dataclass
class DataConfig:
    """A benchmark file with its reference set and optional variants (conf/data/*.yaml extend this). Keys are
    documented in conf/data/jsonl.yaml and zcp.benchmarks.loaders; generators use n / generator_seed (word
    problems) and n_per_stage (ArithMark)."""

    name: str = "custom"
    path: Any = None
    format: str = "items"
    fields: FieldsConfig = field(default_factory=FieldsConfig)
    variant: str | None = None
    limit: int | None = None
    sample: int | None = None
    sample_seed: int = "${oc.select:seed,0}"  # type: ignore[assignment]  # the run's seed, else 0
    on_invalid: str = "error"
    on_duplicate: str = "error"  # a question repeated in the benchmark: error | merge (count it once)
    pair_by: str | None = None
    reference_path: Any = None
    reference_format: str = "items"
    reference_fields: Any = None
    reference_variant: str | None = None
    variant_paths: dict[str, str | None] = field(default_factory=lambda: {"paraphrased": None})
    variant_format: str | None = None
    variant_fields: Any = None
    variant_prefix: str | None = None
    manifest: str | None = None
    missing_reference: str = "error"
    on_overflow: str = "error"  # a probe prompt longer than the model's context: error | skip | truncate
    n: int | None = None  # format wordproblems, generated: items; null = 1000 (__post_init__; lets a run add +data.n=N)
    generator_seed: int | None = None  # generators: null = the run's seed
    n_per_stage: int | None = None  # format arithmark, generated: records per stage; null = 1000 (__post_init__)
    families: list[str] | None = None  # format wordproblems: families to generate (null: all)
    # a second file U beside `path` (= C) with its own reference set (detection and baselines alike, read by
    # zcp.benchmarks.dataset.read_data), and the metadata the guided-instruction detector names (Golchin & Surdeanu 2023)
    u_path: Any = None
    u_reference_path: Any = None
    dataset_name: str | None = None
    split_name: str | None = None
    control_path: Any = None  # detection's clean control set, read as the data is (zcp.probe.control)
    control_reference_path: Any = None  # its own reference set (set exactly when control_path is: DetectJob)

    def __post_init__(self) -> None:
        for key, val in (("format", self.format), ("reference_format", self.reference_format),
                         ("variant_format", self.variant_format)):
            check_value(val is None or val in FORMATS, f"data.{key}", val, f"one of {list(FORMATS)}")
        check_value(self.on_invalid in ("error", "skip"), "data.on_invalid", self.on_invalid, "error or skip")
        check_value(self.on_duplicate in DUPLICATE_POLICIES, "data.on_duplicate", self.on_duplicate,
                    f"one of {list(DUPLICATE_POLICIES)}")
        check_value(self.missing_reference in ("error", "skip"), "data.missing_reference", self.missing_reference,
               "error or skip")
        check_value(self.on_overflow in OVERFLOW_POLICIES, "data.on_overflow", self.on_overflow,
               f"one of {list(OVERFLOW_POLICIES)}")
        check_value(self.pair_by is None or self.pair_by in PAIR_BY, "data.pair_by", self.pair_by,
               f"null or one of {sorted(PAIR_BY)}")
        for key in ("limit", "sample"):
            val = getattr(self, key)
            check_value(val is None or val >= 1, f"data.{key}", val, "null or >= 1")
        for key in ("n", "n_per_stage"):
            if getattr(self, key) is None:
                setattr(self, key, 1000)
            check_value(getattr(self, key) >= 1, f"data.{key}", getattr(self, key), "null (1000) or >= 1")
        check_value(self.limit is None or self.sample is None, "data.sample", self.sample,
               "null when data.limit is set (limit = the first N, sample = N at random: choose one)")


@dataclass
class SplitConfig:
    """The C/U split of run_build_data (zcp.benchmarks.split.split_items)."""

    c_fraction: float = 0.5  # share of items leaked into training (Dataset C); the rest is Dataset U
    stratify_by: str | None = None  # a metadata key (stage, family, source, difficulty) or null

    def __post_init__(self) -> None:
        check_value(0.0 < self.c_fraction < 1.0, "split.c_fraction", self.c_fraction,
                    "in (0, 1) (both C and U need items)")


def check_paraphraser_options(name: str, options: Any, key: str) -> None:
    """Refuse an option the paraphraser `name` does not take (its constructor's keyword arguments)."""
    check_value(isinstance(options, dict), key, options, "a mapping of the paraphraser's options")
    cls = paraphraser_class(name)  # the built-in ones are registered: this module imports zcp.benchmarks.paraphrase
    if cls is None:  # an unknown name is refused by the caller
        return
    params = inspect.signature(cls.__init__).parameters
    # named keyword arguments only: a catch-all **kwargs would swallow a misspelt option
    known = [p for p in params if p not in ("self", "backend") and params[p].kind not in
             (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)]
    for k in options:
        if k not in known:
            raise ConfigError(unknown_key_message(key, str(k), known, f" (options of paraphraser {name})"))


@dataclass
class ParaphraseConfig:
    """run_build_data's `paraphrase` group (conf/paraphrase/*.yaml): which paraphraser, k variants, of what."""

    name: str = "rules"  # a registered paraphraser (template, rules, llm) or none
    k: int = 6  # variants per item (0: none)
    split: str = "C"  # C: paraphrase Dataset C (what training leaks) | all
    model: dict[str, Any] | None = None  # llm: a model config (built through zcp.backends.registry.build_backend)
    options: dict[str, Any] = field(default_factory=dict)  # the paraphraser's keyword arguments

    def __post_init__(self) -> None:
        check_value(self.k >= 0, "paraphrase.k", self.k, ">= 0 (0: no paraphrases)")
        check_value(self.split in ("C", "all"), "paraphrase.split", self.split, "C or all")
        if self.name != "none":
            check_paraphraser_options(self.name, self.options, "paraphrase.options")
            check_value(paraphraser_class(self.name) is not None, "paraphrase.name", self.name,
                        f"none or one of {paraphraser_names()}")
        if self.model is not None:
            with key_alias("model", "paraphrase.model"):
                model_config({k: v for k, v in self.model.items() if v != "???"}, "paraphrase.model")


@dataclass
class ReferenceBuildConfig(ReferenceChoice):
    """run_build_data's `reference` group (conf/reference/*.yaml): the builder, m draws, LLM pipeline models."""

    m: int = 3  # reference draws per item (distinct); 3 from the power calculation of docs/benchmarks.md
    exclude: Any = "auto"  # auto | a list of corpus:<model dir> / items:<training items .jsonl> sources
    generator: dict[str, Any] | None = None  # method llm: the generator's model config
    judges: list[dict[str, Any]] = field(default_factory=list)  # method llm: the judges' model configs
    pipeline: dict[str, Any] = field(default_factory=dict)  # method llm: zcp.benchmarks.references.llm_pipeline settings

    def __post_init__(self) -> None:
        super().__post_init__()
        check_value(self.m >= 1, "reference.m", self.m, ">= 1 (reference draws per item)")
        check_value(isinstance(self.exclude, (str, list)), "reference.exclude", self.exclude,
                    "auto or a list of corpus:DIR / items:FILE sources")


@dataclass
class ReferenceShiftConfig:
    """run_build_data's difficulty-shift warning thresholds (build_report.json reference.shift)."""

    max_digit_shift: float = 0.05
    max_size_shift: float = 0.10

    def __post_init__(self) -> None:
        for key in ("max_digit_shift", "max_size_shift"):
            check_value(0.0 <= getattr(self, key) <= 1.0, f"reference_shift.{key}", getattr(self, key), "in [0, 1]")


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


register_group("data", DataConfig)
register_group("split", SplitConfig, by_name=False)
register_group("reference_shift", ReferenceShiftConfig, by_name=False)
register_job("build_data", BuildDataJob)
MESSAGE_PREFIX.update({ReferenceChoice: "reference", ReferenceBuildConfig: "reference", ParaphraseConfig: "paraphrase"})
