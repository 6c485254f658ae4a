"""Model backends behind one batched interface (score and generate).

`build_backend(model_cfg)` chooses the engine from `model.backend` (hf | vllm | openai, imported lazily);
`TokenizedBackend` is the shared rendering/tokenisation base of the engines that run a local tokenizer.
"""

from zcp.backends.base import Backend, GenerationRequest, Prompt, ScoreRequest, ScoreResult
from zcp.backends.registry import backend_names, build_backend, register_backend, wrap_model

__all__ = ["Backend", "GenerationRequest", "Prompt", "ScoreRequest", "ScoreResult", "backend_names",
           "build_backend", "register_backend", "wrap_model"]
