"""Load benchmark files into `Item`s, and reference / variant files paired to their originals.

Reading. JSONL and JSON are parsed here with `json`, line by line, so that every error names the file
and the line, and so that **answers stay the text written in the file**: a JSON number keeps the exact
text of its token (`2.50` stays "2.50", `29` stays "29"; no type inference across rows, unlike Arrow,
which turns a column holding 2.5 and 29 into floats and 29 into "29.0"). Parquet is read with pyarrow
(the reader `datasets` uses); a parquet column is already typed: a float-typed answer column has lost
its text (29 and 29.0 are the same float), so integral values are written as integers ("29"),
others in their shortest form ("2.5", never "2.50"), and the load records a warning.

Adapters map source fields to the item schema:
- `gsm8k`: `question`, `answer` ending in `#### n` (the final answer; thousands separators dropped);
- `zcp_release`: the ZCP release files: bare `question`|`problem` / `answer` / `solution` (Omni-MATH
  dataset_c/u; the multi-domain files use `problem`), or `<prefix>_problem` / `<prefix>_answer` with
  prefix `original` (answer falls back to `answer`; `problem` for the multi-domain layout),
  `paraphrased` (answer in `answer`) or `modified` (the reference set), chosen by `variant`;
- `jsonl`/`items`: configurable field names (`fields`), zcp's own JSONL by default.

Pairing. A reference or variant row names its original item by one declared key (`pair_by`):
`original_id` (the data item's id), `original_index` (the source benchmark's index, which the data rows
also carry in `original_index`, `index` or `idx`, compared as text: "4", "7417", "xfinbench_27"), `id`
(the row's own id equals the original's) or `position` (0-based row position in the data file, only
when asked for). Rows of originals that were not selected (limit, sample, skipped rows) are left out;
a row naming an original that is not in the data file at all is an error. When a row carries the
original's text (`original_question`/`original_problem`), it must match the paired item's question.

Duplicates. A benchmark must not hold the same question twice: each copy would count as independent
evidence (50 items listed twice under new ids turn a clean model's p of 0.063 into 0.003). Questions are
compared after whitespace normalisation only (strip, runs of whitespace -> one space). Policy
`on_duplicate`: `error` (the default) refuses the file naming the ids; `merge` keeps the first occurrence
(file order) and lists every dropped row with the skipped rows. Copies with different gold answers
(`zcp.core.answers.answers_equal`) fail under both policies: they cannot be merged. Reference/variant rows of a
dropped copy pair to an id not selected and are left out. `check_duplicates` is the check; every path
that loads a benchmark calls it (detection, build_data, the simulation, the baselines).

Every error is a one-line `DataError` naming file, row and field.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from zcp.core.answers import answers_equal
from zcp.core.items import Item
from zcp.errors import DataError

log = logging.getLogger(__name__)

FORMATS = ("gsm8k", "zcp_release", "jsonl", "items")
DUPLICATE_POLICIES = ("error", "merge")  # `on_duplicate`: refuse a repeated question, or count it once
PAIR_BY = ("original_id", "original_index", "id", "position")
RELEASE_VARIANTS = ("bare", "original", "paraphrased", "modified")
# keys of a `fields` map (format jsonl/items); None values mean "the default"
FIELD_KEYS = ("id", "question", "answer", "solution", "metadata", "original_id", "original_index",
              "original_question")
# where a data row keeps the source benchmark's index (the release: original_index, else index)
SOURCE_INDEX_FIELDS = ("original_index", "index", "idx")
# where a reference/variant row keeps its original's text, to check the pairing
ORIGINAL_TEXT_FIELDS = ("original_question", "original_problem")


# ------------------------------------------------------------------------------------------ reading


class JSONNumber(str):
    """A JSON number kept as the exact text of its token ("2.50", "29", "1e3")."""

    def value(self) -> int | float:
        """The number itself, as `json` would have parsed it."""
        raise NotImplementedError


class _JSONInt(JSONNumber):
    def value(self) -> int:
        return int(self)


class _JSONFloat(JSONNumber):
    def value(self) -> float:
        return float(self)


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NonFinite(name)


def _loads(text: str) -> Any:
    return json.loads(text, parse_int=_JSONInt, parse_float=_JSONFloat, parse_constant=_reject_constant)


def _plain(value: Any) -> Any:
    """A parsed JSON value with numbers as int/float again (for metadata, where types matter)."""
    if isinstance(value, JSONNumber):
        return value.value()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__)


@dataclass
class RawFile:
    """The rows of a data file: (1-based row number, row) pairs, and the float-typed columns (parquet)."""

    path: str
    rows: list[tuple[int, dict[str, Any]]]
    float_columns: frozenset[str] = frozenset()


def resolve_path(path: str | os.PathLike[str]) -> Path:
    """Resolve a data path: as given, else relative to the repository root (for `../shared/...` paths)."""
    p = Path(os.path.expanduser(str(path)))
    if p.exists() or p.is_absolute():
        return p
    root = Path(__file__).resolve().parents[2]
    return root / p if (root / p).exists() else p


def read_rows(path: str | os.PathLike[str]) -> RawFile:
    """Read a local JSONL, JSON (an array of objects, or JSON Lines) or parquet file.

    JSON numbers come back as `JSONNumber` (the token's text); row numbers are 1-based lines (JSONL),
    array positions (JSON) or table rows (parquet). An empty file, bytes that are not UTF-8, invalid JSON
    and a row that is not an object raise a DataError naming the file and the row.
    """
    p = resolve_path(path)
    sp = str(p)
    if not p.exists():
        raise DataError("file not found", path=sp)
    if p.is_dir():
        raise DataError("is a directory, not a data file", path=sp)
    suffix = p.suffix.lower()
    if suffix == ".jsonl":
        rows = _read_jsonl(p.read_bytes(), sp)
        floats: frozenset[str] = frozenset()
    elif suffix == ".json":
        rows = _read_json(p.read_bytes(), sp)
        floats = frozenset()
    elif suffix == ".parquet":
        rows, floats = _read_parquet(p, sp)
    else:
        raise DataError(f"unsupported file type '{suffix}' (use .jsonl, .json or .parquet)", path=sp)
    if not rows:
        raise DataError("empty file: no rows", path=sp)
    return RawFile(sp, rows, floats)


def _decode(raw: bytes, path: str, row: int | None, offset: int = 0) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"not valid UTF-8: byte 0x{raw[e.start]:02x} at column {e.start + 1 - offset}",
                        path=path, row=row) from None


def _read_jsonl(data: bytes, path: str) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for i, raw in enumerate(data.split(b"\n"), start=1):
        if i == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark
            raw = raw[3:]
        line = _decode(raw, path, i)
        if not line.strip():
            continue
        try:
            row = _loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"invalid JSON ({e.msg} at column {e.colno})", path=path, row=i) from None
        except _NonFinite as e:
            raise DataError(f"invalid JSON ({e} is not a JSON number)", path=path, row=i) from None
        except RecursionError:
            raise DataError("invalid JSON (nested too deeply)", path=path, row=i) from None
        if not isinstance(row, dict):
            raise DataError(f"a row must be a JSON object, not {_kind(row)}", path=path, row=i)
        rows.append((i, row))
    return rows


def _read_json(data: bytes, path: str) -> list[tuple[int, dict[str, Any]]]:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataError(f"not valid UTF-8: byte 0x{data[e.start]:02x} at line {line}, column {col}",
                        path=path) from None
    if not text.strip():
        return []
    try:
        doc = _loads(text)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":  # JSON Lines in a .json file
            return _read_jsonl(data, path)
        raise DataError(f"invalid JSON ({e.msg} at line {e.lineno}, column {e.colno})", path=path) from None
    except _NonFinite as e:
        raise DataError(f"invalid JSON ({e} is not a JSON number)", path=path) from None
    except RecursionError:
        raise DataError("invalid JSON (nested too deeply)", path=path) from None
    if isinstance(doc, dict):  # one row
        doc = [doc]
    if not isinstance(doc, list):
        raise DataError(f"a .json file must hold an array of row objects (or JSON Lines), not {_kind(doc)}",
                        path=path)
    for i, row in enumerate(doc, start=1):
        if not isinstance(row, dict):
            raise DataError(f"a row must be a JSON object, not {_kind(row)}", path=path, row=i)
    return list(enumerate(doc, start=1))


def _read_parquet(p: Path, path: str) -> tuple[list[tuple[int, dict[str, Any]]], frozenset[str]]:
    import pyarrow.parquet as pq
    import pyarrow.types as pat

    try:
        table = pq.read_table(p)
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise DataError(f"not a readable parquet file ({type(e).__name__}: {e})", path=path) from e
    floats = frozenset(f.name for f in table.schema if pat.is_floating(f.type))
    return list(enumerate(table.to_pylist(), start=1)), floats


# ------------------------------------------------------------------------------------------ adapters


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


def _row_id(row: Mapping[str, Any], spec: _Spec, stem: str, index: int) -> tuple[str, bool]:
    """(id, written in the file?) of a row: the id field, else `<gsm8k|file stem>-<5-digit position>`."""
    value = _key_text(row.get(spec.id_field()))
    if value is not None:
        return value, True
    prefix = "gsm8k" if spec.format == "gsm8k" else stem
    return f"{prefix}-{index:05d}", False


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


def _parse_row(row: dict[str, Any], spec: _Spec, path: str, i: int, index: int,
               floats: _FloatAnswers | None = None) -> _Row:
    """Map one source row (1-based row i, 0-based position index) to a _Row; DataError when it can't."""
    n = spec.names(row, path, i)
    meta: dict[str, Any] = {"source_file": Path(path).name, "row": i}
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
    item_id, explicit = _row_id(row, spec, Path(path).stem, index)
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


# ------------------------------------------------------------------------------------------ duplicates


class _Duplicates:
    """Tracks the questions of a benchmark as items arrive (in any order), to keep the first of each in file order.

    `add` takes an item and its 0-based file position and returns the position to leave out (the new item,
    or the copy kept so far when the new one comes earlier in the file), or None when its question is new.
    `finish` raises or reports (module docstring: Duplicates).
    """

    def __init__(self, on_duplicate: str, key: str) -> None:
        if on_duplicate not in DUPLICATE_POLICIES:
            from zcp.errors import ConfigError

            raise ConfigError(f"{key}={on_duplicate!r}: must be one of {', '.join(DUPLICATE_POLICIES)}")
        self.policy, self.key = on_duplicate, key
        self.kept: dict[str, tuple[int, Item]] = {}
        self.copies: dict[str, list[tuple[int, Item]]] = defaultdict(list)  # question -> every later copy

    def add(self, item: Item, pos: int) -> int | None:
        q = _norm(item.question)
        if q not in self.kept:
            self.kept[q] = (pos, item)
            return None
        if pos < self.kept[q][0]:  # drawn out of file order (`sample`): the earlier row is the one kept
            self.kept[q], (pos, item) = (pos, item), self.kept[q]
        self.copies[q].append((pos, item))
        return pos

    def finish(self, path: str | None, name: str, dropped: list[dict[str, Any]] | None = None) -> None:
        """Raise for copies whose answers differ, and for any copy under `error`; else log the copies left out
        and append each to `dropped` as {file, row, id, field, reason}."""
        if not self.copies:
            return
        groups = sorted(((self.kept[q], sorted(c, key=lambda x: x[0])) for q, c in self.copies.items()),
                        key=lambda g: g[0][0])
        conflicts = [(first, it) for (_, first), copies in groups for _, it in copies
                     if not answers_equal(it.answer, first.answer)]
        if conflicts:
            shown = ", ".join(f"{a.id} = {b.id} ({a.answer!r} vs {b.answer!r})" for a, b in conflicts[:5])
            more = f" (+{len(conflicts) - 5} more)" if len(conflicts) > 5 else ""
            raise DataError(f"{name}: {len(conflicts)} question(s) appear more than once with different gold "
                            f"answers (ids {shown}{more}): they cannot be merged; fix the answers or drop the "
                            "copies")
        if self.policy == "error":
            shown = ", ".join(" = ".join([first.id, *(it.id for _, it in copies)])
                              for (_, first), copies in groups[:5])
            more = f", ... (+{len(groups) - 5} more)" if len(groups) > 5 else ""
            raise DataError(f"{name}: {len(groups)} question(s) appear more than once (ids {shown}{more}); "
                            f"set {self.key}=merge to count each once")
        ids = []
        for (_, first), copies in groups:
            where = f" (row {first.metadata['row']})" if "row" in first.metadata else ""
            for _, it in copies:
                rec: dict[str, Any] = {"file": path or name}
                if "row" in it.metadata:
                    rec["row"] = it.metadata["row"]
                rec.update(id=it.id, field="question",
                           reason=f"duplicate of '{first.id}'{where}: the same question, counted once "
                                  f"({self.key}=merge)")
                ids.append(it.id)
                if dropped is not None:
                    dropped.append(rec)
        log.warning("%s: %d repeated question(s) left out (%s=merge), e.g. %s", name, len(ids), self.key,
                    ", ".join(ids[:5]))


def check_duplicates(items: Sequence[Item], path: str | None = None, on_duplicate: str = "error", *,
                     name: str | None = None, key: str = "data.on_duplicate",
                     dropped: list[dict[str, Any]] | None = None) -> list[Item]:
    """The items of a benchmark with each question once: the check of every path that loads a benchmark.

    Questions are compared after whitespace normalisation (strip, runs of whitespace -> one space; nothing
    else). `on_duplicate="error"`: a repeated question raises a one-line DataError naming the file (`path`,
    or `name`) and the ids, first few groups and their count, and the config `key` that merges them.
    `"merge"`: the first occurrence (list order) is kept, every other copy is left out and appended to
    `dropped` ({file, row, id, field, reason}, what summary.json lists as skipped rows). Copies with
    different gold answers (`answers_equal` false) raise under both policies, naming the ids and answers.
    Why: a repeated item is not independent evidence, and would shrink the test's p-value with every copy.
    """
    dup = _Duplicates(on_duplicate, key)
    left_out = {dup.add(it, pos) for pos, it in enumerate(items)} - {None}
    dup.finish(path, name or (f"file {path}" if path else "the dataset"), dropped)
    return [it for pos, it in enumerate(items) if pos not in left_out]


# ------------------------------------------------------------------------------------------ benchmark


@dataclass
class Benchmark:
    """The items selected from a data file, with the pairing keys of every row of that file.

    Keys cover all rows (selected or not), so a reference row of an item left out by `limit`, `sample`
    or a skipped row is recognised and dropped, while a row naming an item the file does not hold fails.
    """

    path: str                                   # "" for in-memory items
    items: list[Item]
    ids: list[str]                              # id of every row, in file order
    rows: list[int]                             # 1-based row number of every row
    source_index: list[str | None]              # source benchmark index of every row (None: none)
    source_index_fields: set[str] = field(default_factory=set)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_items(cls, items: Sequence[Item], path: str = "") -> Benchmark:
        """A Benchmark of in-memory items (positions = list order; source index from metadata)."""
        src: list[str | None] = []
        fields: set[str] = set()
        for it in items:
            name = next((n for n in SOURCE_INDEX_FIELDS if it.metadata.get(n) not in (None, "")), None)
            src.append(str(it.metadata[name]) if name else None)
            if name:
                fields.add(name)
        return cls(path, list(items), [it.id for it in items], [it.metadata.get("row", k + 1) for k, it in
                                                                 enumerate(items)], src, fields)

    def key_map(self, pair_by: str) -> dict[str, str]:
        """Key (as text) -> item id over every row of the file; DataError when the key is ambiguous or absent."""
        if pair_by in ("id", "original_id"):
            keys: list[str | None] = list(self.ids)
        elif pair_by == "position":
            keys = [str(k) for k in range(len(self.ids))]
        elif pair_by == "original_index":
            if not self.source_index_fields:
                raise DataError("pair_by=original_index needs the source benchmark's index on the data rows "
                                f"(field {', '.join(SOURCE_INDEX_FIELDS)}, or name it with data.fields."
                                "original_index=FIELD) and they carry none; to pair by 0-based row position "
                                "in this file, set data.pair_by=position", path=self.path or None)
            keys = list(self.source_index)
        else:
            raise DataError(f"unknown pair_by '{pair_by}' (one of {', '.join(PAIR_BY)})", field="pair_by")
        out: dict[str, str] = {}
        first: dict[str, int] = {}
        for k, key in enumerate(keys):
            if key is None:
                continue
            if key in out:
                raise DataError(f"rows {first[key]} and {self.rows[k]} carry the same {pair_by} '{key}': "
                                f"pairing by it is ambiguous", path=self.path or None, row=self.rows[k])
            out[key], first[key] = self.ids[k], self.rows[k]
        return out

    @property
    def name(self) -> str:
        """How messages name the data: its file, or 'the dataset' for in-memory items."""
        return f"data file {self.path}" if self.path else "the dataset"


def load_benchmark(path: str | os.PathLike[str], format: str = "items", *, fields: Mapping[str, Any] | None = None,
                   variant: str | None = None, limit: int | None = None, sample: int | None = None,
                   seed: int = 0, on_invalid: str = "error", unique_ids: bool = True, on_duplicate: str = "error",
                   duplicate_key: str = "data.on_duplicate") -> Benchmark:
    """Read a data file and select its items: all, the first `limit`, or `sample` drawn at random.

    `limit` takes the first N usable rows in file order; `sample` draws N usable rows at random (seeded
    by `seed`) and keeps them in file order. Only the rows examined to find them are validated: with
    `on_invalid="skip"`, a row that cannot become an item (a missing or empty field) is left out and
    recorded in `skipped` (file, row, field, reason); otherwise it raises. Duplicate ids anywhere in the
    file fail with both rows named. A question repeated among the rows examined is refused, or with
    `on_duplicate="merge"` counted once (the earliest row kept, the others recorded in `skipped`; a left-out
    copy is not a usable row, so `limit`/`sample` still give N distinct questions); `duplicate_key` is the
    config key messages name (see `check_duplicates`).
    """
    if on_invalid not in ("error", "skip"):
        raise ValueError(f"on_invalid must be 'error' or 'skip', not {on_invalid!r}")
    if limit is not None and sample is not None:
        raise DataError("set data.limit (first N) or data.sample (N at random), not both", field="limit")
    for name, n in (("limit", limit), ("sample", sample)):
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise DataError(f"must be a positive integer, not {n!r}", field=name)
    spec = _Spec.make(format, fields, variant)
    dup = _Duplicates(on_duplicate, duplicate_key)
    raw = read_rows(path)
    sp = raw.path
    stem = Path(sp).stem
    ids, src, fields_seen = [], [], set()
    first_row: dict[str, int] = {}
    for index, (i, row) in enumerate(raw.rows):
        item_id, _ = _row_id(row, spec, stem, index)
        if unique_ids and item_id in first_row:
            raise DataError(f"duplicate id '{item_id}' (first seen at row {first_row[item_id]})", path=sp, row=i,
                            field=spec.id_field())
        first_row.setdefault(item_id, i)
        ids.append(item_id)
        value, name = _source_index(row, spec)
        src.append(value)
        if name:
            fields_seen.add(name)
    order: Sequence[int] = range(len(raw.rows))
    if sample is not None:
        order = random.Random(0 if seed is None else int(seed)).sample(range(len(raw.rows)), len(raw.rows))
    want = limit or sample or len(raw.rows)
    floats = _FloatAnswers(raw.float_columns) if raw.float_columns else None
    chosen: dict[int, Item] = {}
    skipped: list[dict[str, Any]] = []
    for index in order:
        if len(chosen) >= want:
            break
        i, row = raw.rows[index]
        try:
            parsed = _parse_row(row, spec, sp, i, index, floats)
        except DataError as e:
            if on_invalid == "error" or e.field is None:
                raise
            skipped.append({"file": sp, "row": i, "field": e.field, "reason": str(e)})
            continue
        chosen[index] = parsed.item
        out = dup.add(parsed.item, index)
        if out is not None:
            del chosen[out]
    n_invalid = len(skipped)
    dup.finish(sp, f"file {sp}", skipped)
    if not chosen:
        raise DataError(f"no usable rows ({len(skipped)} skipped)" if skipped else "no rows", path=sp)
    bench = Benchmark(sp, [chosen[k] for k in sorted(chosen)], ids, [i for i, _ in raw.rows], src, fields_seen,
                      skipped)
    if floats is not None:
        _float_warning(floats, sp, bench.warnings)
    if n_invalid:
        log.warning("%s: %d row(s) skipped (on_invalid=skip)", sp, n_invalid)
    return bench


def load_items(path: str | os.PathLike[str], format: str = "items", *, fields: Mapping[str, Any] | None = None,
               variant: str | None = None, limit: int | None = None, sample: int | None = None, seed: int = 0,
               unique_ids: bool = True, on_invalid: str = "error", skipped: list[dict[str, Any]] | None = None,
               warnings: list[dict[str, Any]] | None = None, on_duplicate: str = "error",
               duplicate_key: str = "data.on_duplicate") -> list[Item]:
    """Load a benchmark file as Items (see `load_benchmark`); skipped rows and warnings go to the lists given.

    Answers are the text in the file (module docstring); skipped rows (also repeated questions left out by
    `on_duplicate="merge"`) and warnings are never dropped silently: pass lists to receive them (a run
    lists them in summary.json).
    """
    bench = load_benchmark(path, format, fields=fields, variant=variant, limit=limit, sample=sample, seed=seed,
                           on_invalid=on_invalid, unique_ids=unique_ids, on_duplicate=on_duplicate,
                           duplicate_key=duplicate_key)
    if skipped is not None:
        skipped.extend(bench.skipped)
    if warnings is not None:
        warnings.extend(bench.warnings)
    return bench.items


# ------------------------------------------------------------------------------------------ pairing


def _norm(text: str) -> str:
    return " ".join(text.split())


def _snippet(text: str, n: int = 60) -> str:
    t = _norm(text)
    return repr(t if len(t) <= n else t[: n - 3] + "...")


def read_linked(path: str | os.PathLike[str], format: str = "items", *, fields: Mapping[str, Any] | None = None,
                variant: str | None = None, warnings: list[dict[str, Any]] | None = None) -> list[_Row]:
    """Every row of a reference or variant file, parsed (any bad row raises; ids need not be unique)."""
    spec = _Spec.make(format, fields, variant)
    raw = read_rows(path)
    floats = _FloatAnswers(raw.float_columns) if raw.float_columns else None
    out = [_parse_row(row, spec, raw.path, i, index, floats) for index, (i, row) in enumerate(raw.rows)]
    if floats is not None:
        _float_warning(floats, raw.path, warnings)
    return out


def resolve_pair_by(rows: Sequence[_Row], path: str, pair_by: str | None = None) -> str:
    """The declared pairing key, or (None) the one the first row carries: original_id, original_index, id."""
    if pair_by:
        if pair_by not in PAIR_BY:
            raise DataError(f"unknown pair_by '{pair_by}' (one of {', '.join(PAIR_BY)})", field="pair_by")
        return pair_by
    first = rows[0]
    for key in ("original_id", "original_index"):
        if key in first.links:
            return key
    if first.explicit_id:
        return "id"
    raise DataError("the rows name no original item: give them an original_id (an id of the data), an "
                    "original_index (the source benchmark index the data rows also carry) or the original's id, "
                    "or set data.pair_by=position to pair by 0-based row position in the data file",
                    path=path, row=first.row)


def pair_rows(rows: Sequence[_Row], originals: Benchmark, path: str, *, pair_by: str | None = None,
              require_all: bool = True, what: str = "reference",
              warnings: list[dict[str, Any]] | None = None, missing_key: str | None = None) -> dict[str, list[Item]]:
    """Group reference/variant rows under the id of the original they name by `pair_by` (module docstring).

    Several rows per original are allowed (m perturbations / k paraphrases), kept in file order. Rows of
    originals not selected are dropped; a row naming an original the data file does not hold fails, as
    does a row whose original text differs from the paired item's question. Selected originals without
    any row fail when `require_all` (listing the missing ids; `missing_key` names the config key whose value
    `skip` leaves them out instead, e.g. data.missing_reference). Rows repeating their original's question
    word for word (no perturbation) are counted in a warning. Reference rows (`what="reference"`) that are
    perturbed but whose gold answer equals their original's (`answers_equal`) get one warning each in
    `warnings` ({file, row, id, original_id, warning}) and one log line with the count: an exact
    perturbation may share the answer by chance, so they are kept, but many of them mean the perturbation
    did not change what the item asks.
    """
    if not rows:
        raise DataError("no rows", path=path)
    by = resolve_pair_by(rows, path, pair_by)
    keys = originals.key_map(by)
    selected = {it.id: it for it in originals.items}
    data_row = dict(zip(originals.ids, originals.rows, strict=True))
    grouped: dict[str, list[Item]] = defaultdict(list)
    dropped = identical = 0
    same_answer: list[dict[str, Any]] = []
    for r in rows:
        if by == "id":
            if not r.explicit_id:
                raise DataError("has no id to pair by (pair_by=id)", path=path, row=r.row, field="id")
            key, fld = r.item.id, "id"
        else:
            link = "original_id" if by == "original_id" else "original_index"
            if link not in r.links:
                raise DataError(f"missing (pair_by={by}; the rows name their original in field '{link}')",
                                path=path, row=r.row, field=link)
            key, fld = r.links[link], r.link_fields[link]
        if by == "position":
            try:
                pos = int(key)
            except ValueError:
                raise DataError(f"'{key}' is not a row position (pair_by=position)", path=path, row=r.row,
                                field=fld) from None
            if not 0 <= pos < len(originals.ids):
                raise DataError(f"position {pos} is out of range: {originals.name} has "
                                f"{len(originals.ids)} rows (0..{len(originals.ids) - 1}; pair_by=position)",
                                path=path, row=r.row, field=fld)
            key = str(pos)
        if key not in keys:
            raise DataError(f"names original '{key}', which is not in {originals.name} "
                            f"(pair_by={by})", path=path, row=r.row, field=fld)
        oid = keys[key]
        original = selected.get(oid)
        if original is None:  # left out by limit / sample / a skipped row
            dropped += 1
            continue
        if r.original_text is not None and _norm(r.original_text[1]) != _norm(original.question):
            raise DataError(f"the original's text {_snippet(r.original_text[1])} differs from the question of data "
                            f"item '{oid}' (row {data_row.get(oid)} of {originals.name}) it is paired to by "
                            f"{by}='{key}': {_snippet(original.question)}", path=path, row=r.row,
                            field=r.original_text[0])
        if _norm(r.item.question) == _norm(original.question):
            identical += 1
        elif what == "reference" and answers_equal(r.item.answer, original.answer):
            same_answer.append({"file": path, "row": r.row, "id": r.item.id, "original_id": oid,
                                "warning": f"reference answer equals the original's ({original.answer})"})
        grouped[oid].append(r.item)
    n_paired = sum(len(v) for v in grouped.values())
    log.info("%s: %d %s row(s) paired by %s to %d item(s); %d row(s) of items not selected left out",
             path, n_paired, what, by, len(grouped), dropped)
    if n_paired and identical == n_paired:
        _warn(warnings, path, f"{what} set identical to the data: all {n_paired} {what} rows repeat their "
                              f"original's question word for word (no perturbation: the test cannot find evidence)")
    elif identical:
        _warn(warnings, path, f"{identical} of {n_paired} {what} rows repeat their original's question word for "
                              f"word (not perturbed)")
    if same_answer:
        log.warning("%s: %d of %d %s rows have their original's gold answer (kept; listed in data_warnings), "
                    "first row %d", path, len(same_answer), n_paired, what, same_answer[0]["row"])
        if warnings is not None:
            warnings.extend(same_answer)
    if require_all:
        missing = [it.id for it in originals.items if it.id not in grouped]
        if missing:
            shown = ", ".join(missing[:10]) + (f" (+{len(missing) - 10} more)" if len(missing) > 10 else "")
            hint = (f"; set {missing_key}=skip to leave them out (counted in table.md and summary.json)"
                    if missing_key else "")
            raise DataError(f"{len(missing)} original item(s) have no {what} row: {shown} (of "
                            f"{len(originals.items)} selected){hint}", path=path)
    return dict(grouped)


def load_paired(path: str | os.PathLike[str], originals: Benchmark | Sequence[Item], format: str = "items", *,
                fields: Mapping[str, Any] | None = None, variant: str | None = None, pair_by: str | None = None,
                require_all: bool = True, what: str = "reference",
                warnings: list[dict[str, Any]] | None = None, missing_key: str | None = None) -> dict[str, list[Item]]:
    """Load a reference (or paraphrase-variant) file and pair its rows to the originals (see `pair_rows`).

    `originals` is best the `Benchmark` the items came from (its keys cover rows not selected); a plain
    list of Items is taken as the whole data file (positions = list order).
    """
    bench = originals if isinstance(originals, Benchmark) else Benchmark.from_items(originals)
    rows = read_linked(path, format, fields=fields, variant=variant, warnings=warnings)
    return pair_rows(rows, bench, str(resolve_path(path)), pair_by=pair_by, require_all=require_all, what=what,
                     warnings=warnings, missing_key=missing_key)


def save_items(path: str | os.PathLike[str], items: list[Item]) -> None:
    """Write Items as zcp JSONL (format `items`), keeping `original_id` at top level for pairing."""
    from zcp.core.io import write_jsonl

    rows = []
    for it in items:
        d = it.to_dict()
        if "original_id" in it.metadata:
            d["original_id"] = it.metadata["original_id"]
        rows.append(d)
    write_jsonl(path, rows)
