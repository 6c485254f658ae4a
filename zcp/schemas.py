"""Typed schemas of the config groups, registered in Hydra's ConfigStore.

Each schema is a dataclass whose fields carry the defaults (the YAML files override only what a job
changes). Hydra merges the YAML onto the schema when the config is composed, so an unknown or misspelt key
(`stats.bootstrap_sample=5`) or a value of the wrong type (`stats.alpha=high`) fails at compose time with
the key named. Ranges and choices are checked by each dataclass's `__post_init__`, which
`validate(cfg)` runs right after composition — before any file is read or any model loads.

Groups: `stats` (the test), `run` (probing in chunks), `detect` (the simulation's detection stage),
`exposure` (the contamination knobs), `model` (zcp.backends.config.ModelConfig), `data` (a benchmark file, its reference set and variants; every
conf/data/*.yaml extends conf/data/jsonl.yaml, which extends this schema). The `train.sft` / `train.grpo` groups are checked field by field
against TRL's own dataclasses (zcp.training.sft). `ablation` (evaluate/run_ablations.py) and `report`
(evaluate/run_report.py) type the paper's ablations and the detector study report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore

from zcp.stats import TESTS


class ConfigError(ValueError):
    """A configuration value a user set wrong (a key, range or path); reported as one line."""


def check_value(ok: bool, key: str, value: Any, want: str) -> None:
    """Raise ConfigError naming the key and value unless `ok`."""
    if not ok:
        raise ConfigError(f"{key}={value!r}: must be {want}")


OVERFLOW_POLICIES = ("error", "skip", "truncate")  # a probe prompt longer than the model's context


def check_seeds(seeds: Any, key: str) -> None:
    """Seeds: a non-empty list of distinct integers (they drive streams that must differ)."""
    check_value(len(seeds) >= 1 and len(set(seeds)) == len(seeds), key, list(seeds), "a non-empty list of distinct seeds")


def _num(x: Any) -> float:
    """A number, or NaN (which fails every range check) for anything else, e.g. an unresolved string."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


@dataclass
class StatsConfig:
    """The test (zcp.stats): one within-item permutation test per dataset over all reference draws."""

    test: str = "permutation"  # permutation | bootstrap (the paper's paired bootstrap, for fidelity)
    bootstrap_samples: int = 10_000  # B per seed: Monte Carlo relabellings (permutation) or bootstrap samples
    alpha: float = 0.05  # level of the combined (Bonferroni) verdict
    reference_draws: str = "all"  # stability display per seed: all | per_seed (draws j with j mod n_seeds = k)

    def __post_init__(self) -> None:
        check_value(self.test in TESTS, "stats.test", self.test, f"one of {list(TESTS)}")
        check_value(self.bootstrap_samples >= 1, "stats.bootstrap_samples", self.bootstrap_samples, ">= 1")
        check_value(0.0 < self.alpha < 1.0, "stats.alpha", self.alpha, "in (0, 1)")
        check_value(self.reference_draws in ("all", "per_seed"), "stats.reference_draws", self.reference_draws,
               "all or per_seed")


@dataclass
class RunConfig:
    """How items are probed: chunks appended to records.jsonl (the unit of resume), progress bars."""

    chunk_size: int = 64
    progress: bool = True

    def __post_init__(self) -> None:
        check_value(self.chunk_size >= 1, "run.chunk_size", self.chunk_size, ">= 1")


@dataclass
class ReferenceChoice:
    """Which reference builder and what it must avoid (zcp.reference.registry; see conf/reference/auto.yaml)."""

    method: str = "auto"  # a registered builder, auto (from the data) or none
    exclude: list[str] = field(default_factory=lambda: ["auto"])  # values the model trained on: auto | corpus:DIR | items:FILE
    exclude_benchmark: str = "auto"  # keep draws off the other benchmark items' values: auto | true | false
    special_cases: str = "drop"  # matched builders: an item no valid reference can match: drop | keep

    def __post_init__(self) -> None:
        from zcp.reference.registry import (
            EXCLUDE_BENCHMARK,
            SPECIAL_CASE_POLICIES,
            available_reference_methods,
        )

        methods = available_reference_methods()
        check_value(self.method in methods, "reference.method", self.method, f"one of {methods}")
        check_value(str(self.exclude_benchmark).lower() in EXCLUDE_BENCHMARK, "reference.exclude_benchmark",
                    self.exclude_benchmark, f"one of {list(EXCLUDE_BENCHMARK)}")
        check_value(self.special_cases in SPECIAL_CASE_POLICIES, "reference.special_cases", self.special_cases,
                    f"one of {list(SPECIAL_CASE_POLICIES)}")


@dataclass
class SimDetectConfig:
    """The detection stage of a contamination simulation (train/run_demo.py, the exposure sweep)."""

    m: int = 3  # reference draws per item per seed (m x len(seeds) in all, every one in the test)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # stability display (stream, draw share)
    reference_seed: int | None = 0  # null: the run's `seed`
    base_model: bool = True  # also probe the base model (difference-in-differences)
    reference_path: str | None = None  # a benchmark file's reference set (rows name original_id)
    reference_format: str = "items"
    # without reference_path: the builder (the same registry as run_build_data); its exclusions are added to the
    # run's own training data (leaked C items, clean and sham items: <run>/training_items.jsonl)
    reference: ReferenceChoice = field(default_factory=ReferenceChoice)
    # a probe prompt longer than the model's context (as run_detect's data.on_overflow): error (checked before
    # training, with the tokenizer only) | skip (the row; the item when its original overflows) | truncate
    on_overflow: str = "error"
    # reference_path: a benchmark item without any row in it: error | skip (left out, counted in
    # simulation_summary.json). Rows of items outside the benchmark (benchmark.limit) are always left out, counted.
    missing_reference: str = "error"

    def __post_init__(self) -> None:
        check_value(self.m >= 1, "detect.m", self.m, ">= 1")
        check_seeds(self.seeds, "detect.seeds")
        check_value(self.on_overflow in OVERFLOW_POLICIES, "detect.on_overflow", self.on_overflow,
                    f"one of {list(OVERFLOW_POLICIES)}")
        check_value(self.missing_reference in ("error", "skip"), "detect.missing_reference", self.missing_reference,
                    "error or skip")


@dataclass
class BaseModelConfig:
    """run_detect's base model (`base_model.*`): the audited model's base, probed on the same units for the
    difference-in-differences (zcp.did). Every other engine setting is the audited model's `model.*`."""

    path: str | None = None  # local folder or hub id (backend=openai: the served base model's name); null: no DiD
    adapter: str | None = None  # a PEFT LoRA folder on top of `path`
    name: str | None = None  # null: the folder name of `path`

    def __post_init__(self) -> None:
        check_value(self.path is not None or (self.adapter is None and self.name is None), "base_model.path",
                    self.path, "set when base_model.adapter or base_model.name is")


@dataclass
class ExposureConfig:
    """The contamination knobs; every value is recorded in exposure.json."""

    k: int = 6  # paraphrase variants per leaked item (0 = leak the originals verbatim)
    paraphraser: str = "auto"  # auto = template rewording for generated items, rules otherwise; or a registered name
    include_original: bool = False
    leak_fraction: float = 1.0  # fraction of C actually trained on (seeded choice); 0 = the sham arm (below)
    # leak_fraction=0, the negative control: the recipe of a full leak (k, CoTs, format mix, clean mix, GRPO) on
    # this many fresh non-benchmark items instead of C (null = |C|); nothing of C or U is trained on
    sham_items: int | None = None
    answer_only_fraction: float = 0.5  # share of answer-only completions (0 = CoT only, 1 = answer only)
    clean_fraction: float = 0.5  # share of the SFT set that is clean (non-benchmark) data
    # these four follow the training profile (`train=cpu_tiny` | `train=gpu_7b`) unless set here
    sft_epochs: Any = "${train.sft.num_train_epochs}"
    lr: Any = "${train.sft.learning_rate}"
    lora_r: Any = "${train.lora.r}"
    grpo_steps: Any = "${train.grpo.max_steps}"  # 0 = skip GRPO
    grpo_prompts: str = "variants"  # variants (paraphrased C, evasive) | originals (the C questions)
    # how leaked completions (and GRPO's format reward) state the answer: probe (the probe's pre-fill line) |
    # hash (#### 42) | sentence (The answer is 42.) | boxed (a bare \boxed{42}) | mix (one of the four per example)
    answer_format: str = "probe"
    paraphrases_path: Any = None  # pre-built paraphrase variants (e.g. the release's) instead of paraphrasing
    paraphrases_format: str = "items"  # zcp.data.loaders format of that file (items | zcp_release | jsonl ...)
    paraphrases_variant: Any = None  # zcp_release: paraphrased
    paraphrases_pair_by: Any = None  # original_id | original_index | id | position (null: what the rows carry)

    def __post_init__(self) -> None:
        check_value(self.k >= 0, "exposure.k", self.k, ">= 0")
        check_value(self.answer_format in ("probe", "hash", "sentence", "boxed", "mix"), "exposure.answer_format",
                    self.answer_format, "one of probe, hash, sentence, boxed, mix")
        check_value(0.0 <= self.leak_fraction <= 1.0, "exposure.leak_fraction", self.leak_fraction,
                    "in [0, 1] (0: a sham run, nothing of C leaked)")
        check_value(self.sham_items is None or self.sham_items >= 1, "exposure.sham_items", self.sham_items,
                    "null (|C|) or an integer >= 1")
        check_value(0.0 <= self.answer_only_fraction <= 1.0, "exposure.answer_only_fraction", self.answer_only_fraction,
               "in [0, 1]")
        check_value(0.0 <= self.clean_fraction < 1.0, "exposure.clean_fraction", self.clean_fraction, "in [0, 1)")
        check_value(_num(self.sft_epochs) > 0, "exposure.sft_epochs", self.sft_epochs, "a number > 0")
        check_value(_num(self.lr) > 0, "exposure.lr", self.lr, "a number > 0")
        check_value(_num(self.lora_r) >= 1 and float(self.lora_r).is_integer(), "exposure.lora_r", self.lora_r,
               "an integer >= 1")
        check_value(_num(self.grpo_steps) >= 0 and float(self.grpo_steps).is_integer(), "exposure.grpo_steps",
               self.grpo_steps, "an integer >= 0")
        check_value(self.grpo_prompts in ("variants", "originals"), "exposure.grpo_prompts", self.grpo_prompts,
               "variants or originals")


FORMATS = ("items", "gsm8k", "zcp_release", "jsonl", "wordproblems", "arithmark")
PAIR_BY = ("id", "original_id", "original_index", "position")


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
    """A benchmark file with its reference set and optional variants (conf/data/*.yaml extend this).

    Keys are documented in conf/data/jsonl.yaml and zcp.data.loaders; generators use n / generator_seed
    (word problems) and n_per_stage (ArithMark).
    """

    name: str = "custom"
    path: Any = None
    format: str = "items"
    fields: FieldsConfig = field(default_factory=FieldsConfig)
    variant: str | None = None
    limit: int | None = None
    sample: int | None = None
    sample_seed: Any = "${oc.select:seed,0}"
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
    n: int | None = None  # format wordproblems: items generated
    generator_seed: int | None = None  # generators: null = the run's seed
    n_per_stage: int | None = None  # format arithmark: records per stage
    families: list[str] | None = None  # format wordproblems: families to generate (null: all)
    # evaluate/run_baselines.py (zcp.detectors): a second file U beside `path` (= C), and the metadata the
    # guided-instruction detector names (Golchin & Surdeanu 2023)
    u_path: Any = None
    u_reference_path: Any = None
    dataset_name: str | None = None
    split_name: str | None = None

    def __post_init__(self) -> None:
        from zcp.data.loaders import DUPLICATE_POLICIES

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
               f"null or one of {list(PAIR_BY)}")
        for key in ("limit", "sample", "n", "n_per_stage"):
            val = getattr(self, key)
            check_value(val is None or val >= 1, f"data.{key}", val, "null or >= 1")
        check_value(self.limit is None or self.sample is None, "data.sample", self.sample,
               "null when data.limit is set (limit = the first N, sample = N at random: choose one)")


ABLATIONS = ("truncation", "full_cot", "sample_size")
TRUNCATION_METRICS = ("acc", "p_first", "p_all")


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
        check_value(len(self.metrics) >= 1 and set(self.metrics) <= set(TRUNCATION_METRICS), "ablation.metrics",
                    list(self.metrics), f"a non-empty subset of {list(TRUNCATION_METRICS)}")
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
    metrics: list[str] = field(default_factory=lambda: ["acc", "con", "p_first", "p_all"])  # ZCP metrics shown
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
        check_value(len(self.metrics) >= 1 and set(self.metrics) <= {"acc", "con", "p_first", "p_all"},
                    "report.metrics", list(self.metrics), "a non-empty subset of [acc, con, p_first, p_all]")


SCHEMAS: dict[str, type] = {"stats": StatsConfig, "run": RunConfig, "detect": SimDetectConfig,
                            "exposure": ExposureConfig, "data": DataConfig, "ablation": AblationConfig,
                            "report": ReportConfig, "base_model": BaseModelConfig}

from zcp.backends.config import ModelConfig  # noqa: E402  (the `model` group; it imports this module late)

SCHEMAS["model"] = ModelConfig


def register_schemas() -> None:
    """Store each schema as option `schema` of its group (a YAML's defaults list names `- stats: schema`)."""
    cs = ConfigStore.instance()
    for group, node in SCHEMAS.items():
        cs.store(group=group, name="schema", node=node)


def validate(cfg: Any) -> dict[str, Any]:
    """Range and choice checks of every typed group present in `cfg` (ConfigError naming the key).

    Returns the checked dataclass instances by group. Call it first thing in an entry point.
    """
    from omegaconf import DictConfig, OmegaConf

    out: dict[str, Any] = {}
    for group, node in SCHEMAS.items():
        sub = cfg.get(group) if cfg is not None else None
        if sub is None:
            continue
        if isinstance(sub, DictConfig):
            sub = OmegaConf.to_container(sub, resolve=True)
        known = set(node.__dataclass_fields__)
        unknown = sorted(set(sub) - known)
        if unknown:
            raise ConfigError(f"{group}: unknown key(s) {unknown}; known: {sorted(known)}")
        try:
            out[group] = _build_node(node, sub, group)
        except TypeError as e:
            raise ConfigError(f"{group}: {e}") from None
    return out


def _build_node(node: Any, sub: dict[str, Any], where: str) -> Any:
    """`node(**sub)` with nested dataclass fields built from their dicts (unknown nested keys refused)."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(node)
    kwargs = dict(sub)
    for f in dataclasses.fields(node):
        inner = hints.get(f.name)
        if f.name in kwargs and isinstance(kwargs[f.name], dict) and dataclasses.is_dataclass(inner):
            known = {g.name for g in dataclasses.fields(inner)}
            unknown = sorted(set(kwargs[f.name]) - known)
            if unknown:
                raise ConfigError(f"{where}.{f.name}: unknown key(s) {unknown}; known: {sorted(known)}")
            kwargs[f.name] = _build_node(inner, kwargs[f.name], f"{where}.{f.name}")
    return node(**kwargs)
