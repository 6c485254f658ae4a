"""Model backends behind one batched interface (score and generate) with declared capabilities.

`build_backend(model_cfg)` chooses the engine from `model.backend` (hf | vllm | openai, imported lazily, or
one added by `register_backend(name, builder, settings=...)`); an engine subclasses `Backend`, whose
attributes say what it can do (pre-fill, log-probs, token counts, context length); `TokenizedBackend` is the
shared rendering/tokenisation base of the engines that run a local tokenizer.
"""

from zcp.backends.base import Backend, GenerationRequest, Prompt, ScoreRequest, ScoreResult
from zcp.backends.registry import (
    backend_names,
    build_backend,
    register_backend,
    unregister_backend,
    wrap_model,
)

__all__ = ["Backend", "GenerationRequest", "Prompt", "ScoreRequest", "ScoreResult", "backend_names",
           "build_backend", "register_backend", "unregister_backend", "wrap_model"]
