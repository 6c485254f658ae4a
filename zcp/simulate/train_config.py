"""The training schemas, beside the training stages and the base model that read them: `train` (the training
profile, conf/train/*.yaml: the stages in order, LoRA, GRPO rewards, TRL's SFTConfig / GRPOConfig fields checked
against TRL's own dataclasses) and the pretrain_base job's root (conf/pretrain_base.yaml, the shipped base model's
recipe: zcp.simulate.base_model), and the simulation's `run` (`- run: simulation`: RunConfig's probing and the limit on
the training stages, zcp.simulate.preflight).

Valid choices come from their owners: the GRPO rewards (`zcp.simulate.rewards.REWARDS`), the training stages
(`TRAINING_STAGE_NAMES`, filled by zcp.simulate.training_stages.register_training_stage), the reserved pool's seed
and size (zcp.benchmarks.reserved). Registered in the config layer when this module is imported: the root as job
`pretrain_base`; `train` is typed by each job's root (SimulationJob), not stored by name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from zcp.benchmarks.reserved import BENCHMARK_SEED, RESERVED_BENCHMARK_ITEMS
from zcp.config.checks import as_number as _num
from zcp.config.checks import check_value, unknown_key_message, user_key
from zcp.config.conform import MESSAGE_PREFIX, build, conform
from zcp.config.groups import register_group
from zcp.config.jobs import register_job
from zcp.config.run import RunConfig
from zcp.core.tracking import LoggerConfig
from zcp.errors import ConfigError
from zcp.simulate.rewards import REWARDS


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
    run time; this schema never imports them)."""

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


# ----------------------------------------------------------------------------------- the simulation's run
@dataclass
class SimRunConfig(RunConfig):
    """The simulation's `run` group: RunConfig's probing settings (its detection stage) and the limit on its training
    stages (zcp.simulate.preflight): before a stage trains, one line says its data's tokens, optimizer steps, memory
    from the parameter count and, from a step rate, its time; a stage estimated above `max_stage_seconds` is
    refused in one line naming the estimate."""

    max_stage_seconds: float | None = None  # a training stage estimated to take longer is refused; null: no limit
    # seconds per optimizer step by training stage (run.step_seconds.sft=12; a stage registered at run time:
    # +run.step_seconds.<name>=S): its estimate (and refusal) comes before its model loads; null: timed over its
    # first `preflight_steps` steps instead
    step_seconds: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(BUILTIN_TRAINING_STAGES))
    preflight_steps: int = 2  # optimizer steps timed for the estimate of a stage without step_seconds

    def __post_init__(self) -> None:
        super().__post_init__()
        check_value(self.max_stage_seconds is None or _num(self.max_stage_seconds) > 0, "run.max_stage_seconds",
                    self.max_stage_seconds, "null (no limit) or a number of seconds > 0")
        for name, value in self.step_seconds.items():  # names: checked against the training stages before training
            check_value(value is None or _num(value) > 0, f"run.step_seconds.{name}", value,
                        "null (timed) or a number of seconds > 0")
        check_value(self.preflight_steps >= 1, "run.preflight_steps", self.preflight_steps, ">= 1")


# ------------------------------------------------------------------------------- the pretrain_base job
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
    reserve_seed: int = BENCHMARK_SEED  # the reserved pool's seed (zcp.benchmarks.reserved.BENCHMARK_SEED)
    reserve_n: int = RESERVED_BENCHMARK_ITEMS  # its size (zcp.benchmarks.reserved.RESERVED_BENCHMARK_ITEMS)
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


register_group("run", SimRunConfig, name="simulation", validate_as=True)
register_job("pretrain_base", PretrainBaseJob)
MESSAGE_PREFIX.update({TrainConfig: "train", LoraSettings: "train.lora", NumberLimits: "limits"})
