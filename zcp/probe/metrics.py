"""The probe's metric table: one frozen `ProbeMetric` per metric, the one place that names and describes it.

Every reader of a metric asks this table instead of naming acc/con/p_first/p_all: the probe (which passes to
run: the teacher-forced score, the greedy zero-CoT answer, the full-CoT generation), the statistics (binary
metrics get the exact permutation test, continuous ones Monte Carlo), the malformed-answer warnings, the
reports' labels, the config checks of `probe.metrics`, the baselines' `zcp_*` detectors (one per metric,
generated from the table) and the calibration study.

A metric is described by:
- `name` (what `probe.metrics` lists), `label` (tables and plots), `kind` (binary | continuous);
- `field`: the probe record's field it reads (acc reads `correct`, con `consistent`);
- `compute`: its per-version value from a record (None: `float(record[field])`, booleans as 0/1);
- what it needs of the probe: `needs_logprobs` (the gold answer's token log-probabilities after the
  pre-filled prefix: a backend with pre-fill and log-probs), `needs_generation` (the greedy zero-CoT answer;
  its malformed rate voids the metric), `needs_full_cot` (the full-CoT generation; its malformed rate voids
  it too, and the truncated-CoT probe cannot give it);
- `probe`: optional, the metric's own probe pass when its field is a new score no built-in pass writes:
  `probe(backend, items, prompts, records, cfg, prefill)`, called after the zero-CoT passes (score, greedy
  answer) with the zero-CoT (or truncated-CoT) prompts, fills `field` into each record.

Adding one: `register_metric(ProbeMetric(...))` (see docs/extending.md, "A probe metric"). This module
imports nothing of zcp, so the config layer may read it (the checks of `probe.metrics`, `ablation.metrics`,
`report.metrics` look names up here when a config is validated, so a metric registered before that is known).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

KINDS = ("binary", "continuous")


@dataclass(frozen=True)
class ProbeMetric:
    """One probe metric: its name, the record field it reads, its kind and label, and what it needs of the probe."""

    name: str
    field: str
    kind: str  # binary (0/1 per version: exact test) | continuous (a score: Monte Carlo test)
    label: str
    needs_logprobs: bool = False  # the teacher-forced score of the gold answer after the pre-filled prefix
    needs_generation: bool = False  # the greedy zero-CoT answer (a malformed one voids the metric)
    needs_full_cot: bool = False  # the full-CoT generation (a malformed one voids it; not in the truncated probe)
    compute: Callable[[Mapping[str, Any]], float] | None = None  # None: float(record[field])
    probe: Callable[..., None] | None = None  # its own pass: (backend, items, prompts, records, cfg, prefill)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"probe metric name must be an identifier (it names a zcp_<name> detector), not "
                             f"{self.name!r}")
        if self.kind not in KINDS:
            raise ValueError(f"probe metric {self.name}: kind must be one of {list(KINDS)}, not {self.kind!r}")
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"probe metric {self.name}: field must name a probe record field, not {self.field!r}")
        if not isinstance(self.label, str) or not self.label:
            raise ValueError(f"probe metric {self.name}: label must be a non-empty string, not {self.label!r}")

    def value(self, record: Mapping[str, Any]) -> float:
        """This metric's score of one probed version (KeyError when the record lacks the field)."""
        return float(self.compute(record)) if self.compute is not None else float(record[self.field])


BUILTIN = (
    ProbeMetric("acc", "correct", "binary", "Acc", needs_generation=True),
    ProbeMetric("con", "consistent", "binary", "Con", needs_generation=True, needs_full_cot=True),
    ProbeMetric("p_first", "p_first", "continuous", "P_first", needs_logprobs=True),
    ProbeMetric("p_all", "p_all", "continuous", "P_all", needs_logprobs=True),
)
BUILTIN_METRICS = tuple(m.name for m in BUILTIN)  # the default probe.metrics and the baselines' zcp_* detectors

_TABLE: dict[str, ProbeMetric] = {m.name: m for m in BUILTIN}
_LISTENERS: list[Callable[[ProbeMetric], Any]] = []


def register_metric(metric: ProbeMetric, *, replace: bool = False) -> ProbeMetric:
    """Add `metric` to the table (registering the same spec again is a no-op); returns it.

    Another spec under a registered name is refused unless `replace` (a built-in metric is never replaced).
    Listeners (`on_register`, e.g. the baselines' zcp_* detectors) are told of every new metric.
    """
    old = _TABLE.get(metric.name)
    if old == metric:
        return metric
    if old is not None and (not replace or metric.name in BUILTIN_METRICS):
        raise ValueError(f"probe metric {metric.name!r} is already registered"
                         + ("" if metric.name in BUILTIN_METRICS else " (replace=True to redefine it)"))
    _TABLE[metric.name] = metric
    for listener in list(_LISTENERS):
        listener(metric)
    return metric


def unregister_metric(name: str) -> None:
    """Remove a registered metric (tests that register a toy one); built-in metrics stay."""
    if name in BUILTIN_METRICS:
        raise ValueError(f"probe metric {name!r} is built in and cannot be removed")
    _TABLE.pop(name, None)


def on_register(listener: Callable[[ProbeMetric], Any]) -> None:
    """Call `listener(metric)` for every metric registered now and for each registered later."""
    _LISTENERS.append(listener)
    for metric in list(_TABLE.values()):
        listener(metric)


def metric_names() -> tuple[str, ...]:
    """Registered metric names, built-ins first, then in registration order."""
    return tuple(_TABLE)


def is_metric(name: str) -> bool:
    """True when `name` is a registered probe metric."""
    return name in _TABLE


def get_metric(name: str) -> ProbeMetric:
    """The registered metric `name`; KeyError listing the known names."""
    if name not in _TABLE:
        raise KeyError(f"unknown probe metric {name!r} (known: {', '.join(_TABLE)})")
    return _TABLE[name]


def unknown_metrics(names: Iterable[str]) -> list[str]:
    """The names among `names` that are not registered metrics, in order."""
    return [n for n in names if n not in _TABLE]


def metric_label(name: str) -> str:
    """A metric's label for tables and plots; any other name (e.g. "combined") as it is."""
    return _TABLE[name].label if name in _TABLE else name


def metric_field(name: str) -> str:
    """The probe record field a metric reads (acc -> `correct`, con -> `consistent`)."""
    return get_metric(name).field


def metric_value(record: Mapping[str, Any], name: str) -> float:
    """A record's score on one metric (booleans as 0/1)."""
    return get_metric(name).value(record)


def needing(names: Iterable[str], need: str) -> list[str]:
    """Those of `names` whose metric needs `need` (logprobs | generation | full_cot), in order."""
    if need not in ("logprobs", "generation", "full_cot"):
        raise ValueError(f"need must be logprobs, generation or full_cot, not {need!r}")
    return [n for n in names if getattr(get_metric(n), f"needs_{need}")]
