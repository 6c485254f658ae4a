"""A detect job's `data` config read into the units the probe tests: one DetectDataset per split, its originals
paired with their reference rows (and variants), rows left out counted with the reason.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from zcp.probe.detect import DetectDataset

log = logging.getLogger(__name__)


def load_datasets(data_cfg: Any) -> tuple[list[DetectDataset], list[dict[str, Any]]]:
    """Datasets named by a `data` config (one, or C and U when a manifest is given), and the data issues.

    `data_cfg`: a checked zcp.config.groups.DataConfig (a validated job's `data`), or a mapping / DictConfig
    built into one (zcp.config.schemas.group_config): every default is the dataclass's.

    Items are selected first (all, `data.limit` = the first N, or `data.sample` = N at random seeded by
    `data.sample_seed`, i.e. the run's `seed`; rows skipped by `data.on_invalid=skip`), then the
    reference and variant rows are paired to them by `data.pair_by` (see `zcp.benchmarks.loaders`); rows of
    items not selected are left out. Variant files are read with `data.variant_format`/`variant_fields`
    (null: the data's), and for format zcp_release with the field prefix `data.variant_prefix` (null: the
    variant's name, e.g. paraphrased).

    The second value lists, for summary.json: skipped rows ({file, row, field, reason}), items without a
    reference row ({file, id, reason}) and data warnings ({file, warning}: a reference or variant set
    identical to its data, answers read from a float-typed parquet column).
    """
    from zcp.benchmarks.loaders import field_map, load_benchmark, load_paired, resolve_path
    from zcp.config.schemas import DataConfig, group_config
    from zcp.errors import DataError

    d = group_config(DataConfig, data_cfg, "data")  # the defaults are DataConfig's; choices checked there
    if not d.reference_path:
        raise ValueError("data.reference_path is required: the perturbed reference set of the benchmark")
    on_missing = d.missing_reference
    fmt = d.format
    fields = field_map(dataclasses.asdict(d.fields), where="data.fields")

    def own_fields(key: str, own_format: str) -> dict[str, str]:
        # a reference/variant file in the data's format reads the data's field names unless given its own
        own = field_map(getattr(d, key), where=f"data.{key}")
        return own or (fields if own_format == fmt else {})

    bench = load_benchmark(d.path, fmt, fields=fields, variant=d.variant, limit=d.limit, sample=d.sample,
                           seed=d.sample_seed, on_invalid=d.on_invalid, on_duplicate=d.on_duplicate)
    issues: list[dict[str, Any]] = [*bench.skipped, *bench.warnings]
    ref_format = d.reference_format
    reference = load_paired(d.reference_path, bench, ref_format, fields=own_fields("reference_fields", ref_format),
                            variant=d.reference_variant, pair_by=d.pair_by,
                            require_all=on_missing == "error", warnings=issues,
                            missing_key="data.missing_reference")
    var_format = d.variant_format or fmt  # null: the data's format (DataConfig.variant_format)
    variants = {}
    for name, path in d.variant_paths.items():
        if not path:
            continue
        prefix = d.variant_prefix or (name if var_format == "zcp_release" else None)  # null: the variant's name
        variants[name] = load_paired(path, bench, var_format, fields=own_fields("variant_fields", var_format),
                                     variant=prefix, pair_by=d.pair_by, require_all=False,
                                     what=f"'{name}' variant", warnings=issues)
    items = bench.items
    # items without a reference row (rejected by the reference builder): left out and listed in summary.json
    issues += [{"file": str(d.reference_path), "id": it.id, "reason": "no reference row"}
               for it in items if it.id not in reference]
    if d.manifest:
        from zcp.benchmarks.split import Manifest

        mpath = str(resolve_path(d.manifest))
        manifest = Manifest.load(mpath)
        in_file, by_id = set(bench.ids), {it.id: it for it in items}
        groups = {}
        for split, ids in (("C", manifest.c_ids), ("U", manifest.u_ids)):
            unknown = [i for i in ids if i not in in_file]
            if unknown:
                raise DataError(f"{len(unknown)} id(s) of split {split} are not in data file {bench.path}, first "
                                f"{unknown[0]!r}", path=mpath, field="id")
            groups[split] = [by_id[i] for i in ids if i in by_id]  # the selected items, in manifest order
    else:
        groups = {d.name or Path(str(d.path)).stem: items}
    out = []
    for split, selected in groups.items():
        sub = [it for it in selected if it.id in reference]
        ids = {it.id for it in sub}
        out.append(DetectDataset(split, sub, {k: v for k, v in reference.items() if k in ids},
                                 {n: {k: v for k, v in vv.items() if k in ids} for n, vv in variants.items()},
                                 without_reference=[it.id for it in selected if it.id not in reference]))
        if not sub:  # before any model loads: a run with nothing to test is no result
            raise DataError(f"nothing left to test in {split}: none of its {len(selected)} selected item(s) has a "
                            "reference row (data.missing_reference=skip left them all out); give a reference set "
                            "that covers the items", path=str(resolve_path(d.reference_path)))
        if out[-1].without_reference:
            log.warning("%s: %d of %d selected item(s) have no reference row and are left out "
                        "(data.missing_reference=skip); n = %d", split, len(out[-1].without_reference),
                        len(selected), len(sub))
    return out, issues
