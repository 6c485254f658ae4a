"""The paraphraser interface, its registry, and the template paraphraser for generated word problems.

Every paraphraser proposes candidate rewrites; the base class validates each candidate
(`zcp.benchmarks.paraphrase.validate.check_variant`: same numbers, same answer, different text), keeps the first k
valid ones, retries for more when some are rejected, and records every rejection with its reason in
`self.rejections` (the build report counts them). Accepted variants are Items with id
``f"{orig_id}::para{j}"`` and metadata ``original_id, variant, rougeL, bleu, paraphraser``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zcp.benchmarks.paraphrase.validate import check_variant, numeric_values
from zcp.core.items import Item


@dataclass(frozen=True)
class Candidate:
    """A proposed rewrite: new question text, and optionally a matching solution and answer."""

    question: str
    solution: str | None = None
    answer: str | None = None
    note: str | None = None  # what the paraphraser did (for inspection)
    error: str | None = None  # set when the proposal is unusable (e.g. unparseable model output)


class Paraphraser(ABC):
    """Produces k validated surface variants of an item (same numbers, same answer, different text)."""

    name: str = "base"

    def __init__(self, max_rounds: int = 3, max_rouge_l: float | None = None) -> None:
        self.max_rounds = max_rounds
        self.max_rouge_l = max_rouge_l
        self.rejections: list[dict[str, Any]] = []
        self.counts: Counter = Counter()

    @abstractmethod
    def propose(self, item: Item, n: int, seed: int, round_: int) -> list[Candidate]:
        """Up to `n` candidate rewrites of `item` for attempt round `round_` (deterministic in its inputs)."""

    def paraphrase(self, item: Item, k: int = 6, seed: int = 0) -> list[Item]:
        """`k` validated variants of `item` (fewer only if every round ran out; the shortfall is recorded)."""
        accepted: list[tuple[Candidate, float, float]] = []
        for round_ in range(self.max_rounds):
            need = k - len(accepted)
            if need <= 0:
                break
            for cand in self.propose(item, need, seed, round_):
                if len(accepted) >= k:
                    break
                self.counts["proposed"] += 1
                if cand.error:
                    self.counts["rejected"] += 1
                    self.rejections.append({"original_id": item.id, "paraphraser": self.name, "round": round_,
                                            "reason": cand.error, "text": cand.question or None})
                    continue
                check = check_variant(item.question, cand.question, original_answer=item.answer,
                                      answer=cand.answer, max_rouge_l=self.max_rouge_l,
                                      others=tuple(c.question for c, _, _ in accepted))
                if check.ok and cand.solution is not None and item.solution is not None \
                        and numeric_values(cand.solution) != numeric_values(item.solution):
                    check = type(check)(False, "numbers of the solution changed", check.rouge_l, check.bleu)
                if not check.ok:
                    self.counts["rejected"] += 1
                    self.rejections.append({"original_id": item.id, "paraphraser": self.name, "round": round_,
                                            "reason": check.reason, "text": cand.question})
                    continue
                accepted.append((cand, check.rouge_l, check.bleu))
        if len(accepted) < k:
            self.counts["short"] += 1
            self.rejections.append({"original_id": item.id, "paraphraser": self.name, "round": None,
                                    "reason": f"only {len(accepted)} of {k} valid variants", "text": None})
        self.counts["accepted"] += len(accepted)
        return [self._item(item, j, cand, rouge_l, bleu) for j, (cand, rouge_l, bleu) in enumerate(accepted)]

    def _item(self, item: Item, j: int, cand: Candidate, rouge_l: float, bleu: float) -> Item:
        meta = {"original_id": item.id, "variant": j, "rougeL": round(rouge_l, 4), "bleu": round(bleu, 2),
                "paraphraser": self.name}
        for key in ("source", "family", "stage"):  # stratification keys travel with the variant
            if key in item.metadata:
                meta[key] = item.metadata[key]
        return Item(id=f"{item.id}::para{j}", question=cand.question, answer=item.answer,
                    solution=cand.solution if cand.solution is not None else item.solution, metadata=meta)

    def report(self) -> dict[str, Any]:
        """Counts (proposed, accepted, rejected, items short of k) and rejection reasons, for the build report."""
        reasons = Counter(r["reason"].split(":")[0] for r in self.rejections if r["reason"])
        return {"paraphraser": self.name, **{k: int(v) for k, v in self.counts.items()},
                "rejection_reasons": dict(reasons)}


_REGISTRY: dict[str, Callable[..., Paraphraser]] = {}


def register_paraphraser(name: str) -> Callable[[type[Paraphraser]], type[Paraphraser]]:
    """Class decorator: make a paraphraser available to `get_paraphraser(name)`."""
    def deco(cls: type[Paraphraser]) -> type[Paraphraser]:
        _REGISTRY[name] = cls
        cls.name = name
        return cls
    return deco


def paraphraser_class(name: str) -> Callable[..., Paraphraser] | None:
    """The class registered as `name` (its constructor's keyword arguments are the paraphraser's options), or None.

    The built-in ones are registered by importing the package (`zcp.benchmarks.paraphrase`), as `get_paraphraser`."""
    return _REGISTRY.get(name)


def paraphraser_names() -> list[str]:
    """The registered paraphrasers' names, sorted."""
    return sorted(_REGISTRY)


def get_paraphraser(name: str, **kwargs: Any) -> Paraphraser:
    """A paraphraser by registry name (template, rules, llm, formula), constructed with `kwargs`.

    The built-in ones are registered by importing the package (`zcp.benchmarks.paraphrase`), which any import
    of this module does first."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown paraphraser {name!r} (known: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[name](**kwargs)


@register_paraphraser("template")
class TemplateParaphraser(Paraphraser):
    """Generated word problems: the same program and numbers under other surface templates.

    Delegates to `zcp.benchmarks.wordproblems.reword_word_problem`, whose templates are disjoint by
    construction, so there is nothing to retry: one round.
    """

    def __init__(self, max_rouge_l: float | None = None) -> None:
        super().__init__(max_rounds=1, max_rouge_l=max_rouge_l)

    def propose(self, item: Item, n: int, seed: int, round_: int) -> list[Candidate]:
        """Up to `n` rewordings from the item family's templates (as many as exist)."""
        from zcp.benchmarks import wordproblems  # imported lazily: optional for real-benchmark paraphrasing

        for n_try in range(n, 0, -1):  # a family may have fewer rewording templates than asked for
            try:
                variants = wordproblems.reword_word_problem(item, n_try, seed)
            except ValueError:
                continue
            return [Candidate(v.question, v.solution, v.answer, note="template") for v in variants]
        return []
