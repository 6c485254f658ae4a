"""The contamination job's configuration as the job reads it: each group the validated dataclass of
`zcp.simulate.simulation_config.SimulationJob` (where every default is defined, once), beside the plain values it came from.

Why both. The job reads settings only through the dataclasses (`SimConfig.exposure.k`, `.benchmark.source`, ...):
no `cfg.get("k", 6)` anywhere in zcp.simulate, so a default cannot differ between the schema, the YAML and the
code. The plain values are what the run directory's identity is made of and must stay as given: the fingerprint
and run-dir hash (`zcp.simulate.rundir`: a key a config does not write keeps older run dirs resuming),
run_config.json, the W&B run config and the `benchmark` record of exposure.json. They also hold the added keys
the schema types but does not compose (`SimSplitConfig.EXTRA_KEYS`: `+split.seed=N`).

A group is built when first read, so a caller giving part of a config (a library call, a test) gets the schema
defaults for what it left out, and a one-line ConfigError only for a value it gave wrong. Schema defaults that
follow another key (`exposure.sft_epochs: ${train.sft.num_train_epochs}`, `eval.max_new_tokens:
${train.eval_max_new_tokens}`) are resolved against the same config when the key is left out, as Hydra resolves
them when it composes conf/contaminate.yaml; one that does not resolve is refused by the group's own check.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from zcp.benchmarks.data_config import DataConfig
from zcp.config.schemas import LoggerConfig, build, conform
from zcp.probe.probe_config import ProbeGroupConfig
from zcp.simulate.simulation_config import (
    BenchmarkConfig,
    CleanConfig,
    CotConfig,
    EvalConfig,
    ExposureConfig,
    SimDetectConfig,
    SimParaphraseConfig,
    SimSplitConfig,
    SimulationJob,
)
from zcp.simulate.train_config import SimRunConfig, TrainConfig

_SIM_HINTS: dict[str, Any] = {}


def schema_hints(cls: type) -> dict[str, Any]:
    """Field name -> annotation (resolved) of a schema dataclass; cached for SimulationJob."""
    if cls is SimulationJob:
        if not _SIM_HINTS:
            _SIM_HINTS.update(typing.get_type_hints(SimulationJob))
        return _SIM_HINTS
    return typing.get_type_hints(cls)

_INTERPOLATION = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)\}$")
_MISSING = object()


def to_plain(cfg: Any) -> dict[str, Any]:
    """A plain dict of a config (a DictConfig resolved, a mapping copied through JSON)."""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover
        pass
    return json.loads(json.dumps(dict(cfg)))


def field_default(cls: type, name: str) -> Any:
    """The default of field `name` of the schema dataclass `cls` (its single definition)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            break
    raise KeyError(f"{cls.__name__} has no default for {name!r}")


class SimConfig:
    """A contamination config: `values` (the plain config as given) and its groups as validated dataclasses.

    Build it with `sim_config`; every function of the job takes one (or a mapping it turns into one)."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values: dict[str, Any] = dict(values)

    # ------------------------------------------------------------------------------ top-level keys
    def _top(self, name: str) -> Any:
        value = self.values.get(name, _MISSING)
        if value is _MISSING:
            return field_default(SimulationJob, name)
        return conform(value, schema_hints(SimulationJob)[name], name)

    @cached_property
    def seed(self) -> int:
        return int(self._top("seed"))

    @cached_property
    def name(self) -> str:
        return str(self._top("name"))

    @cached_property
    def output_dir(self) -> str | None:
        return self._top("output_dir")

    @cached_property
    def manifest_path(self) -> str | None:
        return self._top("manifest_path")

    @cached_property
    def stages(self) -> list[str]:
        return list(self._top("stages"))

    @cached_property
    def baselines_overrides(self) -> list[str]:
        return [str(o) for o in self._top("baselines_overrides")]

    # ------------------------------------------------------------------------------ groups
    def _group(self, name: str, cls: type) -> Any:
        raw = self.values.get(name)
        if raw is None and name == "data":  # the `data` group is optional (benchmark.source=data)
            return None
        if raw is not None and not isinstance(raw, Mapping):
            _not_mapping(name, raw, cls)
        given = dict(raw or {})
        for f in dataclasses.fields(cls):
            m = _INTERPOLATION.match(f.default) if isinstance(f.default, str) else None
            if m and f.name not in given:
                value = self._lookup(m.group(1))
                if value is not _MISSING:
                    given[f.name] = value
        return build(cls, given, name)

    def _lookup(self, path: str) -> Any:
        """The value at a dotted path of this config (validated groups first), or _MISSING."""
        head, *rest = path.split(".")
        node: Any = getattr(self, head, _MISSING) if head in _GROUPS else self.values.get(head, _MISSING)
        for part in rest:
            if dataclasses.is_dataclass(node) and not isinstance(node, type):
                node = getattr(node, part, _MISSING)
            elif isinstance(node, Mapping):
                node = node.get(part, _MISSING)
            else:
                return _MISSING
            if node is _MISSING:
                return _MISSING
        return node

    @cached_property
    def exposure(self) -> ExposureConfig:
        return self._group("exposure", ExposureConfig)

    @cached_property
    def benchmark(self) -> BenchmarkConfig:
        return self._group("benchmark", BenchmarkConfig)

    @cached_property
    def split(self) -> SimSplitConfig:
        return self._group("split", SimSplitConfig)

    @cached_property
    def data(self) -> DataConfig | None:
        return self._group("data", DataConfig)

    @cached_property
    def clean(self) -> CleanConfig:
        return self._group("clean", CleanConfig)

    @cached_property
    def cot(self) -> CotConfig:
        return self._group("cot", CotConfig)

    @cached_property
    def eval(self) -> EvalConfig:
        return self._group("eval", EvalConfig)

    @cached_property
    def train(self) -> TrainConfig:
        return self._group("train", TrainConfig)

    @cached_property
    def model(self) -> Any:
        """The `model` group (zcp.config.model.ModelConfig)."""
        return self._group("model", schema_hints(SimulationJob)["model"])

    @cached_property
    def logger(self) -> LoggerConfig:
        return self._group("logger", LoggerConfig)

    @cached_property
    def paraphrase(self) -> SimParaphraseConfig:
        return self._group("paraphrase", SimParaphraseConfig)

    @cached_property
    def detect(self) -> SimDetectConfig:
        """The detection stage's group (`detect.m`, `.seeds`, `.reference*`, `.on_overflow`, `.base_model`)."""
        return self._group("detect", SimDetectConfig)

    @cached_property
    def run(self) -> SimRunConfig:
        """The `run` group: the detection stage's probing (chunks, progress) and the training stages' pre-flight
        (`run.max_stage_seconds`, `run.step_seconds`, `run.preflight_steps`: zcp.simulate.preflight)."""
        return self._group("run", SimRunConfig)

    @cached_property
    def probe(self) -> ProbeGroupConfig:
        """The `probe` group, checked (its added keys, `+probe.api_instruction`, are in `probe_settings`)."""
        return self._group("probe", ProbeGroupConfig)

    @cached_property
    def probe_settings(self) -> Any:
        """The probe's `zcp.probe.prompts.ProbeConfig`: the checked `probe` group with the added keys it was given
        (`+probe.api_instruction`) and the model's own `model.probe.*` over it (`zcp.probe.detect.probe_config`,
        which reads the model group as given, as every job passes it)."""
        from zcp.probe.detect import probe_config

        group = dataclasses.asdict(self.probe)
        given = self.values.get("probe")
        if isinstance(given, Mapping):
            group.update({k: given[k] for k in ProbeGroupConfig.EXTRA_KEYS if k in given})
        return probe_config(group, self.values.get("model"))

    # ------------------------------------------------------------------------------ derived
    @cached_property
    def split_seed_override(self) -> int | None:
        """`+split.seed`: an added key (typed by SimSplitConfig.EXTRA_KEYS, not composed), the split's own seed."""
        split = self.values.get("split")
        raw = split.get("seed") if isinstance(split, Mapping) else None
        return None if raw is None else int(conform(raw, SimSplitConfig.EXTRA_KEYS["seed"], "split.seed"))

    @cached_property
    def split_seed(self) -> int:
        """The seed of the C/U split: `+split.seed` when given, else `seed`."""
        return self.seed if self.split_seed_override is None else self.split_seed_override

    @property
    def given_split(self) -> bool:
        """Whether C and U are given as files (`split.c_path` and `split.u_path`)."""
        return bool(self.split.c_path and self.split.u_path)


_GROUPS = ("exposure", "benchmark", "split", "data", "clean", "cot", "eval", "train", "model", "logger", "paraphrase",
           "detect", "probe", "run")


def _not_mapping(name: str, value: Any, cls: type) -> None:
    """One-line ConfigError: a group given as something other than a mapping."""
    from zcp.errors import ConfigError

    raise ConfigError(f"{name}={value!r}: must be a mapping of {cls.__name__} keys")


def sim_config(cfg: Any) -> SimConfig:
    """`cfg` as a SimConfig: one given is returned as is; a DictConfig or mapping is read into one."""
    if isinstance(cfg, SimConfig):
        return cfg
    return SimConfig(to_plain(cfg))


def plain_values(cfg: Any) -> Mapping[str, Any]:
    """The plain values of a config given as a SimConfig, DictConfig or mapping (what the fingerprint hashes)."""
    if isinstance(cfg, SimConfig):
        return cfg.values
    return cfg if isinstance(cfg, dict) else to_plain(cfg)
