"""The checks every config schema uses: a bad value is one ConfigError naming the key as the user wrote it.

The lowest module of the config layer (it imports only zcp.errors), so that every schema, in zcp.config and in
the packages that define their own settings, checks values the same way without importing zcp.config.schemas.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
from collections.abc import Iterable, Iterator
from typing import Any

from zcp.errors import ConfigError

_ALIAS: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar("zcp_key_alias", default=())


@contextlib.contextmanager
def key_alias(canonical: str, actual: str) -> Iterator[None]:
    """While active, check_value names `canonical.x` as `actual.x`: a group's schema checked where the user set
    it under another name (`ref_model` is a ModelConfig whose messages say `model.`)."""
    token = _ALIAS.set((*_ALIAS.get(), (canonical, actual)))
    try:
        yield
    finally:
        _ALIAS.reset(token)


def user_key(key: str) -> str:
    """`key` as the user wrote it (the innermost matching `key_alias`)."""
    for canonical, actual in reversed(_ALIAS.get()):
        if canonical != actual and (key == canonical or key.startswith(canonical + ".")):
            return actual + key[len(canonical):]
    return key


def as_number(x: Any) -> float:
    """A number, or NaN (which fails every range check) for anything else, e.g. an unresolved string."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def check_value(ok: bool, key: str, value: Any, want: str) -> None:
    """Raise ConfigError naming the key (as the user wrote it: `user_key`) and value unless `ok`."""
    if not ok:
        raise ConfigError(f"{user_key(key)}={value!r}: must be {want}")


def check_seeds(seeds: Any, key: str) -> None:
    """Seeds: a non-empty list of distinct integers (they drive streams that must differ)."""
    check_value(len(seeds) >= 1 and len(set(seeds)) == len(seeds), key, list(seeds), "a non-empty list of distinct seeds")


def parse_shard(value: Any, key: str) -> tuple[int, int] | None:
    """A shard spec: "i/n" (integers, 0 <= i < n) as (i, n); None for null or "merge"; else ConfigError naming `key`."""
    if value is None or str(value) == "merge":
        return None
    parts = str(value).split("/")
    ok = len(parts) == 2 and all(p.strip().isdigit() for p in parts) and int(parts[0]) < int(parts[1])
    check_value(ok, key, value, "i/n with integers 0 <= i < n (shard i of n, e.g. 0/4), or merge (gather the shards)")
    return int(parts[0]), int(parts[1])


def refuse_shard(shard: Any, why: str) -> None:
    """ConfigError unless `run.shard` is null, `why` ending the message ("for X (only evaluate/run_detect.py ...)")."""
    check_value(shard is None, "run.shard", shard, f"null {why}")


def check_device(device: Any, key: str) -> None:
    """A `cuda` device only where CUDA is available (and the index exists), else ConfigError naming `key`."""
    if device is None or not str(device).startswith("cuda"):
        return
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = str(device).partition(":")[2]
    check_value(n > 0, key, device, "cpu or null here: CUDA is not available on this machine")
    check_value(not index or (index.isdigit() and int(index) < n), key, device, f"cuda or cuda:0..cuda:{n - 1}")


def unknown_key_message(where: str, key: str, known: Iterable[str], what: str = "") -> str:
    """"probe: unknown key 'zero_cot_prefx'; did you mean 'zero_cot_prefix'?" (else the known keys)."""
    known = sorted(str(k) for k in known)
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    place = f"{where}: unknown key" if where else "unknown top-level key"
    hint = f"did you mean {close[0]!r}?" if close else f"known: {known}"
    return f"{place} {key!r}{what}; {hint}"
