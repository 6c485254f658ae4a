"""DPCC (`dpcc`): RMIA against augmented rewrites, as the ZCP paper's section 2 describes it.

Per item: n rewrites of the question (the project's paraphrasers, validated: same numbers, same answer,
different text); the loss of each text is the mean per-token negative log-likelihood of its raw text
(scored as in `zcp.validate.detectors.likelihood`, one batched `score` call over all originals and rewrites).
RMIA = the proportion of the item's rewrites whose loss is lower than the original's ("the proportion that
the loss of the original sample is larger than augmented ones"). A memorised original has a lower loss
than its rewrites, so RMIA near 0. Item score = 1 - RMIA (higher = more likely leaked); an item without any
valid rewrite gets no score (listed with its reason).

Benchmark rule (the paper): contaminated when the share of items with RMIA < 0.1 exceeds 0.85.
Rewrites: ``paraphraser="auto"`` = the template rewording for generated word problems, the rule-based
paraphraser otherwise (as the contamination simulation chooses), or any registered paraphraser name; each
item's rewrites are seeded by (seed, "dpcc", item id), a stream apart from the simulation's own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from zcp.backends.base import Backend
from zcp.core.items import Item
from zcp.validate.detectors.base import Detector, DetectorContext, DetectorSpec, register_detector
from zcp.validate.detectors.likelihood import likelihood_pass, mean_loss

log = logging.getLogger(__name__)

RMIA_LOW = 0.1
SHARE_THRESHOLD = 0.85


def rmia(original_loss: float, rewrite_losses: Sequence[float]) -> float:
    """Share of rewrites whose loss is lower than the original's (the original's loss is larger)."""
    if not len(rewrite_losses):
        raise ValueError("RMIA needs at least one rewrite")
    return float(np.mean([original_loss > x for x in rewrite_losses]))


def dpcc_rule(rmias: Sequence[float], low: float = RMIA_LOW, share: float = SHARE_THRESHOLD) -> dict[str, Any]:
    """The paper's rule: statistic = share of items with RMIA < low; contaminated when it exceeds `share`."""
    if not len(rmias):
        return {"statistic": float("nan"), "decision": None, "rule": "no item with rewrites", "p_value": None,
                "threshold": share}
    stat = float(np.mean([r < low for r in rmias]))
    return {"statistic": stat, "decision": bool(stat > share),
            "rule": f"share of items with RMIA < {low} exceeds {share}", "p_value": None, "threshold": share}


def rewrites(item: Item, n: int, seed: int, paraphraser: str) -> list[str]:
    """Up to n validated rewrites of the item's question."""
    from zcp.benchmarks.paraphrase import get_paraphraser
    from zcp.simulate.data import item_seed

    name = paraphraser
    if name == "auto":
        name = "template" if item.metadata.get("source") == "wordproblem" else "rules"
    para = get_paraphraser(name)
    return [v.question for v in para.paraphrase(item, n, item_seed(seed, f"dpcc|{item.id}"))]


@register_detector(DetectorSpec("dpcc", "DPCC (RMIA)", "rule", frozenset({"paraphraser"}), "dpcc",
                                cite="ZCP paper sec. 2"))
class DPCC(Detector):
    """Score = 1 - RMIA over `n_rewrites` rewrites; benchmark rule of the paper."""

    def __init__(self, n_rewrites: int = 8, paraphraser: str = "auto") -> None:
        if int(n_rewrites) < 1:
            raise ValueError(f"n_rewrites must be >= 1, not {n_rewrites!r}")
        self.n_rewrites = int(n_rewrites)
        self.paraphraser = str(paraphraser)
        if self.paraphraser != "auto":  # checked now: the rewrites run after the model has loaded
            from zcp.benchmarks.paraphrase import get_paraphraser

            try:
                get_paraphraser(self.paraphraser)
            except KeyError as e:
                raise ValueError(f"paraphraser={self.paraphraser!r}: {e.args[0]}; or auto") from None
            except TypeError:  # a model-based paraphraser (llm): dpcc loads no paraphrasing model
                raise ValueError(f"paraphraser={self.paraphraser!r} needs a model, which dpcc does not load; "
                                 "use auto, rules or template") from None

    def score_items(self, backend: Backend, items: Sequence[Item], ctx: DetectorContext) -> list[dict[str, Any]]:
        """Losses of every original and rewrite in one pass, then RMIA per item."""
        rw = [rewrites(it, self.n_rewrites, ctx.seed, self.paraphraser) for it in items]
        texts = [it.question for it in items] + [t for r in rw for t in r]
        losses = [mean_loss(r) for r in likelihood_pass(backend, texts, ctx)]
        out, k = [], len(items)
        for i, it in enumerate(items):
            own = losses[k : k + len(rw[i])]
            k += len(rw[i])
            if not own:
                out.append({"id": it.id, "score": None, "reason": "no valid rewrite", "n_rewrites": 0})
                continue
            r = rmia(losses[i], own)
            out.append({"id": it.id, "score": 1.0 - r, "rmia": r, "loss": losses[i],
                        "rewrite_loss_mean": float(np.mean(own)), "n_rewrites": len(own)})
        return out

    def benchmark_decision(self, records: Sequence[dict[str, Any]], ctx: DetectorContext) -> dict[str, Any]:
        """The paper's rule over the originals' RMIA."""
        return dpcc_rule([r["rmia"] for r in records
                          if r.get("variant", "original") == "original" and r.get("rmia") is not None])
