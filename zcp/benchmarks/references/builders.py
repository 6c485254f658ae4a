"""The built-in reference builders, registered in `reference.method=auto`'s order.

- ``gsm8k`` (matched): the solution's calculator annotations re-executed on new numbers (`zcp.benchmarks.references.gsm8k`);
- ``arithmark`` (exact): fresh operands from the spec's law (`zcp.benchmarks.references.exact.ExactArithMark`);
- ``wordproblem`` (exact): fresh values from the generator's law (`zcp.benchmarks.references.exact.ExactWordProblems`);
- ``llm`` (model): a generator model proposes, judges solve (`zcp.benchmarks.references.llm_pipeline`); anything else;
- ``wordproblem_matched``, ``arithmark_matched`` (matched, never chosen by auto): the near perturbations that keep
  the original's numbers' size and structure (`zcp.benchmarks.references.wordproblem_matched`,
  `zcp.benchmarks.references.arithmark_matched`), for hand-made items that are not draws of a generator, and
  for comparison with the exact law.

Matched builders apply `BuildContext.special_cases` to items no valid reference can match (the generators'
`special_case_reasons`): ``drop`` leaves the item out with the reasons (its verdict would compare a special
value against ordinary ones), ``keep`` builds its best-matching draws and flags them (`special_case` in the
draws' metadata and the report).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from zcp.benchmarks.references.exact import ExactArithMark, ExactWordProblems
from zcp.benchmarks.references.registry import BuildContext, ReferenceSet, register_reference_builder
from zcp.core.io import stable_hash
from zcp.core.items import Item


def draw_seed(seed: int, j: int) -> int:
    """The seed of draw j of a per-draw perturbation (stable across processes)."""
    return int(stable_hash(f"reference-draw|{seed}|{j}"), 16) % (2**31)


def progress(items: Sequence[Item], desc: str) -> Any:
    """A progress bar over a long per-item loop (GSM8K train: 7,473 items), on stderr."""
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit="item", mininterval=2.0, disable=len(items) < 50)


def _special_split(items: Sequence[Item], ctx: BuildContext, reasons_of: Callable[[Item], list[str]]
                   ) -> tuple[list[Item], list[dict[str, Any]], dict[str, list[str]]]:
    """(items to build, rejections of dropped special cases, reasons of kept special cases) under the policy."""
    build, rejected, kept = [], [], {}
    for it in items:
        try:
            why = reasons_of(it)
        except (ValueError, KeyError):
            why = []
        if why and ctx.special_cases == "drop":
            rejected.append({"id": it.id, "row": it.metadata.get("row"), "kept": 0,
                             "reason": "special case (reference.special_cases=drop): " + "; ".join(why)})
            continue
        if why:
            kept[it.id] = why
        build.append(it)
    return build, rejected, kept


class _PerDrawMatched:
    """A matched builder from a per-draw perturbation function (one seed per draw, repeats redrawn)."""

    law = "matched"

    def __init__(self, name: str, description: str, perturb: Callable[[Item, int], Item],
                 reasons_of: Callable[[Item], list[str]]) -> None:
        self.name, self.description, self._perturb, self._reasons = name, description, perturb, reasons_of

    def accepts(self, items: Sequence[Item], data_format: str) -> bool:
        return False

    def build(self, items: Sequence[Item], m: int, ctx: BuildContext) -> ReferenceSet:
        todo, rejections, special = _special_split(items, ctx, self._reasons)
        refs: dict[str, list[Item]] = {}
        for it in progress(todo, f"reference ({self.name})"):
            got: list[Item] = []
            reasons = []
            for j in range(4 * m):  # a repeated draw is replaced by a further one (draws stay near the original)
                if len(got) >= m:
                    break
                try:
                    ref = self._perturb(it, draw_seed(ctx.seed, j))
                except (ValueError, KeyError) as e:
                    reasons.append(str(e))
                    continue
                if any(r.question == ref.question for r in got) or ref.question == it.question:
                    reasons.append("a draw repeated an earlier draw")
                    continue
                if it.id in special:
                    ref.metadata = {**ref.metadata, "special_case": special[it.id]}
                got.append(ref)
            if got:
                refs[it.id] = got
            if len(got) < m:
                rejections.append({"id": it.id, "row": it.metadata.get("row"), "kept": len(got),
                                   "reason": f"only {len(got)} of {m} draws: {'; '.join(sorted(set(reasons)))}"})
        return ReferenceSet(refs=refs, rejections=rejections,
                            report={"special_cases": {"policy": ctx.special_cases, "kept": len(special),
                                                      "dropped": len(items) - len(todo)}})


def _perturb_wp(item: Item, seed: int) -> Item:
    from zcp.benchmarks.references.wordproblem_matched import perturb_word_problem

    return perturb_word_problem(item, seed)


def _reasons_wp(item: Item) -> list[str]:
    from zcp.benchmarks.references.wordproblem_matched import special_case_reasons

    return special_case_reasons(item)


def _perturb_am(item: Item, seed: int) -> Item:
    from zcp.benchmarks.arithmark import arithmark_to_item
    from zcp.benchmarks.references.arithmark_matched import perturb_arithmark

    record = {k: v for k, v in item.metadata.items() if k not in ("source", "source_file", "row")}
    return arithmark_to_item(perturb_arithmark(record, seed))


def _reasons_am(item: Item) -> list[str]:
    from zcp.benchmarks.references.arithmark_matched import special_case_reasons

    return special_case_reasons(item)


class GSM8KReferences:
    """`reference.method=gsm8k`: the calculator annotations re-executed on new numbers, features matched.

    Each draw keeps the answer's leading digit, digits, sign and roundness and the question's round numbers;
    answers whose leading digit must change (one-digit, one significant digit, or fixed by the program) get new
    digits whose distribution matches the originals' over the benchmark, and what no item can keep alone
    (an answer equal to or starting like a question number) is balanced over the benchmark
    (`zcp.benchmarks.references.gsm8k.build_gsm8k_references`). Special cases (`zcp.benchmarks.references.gsm8k.special_case_reasons`
    by rule, and what the draws show) follow `BuildContext.special_cases` as for `_PerDrawMatched`: drop (a
    rejection naming the reasons) or keep (draws flagged ``special_case``). The report counts both kinds.
    """

    name = "gsm8k"
    law = "matched"
    description = "the solution's own arithmetic re-executed on new numbers, features matched"

    def accepts(self, items: Sequence[Item], data_format: str) -> bool:
        return data_format == "gsm8k"

    def build(self, items: Sequence[Item], m: int, ctx: BuildContext) -> ReferenceSet:
        from zcp.benchmarks.references.gsm8k import build_gsm8k_references, special_case_reasons

        todo, rejections, special = _special_split(items, ctx, special_case_reasons)
        refs, more, found = build_gsm8k_references(todo, m, ctx.seed, ctx.special_cases, special, progress)
        by_draws = found["found_by_draws"]
        report = {"special_cases": {"policy": ctx.special_cases, "kept": len(special) + by_draws["kept"],
                                    "dropped": len(items) - len(todo) + by_draws["dropped"],
                                    "by_rule": {"kept": len(special), "dropped": len(items) - len(todo)},
                                    "found_by_draws": by_draws},
                  "lead_transport": found["lead_transport"], "structure_balance": found["structure_balance"]}
        return ReferenceSet(refs=refs, rejections=[*rejections, *more], report=report)


class LLMReferences:
    """`reference.method=llm`: a generator model proposes the perturbed problem, independent judges must agree."""

    name = "llm"
    law = "model"
    description = "generator model + judges (items without a program)"

    def accepts(self, items: Sequence[Item], data_format: str) -> bool:
        return True

    def build(self, items: Sequence[Item], m: int, ctx: BuildContext) -> ReferenceSet:
        from zcp.benchmarks.references.llm_pipeline import LLMReferencePipeline

        backends = ctx.backends or _llm_backends(ctx.options)
        opts = {k: v for k, v in dict(ctx.options.get("pipeline") or {}).items() if v is not None}
        pipe = LLMReferencePipeline(backends["generator"], backends["judges"], **opts)
        rows, verdicts = pipe.run(list(items), m=m, seed=ctx.seed)
        refs: dict[str, list[Item]] = {}
        for r in rows:
            refs.setdefault(str(r.metadata["original_id"]), []).append(r)
        kept = Counter(r.metadata["original_id"] for r in rows)
        rejections = []
        for it in items:
            if kept[it.id] < m:
                last = [v["reason"] for v in verdicts if v["original_id"] == it.id and not v["accepted"]]
                rejections.append({"id": it.id, "row": it.metadata.get("row"), "kept": kept[it.id],
                                   "reason": f"only {kept[it.id]} of {m} draws accepted"
                                             + (f" (last: {last[-1]})" if last else "")})
        return ReferenceSet(refs=refs, rejections=rejections, verdicts=verdicts)


def _llm_backends(opts: Any) -> dict[str, Any]:
    from zcp.backends.registry import build_backend

    gen_cfg, judge_cfgs = opts.get("generator"), list(opts.get("judges") or [])
    if gen_cfg is None or gen_cfg.get("path") in (None, "", "???") or not judge_cfgs:  # ???: required, not given
        raise ValueError("reference=llm needs reference.generator.path and at least one reference.judges[*].path "
                         "(see conf/reference/llm.yaml)")
    return {"generator": build_backend(gen_cfg), "judges": [build_backend(j) for j in judge_cfgs]}


for _builder in (
    GSM8KReferences(),
    ExactArithMark(),
    ExactWordProblems(),
    LLMReferences(),
    _PerDrawMatched("wordproblem_matched", "near perturbation keeping the numbers' size and structure",
                    _perturb_wp, _reasons_wp),
    _PerDrawMatched("arithmark_matched", "near perturbation keeping the operands' size and structure",
                    _perturb_am, _reasons_am),
):
    register_reference_builder(_builder)
