"""Likelihood detectors: perplexity, zlib ratio, Min-K% Prob and Min-K%++ (one scoring pass for all).

Text scored (param `text`):
- ``question`` (the default, as the literature scores pretraining text) or ``question_answer`` (question, a
  newline, the answer): raw text, ``Prompt(user=<document prefix>, chat=False)`` with the text as the scored
  continuation. The document prefix is empty when the tokenizer adds a BOS token (the text is scored after
  BOS, as in pretraining); a tokenizer without BOS (Qwen-style) gets its end-of-text token as the document
  separator, so every token of the text, the first included, is scored.
- ``chat_solution`` / ``chat_answer``: what a chat fine-tune with a completion-only loss trains on — the
  item's worked solution ending on ``The final answer is: \\[ \\boxed{ANS} \\]`` (`zcp.simulate.data.
  cot_completion`), or that final-answer line alone, scored after the question in the chat template
  (``Prompt(user=question)``). zlib's compressed length is then the scored continuation's.
One `Backend.score` call with `distribution_stats=True` (the mean and std of log p over the vocabulary at
each position) serves every detector of this module with the same `text` in a run (cached in
`DetectorContext.cache`).

Scores (higher = more likely leaked; log p are natural-log token log-probabilities of the text):
- ``ppl``: -log perplexity = mean_t log p(t) (Shi et al. 2023's PPL baseline, sign flipped).
- ``zlib`` (Carlini et al. 2021): log-likelihood / zlib entropy = mean_t log p(t) / len(zlib(text)) in
  bytes (Carlini et al.'s ratio of log perplexity to zlib entropy, negated, as the Min-K% code computes it);
  the log-likelihood is negative, so the ratio is higher for text the model finds likely relative to its
  compressibility.
- ``minkK`` (Min-K% Prob, Shi et al. 2023): mean log p over the K% lowest-probability tokens
  (K in 5, 10, 20, 30, 50; ``mink`` = 20; at least one token).
- ``minkppK`` (Min-K%++, Zhang et al. 2024): per token (log p - mu) / sigma with mu, sigma the mean and std
  of log p over the vocabulary at that position; mean of the K% lowest (``minkpp`` = 20).

Benchmark decision: the reference-set test (`zcp.validate.detectors.base.reference_set_decision`).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from zcp.backends.base import Backend, Prompt, ScoreRequest, ScoreResult
from zcp.core.items import Item
from zcp.validate.detectors.base import Detector, DetectorContext, DetectorSpec, register_detector

TEXTS = ("question", "question_answer", "chat_solution", "chat_answer")
KS = (5, 10, 20, 30, 50)


def item_text(item: Item, text: str) -> str:
    """The text a likelihood detector scores for `item` (the continuation of its scoring request)."""
    if text == "question":
        return item.question
    if text == "question_answer":
        return f"{item.question}\n{item.answer}"
    if text in ("chat_solution", "chat_answer"):
        from zcp.simulate.data import cot_completion
        from zcp.simulate.rewards import final_answer_line

        if text == "chat_solution" and item.solution and item.solution.strip():
            return cot_completion(item.solution, item.answer)
        return final_answer_line(item.answer)
    raise ValueError(f"text must be one of {list(TEXTS)}, not {text!r}")


def item_prompt(item: Item, text: str, prefix: str) -> Prompt:
    """What the scored text follows: the document prefix (raw text modes) or the question in the chat template."""
    return Prompt(user=item.question) if text.startswith("chat_") else Prompt(user=prefix, chat=False)


def document_prefix(backend: Backend) -> str:
    """What raw text is scored after: "" when the backend's tokenizer adds a BOS token, else its
    end-of-text (or BOS) token text, else a newline. Backends without a tokenizer get ""."""
    tok = backend.tokenizer
    if tok is None or not backend.counts_tokens:
        return ""
    if backend.count_tokens([Prompt(user="", chat=False)])[0][0]:  # the empty prompt's ids: its special tokens
        return ""
    return tok.eos_token or tok.bos_token or "\n"


def likelihood_pass(backend: Backend, texts: Sequence[str], ctx: DetectorContext,
                    prompts: Sequence[Prompt] | None = None) -> list[ScoreResult]:
    """Token log-probs and vocabulary stats of each text, in one batched `score` call (cached per backend).

    `prompts`: what each text follows (default: the document prefix, i.e. raw text)."""
    if prompts is None:
        prefix = document_prefix(backend)
        prompts = [Prompt(user=prefix, chat=False)] * len(texts)
    key = ("likelihood", id(backend), tuple(texts), tuple(prompts))
    if key not in ctx.cache:
        reqs = [ScoreRequest(p, t, distribution_stats=True) for p, t in zip(prompts, texts, strict=True)]
        ctx.cache[key] = backend.score(reqs)
    return ctx.cache[key]


def item_pass(backend: Backend, items: Sequence[Item], text: str, ctx: DetectorContext
              ) -> tuple[list[str], list[ScoreResult]]:
    """The scored texts of `items` in mode `text` and their scoring results (one cached pass)."""
    texts = [item_text(it, text) for it in items]
    prefix = "" if text.startswith("chat_") else document_prefix(backend)
    prompts = [item_prompt(it, text, prefix) for it in items]
    return texts, likelihood_pass(backend, texts, ctx, prompts)


def mean_loss(res: ScoreResult) -> float:
    """Mean negative log-likelihood per token."""
    return -float(np.mean(res.token_logprobs))


def lowest_k_mean(values: Sequence[float], k: float) -> float:
    """Mean of the ceil(k% of n) lowest values (at least one)."""
    v = np.sort(np.asarray(values, dtype=float))
    n = max(1, math.ceil(len(v) * k / 100.0))
    return float(v[:n].mean())


def minkpp_values(res: ScoreResult) -> np.ndarray:
    """(log p - mu) / sigma per token (sigma floored at 1e-8: a one-hot distribution has sigma 0)."""
    if len(res.token_means) != res.n_tokens or len(res.token_stds) != res.n_tokens:
        raise ValueError("Min-K%++ needs distribution stats (ScoreRequest.distribution_stats=True) from the backend")
    lp = np.asarray(res.token_logprobs, dtype=float)
    return (lp - np.asarray(res.token_means)) / np.maximum(np.asarray(res.token_stds), 1e-8)


class _Likelihood(Detector):
    """Shared scoring: one pass, then `_score` per item."""

    def __init__(self, text: str = "question") -> None:
        if text not in TEXTS:
            raise ValueError(f"text must be one of {list(TEXTS)}, not {text!r}")
        self.text = text

    def _score(self, res: ScoreResult, text: str) -> float:
        raise NotImplementedError

    def score_items(self, backend: Backend, items: Sequence[Item], ctx: DetectorContext) -> list[dict[str, Any]]:
        """Score = `_score` of each item's raw text; also the token count and mean loss."""
        texts, results = item_pass(backend, items, self.text, ctx)
        return [{"id": it.id, "score": self._score(res, t), "n_tokens": res.n_tokens, "loss": mean_loss(res)}
                for it, t, res in zip(items, texts, results, strict=True)]


_SCORE = frozenset()


@register_detector(DetectorSpec("ppl", "Perplexity", "score", _SCORE, "likelihood", cite="Shi et al. 2023"))
class Perplexity(_Likelihood):
    """Score = -log perplexity = mean token log-probability."""

    def _score(self, res: ScoreResult, text: str) -> float:
        return -mean_loss(res)


@register_detector(DetectorSpec("zlib", "zlib ratio", "score", _SCORE, "likelihood", cite="Carlini et al. 2021",
                                version=2))
class ZlibRatio(_Likelihood):
    """Score = mean token log-likelihood / zlib-compressed length of the text in bytes."""

    def _score(self, res: ScoreResult, text: str) -> float:
        return float(np.mean(res.token_logprobs)) / len(zlib.compress(text.encode("utf-8")))


class MinK(_Likelihood):
    """Score = mean log p of the k% lowest-probability tokens."""

    def __init__(self, k: float = 20, text: str = "question") -> None:
        super().__init__(text)
        if not 0 < float(k) <= 100:
            raise ValueError(f"k must be in (0, 100], not {k!r}")
        self.k = float(k)

    def _score(self, res: ScoreResult, text: str) -> float:
        return lowest_k_mean(res.token_logprobs, self.k)


class MinKPlusPlus(MinK):
    """Score = mean of the k% lowest (log p - mu) / sigma."""

    def _score(self, res: ScoreResult, text: str) -> float:
        return lowest_k_mean(minkpp_values(res), self.k)


for _k in KS:
    register_detector(DetectorSpec(f"mink{_k}", f"Min-{_k}% Prob", "score", _SCORE, "likelihood", {"k": _k},
                                   cite="Shi et al. 2023"))(MinK)
    register_detector(DetectorSpec(f"minkpp{_k}", f"Min-{_k}%++", "score", _SCORE, "likelihood", {"k": _k},
                                   cite="Zhang et al. 2024"))(MinKPlusPlus)
register_detector(DetectorSpec("mink", "Min-20% Prob", "score", _SCORE, "likelihood", {"k": 20},
                               cite="Shi et al. 2023"))(MinK)
register_detector(DetectorSpec("minkpp", "Min-20%++", "score", _SCORE, "likelihood", {"k": 20},
                               cite="Zhang et al. 2024"))(MinKPlusPlus)
