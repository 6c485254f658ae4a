"""The `run` group's schema `RunConfig`: how items are probed (chunks appended to records.jsonl, progress bars,
shards). The simulation's variant (`- run: simulation` in conf/contaminate.yaml: its detection stage's probing and
the limit on its training stages) is zcp.simulate.train_config.SimRunConfig. Re-exported by zcp.config.groups."""

from __future__ import annotations

from dataclasses import dataclass

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


MESSAGE_PREFIX.update({RunConfig: "run"})
