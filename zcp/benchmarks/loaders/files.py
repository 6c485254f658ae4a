"""Reading a local data file into rows: JSONL, JSON and parquet, every error naming the file and the line.

JSONL and JSON are parsed here with `json`, line by line, so that every error names the file and the line,
and so that **answers stay the text written in the file**: a JSON number keeps the exact text of its token
(`2.50` stays "2.50", `29` stays "29"; no type inference across rows, unlike Arrow, which turns a column
holding 2.5 and 29 into floats and 29 into "29.0"). Parquet is read with pyarrow (the reader `datasets`
uses); a parquet column is already typed: a float-typed answer column has lost its text (29 and 29.0 are
the same float), so integral values are written as integers ("29"), others in their shortest form ("2.5",
never "2.50"), and the load records a warning (`zcp.benchmarks.loaders.rows`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zcp.errors import DataError


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
    root = Path(__file__).resolve().parents[3]
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
