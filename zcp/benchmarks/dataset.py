"""The one reader of a `data` config (`zcp.benchmarks.data_config.DataConfig`): every job that takes a `data` group reads
it here, so a key means the same thing in detection, the baselines, run_build_data and the simulation.

`read_data(d)` returns a `DataRead`: the selected items, the reference and variant rows paired to them, the C/U
groups (from `data.manifest`, from `data.u_path`, or one group named `data.name`), the data issues summary.json
lists, and the source path. The jobs are thin adapters over it: `zcp.probe.datasets.load_datasets` (a
DetectDataset per group), `zcp.validate.baselines_inputs.inputs_from_data` (a FileData per group),
`zcp.benchmarks.build.load_dataset_items` and `zcp.simulate.benchmark.load_benchmark` (the items alone,
`items_only=True`: they build their own split and reference set).

The rules, in the order they apply:

1. Items. `data.format` wordproblems without `data.path` generates `data.n` word problems, arithmark without a
   path generates `data.n_per_stage` ArithMark records per stage (seed: `data.generator_seed`, else the run's
   `seed`); arithmark with a path reads a file of ArithMark records; wordproblems with a path is a file of zcp
   items; any other format is read by `zcp.benchmarks.loaders.load_benchmark` with `data.fields` /
   `data.variant`. Every source is checked for repeated questions (`data.on_duplicate`), then selected:
   `data.limit` = the first N, `data.sample` = N at random seeded by `data.sample_seed` (kept in file order);
   rows that cannot become an item fail or, with `data.on_invalid=skip`, are left out and listed.
2. C and U given as two files (`data.u_path`): U is read with the same rules; an id in both fails, a question
   in both is refused or (merge) kept once, C's copy; a U left empty by that fails. C and U are one benchmark.
3. References (`data.reference_path`, U's `data.u_reference_path`) and variants (`data.variant_paths`, paired
   to C's and U's items together) are paired by `data.pair_by` (`zcp.benchmarks.loaders.pairing`); rows of
   items not selected are left out. A selected item without a reference row fails, or with
   `data.missing_reference=skip` is listed (reason "no reference row") and named in its group's
   `without_reference`. A reference or variant file is read with its own `*_format` / `*_fields`, the data's
   field names when it has the data's format and none of its own; a generated benchmark's files are zcp items.
4. Groups: `data.manifest` splits the selected items into C and U in the manifest's order (an id of the
   manifest the data file does not hold fails); `data.u_path` gives C = the data file, U = the U file; else one
   group named `data.name` (or the file's stem).

Every error is one line naming the file, row, field or config key (`ConfigError` for a key, `DataError` for data).
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zcp.benchmarks.data_config import GENERATED_FORMATS, DataConfig
from zcp.benchmarks.loaders import (
    Benchmark,
    check_duplicates,
    field_map,
    load_benchmark,
    load_paired,
    resolve_path,
)
from zcp.config.schemas import group_config
from zcp.core.items import Item
from zcp.errors import ConfigError, DataError

log = logging.getLogger(__name__)

DUPLICATE_KEY = "data.on_duplicate"
MISSING_KEY = "data.missing_reference"


@dataclass(frozen=True)
class DataGroup:
    """One group of the data: C or U (a manifest or two files), or the whole benchmark."""

    name: str                      # "C", "U", or data.name / the file's stem
    path: str                      # where its items come from: the file, "<file>#C" for a manifest split
    items: list[Item]              # its selected items (manifest order for a manifest split, else file order)
    reference_path: str | None     # the reference file paired to them (resolved); None: no reference set given
    without_reference: list[str]   # ids of its items with no reference row (data.missing_reference=skip)

    def with_reference(self, references: Mapping[str, list[Item]]) -> list[Item]:
        """Its items that have a reference row (what a reference-based test compares)."""
        return [it for it in self.items if it.id in references]


@dataclass(frozen=True)
class DataRead:
    """What a `data` config names, read and checked (see the module docstring for the rules)."""

    name: str                                     # data.name, else the data file's stem
    path: str | None                              # the data file as read (C's); None when generated
    items: list[Item]                             # every selected item: the data file's, then U's (data.u_path)
    references: dict[str, list[Item]]             # item id -> its reference rows (items that have any)
    variants: dict[str, dict[str, list[Item]]]    # variant name -> item id -> its rows
    groups: dict[str, DataGroup]                  # "C"/"U", or {name: the whole benchmark}
    issues: list[dict[str, Any]]                  # skipped rows, left-out copies, items without a reference, warnings
    benchmark: Benchmark                          # the data file's pairing keys (every row, selected or not)

    @property
    def skipped(self) -> list[dict[str, Any]]:
        """The issues that are rows or items left out ({file, row?, id?, field?, reason}), not warnings."""
        return [x for x in self.issues if "warning" not in x]


def read_data(d: DataConfig | Mapping[str, Any] | Any, *, seed: int | None = None, items_only: bool = False,
              duplicate_key: str = DUPLICATE_KEY) -> DataRead:
    """Read the `data` config `d`: items, references, variants, C/U groups and data issues (module docstring).

    `d`: a checked DataConfig (a validated job's `data`), or a mapping / DictConfig built into one
    (`zcp.config.schemas.group_config`: every default is the dataclass's). `seed`: the run's seed, what a
    generator uses when `data.generator_seed` is null (None: `data.sample_seed`, itself the run's seed unless
    set). `items_only`: the items alone, for jobs that build their own split and references (run_build_data,
    the simulation): reference, variant, manifest and U keys are not read, one group holds every item.
    `duplicate_key`: the config key a repeated-question error names (the simulation's is
    benchmark.on_duplicate).
    """
    d = group_config(DataConfig, d, "data")
    if not items_only:
        _check_keys(d)
    issues: list[dict[str, Any]] = []
    bench = _read_items(d, d.path, seed, duplicate_key, issues)
    path = bench.path or None
    name = str(d.name or (Path(str(d.path)).stem if d.path else d.format))
    if items_only:
        whole = DataGroup(name, path or name, bench.items, None, [])
        return DataRead(name, path, bench.items, {}, {}, {name: whole}, issues, bench)

    refs = _pair_references(d, d.reference_path, bench, issues)
    u_bench = u_refs = None
    if d.u_path:
        u_bench = _read_u(d, bench, seed, duplicate_key, issues)
        u_refs = _pair_references(d, d.u_reference_path, u_bench, issues)
    keys = bench if u_bench is None else _joined(bench, u_bench)
    variants = _pair_variants(d, keys, issues)
    references = {**refs, **(u_refs or {})}
    issues += _without_reference(d.reference_path, bench.items, refs)
    if u_bench is not None:
        issues += _without_reference(d.u_reference_path, u_bench.items, u_refs or {})

    ref_file = str(resolve_path(d.reference_path)) if d.reference_path else None
    if d.manifest:
        groups = _manifest_groups(d, bench, ref_file, references)
    elif u_bench is not None:
        u_ref_file = str(resolve_path(d.u_reference_path)) if d.u_reference_path else None
        groups = {"C": _group("C", bench.path or name, bench.items, ref_file, references),
                  "U": _group("U", u_bench.path, u_bench.items, u_ref_file, references)}
    else:
        groups = {name: _group(name, path or name, bench.items, ref_file, references)}
    return DataRead(name, path, keys.items, references, variants, groups, issues, bench)


# ------------------------------------------------------------------------------------------ items


def _read_items(d: DataConfig, path: Any, seed: int | None, duplicate_key: str,
                issues: list[dict[str, Any]]) -> Benchmark:
    """The selected items of one data file (or of the generated benchmark) with the keys of all its rows."""
    fmt = d.format
    if fmt in GENERATED_FORMATS and (fmt == "arithmark" or not path):
        bench = _generated(d, path, seed, duplicate_key, issues)
    else:
        if not path:
            raise ConfigError(f"data.path is required for data.format={fmt} (the benchmark file; formats "
                              f"{' and '.join(GENERATED_FORMATS)} generate their items without one)")
        fields = field_map(dataclasses.asdict(d.fields), where="data.fields")
        bench = load_benchmark(path, _file_format(fmt), fields=fields, variant=d.variant, limit=d.limit,
                               sample=d.sample, seed=d.sample_seed, on_invalid=d.on_invalid,
                               on_duplicate=d.on_duplicate, duplicate_key=duplicate_key)
        issues += [*bench.skipped, *bench.warnings]
    _check_sample(d, bench, issues)
    return bench


def _check_sample(d: DataConfig, bench: Benchmark, issues: list[dict[str, Any]]) -> None:
    """A WARNING and a data warning ({file, warning}: summary.json's data_warnings, table.md) when `data.sample` asks
    for more items than the data has: every item is then taken, so the run is no random sample of that size (a
    sample-size study would read the same items at every size)."""
    if d.sample is None or len(bench.items) >= int(d.sample):
        return
    where = bench.path or f"the generated {d.format} benchmark"
    message = (f"data.sample={d.sample} is larger than the data: all {len(bench.items)} of its usable items are "
               "taken (no random subset)")
    log.warning("%s: %s", where, message)
    issues.append({"file": where, "warning": message})


def _generated(d: DataConfig, path: Any, seed: int | None, duplicate_key: str,
               issues: list[dict[str, Any]]) -> Benchmark:
    """ArithMark records (generated, or a records file) or generated word problems, checked and selected."""
    gen_seed = d.generator_seed if d.generator_seed is not None else (seed if seed is not None else d.sample_seed)
    where = str(resolve_path(path)) if path else ""
    if d.format == "arithmark":
        from zcp.benchmarks import arithmark

        records = (arithmark.load_arithmark(resolve_path(path)) if path
                   else arithmark.generate_arithmark(int(d.n_per_stage), int(gen_seed)))
        every = [arithmark.arithmark_to_item(r) for r in records]
        what = "the generated ArithMark benchmark"
    else:
        from zcp.benchmarks.wordproblems import generate_word_problems

        every = generate_word_problems(int(d.n), int(gen_seed), families=list(d.families) if d.families else None)
        what = "the generated word-problem benchmark"
    if not every:
        raise DataError("no rows", path=where or None)
    kept = check_duplicates(every, where or None, d.on_duplicate, name=None if where else what, key=duplicate_key,
                            dropped=issues)
    keys = Benchmark.from_items(every, where)
    return dataclasses.replace(keys, items=_select(kept, d.limit, d.sample, d.sample_seed))


def _select(items: list[Item], limit: int | None, sample: int | None, seed: int) -> list[Item]:
    """`limit` = the first N, `sample` = N drawn at random (seeded, as load_benchmark draws), in list order."""
    if limit is not None:
        return items[: int(limit)]
    if sample is not None:
        order = random.Random(int(seed)).sample(range(len(items)), len(items))
        return [items[k] for k in sorted(order[: int(sample)])]
    return list(items)


def _file_format(fmt: str) -> str:
    """The loader format of a file in `fmt`: a word-problem (or ArithMark item) file is zcp items."""
    return "items" if fmt in GENERATED_FORMATS else fmt


def _check_keys(d: DataConfig) -> None:
    """Keys that contradict each other (checked before any file is read)."""
    if d.manifest and d.u_path:
        raise ConfigError("data.manifest and data.u_path: give one way to name U")
    if d.u_reference_path and not d.u_path:
        raise ConfigError("data.u_reference_path is set without data.u_path")


def _read_u(d: DataConfig, bench: Benchmark, seed: int | None, duplicate_key: str,
            issues: list[dict[str, Any]]) -> Benchmark:
    """U's file (`data.u_path`) read as C's, disjoint from C: ids and questions (C and U are one benchmark)."""
    ub = _read_items(d, d.u_path, seed, duplicate_key, issues)
    c_where = bench.path or "the generated benchmark"
    # an id names one item: in C and in U it would be leaked and clean at once (U = C, or a U cut from the
    # same file with an overlap) and the AUROC of C vs U would measure nothing
    c_ids = set(bench.ids)
    shared = [it.id for it in ub.items if it.id in c_ids]
    if shared:
        raise DataError(f"U shares {len(shared)} of its {len(ub.items)} item id(s) with C ({c_where}), "
                        f"first {shared[0]!r}: C and U must be disjoint", path=ub.path, field="id")
    # a question in both keeps C's copy (first), U's is listed as left out
    both = check_duplicates(bench.items + ub.items, ub.path, d.on_duplicate, dropped=issues, key=duplicate_key,
                            name=f"data files {c_where} (C) and {ub.path} (U)")
    u_items = both[len(bench.items):]
    if not u_items:
        raise DataError(f"no item of U is left: all {len(ub.items)} of its questions are in C ({c_where}); "
                        "C and U must be disjoint", path=ub.path, field="question")
    return dataclasses.replace(ub, items=u_items)  # U's copies of C's questions are not selected: no row needed


def _joined(c: Benchmark, u: Benchmark) -> Benchmark:
    """C's and U's files as one benchmark (variant rows may name items of either): C's rows, then U's."""
    return Benchmark(f"{c.path} + {u.path}", [*c.items, *u.items], [*c.ids, *u.ids], [*c.rows, *u.rows],
                     [*c.source_index, *u.source_index], c.source_index_fields | u.source_index_fields)


# ------------------------------------------------------------------------------------------ pairing


def _own_fields(d: DataConfig, key: str, own_format: str) -> dict[str, str]:
    """A reference/variant file's field map: its own (`data.<key>`), else the data's when it has the data's format."""
    own = field_map(getattr(d, key), where=f"data.{key}")
    data_fields = field_map(dataclasses.asdict(d.fields), where="data.fields")
    return own or (data_fields if own_format == _file_format(d.format) else {})


def _pair_references(d: DataConfig, path: Any, bench: Benchmark,
                     issues: list[dict[str, Any]]) -> dict[str, list[Item]]:
    """The rows of reference file `path` paired to `bench`'s selected items ({} when no file is given)."""
    if not path:
        return {}
    fmt = _file_format(d.reference_format)
    return load_paired(path, bench, fmt, fields=_own_fields(d, "reference_fields", fmt),
                       variant=d.reference_variant, pair_by=d.pair_by, require_all=d.missing_reference == "error",
                       warnings=issues, missing_key=MISSING_KEY)


def _pair_variants(d: DataConfig, bench: Benchmark, issues: list[dict[str, Any]]) -> dict[str, dict[str, list[Item]]]:
    """Each variant file of `data.variant_paths` paired to the selected items (an item may have none)."""
    fmt = _file_format(d.variant_format or d.format)  # null: the data's format (DataConfig.variant_format)
    out = {}
    for name, path in d.variant_paths.items():
        if not path:
            continue
        prefix = d.variant_prefix or (name if fmt == "zcp_release" else None)  # null: the variant's name
        out[name] = load_paired(path, bench, fmt, fields=_own_fields(d, "variant_fields", fmt), variant=prefix,
                                pair_by=d.pair_by, require_all=False, what=f"'{name}' variant", warnings=issues)
    return out


def _without_reference(ref_path: Any, items: Sequence[Item], refs: Mapping[str, list[Item]]) -> list[dict[str, Any]]:
    """Issues for the items without a reference row (left out by data.missing_reference=skip), listed in summary.json."""
    if not ref_path:
        return []
    return [{"file": str(ref_path), "id": it.id, "reason": "no reference row"} for it in items if it.id not in refs]


# ------------------------------------------------------------------------------------------ groups


def _group(name: str, path: str, items: list[Item], ref_file: str | None,
           references: Mapping[str, list[Item]]) -> DataGroup:
    missing = [it.id for it in items if it.id not in references] if ref_file else []
    return DataGroup(name, path, items, ref_file, missing)


def _manifest_groups(d: DataConfig, bench: Benchmark, ref_file: str | None,
                     references: Mapping[str, list[Item]]) -> dict[str, DataGroup]:
    """C and U of `data.manifest`: the selected items it names, in its order; an id not in the data file fails."""
    from zcp.benchmarks.split import Manifest

    mpath = str(resolve_path(d.manifest))
    manifest = Manifest.load(mpath)
    in_file, by_id = set(bench.ids), {it.id: it for it in bench.items}
    where = bench.path or "the generated benchmark"
    groups = {}
    for split, ids in (("C", manifest.c_ids), ("U", manifest.u_ids)):
        unknown = [i for i in ids if i not in in_file]
        if unknown:
            raise DataError(f"{len(unknown)} id(s) of split {split} are not in data file {where}, first "
                            f"{unknown[0]!r}", path=mpath, field="id")
        groups[split] = _group(split, f"{where}#{split}", [by_id[i] for i in ids if i in by_id], ref_file,
                               references)
    return groups
