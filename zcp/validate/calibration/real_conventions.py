"""Calibration part (d) over answer conventions: the multi-convention verdict's false-positive rate on clean models.

run_detect's `probe.prefill` list (and `auto`) probes every answer convention (zcp.probe.conventions) and gives one
verdict over all of them: Bonferroni over every (convention, metric) p-value (zcp.probe.stats.combine_conventions).
This module measures that verdict's type-I error as part (d) measures the single-convention one
(zcp.validate.calibration.real_originals): the same clean models, pools, references, random subsets and exact-null
pools, scored under each convention of `real_originals.prefills`.

- **Scoring.** Each convention's probe is the run's probe with that convention's pre-fill, exactly as run_detect's
  multi-convention path builds it (`zcp.probe.multiconv.convention_probe`); the probe's own line (`probe`) is the
  probe unchanged, so its records are part (d)'s existing ones (content-keyed, reused). A model's conventions share
  one `MemoBackend` (zcp.backends.memo): the full-CoT generation that `con` compares against has no pre-fill and is
  generated once per unit, as run_detect does. Records per convention: `<pool>__<model>__conv-<name>__<key>/`.
- **Same items, same draws.** V is built per convention on the items every convention scored; each subset keeps
  the same m draws of an item in every convention (`subset_draws` depends on the values' keys and the subsets
  only: one `SubsetDraws` per cell serves every convention and null pool).
- **The joint null.** An exact-null pool relabels the SAME version of each item as its original in every
  convention (one label per item shared by all conventions): the within-item exchangeability the verdict's tests
  assume, jointly over the conventions.
- **Rows.** Per (model, pool, N): kind `zcp` rows per convention (`convention` = its name; each metric and the
  convention's combined verdict, Bonferroni over its metrics), and kind `multiconv` rows: per metric Bonferroni
  over the conventions, and `combined` = Bonferroni over every (convention, metric): the verdict run_detect gives.
  The `probe` convention's rows are part (d)'s rows digit for digit (its Monte Carlo stream is the one part (d)
  uses; the other conventions draw from streams of their own).
- **auto as read** (`real_originals.auto_read` = N > 0): per pool and model, `zcp.probe.multiconv.read_conventions`
  on the pool's first N originals plus probe.auto's neutral set: which conventions `probe.prefill=auto` would probe
  on that model beyond the probe's line and probe.auto.always.

The con of the `probe` convention reads the full-CoT answer as run_detect's multi-convention `probe` run does: every
run reads a full-CoT answer stated without a box (`#### 42`) through zcp.probe.conventions.read_full_cot (single- and
multi-convention alike; before that rule, only multi-convention runs did). The study still counts the units where
the probe records' full-CoT prediction differs from another convention's (`probe_line_cot_check`, the same
generation read the same way): a nonzero count there now means a fault.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from zcp.probe.conventions import PROBE, Resolved, parse_prefill, resolve_entries
from zcp.validate.calibration.real_originals import (
    FamilyRule,
    RealOriginalsSettings,
    SubsetDraws,
    cell_row,
    did_rows,
    family_rule,
    full_pool_tests,
    model_backend_config,
    pool_setup,
    score_pool,
    study_models,
    subset_draws,
    subset_pvalues,
    version_keys,
    version_table,
)
from zcp.validate.calibration.tests import bonferroni, cell_rng, rejects

log = logging.getLogger(__name__)

MULTI = "multiconv"  # the kind of the multi-convention verdict's rows


def study_conventions(s: RealOriginalsSettings, probe: Any) -> list[Resolved]:
    """`real_originals.prefills` resolved for the probe (zcp.probe.conventions.resolve_entries), in their order."""
    entries = parse_prefill(list(s.prefills))
    if not isinstance(entries, list):
        raise ValueError("real_originals.prefills: a list of conventions, not auto (auto's reading: auto_read)")
    return resolve_entries(entries, probe.zero_cot_prefix, probe.answer_suffix)


def convention_decisions(pv: Mapping[str, Sequence[np.ndarray]], metrics: Sequence[str], alpha: float
                         ) -> dict[tuple[str, str], np.ndarray]:
    """Rejections (R,) from p-values per convention (`pv[c]`: one array per metric): (c, metric) and (c, combined)
    for every convention, (MULTI, metric) Bonferroni over the conventions, (MULTI, combined) over every pair."""
    out: dict[tuple[str, str], np.ndarray] = {}
    for c, ps in pv.items():
        for mt, p in zip(metrics, ps, strict=True):
            out[(c, mt)] = rejects(p, alpha)
        out[(c, "combined")] = rejects(bonferroni(ps), alpha)
    for k, mt in enumerate(metrics):
        out[(MULTI, mt)] = rejects(bonferroni([ps[k] for ps in pv.values()]), alpha)
    out[(MULTI, "combined")] = rejects(bonferroni([p for ps in pv.values() for p in ps]), alpha)
    return out


def convention_rate_cells(Vs: Mapping[str, np.ndarray], metrics: Sequence[str], sizes: Sequence[int],
                          s: RealOriginalsSettings, seed: int, keys: np.ndarray | None = None, progress: bool = False,
                          desc: str = "", rule: FamilyRule | None = None) -> list[dict[str, Any]]:
    """Observed and exact-null rejection rates of every convention and of the multi-convention verdict.

    Vs[c] (n, M + 1, k): convention c's versions of the SAME n items (version 0 the original, then the M candidate
    draws, in the same order for every convention); `keys` as in `rate_cells`. The subsets are part (d)'s
    (`rate_cells`' generator), each null pool draws one label per item used by every convention, and the `probe`
    convention's tests draw from part (d)'s generator in part (d)'s order, so its rows equal `rate_cells`'."""
    names = list(Vs)
    V0 = Vs[names[0]]
    n = V0.shape[0]
    m = min(int(s.m), V0.shape[1] - 1)
    rows: list[dict[str, Any]] = []
    for N in sizes:
        N_eff = min(int(N), n)
        rng = cell_rng(seed, "real-originals", desc, N_eff)
        picks = np.stack([np.sort(rng.choice(n, N_eff, replace=False)) for _ in range(s.subsets)])
        draws = subset_draws(picks, m, keys, rule)
        short = draws.short
        rngs = {c: rng if c == PROBE else cell_rng(seed, "real-originals", desc, N_eff, "convention", c) for c in names}
        order = sorted(names, key=lambda c: c != PROBE)  # the probe's line first: right after its label, as in (d)

        def test(lab: np.ndarray | None, draws: SubsetDraws = draws, rngs: dict = rngs, order: list = order
                 ) -> dict[tuple[str, str], np.ndarray]:
            pv = {c: subset_pvalues(Vs[c], metrics, draws, s.B, s.alpha, rngs[c], lab) for c in order}
            return convention_decisions({c: pv[c] for c in names}, metrics, s.alpha)

        observed = test(None)
        null_rates: dict[tuple[str, str], list[float]] = {k: [] for k in observed}
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=s.null_pools, desc=f"null pools {desc} N={N_eff}", unit="pool", mininterval=5)
        for _ in range(s.null_pools):
            lab = rng.integers(0, m + 1, size=n)  # among the m + 1 tested versions (subset_versions)
            for k, v in test(lab).items():
                null_rates[k].append(float(v.mean()))
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        for (c, mt), rej in observed.items():
            row = cell_row(mt, rej, null_rates[(c, mt)], N_eff, m, short)
            if c == MULTI:
                rows.append({"kind": MULTI, "conventions": "+".join(names), "n_tests": len(names) * len(metrics)
                             if mt == "combined" else len(names), **row})
            else:
                rows.append({"kind": "zcp", "convention": c, **row})
    return rows


def common_versions(tables: Mapping[str, tuple[list[str], np.ndarray]]) -> tuple[list[str], dict[str, np.ndarray]]:
    """The items every convention scored with all draws, and each convention's V restricted to them (same order)."""
    ids = sorted(set.intersection(*(set(i) for i, _ in tables.values())))
    out = {}
    for c, (cids, V) in tables.items():
        pos = {i: k for k, i in enumerate(cids)}
        out[c] = V[[pos[i] for i in ids]]
    return ids, out


def cot_check(records: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any] | None:
    """The probe records' full-CoT predictions against another convention's (same generation, read with the
    multi-convention rule): units compared and units whose prediction differs. None without both."""
    other = next((c for c in records if c != PROBE), None)
    if PROBE not in records or other is None:
        return None

    def key(r: Mapping[str, Any]) -> tuple[Any, ...]:
        return (r["split"], r["variant"], r["original_id"], int(r["draw"]))

    theirs = {key(r): r.get("cot_prediction") for r in records[other] if "cot_prediction" in r}
    mine = [(key(r), r.get("cot_prediction")) for r in records[PROBE] if "cot_prediction" in r]
    both = [(k, v) for k, v in mine if k in theirs]
    return {"against": other, "units": len(both), "differ": sum(v != theirs[k] for k, v in both)}


def auto_reading(backend: Any, pname: str, items: Sequence[Any], refs: Mapping[str, Any], probe: Any, auto: Any,
                 n: int, s: RealOriginalsSettings, progress: bool) -> dict[str, Any]:
    """`probe.prefill=auto`'s reading (zcp.probe.multiconv.read_conventions) on the pool's first n originals and
    probe.auto's neutral set: the reading's sets and choice, and `added`: the conventions it chose from the model's
    own outputs (not the probe's line, not probe.auto.always)."""
    from zcp.probe.detect import DetectDataset, DetectSettings
    from zcp.probe.multiconv import read_conventions

    first = [it for it in items if it.id in refs][:n]
    ds = DetectDataset(pname, first, {it.id: refs[it.id] for it in first})
    reading, _ = read_conventions(backend, [ds], probe, auto, DetectSettings(chunk_size=s.chunk_size,
                                                                             progress=progress, on_overflow="skip"))
    added = [c for c in reading["chosen"] if c != PROBE and reading["why"].get(c) != "probe.auto.always"]
    return {"sets": {k: {"read": v["read"], "ends": v["ends"]} for k, v in reading["sets"].items()},
            "chosen": reading["chosen"], "why": reading["why"], "added_by_reading": added,
            "min_share": reading["min_share"], "neutral": reading["neutral"]}


def real_conventions_study(s: RealOriginalsSettings, probe_cfg: Any, model_cfg: Mapping[str, Any], seed: int,
                           auto: Any = None, progress: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Part (d) under every convention of `s.prefills` (module docstring): rows (kind zcp per convention, kind
    multiconv, and the `probe` convention's DiD rows against `s.base` as part (d) gives them) and an info block.
    `auto`: probe.auto's settings (zcp.probe.probe_config.AutoPrefillConfig), read when `s.auto_read` > 0."""
    from zcp.backends.memo import MemoBackend, full_cot_only
    from zcp.backends.registry import build_backend
    from zcp.probe.detect import probe_config

    probe = probe_config(probe_cfg, model_cfg)
    convs = study_conventions(s, probe)
    info: dict[str, Any] = {"pools": {}, "models": {}, "skipped": {}, "scoring": {},
                            "conventions": [c.to_dict() for c in convs], "auto_read": {}, "probe_line_cot_check": {},
                            "verdict": "Bonferroni over every (convention, metric) p-value "
                                       "(zcp.probe.stats.combine_conventions)"}
    models = study_models(s, info)
    rows: list[dict[str, Any]] = []
    for pname, raw in s.pools.items():
        spec, metrics, items, refs = pool_setup(pname, raw, s, models, info)
        M = int(spec.candidates or s.m)
        did_tables: dict[str, Any] = {}
        for mname, path in models.items():
            if s.tested is not None and mname not in s.tested:  # its training items still shape the references
                continue
            label = f"{mname}/{pname}"
            memo = MemoBackend(build_backend(model_backend_config(model_cfg, path, mname)), full_cot_only)
            if s.auto_read and auto is not None:
                info["auto_read"][label] = auto_reading(memo, pname, items, refs, probe, auto, int(s.auto_read), s,
                                                        progress)
            tables, recs_by = {}, {}
            for c in convs:
                recs, sinfo = score_pool(path, mname, pname, items, refs, metrics, s, probe_cfg, model_cfg, progress,
                                         convention=c, backend=memo)
                ids, V = version_table(recs, metrics, M)
                sinfo["items_used"] = len(ids)
                info["scoring"][f"{label}/{c.name}"] = sinfo
                tables[c.name], recs_by[c.name] = (ids, V), recs
            info["scoring"][f"{label}/full_cot"] = {"generated": memo.generated, "reused": memo.reused}
            info["probe_line_cot_check"][label] = cot_check(recs_by)
            ids, Vs = common_versions(tables)
            keys = version_keys(ids, items, refs)
            rule = family_rule(ids, items, info["pools"][pname]["reference"])
            info["scoring"][f"{label}/common_items"] = len(ids)
            for r in convention_rate_cells(Vs, metrics, s.sizes, s, seed, keys=keys, progress=progress, desc=label,
                                           rule=rule):
                rows.append({"part": "d", "model": mname, "pool": pname, **r})
            for c, V in Vs.items():
                info["scoring"][f"{label}/{c}"]["full_pool"] = full_pool_tests(V[:, : s.m + 1], metrics)
            if PROBE in tables:
                pids, PV = tables[PROBE]
                did_tables[mname] = (pids, PV, version_keys(pids, items, refs),
                                     family_rule(pids, items, info["pools"][pname]["reference"]))
        rows += did_rows(did_tables, metrics, pname, s, seed, progress)
    return rows, info
