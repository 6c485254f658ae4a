"""long_lived_heap: the heap frozen for a detection run and released after it, nested runs and callers' freezes
respected, garbage still collected; detect and probe_shard run under it."""

from __future__ import annotations

import gc
import weakref

import pytest
from fakes import FakeBackend

from zcp.core.heap import glibc, long_lived_heap
from zcp.core.items import Item
from zcp.probe.detect import DetectDataset, DetectSettings, detect
from zcp.probe.prompts import ProbeConfig


@pytest.fixture(autouse=True)
def _no_freeze_outside():
    assert gc.get_freeze_count() == 0  # every test starts and must end with nothing frozen
    yield
    leaked = gc.get_freeze_count()
    gc.unfreeze()
    assert leaked == 0


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref:
    """A reference cycle no name holds: only the cyclic collector frees it; a weak reference tells when."""
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_the_block_freezes_what_was_alive_and_the_exit_releases_it():
    with long_lived_heap():
        assert gc.get_freeze_count() > 1000  # the interpreter's own objects at least (modules, functions, this test)
    assert gc.get_freeze_count() == 0


def test_cycles_made_inside_are_collected_inside():
    with long_lived_heap():
        ref = _cycle()
        gc.collect()
        assert ref() is None


def test_a_cycle_alive_on_entry_waits_for_the_exit_then_is_collected():
    ref = _cycle()  # garbage already, not yet collected: frozen with the rest
    with long_lived_heap():
        gc.collect()
        assert ref() is not None  # the frozen generation is not traversed
    gc.collect()
    assert ref() is None


def test_nested_blocks_release_only_at_the_outermost_exit():
    with long_lived_heap():
        n = gc.get_freeze_count()
        with long_lived_heap():
            assert gc.get_freeze_count() == n  # the inner block does not freeze again
        assert gc.get_freeze_count() == n  # nor does its exit release the outer block's heap
    assert gc.get_freeze_count() == 0


def test_an_exception_still_releases_the_heap():
    with pytest.raises(RuntimeError), long_lived_heap():
        raise RuntimeError("a run that failed")
    assert gc.get_freeze_count() == 0


def test_a_heap_frozen_by_the_caller_is_left_frozen():
    # the property, not a count: frozen objects still die by refcount (a count taken before the block can fall
    # by a few under a parallel test run), but a cycle the caller froze is never traversed until they unfreeze
    ref = _cycle()
    gc.freeze()
    try:
        with long_lived_heap():
            gc.collect()
            assert ref() is not None
        gc.collect()
        assert ref() is not None  # the caller's freeze is not undone by the block's exit
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    gc.collect()
    assert ref() is None  # the check can fail: once unfrozen, the cycle is collected


class _Watching(FakeBackend):
    """Records the frozen count at every scoring call."""

    def __init__(self) -> None:
        super().__init__({})
        self.seen: list[int] = []

    def score(self, requests):
        self.seen.append(gc.get_freeze_count())
        return super().score(requests)


def _data() -> list[DetectDataset]:
    items = [Item(f"i{k}", f"Q{k}: what is {k}+{k}?", str(2 * k)) for k in range(8)]
    ref = {it.id: [Item(f"{it.id}::r0", f"R{k}: what is {k}+1?", str(k + 1), metadata={"original_id": it.id})]
           for k, it in enumerate(items)}
    return [DetectDataset("D", items, ref)]


_PROBE = ProbeConfig(metrics=("p_first", "p_all"))


def test_detect_probes_with_the_heap_frozen_and_releases_it(tmp_path):
    backend = _Watching()
    detect(backend, _data(), _PROBE, tmp_path, DetectSettings(bootstrap_samples=200, progress=False))
    assert backend.seen and all(n > 1000 for n in backend.seen)
    assert gc.get_freeze_count() == 0


def test_a_shard_probes_with_the_heap_frozen_and_releases_it(tmp_path):
    from zcp.probe.shard import probe_shard

    backend = _Watching()
    meta = probe_shard(backend, _data(), _PROBE, tmp_path, DetectSettings(bootstrap_samples=200, progress=False),
                       (0, 2), source="test")
    assert meta["n_units"] > 0 and backend.seen and all(n > 1000 for n in backend.seen)
    assert gc.get_freeze_count() == 0


# ------------------------------------------------------------------ retain_freed_memory (each case in a fresh process:
# the allocator's settings are process-wide and set once)
_FAULTS = """
import resource, sys, torch
from zcp.core import heap

def faults():  # minor page faults of 20 allocations of a 48 MiB buffer, each written then freed (after 10 to settle)
    for _ in range(10):
        torch.ones(12 << 20, dtype=torch.float32)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        torch.ones(12 << 20, dtype=torch.float32)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

default = faults()
applied = heap.retain_freed_memory()
print(default, faults(), applied, heap.retain_freed_memory())
"""


def _run(code: str, **env: str) -> list[str]:
    import os
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**clean, **env})
    return out.stdout.split()


@pytest.mark.skipif(glibc() is None, reason="glibc's malloc only")
def test_freed_memory_is_reused_instead_of_faulted_in_again():
    default, retained, applied, again = _run(_FAULTS)
    assert (applied, again) == ("True", "True")  # set once, the same answer after
    # by default a 48 MiB block is its own mmap, returned on free: every allocation faults its 12,288 pages in
    assert int(default) > 20 * 10_000
    # retained: once settled, the allocations reuse the pages already in
    assert int(retained) < int(default) / 5


@pytest.mark.skipif(glibc() is None, reason="glibc's malloc only")
@pytest.mark.parametrize("env", [{"MALLOC_TRIM_THRESHOLD_": "131072"}, {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"},
                                 {"LD_PRELOAD": "libjemalloc.so.2"}])
def test_a_users_own_allocator_settings_are_left_alone(env):
    code = "from zcp.core import heap; print(heap.retain_freed_memory())"
    if "LD_PRELOAD" in env:  # not a real preload (the library may be absent): only the variable is read
        code = "import os; os.environ['LD_PRELOAD'] = 'libjemalloc.so.2'; " + code
        env = {}
    assert _run(code, **env) == ["False"]


def test_a_cpu_backend_keeps_freed_memory(monkeypatch):
    from zcp.backends.hf import HFBackend
    from zcp.core import heap
    from zcp.core.testing import tiny_llama, train_tokenizer

    calls = []
    monkeypatch.setattr(heap, "retain_freed_memory", lambda: calls.append(1) or True)
    tok = train_tokenizer(["one two three 12 + 3 = 15"] * 4, vocab_size=300)
    HFBackend(tiny_llama(tok, hidden=32, layers=1, heads=2), tok)
    assert calls == [1]


@pytest.mark.skipif(glibc() is None, reason="glibc's malloc only")
def test_memory_retained_is_handed_back_on_release():
    code = """
import torch
from zcp.core import heap

def rss_kb():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1])

heap.retain_freed_memory()
base = rss_kb()
x = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB from the heap
del x
kept = rss_kb() - base
heap.release_freed_memory()
print(kept, rss_kb() - base)
"""
    kept, after = (int(v) for v in _run(code))
    assert kept > 60_000  # freed but kept for reuse
    assert after < 10_000  # handed back
