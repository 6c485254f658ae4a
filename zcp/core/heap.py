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
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

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
