"""What a detection run will cost, said before its work is done, and how big its chunks are.

A run's cost is set by the passes its metrics need (the metric table, `zcp.probe.metrics`): one teacher-forced
score request per probed prompt for p_first/p_all, one zero-CoT generation of at most `probe.zero_cot_max_tokens`
for acc/con, and one full-CoT generation of at most `probe.full_cot_max_tokens` for con. On a small model on a
CPU the last one sets the run's time (SmolLM2-135M: about 2 s per item at 512 tokens on two cores, against a few
milliseconds of scoring), so a run states its counts and budgets before probing (`CostPlan.line`), then times its
first chunk, split by pass (`PassTimer`), and extrapolates an ETA from it. The ETA is an estimate: later chunks run
other prompts in other batch sizes, and generations end at their stop strings or EOS, at different lengths.

The same measurement sizes the chunks (`chunk_units`): at the default `run.chunk_size`, each chunk holds the units
that take about `run.chunk_seconds` at the measured rate, so the progress bar moves and records are appended (the
unit of resume) at a pace a user sees, whatever the model and the metrics. Records do not depend on the chunking
(batch invariance), only the number of backend calls does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from zcp.backends.base import Backend, GenerationRequest
from zcp.probe.metrics import get_metric, needing
from zcp.probe.prompts import ProbeConfig

SCORE, ZERO_COT, FULL_COT = "score", "zero-CoT", "full-CoT"
PASSES = (SCORE, ZERO_COT, FULL_COT)


@dataclass
class CostPlan:
    """The work a run has left and, once its first chunk is timed, the estimate of how long it takes.

    `units`: units the run plans (originals, reference rows, variants); `todo`: those not yet in records.jsonl;
    `probes`: distinct prompts among them (units with the same question and gold answer share one probe). Per pass,
    `score_requests`, `zero_cot_generations` (each of at most `zero_cot_max_tokens` new tokens) and
    `full_cot_generations` (at most `full_cot_max_tokens`), and `own_passes` (metrics that run a pass of their
    own). After the first timed chunk: `warmup` (its units, probes, seconds in all and per pass), `eta_seconds` (the
    probes left times the measured seconds per probe) and `chunk_units` / `chunk_seconds` (the chunks that follow).
    """

    units: int
    todo: int
    probes: int
    score_requests: int = 0
    zero_cot_generations: int = 0
    zero_cot_max_tokens: int = 0
    full_cot_generations: int = 0
    full_cot_max_tokens: int = 0
    own_passes: list[str] = field(default_factory=list)
    warmup: dict[str, Any] | None = None
    eta_seconds: float | None = None
    chunk_units: int | None = None
    chunk_seconds: float | None = None
    chunk_rule: str = ""

    def counts_text(self) -> str:
        """The counts and budgets, as the plan line says them."""
        parts = []
        if self.score_requests:
            parts.append(f"{self.score_requests} score requests")
        if self.zero_cot_generations:
            parts.append(f"{self.zero_cot_generations} zero-CoT generations of <= {self.zero_cot_max_tokens} tokens")
        if self.full_cot_generations:
            parts.append(f"{self.full_cot_generations} full-CoT generations of <= {self.full_cot_max_tokens} tokens")
        if self.own_passes:
            parts.append(f"the own passes of {', '.join(self.own_passes)}")
        done = self.units - self.todo
        head = f"{self.todo} units to probe" + (f" ({done} of {self.units} already in records)" if done else "")
        head += f", {self.probes} distinct prompts"
        return head + (": " + ", ".join(parts) if parts else "")

    def line(self) -> str:
        """The plan in one line: counts, budgets and, once measured, the warm-up, the ETA and the chunking."""
        text = "cost plan: " + self.counts_text()
        if self.warmup is not None:
            w = self.warmup
            split = ", ".join(f"{k} {v:.1f} s" for k, v in w["pass_seconds"].items() if v > 0)
            text += (f"; first chunk ({w['units']} units, {w['probes']} prompts) took {w['seconds']:.1f} s"
                     + (f" ({split})" if split else ""))
        if self.eta_seconds is not None:
            left = self.probes - (self.warmup or {}).get("probes", 0)
            text += (f"; ETA ~{format_seconds(self.eta_seconds)} for the other {left} prompts (an estimate, "
                     "extrapolated from the first chunk)")
        if self.chunk_units:
            text += f"; then chunks of {self.chunk_units} unit{'s' if self.chunk_units != 1 else ''}"
            if self.chunk_seconds is not None:
                text += f" (~{format_seconds(self.chunk_seconds)} each)"
            if self.chunk_rule:
                text += f", {self.chunk_rule}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """The plan for summary.json and run_meta.json, the line included."""
        return {**asdict(self), "line": self.line()}


def format_seconds(s: float) -> str:
    """A duration as a person reads it: 42 s, 3.5 min, 1.2 h."""
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def plan_cost(units: int, todo: int, probes: int, probe: ProbeConfig) -> CostPlan:
    """The counts and budgets of the passes `probe.metrics` need for `probes` distinct prompts (no measurement)."""
    own = [m for m in probe.metrics if get_metric(m).probe is not None]
    return CostPlan(
        units=units, todo=todo, probes=probes,
        score_requests=probes if needing(probe.metrics, "logprobs") else 0,
        zero_cot_generations=probes if needing(probe.metrics, "generation") else 0,
        zero_cot_max_tokens=probe.zero_cot_max_tokens if needing(probe.metrics, "generation") else 0,
        full_cot_generations=probes if needing(probe.metrics, "full_cot") else 0,
        full_cot_max_tokens=probe.full_cot_max_tokens if needing(probe.metrics, "full_cot") else 0,
        own_passes=own)


def _kind(requests: Sequence[GenerationRequest], probe: ProbeConfig) -> str:
    """full-CoT for the full-CoT probe's requests (no pre-fill, its budget), else zero-CoT."""
    full = bool(requests) and all(r.max_new_tokens == probe.full_cot_max_tokens and not r.prompt.assistant_prefix
                                  for r in requests)
    return FULL_COT if full else ZERO_COT


class PassTimer:
    """Wall seconds of a backend's `score` and `generate` calls while active, per pass (score, zero-CoT, full-CoT).

    Installed on the instance (`timing`), so the probe code calls the backend as usual; the instance's own
    attributes of those names (a test's counting wrapper) are kept and put back."""

    def __init__(self, probe: ProbeConfig) -> None:
        self.probe = probe
        self.seconds: dict[str, float] = dict.fromkeys(PASSES, 0.0)

    def _wrap(self, fn: Callable[..., Any], kind: Callable[[Any], str]) -> Callable[..., Any]:
        def timed(requests: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(requests, *args, **kwargs)
            finally:
                self.seconds[kind(requests)] += time.perf_counter() - t0

        return timed

    @contextmanager
    def timing(self, backend: Backend) -> Iterator[PassTimer]:
        """Time `backend`'s score and generate calls inside the block."""
        own = getattr(backend, "__dict__", {})
        saved = {name: own[name] for name in ("score", "generate") if name in own}
        try:
            backend.score = self._wrap(backend.score, lambda _: SCORE)  # type: ignore[method-assign]
            backend.generate = self._wrap(  # type: ignore[method-assign]
                backend.generate, lambda reqs: _kind(list(reqs), self.probe))
        except AttributeError:  # an object that takes no new attributes: not timed per pass
            yield self
            return
        try:
            yield self
        finally:
            for name in ("score", "generate"):
                if name in saved:
                    setattr(backend, name, saved[name])
                else:
                    delattr(backend, name)


def chunk_units(seconds_per_probe: float, target_seconds: float, probes_per_unit: float, cap: int,
                floor: int = 1) -> int:
    """Units per chunk that take about `target_seconds` at the measured rate: at least `floor` (the first chunk's
    size: smaller chunks would make generation batches too small to be efficient, a batch of one row costs nearly
    as many seconds per step as a batch of eight on a CPU), at most `cap` (the backend's preferred block: chunks
    never grow past what the fixed chunking gave). `probes_per_unit` (< 1 when units share prompts) converts
    prompts to units."""
    floor = max(1, min(floor, cap))
    if seconds_per_probe <= 0 or not math.isfinite(seconds_per_probe):
        return cap
    per_unit = seconds_per_probe * max(probes_per_unit, 1e-9)
    return max(floor, min(cap, int(target_seconds / per_unit)))


def measured(plan: CostPlan, units: int, probes: int, seconds: float, pass_seconds: dict[str, float],
             target_seconds: float | None, cap: int) -> CostPlan:
    """`plan` with its first chunk's measurement (`units` units, `probes` fresh prompts, `seconds` wall): the ETA
    for the prompts left and, when `target_seconds` is given (default chunking), the chunk size that follows (at
    least `units`, the first chunk's)."""
    plan.warmup = {"units": units, "probes": probes, "seconds": round(seconds, 3),
                   "pass_seconds": {k: round(v, 3) for k, v in pass_seconds.items()}}
    if probes <= 0:
        return plan
    per_probe = seconds / probes
    left = max(plan.probes - probes, 0)
    plan.eta_seconds = round(per_probe * left, 1)
    if target_seconds is not None:
        ratio = plan.probes / plan.todo if plan.todo else 1.0
        plan.chunk_units = chunk_units(per_probe, target_seconds, ratio, cap, floor=units)
        plan.chunk_seconds = round(plan.chunk_units * per_probe * ratio, 1)
        plan.chunk_rule = f"sized to run.chunk_seconds={target_seconds:g}" + (
            f" (capped at the backend's block of {cap})" if plan.chunk_units == cap else
            " (at least the first chunk's size)" if plan.chunk_units == units else "")
    return plan
