"""Model backends behind one batched interface (score and generate)."""

from zcp.backends.base import Backend, GenerationRequest, Prompt, ScoreRequest, ScoreResult

__all__ = ["Backend", "GenerationRequest", "Prompt", "ScoreRequest", "ScoreResult"]
