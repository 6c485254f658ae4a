"""Small I/O helpers shared by runs: JSONL append/read, stable hashing, seeding, run-dir locks, and the
file-system errors a user can act on (disk full, read-only or forbidden folder), named by path and errno."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import random
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from zcp.errors import RunDirError


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes (for manifests and build reports)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_MODEL_FILES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".json", ".model", ".txt", ".jinja")


def model_fingerprint(path: str | os.PathLike[str] | None, sample_bytes: int = 1 << 20) -> str | None:
    """Content fingerprint of a local model or adapter folder; None for a hub id or no path.

    Run directories and result caches include it, so a model rewritten in place at the same path is never
    mistaken for the old one. Each file contributes its name, size and first/last `sample_bytes` (not the
    whole file: hashing a 15 GB checkpoint on every run would cost minutes).
    """
    if not path:
        return None
    root = Path(path).expanduser()
    if not root.exists():
        return None
    files = [root] if root.is_file() else sorted(
        f for f in root.rglob("*") if f.is_file() and f.suffix in _MODEL_FILES and "checkpoint-" not in str(f))
    h = hashlib.sha256()
    for f in files:
        size = f.stat().st_size
        h.update(f"{f.relative_to(root) if f != root else f.name}|{size}|".encode())
        with open(f, "rb") as fh:
            h.update(fh.read(sample_bytes))
            if size > 2 * sample_bytes:
                fh.seek(size - sample_bytes)
                h.update(fh.read(sample_bytes))
            elif size > sample_bytes:
                h.update(fh.read())
    return h.hexdigest()[:16]


def stable_hash(text: str, n: int = 16) -> str:
    """Short hex digest of a string; identical across processes and machines."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


# ------------------------------------------------------------------------------------------ file-system errors
# errnos that mean the disk or the folder, not the program: one line naming the path (zcp.config.one_line_errors)
FS_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EIO}
_FS_ADVICE = {
    errno.ENOSPC: "free disk space there (or use an output_dir on another disk); a rerun resumes",
    errno.EDQUOT: "free space within your quota (or use an output_dir elsewhere); a rerun resumes",
    errno.EROFS: "use a writable output_dir",
    errno.EACCES: "use an output_dir you may write to, or fix its permissions",
    errno.EIO: "check the disk; a rerun resumes",
}
# What failed writes look like when a library reports them without an OSError: torch's zip writer
# ("PytorchStreamWriter failed writing file ...: file write failed", "unexpected pos N vs M"), safetensors
# ("IoError(Os { code: 28, kind: StorageFull ...})").
_WRITE_FAILURE_MARKERS = ("unexpected pos", "file write failed", "PytorchStreamWriter failed", "StorageFull",
                          "No space left", "code: 28")
LOW_FREE_BYTES = 64 << 20  # under this much free space a failed write is taken for a full disk


def fs_error_message(e: BaseException) -> str | None:
    """One line for a file-system error a user can act on (ENOSPC, EDQUOT, EROFS, EACCES, EIO): the path, the
    errno and what to do; None for any other exception (a bug keeps its traceback)."""
    if not isinstance(e, OSError) or e.errno not in FS_ERRNOS:
        return None
    where = e.filename if e.filename is not None else "a file"
    name = errno.errorcode.get(e.errno, str(e.errno))
    reason = e.strerror or os.strerror(e.errno)
    return f"{where}: {reason} (OSError {e.errno} {name}); {_FS_ADVICE[e.errno]}"


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Free bytes on the file system holding `path` (its nearest existing parent); None when unknown."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return int(shutil.disk_usage(p).free)
    except OSError:
        return None


def as_write_error(exc: BaseException, path: str | os.PathLike[str]) -> OSError | None:
    """The OSError (naming `path`) a failed write under `path` amounts to, or None when `exc` is no write failure.

    An OSError of `FS_ERRNOS` gets `path` as its file name when it has none (a write into an open file names
    nothing). A library error that only says the write failed (`_WRITE_FAILURE_MARKERS`: torch's checkpoint
    writer raises a bare "unexpected pos" RuntimeError on a full disk) becomes ENOSPC when the message or the
    free space (under `LOW_FREE_BYTES`) says the disk is full, else EIO, with the free space in the message."""
    if isinstance(exc, OSError):
        if exc.errno not in FS_ERRNOS:
            return None
        return exc if exc.filename is not None else OSError(exc.errno, exc.strerror or os.strerror(exc.errno),
                                                            str(path))
    text = " ".join(str(exc).split())
    if not any(m in text for m in _WRITE_FAILURE_MARKERS):
        return None
    free = free_bytes(path)
    full = any(m in text for m in ("No space left", "StorageFull", "code: 28")) or (free is not None
                                                                                      and free < LOW_FREE_BYTES)
    code = errno.ENOSPC if full else errno.EIO
    left = "unknown" if free is None else f"{free / 2**20:.0f} MiB"
    return OSError(code, f"{os.strerror(code)} while writing ({text[:160]}; free space there: {left})", str(path))


@contextlib.contextmanager
def naming_write_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Re-raise a failed write inside the block as the OSError `as_write_error` makes of it (naming `path`)."""
    try:
        yield
    except Exception as e:  # anything that is not a write failure is re-raised as it is
        err = as_write_error(e, path)
        if err is None or err is e:
            raise
        raise err from e


def check_writable(path: str | os.PathLike[str], min_free_bytes: int = 0, key: str = "output_dir") -> None:
    """RunDirError (one line) unless a run can write under `path`, checked before any model loads.

    The nearest existing folder of `path` must take a new file (a probe file, created and removed at once: a
    read-only mount or a folder without write permission fails here, not after the models loaded) and, when
    `min_free_bytes` is given, hold that much free space (`shutil.disk_usage`)."""
    p = Path(path).absolute()
    anchor = p
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    if not anchor.is_dir():
        raise RunDirError(f"{key}={path}: {anchor} is a file, not a folder")
    probe = anchor / f".zcp-write-check-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        name = errno.errorcode.get(e.errno or 0, str(e.errno))
        raise RunDirError(f"{key}={path} is not writable: {anchor}: {e.strerror or e} (OSError {e.errno} {name}); "
                          "use a writable output_dir") from None
    free = free_bytes(anchor) if min_free_bytes else None
    if free is not None and free < min_free_bytes:
        raise RunDirError(f"{key}={path}: {free / 2**20:.0f} MiB free on {anchor}, and this run needs at least "
                          f"{min_free_bytes / 2**20:.0f} MiB; free disk space or use an output_dir on another disk")


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[dict[str, Any]]) -> None:
    """Write rows as JSONL atomically (temp file, then rename)."""
    path = Path(path)
    with naming_write_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        os.replace(tmp, path)


def append_jsonl(path: str | os.PathLike[str], rows: Iterable[dict[str, Any]]) -> None:
    """Append rows and flush to disk, so a killed run keeps everything already written."""
    path = Path(path)
    with naming_write_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())


def read_jsonl(path: str | os.PathLike[str], *, tolerate_partial_last_line: bool = False) -> Iterator[dict[str, Any]]:
    """Yield rows of a JSONL file; a truncated last line (a killed writer) may be skipped."""
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as e:
            if tolerate_partial_last_line and i == len(lines) - 1:
                return
            from zcp.errors import DataError

            raise DataError(f"invalid JSON ({e.msg})", path=str(path), row=i + 1) from e





def write_json(path: str | os.PathLike[str], obj: Any, **kwargs: Any) -> Path:
    """Write JSON atomically (temp file, fsync, rename): a reader never sees half a file."""
    path = Path(path)
    with naming_write_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(obj, indent=2, default=str, **kwargs) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return path


def read_json(path: str | os.PathLike[str]) -> Any:
    """Read a JSON state file; a truncated or corrupt one raises RunDirError naming it and the way out."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunDirError(f"{path} is truncated or not valid JSON ({e}); zcp writes it atomically, so something "
                          "else cut it short: delete it to redo the step it records, or use a new output_dir") from None


_JOB_LOCKS: set[str] = set()  # lock files this process holds through a job's lock (`RunLock(job=True)`)


class RunLock:
    """An exclusive lock on a run directory: a second run on the same directory refuses at once.

    flock on `<dir>/.lock` (released by the OS when the process dies, even by SIGKILL, so a killed run
    never leaves a stale lock behind). `wait` (seconds, or `math.inf`) makes a second run wait that long for
    the holder instead: for a directory runs share on purpose (the simulations' base-model detection, whose
    records are the same whichever run writes them), it then resumes what the first one finished. `name` is
    the lock file's name (a second lock on the same directory, e.g. a queue taken before `.lock`).

    `job=True`: the lock a job's entry point takes on its run directory before it loads the model (so a second
    run is refused before loading one too); while it is held, the library functions the job calls may take
    `RunLock` on the same directory again in this process and pass (they hold it through the job's). Any other
    lock on the directory, a second job lock included, in this process or another, is refused as ever.
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, wait: float = 0.0, name: str = ".lock",
                 job: bool = False) -> None:
        self.path = Path(run_dir) / name
        self.wait = float(wait)
        self.job = job
        self._fh: Any = None
        self._key: str | None = None

    def __enter__(self) -> RunLock:
        import fcntl
        import logging

        self.path.parent.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(self.path)
        if not self.job and key in _JOB_LOCKS:  # held by this process's job, which called us
            return self
        fh = open(self.path, "a+")
        deadline, said = time.monotonic() + self.wait, False
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                fh.seek(0)
                holder = fh.read().strip() or "another process"
                if time.monotonic() >= deadline:
                    fh.close()
                    more = f" (waited {self.wait:.0f} s)" if self.wait else ""
                    raise RunDirError(f"{self.path.parent} is in use by another run ({holder}){more}; wait for it "
                                      "to finish or use another output_dir") from None
                if not said:
                    logging.getLogger(__name__).warning("%s is in use by another run (%s): waiting for it",
                                                        self.path.parent, holder)
                    said = True
                time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}")
        fh.flush()
        self._fh = fh
        if self.job:
            self._key = key
            _JOB_LOCKS.add(key)
        return self

    def __exit__(self, *exc: Any) -> None:
        import fcntl

        if self._key is not None:
            _JOB_LOCKS.discard(self._key)
            self._key = None
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (if importable) from one integer."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover
        pass
