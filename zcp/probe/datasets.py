"""A detect job's `data` config read into the units the probe tests: one DetectDataset per split, its originals
paired with their reference rows (and variants), rows left out counted with the reason.

The reading itself (selection, pairing, groups, every check) is `zcp.benchmarks.dataset.read_data`, the one reader
of a `data` config; this module adds what detection requires of it: a reference set for every split, and at least
one item with a reference row in each.
"""

from __future__ import annotations

import logging
from typing import Any

from zcp.probe.detect import DetectDataset

log = logging.getLogger(__name__)


def load_datasets(data_cfg: Any) -> tuple[list[DetectDataset], list[dict[str, Any]]]:
    """Datasets named by a `data` config (one; C and U with a manifest or a U file), and the data issues.

    `data_cfg`: a checked zcp.benchmarks.data_config.DataConfig (a validated job's `data`), or a mapping / DictConfig
    built into one (zcp.config.schemas.group_config): every default is the dataclass's.

    Items are selected first (all, `data.limit` = the first N, or `data.sample` = N at random seeded by
    `data.sample_seed`, i.e. the run's `seed`; rows skipped by `data.on_invalid=skip`), then the
    reference and variant rows are paired to them by `data.pair_by` (see `zcp.benchmarks.loaders`); rows of
    items not selected are left out. Variant files are read with `data.variant_format`/`variant_fields`
    (null: the data's), and for format zcp_release with the field prefix `data.variant_prefix` (null: the
    variant's name, e.g. paraphrased). The splits: C and U of `data.manifest`, C = `data.path` and U =
    `data.u_path` (with its reference set `data.u_reference_path`), or one named `data.name`
    (`zcp.benchmarks.dataset.read_data` has every rule).

    The second value lists, for summary.json: skipped rows ({file, row, field, reason}), items without a
    reference row ({file, id, reason}) and data warnings ({file, warning}: a reference or variant set
    identical to its data, answers read from a float-typed parquet column).
    """
    from zcp.benchmarks.data_config import DataConfig
    from zcp.benchmarks.dataset import read_data
    from zcp.config.schemas import group_config
    from zcp.errors import ConfigError, DataError

    d = group_config(DataConfig, data_cfg, "data")  # the defaults are DataConfig's; choices checked there
    if not d.reference_path:
        raise ConfigError("data.reference_path is required: the perturbed reference set of the benchmark")
    if d.u_path and not d.u_reference_path:
        raise ConfigError("data.u_path needs data.u_reference_path: U's reference set (every split is tested "
                          "against its own)")
    read = read_data(d)
    out = []
    for g in read.groups.values():
        sub = g.with_reference(read.references)
        ids = {it.id for it in sub}
        out.append(DetectDataset(g.name, sub, {k: v for k, v in read.references.items() if k in ids},
                                 {n: {k: v for k, v in vv.items() if k in ids} for n, vv in read.variants.items()},
                                 without_reference=list(g.without_reference)))
        if not sub:  # before any model loads: a run with nothing to test is no result
            raise DataError(f"nothing left to test in {g.name}: none of its {len(g.items)} selected item(s) has a "
                            "reference row (data.missing_reference=skip left them all out); give a reference set "
                            "that covers the items", path=g.reference_path)
        if g.without_reference:
            log.warning("%s: %d of %d selected item(s) have no reference row and are left out "
                        "(data.missing_reference=skip); n = %d", g.name, len(g.without_reference),
                        len(g.items), len(sub))
    from zcp.probe.control import CONTROL, read_control

    control = read_control(d, read.items, [ds.split for ds in out])  # data.control_path: None when not set
    if control is not None:  # probed in the same run as split `control` (zcp.probe.control)
        out.append(DetectDataset(CONTROL, control.items, control.references,
                                 without_reference=control.without_reference))
        return out, read.issues + control.issues
    return out, read.issues
