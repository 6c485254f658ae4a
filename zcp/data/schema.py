"""The one item schema every part of zcp speaks, and the error type for bad input."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

# Everything str.splitlines() breaks at, with the spaces around it.
_LINE_BREAKS = re.compile("\\s*[\\n\\r\\x0b\\x0c\\x1c\\x1d\\x1e\\x85\\u2028\\u2029]+\\s*")


class DataError(ValueError):
    """Bad input data; the message names the file, the row (1-based line) and the field.

    The message is always one line (line breaks inside it, e.g. from a quoted question, become spaces), so
    a log or a CI summary shows the whole reason.
    """

    def __init__(self, message: str, *, path: str | None = None, row: int | None = None,
                 field: str | None = None) -> None:
        where = ", ".join(
            part for part in (
                f"file {path}" if path else "",
                f"row {row}" if row is not None else "",
                f"field '{field}'" if field else "",
            ) if part
        )
        super().__init__(_LINE_BREAKS.sub(" ", f"{where}: {message}" if where else message))
        self.path, self.row, self.field = path, row, field


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
