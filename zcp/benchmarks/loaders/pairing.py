"""Reference and variant files paired to their originals by one declared key.

Pairing. A reference or variant row names its original item by one declared key (`pair_by`):
`original_id` (the data item's id), `original_index` (the source benchmark's index, which the data rows
also carry in `original_index`, `index` or `idx`, compared as text: "4", "7417", "xfinbench_27"), `id`
(the row's own id equals the original's) or `position` (0-based row position in the data file, only
when asked for). Rows of originals that were not selected (limit, sample, skipped rows) are left out;
a row naming an original that is not in the data file at all is an error. When a row carries the
original's text (`original_question`/`original_problem`), it must match the paired item's question.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from zcp.benchmarks.loaders.benchmark import PAIR_BY, Benchmark
from zcp.benchmarks.loaders.duplicates import _norm
from zcp.benchmarks.loaders.files import read_rows, resolve_path
from zcp.benchmarks.loaders.layouts import _Spec
from zcp.benchmarks.loaders.rows import _float_warning, _FloatAnswers, _parse_row, _Row, _warn
from zcp.core.answers import answers_equal
from zcp.core.items import Item
from zcp.errors import DataError

log = logging.getLogger(__package__)  # one logger for the loaders, the name callers filter on


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
