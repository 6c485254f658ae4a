"""A benchmark holds each question once: the duplicate check of every path that loads a benchmark.

Duplicates. A benchmark must not hold the same question twice: each copy would count as independent
evidence (50 items listed twice under new ids turn a clean model's p of 0.063 into 0.003). Questions are
compared after whitespace normalisation only (strip, runs of whitespace -> one space). Policy
`on_duplicate`: `error` (the default) refuses the file naming the ids; `merge` keeps the first occurrence
(file order) and lists every dropped row with the skipped rows. Copies with different gold answers
(`zcp.core.answers.answers_equal`) fail under both policies: they cannot be merged. Reference/variant rows of a
dropped copy pair to an id not selected and are left out. `check_duplicates` is the check; every path
that loads a benchmark calls it (detection, build_data, the simulation, the baselines).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from zcp.core.answers import answers_equal
from zcp.core.items import Item
from zcp.errors import DataError

log = logging.getLogger(__package__)  # one logger for the loaders, the name callers filter on

DUPLICATE_POLICIES = ("error", "merge")  # `on_duplicate`: refuse a repeated question, or count it once


def _norm(text: str) -> str:
    return " ".join(text.split())


class _Duplicates:
    """Tracks the questions of a benchmark as items arrive (in any order), to keep the first of each in file order.

    `add` takes an item and its 0-based file position and returns the position to leave out (the new item,
    or the copy kept so far when the new one comes earlier in the file), or None when its question is new.
    `finish` raises or reports (module docstring).
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
                rec.update(id=it.id, field="question", duplicate_of=first.id,
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
    `dropped` ({file, row, id, field, duplicate_of, reason}, what summary.json lists as skipped rows; table.md
    counts them in a warning line). Copies with
    different gold answers (`answers_equal` false) raise under both policies, naming the ids and answers.
    Why: a repeated item is not independent evidence, and would shrink the test's p-value with every copy.
    """
    dup = _Duplicates(on_duplicate, key)
    left_out = {dup.add(it, pos) for pos, it in enumerate(items)} - {None}
    dup.finish(path, name or (f"file {path}" if path else "the dataset"), dropped)
    return [it for pos, it in enumerate(items) if pos not in left_out]
