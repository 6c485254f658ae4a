"""C/U split: which items are leaked into training (Dataset C) and which are held out (Dataset U).

The split is written as a JSON manifest (ids of C and U, seed, fraction, stratification key, source
file hash, zcp version) that training and detection both read, so the ground truth of every later
experiment is on disk. Splits are seeded, independent of the input order, and even: within each
stratum |C| = round(c_fraction * n) up to one item, and overall |C| = round(c_fraction * N), so with
c_fraction = 0.5 the two halves differ by at most one item per stratum and overall.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from zcp.core.items import Item
from zcp.errors import DataError

MANIFEST_FORMAT = "zcp.split_manifest/1"


def _zcp_version() -> str:
    from zcp import __version__

    return f"zcp {__version__}"


@dataclass
class Manifest:
    """A C/U split of a set of items, with everything needed to reproduce and audit it."""

    c_ids: list[str]
    u_ids: list[str]
    seed: int
    c_fraction: float = 0.5
    stratify_by: str | None = None
    source_path: str | None = None
    source_sha256: str | None = None
    created_by: str = field(default_factory=_zcp_version)
    strata: dict[str, dict[str, int]] = field(default_factory=dict)

    def label(self, item_id: str) -> Literal["C", "U"]:
        """'C' or 'U' for an id of this split; KeyError for an id the split does not know."""
        if item_id in set(self.c_ids):
            return "C"
        if item_id in set(self.u_ids):
            return "U"
        raise KeyError(item_id)

    def labels(self) -> dict[str, Literal["C", "U"]]:
        """id -> 'C' or 'U' for every id of the split (for tagging per-item records)."""
        return {i: "C" for i in self.c_ids} | {i: "U" for i in self.u_ids}

    def subset(self, items: Sequence[Item], which: Literal["C", "U"]) -> list[Item]:
        """The items of split `which`, in manifest order; DataError if any of its ids is missing."""
        if which not in ("C", "U"):
            raise ValueError(f"split must be 'C' or 'U', got {which!r}")
        by_id: dict[str, Item] = {}
        for item in items:
            if item.id in by_id:
                raise DataError(f"duplicate item id {item.id!r}", path=self.source_path, field="id")
            by_id[item.id] = item
        ids = self.c_ids if which == "C" else self.u_ids
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise DataError(f"{len(missing)} id(s) of split {which} missing from the items, first {missing[0]!r}",
                            path=self.source_path, field="id")
        return [by_id[i] for i in ids]

    def check_source(self, path: str | os.PathLike[str]) -> None:
        """Raise DataError if `path` is not the file this split was made from (SHA-256 differs)."""
        from zcp.core.io import sha256_file

        if self.source_sha256 is None:
            raise DataError("manifest records no source hash", path=str(path), field="source_sha256")
        actual = sha256_file(path)
        if actual != self.source_sha256:
            raise DataError(f"source file hash {actual[:12]} != manifest's {self.source_sha256[:12]}",
                            path=str(path), field="source_sha256")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready content (with a format tag and counts)."""
        return {"format": MANIFEST_FORMAT, "n_c": len(self.c_ids), "n_u": len(self.u_ids), **asdict(self)}

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the manifest as JSON (atomically)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Manifest:
        """Read and validate a manifest; DataError naming the file and the bad field."""
        p = str(path)
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise DataError(f"invalid JSON ({e.msg}, line {e.lineno})", path=p) from e
        except OSError as e:
            raise DataError(f"cannot read manifest ({e.strerror})", path=p) from e
        if not isinstance(d, dict):
            raise DataError("manifest must be a JSON object", path=p)
        if d.get("format", MANIFEST_FORMAT) != MANIFEST_FORMAT:
            raise DataError(f"unknown format {d.get('format')!r}, expected {MANIFEST_FORMAT}", path=p, field="format")
        for key in ("c_ids", "u_ids"):
            ids = d.get(key)
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise DataError("must be a list of string ids", path=p, field=key)
            if len(set(ids)) != len(ids):
                raise DataError("duplicate ids", path=p, field=key)
        both = set(d["c_ids"]) & set(d["u_ids"])
        if both:
            raise DataError(f"{len(both)} id(s) in both C and U, e.g. {sorted(both)[0]!r}", path=p, field="u_ids")
        if not isinstance(d.get("seed"), int) or isinstance(d.get("seed"), bool):
            raise DataError("must be an integer", path=p, field="seed")
        cf = d.get("c_fraction")
        if not isinstance(cf, int | float) or isinstance(cf, bool) or not 0 < cf < 1:
            raise DataError("must be a number in (0, 1)", path=p, field="c_fraction")
        for key in ("stratify_by", "source_path", "source_sha256", "created_by"):
            if d.get(key) is not None and not isinstance(d[key], str):
                raise DataError("must be a string or null", path=p, field=key)
        for key, n in (("n_c", len(d["c_ids"])), ("n_u", len(d["u_ids"]))):
            if key in d and d[key] != n:
                raise DataError(f"says {d[key]} but the id list has {n}", path=p, field=key)
        strata = d.get("strata") or {}
        if not isinstance(strata, dict):
            raise DataError("must be an object", path=p, field="strata")
        return cls(c_ids=list(d["c_ids"]), u_ids=list(d["u_ids"]), seed=d["seed"], c_fraction=float(cf),
                   stratify_by=d.get("stratify_by"), source_path=d.get("source_path"),
                   source_sha256=d.get("source_sha256"), created_by=d.get("created_by") or "unknown",
                   strata=dict(strata))


def _stratum_key(item: Item, stratify_by: str | None) -> str:
    if stratify_by is None:
        return "all"
    if stratify_by not in item.metadata:
        raise DataError(f"item {item.id!r} has no metadata key to stratify by", field=f"metadata.{stratify_by}")
    return str(item.metadata[stratify_by])


def split_items(items: Sequence[Item], seed: int, c_fraction: float = 0.5, stratify_by: str | None = None,
                *, source_path: str | os.PathLike[str] | None = None) -> Manifest:
    """Seeded, even, optionally stratified C/U split; `source_path` (the items' file) is hashed into the manifest.

    Each stratum gets floor(c_fraction * n) C items plus possibly one more: the extra items go to the
    strata with the largest remainders (ties broken by the seed) until |C| = round(c_fraction * N).
    Which items go to C does not depend on the order of `items`; the id lists keep that order.
    """
    if not 0 < c_fraction < 1:
        raise ValueError(f"c_fraction must be in (0, 1), got {c_fraction}")
    strata: dict[str, list[str]] = {}
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise DataError(f"duplicate item id {item.id!r}", path=None if source_path is None else str(source_path),
                            field="id")
        seen.add(item.id)
        strata.setdefault(_stratum_key(item, stratify_by), []).append(item.id)

    keys = sorted(strata)
    quota = {k: math.floor(c_fraction * len(strata[k])) for k in keys}
    remainder = {k: c_fraction * len(strata[k]) - quota[k] for k in keys}
    total = math.floor(c_fraction * len(seen) + 0.5)  # round half up
    order_rng = random.Random(f"split:{seed}:extras")
    tiebreak = {k: order_rng.random() for k in keys}
    for k in sorted((k for k in keys if remainder[k] > 1e-12), key=lambda k: (-remainder[k], tiebreak[k])):
        if sum(quota.values()) >= total:
            break
        quota[k] += 1

    c_set: set[str] = set()
    counts: dict[str, dict[str, int]] = {}
    for k in keys:
        ids = sorted(strata[k])  # input order must not matter
        random.Random(f"split:{seed}:{k}").shuffle(ids)
        c_set.update(ids[:quota[k]])
        counts[k] = {"C": quota[k], "U": len(ids) - quota[k]}

    order = [item.id for item in items]
    sha = None
    if source_path is not None:
        from zcp.core.io import sha256_file

        sha = sha256_file(source_path)
    return Manifest(c_ids=[i for i in order if i in c_set], u_ids=[i for i in order if i not in c_set],
                    seed=seed, c_fraction=c_fraction, stratify_by=stratify_by,
                    source_path=None if source_path is None else str(source_path), source_sha256=sha,
                    strata=counts)
