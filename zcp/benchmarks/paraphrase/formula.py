"""The `formula` paraphraser: TREAT's equivalence-preserving formula rewrites of ArithMark items.

An ArithMark item ("EXPR =", answer, options) gets k variants whose expression text differs from the
original's and whose value under ArithMark's semantics (strictly left to right, exact fractions, the
answer rounded to 4 decimals) is the original answer: the transforms of `zcp.benchmarks.references.formula`
(commute, reorder, neg_add, recip, slack, parenthesize), singly and then in sequences of distinct ones
(`rewrite_plans`), in an order seeded by (seed, item id).

Grammar decision. The spec's expressions are flat, and most rewrites cannot stay flat under
left-to-right semantics: "a * b + c" commuted is "c + (a * b)"; "c + a * b" would be (c + a) * b. So
rather than keep only the few flat rewrites (first-step commute, reorder, neg_add, "E + r - r"), ArithMark's
grammar is extended (`zcp.benchmarks.arithmark.parse_grouped`): a parenthesised group is evaluated first, left
to right inside; a flat expression keeps exactly its old parse and value. Variant records are read by
`load_arithmark(..., allow_groups=True)` (a benchmark file stays flat by default); `n_operands` counts a
variant's literals, `stage` stays its original's stratum. `options=["..."]` restricts the transforms, to
the flat-preserving ones for example.

Every candidate is validated twice, independently, before it is accepted: symbolically
(`zcp.benchmarks.references.formula.verify_equivalent`, sympy Rationals: the same exact value as the original) and
by ArithMark's own loader and evaluator (`validate_record(..., allow_groups=True)`: parseable, literals in
the spec's range, no division by zero, the stated answer is its value; and `evaluate_grouped` gives the
original's exact value). Rejections carry a reason (not parseable by the ArithMark loader, rejected by
it (a literal out of range, a division by zero), not equivalent (sympy), value differs under ArithMark's
evaluator, identical to the original, identical to another variant); a plan whose transform does not apply is counted (`not_applicable`), not listed. `report()` is
the base class's, so build_report.json shows the counts and reasons like every paraphraser's.

Variants keep the original's answer, options and answer index (the value is the same), and carry the
variant record's fields in their metadata (as `arithmark_to_item` does), with `original_id` and the
`transforms` applied.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from zcp.benchmarks.paraphrase.base import Candidate, Paraphraser, register_paraphraser
from zcp.core.io import stable_hash
from zcp.core.items import Item
from zcp.errors import DataError

# the ArithMark record keys an item's metadata must hold (`arithmark_to_item` puts the whole record there)
_CONTENT_KEYS = ("expression", "stage", "options", "answer_index", "answer")


def arithmark_record(item: Item) -> dict[str, Any]:
    """The ArithMark record behind an item (`arithmark_to_item`'s metadata, id = the item's); DataError
    naming the item when its metadata holds none."""
    from zcp.benchmarks.arithmark import RECORD_KEYS, grouped_operands

    meta = item.metadata
    missing = [k for k in _CONTENT_KEYS if k not in meta]
    if missing:
        raise DataError(f"paraphraser formula rewrites ArithMark items: item {item.id!r} has no {missing[0]!r} in "
                        "its metadata (build the data with data.format=arithmark)", field=missing[0])
    record = {k: meta[k] for k in RECORD_KEYS if k in meta}
    record["id"] = item.id
    if "n_operands" not in record:
        try:
            record["n_operands"] = len(grouped_operands(str(meta["expression"])))
        except ValueError as e:
            raise DataError(f"item {item.id!r}: {e}", field="expression") from e
    return {k: record[k] for k in RECORD_KEYS}


@register_paraphraser("formula")
class FormulaParaphraser(Paraphraser):
    """k sympy- and ArithMark-verified formula rewrites of an ArithMark item (module docstring)."""

    def __init__(self, transforms: Sequence[str] | None = None, max_steps: int = 2) -> None:
        from zcp.benchmarks.references.formula import TRANSFORMS

        super().__init__(max_rounds=1)
        names = list(TRANSFORMS) if transforms is None else [str(t) for t in transforms]
        unknown = [t for t in names if t not in TRANSFORMS]
        if unknown or not names:
            raise ValueError(f"paraphrase.options.transforms: unknown transform {unknown[0]!r} (known: "
                             f"{', '.join(TRANSFORMS)})" if unknown else "paraphrase.options.transforms is empty")
        if max_steps < 1:
            raise ValueError(f"paraphrase.options.max_steps must be >= 1, got {max_steps}")
        self.transforms, self.max_steps = names, int(max_steps)

    def propose(self, item: Item, n: int, seed: int, round_: int) -> list[Candidate]:
        """Up to `n` candidate rewrites, unverified (`paraphrase` validates them; this is for inspection)."""
        expr = str(arithmark_record(item)["expression"]).strip()
        out = []
        for plan, rng in self._plans(item, seed):
            text = self._apply(expr, plan, rng)
            if text is not None:
                out.append(Candidate(f"{text} =", note="+".join(plan)))
                if len(out) >= n:
                    break
        return out

    def _plans(self, item: Item, seed: int) -> list[tuple[tuple[str, ...], random.Random]]:
        """The seeded order of transform plans, each with its own generator (stable across processes)."""
        from zcp.benchmarks.references.formula import rewrite_plans

        order = random.Random(int(stable_hash(f"formula|{seed}|{item.id}"), 16))
        plans = rewrite_plans(order, self.transforms, self.max_steps)
        return [(plan, random.Random(int(stable_hash(f"formula|{seed}|{item.id}|{i}"), 16)))
                for i, plan in enumerate(plans)]

    @staticmethod
    def _apply(expr: str, plan: Sequence[str], rng: random.Random) -> str | None:
        """The plan's raw rewrite of `expr`; None when a step does not apply or changes nothing."""
        from zcp.benchmarks.references.formula import propose_rewrite

        text = expr
        for name in plan:
            new = propose_rewrite(text, name, rng)
            if new is None or new == text:
                return None
            text = new
        return text

    def check(self, record: Mapping[str, Any], text: str, others: Sequence[str] = ()) -> str | None:
        """Why the rewrite `text` of `record`'s expression is rejected, or None when it is a valid variant."""
        from zcp.benchmarks.arithmark import VARIANT_KEYS, evaluate_grouped, grouped_operands, validate_record
        from zcp.benchmarks.references.formula import verify_equivalent

        expr = str(record["expression"]).strip()
        if text == expr:
            return "identical to the original"
        if text in others:
            return "identical to another variant"
        try:
            n_operands = len(grouped_operands(text))
        except ValueError as e:
            return f"not parseable by the ArithMark loader: {e}"
        if not verify_equivalent(expr, text):
            return f"not equivalent (sympy): {text!r} vs {expr!r}"
        variant = {**record, "id": f"{record['id']}::check", "expression": text, "n_operands": n_operands,
                   "original_id": record["id"], "transforms": []}
        try:  # the loader's own checks: literals in range, no division by zero, the answer is the value
            validate_record(variant, extra_keys=VARIANT_KEYS, allow_groups=True)
        except DataError as e:
            if e.field == "answer":
                return f"value differs under ArithMark's evaluator: {e}"
            return f"rejected by the ArithMark loader: {e}"
        if evaluate_grouped(text) != evaluate_grouped(expr):
            return f"value differs under ArithMark's evaluator: {text!r} vs {expr!r} (exact)"
        return None

    def paraphrase(self, item: Item, k: int = 6, seed: int = 0) -> list[Item]:
        """`k` validated variants of `item` (fewer when its expression admits fewer; the shortfall is recorded)."""
        from zcp.benchmarks.arithmark import evaluate_grouped, exact_value, round_result

        record = arithmark_record(item)
        expr = str(record["expression"]).strip()
        try:
            value = evaluate_grouped(expr)
        except (ValueError, ZeroDivisionError) as e:
            raise DataError(f"item {item.id!r}: {e}", field="expression") from e
        if round_result(value) != exact_value(record["answer"]):
            raise DataError(f"item {item.id!r}: answer {record['answer']!r} is not the value of {expr!r}",
                            field="answer")
        accepted: list[tuple[str, tuple[str, ...]]] = []
        for plan, rng in self._plans(item, seed):
            if len(accepted) >= k:
                break
            text = self._apply(expr, plan, rng)
            if text is None:
                self.counts["not_applicable"] += 1
                continue
            self.counts["proposed"] += 1
            reason = self.check(record, text, [t for t, _ in accepted])
            if reason is not None:
                self.counts["rejected"] += 1
                self.rejections.append({"original_id": item.id, "paraphraser": self.name, "round": 0,
                                        "reason": reason, "text": f"{text} =", "transforms": list(plan)})
                continue
            accepted.append((text, plan))
        self.counts["items"] += 1
        if len(accepted) < k:
            self.counts["short"] += 1
            self.rejections.append({"original_id": item.id, "paraphraser": self.name, "round": None,
                                    "reason": f"only {len(accepted)} of {k} valid variants", "text": None})
        else:
            self.counts["items_with_k"] += 1
        self.counts["accepted"] += len(accepted)
        return [self._variant(item, record, j, text, plan) for j, (text, plan) in enumerate(accepted)]

    def _variant(self, item: Item, record: Mapping[str, Any], j: int, text: str, plan: Sequence[str]) -> Item:
        from zcp.benchmarks.arithmark import arithmark_question, grouped_operands
        from zcp.benchmarks.paraphrase.validate import similarity

        vid = f"{item.id}::para{j}"
        rec = {**record, "id": vid, "expression": text, "n_operands": len(grouped_operands(text)),
               "original_id": item.id, "transforms": list(plan)}
        question = arithmark_question(rec)
        rouge_l, bleu = similarity(item.question, question)
        meta = {"source": item.metadata.get("source", "arithmark"), **rec, "variant": j,
                "rougeL": round(rouge_l, 4), "bleu": round(bleu, 2), "paraphraser": self.name}
        return Item(id=vid, question=question, answer=item.answer, solution=item.solution, metadata=meta)

