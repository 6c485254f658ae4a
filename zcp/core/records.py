"""One resumable JSONL record store: the records file of a detection run (zcp.probe.detect) and of a baselines
run (zcp.validate.baselines).

Why one: both runs append their results batch by batch so that a killed run (SIGKILL included) resumes where it
stopped, and both must read such a file back the same way. The rules, kept in one place:

- reading tolerates a torn last line (a writer killed mid-write): it is counted (`torn`) and dropped, never kept
  as half a record; a torn line anywhere else is corruption and raises DataError naming the file and row;
- `load` repairs the file before anything is appended to it: a torn last line, a last line without its newline
  (the next append would glue onto it) or records the caller drops (duplicated keys, a cut block) make it
  rewrite the file atomically (temporary file, fsync, rename);
- `append` writes one batch with ONE write call, then flush and fsync (or, `sync_behind`, fsync in the
  background while the caller goes on): a kill loses at most the batch in flight, and what it leaves of it is
  one torn last line;
- with a `key` function the store keeps the first record of each key (later duplicates, e.g. two writers before
  the run lock existed, are dropped by `load`; one that differs from the kept copy is warned about, naming which
  copy was kept: `conflicts`) and answers keyed lookups.

The serialisation is the projects' JSONL everywhere: `json.dumps(row, ensure_ascii=False)` and a newline.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from zcp.core.io import naming_write_errors
from zcp.errors import DataError, RunDirError

log = logging.getLogger(__name__)

Record = dict[str, Any]
KeyFn = Callable[[Record], Hashable]


# errnos of a write that mean the disk, not the program (a full disk or quota, a file larger than the file system or
# ulimit allows, an I/O error, a read-only or forbidden file): one line saying what the records file keeps
DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS, errno.EACCES}

_encode = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(row, ensure_ascii=False), without a new encoder per row


def _line(row: Record) -> str:
    return _encode(row) + "\n"


def _short(value: Any) -> str:
    """A value as a warning quotes it: its JSON, cut to 40 characters."""
    text = _encode(value)
    return text if len(text) <= 40 else text[:39] + "…"


class RecordStore:
    """A JSONL file of records, appended batch by batch and read back after a kill.

    `path`: the records file (created on the first append). `key`: what identifies a record (a caller's
    function, e.g. a detection unit's (split, variant, original_id, draw)); without it the store holds every
    record as it is. `fsync`: sync every appended batch to disk (the default; a kill of the machine, not only
    of the process, then keeps every finished batch). `sync_behind`: sync each batch in a background thread
    while the caller computes the next one (the next `append`, `rewrite` or `wait` waits for it first and raises
    its error): a kill of the process still loses nothing appended (the bytes are the OS's once `append`
    returns), a kill of the machine at most the last batch, and the disk's sync (milliseconds per batch) is off
    the caller's critical path.

    The records read or written through the store are in `records` (file order), and with a `key` indexed
    (`get`, `in`, `keys`).
    """

    def __init__(self, path: str | os.PathLike[str], key: KeyFn | None = None, *, fsync: bool = True,
                 sync_behind: bool = False) -> None:
        self.path = Path(path)
        self.key = key
        self.fsync = fsync
        self.sync_behind = sync_behind
        self._syncing: threading.Thread | None = None
        self._sync_error: BaseException | None = None
        self.records: list[Record] = []
        self._index: dict[Hashable, Record] = {}
        self.torn = 0  # torn last lines dropped by the last read (0 or 1)
        self.clean = True  # the last read found every line whole and the file ending in a newline
        self.mismatched = 0  # records the last `load`'s `expect` dropped
        # (key, differing fields, kept, dropped) of the later copies `unique` last dropped that differ from the kept
        self.conflicts: list[tuple[Hashable, list[str], Record, Record]] = []

    # ------------------------------------------------------------------------------ reading
    def read(self) -> list[Record]:
        """Every whole record on disk, in file order (a torn last line counted in `torn` and dropped; blank lines
        skipped); sets `clean`. Writes nothing and does not change `records`."""
        self.torn, self.clean = 0, True
        if not self.path.exists():
            return []
        raw = self.path.read_bytes()
        # lines end at b"\n" only (a record's text may hold U+2028 and the like, which str.splitlines splits
        # at); each line is decoded on its own, so a kill that cut a multi-byte character tears only that line
        lines = raw.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        rows: list[Record] = []
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line.decode("utf-8")))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                if i == len(lines) - 1:
                    self.torn = 1
                    continue
                why = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8"
                raise DataError(f"invalid JSON ({why})", path=str(self.path), row=i + 1) from e
        self.clean = not self.torn and (not raw or raw.endswith(b"\n"))
        return rows

    def unique(self, rows: Iterable[Record]) -> list[Record]:
        """The first record of each key, in order (every record without a `key`).

        A later record of a key whose content differs from the first one's (not a plain copy: two writers that
        probed the same unit differently) is dropped all the same, and listed in `conflicts` as (key, the fields
        that differ, the kept and the dropped record); `conflict_warning` says it in one line."""
        self.conflicts = []
        if self.key is None:
            return list(rows)
        seen: dict[Hashable, Record] = {}
        for r in rows:
            k = self.key(r)
            first = seen.setdefault(k, r)
            if first is not r and first != r:
                fields = sorted(f for f in {*first, *r} if first.get(f, ...) != r.get(f, ...))
                self.conflicts.append((k, fields, first, r))
        return list(seen.values())

    def conflict_warning(self) -> str | None:
        """One line on the records `unique` last dropped although they differ from the kept copy of their key
        (which copy was kept, and how they differ), or None when there were none."""
        if not self.conflicts:
            return None
        key, fields, kept, dropped = self.conflicts[0]
        f = fields[0]
        return (f"{self.path}: {len(self.conflicts)} unit(s) held twice with different content (e.g. {key}: "
                f"{', '.join(fields)} differ, {f} {_short(kept.get(f))} in the first copy, {_short(dropped.get(f))} "
                "in the later); the first copy in the file kept, the later dropped")

    def load(self, keep: Callable[[list[Record]], list[Record]] | None = None, *,
             expect: Callable[[Record], str | None] | None = None) -> list[Record]:
        """The finished records, with the file repaired for appending; they become `records`.

        Reads the file (`read`), drops the records `expect` finds a reason against (the caller's check that a
        record was made as planned, e.g. a detection record's prompt hash, convention and answer end against its
        unit's, `zcp.probe.planned`: a record of another configuration under the same key is not this run's, and
        dropping it before `unique` lets a right later copy stand; counted in `mismatched`, logged with the first
        reason), keeps the first record of each key (`unique`), then what `keep` returns of those (the caller's
        rule, e.g. only finished blocks; default: all). When that dropped a record, or the file had a torn last
        line or lacked its final newline, the file is rewritten atomically with the kept records, so the next
        append starts on a clean line, the dropped units are probed again and a rerun reads the same."""
        rows = self.read()
        self.mismatched = 0
        if expect is not None:
            reasons = [expect(r) for r in rows]
            bad = [w for w in reasons if w is not None]
            if bad:
                self.mismatched = len(bad)
                log.warning("%s: %d record(s) not made as this run plans them, dropped and probed again (e.g. %s)",
                            self.path, len(bad), bad[0])
                rows_kept = [r for r, w in zip(rows, reasons, strict=True) if w is None]
            else:
                rows_kept = rows
        else:
            rows_kept = rows
        kept = self.unique(rows_kept)
        if self.conflicts:
            log.warning("%s", self.conflict_warning())
        if keep is not None:
            kept = keep(kept)
        if self.torn:
            log.info("%s: dropped a half-written last line (a killed writer)", self.path)
        if len(kept) != len(rows) or not self.clean:
            self.rewrite(kept)
        else:
            self._set(kept)
        return list(self.records)

    # ------------------------------------------------------------------------------ lookup
    def get(self, key: Hashable) -> Record | None:
        """The record of `key` (the first one), or None; needs the store's `key` function."""
        self._need_key()
        return self._index.get(key)

    def keys(self) -> list[Hashable]:
        """The keys of `records`, in order; needs the store's `key` function."""
        self._need_key()
        return list(self._index)

    def __contains__(self, key: object) -> bool:
        self._need_key()
        return key in self._index

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    # ------------------------------------------------------------------------------ writing
    def append(self, rows: Sequence[Record]) -> None:
        """Append one batch: one write call for the whole batch, then flush (and fsync). A key already held keeps
        its first record in the index (the file holds what was written; `load` drops the later copy)."""
        if not rows:
            return
        text = "".join(_line(r) for r in rows)
        with self._kept_on_error(), naming_write_errors(self.path):
            self.wait()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                if self.fsync and not self.sync_behind:
                    os.fsync(f.fileno())
            if self.fsync and self.sync_behind:
                self._syncing = threading.Thread(target=self._sync, name=f"fsync {self.path.name}", daemon=True)
                self._syncing.start()
        for r in rows:
            self._add(r)

    @contextlib.contextmanager
    def _kept_on_error(self) -> Iterator[None]:
        """A disk error while writing (`DISK_ERRNOS`: a full disk, a file too large, an I/O error, ...) as one line
        (RunDirError: exit 2 at an entry point) naming the file, the error and how many records the file keeps; a
        rerun resumes from them (`load` drops what the failed write left of its batch)."""
        try:
            yield
        except OSError as e:
            if e.errno not in DISK_ERRNOS:
                raise
            name = errno.errorcode.get(e.errno or 0, str(e.errno))
            raise RunDirError(f"writing {self.path} failed: {e.strerror or e} (OSError {e.errno} {name}); "
                              f"{len(self.records)} records kept there, the batch in flight lost; free space (or fix "
                              "the disk) and run the same command again: a rerun resumes") from e

    def wait(self) -> None:
        """Wait for the background sync of the last batch (`sync_behind`), raising its error (naming the file)."""
        thread, self._syncing = self._syncing, None
        if thread is not None:
            thread.join()
        err, self._sync_error = self._sync_error, None
        if err is not None:
            with naming_write_errors(self.path):
                raise err

    def _sync(self) -> None:
        try:  # fsync through any descriptor of the file syncs its data
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            self._sync_error = e

    def rewrite(self, rows: Sequence[Record]) -> None:
        """Replace the file's content by `rows`, atomically (temporary file beside it, fsync, rename): a kill
        leaves either the old file or the new one, never a mix; `rows` become `records`."""
        tmp = self.path.with_suffix(".tmp")
        with naming_write_errors(self.path):
            self.wait()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                f.write("".join(_line(r) for r in rows))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        self._set(list(rows))

    # ------------------------------------------------------------------------------ internals
    def _set(self, rows: list[Record]) -> None:
        self.records, self._index = [], {}
        for r in rows:
            self._add(r)

    def _add(self, r: Record) -> None:
        self.records.append(r)
        if self.key is not None:
            self._index.setdefault(self.key(r), r)

    def _need_key(self) -> None:
        if self.key is None:
            raise TypeError(f"RecordStore({self.path}) has no key function: keyed lookup needs one")
