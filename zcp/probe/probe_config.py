"""The probe's config schemas, beside the probe: `stats` (the test, zcp.probe.stats), `probe` (prompts, budgets, the
answer conventions probed: zcp.probe.conventions, zcp.probe.multiconv) with `probe.auto`, `base_model` (run_detect's
difference-in-differences, zcp.probe.did), and the detect job's root (conf/detect.yaml, evaluate/run_detect.py).

Valid choices come from the probe's own registries: the metric table (zcp.probe.metrics), the tests
(zcp.probe.stats.TESTS), the answer conventions (zcp.probe.conventions). Each group registers itself in the config
layer's store when this module is imported (`zcp.config.groups.register_group`, Hydra's ConfigStore: `- stats:
schema`), and the root as job `detect` (`zcp.config.jobs.register_job`); the config layer keeps the mechanics
(composition, checks, one-line errors) and never imports the probe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from zcp.benchmarks.data_config import DataConfig
from zcp.config.checks import as_number as _num
from zcp.config.checks import check_seeds, check_value, refuse_shard, user_key
from zcp.config.conform import MESSAGE_PREFIX
from zcp.config.groups import register_group
from zcp.config.jobs import register_job
from zcp.config.model import ModelConfig
from zcp.config.run import RunConfig
from zcp.core.answers import FINAL_ANSWER_PREFIX
from zcp.core.tracking import LoggerConfig
from zcp.errors import ConfigError
from zcp.probe.conventions import AUTO, is_single_default, parse_prefill, resolve_entries
from zcp.probe.conventions import PROBE as PROBE_CONVENTION
from zcp.probe.metrics import BUILTIN_METRICS, get_metric, metric_names, unknown_metrics
from zcp.probe.stats import TESTS


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
class BaseModelConfig:
    """run_detect's base model (`base_model.*`): the audited model's base, probed on the same units for the
    difference-in-differences (zcp.probe.did). Every other engine setting is the audited model's `model.*`."""

    path: str | None = None  # local folder or hub id (backend=openai: the served base model's name); null: no DiD
    adapter: str | None = None  # a PEFT LoRA folder on top of `path`
    name: str | None = None  # null: the folder name of `path`

    def __post_init__(self) -> None:
        check_value(self.path is not None or (self.adapter is None and self.name is None), "base_model.path",
                    self.path, "set when base_model.adapter or base_model.name is")


# ---------------------------------------------------------------------------------------------- probe.auto
@dataclass
class AutoPrefillConfig:
    """`probe.auto`: how `probe.prefill=auto` reads the answer conventions the audited model uses
    (zcp.probe.multiconv.read_conventions: its full-CoT outputs on the benchmark's originals and on a neutral set)."""

    # a convention is probed when it ends at least this share of the full-CoT outputs of one set (a dataset of
    # the run, or the neutral set); the probe's own line always is
    min_share: float = 0.1
    neutral_n: int = 40  # generated word problems (zcp.benchmarks.wordproblems) read besides the benchmark; 0: none
    neutral_seed: int = 20_020  # their seed: fixed, so every model is read on the same items
    neutral_path: str | None = None  # an items file (zcp.benchmarks.loaders format `items`) instead: its first neutral_n
    # probed under auto whatever the reading finds: an evader's leak may end on a convention the model's own outputs
    # never show (the `#### N` leak on the shipped model ends all of them on the probe's line); [] = the reading alone
    always: list[str] = field(default_factory=lambda: ["hash", "sentence", "boxed"])
    # a set whose outputs read (those fitting the model's context), or whose outputs ending on an answer convention,
    # are fewer than this (than all of them, on a smaller set) is warned about: its reading rests on few outputs
    min_read: int = 10

    def __post_init__(self) -> None:
        check_value(0.0 < _num(self.min_share) <= 1.0, "probe.auto.min_share", self.min_share, "in (0, 1]")
        check_value(self.min_read >= 1, "probe.auto.min_read", self.min_read, ">= 1")
        check_value(self.neutral_n >= 0, "probe.auto.neutral_n", self.neutral_n, ">= 0 (0: no neutral set)")
        always = list(self.always)
        if always:
            try:
                parse_prefill(always)
            except ValueError as e:
                raise ConfigError(f"{user_key('probe.auto.always')}={always!r}: {e}") from None
        self.always = always


def check_prefill(value: Any, zero_cot_prefix: str | None, answer_suffix: str | None, mode: str) -> str | list[str]:
    """`probe.prefill` as given (a list as a list), or ConfigError naming the key: known names or good literals
    (`parse_prefill`), no two of them pre-filling the same text (`resolve_entries`: e.g. `hash` beside `probe` with
    probe.zero_cot_prefix="#### "), and `probe` alone under probe.mode=api (the instruction pre-fills nothing)."""
    value = list(value) if isinstance(value, (list, tuple)) else value
    try:
        entries = parse_prefill(value)
        if entries != AUTO:
            resolve_entries(entries, zero_cot_prefix or "", answer_suffix)
    except ValueError as e:
        raise ConfigError(f"{user_key('probe.prefill')}={value!r}: {e}") from None
    check_value(mode != "api" or is_single_default(value), "probe.prefill", value,
                f"{PROBE_CONVENTION} with probe.mode=api (the API instruction pre-fills nothing)")
    return value


# ----------------------------------------------------------------------------------------------- the probe
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


# ------------------------------------------------------------------------------------------- the detect job
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


register_group("stats", StatsConfig)
register_group("base_model", BaseModelConfig)
register_group("probe", ProbeGroupConfig)
register_job("detect", DetectJob)
MESSAGE_PREFIX.update({AutoPrefillConfig: "probe.auto"})
