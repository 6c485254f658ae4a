"""A benchmark file read and its items selected (`load_benchmark`, `load_items`), and items written back.

The `Benchmark` keeps the pairing keys of every row of its file (selected or not), which
`zcp.benchmarks.loaders.pairing` pairs reference and variant rows by.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zcp.benchmarks.loaders.duplicates import _Duplicates
from zcp.benchmarks.loaders.files import read_rows
from zcp.benchmarks.loaders.layouts import SOURCE_INDEX_FIELDS, _Spec
from zcp.benchmarks.loaders.rows import _float_warning, _FloatAnswers, _parse_row, _row_id, _source_index
from zcp.core.items import Item
from zcp.errors import DataError

log = logging.getLogger(__package__)  # one logger for the loaders, the name callers filter on

PAIR_BY = ("original_id", "original_index", "id", "position")


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

    Answers are the text in the file (`zcp.benchmarks.loaders.files`); skipped rows (also repeated questions left out by
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
