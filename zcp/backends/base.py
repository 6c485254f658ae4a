"""The backend interface: teacher-forced scoring of continuations and text generation, batched.

Implementations, chosen by `model.backend` through `zcp.backends.build_backend`: `hf`
(`zcp.backends.hf.HFBackend`, transformers), `vllm` (`zcp.backends.vllm.VLLMBackend`) and `openai`
(`zcp.backends.openai_api.OpenAIBackend`, any OpenAI-compatible server). The open-weights engines share
`zcp.backends.tokenized.TokenizedBackend` (rendering with `chat_template_kwargs`, the token ids scored and
generated from), so they write only `score` and `generate`.

What a job may ask of an engine besides `score` and `generate` is declared here, on `Backend`, with its
default: an engine subclasses `Backend` and sets the capabilities it has (an API backend that cannot pre-fill
the assistant turn sets `supports_prefill = False`, one whose endpoint returns no prompt log-probs
`supports_logprobs = False` and `logprobs_unavailable` to say why). Jobs read these attributes directly, so a
capability a job needs is one line here, never a `getattr` probe in the job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
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
    """A model that can score continuations and generate text, in batches, and says what else it can do.

    Subclass it: the defaults below are those of an engine that pre-fills and returns log-probs but has no
    local tokenizer and does not say how it renders prompts; set what differs (as class attributes, instance
    attributes or properties). `zcp.backends.build_backend` refuses an engine that is neither a subclass nor
    declares every member.
    """

    name: str = "model"  # set by build_backend to model.name (else the folder name)
    fingerprint: str = ""  # what decides outputs besides the prompt (weights' content, rendering options); no secrets
    # passed to every chat-template render (Qwen3: enable_thinking=False); read-only default
    chat_template_kwargs: Mapping[str, Any] = MappingProxyType({})
    supports_prefill: bool = True  # can continue a pre-filled assistant turn (the zero-CoT box)
    supports_logprobs: bool = True  # `score` returns the continuation's token log-probs after such a prompt
    logprobs_unavailable: str | None = None  # why p_first/p_all cannot run here (said in the refusal), else None
    tokenizer: Any = None  # the model's local transformers tokenizer (token-unit cuts, EOS/BOS text), else None
    context_length: int | None = None  # positions a probe may use; None: unknown (no overflow check)

    @property
    def counts_tokens(self) -> bool:
        """Whether `count_tokens` works (the probe's context check and token budgets use it): by default, whether
        the engine implements it; an engine whose counting depends on its set-up overrides this."""
        return type(self).count_tokens is not Backend.count_tokens

    def render(self, prompt: Prompt) -> str:
        """The exact text the model conditions on for `prompt` (what a record's prompt means)."""
        raise NotImplementedError(f"backend {self.name} does not say what text it conditions on")

    def rendering(self) -> dict[str, Any]:
        """How prompts become text, for run records (summary.json, run_meta.json): `kind` and its details."""
        return {"kind": "unrecorded", "reason": f"backend {self.name} does not say how it renders prompts"}

    def count_tokens(self, prompts: Sequence[Prompt], texts: Sequence[str] = ()) -> tuple[list[int], list[int]]:
        """Token counts of rendered prompts (as generation sees them) and of bare texts; see `counts_tokens`."""
        raise NotImplementedError(f"backend {self.name} cannot count tokens")

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        """Teacher-forced log-probabilities of each continuation, in request order."""
        raise NotImplementedError(f"backend {self.name} cannot score")

    def generate(self, requests: Sequence[GenerationRequest]) -> list[str]:
        """Generated text (after the prompt and prefix), in request order."""
        raise NotImplementedError(f"backend {self.name} cannot generate")


# every member a job may read (the protocol's attributes and methods), what `missing_members` checks for
MEMBERS: tuple[str, ...] = (*Backend.__annotations__, *(k for k, v in vars(Backend).items() if not k.startswith("_")
                                                         and (callable(v) or isinstance(v, property))))


def missing_members(backend: object) -> list[str]:
    """The `Backend` members `backend` lacks (none for a subclass); read from the class and the instance's own
    attributes, so no property runs (an API engine's `supports_logprobs` may send a request)."""
    if Backend in type(backend).__mro__:
        return []
    own = getattr(backend, "__dict__", {})
    return [m for m in MEMBERS if m not in own and not hasattr(type(backend), m)]
