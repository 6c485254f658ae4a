"""A backend wrapper that generates each distinct request once: what a multi-convention probe shares.

The full-CoT generation does not depend on the zero-CoT pre-fill (its prompt has none), so when several answer
conventions are probed (zcp.probe.multiconv) the full-CoT outputs `con` compares against, and those `auto` reads
the model's conventions from, are the same requests every time. `MemoBackend` keys each generation by the
frozen `GenerationRequest` itself (prompt, budget, stops, temperature, seed: everything that decides its text) and
returns the first result for every later identical request, so each full-CoT output is generated once and every
convention compares against the same text. Scoring is passed through (score requests differ per convention).

Everything else (name, fingerprint, capabilities, tokenizer, rendering, token counting) is the wrapped backend's,
read through, so records and run fingerprints are those of the unwrapped backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from zcp.backends.base import Backend, GenerationRequest, ScoreRequest, ScoreResult


class MemoBackend:
    """`backend` with `generate` memoised per request (optionally only for requests `keep` accepts)."""

    def __init__(self, backend: Backend, keep: Callable[[GenerationRequest], bool] | None = None) -> None:
        self._inner = backend
        self._keep = keep
        self._memo: dict[GenerationRequest, str] = {}
        self.generated = 0  # memoised requests (those `keep` accepts) sent to the wrapped backend
        self.reused = 0  # memoised requests answered from the memo
        self.passed = 0  # requests `keep` leaves out, sent on every time

    @property
    def inner(self) -> Backend:
        """The wrapped backend."""
        return self._inner

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes this class does not define: the wrapped backend's own
        return getattr(self._inner, name)

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        """The wrapped backend's scores (not memoised)."""
        return self._inner.score(requests)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[str]:
        """Texts in request order; requests seen before (and repeats within the call) are generated once."""
        todo: list[GenerationRequest] = []
        seen: set[GenerationRequest] = set()
        for r in requests:
            if self._keeps(r) and (r in self._memo or r in seen):
                continue
            if self._keeps(r):
                seen.add(r)
            todo.append(r)
        fresh = self._inner.generate(todo) if todo else []
        kept = sum(self._keeps(r) for r in todo)
        self.generated += kept
        self.passed += len(todo) - kept
        out_fresh = iter(fresh)
        results: dict[int, str] = {}
        new: dict[GenerationRequest, str] = {}
        for k, r in enumerate(requests):
            if self._keeps(r) and (r in self._memo or r in new):
                results[k] = self._memo.get(r, new.get(r, ""))
                self.reused += 1
                continue
            text = next(out_fresh)
            results[k] = text
            if self._keeps(r):
                new[r] = text
        self._memo.update(new)
        return [results[k] for k in range(len(requests))]

    def _keeps(self, r: GenerationRequest) -> bool:
        return self._keep is None or self._keep(r)


def full_cot_only(request: GenerationRequest) -> bool:
    """A request without a pre-filled assistant turn (the full-CoT generation; zero-CoT ones pre-fill)."""
    return not request.prompt.assistant_prefix
