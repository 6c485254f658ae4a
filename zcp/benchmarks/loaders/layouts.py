"""The source layouts a benchmark file may have, and how each maps its fields to the item schema.

Adapters map source fields to the item schema:
- `gsm8k`: `question`, `answer` ending in `#### n` (the final answer; thousands separators dropped);
- `zcp_release`: the ZCP release files: bare `question`|`problem` / `answer` / `solution` (Omni-MATH
  dataset_c/u; the multi-domain files use `problem`), or `<prefix>_problem` / `<prefix>_answer` with
  prefix `original` (answer falls back to `answer`; `problem` for the multi-domain layout),
  `paraphrased` (answer in `answer`) or `modified` (the reference set), chosen by `variant`;
- `jsonl`/`items`: configurable field names (`fields`), zcp's own JSONL by default.

`_Spec` holds one file's choice (format, field map, variant) and names the source fields of a row; the row
itself becomes an `Item` in `zcp.benchmarks.loaders.rows`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zcp.errors import DataError

FORMATS = ("gsm8k", "zcp_release", "jsonl", "items")
RELEASE_VARIANTS = ("bare", "original", "paraphrased", "modified")
# keys of a `fields` map (format jsonl/items); None values mean "the default"
FIELD_KEYS = ("id", "question", "answer", "solution", "metadata", "original_id", "original_index",
              "original_question")
# where a data row keeps the source benchmark's index (the release: original_index, else index)
SOURCE_INDEX_FIELDS = ("original_index", "index", "idx")
# where a reference/variant row keeps its original's text, to check the pairing
ORIGINAL_TEXT_FIELDS = ("original_question", "original_problem")


def field_map(fields: Mapping[str, Any] | None, *, where: str = "fields") -> dict[str, str]:
    """The non-null entries of a `fields` map, checked against FIELD_KEYS."""
    out: dict[str, str] = {}
    for k, v in dict(fields or {}).items():
        if v is None or v == "":
            continue
        if k not in FIELD_KEYS:
            raise DataError(f"unknown key '{k}' (known: {', '.join(FIELD_KEYS)})", field=where)
        out[k] = str(v)
    return out


@dataclass
class _Spec:
    """How to read one file: its format, field map and (zcp_release) variant."""

    format: str
    fields: dict[str, str]
    variant: str | None

    @classmethod
    def make(cls, fmt: str, fields: Mapping[str, Any] | None, variant: str | None) -> _Spec:
        if fmt not in FORMATS:
            raise DataError(f"unknown format '{fmt}' (one of {', '.join(FORMATS)})", field="format")
        f = field_map(fields)
        if f and fmt not in ("jsonl", "items"):
            raise DataError(f"a field map applies to format jsonl or items; format {fmt} reads fixed fields "
                            f"(got {f})", field="fields")
        v = variant or None
        if fmt == "zcp_release":
            v = v or "bare"
            if v == "clean":
                v = "bare"
            if v not in RELEASE_VARIANTS:
                raise DataError(f"unknown variant '{v}' for format zcp_release (one of "
                                f"{', '.join(RELEASE_VARIANTS)})", field="variant")
        elif v is not None:
            raise DataError(f"variant '{v}' applies to format zcp_release only (format is {fmt})", field="variant")
        return cls(fmt, f, v)

    def id_field(self) -> str:
        return self.fields.get("id", "id")

    def names(self, row: Mapping[str, Any], path: str, i: int) -> dict[str, str | None]:
        """Source field names of question, answer, solution, metadata, link and original-text fields."""
        fmt = self.format
        links = {"original_id": "original_id", "original_index": "original_index"}
        if fmt in ("jsonl", "items"):
            f = self.fields
            text = f.get("original_question") or next((n for n in ORIGINAL_TEXT_FIELDS if n in row), None)
            return {"question": f.get("question", "question"), "answer": f.get("answer", "answer"),
                    "solution": f.get("solution", "solution"), "metadata": f.get("metadata", "metadata"),
                    "original_id": f.get("original_id", "original_id"),
                    "original_index": f.get("original_index", "original_index"), "original_text": text}
        if fmt == "gsm8k":
            text = next((n for n in ORIGINAL_TEXT_FIELDS if n in row), None)
            return {"question": "question", "answer": "answer", "solution": None, "metadata": None,
                    **links, "original_text": text}
        v = self.variant
        present = _present(row)
        if v == "bare":
            if "question" in row or "problem" not in row:
                q = "question"
                if "question" not in row and any(f"{p}_problem" in row for p in RELEASE_VARIANTS[1:]):
                    raise DataError(f"missing: this file uses the <prefix>_problem convention ({present}); "
                                    f"choose one with variant=original|paraphrased|modified", path=path, row=i,
                                    field="question")
            else:
                q = "problem"  # the release's multi-domain files
            return {"question": q, "answer": "answer", "solution": "solution", "metadata": None, **links,
                    "original_text": None}
        if v == "original":
            if "original_problem" in row:
                q, a, s = "original_problem", ("original_answer" if "original_answer" in row else "answer"), \
                    "original_solution"
            elif "problem" in row:  # multi-domain rows are originals
                q, a, s = "problem", "answer", "solution"
            else:
                bare = "; this is a bare file: leave variant unset" if "question" in row else ""
                raise DataError(f"missing (variant=original reads original_problem, or problem; {present}){bare}",
                                path=path, row=i, field="original_problem")
            return {"question": q, "answer": a, "solution": s, "metadata": None, **links, "original_text": None}
        q = f"{v}_problem"
        if q not in row:
            bare = "; this is a bare file: leave variant unset" if ("question" in row or "problem" in row) else ""
            raise DataError(f"missing (variant={v}; {present}){bare}", path=path, row=i, field=q)
        a = "paraphrased_answer" if v == "paraphrased" and "paraphrased_answer" in row else \
            ("answer" if v == "paraphrased" else "modified_answer")
        text = "original_problem" if "original_problem" in row else None
        return {"question": q, "answer": a, "solution": f"{v}_solution", "metadata": None, **links,
                "original_text": text}


def _present(row: Mapping[str, Any]) -> str:
    keys = list(row)
    shown = ", ".join(str(k) for k in keys[:15]) + (f", ... (+{len(keys) - 15})" if len(keys) > 15 else "")
    return f"fields present: {shown}" if keys else "the row has no fields"
