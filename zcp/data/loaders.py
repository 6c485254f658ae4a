"""Load benchmark files into `Item`s, and reference / variant files paired to their originals.

Files are read through `datasets` (local JSONL, JSON or parquet). Adapters map source fields to the
item schema: `gsm8k` (`#### n` answers), `zcp_release` (the ZCP release: bare `question`/`answer`/
`solution`, or `<prefix>_problem`/`<prefix>_answer` with prefixes original/paraphrased/modified),
`jsonl` (configurable field names) and `items` (zcp's own JSONL). Every error names file, row, field.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zcp.data.schema import DataError, Item

FORMATS = ("gsm8k", "zcp_release", "jsonl", "items")
# Rows of reference/variant files name the original they belong to through one of these fields.
LINK_FIELDS = ("original_id", "original_index", "id")


def resolve_path(path: str | os.PathLike[str]) -> Path:
    """Resolve a data path: as given, else relative to the repository root (for `../shared/...` paths)."""
    p = Path(os.path.expanduser(str(path)))
    if p.exists() or p.is_absolute():
        return p
    root = Path(__file__).resolve().parents[2]
    return root / p if (root / p).exists() else p


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a local JSONL/JSON/parquet file with `datasets`; a malformed row is named in the error."""
    p = resolve_path(path)
    if not p.exists():
        raise DataError("file not found", path=str(p))
    suffix = p.suffix.lower()
    builder = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}.get(suffix)
    if builder is None:
        raise DataError(f"unsupported file type '{suffix}' (use .jsonl, .json or .parquet)", path=str(p))
    if builder == "json":
        _check_jsonl(p)  # datasets' own error does not say which line is bad
    import datasets

    datasets.disable_progress_bars()
    try:
        ds = datasets.load_dataset(builder, data_files=str(p), split="train")
    except Exception as e:  # a schema clash across rows etc.: re-raise with the file named
        raise DataError(f"could not be read by datasets: {e}", path=str(p)) from e
    return ds.to_list()


def _check_jsonl(p: Path) -> None:
    with open(p, encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"invalid JSON ({e.msg} at column {e.colno})", path=str(p), row=i) from e
            if not isinstance(row, dict):
                raise DataError("a row must be a JSON object", path=str(p), row=i)


def _field(row: Mapping[str, Any], name: str, path: str, i: int, *, required: bool = True) -> Any:
    value = row.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise DataError("missing or empty", path=path, row=i, field=name)
        return None
    return value


def _gsm8k_answer(text: str, path: str, i: int) -> tuple[str, str]:
    if "####" not in text:
        raise DataError("no '#### <final answer>' marker", path=path, row=i, field="answer")
    solution, _, final = text.rpartition("####")
    final = final.strip().replace(",", "")
    if not final:
        raise DataError("empty final answer after '####'", path=path, row=i, field="answer")
    return final, solution.strip()


def _row_to_item(row: dict[str, Any], fmt: str, path: str, i: int, index: int,
                 fields: Mapping[str, str], variant: str | None) -> Item:
    """Map one source row (1-based row i, 0-based index) to an Item."""
    meta: dict[str, Any] = {"source_file": Path(path).name, "row": i}
    if fmt == "gsm8k":
        question = str(_field(row, "question", path, i))
        answer, solution = _gsm8k_answer(str(_field(row, "answer", path, i)), path, i)
        item_id = str(row.get("id") or f"gsm8k-{index:05d}")
    elif fmt == "zcp_release":
        if variant in (None, "", "bare") or ("question" in row and f"{variant}_problem" not in row):
            qf, af = "question", "answer"
        else:
            qf = f"{variant}_problem"
            af = "answer" if variant == "paraphrased" or f"{variant}_answer" not in row else f"{variant}_answer"
        question = str(_field(row, qf, path, i))
        answer = str(_field(row, af, path, i))
        sol = row.get("solution") if qf == "question" else row.get(f"{variant}_solution", row.get("solution"))
        solution = str(sol) if sol else None
        item_id = str(row.get("id") or f"{Path(path).stem}-{index:05d}")
    elif fmt in ("jsonl", "items"):
        f = {"id": "id", "question": "question", "answer": "answer", "solution": "solution",
             "metadata": "metadata", **dict(fields or {})}
        question = str(_field(row, f["question"], path, i))
        answer = str(_field(row, f["answer"], path, i))
        sol = row.get(f["solution"])
        solution = str(sol) if sol else None
        raw_id = row.get(f["id"])
        item_id = str(raw_id) if raw_id not in (None, "") else f"{Path(path).stem}-{index:05d}"
        extra = row.get(f["metadata"])
        if extra is not None and not isinstance(extra, dict):
            raise DataError("must be an object", path=path, row=i, field=f["metadata"])
        meta.update(extra or {})
    else:
        raise DataError(f"unknown format '{fmt}' (one of {', '.join(FORMATS)})", path=path)
    for link in ("original_id", "original_index"):
        if row.get(link) is not None:
            meta[link] = row[link]
    return Item(id=item_id, question=question, answer=answer, solution=solution, metadata=meta)


def load_items(path: str | os.PathLike[str], format: str = "items", *, fields: Mapping[str, str] | None = None,
               variant: str | None = None, limit: int | None = None, unique_ids: bool = True,
               on_invalid: str = "error", skipped: list[dict[str, Any]] | None = None) -> list[Item]:
    """Load a benchmark file as Items; duplicate ids fail with both rows named.

    A row that cannot become an item (e.g. an empty answer) raises a DataError, or with
    `on_invalid="skip"` is left out and recorded in `skipped` (file, row, reason) so that the run
    can report it: never dropped silently.
    """
    if on_invalid not in ("error", "skip"):
        raise ValueError(f"on_invalid must be 'error' or 'skip', not {on_invalid!r}")
    rows = read_rows(path)
    spath = str(resolve_path(path))
    items: list[Item] = []
    seen: dict[str, int] = {}
    for index, row in enumerate(rows):
        i = index + 1
        try:
            item = _row_to_item(row, format, spath, i, index, fields or {}, variant)
        except DataError as e:
            if on_invalid == "error" or e.field is None:
                raise
            if skipped is not None:
                skipped.append({"file": spath, "row": i, "field": e.field, "reason": str(e)})
            continue
        if unique_ids:
            if item.id in seen:
                raise DataError(f"duplicate id '{item.id}' (first seen at row {seen[item.id]})",
                                path=spath, row=i, field="id")
            seen[item.id] = i
        items.append(item)
        if limit is not None and len(items) >= limit:
            break
    if not items:
        raise DataError("no rows", path=spath)
    return items


def pair_to_originals(rows: list[Item], originals: list[Item], path: str, *, require_all: bool = True,
                      what: str = "reference") -> dict[str, list[Item]]:
    """Group reference/variant Items under the id of the original they belong to.

    A row names its original by `original_id`, else `original_index` (0-based position in the
    originals), else its own `id` equal to an original's id. Several rows per original are allowed
    (m perturbations / k paraphrases). Unknown originals fail with the row named; originals without
    any row fail when `require_all` (listing the missing ids).
    """
    by_id = {it.id: it for it in originals}
    grouped: dict[str, list[Item]] = defaultdict(list)
    for r in rows:
        row = r.metadata.get("row")
        if "original_id" in r.metadata:
            oid, fld = str(r.metadata["original_id"]), "original_id"
        elif "original_index" in r.metadata:
            try:
                idx = int(r.metadata["original_index"])
            except (TypeError, ValueError) as e:
                raise DataError("not an integer", path=path, row=row, field="original_index") from e
            if not 0 <= idx < len(originals):
                raise DataError(f"index {idx} out of range (0..{len(originals) - 1})", path=path, row=row,
                                field="original_index")
            oid, fld = originals[idx].id, "original_index"
        else:
            oid, fld = r.id, "id"
        if oid not in by_id:
            raise DataError(f"names original '{oid}', which is not in the dataset", path=path, row=row, field=fld)
        grouped[oid].append(r)
    if require_all:
        missing = [it.id for it in originals if it.id not in grouped]
        if missing:
            shown = ", ".join(missing[:10]) + (f" (+{len(missing) - 10} more)" if len(missing) > 10 else "")
            raise DataError(f"{len(missing)} original item(s) have no {what} row: {shown}", path=path)
    return dict(grouped)


def load_paired(path: str | os.PathLike[str], originals: list[Item], format: str = "items", *,
                fields: Mapping[str, str] | None = None, variant: str | None = None,
                require_all: bool = True, what: str = "reference") -> dict[str, list[Item]]:
    """Load a reference (or paraphrase-variant) file and pair its rows to the originals."""
    rows = load_items(path, format, fields=fields, variant=variant, unique_ids=False)
    return pair_to_originals(rows, originals, str(resolve_path(path)), require_all=require_all, what=what)


def save_items(path: str | os.PathLike[str], items: list[Item]) -> None:
    """Write Items as zcp JSONL (format `items`), keeping `original_id` at top level for pairing."""
    from zcp.io import write_jsonl

    rows = []
    for it in items:
        d = it.to_dict()
        if "original_id" in it.metadata:
            d["original_id"] = it.metadata["original_id"]
        rows.append(d)
    write_jsonl(path, rows)
