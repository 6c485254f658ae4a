"""The benchmark a contamination run splits into C and U, and the split: generated word problems, a benchmark
file, the `data` group, or given C and U files (`split.c_path`, `split.u_path`); the C/U manifest the split
stage writes (`write_manifest`) or will write (`planned_manifest`).

Whatever the source, a question may appear once (`zcp.benchmarks.loaders.check_duplicates`, policy
`benchmark.on_duplicate`): a repeated item trained on or probed twice would count as two pieces of evidence.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from zcp.benchmarks.data_config import DataConfig
from zcp.core.io import sha256_file
from zcp.core.items import Item
from zcp.core.rundir import MANIFEST
from zcp.errors import ConfigError, DataError
from zcp.simulate.rundir import resolve_model_path
from zcp.simulate.settings import field_default, sim_config

DUPLICATE_KEY = "benchmark.on_duplicate"


def load_benchmark(cfg: Any) -> list[Item]:
    """The benchmark items: generated word problems, an Item/GSM8K-style file, the `data` config group, or
    the given C and U files (`split.c_path`, `split.u_path`: C's items then U's).

    Whatever the source, a question may appear once (`zcp.benchmarks.loaders.check_duplicates`, policy
    `benchmark.on_duplicate`: error, or merge to keep the first copy; copies with different answers fail):
    a repeated item trained on or probed twice would count as two pieces of evidence."""
    from zcp.benchmarks.loaders import check_duplicates, load_items

    s = sim_config(cfg)
    b = s.benchmark
    if s.given_split:
        c_items, u_items = load_split_files(s)
        return c_items + u_items
    policy = b.on_duplicate
    if b.source == "wordproblems":
        from zcp.benchmarks.wordproblems import generate_word_problems

        items = generate_word_problems(int(b.n), seed=int(b.seed), families=b.families, id_prefix=b.id_prefix)
        return check_duplicates(items, None, policy, name="the generated word-problem benchmark", key=DUPLICATE_KEY)
    if b.source == "file":
        if not b.path:
            raise ConfigError("benchmark.path is required for benchmark.source=file (the benchmark file)")
        return load_items(resolve_model_path(b.path), format=b.format, limit=b.limit, variant=b.variant,
                          on_duplicate=policy, duplicate_key=DUPLICATE_KEY)
    return data_benchmark(s).items  # benchmark.source=data: the `data` group, read as every job reads it


def data_benchmark(cfg: Any) -> Any:
    """The `data` group of benchmark.source=data read by `zcp.benchmarks.dataset.read_data` (items only: the
    simulation makes its own split and references): every data.* key counts as in detection (fields, variant,
    on_invalid, limit / sample, on_duplicate). `benchmark.limit` (the file sources' key) still takes the first N
    when data.limit and data.sample are null; a repeated question is merged when benchmark.on_duplicate or
    data.on_duplicate says merge. Returns the `DataRead` (its `benchmark` holds the pairing keys of every row)."""
    from zcp.benchmarks.dataset import read_data

    s = sim_config(cfg)
    b, d = s.benchmark, s.data
    if d is None or not d.path:  # generated items are benchmark.source=wordproblems (the reserved pool)
        raise ConfigError("data.path is required for benchmark.source=data")
    if b.limit is not None and (d.limit is not None or d.sample is not None):
        raise ConfigError(f"benchmark.limit={b.limit} and data.{'limit' if d.limit is not None else 'sample'} "
                          "both select the items of benchmark.source=data: set one")
    policy = "merge" if "merge" in (b.on_duplicate, d.on_duplicate) else d.on_duplicate
    d = dataclasses.replace(d, path=resolve_model_path(str(d.path)), on_duplicate=policy,
                            limit=d.limit if b.limit is None else b.limit)
    return read_data(d, seed=s.seed, items_only=True, duplicate_key=DUPLICATE_KEY)


def load_split_files(cfg: Any) -> tuple[list[Item], list[Item]]:
    """(C items, U items) from `split.c_path` / `split.u_path` (e.g. the ZCP release's dataset_c/dataset_u),
    read with `benchmark.format` / `benchmark.variant`, `benchmark.limit` rows of each. An id present in both
    files fails with one line naming both files. C and U together are the benchmark: a question repeated
    within a file or across the two is refused (`benchmark.on_duplicate=error`, naming the ids) or, with
    `merge`, kept once (its first copy: C's when it is in both, so U loses it)."""
    from zcp.benchmarks.loaders import check_duplicates, load_items

    s = sim_config(cfg)
    b, split = s.benchmark, s.split
    out = [load_items(resolve_model_path(str(path)), format=b.format, variant=b.variant, limit=b.limit,
                      on_duplicate=b.on_duplicate, duplicate_key=DUPLICATE_KEY) for path in (split.c_path, split.u_path)]
    both = sorted({it.id for it in out[0]} & {it.id for it in out[1]})
    if both:
        raise DataError(f"{len(both)} id(s) in both the C and the U file, first {both[0]!r} "
                        f"(U file {split.u_path})", path=str(split.c_path), field="id")
    kept = check_duplicates(out[0] + out[1], None, b.on_duplicate, key=DUPLICATE_KEY,
                            name=f"C file {split.c_path} and U file {split.u_path}")
    return out[0], kept[len(out[0]):]  # C's copy comes first (and C has none within): C keeps all its items


def benchmark_format(cfg: Any) -> str:
    """The loader format of the items `load_benchmark` returns: ``wordproblems`` for generated ones, else the
    format the given C/U files, the benchmark file or the `data` group are read with. Reference builders are
    chosen by it (`zcp.benchmarks.references.registry.resolve_method`): the items as loaded, whatever the default of an
    unused `benchmark.source` says."""
    s = sim_config(cfg)
    if s.given_split:
        return str(s.benchmark.format)
    if s.benchmark.source == "wordproblems":
        return "wordproblems"
    if s.benchmark.source == "data":
        return str(s.data.format if s.data is not None else field_default(DataConfig, "format"))
    return str(s.benchmark.format)


def generated_benchmark(cfg: Any) -> bool:
    """Whether the benchmark is generated word problems (`load_benchmark`'s wordproblems source)."""
    s = sim_config(cfg)
    return not s.given_split and s.benchmark.source == "wordproblems"


def _given_manifest(cfg: Any, seed: int, with_source: bool) -> Any:
    """The manifest of given C and U files: C = the C file, U = the U file."""
    from zcp.benchmarks.split import Manifest

    s = sim_config(cfg)
    c_items, u_items = load_split_files(s)
    source: dict[str, Any] = {}
    if with_source:
        c_path = resolve_model_path(str(s.split.c_path))
        source = {"source_path": c_path, "source_sha256": sha256_file(c_path)}
    return Manifest(c_ids=[it.id for it in c_items], u_ids=[it.id for it in u_items], seed=seed,
                    c_fraction=len(c_items) / max(1, len(c_items) + len(u_items)), **source)


def _seeded_split(cfg: Any, items: list[Item], seed: int) -> Any:
    """The seeded C/U split of `items`: `+split.seed` when given, else `seed` (the run's)."""
    from zcp.benchmarks.split import split_items

    s = sim_config(cfg)
    override = s.split_seed_override
    return split_items(items, seed=seed if override is None else override, c_fraction=float(s.split.c_fraction),
                       stratify_by=s.split.stratify_by)


def planned_manifest(cfg: Any, items: list[Item]) -> Any:
    """The C/U manifest the split stage will give `items` (`write_manifest`), computed without writing anything:
    the given C and U files, `manifest_path`, or the seeded split. For checks made before anything runs."""
    from zcp.benchmarks.split import Manifest

    s = sim_config(cfg)
    if s.given_split:
        return _given_manifest(s, s.seed, with_source=False)
    if s.manifest_path:
        return Manifest.load(resolve_model_path(s.manifest_path))
    return _seeded_split(s, items, s.seed)


def write_manifest(cfg: Any, items: list[Item], run_dir: Path, seed: int) -> Any:
    """The split stage: `<run_dir>/manifest.json` from the given C and U files, a copy of `manifest_path`, the
    one already there (a resumed run), or the seeded split of `items`; returns the Manifest."""
    from zcp.benchmarks.split import Manifest

    s = sim_config(cfg)
    dest = run_dir / MANIFEST
    if s.given_split:  # the split is given: C = the C file, U = the U file
        manifest = _given_manifest(s, seed, with_source=True)
        manifest.save(dest)
        return manifest
    if s.manifest_path:
        src = Path(resolve_model_path(s.manifest_path))
        manifest = Manifest.load(src)
        if src.resolve() != dest.resolve():
            shutil.copyfile(src, dest)
        return manifest
    if dest.exists():
        return Manifest.load(dest)
    manifest = _seeded_split(s, items, seed)
    manifest.save(dest)
    return manifest


_manifest = write_manifest  # the name the tests and older callers use
