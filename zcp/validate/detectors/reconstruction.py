"""Reconstruction detectors: prefix reconstruction (`recon`) and guided instruction (`guided`).

Split of a question (`split_question`): by whitespace-separated words; the prefix is the first
floor(40% of the words) (at least one, and at least one word left), cut at the end of that word, so
prefix + remainder is exactly the question; the remainder starts with its whitespace.

`recon` (the ZCP paper's section 2; Carlini et al. 2023 style extraction): the model continues the raw
prefix (``Prompt(user=prefix, chat=False)``) with `n_samples` (16) sampled completions at `temperature`,
all items x samples in ONE batched `generate` call with one seed (the backend samples each row
independently). Each completion is cut at a newline and to the remainder's word count, and compared with
the true remainder by ROUGE-L F (`rouge-score`). Item score = max ROUGE-L over the samples; `pass` = some
completion starts with the normalised remainder (lower case, whitespace collapsed) — pass@16 exact
continuation. Benchmark statistic: the reference-set test on the max ROUGE-L (statistic = mean
difference), and the file's mean max ROUGE-L and pass@16 rate are recorded beside it.

`guided` (Golchin & Surdeanu 2023, "Time travel in LLMs"): the chat model completes the prefix under the
guided instruction, which names the dataset and split, and under the general instruction, which does not
(greedy, one batched call for both). Item score = ROUGE-L(guided) - ROUGE-L(general). Benchmark decision:
guided completions significantly closer to the true remainder — a one-sided paired sign-flip permutation
test of the per-item differences (`zcp.probe.stats.paired_test`, m = 1), p < alpha. (G&S used bootstrap
resampling; the sign-flip permutation test is exact in its Monte Carlo sense and is the project's test.)
Needs the dataset and split names: item metadata ``dataset_name``/``split_name``, else the config's
`data.dataset_name`/`data.split_name`; without them the detector is skipped with that reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from zcp.backends.base import Backend, GenerationRequest, Prompt
from zcp.core.items import Item
from zcp.validate.detectors.base import (
    Detector,
    DetectorContext,
    DetectorSpec,
    original_scores,
    reference_set_decision,
    register_detector,
)

GUIDED = ("Instruction: You are provided with the first piece of an instance from the {split} split of the "
          "{dataset} dataset. Finish the second piece of the instance as exactly appeared in the dataset. Only "
          "rely on the original form of the instance in the dataset to finish the second piece.\n\n"
          "First piece: {prefix}\n\nSecond piece:")
GENERAL = ("Instruction: Finish the second piece based on the first piece, such that these two pieces become a "
           "single instance.\n\nFirst piece: {prefix}\n\nSecond piece:")


def split_question(question: str, fraction: float = 0.4) -> tuple[str, str] | None:
    """(prefix, remainder) with the prefix = the first floor(fraction * words) words; None under 2 words."""
    spans = [m.span() for m in re.finditer(r"\S+", question)]
    if len(spans) < 2:
        return None
    cut = min(max(1, int(fraction * len(spans))), len(spans) - 1)
    end = spans[cut - 1][1]
    return question[:end], question[end:]


def normalise(text: str) -> str:
    """Lower case, whitespace collapsed, stripped (for exact-continuation matching)."""
    return " ".join(text.lower().split())


def _scorer() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)


def rouge_l(scorer: Any, prediction: str, target: str) -> float:
    """ROUGE-L F-measure of `prediction` against `target` (0 when either is empty)."""
    if not prediction.strip() or not target.strip():
        return 0.0
    return float(scorer.score(target, prediction)["rougeL"].fmeasure)


def token_budget(backend: Backend, prompts: Sequence[Prompt], max_new_tokens: int) -> int:
    """`max_new_tokens`, lowered so the longest prompt plus the budget fits the model's context (when the
    backend says its context length and can count prompt tokens); at least 1."""
    limit = backend.context_length
    if not limit or not backend.counts_tokens or not prompts:
        return max_new_tokens
    longest = max(backend.count_tokens(prompts)[0])
    return max(1, min(max_new_tokens, int(limit) - longest))


def cut_completion(text: str, n_words: int) -> str:
    """A completion up to its first newline, then to its first `n_words` words."""
    line = text.split("\n", 1)[0]
    return " ".join(line.split()[:n_words])


@register_detector(DetectorSpec("recon", "Prefix reconstruction", "score", frozenset({"generation"}),
                                "reconstruction", cite="ZCP paper sec. 2; Carlini et al. 2023"))
class PrefixReconstruction(Detector):
    """Score = max ROUGE-L of n sampled completions of the 40% prefix against the true remainder."""

    def __init__(self, prefix_fraction: float = 0.4, n_samples: int = 16, temperature: float = 1.0,
                 max_new_tokens: int = 96) -> None:
        if not 0.0 < float(prefix_fraction) < 1.0:
            raise ValueError(f"prefix_fraction must be in (0, 1), not {prefix_fraction!r}")
        if int(n_samples) < 1 or int(max_new_tokens) < 1 or float(temperature) < 0:
            raise ValueError("n_samples and max_new_tokens must be >= 1 and temperature >= 0")
        self.prefix_fraction = float(prefix_fraction)
        self.n_samples = int(n_samples)
        self.temperature = float(temperature)
        self.max_new_tokens = int(max_new_tokens)

    def score_items(self, backend: Backend, items: Sequence[Item], ctx: DetectorContext) -> list[dict[str, Any]]:
        """One generate call over items x samples; max ROUGE-L and pass@n per item."""
        splits = [split_question(it.question, self.prefix_fraction) for it in items]
        todo = [i for i, s in enumerate(splits) if s is not None]
        prompts = [Prompt(user=splits[i][0], chat=False) for i in todo]  # type: ignore[index]
        budget = token_budget(backend, prompts, self.max_new_tokens)
        reqs = [GenerationRequest(p, max_new_tokens=budget, stop=("\n",), temperature=self.temperature, seed=ctx.seed)
                for p in prompts for _ in range(self.n_samples)]
        gens = backend.generate(reqs) if reqs else []
        scorer = _scorer()
        out: list[dict[str, Any]] = [{"id": it.id, "score": None, "reason": "question under 2 words"} for it in items]
        for k, i in enumerate(todo):
            prefix, rest = splits[i]  # type: ignore[misc]
            n_words = len(rest.split())
            samples = gens[k * self.n_samples : (k + 1) * self.n_samples]
            cut = [cut_completion(g, n_words) for g in samples]
            scores = [rouge_l(scorer, c, rest) for c in cut]
            target = normalise(rest)
            hit = any(normalise(g).startswith(target) for g in samples)
            best = int(np.argmax(scores))
            out[i] = {"id": items[i].id, "score": float(scores[best]), "pass": bool(hit), "prefix": prefix,
                      "best_completion": cut[best], "mean_rouge_l": float(np.mean(scores))}
        return out

    def benchmark_decision(self, records: Sequence[dict[str, Any]], ctx: DetectorContext) -> dict[str, Any]:
        """Reference-set test on max ROUGE-L, plus the mean max ROUGE-L and the pass@n rate of the originals."""
        dec = reference_set_decision(records, ctx)
        orig = [r for r in records if r.get("variant", "original") == "original" and r.get("score") is not None]
        scores = original_scores(records)
        dec["mean_max_rouge_l"] = float(np.mean(scores)) if scores else None
        dec[f"pass_at_{self.n_samples}"] = float(np.mean([bool(r.get("pass")) for r in orig])) if orig else None
        return dec


def _meta(item: Item, key: str, default: str | None) -> str | None:
    v = item.metadata.get(key)
    return str(v) if v not in (None, "") else default


@register_detector(DetectorSpec("guided", "Guided instruction", "rule", frozenset({"metadata", "generation"}),
                                "reconstruction", cite="Golchin & Surdeanu 2023"))
class GuidedInstruction(Detector):
    """Score = ROUGE-L(guided completion) - ROUGE-L(general completion) against the true remainder."""

    def __init__(self, prefix_fraction: float = 0.4, max_new_tokens: int = 96) -> None:
        if not 0.0 < float(prefix_fraction) < 1.0:
            raise ValueError(f"prefix_fraction must be in (0, 1), not {prefix_fraction!r}")
        if int(max_new_tokens) < 1:
            raise ValueError("max_new_tokens must be >= 1")
        self.prefix_fraction = float(prefix_fraction)
        self.max_new_tokens = int(max_new_tokens)

    def skip_reason(self, ctx: DetectorContext, items: Sequence[Item] = ()) -> str | None:
        """Skipped when some item has neither its own nor the config's dataset and split names."""
        for it in items or [Item("", "", "")]:
            if not _meta(it, "dataset_name", ctx.dataset_name) or not _meta(it, "split_name", ctx.split_name):
                return ("no dataset/split metadata for the guided instruction (set data.dataset_name and "
                        "data.split_name, or dataset_name/split_name in item metadata)")
        return None

    def score_items(self, backend: Backend, items: Sequence[Item], ctx: DetectorContext) -> list[dict[str, Any]]:
        """Guided and general completions of every item in one greedy generate call."""
        splits = [split_question(it.question, self.prefix_fraction) for it in items]
        todo = [i for i, s in enumerate(splits) if s is not None]
        prompts = []
        for i in todo:
            prefix = splits[i][0]  # type: ignore[index]
            guided = GUIDED.format(split=_meta(items[i], "split_name", ctx.split_name),
                                   dataset=_meta(items[i], "dataset_name", ctx.dataset_name), prefix=prefix)
            prompts += [Prompt(user=guided), Prompt(user=GENERAL.format(prefix=prefix))]
        budget = token_budget(backend, prompts, self.max_new_tokens)
        gens = backend.generate([GenerationRequest(p, max_new_tokens=budget) for p in prompts]) if prompts else []
        scorer = _scorer()
        out: list[dict[str, Any]] = [{"id": it.id, "score": None, "reason": "question under 2 words"} for it in items]
        for k, i in enumerate(todo):
            rest = splits[i][1]  # type: ignore[index]
            n_words = len(rest.split())
            g, h = cut_completion(gens[2 * k].strip(), n_words), cut_completion(gens[2 * k + 1].strip(), n_words)
            rg, rh = rouge_l(scorer, g, rest), rouge_l(scorer, h, rest)
            out[i] = {"id": items[i].id, "score": rg - rh, "rouge_l_guided": rg, "rouge_l_general": rh,
                      "guided_completion": g, "general_completion": h}
        return out

    def benchmark_decision(self, records: Sequence[dict[str, Any]], ctx: DetectorContext) -> dict[str, Any]:
        """One-sided paired sign-flip permutation test: guided ROUGE-L > general ROUGE-L, p < alpha."""
        from zcp.probe.stats import paired_test

        rows = [r for r in records if r.get("variant", "original") == "original" and r.get("score") is not None]
        rule = f"guided ROUGE-L > general ROUGE-L, one-sided paired sign-flip permutation test, p < {ctx.alpha}"
        if not rows:
            return {"statistic": float("nan"), "decision": None, "rule": rule, "p_value": None, "threshold": ctx.alpha}
        res = paired_test("rouge_l", [r["rouge_l_guided"] for r in rows], [r["rouge_l_general"] for r in rows],
                          B=ctx.bootstrap_samples, seed=ctx.seed, ids=[str(r["id"]) for r in rows], kind="continuous")
        return {"statistic": float(res.diff), "decision": bool(res.p_value < ctx.alpha), "rule": rule,
                "p_value": float(res.p_value), "threshold": ctx.alpha}
