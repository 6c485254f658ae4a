"""A deterministic fake backend for probe and detection tests (no model at all)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from zcp.backends.base import Backend, GenerationRequest, ScoreRequest, ScoreResult


class FakeBackend(Backend):
    """Knows the answers of `memorised` questions; elsewhere it answers `wrong` or garbage.

    score: log-prob 0.9 per answer token for memorised questions, else 0.1 (or `p_of`).
    generate: zero-CoT (box prefix) -> "<answer>}" for memorised, "<wrong>}" otherwise,
    "??" (never closes the box) for questions containing "GARBLE"; full-CoT -> "... \\boxed{<true answer>}".
    `fail_after` raises after that many calls, to simulate a killed run.
    """

    name = "fake"
    supports_prefill = True
    supports_logprobs = True

    def __init__(self, memorised: dict[str, str], truth: dict[str, str] | None = None, fail_after: int | None = None,
                 p_of=None) -> None:
        self.memorised = memorised
        self.truth = truth or {}
        self.fail_after = fail_after
        self.calls = {"score": 0, "generate": 0}
        self.p_of = p_of

    def _tick(self, kind: str) -> None:
        self.calls[kind] += 1
        if self.fail_after is not None and sum(self.calls.values()) > self.fail_after:
            raise KeyboardInterrupt("simulated kill")

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        self._tick("score")
        out = []
        for r in requests:
            q = r.prompt.user
            p = self.p_of(q) if self.p_of else (0.9 if q in self.memorised else 0.1)
            out.append(ScoreResult(tuple(math.log(p) for _ in r.continuation)))
        return out

    def generate(self, requests: Sequence[GenerationRequest]) -> list[str]:
        self._tick("generate")
        out = []
        for r in requests:
            q = r.prompt.user
            if r.prompt.assistant_prefix:  # zero-CoT with pre-fill
                if "GARBLE" in q:
                    out.append("??")
                else:
                    out.append(self.memorised.get(q, "-1") + "} \\]")
            elif "ONLY put your final answer" in q:  # API variant
                base = q.split("\n")[0]
                out.append(f"\\boxed{{{self.memorised.get(base, '-1')}}}")
            else:
                base = re.sub(r"\s+$", "", q)
                out.append(f"Let me think. The final answer is: \\[ \\boxed{{{self.truth.get(base, '0')}}} \\]")
        return out
