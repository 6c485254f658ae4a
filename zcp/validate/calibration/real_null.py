"""Parts (b) and (c) of the calibration study: nulls on real scores.

(b) Real-score nulls from a detection run's records.jsonl: per item a random reference draw plays the original
and the other draws are its references, so H0 holds by construction while the scores are a real model's.
(c) The uncontaminated base model on random item subsets of a real benchmark, originals against their
references: the false-positive rate a user would meet, including any systematic difference the perturbation
itself introduces.
"""

from __future__ import annotations

import glob
import json
import math
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zcp.core.io import stable_hash
from zcp.probe.metrics import BUILTIN_METRICS, get_metric
from zcp.probe.probe_config import StatsConfig
from zcp.validate.calibration.tests import (
    COMBINED,
    TESTS,
    all_pvalues,
    bonferroni,
    cell_rng,
    differences,
    kind_of,
    rate_row,
    sign_pvalues,
    ttest_pvalues,
    wilcoxon_pvalues,
)

# --------------------------------------------------------------------------------------------------
# (b) real-score nulls from detection records


def expand_paths(patterns: Iterable[str]) -> list[Path]:
    """Files named by paths or glob patterns (`**` allowed), sorted, duplicates removed."""
    out: list[Path] = []
    for pat in patterns:
        hits = sorted(glob.glob(str(pat), recursive=True)) if any(ch in str(pat) for ch in "*?[") else [str(pat)]
        for h in hits:
            p = Path(h)
            if p.is_file() and p not in out:
                out.append(p)
    return out


def _has_metric(rec: Mapping[str, Any], metric: str) -> bool:
    from zcp.probe.metrics import metric_value

    try:
        v = metric_value(dict(rec), metric)
    except (KeyError, TypeError, ValueError):
        return False
    return math.isfinite(v)


def reference_draws(records: Iterable[Mapping[str, Any]], metrics: Sequence[str]
                    ) -> tuple[dict[str, dict[str, np.ndarray]], list[str]]:
    """Per split, per original item: its reference draws' scores, an array (draws, metrics) in draw order.

    Only metrics present in every reference record are kept (a run with probe.metrics=[p_first, p_all]
    has no acc); returns the groups and the metrics kept.
    """
    from zcp.probe.metrics import metric_value

    refs = [r for r in records if r.get("variant") == "reference"]
    kept = [mt for mt in metrics if refs and all(_has_metric(r, mt) for r in refs)]
    by: dict[str, dict[str, list[tuple[int, list[float]]]]] = defaultdict(lambda: defaultdict(list))
    for r in refs:
        by[str(r["split"])][str(r["original_id"])].append((int(r["draw"]), [metric_value(dict(r), mt) for mt in kept]))
    out = {split: {oid: np.array([v for _, v in sorted(rows)], dtype=np.float64).reshape(len(rows), len(kept))
                   for oid, rows in items.items()}
           for split, items in by.items()}
    return out, kept


def pseudo_null(draws: Sequence[np.ndarray], rng: np.random.Generator, n_items: int | None = None
                ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """One real-score null replicate: per item a random draw plays the original, the others its references.

    draws: per item an array (m_i, k) of its reference draws' scores (m_i >= 2). Returns the originals
    (n, k), the references (list of (m_i - 1, k) arrays) and the chosen items' indices. The label is a
    uniform pick, so the pseudo-original is exchangeable with its references by construction.
    """
    idx = np.arange(len(draws))
    if n_items is not None and n_items < len(draws):
        idx = np.sort(rng.choice(len(draws), size=n_items, replace=False))
    orig, refs = [], []
    for i in idx:
        a = draws[i]
        if a.shape[0] < 2:
            raise ValueError(f"item {i} has {a.shape[0]} reference draw(s); a real-score null needs >= 2")
        j = int(rng.integers(a.shape[0]))
        orig.append(a[j])
        refs.append(np.delete(a, j, axis=0))
    return np.array(orig), refs, idx


@dataclass
class RealNullSettings:
    """Real-score nulls from detection records."""

    records: Sequence[str] = ()
    metrics: Sequence[str] = BUILTIN_METRICS
    tests: Sequence[str] = TESTS
    replicates: int = 1000
    n_items: Sequence[int | None] = (None,)  # subsample items per replicate (None: all usable items)
    B: int = 999
    library_check: int = 20  # replicates whose exact binary p is recomputed by zcp.probe.stats.paired_test


def _ref_arg(refs: Sequence[np.ndarray], col: int) -> np.ndarray | list[np.ndarray]:
    """References of one metric for the library: an (n, m) array when rectangular, else a ragged list."""
    cols = [r[:, col] for r in refs]
    if len({c.size for c in cols}) == 1:
        return np.vstack(cols)
    return cols


def run_replicates(orig: Sequence[np.ndarray], refs: Sequence[Sequence[np.ndarray]], metrics: Sequence[str],
                    tests: Sequence[str], B: int, alphas: Sequence[float], seed: int, progress: bool = True,
                    desc: str = "replicates") -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Run the library's tests and the comparators on replicate datasets.

    orig[r]: (n, k) scores of replicate r's originals (k metrics); refs[r]: per item (m_i, k) references.
    The permutation and bootstrap tests are zcp.probe.stats.paired_test (what a user runs); the t, Wilcoxon and
    sign tests are scipy's on d_i. Returns p-values per metric per test (R,), plus the combined p
    (Bonferroni over the metrics, per test) and the attainable size of the exact test for binary metrics.
    """
    from zcp.probe.stats import binary_null_law, paired_test

    R = len(orig)
    out: dict[str, dict[str, np.ndarray]] = {mt: {t: np.ones(R) for t in tests} for mt in metrics}
    attain: dict[str, np.ndarray] = {}
    d = {mt: np.vstack([differences(orig[r][:, k], [x[:, k] for x in refs[r]]) for r in range(R)])
         for k, mt in enumerate(metrics)}
    for mt in metrics:
        for t in tests:
            if t == "ttest":
                out[mt][t] = ttest_pvalues(d[mt])
            elif t == "wilcoxon":
                out[mt][t] = wilcoxon_pvalues(d[mt])
            elif t == "sign":
                out[mt][t] = sign_pvalues(d[mt])
    lib = [t for t in tests if t in ("permutation", "bootstrap")]
    bar = None
    if progress and lib:
        from tqdm.auto import tqdm

        bar = tqdm(total=R, desc=desc, unit="rep")
    for r in range(R):
        for k, mt in enumerate(metrics):
            ref_k = _ref_arg(refs[r], k)
            for t in lib:
                res = paired_test(mt, orig[r][:, k], ref_k, B=B, seed=seed + r, test=t)
                out[mt][t][r] = res.p_value
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    for k, mt in enumerate(metrics):
        if kind_of(mt) == "binary" and "permutation" in tests:  # the exact test's attainable size (library law)
            attain[mt] = np.array([[binary_null_law(orig[r][:, k], [x[:, k] for x in refs[r]]).attainable_size(a)
                                    for r in range(R)] for a in alphas])
    combined = {t: bonferroni([out[mt][t] for mt in metrics]) for t in tests}
    out[COMBINED] = combined
    return out, attain


def real_null_study(s: RealNullSettings, alphas: Sequence[float], seed: int, *, discrete_below: float,
                    progress: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Type-I error on real scores: per records file and split, pseudo-originals drawn from the references.

    Sources whose items all have the same number of draws are tested vectorised (as in part (a), with the
    exact binary test checked against the library); ragged ones through zcp.probe.stats.paired_test.
    """
    from zcp.core.records import RecordStore

    paths = expand_paths(s.records)
    info: dict[str, Any] = {"files": [str(p) for p in paths], "sources": []}
    rows: list[dict[str, Any]] = []
    if not paths:
        info["skipped"] = f"no records file matched {list(s.records)}"
        return rows, info
    for path in paths:
        recs = RecordStore(path).read()
        groups, metrics = reference_draws(recs, s.metrics)
        for split, items in sorted(groups.items()):
            usable = [oid for oid, a in sorted(items.items()) if a.shape[0] >= 2]
            label = _source_label(path, split)
            src = {"source": label, "file": str(path), "split": split, "items": len(items), "usable_items": len(usable),
                   "metrics": metrics, "draws": sorted({int(items[o].shape[0]) for o in usable})}
            info["sources"].append(src)
            if len(usable) < 2 or not metrics:
                src["skipped"] = "fewer than 2 items with >= 2 reference draws, or no metric in every record"
                continue
            draws = [items[o] for o in usable]
            for n_items in s.n_items:
                n_eff = len(usable) if n_items is None else min(int(n_items), len(usable))
                rng = cell_rng(seed, "real", label, n_eff)
                reps = [pseudo_null(draws, rng, n_eff) for _ in range(s.replicates)]
                if len(src["draws"]) == 1:  # every item has m draws: vectorised over replicates
                    pv, attain, worst = _vectorised_replicates(reps, metrics, s.tests, s.B, rng, alphas,
                                                               s.library_check)
                    src["library_check_max_abs_diff"] = worst
                else:  # ragged: the library, replicate by replicate
                    pv, attain = run_replicates([r[0] for r in reps], [r[1] for r in reps], metrics, s.tests, s.B,
                                                alphas, seed, progress, desc=f"real null {label} n={n_eff}")
                m_label = "/".join(str(x - 1) for x in src["draws"])
                for mt in [*metrics, COMBINED]:
                    score = float(np.mean([a[:, metrics.index(mt)].mean() for a in draws])) if mt in metrics else None
                    lim = bool(mt in attain and attain[mt][0].mean() < discrete_below)
                    for t in s.tests:
                        row = rate_row(pv[mt][t], alphas, part="b", regime=label, metric=mt, test=t, m=m_label,
                                       n=n_eff, accuracy=score, score_mean=score, discrete_limited=lim)
                        if t == "permutation" and mt in attain:
                            for ai, a in enumerate(alphas):
                                row[f"attainable@{a:g}"] = float(attain[mt][ai].mean())
                        rows.append(row)
    return rows, info


def _vectorised_replicates(reps: Sequence[tuple[np.ndarray, list[np.ndarray], np.ndarray]], metrics: Sequence[str],
                           tests: Sequence[str], B: int, rng: np.random.Generator, alphas: Sequence[float],
                           library_check: int) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray], float]:
    """The tests of `all_pvalues` on real-null replicates with the same m per item (the demo's case), and the
    largest |p - p_library| of the exact binary test over the first `library_check` replicates."""
    from zcp.probe.stats import paired_test

    orig = np.stack([r[0] for r in reps])  # (R, n, k)
    ref = np.stack([np.stack(r[1]) for r in reps])  # (R, n, m, k)
    out: dict[str, dict[str, np.ndarray]] = {}
    attain: dict[str, np.ndarray] = {}
    worst = 0.0
    for k, mt in enumerate(metrics):
        o, y = orig[..., k], ref[..., k]
        out[mt], att = all_pvalues(kind_of(mt), o, y, tests, B, rng, alphas)
        if att is not None:
            attain[mt] = np.vstack([att[a] for a in alphas])
            for r in range(min(library_check, o.shape[0])):
                worst = max(worst, abs(paired_test(mt, o[r], y[r]).p_value - float(out[mt]["permutation"][r])))
    out[COMBINED] = {t: bonferroni([out[mt][t] for mt in metrics]) for t in tests}
    return out, attain, worst


def _source_label(path: Path, split: str) -> str:
    """A short name for a records file and split, e.g. demo__ab12/FT/C or base-detect__cd34/U."""
    skip = {"outputs", "contaminate", "detect", ".", "", "/"}
    parts = [p for p in path.parent.parts[-3:] if p not in skip]
    return "/".join([*parts, split])


# --------------------------------------------------------------------------------------------------
# (c) the base model on random subsets of a real benchmark


@dataclass
class BaseModelSettings:
    """Random item subsets of a benchmark, scored once by a real (uncontaminated) model."""

    metrics: Sequence[str] = tuple(m for m in BUILTIN_METRICS if not get_metric(m).needs_full_cot)  # con: a full-CoT generation per unit (slow on CPU)
    tests: Sequence[str] = TESTS
    subsets: int = 200
    subset_size: int = 100
    B: int = StatsConfig.bootstrap_samples  # the library default (stats.bootstrap_samples): what a user meets
    chunk_size: int = 256
    records_root: str = "outputs/calibration/records"


def item_table(records: Iterable[Mapping[str, Any]], metrics: Sequence[str]
               ) -> tuple[list[str], np.ndarray, list[np.ndarray]]:
    """Originals (n, k) and their reference draws (per item (m_i, k)) from detection records.

    Items are keyed by (split, original_id); items without an original record or without reference
    draws are left out.
    """
    from zcp.probe.metrics import metric_value

    orig: dict[tuple[str, str], list[float]] = {}
    refs: dict[tuple[str, str], list[tuple[int, list[float]]]] = defaultdict(list)
    for r in records:
        key = (str(r["split"]), str(r["original_id"]))
        vals = [metric_value(dict(r), mt) for mt in metrics]
        if r.get("variant") == "original":
            orig[key] = vals
        elif r.get("variant") == "reference":
            refs[key].append((int(r["draw"]), vals))
    keys = sorted(k for k in orig if refs.get(k))
    X = np.array([orig[k] for k in keys], dtype=np.float64).reshape(len(keys), len(metrics))
    Y = [np.array([v for _, v in sorted(refs[k])], dtype=np.float64).reshape(-1, len(metrics)) for k in keys]
    return ["/".join(k) for k in keys], X, Y


def score_benchmark(cfg: Any, s: BaseModelSettings, datasets: Sequence[Any], skipped: Sequence[Mapping[str, Any]],
                    progress: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Probe every original and reference item once with the real probe machinery (resumable, batched).

    `datasets`, `skipped`: zcp.probe.detect.load_datasets(cfg.data). The records live in
    <records_root>/<data>__<model>__<hash of model content, data and probe config>, shared by every
    calibration run with the same model, data and probe settings.
    """
    from zcp.backends.registry import build_backend
    from zcp.benchmarks.data_config import DataConfig
    from zcp.config import model_name, to_dict
    from zcp.config.schemas import group_config
    from zcp.core.io import model_fingerprint
    from zcp.probe.detect import DetectSettings, collect_records, probe_config

    data = group_config(DataConfig, cfg.data, "data")  # the job's data checked: DataConfig holds the defaults

    probe = probe_config(cfg.probe, cfg.model)
    probe.metrics = list(s.metrics)
    key = stable_hash(json.dumps({"model": to_dict(cfg.model), "weights": model_fingerprint(cfg.model.get("path")),
                                  "data": to_dict(cfg.data), "probe": repr(probe.__dict__)},
                                 sort_keys=True, default=str), 10)
    out = Path(s.records_root) / f"{data.name}__{model_name(cfg.model)}__{key}"
    backend = build_backend(cfg.model)
    settings = DetectSettings(chunk_size=s.chunk_size, progress=progress,
                              on_overflow=data.on_overflow)
    overflow: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    records = collect_records(backend, datasets, probe, out, settings, overflow=overflow)
    secs = time.perf_counter() - t0
    return records, {"records_dir": str(out), "units": len(records), "scoring_seconds": secs,
                     "items": sum(len(ds.originals) for ds in datasets),
                     "items_without_reference": sum(x.get("reason") == "no reference row" for x in skipped),
                     "data_issues": len(skipped), "overflow_policy": settings.on_overflow,
                     "overflow_rows": sum(r.get("action") == "skipped row" for r in overflow),
                     "overflow_items": len({(r["split"], r["original_id"]) for r in overflow
                                            if r.get("action") == "skipped item"}),
                     "model": model_name(cfg.model), "probe_metrics": list(probe.metrics)}


def subset_study(X: np.ndarray, Y: Sequence[np.ndarray], metrics: Sequence[str], s: BaseModelSettings,
                 alphas: Sequence[float], seed: int, *, discrete_below: float, label: str = "base model",
                 progress: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rejection rates over random item subsets (seeded, without replacement), and the full-pool tests.

    The subsets share items, so their verdicts are dependent: the binomial CI is nominal. The full-pool
    rows say whether the whole benchmark shows a systematic original-vs-reference difference, which the
    subset false-positive rate then reflects.
    """
    n_pool = X.shape[0]
    size = min(s.subset_size, n_pool)
    rng = cell_rng(seed, "subsets", label, size)
    picks = [np.sort(rng.choice(n_pool, size=size, replace=False)) for _ in range(s.subsets)]
    pv, attain = run_replicates([X[p] for p in picks], [[Y[i] for i in p] for p in picks], metrics, s.tests, s.B,
                                 alphas, seed, progress, desc=f"subsets of {size}")
    m_label = "/".join(str(v) for v in sorted({y.shape[0] for y in Y}))
    rows = []
    for mt in [*metrics, COMBINED]:
        score = float(X[:, metrics.index(mt)].mean()) if mt in metrics else None
        lim = bool(mt in attain and attain[mt][0].mean() < discrete_below)
        for t in s.tests:
            row = rate_row(pv[mt][t], alphas, part="c", regime=label, metric=mt, test=t, m=m_label, n=size,
                           accuracy=score, score_mean=score, discrete_limited=lim)
            if t == "permutation" and mt in attain:
                for ai, a in enumerate(alphas):
                    row[f"attainable@{a:g}"] = float(attain[mt][ai].mean())
            rows.append(row)
    full, _ = run_replicates([X], [list(Y)], metrics, s.tests, s.B, alphas, seed, False)
    full_rows = []
    for mt in [*metrics, COMBINED]:
        k = metrics.index(mt) if mt in metrics else None
        r: dict[str, Any] = {"metric": mt, "n": n_pool}
        if k is not None:
            r["s"] = float(X[:, k].mean())
            r["s_ref"] = float(np.mean([y[:, k].mean() for y in Y]))
        for t in s.tests:
            r[f"p_{t}"] = float(full[mt][t][0])
        full_rows.append(r)
    return rows, full_rows
