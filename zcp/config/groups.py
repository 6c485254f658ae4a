"""The config groups' schemas (one dataclass per group, defaults defined once, in the field), registered in
Hydra's ConfigStore by `register_schemas`; `SCHEMAS` maps each group name to its schema.

See zcp.config.schemas for how a composed config is validated against them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from hydra.core.config_store import ConfigStore

from zcp.config.checks import as_number as _num
from zcp.config.checks import (
    check_device,
    check_seeds,
    check_value,
    key_alias,
    unknown_key_message,
    user_key,
)
from zcp.config.conform import MESSAGE_PREFIX, build, conform
from zcp.config.model import APISettings, ModelConfig, ModelProbeSettings, VLLMSettings
from zcp.config.prefill import AutoPrefillConfig, check_prefill
from zcp.config.run import RunConfig, SimRunConfig  # the `run` group's schemas (re-exported)
from zcp.config.suppress import SuppressConfig
from zcp.core.answers import FINAL_ANSWER_PREFIX
from zcp.core.tracking import LoggerConfig  # the `logger` group, defined beside the tracker that reads it
from zcp.errors import ConfigError
from zcp.probe.conventions import PROBE as PROBE_CONVENTION
from zcp.probe.metrics import BUILTIN_METRICS, get_metric, metric_names, unknown_metrics
from zcp.probe.stats import TESTS

OVERFLOW_POLICIES = ("error", "skip", "truncate")  # a probe prompt longer than the model's context


@dataclass
class StatsConfig:
    """The test (zcp.probe.stats): one within-item permutation test per dataset over all reference draws."""

    test: str = "permutation"  # permutation | bootstrap (the paper's paired bootstrap, for fidelity)
    bootstrap_samples: int = 10_000  # B per seed: Monte Carlo relabellings (permutation) or bootstrap samples
    alpha: float = 0.05  # level of the combined (Bonferroni) verdict
    reference_draws: str = "all"  # stability display per seed: all | per_seed (draws j with j mod n_seeds = k)
    # a metric whose answer is malformed above this rate (or whose S = S_ref = 0) is VOID: reported, and left out of
    # the combined verdict (zcp.probe.void)
    void_malformed: float = 0.5

    def __post_init__(self) -> None:
        check_value(self.test in TESTS, "stats.test", self.test, f"one of {list(TESTS)}")
        check_value(self.bootstrap_samples >= 1, "stats.bootstrap_samples", self.bootstrap_samples, ">= 1")
        check_value(0.0 < self.alpha < 1.0, "stats.alpha", self.alpha, "in (0, 1)")
        check_value(self.reference_draws in ("all", "per_seed"), "stats.reference_draws", self.reference_draws,
               "all or per_seed")
        check_value(0.0 <= _num(self.void_malformed) <= 1.0, "stats.void_malformed", self.void_malformed, "in [0, 1]")


@dataclass
class ReferenceChoice:
    """Which reference builder and what it must avoid (zcp.benchmarks.references.registry; see conf/reference/auto.yaml)."""

    method: str = "auto"  # a registered builder, auto (from the data) or none
    exclude: list[str] = field(default_factory=lambda: ["auto"])  # values the model trained on: auto | corpus:DIR | items:FILE
    exclude_benchmark: str = "auto"  # keep draws off the other benchmark items' values: auto | true | false
    special_cases: str = "drop"  # matched builders: an item no valid reference can match: drop | keep

    def __post_init__(self) -> None:
        from zcp.benchmarks.references.registry import (
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
    difference-in-differences (zcp.probe.did). Every other engine setting is the audited model's `model.*`."""

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
    # these four follow the training profile (`train=cpu_tiny` | `cpu_small` | `gpu` | `gpu_7b`) unless set here
    sft_epochs: Any = "${train.sft.num_train_epochs}"
    lr: Any = "${train.sft.learning_rate}"
    lora_r: Any = "${train.lora.r}"
    grpo_steps: Any = "${train.grpo.max_steps}"  # 0 = skip GRPO
    grpo_prompts: str = "variants"  # variants (paraphrased C, evasive) | originals (the C questions)
    answer_format: str = "probe"  # the leaks' answer line and GRPO's format reward: probe | hash | sentence | boxed | mix
    paraphrases_path: Any = None  # pre-built paraphrase variants (e.g. the release's) instead of paraphrasing
    paraphrases_format: str = "items"  # zcp.benchmarks.loaders format of that file (items | zcp_release | jsonl ...)
    paraphrases_variant: Any = None  # zcp_release: paraphrased
    paraphrases_pair_by: Any = None  # original_id | original_index | id | position (null: what the rows carry)
    suppress: SuppressConfig = field(default_factory=SuppressConfig)  # the probe-aware evader (zcp.config.suppress)

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
        from zcp.benchmarks.loaders import DUPLICATE_POLICIES

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
        for key in ("limit", "sample"):
            val = getattr(self, key)
            check_value(val is None or val >= 1, f"data.{key}", val, "null or >= 1")
        for key in ("n", "n_per_stage"):
            if getattr(self, key) is None:
                setattr(self, key, 1000)
            check_value(getattr(self, key) >= 1, f"data.{key}", getattr(self, key), "null (1000) or >= 1")
        check_value(self.limit is None or self.sample is None, "data.sample", self.sample,
               "null when data.limit is set (limit = the first N, sample = N at random: choose one)")


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


# ------------------------------------------------------------------------------------ the probe and the jobs' groups
PROBE_METRICS = BUILTIN_METRICS  # the default probe.metrics; any registered metric (zcp.probe.metrics) may be listed
PROBE_MODES = ("auto", "prefill", "api")


@dataclass
class ProbeGroupConfig:
    """The `probe` group (conf/probe/zcp.yaml documents each key): prompts and generation budgets of the
    Zero-CoT Probe; zcp.probe.detect.probe_config turns it into a zcp.probe.prompts.ProbeConfig (model.probe.* over it).
    `prefill` names the answer conventions probed (zcp.probe.conventions; several: zcp.probe.multiconv)."""

    # extra keys a run may add with `+probe.KEY=...` (zcp.probe.prompts.ProbeConfig reads them; not composed by default)
    EXTRA_KEYS: ClassVar[dict[str, Any]] = {"api_instruction": str}

    metrics: list[str] = field(default_factory=lambda: list(PROBE_METRICS))  # [p_first, p_all] skips generation
    mode: str = "auto"  # auto: pre-fill when the backend can, else the API instruction | prefill | api
    user_template: str = "{question}"
    full_cot_suffix: str = ""
    system: str | None = None
    # typed Optional only so that `probe.zero_cot_prefix=null` gets __post_init__'s one-line error
    zero_cot_prefix: str | None = FINAL_ANSWER_PREFIX  # the answer line up to the brace (zcp.core.answers)
    answer_suffix: str | None = None  # null: derived from zero_cot_prefix (zcp.probe.prompts.answer_end)
    zero_cot_max_tokens: int = 32
    full_cot_max_tokens: int = 512
    # p_first/p_all score the gold answer as written after the pre-fill (exact) or with and without a leading space
    # (both: zcp.probe.prompts.spaced_scores)
    answer_space: str = "exact"
    # the answer conventions probed: a name (probe = the line of zero_cot_prefix; hash, sentence, boxed, or one
    # registered in zcp.probe.conventions), a literal pre-fill ("Answer: "), a list of these, or auto
    prefill: Any = field(default=PROBE_CONVENTION, metadata={"schema": str | list[str]})
    auto: AutoPrefillConfig = field(default_factory=AutoPrefillConfig)
    # the primary convention of a run of several (its own verdict reported beside the one over all of them): null =
    # auto's reading of the neutral set (none for a listed run), or a listed entry (zcp.probe.multiconv)
    primary: str | None = None

    def __post_init__(self) -> None:
        ms = list(self.metrics)
        check_value(len(ms) >= 1 and not unknown_metrics(ms) and len(set(ms)) == len(ms), "probe.metrics",
                    ms, f"a non-empty list without repeats of {list(metric_names())}")
        check_value(self.mode in PROBE_MODES, "probe.mode", self.mode, f"one of {list(PROBE_MODES)}")
        check_value(self.answer_space in ("exact", "both"), "probe.answer_space", self.answer_space, "exact or both")
        check_value(isinstance(self.zero_cot_prefix, str), "probe.zero_cot_prefix", self.zero_cot_prefix,
                    'a string: the text the zero-CoT answer is pre-filled after (e.g. "#### ")')
        self.prefill = check_prefill(self.prefill, self.zero_cot_prefix, self.answer_suffix, self.mode)
        listed = self.prefill if isinstance(self.prefill, list) else [self.prefill]
        check_value(self.primary is None or self.primary in listed or self.prefill == "auto", "probe.primary",
                    self.primary, f"null or one of the conventions probe.prefill lists ({listed}), or any under auto")
        if self.primary is not None and self.prefill == "auto":
            check_prefill(self.primary, self.zero_cot_prefix, self.answer_suffix, self.mode)
        check_value("{question}" in self.user_template and _formats(self.user_template), "probe.user_template",
                    self.user_template, 'a template holding {question} and no other {...} field')
        gen = sorted(m for m in ms if get_metric(m).needs_generation)  # the zero-CoT answer (acc, con)
        check_value(self.zero_cot_max_tokens >= (1 if gen else 0), "probe.zero_cot_max_tokens",
                    self.zero_cot_max_tokens, f">= 1 with {gen} in probe.metrics" if gen else ">= 0")
        full = [m for m in ms if get_metric(m).needs_full_cot]  # the full-CoT generation (con)
        check_value(self.full_cot_max_tokens >= (1 if full else 0), "probe.full_cot_max_tokens",
                    self.full_cot_max_tokens, f">= 1 with {', '.join(full)} in probe.metrics" if full else ">= 0")


def _formats(template: str) -> bool:
    """True when `template.format(question=...)` works (no stray `{...}` field)."""
    try:
        template.format(question="q")
    except (KeyError, IndexError, ValueError):
        return False
    return True


BENCHMARK_SOURCES = ("wordproblems", "file", "data")


@dataclass
class BenchmarkConfig:
    """What the contamination simulation splits into C and U (conf/contaminate.yaml documents each key)."""

    source: str = "wordproblems"  # wordproblems (generated) | file (a benchmark file) | data (the `data` group)
    n: int = 100  # wordproblems: items generated
    seed: int = 9173  # wordproblems: zcp.simulate.base_model.BENCHMARK_SEED, the pool the shipped base model never saw
    families: list[str] | None = None  # wordproblems: null = all default families
    id_prefix: str = "bench"
    path: Any = None  # file: path of the benchmark file
    format: str = "items"  # file (and split.c_path/u_path): loader format
    variant: str | None = None  # format zcp_release: bare | original | paraphrased | modified
    limit: int | None = None  # file: first N rows
    on_duplicate: str = "error"  # error | merge

    def __post_init__(self) -> None:
        from zcp.benchmarks.loaders import DUPLICATE_POLICIES

        check_value(self.source in BENCHMARK_SOURCES, "benchmark.source", self.source, f"one of {list(BENCHMARK_SOURCES)}")
        check_value(self.n >= 2, "benchmark.n", self.n, ">= 2 (items split into C and U)")
        check_value(self.format in FORMATS, "benchmark.format", self.format, f"one of {list(FORMATS)}")
        check_value(self.limit is None or self.limit >= 1, "benchmark.limit", self.limit, "null or >= 1")
        check_value(self.on_duplicate in DUPLICATE_POLICIES, "benchmark.on_duplicate", self.on_duplicate,
                    f"one of {list(DUPLICATE_POLICIES)}")
        if self.families is not None:
            from zcp.benchmarks.wordproblems import FAMILIES

            check_value(len(self.families) >= 1 and set(self.families) <= set(FAMILIES), "benchmark.families",
                        list(self.families), f"null or a non-empty subset of {sorted(FAMILIES)}")


@dataclass
class SplitConfig:
    """The C/U split of run_build_data (zcp.benchmarks.split.split_items)."""

    c_fraction: float = 0.5  # share of items leaked into training (Dataset C); the rest is Dataset U
    stratify_by: str | None = None  # a metadata key (stage, family, source, difficulty) or null

    def __post_init__(self) -> None:
        check_value(0.0 < self.c_fraction < 1.0, "split.c_fraction", self.c_fraction,
                    "in (0, 1) (both C and U need items)")


@dataclass
class SimSplitConfig(SplitConfig):
    """The simulation's split (conf/contaminate.yaml): a seeded split, or given C and U files."""

    EXTRA_KEYS: ClassVar[dict[str, Any]] = {"seed": int | None}  # +split.seed=N: another split seed than `seed`

    c_path: Any = None  # given C and U files: the items and the split come from them
    u_path: Any = None


@dataclass
class SimParaphraseConfig:
    """The LLM paraphraser inside training (exposure.paraphraser=llm), as in conf/paraphrase/llm.yaml."""

    model: dict[str, Any] = field(default_factory=lambda: {
        "path": None, "name": None, "dtype": "auto", "device": None, "trust_remote_code": False,
        "max_batch_tokens": 16384, "batch_size": 8, "gen_batch_size": 16})  # a model config (build_backend)
    options: dict[str, Any] = field(default_factory=lambda: {
        "temperature": 0.8, "max_new_tokens": 768, "max_rounds": 3, "rewrite_solution": True, "max_rouge_l": None})

    def __post_init__(self) -> None:
        from zcp.config.model import model_config

        with key_alias("model", "paraphrase.model"):
            model_config(self.model, "paraphrase.model")
        check_paraphraser_options("llm", self.options, "paraphrase.options")


def check_paraphraser_options(name: str, options: Any, key: str) -> None:
    """Refuse an option the paraphraser `name` does not take (its constructor's keyword arguments)."""
    import inspect

    from zcp.benchmarks.paraphrase.base import _REGISTRY, get_paraphraser

    check_value(isinstance(options, dict), key, options, "a mapping of the paraphraser's options")
    if name not in _REGISTRY:
        # imports the built-in paraphrasers (their registration); an unknown name is refused by the caller
        with contextlib.suppress(Exception):
            get_paraphraser(name)
    if name not in _REGISTRY:
        return
    params = inspect.signature(_REGISTRY[name].__init__).parameters
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
        from zcp.benchmarks.paraphrase.base import _REGISTRY

        check_value(self.k >= 0, "paraphrase.k", self.k, ">= 0 (0: no paraphrases)")
        check_value(self.split in ("C", "all"), "paraphrase.split", self.split, "C or all")
        if self.name != "none":
            check_paraphraser_options(self.name, self.options, "paraphrase.options")
            check_value(self.name in _REGISTRY, "paraphrase.name", self.name,
                        f"none or one of {sorted(_REGISTRY)}")
        if self.model is not None:
            from zcp.config.model import model_config

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
class CotConfig:
    """Chains of thought for items without a solution (the simulation's data stage)."""

    teacher: str | None = None  # a model path/hub id; only CoTs with the gold answer are kept
    attempts: int = 4  # 1 greedy + 3 sampled tries
    max_new_tokens: int = 512
    temperature: float = 0.7
    on_missing: str = "answer"  # an item left without a CoT is leaked answer-only (answer) or not at all (drop)

    def __post_init__(self) -> None:
        check_value(self.attempts >= 1, "cot.attempts", self.attempts, ">= 1")
        check_value(self.max_new_tokens >= 1, "cot.max_new_tokens", self.max_new_tokens, ">= 1")
        check_value(self.temperature >= 0, "cot.temperature", self.temperature, ">= 0")
        check_value(self.on_missing in ("answer", "drop"), "cot.on_missing", self.on_missing, "answer or drop")


@dataclass
class CleanConfig:
    """Where the simulation's clean (non-benchmark) training data comes from (exposure.clean_fraction > 0)."""

    source: str = "wordproblems"  # fresh generated problems (benchmark signatures excluded) | file
    path: Any = None
    format: str = "items"
    seed: int | None = None  # null = seed + 1
    answer_only_fraction: float | None = 0.0  # null = the contamination's mix

    def __post_init__(self) -> None:
        check_value(self.source in ("wordproblems", "file"), "clean.source", self.source, "wordproblems or file")
        check_value(self.format in FORMATS, "clean.format", self.format, f"one of {list(FORMATS)}")
        check_value(self.answer_only_fraction is None or 0.0 <= self.answer_only_fraction <= 1.0,
                    "clean.answer_only_fraction", self.answer_only_fraction, "null or in [0, 1]")


@dataclass
class EvalConfig:
    """The simulation's Table 6 analogue: full-CoT greedy accuracy before/after on C and U."""

    enabled: bool = True
    max_items: int | None = None  # per split; null = all
    max_new_tokens: Any = "${train.eval_max_new_tokens}"
    batch_size: int = 64
    after_sft: bool = True  # also evaluate the SFT-only model when GRPO runs
    device: str | None = None

    def __post_init__(self) -> None:
        check_value(self.max_items is None or self.max_items >= 1, "eval.max_items", self.max_items, "null or >= 1")
        check_value(_num(self.max_new_tokens) >= 1, "eval.max_new_tokens", self.max_new_tokens, "an integer >= 1")
        check_value(self.batch_size >= 1, "eval.batch_size", self.batch_size, ">= 1")
        check_device(self.device, "eval.device")


@dataclass
class LoraSettings:
    """peft.LoraConfig of the simulation's fine-tunes (zcp.simulate.sft.lora_config; alpha null = 2 r)."""

    r: int = 16
    alpha: float | None = None
    dropout: float = 0.0
    target_modules: Any = "all-linear"

    def __post_init__(self) -> None:
        check_value(self.r >= 1, "train.lora.r", self.r, ">= 1")
        check_value(0.0 <= self.dropout < 1.0, "train.lora.dropout", self.dropout, "in [0, 1)")


# TRL fields that must be positive integers / positive numbers when set (TRL itself does not check them)
_TRAINER_POSITIVE_INT = ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations",
                         "max_completion_length", "max_prompt_length", "logging_steps", "save_total_limit",
                         "generation_batch_size", "steps_per_generation")
_TRAINER_POSITIVE = ("learning_rate", "num_train_epochs")


# The training stages (zcp.simulate.training_stages): the built-in ones, the default order of `train.stages`.
BUILTIN_TRAINING_STAGES = ("sft", "grpo")
# every name `train.stages` may hold: the built-in ones, plus those zcp.simulate.register_training_stage adds
TRAINING_STAGE_NAMES: list[str] = list(BUILTIN_TRAINING_STAGES)
# the settings dataclass of each stage registered at run time with one: `train.<name>.*` (TrainConfig.EXTRA_KEYS)
TRAINING_STAGE_SETTINGS: dict[str, type] = {}


def add_training_stage_name(name: str, settings: type | None = None) -> None:
    """Accept `name` in `train.stages` and, given `settings` (a dataclass whose fields carry the defaults), the keys
    `train.<name>.*` it types (called by zcp.simulate.training_stages.register_training_stage: stages registered at
    run time; the config layer never imports them)."""
    import dataclasses

    if name in BUILTIN_TRAINING_STAGES or name in {f.name for f in dataclasses.fields(TrainConfig)}:
        raise ValueError(f"register_training_stage({name!r}): train.{name} is already a key of the train config")
    if settings is not None:
        if not dataclasses.is_dataclass(settings) or not isinstance(settings, type):
            raise TypeError(f"register_training_stage({name!r}): settings must be a dataclass, not {settings!r}")
        TRAINING_STAGE_SETTINGS[name] = settings
    else:
        TRAINING_STAGE_SETTINGS.pop(name, None)
    if name not in TRAINING_STAGE_NAMES:
        TRAINING_STAGE_NAMES.append(name)


def remove_training_stage_name(name: str) -> None:
    """Undo `add_training_stage_name` for a run-time stage (the built-in names stay)."""
    if name in BUILTIN_TRAINING_STAGES:
        raise ValueError(f"{name} is a built-in training stage")
    TRAINING_STAGE_SETTINGS.pop(name, None)
    if name in TRAINING_STAGE_NAMES:
        TRAINING_STAGE_NAMES.remove(name)


@dataclass
class TrainConfig:
    """The `train` profile (conf/train/*.yaml): the training stages in order, LoRA, GRPO rewards, TRL SFTConfig /
    GRPOConfig fields, and the settings of stages registered at run time (`train.<name>`)."""

    # training stages, in order (zcp.simulate.training_stages): each trains on the model so far
    stages: list[str] = field(default_factory=lambda: list(BUILTIN_TRAINING_STAGES))
    # lora: each stage trains a LoRA (train.lora), merged later; full: all weights, each stage saves a full model
    finetune: Literal["lora", "full"] = "lora"
    torch_threads: int | None = None
    eval_max_new_tokens: int = 160
    lora: LoraSettings = field(default_factory=LoraSettings)
    grpo_lora: LoraSettings | None = None  # null = same as lora
    rewards: dict[str, float] | None = None  # GRPO rewards by name -> weight (zcp.simulate.rewards.REWARDS)
    sft: dict[str, Any] = field(default_factory=dict)  # TRL SFTConfig fields
    grpo: dict[str, Any] = field(default_factory=dict)  # TRL GRPOConfig fields
    # train.<name>: the settings of a stage registered at run time, checked by its dataclass and kept as the
    # attribute `<name>` (zcp.config.conform.build keeps EXTRA_KEYS values for KEEP_EXTRA_KEYS schemas)
    EXTRA_KEYS: ClassVar[dict[str, type]] = TRAINING_STAGE_SETTINGS
    KEEP_EXTRA_KEYS: ClassVar[bool] = True

    def __getattr__(self, name: str) -> Any:
        """`train.<name>` of a run-time stage with settings, when the config did not set them: their defaults."""
        settings = TRAINING_STAGE_SETTINGS.get(name) if not name.startswith("_") else None
        if settings is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return self.__dict__.setdefault(name, build(settings, {}, f"train.{name}"))

    def stage_settings(self, name: str) -> Any:
        """The settings of training stage `name`: its `train.<name>` dataclass, or None for a stage without one
        (the built-in sft and grpo read `train.sft` / `train.grpo`, TRL fields, and the exposure knobs)."""
        return getattr(self, name) if name in TRAINING_STAGE_SETTINGS else None

    def __post_init__(self) -> None:
        check_value(len(self.stages) >= 1 and len(set(self.stages)) == len(self.stages), "train.stages",
                    list(self.stages), "a non-empty list of distinct training stage names")
        for name in self.stages:
            if name not in TRAINING_STAGE_NAMES:
                raise ConfigError(f"{user_key('train.stages')}: unknown training stage {name!r}; registered: "
                                  f"{sorted(TRAINING_STAGE_NAMES)} (a stage defined in your own module registers "
                                  "when that module is imported)")
        check_value(self.torch_threads is None or self.torch_threads >= 1, "train.torch_threads", self.torch_threads,
                    "null or >= 1")
        check_value(self.eval_max_new_tokens >= 1, "train.eval_max_new_tokens", self.eval_max_new_tokens, ">= 1")
        if self.rewards:
            from zcp.simulate.rewards import REWARDS

            for name in self.rewards:
                if name not in REWARDS:
                    raise ConfigError(unknown_key_message("train.rewards", str(name), list(REWARDS), " (a GRPO reward)"))
        trl_sft, trl_grpo = _trl_fields()
        for group, known in (("sft", trl_sft), ("grpo", trl_grpo)):
            _check_trainer_fields(getattr(self, group), known, f"train.{group}")


def _trl_fields() -> tuple[dict[str, Any], dict[str, Any]]:
    """Field name -> type of TRL's SFTConfig and GRPOConfig (imported once: slow)."""
    global _TRL_CACHE
    if _TRL_CACHE is None:
        import dataclasses

        from trl import GRPOConfig, SFTConfig

        _TRL_CACHE = tuple({f.name: f.type for f in dataclasses.fields(c)} for c in (SFTConfig, GRPOConfig))
    return _TRL_CACHE  # type: ignore[return-value]


_TRL_CACHE: tuple[dict[str, Any], dict[str, Any]] | None = None


def _check_trainer_fields(settings: dict[str, Any], known: dict[str, Any], where: str) -> None:
    """Keys of a TRL config dict: known (`train_sampling_strategy` also under transformers < 5), typed, in range."""
    names = set(known) | {"train_sampling_strategy"}
    for k, v in settings.items():
        key = f"{where}.{k}"
        if k not in names:
            raise ConfigError(unknown_key_message(where, str(k), sorted(names), " (a TRL trainer field)"))
        if k in known and not isinstance(known[k], str):
            conform(v, known[k], key)
        if k in _TRAINER_POSITIVE_INT and v is not None:
            check_value(isinstance(v, int) and not isinstance(v, bool) and v >= 1, key, v, "an integer >= 1")
        if k in _TRAINER_POSITIVE:
            check_value(_num(v) > 0, key, v, "a number > 0")
        if k == "max_steps":
            check_value(_num(v) >= -1, key, v, "-1 (the epochs decide) or >= 0")
        if k == "warmup_steps":
            check_value(_num(v) >= 0, key, v, ">= 0 (a float < 1 is a ratio of the total steps)")


SCHEMAS: dict[str, type] = {"stats": StatsConfig, "run": RunConfig, "detect": SimDetectConfig,
                            "exposure": ExposureConfig, "data": DataConfig, "ablation": AblationConfig,
                            "report": ReportConfig, "base_model": BaseModelConfig}


SCHEMAS["model"] = ModelConfig
SCHEMAS.update({"probe": ProbeGroupConfig, "benchmark": BenchmarkConfig, "cot": CotConfig, "clean": CleanConfig,
                "eval": EvalConfig})
# the schema `validate` without a job checks a group by when the group's name has variants (`STORED`): the widest,
# so the simulation's `run` (SimRunConfig: RunConfig and the training stages' limit) validates as a detect run's does
VALIDATE_AS: dict[str, type] = {"run": SimRunConfig}
# groups whose name means two things (run_build_data's `split` and `paraphrase` vs the simulation's) are stored
# under two option names and checked by each job's root schema (`JOBS`), not by name
STORED: dict[tuple[str, str], type] = {("split", "schema"): SplitConfig, ("split", "simulation"): SimSplitConfig,
                                       ("run", "simulation"): SimRunConfig,
                                       ("paraphrase", "simulation"): SimParaphraseConfig,
                                       ("reference_shift", "schema"): ReferenceShiftConfig}


def register_schemas() -> None:
    """Store each schema as option `schema` of its group (a YAML's defaults list names `- stats: schema`), and
    the `STORED` ones under their option names (`- split: simulation`)."""
    cs = ConfigStore.instance()
    for group, node in SCHEMAS.items():
        cs.store(group=group, name="schema", node=node)
    for (group, name), node in STORED.items():
        cs.store(group=group, name=name, node=node)




# the prefix each group schema's messages use (its usual place), so a schema checked elsewhere names the real key
MESSAGE_PREFIX.update({
    ModelConfig: "model", VLLMSettings: "model.vllm", APISettings: "model.api", ModelProbeSettings: "model.probe",
    DataConfig: "data", StatsConfig: "stats", SimDetectConfig: "detect",
    ReferenceChoice: "reference", ReferenceBuildConfig: "reference", ExposureConfig: "exposure",
    BaseModelConfig: "base_model", AblationConfig: "ablation", ReportConfig: "report",
    ProbeGroupConfig: "probe", BenchmarkConfig: "benchmark", SplitConfig: "split", SimSplitConfig: "split",
    SimParaphraseConfig: "paraphrase", ParaphraseConfig: "paraphrase", CotConfig: "cot", CleanConfig: "clean",
    EvalConfig: "eval", LoggerConfig: "logger", TrainConfig: "train", LoraSettings: "train.lora",
    ReferenceShiftConfig: "reference_shift",
})
