"""Trap controls (`trap`, MathTrap: Zhao et al. 2024): does the model answer the original's number on a trap?

Each item gets up to `k` trap variants (`zcp.benchmarks.references.traps.trap_variants`: a condition made contradictory,
or a quantity the answer needs deleted; built by program and validated, so the item's answer is no longer
the answer). The model writes its full chain of thought on every trap (greedy, the plain question as the
user turn, up to `max_new_tokens`, all traps of all items in one batched `generate` call), and each output
is classified (`classify_output`):

- ``answer``: the last ``\\boxed{}`` holds the item's own answer (answer equivalence, `zcp.core.answers`);
- ``abstain``: the model says the problem has no solution: an empty box, a box holding one of
  `ABSTAIN_BOXES` ("none", "n/a", "\\emptyset", ...), or the box (or, without a box, the text) containing
  one of `ABSTAIN_PHRASES` ("no solution", "cannot be determined", "not possible", "impossible", ...);
- ``other``: a parseable boxed answer that is not the item's (the model computed something else);
- ``malformed``: no box (and no abstention phrase), or a box whose content does not parse.

Item score = the share of its traps answered with the item's own answer (higher = more contaminated): a
model that memorised the item pattern-matches the near-identical trap text and answers the memorised
number; a model that reasons notices the trap or computes something else. Items with no trap (another
benchmark kind, a GSM8K chain that cannot be parsed) get no score, with the reason.

The detector is kind ``score``: the baselines job gives it the originals and their reference items in one
call, and every reference item gets its own traps (the same construction on the reference item) and its
own score, the rate of THAT reference's answer on its traps. Benchmark decision: the reference-set test
(`zcp.validate.detectors.base.reference_set_decision`: the one-sided within-item permutation test of
`zcp.probe.stats.paired_test`) of the originals' trap rates against their references'. A model that answers
every trap with the item's answer because it reads the numbers poorly does so on the references too, and
is not flagged; only an original-specific answer is. The summary reports, apart and for originals and
references separately (as TREAT reports abstentions and malformed outputs apart from wrong ones), the
rate of each class over all traps, and the share by trap kind of the item's answer.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from zcp.backends.base import Backend, GenerationRequest, Prompt
from zcp.benchmarks.references.traps import TRAP_KINDS, build_traps, trap_support
from zcp.core.answers import answers_equal, extract_boxed, is_parsable
from zcp.core.items import Item
from zcp.validate.detectors.base import (
    Detector,
    DetectorContext,
    DetectorSpec,
    reference_set_decision,
    register_detector,
)
from zcp.validate.detectors.reconstruction import token_budget

CLASSES = ("answer", "abstain", "other", "malformed")
# Phrases that say the problem has no solution (matched case-insensitively, in the box, or in the text
# when there is no box). A model that notices a trap says one of these instead of a number.
ABSTAIN_PHRASES = (
    "no solution", "no valid solution", "no answer", "no valid answer", "cannot be determined",
    "can't be determined", "cannot determine", "can not be determined", "not determined", "undetermined",
    "cannot be solved", "can't be solved", "not solvable", "unsolvable", "unanswerable", "not possible",
    "impossible", "not enough information", "insufficient information", "missing information",
    "contradiction", "contradictory", "inconsistent", "does not exist", "undefined", "not defined",
)
# Whole box contents that abstain (after \text{} is unwrapped, lower case, spaces and a final period stripped).
ABSTAIN_BOXES = ("", "none", "n/a", "na", "\\emptyset", "\\varnothing", "∅", "\\text{none}", "nan", "?", "-", "—")
_TEXT_WRAP = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")


def _says_abstain(text: str) -> bool:
    low = " ".join(text.lower().replace("’", "'").split())
    return any(p in low for p in ABSTAIN_PHRASES)


def classify_output(output: str, answer: str) -> tuple[str, str | None]:
    """(class, the boxed content or None) of a full-CoT output on a trap of an item whose answer is `answer`.

    Classes (see the module docstring): ``answer``, ``abstain``, ``other``, ``malformed``. The last box
    counts (`zcp.core.answers.extract_boxed`); an abstention in the box wins over its number ("\\boxed{no
    solution}"), and without a box only an abstention phrase in the text saves the output from ``malformed``.
    """
    box = extract_boxed(output)
    if box is None:
        return ("abstain" if _says_abstain(output) else "malformed"), None
    bare = _TEXT_WRAP.sub(lambda m: m.group(1), box).strip().rstrip(".").strip().lower()
    if bare in ABSTAIN_BOXES or _says_abstain(bare):
        return "abstain", box
    if answers_equal(box, answer):
        return "answer", box
    return ("other" if is_parsable(box) else "malformed"), box


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, not {value!r}")
    return int(value)


@register_detector(DetectorSpec("trap", "Trap (MathTrap)", "score", frozenset({"generation"}), "trap",
                                cite="Zhao et al. 2024 (MathTrap); TREAT's separate abstention/malformed counts"))
class TrapControls(Detector):
    """Score = the rate of the item's own answer in the model's greedy full-CoT answers on its k traps."""

    def __init__(self, k: int = 3, max_new_tokens: int = 512) -> None:
        self.k = _positive_int("k (traps per item)", k)
        self.max_new_tokens = _positive_int("max_new_tokens", max_new_tokens)

    def skip_reason(self, ctx: DetectorContext, items: Sequence[Item] = ()) -> str | None:
        """Skipped when no item is of a kind traps are built for (word problems, GSM8K)."""
        if items and all(trap_support(it) is not None for it in items):
            return trap_support(items[0])
        return None

    def score_items(self, backend: Backend, items: Sequence[Item], ctx: DetectorContext) -> list[dict[str, Any]]:
        """Build every item's traps (seed ctx.seed), generate on all of them in one call, classify, score."""
        traps, reasons = build_traps(items, self.k, ctx.seed)
        flat = [(i, t) for i, ts in enumerate(traps) for t in ts]
        prompts = [Prompt(user=t.question) for _, t in flat]
        budget = token_budget(backend, prompts, self.max_new_tokens)
        gens = backend.generate([GenerationRequest(p, max_new_tokens=budget) for p in prompts]) if prompts else []
        per_item: list[list[tuple[Item, str, str | None]]] = [[] for _ in items]
        for (i, t), out in zip(flat, gens, strict=True):
            cls, box = classify_output(out, items[i].answer)
            per_item[i].append((t, cls, box))
        records: list[dict[str, Any]] = []
        for it, rows, why in zip(items, per_item, reasons, strict=True):
            if not rows:
                records.append({"id": it.id, "score": None, "n_traps": 0, "reason": why})
                continue
            counts = Counter(cls for _, cls, _ in rows)
            kinds = Counter(t.metadata["trap_kind"] for t, _, _ in rows)
            hits = Counter(t.metadata["trap_kind"] for t, cls, _ in rows if cls == "answer")
            records.append({
                "id": it.id, "score": counts["answer"] / len(rows), "n_traps": len(rows),
                "classes": {c: counts[c] for c in CLASSES},
                "kinds": {kd: kinds[kd] for kd in TRAP_KINDS if kinds[kd]},
                "answer_by_kind": {kd: hits[kd] for kd in TRAP_KINDS if kinds[kd]},
                "trap_ids": [t.id for t, _, _ in rows],
                "trap_classes": [cls for _, cls, _ in rows],
                "predictions": [box for _, _, box in rows],
            })
        return records

    def benchmark_decision(self, records: Sequence[dict[str, Any]], ctx: DetectorContext) -> dict[str, Any]:
        """The reference-set test on the trap rates, plus each class's rate over all traps, for the originals
        and for the references apart (``originals_abstain``, ``references_malformed``, ...), the number of
        traps and of items without one, and the originals' rate of their own answer per trap kind."""
        dec = reference_set_decision(records, ctx)
        dec["rule"] = f"rate of the item's own answer on its traps (up to {self.k} per item): {dec['rule']}"
        for group, rows in (("originals", [r for r in records if r.get("variant", "original") == "original"]),
                            ("references", [r for r in records if r.get("variant", "original") != "original"])):
            if not rows:
                continue
            scored = [r for r in rows if r.get("n_traps")]
            total = sum(int(r["n_traps"]) for r in scored)
            dec[f"{group}_traps"] = total
            dec[f"{group}_without_traps"] = len(rows) - len(scored)
            for c in CLASSES:
                n = sum(int(r["classes"][c]) for r in scored)
                dec[f"{group}_{c}"] = n / total if total else None
            if group == "originals":
                for kd in TRAP_KINDS:
                    n_kind = sum(int(r.get("kinds", {}).get(kd, 0)) for r in scored)
                    if n_kind:
                        hits = sum(int(r.get("answer_by_kind", {}).get(kd, 0)) for r in scored)
                        dec[f"originals_answer_on_{kd}"] = hits / n_kind
        return dec
