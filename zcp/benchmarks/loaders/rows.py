"""One source row as an `Item`: the row schema (text fields, ids, links to an original) and its checks.

A row's fields are named by its layout (`zcp.benchmarks.loaders.layouts._Spec.names`); `_parse_row` reads
them as text (JSON numbers as the text of their token, `zcp.benchmarks.loaders.files`), keeps the pairing
keys (`original_id`, `original_index`, the original's text) beside the item, and raises a one-line DataError
naming file, row and field for a missing, empty or mistyped field.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from zcp.benchmarks.loaders.files import _kind, _plain
from zcp.benchmarks.loaders.layouts import SOURCE_INDEX_FIELDS, _present, _Spec
from zcp.core.items import Item
from zcp.errors import DataError

log = logging.getLogger(__package__)  # one logger for the loaders, the name callers filter on


@dataclass
class _FloatAnswers:
    """Answers read from float-typed parquet columns (their text cannot be recovered), for one warning."""

    columns: frozenset[str]
    column: str | None = None
    integral: int = 0
    example: str = ""


def _text(value: Any, path: str, i: int, name: str, floats: _FloatAnswers | None = None) -> str | None:
    """A text field's value as text: strings as they are, JSON numbers as their token, None when absent."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise DataError("must be text or a number, not a boolean", path=path, row=i, field=name)
    if isinstance(value, str):
        s = str(value)  # a JSONNumber becomes the exact text of its token
    elif isinstance(value, int):
        s = str(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise DataError(f"not a finite number ({value})", path=path, row=i, field=name)
        if value.is_integer():
            s = str(int(value))
            if floats is not None:
                floats.column, floats.integral = name, floats.integral + 1
                floats.example = floats.example or f"{value!r} -> '{s}'"
        else:
            s = repr(value)
    elif isinstance(value, Decimal):
        s = str(value)
    else:
        raise DataError(f"must be text or a number, not {_kind(value)}", path=path, row=i, field=name)
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise DataError("holds an unpaired surrogate escape (\\ud800-\\udfff): not text", path=path, row=i,
                        field=name) from None
    return s


def _required(row: Mapping[str, Any], name: str, path: str, i: int, floats: _FloatAnswers | None = None) -> str:
    if name not in row or row[name] is None:
        raise DataError(f"missing ({_present(row)})", path=path, row=i, field=name)
    value = _text(row[name], path, i, name, floats)
    if value is None or not value.strip():
        raise DataError("missing: empty text", path=path, row=i, field=name)
    return value


def _gsm8k_answer(text: str, path: str, i: int) -> tuple[str, str]:
    if "####" not in text:
        raise DataError("no '#### <final answer>' marker", path=path, row=i, field="answer")
    if text.count("####") > 1:  # which one is the gold answer is a guess: refused (data.on_invalid=skip leaves it out)
        raise DataError(f"{text.count('####')} '####' markers (one final answer expected)", path=path, row=i,
                        field="answer")
    solution, _, final = text.rpartition("####")
    final = final.strip().replace(",", "")
    if not final:
        raise DataError("empty final answer after '####'", path=path, row=i, field="answer")
    return final, solution.strip()


def _key_text(value: Any) -> str | None:
    """A key value (id, index) as stripped text, leniently: None for absent, empty or non-scalar values."""
    try:
        text = _text(value, "", 0, "")
    except DataError:
        return None
    return text.strip() if text and text.strip() else None


@functools.lru_cache(maxsize=64)
def id_prefix(fmt: str, stem: str | None) -> str:
    """The prefix of the ids given to rows without one: the file's stem, for a GSM8K file `gsm8k_<stem>`.

    GSM8K's splits are files named test.jsonl and train.jsonl, so the split is the stem: `gsm8k_test`,
    `gsm8k_train`. Two benchmarks read in one run (an audited set and its control, data and a C/U split's
    source) must never share an id, and a fixed `gsm8k` prefix gave both splits `gsm8k-00000`. A stem that
    already names GSM8K (gsm8k_test.jsonl) is kept as it is. No file (a row built in code): `gsm8k` or `item`.
    """
    if fmt != "gsm8k":
        return stem or "item"
    if not stem:
        return "gsm8k"
    return stem if stem.lower().startswith("gsm8k") else f"gsm8k_{stem}"


def generated_id(fmt: str, stem: str | None, index: int) -> str:
    """The id of the row at 0-based position `index` of a file without an id field: `<id_prefix>-<5 digits>`."""
    return f"{id_prefix(fmt, stem)}-{index:05d}"


def _row_id(row: Mapping[str, Any], spec: _Spec, stem: str, index: int) -> tuple[str, bool]:
    """(id, written in the file?) of a row: the id field, else `generated_id` (gsm8k_test-00000, data-00000)."""
    value = _key_text(row.get(spec.id_field()))
    if value is not None:
        return value, True
    return generated_id(spec.format, stem, index), False


def _source_index(row: Mapping[str, Any], spec: _Spec) -> tuple[str | None, str | None]:
    """(value, field) of the source benchmark's index a data row carries (None, None when it has none)."""
    names = (spec.fields["original_index"],) if "original_index" in spec.fields else SOURCE_INDEX_FIELDS
    for name in names:
        value = _key_text(row.get(name))
        if value is not None:
            return value, name
    return None, None


@dataclass
class _Row:
    """One parsed row: its Item and what pairs it (links, own id, the original's text)."""

    item: Item
    row: int
    explicit_id: bool
    links: dict[str, str]
    link_fields: dict[str, str]
    original_text: tuple[str, str] | None  # (field, text)


@functools.lru_cache(maxsize=64)
def _file_name(path: str) -> tuple[str, str]:
    """(name, stem) of a source file's path: computed once per file, not per row (a Path per row cost a
    quarter of reading a 5,000-row benchmark)."""
    p = Path(path)
    return p.name, p.stem


def _parse_row(row: dict[str, Any], spec: _Spec, path: str, i: int, index: int,
               floats: _FloatAnswers | None = None) -> _Row:
    """Map one source row (1-based row i, 0-based position index) to a _Row; DataError when it can't."""
    n = spec.names(row, path, i)
    name, stem = _file_name(str(path))
    meta: dict[str, Any] = {"source_file": name, "row": i}
    float_answer = floats if (floats is not None and n["answer"] in floats.columns) else None
    question = _required(row, n["question"], path, i)
    answer = _required(row, n["answer"], path, i, float_answer)
    solution = _text(row.get(n["solution"]), path, i, n["solution"]) if n["solution"] else None
    if spec.format == "gsm8k":
        answer, solution = _gsm8k_answer(answer, path, i)
    if n["metadata"] and row.get(n["metadata"]) is not None:
        extra = _plain(row[n["metadata"]])
        if not isinstance(extra, dict):
            raise DataError(f"must be an object, not {_kind(extra)}", path=path, row=i, field=n["metadata"])
        meta.update(extra)
    if row.get(spec.id_field()) is not None:
        _text(row[spec.id_field()], path, i, spec.id_field())  # raises on a list/object/boolean id
    item_id, explicit = _row_id(row, spec, stem, index)
    links: dict[str, str] = {}
    link_fields: dict[str, str] = {}
    for key in ("original_id", "original_index"):
        name = n[key]
        if name and row.get(name) is not None:
            value = _text(row[name], path, i, name)
            if value is not None and value.strip():
                links[key], link_fields[key] = value.strip(), name
                meta[key] = value.strip()
    text = None
    if n["original_text"] and row.get(n["original_text"]) is not None:
        t = _text(row[n["original_text"]], path, i, n["original_text"])
        text = (n["original_text"], t) if t else None
    return _Row(Item(id=item_id, question=question, answer=answer, solution=solution or None, metadata=meta),
                i, explicit, links, link_fields, text)


def _float_warning(floats: _FloatAnswers, path: str, warnings: list[dict[str, Any]] | None) -> None:
    if floats.integral:
        _warn(warnings, path, f"answer column '{floats.column}' is float-typed (parquet): the answers' original "
                              f"text is lost; {floats.integral} integral value(s) read as integers, e.g. "
                              f"{floats.example}; store answers as strings to keep them exact")


def _warn(warnings: list[dict[str, Any]] | None, path: str, message: str) -> None:
    log.warning("%s: %s", path, message)
    if warnings is not None:
        warnings.append({"file": path, "warning": message})
