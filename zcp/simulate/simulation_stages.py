"""The stages of a contamination simulation (`stages: [contaminate, detect, ...]`): the built-in ones and those
registered by the layers above.

`contaminate` (the training pipeline) and `detect` (the Zero-CoT Probe on C and U) are the simulation's own. A
stage that belongs to a higher layer, such as the literature's baseline detectors (`baselines`, registered by
zcp.validate.baselines_stage when imported, as train/run_contaminate.py and train/run_demo.py do), adds itself
here with a check run before training and a function run on the contamination's result, so the simulation never
imports the layer that defines it. `SimulationJob.stages` accepts exactly the names listed here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

BUILTIN_SIMULATION_STAGES = ("contaminate", "detect")


@dataclass(frozen=True)
class SimulationStage:
    """A stage run after the contamination (and the detection stage): `check(cfg)` before anything trains (a
    one-line ConfigError for a bad config), `run(cfg, result)` on the contamination's result (its summary).
    `needs`: stage name -> why this stage needs it (`stages: <name> needs <stage> (<why>)` when it is missing)."""

    name: str
    run: Callable[[Any, Any], Any]
    check: Callable[[Any], None] | None = None
    needs: dict[str, str] = field(default_factory=dict)


# registered stages by name, in registration order (after the built-in ones in `simulation_stage_names`)
SIMULATION_STAGES: dict[str, SimulationStage] = {}


def register_simulation_stage(stage: SimulationStage) -> None:
    """Make `stage.name` a valid entry of `stages` and run it after the contamination when listed."""
    if stage.name in BUILTIN_SIMULATION_STAGES:
        raise ValueError(f"{stage.name} is a built-in simulation stage")
    SIMULATION_STAGES[stage.name] = stage


def simulation_stage_names() -> list[str]:
    """Every name `stages` may hold: the built-in ones, then the registered ones."""
    return [*BUILTIN_SIMULATION_STAGES, *SIMULATION_STAGES]
