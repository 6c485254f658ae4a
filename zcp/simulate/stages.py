"""A small stage runner for resumable pipelines: named stages, each with a done-check and a run step.

The contamination pipeline (`zcp.simulate.contaminate`) is a list of `Stage`s. `run_stages` owns what every
stage used to repeat by hand:

* **skipping**: a stage whose `done()` is true is not run (a resumed run starts at the first unfinished
  stage; every stage writes its final output atomically, so `done()` never sees half a result);
* **who runs it**: `main_only` stages (data building, evaluation, merging) run on rank 0 of a distributed
  run only; the others (the trainers) run on every rank;
* **barriers**: after every stage all ranks wait for each other (a no-op in a single process), so a rank
  never reads a stage's output before rank 0 has written it;
* **logging**: one line per stage (skipped / running / done in N s) and the lists of stages run and skipped
  that `ContaminationResult` reports.

A stage that raises stops the run there; rerunning the same command resumes at that stage.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class Stage:
    """One named step of a pipeline.

    `done` says whether its output already exists; `run` produces it. `enabled=False` (e.g. GRPO with 0
    steps, evaluation switched off) records the stage as skipped without asking `done`. `main_only` stages
    run on the main process only; `barrier` makes every rank wait after the stage.
    """

    name: str
    done: Callable[[], bool]
    run: Callable[[], Any]
    main_only: bool = False
    enabled: bool = True
    barrier: bool = True


@dataclass
class StageLog:
    """What `run_stages` did: the stages run and skipped, in order, and each run stage's seconds."""

    run: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def process_rank() -> int:
    """This process's rank in a distributed run (`RANK`, which `accelerate launch` / torchrun set), 0 in a single
    process. Rank 0 is the main process: the one that runs `main_only` stages and writes the run's files."""
    return int(os.environ.get("RANK", "0"))


def is_main_process() -> bool:
    """True on rank 0 of a distributed run, and in a single process (`process_rank`)."""
    return process_rank() == 0


def _no_barrier() -> None:
    return None


def run_stages(stages: Sequence[Stage], *, is_main: bool = True, barrier: Callable[[], None] = _no_barrier,
               log_to: StageLog | None = None) -> StageLog:
    """Run `stages` in order, skipping finished and disabled ones; see the module docstring.

    Stage names must be unique. Returns (and fills `log_to`, when given) the `StageLog`.
    """
    names = [s.name for s in stages]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"duplicate stage names {dup}")
    out = log_to if log_to is not None else StageLog()
    for st in stages:
        if not st.enabled:
            out.skipped.append(st.name)
            log.info("stage %s: disabled", st.name)
        elif st.main_only and not is_main:
            pass  # rank 0 runs it; this rank only waits at the barrier
        elif st.done():
            out.skipped.append(st.name)
            log.info("stage %s: done already, skipped", st.name)
        else:
            log.info("stage %s: running", st.name)
            t0 = time.time()
            st.run()
            out.seconds[st.name] = round(time.time() - t0, 1)
            out.run.append(st.name)
            log.info("stage %s: done in %.1f s", st.name, out.seconds[st.name])
        if st.barrier:
            barrier()
    return out
