"""Small I/O helpers shared by runs: JSONL append/read, stable hashing, seeding."""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np


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


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[dict[str, Any]]) -> None:
    """Write rows as JSONL atomically (temp file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def append_jsonl(path: str | os.PathLike[str], rows: Iterable[dict[str, Any]]) -> None:
    """Append rows and flush to disk, so a killed run keeps everything already written."""
    path = Path(path)
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
            from zcp.data.schema import DataError

            raise DataError(f"invalid JSON ({e.msg})", path=str(path), row=i + 1) from e


class RunDirError(RuntimeError):
    """A run directory that cannot be used as it is (held by another run, or a state file cut short)."""


def write_json(path: str | os.PathLike[str], obj: Any, **kwargs: Any) -> Path:
    """Write JSON atomically (temp file, fsync, rename): a reader never sees half a file."""
    path = Path(path)
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


class RunLock:
    """An exclusive lock on a run directory: a second run on the same directory refuses at once.

    flock on `<dir>/.lock` (released by the OS when the process dies, even by SIGKILL, so a killed run
    never leaves a stale lock behind).
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.path = Path(run_dir) / ".lock"
        self._fh: Any = None

    def __enter__(self) -> RunLock:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise RunDirError(f"{self.path.parent} is in use by another run ({holder}); wait for it to finish "
                              "or use another output_dir") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}")
        fh.flush()
        self._fh = fh
        return self

    def __exit__(self, *exc: Any) -> None:
        import fcntl

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
