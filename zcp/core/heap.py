"""The cyclic garbage collector kept off a detection run's critical path.

Once a model has loaded, the process holds ~0.5M objects the collector tracks (modules, the model, the
tokenizer, the datasets), nearly all of which live until the process ends. A full collection traverses every
one of them (~0.15 s on a 2-core CPU), and a run's own allocations (units, prompts, token ids, records) trigger
several: measured on 5,000 scored units of a 2-layer model, ~0.08 ms per unit of garbage collection, a fifth
of that model's forward pass (docs/results/scoring.md). `long_lived_heap` moves what is alive when a run
starts out of the collector's generations (`gc.freeze`, the standard library's mechanism for long-lived
heaps) so those collections traverse only what the run made since, and puts it back on exit (`gc.unfreeze`).

What changes: nothing for objects freed by reference counting (almost all of them); a reference cycle
through an object that was alive on entry is collected after the exit instead of during the run.

`retain_freed_memory` keeps the C heap's freed memory in the process on glibc (`mallopt`), so a CPU model's
forward passes reuse their working memory instead of faulting it in afresh each pass (see its docstring).
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

log = logging.getLogger(__name__)

_lock = threading.Lock()
_depth = 0  # nesting of long_lived_heap in this process (a DiD's or a multi-convention run's detect inside a job's)
_ours = False  # whether the outermost entry froze the heap (False: it was frozen already, by a caller outside zcp)


@contextmanager
def long_lived_heap() -> Iterator[None]:
    """Freeze the collector's view of the heap for the block (`gc.freeze`) and unfreeze it on the way out.

    Re-entrant: only the outermost block freezes and unfreezes (an inner run's exit must not release the outer
    run's heap). A heap frozen on entry by someone else (`gc.get_freeze_count() > 0`, e.g. a server that froze
    before forking workers) is left as it is, and left frozen on exit: unfreezing would undo their freeze.
    Objects made inside the block stay in the normal generations and are collected as usual.
    """
    global _depth, _ours
    with _lock:
        if _depth == 0:
            _ours = gc.get_freeze_count() == 0
            if _ours:
                gc.freeze()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _ours:
                gc.unfreeze()
                _ours = False


# glibc's mallopt parameters (malloc.h) and the values set
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 256 << 20  # blocks below this come from the heap, not a fresh mmap each
TRIM_THRESHOLD = 1 << 30  # free memory kept at the heap's top before it is handed back to the system
# a user's own allocator settings or allocator, which are left alone
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES")
_retained: bool | None = None  # this process's outcome (None: not asked yet)


@cache
def glibc() -> Any:
    """The C library's handle (`ctypes.CDLL`) where it is glibc, with `mallopt` typed; else None."""
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def retain_freed_memory() -> bool:
    """Have glibc's malloc keep freed memory for reuse (once per process); True when the settings are in force.

    By default glibc serves each block above a dynamic threshold (128 KiB rising to at most 32 MiB) with its own
    mmap and returns it on free, and hands the heap's free top back to the system above 128 KiB. A forward pass
    on CPU allocates and frees the same activation buffers (tens of MB per layer and batch) every pass, so each
    pass faults its working memory in again, page by page, zeroed by the kernel: measured on the 2-core box, a
    20,000-unit detection run of the 2-layer bench model took 0.85-1.2M page faults and 4.5-5.7 s of system time,
    against 0.19M and 1.4-1.8 s with these settings, and 3-12% less wall time (docs/results/scoring.md). Blocks
    below `MMAP_THRESHOLD` now come from the heap and up to `TRIM_THRESHOLD` of free memory stays at its top, so
    the process keeps at most about its peak working memory, as with the allocators (jemalloc, tcmalloc) that
    PyTorch's CPU tuning guide recommends.

    Left alone (False): a platform without glibc, a process that preloads another allocator (`LD_PRELOAD`), and
    a user's own settings (`MALLOC_*_` variables, `GLIBC_TUNABLES`). Scores do not depend on it: only where
    memory comes from changes."""
    global _retained
    if _retained is not None:
        return _retained
    _retained = False
    preload = os.environ.get("LD_PRELOAD", "")
    if any(os.environ.get(k) for k in _USER_SETTINGS) or "malloc" in preload:
        log.info("allocator left as configured (%s)", "LD_PRELOAD" if "malloc" in preload else "MALLOC_* / GLIBC_TUNABLES")
        return False
    libc = glibc()
    if libc is None:
        return False
    _retained = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(_M_TRIM_THRESHOLD,
                                                                                          TRIM_THRESHOLD))
    log.info("glibc malloc keeps freed memory for reuse (mmap threshold %d MiB, trim threshold %d MiB): %s",
             MMAP_THRESHOLD >> 20, TRIM_THRESHOLD >> 20, _retained)
    return _retained


def release_freed_memory() -> None:
    """Hand the heap's free memory back to the system now (glibc `malloc_trim`), where `retain_freed_memory` keeps
    it: after a model is dropped (a DiD's model swap), so what it held is not kept as spare working memory."""
    if _retained:
        glibc().malloc_trim(0)
