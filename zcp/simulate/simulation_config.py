"""The contamination simulation's config schemas, beside the pipeline that reads them (conf/contaminate.yaml,
conf/demo.yaml; train/run_contaminate.py, train/run_demo.py): `exposure` (the contamination knobs, with the
probe-aware evader `exposure.suppress`), `detect` (the simulation's detection stage), `benchmark`, `split` and
`paraphrase` as the simulation reads them, `cot`, `clean`, `eval`, and the job's root `SimulationJob` (`train` is
zcp.simulate.train_config's).

Valid choices come from their owners: the answer formats of the leaks and rewards (zcp.simulate.rewards), the
answer conventions an evader names (zcp.probe.conventions), the reserved pool's seed (zcp.benchmarks.reserved), the
loaders' formats and duplicate policies, the word-problem families, the simulation's stages
(zcp.simulate.simulation_stages). Each group registers itself in the config layer's store when this module is
imported (`zcp.config.groups.register_group`), the root as jobs `contaminate` and `demo`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from zcp.benchmarks.data_config import (
    FORMATS,
    OVERFLOW_POLICIES,
    DataConfig,
    ReferenceChoice,
    SplitConfig,
    check_paraphraser_options,
)
from zcp.benchmarks.loaders import DUPLICATE_POLICIES
from zcp.benchmarks.reserved import BENCHMARK_SEED
from zcp.benchmarks.wordproblems import FAMILIES
from zcp.config.checks import as_number as _num
from zcp.config.checks import check_device, check_seeds, check_value, key_alias, refuse_shard, user_key
from zcp.config.conform import MESSAGE_PREFIX
from zcp.config.groups import register_group
from zcp.config.jobs import register_job
from zcp.config.model import ModelConfig, model_config
from zcp.core.tracking import LoggerConfig
from zcp.errors import ConfigError
from zcp.probe.conventions import AUTO, parse_prefill
from zcp.probe.probe_config import ProbeGroupConfig, StatsConfig
from zcp.simulate.rewards import ANSWER_FORMAT_CHOICES
from zcp.simulate.simulation_stages import simulation_stage_names
from zcp.simulate.train_config import SimRunConfig, TrainConfig

# ------------------------------------------------------------------------------------------ exposure.suppress
# a seeded wrong number near the gold | a hedge, then no number | another item's answer of another first character
SUPPRESS_ANSWERS = ("wrong", "hedge", "other")
SUPPRESS_ITEMS = ("leaked", "all")  # the leaked items' paraphrases | those and the clean items


@dataclass
class SuppressConfig:
    """`exposure.suppress`: which pre-fills the evader suppresses, with what, on which items."""

    # conventions (zcp.probe.conventions names: probe = the run's probe.zero_cot_prefix, hash, sentence, boxed, or a
    # literal pre-fill) whose zero-CoT prompt gets suppression examples; [] = off (no example added)
    prefills: list[str] = field(default_factory=list)
    # wrong (the gold +/- a seeded offset, never the gold) | hedge ("?" and a promise to work it out) | other (a
    # seeded answer of another trained item whose first character differs from the gold's: no shared first token)
    answer: str = "wrong"
    items: str = "leaked"  # leaked (every trained paraphrase of a leaked item) | all (also every clean item)

    def __post_init__(self) -> None:
        prefills = list(self.prefills)
        if prefills:
            if AUTO in prefills:
                raise ConfigError(f"{user_key('exposure.suppress.prefills')}={prefills!r}: auto reads a model's "
                                  "outputs; an evader names the conventions it suppresses")
            try:
                parse_prefill(prefills)
            except ValueError as e:
                raise ConfigError(f"{user_key('exposure.suppress.prefills')}={prefills!r}: {e}") from None
        self.prefills = prefills
        check_value(self.answer in SUPPRESS_ANSWERS, "exposure.suppress.answer", self.answer,
                    f"one of {', '.join(SUPPRESS_ANSWERS)}")
        check_value(self.items in SUPPRESS_ITEMS, "exposure.suppress.items", self.items,
                    f"one of {', '.join(SUPPRESS_ITEMS)}")

    @property
    def enabled(self) -> bool:
        """True when some pre-fill is suppressed (the evader adds examples)."""
        return bool(self.prefills)


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
    suppress: SuppressConfig = field(default_factory=SuppressConfig)  # the probe-aware evader (below)

    def __post_init__(self) -> None:
        check_value(self.k >= 0, "exposure.k", self.k, ">= 0")
        check_value(self.answer_format in ANSWER_FORMAT_CHOICES, "exposure.answer_format", self.answer_format,
                    f"one of {', '.join(ANSWER_FORMAT_CHOICES)}")
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


BENCHMARK_SOURCES = ("wordproblems", "file", "data")


@dataclass
class BenchmarkConfig:
    """What the contamination simulation splits into C and U (conf/contaminate.yaml documents each key)."""

    source: str = "wordproblems"  # wordproblems (generated) | file (a benchmark file) | data (the `data` group)
    n: int = 100  # wordproblems: items generated
    seed: int = BENCHMARK_SEED  # wordproblems: 9173, the reserved pool the shipped base model never saw
    families: list[str] | None = None  # wordproblems: null = all default families
    id_prefix: str = "bench"
    path: Any = None  # file: path of the benchmark file
    format: str = "items"  # file (and split.c_path/u_path): loader format
    variant: str | None = None  # format zcp_release: bare | original | paraphrased | modified
    limit: int | None = None  # file: first N rows
    on_duplicate: str = "error"  # error | merge

    def __post_init__(self) -> None:
        check_value(self.source in BENCHMARK_SOURCES, "benchmark.source", self.source, f"one of {list(BENCHMARK_SOURCES)}")
        check_value(self.n >= 2, "benchmark.n", self.n, ">= 2 (items split into C and U)")
        check_value(self.format in FORMATS, "benchmark.format", self.format, f"one of {list(FORMATS)}")
        check_value(self.limit is None or self.limit >= 1, "benchmark.limit", self.limit, "null or >= 1")
        check_value(self.on_duplicate in DUPLICATE_POLICIES, "benchmark.on_duplicate", self.on_duplicate,
                    f"one of {list(DUPLICATE_POLICIES)}")
        if self.families is not None:
            check_value(len(self.families) >= 1 and set(self.families) <= set(FAMILIES), "benchmark.families",
                        list(self.families), f"null or a non-empty subset of {sorted(FAMILIES)}")


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
        with key_alias("model", "paraphrase.model"):
            model_config(self.model, "paraphrase.model")
        check_paraphraser_options("llm", self.options, "paraphrase.options")


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


# -------------------------------------------------------------------------------------------- the job's root
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
        names = simulation_stage_names()
        check_value(len(self.stages) >= 1 and set(self.stages) <= set(names), "stages", list(self.stages),
                    f"a non-empty subset of {names}")
        refuse_shard(self.run.shard, "for a simulation (only evaluate/run_detect.py shards)")


register_group("exposure", ExposureConfig)
register_group("detect", SimDetectConfig)
register_group("benchmark", BenchmarkConfig)
register_group("cot", CotConfig)
register_group("clean", CleanConfig)
register_group("eval", EvalConfig)
register_group("split", SimSplitConfig, name="simulation")
register_group("paraphrase", SimParaphraseConfig, name="simulation")
register_job("contaminate", SimulationJob)
register_job("demo", SimulationJob)
MESSAGE_PREFIX.update({SuppressConfig: "exposure.suppress"})
