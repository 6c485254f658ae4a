"""Baseline contamination detectors: the interface, the registry, and the metrics that compare them.

A detector turns items into per-item scores (higher = more likely leaked) and a set of item records into a
benchmark-level decision. Each is described once by a frozen `DetectorSpec` (name, label for tables and
plots, kind, what it needs); tables, plots and the study report read labels from `spec_of(name)`.

Kinds:
- ``score``: a per-item score with no rule of its own (perplexity, zlib, Min-K%, Min-K%++, reference
  model, prefix reconstruction). An auditor has no U, so the benchmark decision is a one-sided paired test
  that the original items score higher than their reference items (the ZCP reference set: the same
  items with every number perturbed): `reference_set_decision`, the within-item permutation test of
  `zcp.probe.stats.paired_test` for continuous scores at level alpha. Without a reference set: no decision.
- ``rule``: the detector's paper gives its own benchmark rule (DPCC, guided instruction).
- ``records``: scores read from an existing ZCP detection run (zcp_gap); no model access.

Adding a detector = one module that subclasses `Detector`, is decorated with `register_detector(spec)`,
and is imported by `zcp.validate.detectors` (plus its name in conf/baselines.yaml).

Comparison metrics on simulated ground truth (C = leaked, U = clean): `auroc` (Mann-Whitney U / (n_C n_U),
ties count 1/2) and `tpr_at_fpr` (TPR at the largest threshold whose FPR <= 0.05).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zcp.backends.base import Backend
from zcp.core.items import Item
from zcp.probe.probe_config import StatsConfig

log = logging.getLogger(__name__)

NEEDS = frozenset({"reference_model", "paraphraser", "metadata", "generation", "detection_records"})
KINDS = ("score", "rule", "records")
NO_REFERENCE_RULE = "no decision rule without a reference set"


@dataclass(frozen=True)
class DetectorSpec:
    """What a registered detector is: the one place that names and labels it."""

    name: str
    label: str
    kind: str  # score | rule | records (see the module docstring)
    needs: frozenset[str] = frozenset()
    family: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)  # constructor defaults of this variant
    cite: str = ""
    version: int = 1  # raised when the scoring changes: records of an older version are not resumed

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"detector {self.name}: kind must be one of {list(KINDS)}, not {self.kind!r}")
        unknown = set(self.needs) - NEEDS
        if unknown:
            raise ValueError(f"detector {self.name}: unknown needs {sorted(unknown)} (known: {sorted(NEEDS)})")
        object.__setattr__(self, "needs", frozenset(self.needs))
        object.__setattr__(self, "params", dict(self.params))


@dataclass
class DetectorContext:
    """What a detector may use besides the audited backend and the items.

    `ref_backend`: the reference (base) model for `ref`. `dataset_name`/`split_name`: metadata for the
    guided instruction. `detection_records`: records.jsonl rows of a ZCP detection run (zcp_gap).
    `cache`: shared between detectors of one run (one likelihood pass serves ppl, zlib and every Min-K%).
    """

    seed: int = 0
    alpha: float = StatsConfig.alpha  # the defaults of the test settings are the stats group's
    bootstrap_samples: int = StatsConfig.bootstrap_samples
    ref_backend: Backend | None = None
    dataset_name: str | None = None
    split_name: str | None = None
    detection_records: list[dict[str, Any]] | None = None
    file: str = "data"
    cache: dict[Any, Any] = field(default_factory=dict)


class Detector(ABC):
    """A baseline detector. Subclasses set `spec` (via `register_detector`) and take their params as kwargs."""

    spec: DetectorSpec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def needs(self) -> frozenset[str]:
        return self.spec.needs

    @property
    def kind(self) -> str:
        return self.spec.kind

    def params(self) -> dict[str, Any]:
        """The detector's parameters (recorded with its records; they key resume)."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k != "spec"}

    def skip_reason(self, ctx: DetectorContext, items: Sequence[Item] = ()) -> str | None:
        """Why this detector cannot run on `items` with `ctx` (None: it can). Checked before any model work."""
        if "reference_model" in self.needs and ctx.ref_backend is None:
            return "no reference model (set ref_model.path)"
        if "detection_records" in self.needs and not ctx.detection_records:
            return "no ZCP detection records (set zcp_records=PATH to a detection run's records.jsonl)"
        return None

    @abstractmethod
    def score_items(self, backend: Backend, items: Sequence[Item], ctx: DetectorContext) -> list[dict[str, Any]]:
        """One record per item, in order: at least `id` and `score` (higher = more likely leaked; None when
        the item cannot be scored, with a `reason`), plus detector-specific fields."""

    def benchmark_decision(self, records: Sequence[dict[str, Any]], ctx: DetectorContext) -> dict[str, Any]:
        """Benchmark-level decision: {statistic, decision, rule, p_value, threshold}.

        Default (kind score): the reference-set test (`reference_set_decision`).
        """
        return reference_set_decision(records, ctx)


_REGISTRY: dict[str, tuple[type[Detector], DetectorSpec]] = {}


def register_detector(spec: DetectorSpec) -> Callable[[type[Detector]], type[Detector]]:
    """Class decorator: register `cls` under `spec.name` (a class may be registered under several specs,
    e.g. one per Min-K% k; `spec.params` are the constructor defaults of that variant)."""
    def deco(cls: type[Detector]) -> type[Detector]:
        if spec.name in _REGISTRY and _REGISTRY[spec.name][0] is not cls:
            raise ValueError(f"detector {spec.name!r} is already registered by {_REGISTRY[spec.name][0].__name__}")
        _REGISTRY[spec.name] = (cls, spec)
        return cls
    return deco


def available_detectors() -> list[str]:
    """Registered detector names, sorted."""
    return sorted(_REGISTRY)


def spec_of(name: str) -> DetectorSpec:
    """The spec (label, kind, needs) of a registered detector; KeyError listing the known names."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown detector {name!r} (known: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[name][1]


def get_detector(name: str, **params: Any) -> Detector:
    """A detector by registry name, its variant's defaults overridden by `params`.

    Unknown name: KeyError listing the available detectors. Unknown or invalid param: ValueError naming it.
    """
    spec = spec_of(name)
    cls = _REGISTRY[name][0]
    kwargs = {**spec.params, **params}
    try:
        det = cls(**kwargs)
    except TypeError as e:
        raise ValueError(f"detector {name}: {e}") from None
    det.spec = spec
    return det


# ------------------------------------------------------------------------------------- decisions
def originals_and_references(records: Sequence[dict[str, Any]]) -> tuple[list[str], list[float], list[list[float]]]:
    """(ids, original scores, reference scores per id) of items with a score and at least one scored reference."""
    orig: dict[str, float] = {}
    refs: dict[str, list[float]] = {}
    for r in records:
        if r.get("score") is None:
            continue
        if r.get("variant", "original") == "original":
            orig[str(r["original_id"] if "original_id" in r else r["id"])] = float(r["score"])
        else:
            refs.setdefault(str(r["original_id"]), []).append(float(r["score"]))
    ids = [i for i in orig if refs.get(i)]
    return ids, [orig[i] for i in ids], [refs[i] for i in ids]


def original_scores(records: Sequence[dict[str, Any]]) -> list[float]:
    """Scores of the original items (reference rows and unscored items left out)."""
    return [float(r["score"]) for r in records
            if r.get("variant", "original") == "original" and r.get("score") is not None]


def reference_set_decision(records: Sequence[dict[str, Any]], ctx: DetectorContext) -> dict[str, Any]:
    """One-sided paired test that original items score higher than their reference items.

    `zcp.probe.stats.paired_test` (within-item permutation test, continuous, B = ctx.bootstrap_samples):
    statistic = mean over items of (original score - mean of its reference scores); decision = p < alpha.
    Without reference rows: statistic = mean original score, decision None.
    """
    from zcp.probe.stats import paired_test

    ids, orig, refs = originals_and_references(records)
    if not ids:
        scores = original_scores(records)
        return {"statistic": float(np.mean(scores)) if scores else float("nan"), "decision": None,
                "rule": NO_REFERENCE_RULE, "p_value": None, "threshold": None}
    res = paired_test("score", orig, refs, B=ctx.bootstrap_samples, seed=ctx.seed, ids=ids, kind="continuous")
    return {"statistic": float(res.diff), "decision": bool(res.p_value < ctx.alpha),
            "rule": (f"one-sided within-item permutation test, original score > the mean of its reference items "
                     f"(up to {res.m} per item; statistic = mean difference over {res.n} items), p < {ctx.alpha}"),
            "p_value": float(res.p_value), "threshold": ctx.alpha}


# --------------------------------------------------------------------------------------- metrics
def auroc(pos: Sequence[float], neg: Sequence[float]) -> float | None:
    """P(score of a leaked item > score of a clean item) + 1/2 P(tie): the Mann-Whitney U / (n_pos n_neg).

    None when either side is empty.
    """
    a = np.asarray(pos, dtype=float)
    b = np.asarray(neg, dtype=float)
    if a.size == 0 or b.size == 0:
        return None
    from scipy.stats import rankdata

    ranks = rankdata(np.concatenate([a, b]))  # average ranks: a tie counts 1/2
    u = ranks[: a.size].sum() - a.size * (a.size + 1) / 2.0
    return float(u / (a.size * b.size))


def tpr_at_fpr(pos: Sequence[float], neg: Sequence[float], max_fpr: float = 0.05) -> float | None:
    """TPR of the rule "score >= t" at the smallest threshold t whose FPR (share of clean items >= t) is
    <= max_fpr (the best TPR any threshold reaches within that FPR). None when either side is empty."""
    a = np.asarray(pos, dtype=float)
    b = np.asarray(neg, dtype=float)
    if a.size == 0 or b.size == 0:
        return None
    best = 0.0
    for t in np.unique(np.concatenate([a, b, [np.inf]])):
        if float(np.mean(b >= t)) <= max_fpr:
            best = max(best, float(np.mean(a >= t)))
    return best
