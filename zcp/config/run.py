"""The `run` group's schemas: `RunConfig`, how items are probed (chunks appended to records.jsonl, progress bars,
shards), and `SimRunConfig`, the simulation's (`- run: simulation` in conf/contaminate.yaml): its detection stage's
probing and the limit on its training stages (zcp.simulate.preflight). Re-exported by zcp.config.groups."""

from __future__ import annotations

from dataclasses import dataclass, field

from zcp.config.checks import as_number, check_value, parse_shard
from zcp.config.conform import MESSAGE_PREFIX


@dataclass
class RunConfig:
    """How items are probed: chunks appended to records.jsonl (the unit of resume; the progress bar moves per chunk),
    progress bars; `shard` (detect only, zcp.probe.shard): "i/n" probes shard i of n, "merge" gathers the n shards
    into one run's outputs."""

    chunk_size: int = 64  # the default: chunks sized by work (chunk_seconds); any other value: units per chunk
    progress: bool = True
    shard: str | None = None  # null: one process | "i/n" (0 <= i < n; a string, as Hydra reads 3/8) | merge
    chunk_seconds: float = 30.0  # default chunk_size: measured seconds of work per chunk after the first (zcp.probe.cost)
    chunk_first: int = 8  # default chunk_size: units of the first chunk, timed for the cost plan's ETA (>= the generation batch if metrics generate)

    def __post_init__(self) -> None:
        check_value(self.chunk_size >= 1, "run.chunk_size", self.chunk_size, ">= 1")
        check_value(as_number(self.chunk_seconds) > 0, "run.chunk_seconds", self.chunk_seconds, "> 0")
        check_value(self.chunk_first >= 1, "run.chunk_first", self.chunk_first, ">= 1")
        self.shard_spec = parse_shard(self.shard, "run.shard")  # (i, n), or None for null and merge


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
    step_seconds: dict[str, float | None] = field(default_factory=lambda: {"sft": None, "grpo": None})
    preflight_steps: int = 2  # optimizer steps timed for the estimate of a stage without step_seconds

    def __post_init__(self) -> None:
        super().__post_init__()
        check_value(self.max_stage_seconds is None or as_number(self.max_stage_seconds) > 0, "run.max_stage_seconds",
                    self.max_stage_seconds, "null (no limit) or a number of seconds > 0")
        for name, value in self.step_seconds.items():  # names: checked against the training stages before training
            check_value(value is None or as_number(value) > 0, f"run.step_seconds.{name}", value,
                        "null (timed) or a number of seconds > 0")
        check_value(self.preflight_steps >= 1, "run.preflight_steps", self.preflight_steps, ">= 1")


MESSAGE_PREFIX.update({RunConfig: "run", SimRunConfig: "run"})
