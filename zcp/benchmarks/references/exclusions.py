"""What an exact reference draw must avoid: the values the audited model was trained on.

The exact route (DESIGN.md "Reference set") draws references from the generator's own value law under the
same selection as the benchmark. The reserved word-problem pool (`zcp.benchmarks.reserved.benchmark_pool`) is defined by
a selection: the shipped base models' pretraining corpora exclude it, and those corpora cover almost all of
the small families' value spaces (regenerated from recipe.json: of add's 361 valid value pairs only the pool's
50 are outside the corpus; likewise subtract, multiply, divide and two_step; three_step keeps 20,314 of 31,005
combinations unseen). Given the corpus, the pool's items are uniform draws from the values the corpus does not
hold, so an exact reference must come from those values too: a reference the model saw in pretraining is not
exchangeable with an original it never saw (68% of the old near-perturbations had a corpus signature).

Sources of exclusions, combined by `exclusion_keys`:
- ``corpus:<model dir>`` (or a bare model dir holding recipe.json): the word-problem signatures of the model's
  pretraining corpus, regenerated from its recipe (`corpus_signatures`; the shipped folders carry the result in
  ``corpus_signatures.txt.gz``, checked against regeneration by the tests);
- ``items:<jsonl>`` (or a bare .jsonl path): the keys of the items in a file (a fine-tune's training items:
  `<run>/training_items.jsonl`, the leaked benchmark items);
- ``auto``: the shipped models' corpora when every item is in the reserved pool (the pool is what they never
  saw); nothing otherwise (a benchmark generated with another seed was not selected against any corpus).
"""

from __future__ import annotations

import functools
import gzip
import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from zcp.core.items import Item
from zcp.errors import DataError

log = logging.getLogger(__name__)

CORPUS_FILE = "corpus_signatures.txt.gz"


def item_key(item: Item) -> str | None:
    """The key of an item's values for exclusion: a word problem's signature, an ArithMark expression, else None."""
    meta = item.metadata
    if meta.get("source") == "wordproblem" and "family" in meta and "values" in meta:
        from zcp.benchmarks.wordproblems import signature

        return signature(item)
    if meta.get("source") == "arithmark" and "expression" in meta:
        return arithmark_key(str(meta["expression"]))
    return None


def arithmark_key(expression: str) -> str:
    """An ArithMark expression's key (whitespace-normalised text)."""
    return "arithmark:" + " ".join(str(expression).split())


def _recipe(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "recipe.json"
    if not path.is_file():
        raise DataError("no recipe.json: the pretraining corpus of this model cannot be regenerated", path=str(model_dir))
    return json.loads(path.read_text())


def regenerate_corpus_signatures(model_dir: str | Path) -> frozenset[str]:
    """Word-problem signatures of a model's pretraining corpus, rebuilt from its recipe.json (and its parent's,
    for continued pretraining). ~25 s per corpus of 150,000 items on this CPU."""
    from zcp.benchmarks.corpus import build_corpus
    from zcp.benchmarks.wordproblems import NumberRanges, generate_word_problems, signature, signatures

    model_dir = Path(model_dir)
    recipe = _recipe(model_dir)
    c = recipe["config"]
    limits = NumberRanges(**c["limits"])
    reserved = generate_word_problems(int(c["reserve_n"]), seed=int(c["reserve_seed"]), id_prefix="bench", limits=limits)
    corpus = build_corpus(int(c["n_train"]), int(c["seed"]), signatures(reserved), float(c["rewording_fraction"]),
                          families=c.get("families"), limits=limits, drill_fraction=float(c["drill_fraction"]))
    out = {signature(it) for it in corpus if it.metadata.get("source") == "wordproblem"}
    parent = (recipe.get("init_from") or {}).get("path")
    if parent:
        parent_dir = Path(parent)
        if not parent_dir.is_absolute() or not parent_dir.is_dir():
            parent_dir = model_dir.parent / Path(parent).name
        out |= corpus_signatures(parent_dir)
    return frozenset(out)


@functools.lru_cache(maxsize=8)
def corpus_signatures(model_dir: str | Path) -> frozenset[str]:
    """Word-problem signatures a model's pretraining corpus holds: read from its `corpus_signatures.txt.gz` when
    present (the shipped models), else regenerated from recipe.json."""
    model_dir = Path(model_dir).resolve()
    path = model_dir / CORPUS_FILE
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return frozenset(line.strip() for line in f if line.strip())
    log.info("regenerating the pretraining corpus of %s from its recipe.json (no %s)", model_dir, CORPUS_FILE)
    return regenerate_corpus_signatures(model_dir)


def write_corpus_signatures(model_dir: str | Path) -> Path:
    """Regenerate and store a model folder's corpus signatures (sorted, gzip, mtime 0: byte-stable)."""
    model_dir = Path(model_dir)
    sigs = sorted(regenerate_corpus_signatures(model_dir))
    path = model_dir / CORPUS_FILE
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write(("\n".join(sigs) + "\n").encode("utf-8"))
    return path


def shipped_model_dirs() -> list[Path]:
    """The shipped base models' folders (the reserved pool is unseen by all of them)."""
    from zcp.benchmarks.corpus import SHIPPED_MODELS, shipped_model_path

    return [p for p in map(shipped_model_path, SHIPPED_MODELS) if (p / "recipe.json").is_file()]


@functools.lru_cache(maxsize=1)
def reserved_pool_keys() -> frozenset[str]:
    """Signatures of the reserved word-problem pool (`zcp.benchmarks.reserved.benchmark_pool(300)`)."""
    from zcp.benchmarks.reserved import RESERVED_BENCHMARK_ITEMS, benchmark_pool
    from zcp.benchmarks.wordproblems import signatures

    return frozenset(signatures(benchmark_pool(RESERVED_BENCHMARK_ITEMS)))


def in_reserved_pool(items: Sequence[Item]) -> bool:
    """True when every item is a word problem whose values are one of the reserved pool's."""
    keys = [item_key(it) for it in items]
    pool = reserved_pool_keys()
    return bool(keys) and all(k is not None and k in pool for k in keys)


def _items_keys(path: Path) -> set[str]:
    from zcp.benchmarks.loaders import load_items

    out = set()
    for it in load_items(str(path), format="items"):
        k = item_key(it)
        if k is not None:
            out.add(k)
    return out


def exclusion_keys(sources: Iterable[str] | str | None, items: Sequence[Item]) -> tuple[frozenset[str], list[dict[str, Any]]]:
    """The keys to exclude for `sources` (see the module docstring), and a report entry per source."""
    if sources is None:
        sources = []
    if isinstance(sources, str):
        sources = [sources]
    keys: set[str] = set()
    report: list[dict[str, Any]] = []
    for src in sources:
        src = str(src)
        if src == "auto":
            if in_reserved_pool(items):
                for d in shipped_model_dirs():
                    got = corpus_signatures(d)
                    keys |= got
                    report.append({"source": f"corpus:{d.name}", "why": "auto: the items are the reserved pool, "
                                   "which the shipped models' pretraining corpora exclude", "keys": len(got)})
            else:
                report.append({"source": "auto", "why": "the items are not (all) from the reserved pool: no "
                               "corpus is known to have been selected against", "keys": 0})
            continue
        kind, _, rest = src.partition(":")
        if kind not in ("corpus", "items"):
            kind, rest = ("items" if src.endswith(".jsonl") else "corpus"), src
        path = Path(rest)
        if kind == "corpus":
            if not (path / "recipe.json").is_file() and not (path / CORPUS_FILE).is_file():
                raise DataError("reference.exclude: not a model folder with recipe.json or "
                                f"{CORPUS_FILE}", path=str(path))
            got = set(corpus_signatures(path))
        else:
            if not path.is_file():
                raise DataError("reference.exclude: no such items file", path=str(path))
            got = _items_keys(path)
        keys |= got
        report.append({"source": f"{kind}:{path}", "keys": len(got)})
    return frozenset(keys), report
