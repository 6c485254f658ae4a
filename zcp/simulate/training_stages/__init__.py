"""Training stages of the contamination run: a registry with one interface.

A training stage trains one LoRA adapter on the run's *model so far* (the base model with the adapter of every
earlier stage merged into its weights, in `train.stages` order) and saves it in the run directory; the next
stage trains on top of it and the merge stage folds them all into ``model/``. The built-in stages are `sft`
(`zcp.simulate.training_stages.sft`: LoRA SFT on the data stage's ``sft_data.jsonl``) and `grpo`
(`zcp.simulate.training_stages.grpo`: GRPO on ``grpo_data.jsonl``); `train.stages` (default ``[sft, grpo]``)
gives the order. The pipeline (`zcp.simulate.contaminate`) makes one resumable `zcp.simulate.stages.Stage` of
each: done when its adapter is on disk, skipped when its `enabled` says no (GRPO at ``exposure.grpo_steps=0``).
Under ``train.finetune=full`` the built-in stages train every weight instead and save a full model in the same
folder (`zcp.simulate.sft.is_full_model`), which the next stage and the merge stage load in place of merging.

Adding one is one module and one config::

    @dataclass
    class MySettings:              # train.mystage.* (typed and checked like every config group)
        data_path: str = "mine.jsonl"
        max_steps: int = 1

    def train_mystage(run: StageRun) -> Path:
        ...                        # train on run.model() with run.rows(), save a LoRA to run.adapter_dir
        return run.adapter_dir

    register_training_stage("mystage", MySettings, train_mystage,
                            data=lambda config, settings, run_dir: settings.data_path)

and ``train.stages=[sft,mystage,grpo]`` (``+train.mystage.max_steps=2``) in the config. `register_training_stage`
also makes the name valid in `train.stages` and its settings the keys of ``train.<name>``
(`zcp.simulate.train_config.add_training_stage_name`: the schema never imports a stage); an unknown name fails when
the config is validated, listing the registered ones. The built-in stages are registered by module path and
imported when first used, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zcp.core.io import read_jsonl
from zcp.simulate.settings import SimConfig
from zcp.simulate.train_config import (
    BUILTIN_TRAINING_STAGES,
    TRAINING_STAGE_NAMES,
    add_training_stage_name,
    remove_training_stage_name,
)

# what a stage's builder does: train on the run's model so far, save the adapter, return its folder
Builder = Callable[["StageRun"], "str | Path"]


@dataclass(frozen=True)
class TrainingStage:
    """A registered training stage.

    `settings`: the dataclass of its `train.<name>.*` keys (None: none of its own). `builder(run)` trains and returns
    the adapter folder (`run.adapter_dir`). `data(config, settings, run_dir)` gives the JSONL file of its rows
    (None: ``<run_dir>/<name>_data.jsonl``, the data stage's files for sft and grpo). `enabled(config)`: whether it
    runs in this config (None: always; a disabled stage is recorded as skipped). `check(config, n_c)`: a check
    before any model loads (``n_c``: the number of items the C split will hold), e.g. that its learning-rate
    schedule moves the weights; it raises a one-line ConfigError.
    """

    name: str
    settings: type | None
    builder: Builder
    data: Callable[[SimConfig, Any, Path], str | Path] | None = None
    enabled: Callable[[SimConfig], bool] | None = None
    check: Callable[[SimConfig, int], None] | None = None

    def is_enabled(self, config: SimConfig) -> bool:
        """Whether the stage runs under `config` (`enabled`, else always)."""
        return True if self.enabled is None else bool(self.enabled(config))

    def data_path(self, config: SimConfig, run_dir: Path) -> Path:
        """The JSONL file of the stage's rows (`data`, else ``<run_dir>/<name>_data.jsonl``); a relative path given
        by `data` is relative to the run directory."""
        if self.data is None:
            return run_dir / f"{self.name}_data.jsonl"
        return run_dir / Path(self.data(config, config.train.stage_settings(self.name), run_dir))


def adapter_dir(run_dir: Path, name: str) -> Path:
    """Where stage `name` saves its adapter: ``<run_dir>/<name>_adapter`` (sft_adapter/, grpo_adapter/)."""
    return run_dir / f"{name}_adapter"


def output_dir(run_dir: Path, name: str) -> Path:
    """The trainer's folder of stage `name` (checkpoints a rerun resumes from): ``<run_dir>/<name>``."""
    return run_dir / name


class StageRun:
    """What one training stage gets from the pipeline, and the one thing it must do: save an adapter in
    `adapter_dir` (trained on `model()`, the run's model so far) and return that folder.

    `config` is the whole run config (`zcp.simulate.settings.SimConfig`: validated groups), `settings` the stage's
    own (`train.<name>`, or None), `lora` the run's LoRA settings (train.lora with exposure.lora_r), `seed` the run
    seed, `cpu` whether training runs on the CPU, `output_dir` the trainer's checkpoint folder. `model()` loads the
    model so far, `rows()` reads the stage's data file, `tracker` is the stage's W&B run (job type = the stage's
    name; started when first read, finished by the pipeline) and `report_to` what a TRL trainer's `report_to` takes.
    """

    def __init__(self, *, name: str, config: SimConfig, run_dir: Path, data_path: Path, seed: int, cpu: bool,
                 lora: dict[str, Any], model: Callable[[], Any], tokenizer: Any, tracker: Callable[[], Any]) -> None:
        self.name, self.config, self.run_dir, self.data_path = name, config, run_dir, data_path
        self.settings = config.train.stage_settings(name)
        self.output_dir, self.adapter_dir = output_dir(run_dir, name), adapter_dir(run_dir, name)
        self.seed, self.cpu, self.lora, self.tokenizer = seed, cpu, dict(lora), tokenizer
        self._model, self._tracker_factory = model, tracker
        self._tracker: Any = None

    def model(self) -> Any:
        """The run's model so far: the base model with every earlier stage's adapter merged, loaded now."""
        return self._model()

    def rows(self) -> list[dict[str, Any]]:
        """The stage's training rows (the JSONL file at `data_path`)."""
        return list(read_jsonl(self.data_path))

    @property
    def tracker(self) -> Any:
        """The stage's W&B tracker (`zcp.core.tracking.Tracker`), started on first use."""
        if self._tracker is None:
            self._tracker = self._tracker_factory()
        return self._tracker

    @property
    def report_to(self) -> str:
        """TRL's `report_to` for this stage: "wandb" when its tracker logs, else "none"."""
        return "wandb" if self.tracker.enabled else "none"

    def finish(self) -> None:
        """Close the stage's tracker if it was started (the pipeline calls this after the builder)."""
        if self._tracker is not None:
            self._tracker.finish()


# name -> the stage, or "module:attribute" of a built-in one (imported when first used)
_REGISTRY: dict[str, str | TrainingStage] = {
    name: f"zcp.simulate.training_stages.{name}:STAGE" for name in BUILTIN_TRAINING_STAGES}  # sft.py, grpo.py


def register_training_stage(name: str, settings: type | None, builder: Builder, *,
                            data: Callable[[SimConfig, Any, Path], str | Path] | None = None,
                            enabled: Callable[[SimConfig], bool] | None = None,
                            check: Callable[[SimConfig, int], None] | None = None) -> TrainingStage:
    """Add a training stage: `train.stages` may then name it, and ``train.<name>.*`` holds the fields of `settings`
    (a dataclass whose fields carry the defaults and whose `__post_init__` checks ranges, or None). See
    `TrainingStage` for the rest. Register before the config is validated (import the stage's module first).
    Returns the registered stage."""
    if not name.isidentifier():
        raise ValueError(f"register_training_stage({name!r}): the name must be an identifier (it names train.<name>)")
    add_training_stage_name(name, settings)  # refuses built-in names and keys of the train group
    stage = TrainingStage(name=name, settings=settings, builder=builder, data=data, enabled=enabled, check=check)
    _REGISTRY[name] = stage
    return stage


def unregister_training_stage(name: str) -> None:
    """Remove a stage added by `register_training_stage` (its name and settings keys too)."""
    remove_training_stage_name(name)  # refuses the built-in ones
    _REGISTRY.pop(name, None)


def training_stage_names() -> list[str]:
    """The registered training stages' names, sorted."""
    return sorted(TRAINING_STAGE_NAMES)


def training_stage(name: str) -> TrainingStage:
    """The registered stage `name` (a built-in one imported now); KeyError listing the registered names."""
    entry = _REGISTRY.get(name)
    if entry is None:
        raise KeyError(f"unknown training stage {name!r}; registered: {training_stage_names()}")
    if isinstance(entry, str):
        module, attr = entry.split(":")
        entry = _REGISTRY[name] = getattr(importlib.import_module(module), attr)
    return entry


def configured_stages(config: SimConfig) -> list[TrainingStage]:
    """The stages `train.stages` names, in its order (disabled ones included: `TrainingStage.is_enabled`)."""
    return [training_stage(n) for n in config.train.stages]


def check_training_stages(config: SimConfig, n_c: int) -> None:
    """Each enabled stage's own check (`TrainingStage.check`) before any model loads; ``n_c`` = |C|."""
    for stage in configured_stages(config):
        if stage.check is not None and stage.is_enabled(config):
            stage.check(config, n_c)
