"""Calibration part (d): the false-positive rate a clean model meets with REAL originals.

Parts (a) and (b) of the calibration study check the test itself (simulated nulls; real scores with a reference
draw playing the original). By construction they cannot see a systematic difference between originals and their
references: an original that is a special case no reference matches, or references whose leading digits differ
from the originals'. Part (d) measures what a user meets: models known to be clean (the shipped base models on the
reserved word-problem pool they never saw, sham fine-tunes of the simulation that trained on the same recipe with
nothing of the benchmark leaked) scored on real pools (the reserved pool, ArithMark, GSM8K) with the project's own
references, then the verdict on random N-item subsets, per metric and combined (Bonferroni), at alpha.

Subsets of one pool share items, so their rejection rate varies even for a valid test (a pool with a few items
that happen to favour the original gives a high rate on every subset holding them). The observed rate is therefore
judged against **exact-null pools** built from the same records: each item's "original" is replaced by one of its
m + 1 real versions drawn uniformly (the other m become its references), which makes the label exchangeable by
construction while keeping the real score distributions; then the same subsets are tested. Reported per cell: the
observed rate with its Clopper-Pearson 95% CI (nominal: the subsets are dependent), the null pools' mean and 95th
percentile, and the share of null pools at or above the observed rate (small = the real originals are rejected more
often than exchangeable ones would be).

The tests are the library's within-item permutation tests vectorised over subsets (`zcp.validate.calibration.tests`): exact for
acc/con, Monte Carlo with B relabellings for p_first/p_all (a replicate stops drawing once its p must exceed alpha:
the decisions at alpha are those of the full B). Difference-in-differences (a fine-tune against its base, the
simulation's second verdict and run_detect's `base_model.path`) is measured the same way for every model paired
with the shipped base model: per item the gap (S - S_ref) of the model minus the base's, the sign-flip permutation
test; its null pools relabel the same version as original in both models.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zcp.core.io import stable_hash
from zcp.core.items import Item
from zcp.probe.metrics import BUILTIN_METRICS
from zcp.validate.calibration.tests import (
    bonferroni,
    cell_rng,
    kind_of,
    permutation_mc,
    permutation_pvalues,
    rate_ci,
    rejects,
)

log = logging.getLogger(__name__)

POOL_KINDS = ("wordproblem_pool", "arithmark", "gsm8k", "file")


@dataclass
class PoolSpec:
    """One real pool: its items and how its references are built (the registry's builders)."""

    kind: str = "wordproblem_pool"  # wordproblem_pool | arithmark | gsm8k | file
    n: int = 300  # wordproblem_pool: items of the reserved pool; gsm8k/file: first n rows (0 = all)
    n_per_stage: int = 60  # arithmark: records per stage (generated with `seed`)
    seed: int = 0  # arithmark generation
    path: str | None = None  # gsm8k / file
    format: str = "items"  # file: loader format
    method: str = "auto"  # reference method (zcp.benchmarks.references.registry)
    special_cases: str = "drop"
    metrics: Sequence[str] | None = None  # null: the settings' metrics
    # draws built per item (null: m); each subset tests the first m that are not another subset item's values
    # (a pool whose families have few values, the reserved pool's, needs more candidates than m)
    candidates: int | None = None


@dataclass
class RealOriginalsSettings:
    """Part (d): models x pools x subset sizes, null pools."""

    models: Mapping[str, str] = field(default_factory=dict)  # name -> model folder (shipped models, sham runs' model/)
    base: str | None = "base_model"  # the model every other one is paired with for the DiD rows (None: no DiD)
    # name -> PoolSpec fields (zcp.config.schemas.validate checks each pool against PoolSpec: the metadata's schema)
    pools: Mapping[str, Any] = field(default_factory=dict, metadata={"schema": dict[str, PoolSpec]})
    exclude: Sequence[str] = ("auto",)  # reference exclusions for every pool (+ each model's training_items.jsonl)
    m: int = 9
    sizes: Sequence[int] = (50, 100)
    subsets: int = 500
    null_pools: int = 100
    metrics: Sequence[str] = BUILTIN_METRICS
    B: int = 999
    alpha: float = 0.05
    reference_seed: int = 0
    records_root: str = "outputs/calibration/real_originals"
    chunk_size: int = 256
    # the answer conventions probed (zcp.probe.conventions names or literals, as probe.prefill lists them): [probe]
    # is the probe's line alone (today's study); several add per-convention rows and the multi-convention verdict
    # (zcp.validate.calibration.real_conventions: Bonferroni over every (convention, metric), as run_detect's)
    prefills: Sequence[str] = ("probe",)
    auto_read: int = 0  # several prefills: per pool, the first N originals read by auto (plus probe.auto's neutral set)
    # the models whose rows this run computes (null: all); every model of `models` still shapes the references (its
    # training items are excluded), so the records and each model's rows are those of the run over all models
    tested: Sequence[str] | None = None


# --------------------------------------------------------------------------------------------------- pools


def pool_items(spec: PoolSpec) -> list[Item]:
    """The items of a pool spec."""
    if spec.kind == "wordproblem_pool":
        from zcp.benchmarks.reserved import benchmark_pool

        return benchmark_pool(int(spec.n))
    if spec.kind == "arithmark":
        from zcp.benchmarks.arithmark import arithmark_to_item, generate_arithmark

        return [arithmark_to_item(r) for r in generate_arithmark(int(spec.n_per_stage), int(spec.seed))]
    if spec.kind in ("gsm8k", "file"):
        from zcp.benchmarks.loaders import load_items, resolve_path

        if not spec.path:
            raise ValueError(f"pool kind {spec.kind} needs a path")
        items = load_items(str(resolve_path(spec.path)), format="gsm8k" if spec.kind == "gsm8k" else spec.format)
        return items[: int(spec.n)] if spec.n else items
    raise ValueError(f"pool kind must be one of {POOL_KINDS}, not {spec.kind!r}")


def model_exclusions(models: Mapping[str, str]) -> list[str]:
    """Training-items files of the models that have them (a sham run's model/ sits beside training_items.jsonl)."""
    out = []
    for path in models.values():
        f = Path(path).parent / "training_items.jsonl"
        if f.is_file():
            out.append(f"items:{f}")
    return out


def pool_references(items: list[Item], spec: PoolSpec, s: RealOriginalsSettings, models: Mapping[str, str]
                    ) -> tuple[dict[str, list[Item]], dict[str, Any]]:
    """One reference set per pool, shared by every model: the builder's draws with every model's training data
    excluded (conditioning on more of what the pool was selected against keeps the draws exact for each)."""
    from zcp.benchmarks.build import reference_context
    from zcp.benchmarks.references.registry import build_references, resolve_method

    fmt = {"wordproblem_pool": "wordproblems", "arithmark": "arithmark", "gsm8k": "gsm8k"}.get(spec.kind, spec.format)
    method = resolve_method(spec.method, items, fmt)
    # candidates may be other pool items' values: each subset then keeps the draws off its own items (subset_versions)
    ctx, excl = reference_context(items, s.reference_seed, {"exclude": [*s.exclude, *model_exclusions(models)],
                                                            "special_cases": spec.special_cases,
                                                            "exclude_benchmark": "false"})
    rs = build_references(items, method, int(spec.candidates or s.m), ctx)
    report = {**rs.report, "exclusions": excl, "rejections": len(rs.rejections),
              "items_with_references": len(rs.refs)}
    return rs.refs, report


# --------------------------------------------------------------------------------------------------- scoring


def score_pool(model_path: str, model_name: str, pool_name: str, items: list[Item], refs: dict[str, list[Item]],
               metrics: Sequence[str], s: RealOriginalsSettings, probe_cfg: Any, model_cfg: Mapping[str, Any],
               progress: bool = True, *, convention: Any = None, backend: Any = None
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Probe originals and references once (resumable records under records_root; the same probe as run_detect).

    `convention` (a zcp.probe.conventions.Resolved other than `probe`): the probe pre-filling it, as run_detect's
    multi-convention path builds it (zcp.probe.multiconv.convention_probe); its records live in
    `<pool>__<model>__conv-<name>__<key>`. None or `probe`: the probe's own line, today's records and directory.
    `backend`: one already built (a MemoBackend shared by a model's conventions); None builds the model's."""
    from zcp.backends.registry import build_backend
    from zcp.core.io import model_fingerprint
    from zcp.probe.detect import DetectDataset, DetectSettings, collect_records, probe_config

    probe = probe_config(probe_cfg, model_cfg)
    probe.metrics = tuple(metrics)
    tag = ""
    if convention is not None and convention.name != "probe":
        from zcp.probe.multiconv import convention_probe

        probe = convention_probe(probe, convention)
        tag = f"conv-{convention.name}__"
    ds = DetectDataset(pool_name, [it for it in items if it.id in refs], refs)
    key = stable_hash(json.dumps({"model": model_fingerprint(model_path), "probe": repr(probe.__dict__),
                                  "units": [(k, it.question, it.answer) for k, it in ds.work()]},
                                 sort_keys=True, default=str), 10)
    out = Path(s.records_root) / f"{pool_name}__{model_name}__{tag}{key}"
    if backend is None:
        backend = build_backend(model_backend_config(model_cfg, model_path, model_name))
    settings = DetectSettings(chunk_size=s.chunk_size, progress=progress, on_overflow="skip")
    overflow: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    records = collect_records(backend, [ds], probe, out, settings, overflow=overflow)
    return records, {"records_dir": str(out), "units": len(records), "seconds": round(time.perf_counter() - t0, 1),
                     "overflow_items": len({r["original_id"] for r in overflow if r.get("action") == "skipped item"}),
                     "overflow_rows": sum(r.get("action") == "skipped row" for r in overflow)}


def model_backend_config(model_cfg: Mapping[str, Any], model_path: str, model_name: str) -> dict[str, Any]:
    """The backend config of one of the study's models: the job's model settings with its folder and name."""
    return {**dict(model_cfg), "path": model_path, "adapter": None, "name": model_name}


def version_table(records: Sequence[Mapping[str, Any]], metrics: Sequence[str], m: int
                  ) -> tuple[list[str], np.ndarray]:
    """Items with their original and exactly m reference draws: ids and V (n, m + 1, k), version 0 the original.

    Items with fewer draws (a builder short of values, a row left out for the context) are left out: the
    vectorised tests need the same m per item (counted by the caller)."""
    from zcp.probe.metrics import metric_value

    orig: dict[str, list[float]] = {}
    refs: dict[str, list[tuple[int, list[float]]]] = {}
    for r in records:
        vals = [metric_value(dict(r), mt) for mt in metrics]
        if r.get("variant") == "original":
            orig[str(r["original_id"])] = vals
        elif r.get("variant") == "reference":
            refs.setdefault(str(r["original_id"]), []).append((int(r["draw"]), vals))
    ids = sorted(i for i in orig if len(refs.get(i, [])) == m)
    V = np.array([[orig[i], *[v for _, v in sorted(refs[i])]] for i in ids], dtype=np.float64)
    return ids, V.reshape(len(ids), m + 1, len(metrics))


def version_keys(ids: Sequence[str], items: Sequence[Item], refs: Mapping[str, Sequence[Item]]) -> np.ndarray:
    """Integer codes (n, M + 1) of each version's values (word-problem signature, ArithMark expression, else the
    question): equal codes = the same values, so a draw that is another item's original can be recognised."""
    from zcp.benchmarks.references.exclusions import item_key

    by_id = {it.id: it for it in items}
    codes: dict[str, int] = {}

    def code(it: Item) -> int:
        k = item_key(it) or "q:" + " ".join(it.question.split())
        return codes.setdefault(k, len(codes))

    return np.array([[code(by_id[i]), *[code(r) for r in refs[i]]] for i in ids], dtype=np.int64)


# --------------------------------------------------------------------------------------------------- rates


def _pvalues(metric: str, orig: np.ndarray, ref: np.ndarray, B: int, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """Within-item permutation p per replicate row: orig (R, n), ref (R, n, m)."""
    p, _ = permutation_pvalues(kind_of(metric), orig, ref, B, rng, (alpha,), stop_above=alpha)
    return p


def relabel_order(label: np.ndarray, m1: int) -> np.ndarray:
    """Per item the version order with version `label[i]` first and the other m in their order: (n, m + 1)."""
    rest = np.arange(m1 - 1)[None, :]
    return np.concatenate([label[:, None], rest + (rest >= label[:, None])], axis=1)


@dataclass(frozen=True)
class FamilyRule:
    """What the builder's exclude_benchmark=auto reads of a subset taken as the benchmark: each item's family
    (`family`, codes (n,)) and each family's values that are not excluded (`free`, (F,)): the draws keep off the
    subset's values only where the values left hold every subset item's m draws apart
    (`zcp.benchmarks.references.exact.drops_benchmark_values`)."""

    family: np.ndarray
    free: np.ndarray


def subset_drops(rule: FamilyRule, picks: np.ndarray, m: int) -> np.ndarray:
    """(R, N) bool: whether each subset item's family keeps its draws off the subset's values under `rule`."""
    from zcp.benchmarks.references.exact import drops_benchmark_values

    fam = rule.family[picks]  # (R, N)
    counts = np.stack([np.bincount(f, minlength=rule.free.size) for f in fam])  # (R, F) subset items per family
    drops = np.vectorize(lambda left, k: drops_benchmark_values("auto", int(left), int(k), m))(
        rule.free[None, :] - counts, counts)
    return np.take_along_axis(drops, fam, axis=1)


def family_rule(ids: Sequence[str], items: Sequence[Item], report: Mapping[str, Any]) -> FamilyRule | None:
    """The `FamilyRule` of a pool whose references report their families' free values (the word-problem builder,
    built with exclude_benchmark=false: `available` = every value not excluded); None for another pool (ArithMark's
    families are large: its draws keep off the benchmark's values in every subset, as its builder does)."""
    fams = report.get("families")
    if not fams:
        return None
    by_id = {it.id: it for it in items}
    names = sorted(fams)
    code = {f: j for j, f in enumerate(names)}
    return FamilyRule(np.array([code[by_id[i].metadata["family"]] for i in ids], dtype=np.int64),
                      np.array([int(fams[f]["available"]) for f in names], dtype=np.int64))


@dataclass(frozen=True)
class SubsetDraws:
    """Which m of its M candidate draws each item of each subset is tested with (`subset_draws`): the subsets
    `picks` (R, N), the candidates' indices `choice` (R, N, m) and `short`, the (subset, item) pairs that had to
    keep a colliding draw. It depends on the values' keys and the subsets alone, not on the scores or a null
    pool's label: computed once per cell, it serves the observed test, every null pool, every convention and both
    models of a DiD."""

    picks: np.ndarray
    choice: np.ndarray
    short: int


def subset_draws(picks: np.ndarray, m: int, keys: np.ndarray | None = None, rule: FamilyRule | None = None
                 ) -> SubsetDraws:
    """The draws each subset tests, per item: the first m candidates that are not another subset item's original
    (what the builder does with the subset as the benchmark under exclude_benchmark=true). With `rule` (the builder's
    exclude_benchmark=auto, `subset_drops`) only the items of families that rule keeps off the subset's values do
    so; the others keep their first m candidates. An item left with fewer than m keeps the first colliding ones too
    (counted in `short`). `keys` (n, M + 1): the versions' value codes (`version_keys`); None: all distinct, so every
    item keeps its first m candidates."""
    R, N = picks.shape
    if keys is None:
        return SubsetDraws(picks, np.broadcast_to(np.arange(m), (R, N, m)), 0)
    orig_keys = keys[picks, 0]  # (R, N)
    cand = keys[picks, 1:]  # (R, N, M)
    srt = np.sort(orig_keys, axis=1)
    pos = np.clip(np.array([np.searchsorted(srt[r], cand[r]) for r in range(R)]), 0, N - 1)
    collide = np.take_along_axis(srt[:, None, :].repeat(N, axis=1), pos, axis=2) == cand
    if rule is not None:
        collide &= subset_drops(rule, picks, m)[:, :, None]
    choice = np.argsort(collide, axis=2, kind="stable")[:, :, :m]  # non-colliding first, in draw order
    return SubsetDraws(picks, choice, int(np.take_along_axis(collide, choice, axis=2).any(axis=2).sum()))


def tested_versions(V: np.ndarray, draws: SubsetDraws, label: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The versions each subset tests: originals X (R, N, k) and references Y (R, N, m, k), version 0 of V being the
    real original and the others its candidate draws (`draws` says which m).

    `label` (n,) in [0, m] (an exact-null pool): per item, the `label[i]`-th of those m + 1 tested versions (0 the
    real original, j its j-th kept draw) plays the original and the other m, in their order, its references. The
    relabelling stays inside the set the real test compares, so a uniform label makes every subset's test an exact
    null (the within-item permutation test's own relabelling). Drawing it among all M + 1 candidates instead, when
    M > m, would leave the real original among the references whenever the label fell past the m kept draws, and
    bias the null pools wherever originals and draws differ."""
    picks, choice = draws.picks, draws.choice
    R, N, m = choice.shape
    Vp = V[picks]  # (R, N, M + 1, k)
    tested = np.concatenate([Vp[:, :, :1, :], np.take_along_axis(Vp[:, :, 1:, :], choice[..., None], axis=2)], axis=2)
    if label is not None:
        if int(np.max(label, initial=0)) > m:
            raise ValueError(f"label must lie in [0, {m}] (the m + 1 tested versions), got {int(np.max(label))}")
        order = relabel_order(label[picks].reshape(-1), m + 1).reshape(R, N, m + 1)
        tested = np.take_along_axis(tested, order[..., None], axis=2)
    return tested[:, :, 0, :], tested[:, :, 1:, :]


def subset_versions(V: np.ndarray, keys: np.ndarray, picks: np.ndarray, m: int, label: np.ndarray | None = None,
                    rule: FamilyRule | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """`tested_versions` of `subset_draws` in one call: X (R, N, k), Y (R, N, m, k) and the count of (subset, item)
    pairs that had to keep a colliding draw."""
    draws = subset_draws(picks, m, keys, rule)
    X, Y = tested_versions(V, draws, label)
    return X, Y, draws.short


def subset_rejections(V: np.ndarray, metrics: Sequence[str], draws: SubsetDraws, B: int, alpha: float,
                      rng: np.random.Generator, label: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Rejections (R,) per metric and combined for the subsets of `draws` (`subset_draws`) of items with versions V
    (n, M+1, k). `label` (n,): which of the m + 1 tested versions plays the original per item (None: 0, the real
    original)."""
    ps = subset_pvalues(V, metrics, draws, B, alpha, rng, label)
    out = {mt: rejects(p, alpha) for mt, p in zip(metrics, ps, strict=True)}
    out["combined"] = rejects(bonferroni(ps), alpha)
    return out


def subset_pvalues(V: np.ndarray, metrics: Sequence[str], draws: SubsetDraws, B: int, alpha: float,
                   rng: np.random.Generator, label: np.ndarray | None = None) -> list[np.ndarray]:
    """The within-item permutation p-values (R,) per metric behind `subset_rejections` (same arguments, same draws
    from `rng`). A Monte Carlo p above alpha is a lower bound (its relabelling stops early): every decision at a
    level <= alpha, Bonferroni's alpha / K included, is the full B's."""
    X, Y = tested_versions(V, draws, label)
    return [_pvalues(mt, X[..., k], Y[..., k], B, alpha, rng) for k, mt in enumerate(metrics)]


def did_rejections(V: np.ndarray, Vb: np.ndarray, metrics: Sequence[str], draws: SubsetDraws, B: int, alpha: float,
                   rng: np.random.Generator, label: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Rejections of the DiD test (the within-item permutation test on per-version model - base differences,
    zcp.probe.did: the simulation's and run_detect's test) per metric and combined, for a model V and its base
    Vb on the same items and versions."""
    X, Y = tested_versions(V, draws, label)
    Xb, Yb = tested_versions(Vb, draws, label)
    out, ps = {}, []
    for k, mt in enumerate(metrics):
        p = permutation_mc(X[..., k] - Xb[..., k], Y[..., k] - Yb[..., k], B, rng, stop_above=alpha)
        ps.append(p)
        out[mt] = rejects(p, alpha)
    out["combined"] = rejects(bonferroni(ps), alpha)
    return out


def rate_cells(V: np.ndarray, metrics: Sequence[str], sizes: Sequence[int], s: RealOriginalsSettings, seed: int,
               Vb: np.ndarray | None = None, keys: np.ndarray | None = None, progress: bool = False,
               desc: str = "", rule: FamilyRule | None = None) -> list[dict[str, Any]]:
    """Observed rejection rates on random subsets and the exact-null pools' rates on the same subsets.

    V (n, M + 1, k): every item's original and M candidate draws; each subset tests m = `s.m` of them per item
    (`subset_versions`). A null pool relabels a uniformly drawn one of the m + 1 tested versions of each item as its
    original (the same label per item in every subset)."""
    n = V.shape[0]
    m = min(int(s.m), V.shape[1] - 1)
    rows = []
    for N in sizes:
        N_eff = min(int(N), n)
        rng = cell_rng(seed, "real-originals", desc, N_eff)
        picks = np.stack([np.sort(rng.choice(n, N_eff, replace=False)) for _ in range(s.subsets)])
        draws = subset_draws(picks, m, keys, rule)
        short = draws.short

        def test(lab: np.ndarray | None, r: np.random.Generator, draws: SubsetDraws = draws) -> dict[str, np.ndarray]:
            if Vb is not None:
                return did_rejections(V, Vb, metrics, draws, s.B, s.alpha, r, lab)
            return subset_rejections(V, metrics, draws, s.B, s.alpha, r, lab)

        observed = test(None, rng)
        null_rates: dict[str, list[float]] = {k: [] for k in observed}
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=s.null_pools, desc=f"null pools {desc} N={N_eff}", unit="pool", mininterval=5)
        for _ in range(s.null_pools):
            lab = rng.integers(0, m + 1, size=n)  # among the m + 1 versions each subset tests (subset_versions)
            res = test(lab, rng)
            for k, v in res.items():
                null_rates[k].append(float(v.mean()))
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        for k, rej in observed.items():
            rows.append(cell_row(k, rej, null_rates[k], N_eff, m, short))
    return rows


def cell_row(metric: str, rejected: np.ndarray, null_rates: Sequence[float], n: int, m: int, short: int
             ) -> dict[str, Any]:
    """One part-(d) row: the observed rejection rate over the subsets with its Clopper-Pearson CI, and the
    exact-null pools' mean, 95th percentile and share at or above it."""
    kk = int(rejected.sum())
    lo, hi = rate_ci(kk, rejected.size)
    nulls = np.array(null_rates)
    rate = kk / rejected.size
    return {"metric": metric, "n": n, "m": m, "subsets": int(rejected.size), "rate": rate, "lo": lo, "hi": hi,
            "null_mean": float(nulls.mean()) if nulls.size else None,
            "null_p95": float(np.quantile(nulls, 0.95)) if nulls.size else None,
            "null_share_at_or_above": float((nulls >= rate - 1e-12).mean()) if nulls.size else None,
            "null_pools": int(nulls.size), "items_keeping_a_colliding_draw": short}


def full_pool_tests(V: np.ndarray, metrics: Sequence[str], B: int = 10_000) -> list[dict[str, Any]]:
    """The library's test on the whole pool per metric (does the pool as a whole favour its originals?)."""
    from zcp.probe.stats import paired_test

    out = []
    for k, mt in enumerate(metrics):
        res = paired_test(mt, V[:, 0, k], V[:, 1:, k], B=B)
        out.append({"metric": mt, "n": int(V.shape[0]), "s": res.s, "s_ref": res.s_ref, "p_value": res.p_value})
    return out


# --------------------------------------------------------------------------------------------------- study


def real_originals_study(s: RealOriginalsSettings, probe_cfg: Any, model_cfg: Mapping[str, Any], seed: int,
                         progress: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Part (d) over every model x pool x size (plus DiD rows against `s.base`); rows and an info block.

    A model whose folder is missing (a sham run not trained yet) is skipped with the reason in the info."""
    info: dict[str, Any] = {"pools": {}, "models": {}, "skipped": {}, "scoring": {}}
    models = study_models(s, info)
    rows: list[dict[str, Any]] = []
    for pname, raw in s.pools.items():
        spec, metrics, items, refs = pool_setup(pname, raw, s, models, info)
        tables: dict[str, Any] = {}
        M = int(spec.candidates or s.m)
        for mname, path in models.items():
            if s.tested is not None and mname not in s.tested:  # its training items still shape the references
                continue
            recs, sinfo = score_pool(path, mname, pname, items, refs, metrics, s, probe_cfg, model_cfg, progress)
            ids, V = version_table(recs, metrics, M)
            keys = version_keys(ids, items, refs)
            rule = family_rule(ids, items, info["pools"][pname]["reference"])
            sinfo["items_used"] = len(ids)
            info["scoring"][f"{mname}/{pname}"] = sinfo
            tables[mname] = (ids, V, keys, rule)
            label = f"{mname}/{pname}"
            for r in rate_cells(V, metrics, s.sizes, s, seed, keys=keys, progress=progress, desc=label, rule=rule):
                rows.append({"part": "d", "model": mname, "pool": pname, "kind": "zcp", **r})
            info["scoring"][label]["full_pool"] = full_pool_tests(V[:, : s.m + 1], metrics)
        rows += did_rows(tables, metrics, pname, s, seed, progress)
    return rows, info


def study_models(s: RealOriginalsSettings, info: dict[str, Any]) -> dict[str, str]:
    """The study's models whose folder exists (name -> path, also in info["models"]); a missing one (a sham run
    not trained yet) is skipped with the reason in info["skipped"]."""
    models = {}
    for name, path in s.models.items():
        if path and (Path(path) / "config.json").is_file():
            models[name] = str(path)
        else:
            info["skipped"][name] = f"no model folder at {path} (train it first: python train/run_contaminate.py experiment=calibration_shams)"
            log.warning("part (d): %s skipped: %s", name, info["skipped"][name])
    info["models"] = models
    return models


def pool_setup(pname: str, raw: Any, s: RealOriginalsSettings, models: Mapping[str, str], info: dict[str, Any]
               ) -> tuple[PoolSpec, list[str], list[Item], dict[str, list[Item]]]:
    """One pool of the study: its spec, metrics, items and references (shared by every model), described in
    info["pools"][pname]."""
    spec = raw if isinstance(raw, PoolSpec) else PoolSpec(**dict(raw))  # the job's checked PoolSpec
    metrics = list(spec.metrics or s.metrics)
    items = pool_items(spec)
    refs, rep = pool_references(items, spec, s, models)
    info["pools"][pname] = {"kind": spec.kind, "items": len(items), "metrics": metrics,
                            "reference": {**{k: rep[k] for k in ("method", "law", "items_with_references",
                                                                 "rejections", "exclusions")},
                                          "families": rep.get("families")},  # read by family_rule
                            "exchangeability": {k: rep["exchangeability"].get(k)
                                                for k in ("items", "min_p_bonferroni", "warnings", "leading_digit")}}
    return spec, metrics, items, refs


def did_rows(tables: Mapping[str, tuple[list[str], np.ndarray, np.ndarray, FamilyRule | None]], metrics: Sequence[str],
             pname: str, s: RealOriginalsSettings, seed: int, progress: bool = False) -> list[dict[str, Any]]:
    """The DiD rows of one pool: every model of `tables` (name -> (ids, V, keys, family rule)) against `s.base`, on
    their common items (none when `s.base` is unset or was not scored)."""
    rows: list[dict[str, Any]] = []
    if not s.base or s.base not in tables:
        return rows
    bids, Vb = tables[s.base][:2]
    for mname, (ids, V, keys, rule) in tables.items():
        if mname == s.base:
            continue
        common = sorted(set(ids) & set(bids))
        ia = [ids.index(i) for i in common]
        ib = [bids.index(i) for i in common]
        label = f"{mname}-vs-{s.base}/{pname}"
        sub = None if rule is None else FamilyRule(rule.family[ia], rule.free)
        for r in rate_cells(V[ia], metrics, s.sizes, s, seed, Vb=Vb[ib], keys=keys[ia], progress=progress,
                            desc=label, rule=sub):
            rows.append({"part": "d", "model": f"{mname} vs {s.base}", "pool": pname, "kind": "did", **r})
    return rows


def average_rates(rows: Sequence[Mapping[str, Any]], kind: str = "zcp", convention: str | None = None
                  ) -> dict[str, float]:
    """Mean rejection rate per metric (and combined) over every model, pool and size of one kind of row; with
    `convention`, of that convention's rows only (a row without one is the probe's line)."""
    out: dict[str, list[float]] = {}
    for r in rows:
        if convention is not None and r.get("convention", "probe") != convention:
            continue
        if r.get("part") == "d" and r.get("kind") == kind:
            out.setdefault(r["metric"], []).append(r["rate"])
    return {k: float(np.mean(v)) for k, v in out.items()}


def markdown(rows: Sequence[Mapping[str, Any]], info: Mapping[str, Any], alpha: float) -> str:
    """Part (d) as markdown: the per-cell table (rate [CI], null pools' mean / p95 / share at or above) and the
    averages over models, pools and sizes."""
    lines = [f"## (d) Real originals: clean models, real pools, the project's references (alpha = {alpha:g})", "",
             "Rate: share of random subsets the verdict rejects [Clopper-Pearson 95% CI; nominal: subsets share "
             "items]. Null pools: the same records with each item's original replaced by one of its m + 1 versions "
             "at random (exchangeable by construction), the same subsets tested: their mean rate, 95th percentile, "
             "and the share of null pools at or above the observed rate (small = real originals rejected more often "
             "than exchangeable ones).", ""]
    convs = list(dict.fromkeys(r["convention"] for r in rows if r.get("part") == "d" and "convention" in r))
    multi = next((r for r in rows if r.get("part") == "d" and r.get("kind") == "multiconv"), None)
    sections = [("zcp", "ZCP verdict", None)]
    if convs:  # a multi-convention study: one section per convention, then the verdict over all of them
        sections = [("zcp", f"ZCP verdict, pre-fill `{c}`", c) for c in convs]
        sections.append(("multiconv", "Multi-convention verdict: per metric Bonferroni over the pre-fills; combined "
                         f"= Bonferroni over every (pre-fill, metric), K = {multi['n_tests'] if multi else '?'} "
                         f"({multi['conventions'] if multi else ''})", None))
    sections.append(("did", "Difference-in-differences against the base model", None))
    for kind, title, conv in sections:
        rs = [r for r in rows if r.get("part") == "d" and r.get("kind") == kind
              and (conv is None or r.get("convention") == conv)]
        if not rs:
            continue
        lines += [f"### {title}", "", "| model | pool | N | metric | rate [95% CI] | null mean | null p95 | "
                  "null share >= obs |", "|---|---|---|---|---|---|---|---|"]
        for r in rs:
            lines.append(f"| {r['model']} | {r['pool']} | {r['n']} | {r['metric']} | {r['rate']:.3f} "
                         f"[{r['lo']:.3f}, {r['hi']:.3f}] | {r['null_mean']:.3f} | {r['null_p95']:.3f} | "
                         f"{r['null_share_at_or_above']:.2f} |")
        avg = average_rates(rows, kind, conv)
        lines += ["", "Average over models, pools and sizes: " + ", ".join(f"{k} {v:.3f}" for k, v in avg.items()), ""]
    lines += _reading_lines(info)
    if info.get("skipped"):
        lines += ["Skipped: " + "; ".join(f"{k}: {v}" for k, v in info["skipped"].items()), ""]
    for pname, p in (info.get("pools") or {}).items():
        ex = p.get("exchangeability") or {}
        lines.append(f"- pool {pname}: {p['items']} items, reference {p['reference']['method']} "
                     f"({p['reference']['law']}), {p['reference']['items_with_references']} with draws; feature "
                     f"exchangeability min Bonferroni p {ex.get('min_p_bonferroni')}")
    return "\n".join(lines) + "\n"


def _reading_lines(info: Mapping[str, Any]) -> list[str]:
    """Markdown of a multi-convention study's extras: auto's reading per (model, pool) and the probe line's
    full-CoT check (zcp.validate.calibration.real_conventions)."""
    lines: list[str] = []
    reads = info.get("auto_read") or {}
    if reads:
        lines += ["### auto as read (zcp.probe.multiconv.read_conventions)", "",
                  "| model/pool | set | outputs | ends: " + " / ".join(
                      next(iter(next(iter(reads.values()))["sets"].values()))["ends"]) + " | chosen | added by the "
                  "reading |", "|---|---|---|---|---|---|"]
        for label, rd in reads.items():
            for name, st in rd["sets"].items():
                lines.append(f"| {label} | {name} | {st['read']} | " + " / ".join(str(v) for v in st["ends"].values())
                             + f" | {', '.join(rd['chosen'])} | {', '.join(rd['added_by_reading']) or 'none'} |")
        lines.append("")
    checks = {k: v for k, v in (info.get("probe_line_cot_check") or {}).items() if v}
    if checks:
        lines += ["Probe line's full-CoT predictions against the multi-convention reading of the same generation: "
                  + "; ".join(f"{k}: {v['differ']} of {v['units']} differ (vs {v['against']})"
                              for k, v in checks.items()), ""]
    return lines
