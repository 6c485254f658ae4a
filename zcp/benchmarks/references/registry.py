"""One registry of reference builders, used by run_build_data and the simulation alike.

A reference builder turns benchmark items into m isomorphic reference draws per item (same structure, new
numbers, the answer recomputed). What the ZCP test needs from them is **exchangeability under H0**: for a
model that never saw the item, the original must be just another draw of its family (DESIGN.md "Reference
set"). Builders declare which law they follow (`law`):

- ``exact``: the benchmark was drawn from a known generator, and the references are fresh draws from the same
  conditional law (same family/stage, template and structure; fresh values from the generator's own value
  law, under the same selection: values the audited model was trained on are excluded, as the benchmark's
  own items were). The within-item test is then exact by construction.
- ``matched``: programs over real text (GSM8K) or a perturbation kept near the original; the features a clean
  model responds to are matched and the residual shift is reported per feature (`zcp.benchmarks.references.shift`).
- ``model``: references proposed by a generator model and checked by judges (items without a program).

Adding a builder is one module with a class following `ReferenceBuilder` and one `register_reference_builder`
call; `reference.method=<name>` selects it (``auto`` picks the first registered builder whose `accepts` is true,
in registration order). Every builder's output goes through `build_references`, which numbers the draws
(ids ``<original id>::ref<j>``, metadata ``original_id``, ``draw``, ``distinct_draws``), drops a repeated draw
(a copy of a version is not a further version: counted twice it would make the permutation test
anti-conservative) and appends the per-feature exchangeability report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from zcp.core.items import Item

LAWS = ("exact", "matched", "model")
SPECIAL_CASE_POLICIES = ("drop", "keep")
EXCLUDE_BENCHMARK = ("auto", "true", "false")


@dataclass(frozen=True)
class BuildContext:
    """What a builder may use besides the items.

    `seed`: the draw seed (one seed gives one reference set). `benchmark`: every item of the benchmark the
    items belong to (the builder may keep references off other benchmark items' values). `exclude`: keys of
    values the audited model was trained on (word problems: signatures ``family:a=..``; ArithMark: the
    expression), never drawn. `exclude_benchmark`: "true" keeps references off every benchmark item's values,
    "false" only off the item's own, "auto" does so where enough values remain (see the builder).
    `special_cases`: what a matched builder does with an item no valid reference can match (drop: leave it
    out, with the reason; keep: keep its best-matching draws, flagged). `options`: the builder's own settings
    from the reference config; `backends`: ready model backends (the LLM pipeline; tests).
    """

    seed: int = 0
    benchmark: tuple[Item, ...] = ()
    exclude: frozenset[str] = frozenset()
    exclude_benchmark: str = "auto"
    special_cases: str = "drop"
    options: Mapping[str, Any] = field(default_factory=dict)
    backends: Mapping[str, Any] | None = None


@dataclass
class ReferenceSet:
    """A builder's output: draws per original id, rejections (id, reason, kept), LLM verdicts, a report."""

    refs: dict[str, list[Item]]
    rejections: list[dict[str, Any]] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)

    def rows(self, items: Sequence[Item]) -> list[Item]:
        """All reference rows in benchmark order (what reference.jsonl holds)."""
        return [r for it in items for r in self.refs.get(it.id, [])]


class ReferenceBuilder(Protocol):
    """The interface of a reference method."""

    name: str
    law: str  # exact | matched | model
    description: str

    def accepts(self, items: Sequence[Item], data_format: str) -> bool:
        """True when this builder is the natural one for `items` (what `reference.method=auto` asks)."""
        ...

    def build(self, items: Sequence[Item], m: int, ctx: BuildContext) -> ReferenceSet:
        """Up to m reference draws per item; an item with fewer gets a rejection naming why."""
        ...


_BUILDERS: dict[str, ReferenceBuilder] = {}


def register_reference_builder(builder: ReferenceBuilder) -> ReferenceBuilder:
    """Add a builder under its `name` (a second registration of a name replaces the first)."""
    if builder.law not in LAWS:
        raise ValueError(f"reference builder {builder.name}: law must be one of {LAWS}, not {builder.law!r}")
    _BUILDERS[builder.name] = builder
    return builder


def available_reference_methods() -> list[str]:
    """Registered method names, in `auto`'s order, plus ``auto`` and ``none``."""
    return ["auto", *_BUILDERS, "none"]


def get_reference_builder(name: str) -> ReferenceBuilder:
    """The builder registered as `name` (ValueError listing the known ones otherwise)."""
    if name not in _BUILDERS:
        raise ValueError(f"reference.method must be one of {', '.join(available_reference_methods())}, not {name!r}")
    return _BUILDERS[name]


def resolve_method(method: str, items: Sequence[Item], data_format: str = "items") -> str:
    """`method`, or for ``auto`` the first registered builder that accepts the items."""
    if method in ("none",):
        return method
    if method != "auto":
        get_reference_builder(method)
        return method
    for name, b in _BUILDERS.items():
        if b.accepts(items, data_format):
            return name
    raise ValueError("reference.method=auto: no builder accepts these items")


def build_references(items: Sequence[Item], method: str, m: int, ctx: BuildContext,
                     progress: Callable[[Sequence[Item], str], Any] | None = None) -> ReferenceSet:
    """m reference draws per item by `method` (resolved with `resolve_method` first), normalised.

    Draws are renumbered per item (``<id>::ref<j>``, metadata original_id, draw, distinct_draws, method and
    law); a draw whose question repeats the original's or an earlier draw's is dropped (the builder's
    rejection list says so). The report gains ``method``, ``law``, ``m`` and the per-feature exchangeability
    check of `zcp.benchmarks.references.shift.feature_shift`.
    """
    from zcp.benchmarks.references.shift import feature_shift

    if m < 1:
        raise ValueError(f"reference.m must be >= 1, got {m}")
    builder = get_reference_builder(method)
    out = builder.build(items, m, ctx)
    rejections = list(out.rejections)
    refs: dict[str, list[Item]] = {}
    by_id = {it.id: it for it in items}
    for oid, draws in out.refs.items():
        orig = by_id.get(oid)
        if orig is None:
            continue
        seen = {" ".join(orig.question.split())}
        kept: list[Item] = []
        for r in draws:
            key = " ".join(r.question.split())
            if key in seen:
                continue
            seen.add(key)
            kept.append(r)
        if len(kept) < len(draws):
            rejections.append({"id": oid, "row": orig.metadata.get("row"), "kept": len(kept),
                               "reason": f"{len(draws) - len(kept)} draw(s) repeated the original or an earlier draw"})
        for j, r in enumerate(kept):
            meta = {**r.metadata, "original_id": oid, "draw": j, "distinct_draws": len(kept),
                    "reference_method": method, "reference_law": builder.law}
            kept[j] = Item(id=f"{oid}::ref{j}", question=r.question, answer=r.answer, solution=r.solution,
                           metadata=meta)
        if kept:
            refs[oid] = kept
    report = {"method": method, "law": builder.law, "m": m, **out.report}
    report["exchangeability"] = feature_shift(items, refs)
    return ReferenceSet(refs=refs, rejections=rejections, verdicts=out.verdicts, report=report)


def reference_draws(items: Sequence[Item], m: int, seed: int = 0, method: str = "auto", **context: Any
                    ) -> dict[str, list[Item]]:
    """m reference draws per item (original id -> draws) by `method` with a `BuildContext(seed=seed, **context)`:
    the one-call form of `build_references` for notebooks and tests (no exclusions unless given)."""
    ctx = BuildContext(seed=seed, **context)
    return build_references(items, resolve_method(method, items), m, ctx).refs
