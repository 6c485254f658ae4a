"""Sharded detection: `run.shard=i/n` probes one deterministic share of a run's units, `run.shard=merge` gathers the
n shares into the outputs one process would have written (records.jsonl, run_meta.json, summary.json, table.md).

Why: a benchmark of 10k items on a 7-8B model outgrows one process; n processes on a node (one per GPU) or the
tasks of a SLURM array each take 1/n of it, and the merge runs the statistics once, over every record.

The rule (stable under resume and the same on every node): the k-th original item of the data (k = 0, 1, ... in
the order of the datasets and of their items, C before U, as `DetectDataset.work` lists them) belongs to shard
k mod n, and so do ALL its units: its original, every reference draw and every variant row. An item's versions are
compared with each other by the test, so they are never split over shards (a unit skipped for context overflow is
left out of its shard as it is of one process). It depends on the data alone, not on the model or on what an
earlier attempt finished.

Layout of the run directory (the one a one-process run of the same command uses):

    <out>/shards/<i>-of-<n>/shard.json     what shard i was planned from: the run's fingerprint (the one a
                                           one-process run_meta.json holds), the config's, its unit count; the
                                           directory is claimed for it (run_fingerprint.json, zcp.core.rundir)
    <out>/shards/<i>-of-<n>/records.jsonl  its records, appended chunk by chunk (zcp.probe.detect.collect_records:
    <out>/shards/<i>-of-<n>/run_meta.json  resumable after a kill, locked while it runs)

The merge refuses (one line naming the shard) a shard that is missing, unfinished, still running, or made from
another run (another fingerprint); otherwise it orders the records as one process writes them (plan order) and
writes the run's files: byte-identical records.jsonl and run_meta.json, and the same summary.json.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from zcp.backends.base import Backend
from zcp.core.io import RunLock, read_json, write_json, write_jsonl
from zcp.core.items import Item
from zcp.core.records import RecordStore
from zcp.core.rundir import claim_run_dir, detection_meta, fingerprint_of
from zcp.errors import RunDirError
from zcp.probe.detect import (
    META,
    RECORDS,
    DetectDataset,
    DetectSettings,
    _cut,
    _fingerprint,
    _key,
    _log_plan,
    check_testable,
    collect_records,
    coverage,
    plan_units,
    write_results,
)
from zcp.probe.planned import planned_fields, unit_mismatch
from zcp.probe.prompts import ProbeConfig, prompt_rendering

log = logging.getLogger(__name__)

SHARDS = "shards"  # <out>/shards/<i>-of-<n>/
SHARD_META = "shard.json"
# config keys that do not change a record: where the run is written and logged, how it is chunked and sharded,
# and the statistics (computed by the merge from its own stats.* and seeds)
NOT_IN_SOURCE = ("output_dir", "logger", "hydra", "run", "stats", "seeds")

Unit = tuple[tuple[str, str, str, int], Item]


def shard_dir(out: str | Path, i: int, n: int) -> Path:
    """Where shard i of n of the run in `out` keeps its records."""
    return Path(out) / SHARDS / f"{i}-of-{n}"


def item_shards(datasets: list[DetectDataset] | tuple[DetectDataset, ...], n: int) -> dict[tuple[str, str], int]:
    """(split, original id) -> its shard: the k-th original item of the datasets (in their order) goes to k mod n."""
    out: dict[tuple[str, str], int] = {}
    for ds in datasets:
        for it in ds.originals:
            out.setdefault((ds.split, it.id), len(out) % n)
    return out


def shard_units(units: list[Unit], datasets: list[DetectDataset] | tuple[DetectDataset, ...], i: int, n: int
                ) -> list[Unit]:
    """The units of shard i of n, in plan order: every unit of the items `item_shards` gives to shard i."""
    owner = item_shards(datasets, n)
    return [u for u in units if owner[(u[0][0], u[0][2])] == i]


def plan_order(datasets: list[DetectDataset] | tuple[DetectDataset, ...]) -> dict[tuple[str, str, str, int], int]:
    """Each unit's position in the order one process probes and writes them (`DetectDataset.work`, dataset by
    dataset; the context fit only leaves units out or cuts them in place): the merged records' order."""
    return {key: pos for pos, (key, _) in enumerate(u for ds in datasets for u in ds.work())}


def without_shard(cfg: Any, keep_null: bool = False) -> Any:
    """`cfg` without `run.shard` (or with it null: `keep_null`): every shard, the merge and one process of the same
    command name the same run directory (zcp.config.run_dir hashes this; without the key, the hash one process
    had before it existed), and `keep_null` gives the config.yaml one process writes."""
    run = cfg.get("run") if cfg is not None else None
    if run is None or "shard" not in run or (keep_null and run.get("shard") is None):
        return cfg
    from omegaconf import OmegaConf

    from zcp.config import to_dict

    d = to_dict(cfg)
    if keep_null:
        d["run"]["shard"] = None
    else:
        d["run"].pop("shard")
    return OmegaConf.create(d)


def source_made_of(cfg: Any, weights: dict[str, Any]) -> dict[str, Any]:
    """What the records of a run are made from, known without loading the model: the config without the keys that
    change no record (`NOT_IN_SOURCE`) and the model's content fingerprints (`weights`, under `__weights__`). The
    detect job claims its run directory with it (`zcp.core.rundir.claim_run_dir`), so a directory holds one such
    run; rerunning with other statistics (stats.*, seeds) or chunking re-reads the same records."""
    from zcp.config import to_dict

    d = {k: v for k, v in to_dict(cfg).items() if k not in NOT_IN_SOURCE}
    return {**d, "__weights__": weights}


def source_fingerprint(cfg: Any, weights: dict[str, Any]) -> str:
    """The fingerprint of `source_made_of` (`zcp.core.rundir.fingerprint_of`: the run directory's). Every shard
    stores it and the merge compares it with its own, so a shard probed with another model, data or probe is named
    as stale."""
    return fingerprint_of(source_made_of(cfg, weights))


def probe_shard(backend: Backend, datasets: list[DetectDataset], probe: ProbeConfig, out: str | Path,
                settings: DetectSettings, shard: tuple[int, int], *, source: str,
                on_ready: Any = None) -> dict[str, Any]:
    """Probe shard i of n (`shard`) of the run in `out` into `<out>/shards/<i>-of-<n>/`; returns its shard.json.

    The whole run is planned as one process plans it (`plan_units`: fitted to the model's context; refused, before
    anything is written, when a dataset is left with nothing to test), so every shard holds the same fingerprint;
    then this shard's units are probed by `collect_records` (resumable, locked: a second process on the same
    shard refuses at once). `source` is `source_fingerprint` of the command; `on_ready` as in collect_records.
    """
    i, n = shard
    out = Path(out)
    units, overflow = plan_units(backend, datasets, probe, settings)
    cover = coverage(datasets, units)
    check_testable(cover, settings)
    example = next((ds.originals[0] for ds in datasets if ds.originals), None)
    rendering = prompt_rendering(backend, probe, example)
    if i == 0:  # the plan's warnings once, not n times
        _log_plan(cover, overflow, rendering, settings)
    fingerprint = _fingerprint(units, backend, probe)
    detection_meta(out, fingerprint, f"shard {i}/{n}")  # the run directory's own records, if any, are this run's
    mine = shard_units(units, datasets, i, n)
    sdir = shard_dir(out, i, n)
    meta = {"fingerprint": fingerprint, "source": source, "shard": [i, n], "n_units": len(mine),
            "n_units_total": len(units), "model": backend.name, "rendering": rendering, "overflow": overflow}
    with RunLock(sdir):
        # the shard's directory is this run's shard by the one run-dir rule (zcp.core.rundir: another model, data,
        # probe settings or config, or a shard of an earlier zcp, is refused in one line naming both fingerprints)
        claim_run_dir(sdir, "detect-shard", {"source": source, "shard": [i, n], "fingerprint": fingerprint},
                      products=(SHARD_META, RECORDS, META))
        write_json(sdir / SHARD_META, meta)
        if not mine:
            log.warning("shard %d/%d has no item (the data has %d): nothing to probe", i, n, len(item_shards(datasets, n)))
        collect_records(backend, datasets, probe, sdir, settings, on_ready, None, (mine, overflow), rendering)
    log.info("shard %d/%d finished: %d of the run's %d units in %s; once all %d have, run the same command with "
             "run.shard=merge", i, n, len(mine), len(units), sdir, n)
    return meta


def _shard_count(out: Path) -> int:
    """n of the shards in `out` (every shards/<i>-of-<n>/ must say the same n)."""
    counts = set()
    for d in (out / SHARDS).glob("*-of-*") if (out / SHARDS).is_dir() else []:
        head, _, tail = d.name.partition("-of-")
        if d.is_dir() and head.isdigit() and tail.isdigit():
            counts.add(int(tail))
    if not counts:
        raise RunDirError(f"run.shard=merge: {out} holds no shard ({out / SHARDS}/<i>-of-<n>/); probe them first "
                          "with the same command and run.shard=i/n for i = 0 .. n-1")
    if len(counts) > 1:
        raise RunDirError(f"run.shard=merge: {out / SHARDS} holds shards of {' and of '.join(map(str, sorted(counts)))} "
                          "ways; keep one split (delete the <i>-of-<n>/ directories of the others) and merge again")
    return counts.pop()


def _read_shard(out: Path, i: int, n: int, source: str, order: dict[tuple[str, str, str, int], int],
                owner: dict[tuple[str, str], int], first: dict[str, Any] | None,
                warnings: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], list]:
    """Shard i's shard.json and records, after checking that it finished this run (else a one-line RunDirError);
    a unit its records hold twice with different content (the first copy kept) is logged and put in `warnings`."""
    sdir = shard_dir(out, i, n)
    again = f"run the same command with run.shard={i}/{n}"
    if not (sdir / SHARD_META).exists():
        raise RunDirError(f"run.shard=merge: shard {i}/{n} is missing (no {sdir / SHARD_META}); {again}, then merge")
    meta = read_json(sdir / SHARD_META)
    if meta.get("source") != source:
        raise RunDirError(f"run.shard=merge: shard {i}/{n} ({sdir}) is stale: it was probed with another model, data "
                          f"or probe settings than this command (source {meta.get('source')}, this command {source}); "
                          f"delete {sdir} and {again}, then merge")
    if first is not None and meta.get("fingerprint") != first["fingerprint"]:
        raise RunDirError(f"run.shard=merge: shard {i}/{n} ({sdir}) is stale: its fingerprint {meta.get('fingerprint')} "
                          f"differs from shard 0/{n}'s {first['fingerprint']} (the model or the plan changed between "
                          f"them); delete {sdir} and {again}, then merge")
    path = sdir / RECORDS
    store = RecordStore(path, _key)  # the shard's finished records (a torn last line of a killed shard dropped)
    unique = {_key(r): r for r in store.unique(store.read())}
    if store.conflicts:
        log.warning("%s", store.conflict_warning())
        if warnings is not None:
            warnings.append({"file": str(path), "units": len(store.conflicts), "warning": store.conflict_warning()})
    if len(unique) < int(meta["n_units"]):
        raise RunDirError(f"run.shard=merge: shard {i}/{n} is not finished ({path} holds {len(unique)} of its "
                          f"{meta['n_units']} units); {again} (it resumes), then merge")
    wrong = [k for k in unique if k not in order or owner.get((k[0], k[2])) != i]
    if wrong or len(unique) != int(meta["n_units"]):
        raise RunDirError(f"run.shard=merge: shard {i}/{n} ({sdir}) is stale: it holds units this command's data does "
                          f"not give to it (e.g. {wrong[:1] or 'a count other than its shard.json'}); delete {sdir} "
                          f"and {again}, then merge")
    return meta, list(unique.values())


def _merge_plan(datasets: list[DetectDataset], probe: ProbeConfig, meta: dict[str, Any]
                ) -> dict[tuple[str, str, str, int], dict[str, Any]]:
    """What each unit's record must carry (`zcp.probe.planned`), known without the model: the units as the
    datasets give them, cut as shard 0's plan says (data.on_overflow=truncate, in its shard.json `overflow`), the
    zero-CoT prompt pre-filled or not as its `rendering` says (`probe_mode`)."""
    cuts: dict[tuple[str, str, str, int], int] = {}
    for o in meta.get("overflow") or []:
        action = str(o.get("action", ""))
        if action.startswith("truncated "):
            cuts[(o["split"], o["variant"], o["original_id"], int(o["draw"]))] = int(action.split()[1])
    units = [(k, _cut(it, cuts.get(k, 0))) for ds in datasets for k, it in ds.work()]
    mode = (meta.get("rendering") or {}).get("probe_mode")
    return planned_fields(units, None, probe, prefill=mode == "prefill" if mode else probe.mode != "api")


def merge_shards(datasets: list[DetectDataset], probe: ProbeConfig, out: str | Path, settings: DetectSettings, *,
                 source: str, tracker: Any = None, extra: dict[str, Any] | None = None, title: str | None = None,
                 on_ready: Any = None) -> dict[str, Any]:
    """Gather the n finished shards of the run in `out` into its records.jsonl and run_meta.json, then run the
    statistics and reports once (`write_results`); returns the summary. Loads no model.

    Under the run's lock, and each shard's (a shard still running refuses the merge). Checked first, each refused
    with one line naming the shard and the command that fixes it: every shard 0..n-1 is there (missing), was probed
    from this command (`source`; stale), has shard 0's fingerprint (stale), holds all its units (unfinished) and
    only units the rule gives it. The records are then written in plan order (`plan_order`), byte for byte the
    lines one process writes, and run_meta.json as one process writes it; `on_ready` runs before (config.yaml).
    """
    out = Path(out)
    order = plan_order(datasets)
    with RunLock(out), ExitStack() as locks:
        n = _shard_count(out)
        owner = item_shards(datasets, n)
        metas: list[dict[str, Any]] = []
        records: list[dict[str, Any]] = []
        notes: list[dict[str, Any]] = []  # units a shard's records hold twice with different content
        for i in range(n):
            if (shard_dir(out, i, n) / SHARD_META).exists():
                try:
                    locks.enter_context(RunLock(shard_dir(out, i, n)))
                except RunDirError:
                    raise RunDirError(f"run.shard=merge: shard {i}/{n} is still running ({shard_dir(out, i, n)} is "
                                      "locked); wait for it to finish, then merge") from None
            meta, recs = _read_shard(out, i, n, source, order, owner, metas[0] if metas else None, notes)
            if not metas:
                check = unit_mismatch(_merge_plan(datasets, probe, meta))
            why = next((w for w in map(check, recs) if w is not None), None)
            if why is not None:
                raise RunDirError(f"run.shard=merge: shard {i}/{n} ({shard_dir(out, i, n)}) holds records not made "
                                  f"as this command plans them ({why}); delete {shard_dir(out, i, n)} and run the "
                                  f"same command with run.shard={i}/{n}, then merge")
            metas.append(meta)
            records += recs
        first = metas[0]
        if len(records) != int(first["n_units_total"]):
            raise RunDirError(f"run.shard=merge: the {n} shards in {out / SHARDS} hold {len(records)} units, the run "
                              f"{first['n_units_total']}; delete {out / SHARDS} and probe the shards again")
        detection_meta(out, first["fingerprint"], "merge")
        records.sort(key=lambda r: order[_key(r)])
        if on_ready is not None:
            on_ready()
        # run_meta.json as one process writes it: a shard's own (backend fingerprint, rendering) with the run's
        # fingerprint and unit count, so a later one-process rerun of the command resumes this directory
        shard_meta = read_json(shard_dir(out, 0, n) / META)
        write_json(out / META, {**shard_meta, "fingerprint": first["fingerprint"], "n_units": len(records)})
        write_jsonl(out / RECORDS, records)
        log.info("merged %d shards: %d units into %s", n, len(records), out / RECORDS)
        cover = coverage(datasets, [(_key(r), None) for r in records])  # type: ignore[misc]
        if notes:  # as one process's summary.json says them
            extra = {**(extra or {}), "record_warnings": notes}
        return write_results(records, first["model"], datasets, probe, out, settings, tracker=tracker, extra=extra,
                             title=title, overflow=first["overflow"], cover=cover, rendering=first["rendering"])
