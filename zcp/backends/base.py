"""The backend interface: teacher-forced scoring of continuations and text generation, batched.

Implementations, chosen by `model.backend` through `zcp.backends.build_backend`: `hf`
(`zcp.backends.hf.HFBackend`, transformers), `vllm` (`zcp.backends.vllm.VLLMBackend`) and `openai`
(`zcp.backends.openai_api.OpenAIBackend`, any OpenAI-compatible server). The open-weights engines share
`zcp.backends.tokenized.TokenizedBackend` (rendering with `chat_template_kwargs`, the token ids scored and
generated from), so they write only `score` and `generate`. An API backend that cannot pre-fill the
assistant turn reports `supports_prefill = False` and `supports_logprobs` as its endpoint allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Prompt:
    """What the model sees before its continuation.

    `user` is the user turn; `assistant_prefix` pre-fills the assistant turn (zero-CoT uses
    ``The final answer is: \\[ \\boxed{``). With `chat=True` an open-weights backend renders the
    model's chat template (add_generation_prompt=True) and appends the prefix; a model without a
    template gets ``user + "\\n" + assistant_prefix``. With `chat=False` the text is used raw:
    ``user + assistant_prefix`` (log-likelihood multiple choice, base-model pretraining format).
    """

    user: str
    assistant_prefix: str = ""
    system: str | None = None
    chat: bool = True


@dataclass(frozen=True)
class ScoreRequest:
    """Score `continuation` given `prompt` by teacher forcing.

    `distribution_stats=True` also asks for the mean and standard deviation of log p over the model's
    whole next-token distribution at each continuation position (what Min-K%++ normalises by).
    """

    prompt: Prompt
    continuation: str
    distribution_stats: bool = False


@dataclass(frozen=True)
class ScoreResult:
    """Per-token log-probabilities of the continuation's tokens (tokenised in context).

    `token_means`/`token_stds`: E_{z~p}[log p(z)] and its standard deviation at each position, filled
    only for requests with `distribution_stats=True` (empty otherwise).
    """

    token_logprobs: tuple[float, ...]
    tokens: tuple[str, ...] = ()
    token_means: tuple[float, ...] = ()
    token_stds: tuple[float, ...] = ()

    @property
    def n_tokens(self) -> int:
        return len(self.token_logprobs)


@dataclass(frozen=True)
class GenerationRequest:
    """Greedy (or sampled) continuation of `prompt`.

    `stop_at_box_close`: stop when the `\\boxed{` opened by the prefix is closed (brace-balanced);
    the returned text then ends with that closing brace (a text without it was cut by the token
    budget or EOS: the probe counts it as malformed). Otherwise stop at EOS, at the first of `stop`
    (the returned text ends before it), or at `max_new_tokens`.
    """

    prompt: Prompt
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    stop_at_box_close: bool = False
    temperature: float = 0.0
    seed: int | None = None


@runtime_checkable
class Backend(Protocol):
    """A model that can score continuations and generate text, in batches."""

    name: str
    fingerprint: str  # what decides outputs besides the prompt (weights' content, rendering options); no secrets
    chat_template_kwargs: dict[str, Any]  # passed to every chat-template render (Qwen3: enable_thinking=False)
    supports_prefill: bool
    supports_logprobs: bool

    def render(self, prompt: Prompt) -> str:
        """The exact text the model conditions on for `prompt` (what a record's prompt means)."""
        ...

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        """Teacher-forced log-probabilities of each continuation, in request order."""
        ...

    def generate(self, requests: Sequence[GenerationRequest]) -> list[str]:
        """Generated text (after the prompt and prefix), in request order."""
        ...
