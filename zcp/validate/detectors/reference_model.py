"""Reference-model detector (`ref`): the audited model's loss against a reference model's on the same text.

Score = ref_loss - target_loss, losses being the mean per-token negative log-likelihood of the item's text
(param `text`, scored as in `zcp.validate.detectors.likelihood`: raw question by default; each model with its own
tokenizer; one batched pass per model, shared with the likelihood detectors for the audited model). A text the audited model has trained on
is easier for it than for the model it was fine-tuned from, so higher = more likely leaked (Carlini et al.
2021's "comparing to other neural language models"; the simulation's reference is its base model,
`ref_model.path`, or in a contamination run dir the `base_model` of exposure.json).

Benchmark decision: the reference-set test (`zcp.validate.detectors.base.reference_set_decision`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from zcp.backends.base import Backend
from zcp.core.items import Item
from zcp.validate.detectors.base import Detector, DetectorContext, DetectorSpec, register_detector
from zcp.validate.detectors.likelihood import TEXTS, item_pass, mean_loss


@register_detector(DetectorSpec("ref", "Reference model", "score", frozenset({"reference_model"}), "reference_model",
                                cite="Carlini et al. 2021"))
class ReferenceModel(Detector):
    """Score = reference model's mean loss minus the audited model's, on the item's raw text."""

    def __init__(self, text: str = "question") -> None:
        if text not in TEXTS:
            raise ValueError(f"text must be one of {list(TEXTS)}, not {text!r}")
        self.text = text

    def score_items(self, backend: Backend, items: Sequence[Item], ctx: DetectorContext) -> list[dict[str, Any]]:
        """ref_loss - target_loss per item (both losses recorded)."""
        if ctx.ref_backend is None:
            raise ValueError("detector ref needs a reference model (ref_model.path)")
        _, target = item_pass(backend, items, self.text, ctx)
        _, ref = item_pass(ctx.ref_backend, items, self.text, ctx)
        out = []
        for it, t, r in zip(items, target, ref, strict=True):
            lt, lr = mean_loss(t), mean_loss(r)
            out.append({"id": it.id, "score": lr - lt, "target_loss": lt, "ref_loss": lr})
        return out
