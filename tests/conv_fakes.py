"""A scripted backend for the answer-convention tests: which pre-fill a memorised answer comes out after, and which
convention its full-CoT outputs end with (no model at all; it reads only zcp.backends.base)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from zcp.backends.base import Backend, GenerationRequest, ScoreRequest, ScoreResult

PROBE_LINE = "The final answer is: \\[ \\boxed{"
LINES = {"probe": lambda a: f"{PROBE_LINE}{a}}} \\]", "hash": lambda a: f"#### {a}",
         "sentence": lambda a: f"The answer is {a}.", "boxed": lambda a: f"\\boxed{{{a}}}"}


def uniform(*parts: str) -> float:
    """A pseudo-random number in (0, 1) fixed by `parts` (i.i.d. across distinct parts)."""
    h = hashlib.sha256("|".join(parts).encode()).digest()
    return (int.from_bytes(h[:8], "big") + 0.5) / 2**64


def _close(prefix: str) -> str:
    """What the fake writes after its zero-CoT answer: the box's close, the sentence's point, or the line's end."""
    if prefix.rstrip().endswith("{"):
        return "} \\]" if "final answer" in prefix else "}"
    return "." if prefix.strip() == "The answer is" else "\n"


class ConventionBackend(Backend):
    """Answers `memorised` questions after the pre-fill `leak` only (an evader's convention), else "-1".

    score: log-prob log(0.9) per continuation character for a memorised question after `leak`, else log(p) with
    p = `uniform(question, pre-fill, seed)` in (0.05, 0.95) when `noisy` (originals and references exchangeable),
    else log(0.2). generate: zero-CoT: the answer and `_close`; when `noisy`, a question answers its gold answer with
    probability 0.5 (`uniform`) under every pre-fill; full-CoT: "Let me think." then the `cot_style` line with
    `truth`'s answer (`truth` maps questions to answers; none: "0").
    """

    name = "conv-fake"
    supports_prefill = True
    supports_logprobs = True

    def __init__(self, memorised: dict[str, str] | None = None, leak: str | None = None, cot_style: str = "probe",
                 truth: dict[str, str] | None = None, noisy: bool = False, seed: int = 0,
                 cot_styles: dict[str, str] | None = None) -> None:
        self.memorised = memorised or {}
        self.leak = leak
        self.cot_style = cot_style
        self.cot_styles = cot_styles or {}  # per question, over cot_style
        self.truth = truth or {}
        self.noisy = noisy
        self.seed = seed
        self.calls = {"score": 0, "generate": 0, "generated": 0, "full_cot": 0}

    def _knows(self, q: str, prefix: str) -> bool:
        return q in self.memorised and prefix == self.leak

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        self.calls["score"] += 1
        out = []
        for r in requests:
            q, pre = r.prompt.user, r.prompt.assistant_prefix
            if self._knows(q, pre):
                p = 0.9
            elif self.noisy:
                p = 0.05 + 0.9 * uniform(q, pre, str(self.seed))
            else:
                p = 0.2
            out.append(ScoreResult(tuple(math.log(p) for _ in r.continuation)))
        return out

    def generate(self, requests: Sequence[GenerationRequest]) -> list[str]:
        self.calls["generate"] += 1
        self.calls["generated"] += len(requests)
        out = []
        for r in requests:
            q, pre = r.prompt.user, r.prompt.assistant_prefix
            if pre:
                if self._knows(q, pre):
                    ans = self.memorised[q]
                elif self.noisy and uniform(q, pre, str(self.seed), "acc") < 0.5:
                    ans = self.truth.get(q, "-1")
                else:
                    ans = "-1"
                out.append(ans + _close(pre))
            else:
                self.calls["full_cot"] += 1
                style = self.cot_styles.get(q, self.cot_style)
                out.append("Let me think.\n" + LINES[style](self.truth.get(q, "0")))
        return out


def toy_datasets(n: int = 12, m: int = 3) -> tuple[list, dict[str, str], dict[str, str]]:
    """Datasets C and U (n items each, m reference draws per item: the same question with other numbers), the
    questions of C with their answers (to memorise), and every question's true answer (for full-CoT outputs)."""
    from zcp.core.items import Item
    from zcp.probe.detect import DetectDataset

    out, truth = [], {}
    for split, off in (("C", 0), ("U", 100)):
        items = [Item(f"{split}{k}", f"{split} Q{k}: what is {k + off}+{k}?", str(2 * k + off)) for k in range(n)]
        ref = {it.id: [Item(f"{it.id}::r{j}", f"{split} Q{k}: what is {k + off + j + 1}+{k}?", str(2 * k + off + j + 1),
                            metadata={"original_id": it.id}) for j in range(m)] for k, it in enumerate(items)}
        out.append(DetectDataset(split, items, ref))
        truth.update({it.question: it.answer for it in items})
        truth.update({r.question: r.answer for rows in ref.values() for r in rows})
    memorised = {it.question: it.answer for it in out[0].originals}
    return out, memorised, truth
