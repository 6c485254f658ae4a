"""Normalised probe metrics, p_first_norm and p_all_norm: the gold answer's zero-CoT score relative to the same
answer's score under a neutral prompt that holds no question.

Why. A model that cannot solve an item still puts zero-CoT mass on answers by their shape: last digit 0 or 5,
round numbers, a magnitude, a leading 1 or 2. At 0% accuracy (SmolLM2-135M on GSM8K) those priors are all that
p_first/p_all measure, and a shape the reference builder does not match between an original and its draws reads
as a gap on a clean model. Dividing by the answer's probability without the question removes what the model
would say about that answer string whatever the question:

    p_first_norm = log P(t1 | x^) - log P(t1 | n^)
    p_all_norm   = mean_k log P(tk | x^, t<k) - mean_k log P(tk | n^, t<k)    (= log p_all - log p_all under n^)

with x^ the item's zero-CoT prompt and n^ the neutral one: the same rendering (system prompt, user template,
chat template, pre-filled `probe.zero_cot_prefix`) around the fixed question `NEUTRAL_QUESTION`. Both are log
ratios (a plain ratio of two small probabilities is heavy-tailed), computed for originals and references alike, so
the within-item test and the control comparison read them like any continuous metric.

Which neutral prompt, and why not the question with its numbers masked: a model that memorised an item
recognises its text without the numbers, so a masked question would raise the normaliser of a leaked original
with its score and cancel the very signal the probe looks for. A prompt without the question carries nothing
of the item, so a leak survives the division; what it cancels is the prior over the answer string itself
(shape, roundness, magnitude, leading digit). It does not cancel priors that depend on the question (copying a
number that appears in it): the reference builder must still match those, and a control set
(zcp.probe.control) cancels what the builder shares across sets.

Cost: one more teacher-forced score per distinct gold answer of a probe call (the neutral prompt does not
depend on the item), beside the score pass p_first/p_all run anyway (`needs_logprobs`: the pass fills
p_first/p_all, this module's pass adds the neutral fields). The records hold `p_first_neutral`, `p_all_neutral`
and the two metrics' fields.

Registered on import (zcp.probe.detect imports it, so every job that validates `probe.metrics` knows them); not
in the default `probe.metrics`: select them with `probe.metrics=[p_first,p_all,p_first_norm,p_all_norm]`.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Sequence
from typing import Any

from zcp.backends.base import Backend, Prompt
from zcp.core.items import Item
from zcp.probe.metrics import ProbeMetric, register_metric
from zcp.probe.prompts import ProbeConfig, answer_score_requests

NEUTRAL_QUESTION = "What is the answer?"  # names no item, no number: the answer's prior under the probe's rendering
_TINY = sys.float_info.min  # floor before a log: a probability that underflowed to 0


def neutral_prompt(prompt: Prompt, cfg: ProbeConfig) -> Prompt:
    """The neutral prompt n^ beside an item's probe prompt: the same rendering around `NEUTRAL_QUESTION`, the
    assistant turn pre-filled with `probe.zero_cot_prefix` alone (a truncated-CoT prompt's reasoning is dropped)."""
    return dataclasses.replace(prompt, user=cfg.user_template.format(question=NEUTRAL_QUESTION),
                               assistant_prefix=cfg.zero_cot_prefix)


def _log(p: float) -> float:
    return math.log(max(float(p), _TINY))


def normalise_records(backend: Backend, items: Sequence[Item], prompts: Sequence[Prompt],
                      records: list[dict[str, Any]], cfg: ProbeConfig, prefill: bool) -> None:
    """The metrics' own probe pass: score each distinct gold answer after the neutral prompt, then write
    `p_first_neutral`, `p_all_neutral`, `p_first_norm` and `p_all_norm` into the records (which hold p_first and
    p_all from the score pass). Runs once per call however many of the two metrics are selected."""
    if not records or all("p_all_norm" in r for r in records):
        return
    if not prefill:
        raise ValueError("p_first_norm/p_all_norm need a backend with pre-fill and log-probabilities")
    keys: dict[tuple[Prompt, str], int] = {}
    for prompt, it in zip(prompts, items, strict=True):
        keys.setdefault((neutral_prompt(prompt, cfg), it.answer), len(keys))
    scores = backend.score(answer_score_requests([p for p, _ in keys], [a for _, a in keys], cfg))
    for rec, prompt, it in zip(records, prompts, items, strict=True):
        lps = scores[keys[(neutral_prompt(prompt, cfg), it.answer)]].token_logprobs
        first, mean = lps[0], sum(lps) / len(lps)
        rec["p_first_neutral"] = math.exp(first)
        rec["p_all_neutral"] = math.exp(mean)
        rec["p_first_norm"] = _log(rec["p_first"]) - first
        rec["p_all_norm"] = _log(rec["p_all"]) - mean


P_FIRST_NORM = register_metric(ProbeMetric("p_first_norm", "p_first_norm", "continuous", "P_first/neutral",
                                           needs_logprobs=True, probe=normalise_records))
P_ALL_NORM = register_metric(ProbeMetric("p_all_norm", "p_all_norm", "continuous", "P_all/neutral",
                                         needs_logprobs=True, probe=normalise_records))
NORMALISED_METRICS = (P_FIRST_NORM.name, P_ALL_NORM.name)
