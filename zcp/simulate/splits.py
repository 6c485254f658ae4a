"""The units a simulation's detection tests: C and U with their reference sets, from the run's benchmark.

`simulation_splits` gives each split's originals and references (a reference file, or the registry's builder:
`simulation_references`, with the training values excluded); used by the detection stage (zcp.simulate.pipeline),
the baseline detectors and the ablations of a run dir (zcp.validate), which read the same units.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zcp.core.items import Item
from zcp.errors import DataError

log = logging.getLogger(__name__)


def simulation_references(cfg: Any, items: list[Item], n_draws: int, seed: int, manifest: Any = None,
                          run_dir: str | Path | None = None) -> tuple[dict[str, list[Item]], dict[str, Any]]:
    """n_draws reference draws per benchmark item for the detection stage, and the builder's report.

    `detect.reference_path` reads a given reference set (`file_references`: rows of items outside the benchmark
    left out and counted, items without a row per `detect.missing_reference`). Otherwise the builder registry
    builds them as run_build_data does (`detect.reference`: method, exclusions, policies), chosen on the items as
    loaded (`zcp.simulate.contaminate.benchmark_format`): generated word problems get exact draws from the
    generator's law, GSM8K-format files the gsm8k builder. The run's own training data joins
    `detect.reference.exclude`: every C item (leaked or not: a value a fine-tune may have seen is never a
    reference) and the clean and sham items of `<run>/training_items.jsonl`. An item the builder gives no draw
    has no key in the result: it cannot be tested and `simulation_splits` leaves it out, counted.
    """
    from dataclasses import replace

    from zcp.benchmarks.build import reference_context
    from zcp.benchmarks.references.exclusions import item_key
    from zcp.benchmarks.references.registry import build_references
    from zcp.simulate.settings import sim_config

    det = sim_config(cfg).detect
    if det.reference_path:
        return file_references(cfg, items)
    method = check_reference_source(cfg, items)
    choice = det.reference
    keys: set[str] = set()
    if manifest is not None:
        keys |= {k for k in (item_key(it) for it in manifest.subset(items, "C")) if k}
    if run_dir is not None:
        keys |= _training_keys(Path(run_dir))
    ctx, exclusions = reference_context(items, seed, {"exclude": list(choice.exclude),
                                                      "exclude_benchmark": choice.exclude_benchmark,
                                                      "special_cases": choice.special_cases})
    ctx = replace(ctx, exclude=ctx.exclude | frozenset(keys))
    rs = build_references(items, method, n_draws, ctx)
    report = {**rs.report, "rejections": rs.rejections,
              "exclusions": [*exclusions, {"source": "the run's training data (C items, clean and sham items)",
                                           "keys": len(keys)}]}
    return rs.refs, report


def _plain(cfg: Any) -> dict[str, Any]:
    """A plain dict of a config node (DictConfig or mapping), resolved."""
    from zcp.config import to_dict

    return to_dict(cfg) if not isinstance(cfg, dict) else cfg


def benchmark_keys(cfg: Any, items: list[Item]) -> Any:
    """The benchmark as a `zcp.benchmarks.loaders.Benchmark`: `items` selected, with the pairing keys of EVERY row of
    the file(s) they were read from (benchmark.path, split.c_path + split.u_path, the `data` group). A reference
    file's rows of items the benchmark leaves out (benchmark.limit, a merged duplicate) are then recognised and
    left out, counted, as run_detect does; a row naming an item no file holds still fails."""
    from zcp.benchmarks.loaders import Benchmark
    from zcp.benchmarks.loaders import load_benchmark as load_file
    from zcp.simulate.rundir import resolve_model_path
    from zcp.simulate.settings import sim_config

    s = sim_config(cfg)
    b = s.benchmark
    if s.given_split:
        files = [(s.split.c_path, b.format, b.variant), (s.split.u_path, b.format, b.variant)]
    elif b.source == "file":
        files = [(b.path, b.format, b.variant)]
    elif b.source == "data" and s.data is not None:  # read as load_benchmark reads it (fields, variant, ...)
        from dataclasses import replace

        from zcp.simulate.benchmark import data_benchmark

        return replace(data_benchmark(s).benchmark, items=list(items))
    else:
        return Benchmark.from_items(items)
    parts = [load_file(resolve_model_path(str(path)), fmt, variant=variant, limit=b.limit,
                       on_duplicate=b.on_duplicate, duplicate_key="benchmark.on_duplicate")
             for path, fmt, variant in files]
    return Benchmark(" + ".join(p.path for p in parts), list(items), [i for p in parts for i in p.ids],
                     [r for p in parts for r in p.rows], [x for p in parts for x in p.source_index],
                     set().union(*(p.source_index_fields for p in parts)))


def file_references(cfg: Any, items: list[Item]) -> tuple[dict[str, list[Item]], dict[str, Any]]:
    """The reference rows of `detect.reference_path` (read with `detect.reference_format`) paired to the benchmark
    items, and a report counting them.

    As in run_detect (`zcp.probe.detect.load_datasets`): rows of items of the benchmark's file(s) that the benchmark
    does not hold (`benchmark.limit`; a full-benchmark reference set for a slice) are left out and counted
    (`rows_outside_benchmark`); a row naming an item no file holds fails. A benchmark item without any row is a
    one-line DataError unless `detect.missing_reference=skip`, which leaves it out (counted in
    simulation_summary.json as `items_without_reference`)."""
    from zcp.benchmarks.loaders import pair_rows, read_linked, resolve_path
    from zcp.errors import ConfigError
    from zcp.simulate.rundir import resolve_model_path
    from zcp.simulate.settings import sim_config

    det = sim_config(cfg).detect
    path = resolve_path(resolve_model_path(str(det.reference_path)))
    if not Path(path).is_file():
        raise ConfigError(f"detect.reference_path={det.reference_path}: no such file")
    warnings: list[dict[str, Any]] = []
    rows = read_linked(path, det.reference_format, warnings=warnings)
    refs = pair_rows(rows, benchmark_keys(cfg, items), str(path), require_all=False, what="reference",
                     warnings=warnings)
    n_paired = sum(len(v) for v in refs.values())
    missing = [it.id for it in items if not refs.get(it.id)]
    if missing and det.missing_reference == "error":
        shown = ", ".join(missing[:10]) + (f" (+{len(missing) - 10} more)" if len(missing) > 10 else "")
        raise DataError(f"{len(missing)} of {len(items)} benchmark item(s) have no reference row: {shown}; set "
                        "detect.missing_reference=skip to leave them out (counted in simulation_summary.json)",
                        path=str(path))
    outside = len(rows) - n_paired
    if outside:
        log.info("%s: %d reference row(s) of items outside the benchmark left out", path, outside)
    return refs, {"method": "file", "path": str(path), "rows": len(rows), "rows_paired": n_paired,
                  "rows_outside_benchmark": outside, "missing_reference": det.missing_reference,
                  "items_without_reference_row": len(missing), "data_warnings": warnings}


def _training_keys(run: Path) -> set[str]:
    """Keys of the non-benchmark items a contamination run trained on (`training_items.jsonl`)."""
    from zcp.benchmarks.loaders import load_items
    from zcp.benchmarks.references.exclusions import item_key
    from zcp.errors import RunDirError

    path = run / "training_items.jsonl"
    if not path.exists():
        if (run / "sft_data.jsonl").exists():
            raise RunDirError(f"{run}: its training data predates training_items.jsonl; rerun the contamination "
                              "(the data stage is rebuilt, finished training is kept)")
        return set()
    if not path.read_text(encoding="utf-8").strip():
        return set()  # nothing outside the benchmark trained on (exposure.clean_fraction=0, not a sham run)
    return {k for k in (item_key(it) for it in load_items(str(path), format="items")) if k}


def _benchmark_items_for_check(c: dict[str, Any]) -> list[Item]:
    """The benchmark items (`load_benchmark`), a missing benchmark.path being a one-line ConfigError."""
    from zcp.simulate.benchmark import load_benchmark

    return load_benchmark(c)  # refuses a missing benchmark.path (source=file) or data.path (source=data) in one line


def check_reference_source(cfg: Any, items: list[Item] | None = None) -> str:
    """The reference method the detection stage will use (``file`` for detect.reference_path), checked before
    training on the benchmark's ACTUAL items (loaded when not given: generated, a file, the given C and U files):
    `detect.reference.method` resolved on them (`auto`: the first registered builder that takes them, by the
    format they were read with), and that builder run on a few of them. ConfigError (one line) when no builder
    without a model takes them (the LLM builder needs generator and judge models the simulation does not
    configure: give detect.reference_path) or the chosen builder cannot build on them (a word-problem builder on
    GSM8K items)."""
    from zcp.benchmarks.references.registry import BuildContext, get_reference_builder, resolve_method
    from zcp.errors import ConfigError
    from zcp.simulate.benchmark import benchmark_format
    from zcp.simulate.settings import sim_config

    c = _plain(cfg)
    det = sim_config(c).detect
    if det.reference_path:
        return "file"
    choice = det.reference
    if items is None:
        items = _benchmark_items_for_check(c)
    fmt = benchmark_format(c)
    what = (f"the given C and U files (benchmark.format={fmt})" if sim_config(c).given_split else
            "the generated word problems" if fmt == "wordproblems" else f"benchmark.format={fmt}")
    try:
        method = resolve_method(choice.method, items, fmt)
    except ValueError:
        method = "none"
    if method in ("llm", "none"):
        raise ConfigError(f"detect.reference_path is required for {what} (no program to perturb: build a reference "
                          "set with evaluate/run_build_data.py), or set detect.reference.method")
    builder = get_reference_builder(method)
    sample = list(items[:3])
    chosen = f"{choice.method} (resolved to {method})" if choice.method == "auto" else method
    fix = "set detect.reference_path=FILE (evaluate/run_build_data.py) or another detect.reference.method"
    try:
        built = builder.build(sample, 1, BuildContext(seed=0, benchmark=tuple(items)))
    except (KeyError, ValueError, TypeError, AttributeError, IndexError) as e:
        raise ConfigError(f"detect.reference.method={chosen}: the {method} builder cannot build references for "
                          f"{what} (item {sample[0].id if sample else '?'}: {type(e).__name__} {e}); {fix}") from None
    # a builder chosen by name that would not take these items (auto's test) must build on some of them
    if not builder.accepts(items, fmt) and sample and not any(built.refs.values()):
        why = next((r.get("reason") for r in built.rejections if r.get("reason")), "no draw")
        raise ConfigError(f"detect.reference.method={chosen}: the {method} builder cannot build references for {what} "
                          f"(none for items {', '.join(it.id for it in sample)}: {why}); {fix}")
    return method


def simulation_splits(cfg: dict[str, Any], items: list[Item], manifest: Any, splits: Sequence[str] = ("C", "U"),
                      run_dir: str | Path | None = None, report: dict[str, Any] | None = None
                      ) -> tuple[dict[str, list[Item]], dict[str, list[Item]], list[str]]:
    """The detection stage's inputs from a run's config, items, manifest (and run dir, whose training data the
    references avoid): the items of each split that have reference draws, their draws (m x len(seeds), the run's
    reference seed: the same draws every job rebuilds), and the ids left out for want of any reference. Shared by
    the detection stage, the ablations and the baselines so all three probe exactly the same items. `report`, when
    given, receives the reference builder's report (law, exclusions, exchangeability per feature)."""
    from zcp.simulate.settings import sim_config

    s = sim_config(cfg)
    det = s.detect
    ref_seed = det.reference_seed if det.reference_seed is not None else s.seed
    refs, ref_report = simulation_references(cfg, items, int(det.m) * len(det.seeds), int(ref_seed), manifest, run_dir)
    if report is not None:
        report.update(ref_report)
    missing = sorted(it.id for it in items if not refs.get(it.id))
    if missing:
        log.warning("%d item(s) without any reference draw are left out of detection: %s", len(missing),
                    ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""))
    groups = {s: [it for it in manifest.subset(items, s) if refs.get(it.id)] for s in splits}
    return groups, refs, missing
