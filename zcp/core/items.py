"""The one item schema every part of zcp speaks, and the error type for bad input."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from zcp.errors import DataError  # noqa: F401 - the loaders' error, beside the item it validates


@dataclass
class Item:
    """One benchmark question with its gold answer.

    `answer` is the final answer as text (e.g. "18", "\\frac{1}{2}"); `solution` is an optional
    worked chain of thought; `metadata` carries source-specific data (stage, family, program,
    options, `original_id` for a reference or paraphrase row, ...).
    """

    id: str
    question: str
    answer: str
    solution: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Item:
        return cls(id=str(d["id"]), question=str(d["question"]), answer=str(d["answer"]),
                   solution=d.get("solution"), metadata=dict(d.get("metadata") or {}))
