"""Calibration part (d): subset rejection rates with real originals against exact-null pools."""

from __future__ import annotations

import numpy as np
import pytest

from zcp.validate.calibration.real_originals import (
    RealOriginalsSettings,
    rate_cells,
    relabel_order,
    subset_draws,
    subset_rejections,
    version_table,
)


def test_relabel_order_puts_the_chosen_version_first():
    order = relabel_order(np.array([0, 2, 3]), 4)
    assert order.tolist() == [[0, 1, 2, 3], [2, 0, 1, 3], [3, 0, 1, 2]]


def test_version_table_keeps_items_with_exactly_m_draws():
    recs = [{"original_id": "a", "variant": "original", "draw": 0, "p_all": 0.5}]
    recs += [{"original_id": "a", "variant": "reference", "draw": j, "p_all": 0.1 * j} for j in (1, 0)]
    recs += [{"original_id": "b", "variant": "original", "draw": 0, "p_all": 0.4},
             {"original_id": "b", "variant": "reference", "draw": 0, "p_all": 0.2}]
    ids, V = version_table(recs, ["p_all"], 2)
    assert ids == ["a"] and V.shape == (1, 3, 1)
    assert V[0, :, 0].tolist() == [0.5, 0.0, 0.1]  # original first, draws in draw order


def _pool(rng: np.random.Generator, n: int, m: int, shift: float) -> np.ndarray:
    """Versions (n, m+1, 2): a binary and a continuous metric, i.i.d. given an item level; `shift` favours the
    original (version 0)."""
    q = rng.beta(2, 5, size=(n, 1))
    cont = np.clip(q + 0.15 * rng.standard_normal((n, m + 1)), 0.0, 1.0)
    cont[:, 0] = np.clip(cont[:, 0] + shift, 0, 1)
    binary = (rng.random((n, m + 1)) < q).astype(float)
    binary[:, 0] = np.maximum(binary[:, 0], rng.random(n) < shift)
    return np.stack([binary, cont], axis=-1)


def test_exchangeable_pool_is_rejected_at_about_alpha_and_sits_among_its_null_pools():
    rng = np.random.default_rng(3)
    V = _pool(rng, 200, 9, 0.0)
    s = RealOriginalsSettings(subsets=200, null_pools=40, B=199)
    rows = rate_cells(V, ["acc", "p_all"], [50], s, seed=0)
    by = {r["metric"]: r for r in rows}
    for mt in ("acc", "p_all", "combined"):
        assert by[mt]["rate"] <= 0.2
        assert by[mt]["null_share_at_or_above"] >= 0.05
        assert 0.0 <= by[mt]["null_mean"] <= 0.12


def test_originals_favoured_are_rejected_and_beyond_every_null_pool():
    rng = np.random.default_rng(4)
    V = _pool(rng, 200, 9, 0.4)
    s = RealOriginalsSettings(subsets=100, null_pools=30, B=199)
    rows = rate_cells(V, ["acc", "p_all"], [50], s, seed=0)
    by = {r["metric"]: r for r in rows}
    assert by["p_all"]["rate"] > 0.9 and by["combined"]["rate"] > 0.9
    assert by["p_all"]["null_share_at_or_above"] == 0.0


def test_subset_rejections_agree_with_the_library_test():
    """The vectorised exact binary test decides as zcp.probe.stats.paired_test does on the same subsets."""
    from zcp.probe.stats import paired_test

    rng = np.random.default_rng(5)
    V = _pool(rng, 60, 3, 0.2)
    picks = np.stack([np.sort(rng.choice(60, 25, replace=False)) for _ in range(30)])
    rej = subset_rejections(V, ["acc", "p_all"], subset_draws(picks, 3), 999, 0.05, rng)
    lib = np.array([paired_test("acc", V[p, 0, 0], V[p, 1:, 0]).p_value <= 0.05 for p in picks])
    assert (rej["acc"] == lib).all()


def test_did_of_a_model_against_itself_never_rejects():
    rng = np.random.default_rng(6)
    V = _pool(rng, 120, 9, 0.3)
    s = RealOriginalsSettings(subsets=50, null_pools=5, B=199)
    rows = rate_cells(V, ["acc", "p_all"], [50], s, seed=0, Vb=V.copy())
    assert all(r["rate"] == 0.0 for r in rows)


@pytest.mark.parametrize("kind", ["wordproblem_pool", "arithmark"])
def test_pool_references_are_exact_and_exchangeable(kind):
    """The pools' references come from the registry's exact builders and pass the feature check."""
    from zcp.validate.calibration.real_originals import PoolSpec, pool_items, pool_references

    spec = PoolSpec(kind=kind, n=120, n_per_stage=24, seed=1)
    items = pool_items(spec)
    refs, rep = pool_references(items, spec, RealOriginalsSettings(m=5), {})
    assert rep["law"] == "exact" and len(refs) == len(items)
    assert rep["exchangeability"]["min_p_bonferroni"] >= 0.01


def test_subset_versions_skip_draws_that_are_other_subset_items_originals():
    from zcp.validate.calibration.real_originals import subset_versions

    # 3 items, 4 candidate draws each; item 0's first two draws are items 1's and 2's originals (codes 10, 20)
    V = np.arange(3 * 5, dtype=float).reshape(3, 5, 1)
    keys = np.array([[0, 10, 20, 1, 2], [10, 3, 4, 5, 6], [20, 7, 8, 9, 11]])
    X, Y, short = subset_versions(V, keys, np.array([[0, 1, 2], [0, 1, 1]])[:1], 2)
    assert X[0, :, 0].tolist() == [0.0, 5.0, 10.0]
    assert Y[0, 0, :, 0].tolist() == [3.0, 4.0]  # item 0 skips the draws valued like items 1 and 2
    assert Y[0, 1, :, 0].tolist() == [6.0, 7.0] and short == 0
    # a subset without item 2: item 0 keeps the draw valued like item 2's original
    X, Y, short = subset_versions(V, keys, np.array([[0, 1]]), 2)
    assert Y[0, 0, :, 0].tolist() == [2.0, 3.0]
    # too few clean candidates: the colliding ones are kept, counted
    X, Y, short = subset_versions(V, keys, np.array([[0, 1, 2]]), 4)
    assert short == 1


def test_convention_cells_keep_part_d_rows_for_the_probe_line_and_share_the_null_labels():
    """The probe line's rows of a multi-convention study are part (d)'s rows exactly (same subsets, same Monte
    Carlo stream); a second convention identical to the first can only make the verdict over both stricter
    (Bonferroni over twice the tests), in the observed subsets and in every null pool (one label per item)."""
    from zcp.validate.calibration.real_conventions import MULTI, convention_rate_cells

    rng = np.random.default_rng(7)
    V = _pool(rng, 150, 9, 0.0)
    s = RealOriginalsSettings(subsets=120, null_pools=8, B=199)
    single = rate_cells(V, ["acc", "p_all"], [40], s, seed=0, desc="x")
    rows = convention_rate_cells({"probe": V, "hash": V.copy()}, ["acc", "p_all"], [40], s, seed=0, desc="x")
    probe = [{k: v for k, v in r.items() if k not in ("kind", "convention")} for r in rows
             if r.get("convention") == "probe"]
    assert probe == single
    by = {(r.get("convention", MULTI), r["metric"]): r for r in rows}
    assert by[(MULTI, "combined")]["n_tests"] == 4 and by[(MULTI, "combined")]["conventions"] == "probe+hash"
    assert by[(MULTI, "combined")]["rate"] <= by[("probe", "combined")]["rate"]
    assert by[(MULTI, "combined")]["null_mean"] <= by[("probe", "combined")]["null_mean"]


def test_multi_convention_verdict_finds_a_leak_under_one_convention_only():
    """Originals favoured under `hash` alone: the probe line's verdict stays near alpha, the verdict over both
    conventions rejects almost every subset and sits beyond every null pool."""
    from zcp.validate.calibration.real_conventions import MULTI, convention_rate_cells

    rng = np.random.default_rng(8)
    V = _pool(rng, 150, 9, 0.0)
    W = _pool(rng, 150, 9, 0.4)
    s = RealOriginalsSettings(subsets=60, null_pools=10, B=199)
    rows = convention_rate_cells({"probe": V, "hash": W}, ["acc", "p_all"], [50], s, seed=0, desc="y")
    by = {(r.get("convention", MULTI), r["metric"]): r for r in rows}
    assert by[("probe", "combined")]["rate"] <= 0.2
    assert by[(MULTI, "combined")]["rate"] > 0.9 and by[(MULTI, "combined")]["null_share_at_or_above"] == 0.0


def test_common_versions_and_cot_check():
    from zcp.validate.calibration.real_conventions import common_versions, cot_check

    V = np.arange(3 * 2 * 1, dtype=float).reshape(3, 2, 1)
    ids, Vs = common_versions({"probe": (["a", "b", "c"], V), "hash": (["b", "c"], V[1:] + 100)})
    assert ids == ["b", "c"] and Vs["probe"][:, 0, 0].tolist() == [2.0, 4.0]
    assert Vs["hash"][:, 0, 0].tolist() == [102.0, 104.0]
    unit = {"split": "s", "variant": "original", "original_id": "a", "draw": 0}
    chk = cot_check({"probe": [{**unit, "cot_prediction": None}], "hash": [{**unit, "cot_prediction": "4"}]})
    assert chk == {"against": "hash", "units": 1, "differ": 1}


def test_null_pool_labels_stay_inside_the_tested_versions():
    """A null pool's original is one of the m + 1 versions the subset's real test compares (the real original
    and its m kept draws), never a candidate past them: label j plays the original, the other m its references."""
    from zcp.validate.calibration.real_originals import subset_versions

    V = np.arange(2 * 6, dtype=float).reshape(2, 6, 1)  # 2 items, M = 5 candidates, m = 2 tested
    keys = np.arange(12).reshape(2, 6)
    picks = np.array([[0, 1]])
    X, Y, _ = subset_versions(V, keys, picks, 2, label=np.array([2, 0]))
    assert X[0, :, 0].tolist() == [2.0, 6.0]
    assert Y[0, 0, :, 0].tolist() == [0.0, 1.0] and Y[0, 1, :, 0].tolist() == [7.0, 8.0]
    with pytest.raises(ValueError, match=r"\[0, 2\]"):
        subset_versions(V, keys, picks, 2, label=np.array([3, 0]))


def test_null_pools_are_exact_with_more_candidates_than_tested_draws():
    """With M = 20 candidates and m = 9 tested draws and originals scoring below their draws (the word-problem
    pool's case), the exact-null pools reject at most about alpha on average: each relabels within the tested
    versions. (Drawn among all 21 candidates, as before, the real original sat among the references whenever the
    label fell past the 9th draw, and this pool's null mean was ~0.07.)"""
    rng = np.random.default_rng(11)
    n, M = 300, 20
    q = rng.beta(2, 5, size=(n, 1))
    cont = np.clip(q + 0.15 * rng.standard_normal((n, M + 1)), 0.0, 1.0)
    cont[:, 0] = np.clip(cont[:, 0] - 0.15, 0, 1)
    V = cont[..., None]
    s = RealOriginalsSettings(m=9, subsets=100, null_pools=40, B=199)
    rows = rate_cells(V, ["p_all"], [100], s, seed=0)
    by = {r["metric"]: r for r in rows}
    assert by["p_all"]["null_mean"] <= 0.05 + 0.015, by["p_all"]
    assert by["p_all"]["rate"] == 0.0  # originals below their draws: the one-sided test never rejects


def test_draws_kept_off_a_crowded_familys_benchmark_values_reject_clean_items_too_often_and_auto_does_not():
    """The finite-population null behind exclude_benchmark=auto's rule, across pool realisations: 3 families of 50
    values, each value one pool item's original, every item's 20 candidate draws other items' values of its family,
    scores = value effect (sd 1) + item effect + noise, no contamination. Subsets of 50 items (~17 per family, 33
    values left for 9 draws each): keeping each subset's draws off its items' values (exclude_benchmark=true) crowds
    them into the values left, shared by many items, and rejects ~0.08; auto (those families have no room: draws
    may take other items' values) stays under alpha."""
    from zcp.validate.calibration.real_originals import FamilyRule, subset_draws, subset_rejections

    F, P, M, N = 3, 50, 20, 50
    rates: dict[str, list[float]] = {"true": [], "auto": []}
    for rep in range(200):  # 200 pool realisations x 25 subsets (~3 s); measured 0.081 / 0.029 (and 0.082 / 0.031)
        rng = np.random.default_rng(rep)
        n = F * P
        fam = np.arange(n) // P
        value, item = rng.normal(0, 1.0, n), rng.normal(0, 0.5, n)
        cands = np.stack([rng.choice(np.delete(np.arange(f * P, f * P + P), i - f * P), M, replace=False)
                          for i, f in zip(range(n), fam, strict=True)])
        keys = np.concatenate([np.arange(n)[:, None], cands], axis=1)
        V = (value[keys] + item[:, None] + rng.normal(0, 0.5, keys.shape))[..., None]
        picks = np.stack([np.sort(rng.choice(n, N, replace=False)) for _ in range(25)])
        for name, rule in (("true", None), ("auto", FamilyRule(fam, np.full(F, P)))):
            rates[name].append(float(subset_rejections(V, ["p_all"], subset_draws(picks, 9, keys, rule), 199, 0.05,
                                                       rng)["p_all"].mean()))
    assert np.mean(rates["true"]) >= 0.07, rates["true"]
    assert np.mean(rates["auto"]) <= 0.06, rates["auto"]


def test_family_rule_skips_colliding_draws_only_in_roomy_families():
    from zcp.validate.calibration.real_originals import FamilyRule, subset_drops, subset_versions

    # items 0, 1 in family 0 (3 free values: crowded), items 2, 3 in family 1 (1,000 free: roomy)
    V = np.arange(4 * 4, dtype=float).reshape(4, 4, 1)
    keys = np.array([[0, 1, 5, 6], [1, 0, 7, 8], [2, 3, 9, 10], [3, 2, 11, 12]])
    rule = FamilyRule(np.array([0, 0, 1, 1]), np.array([3, 1000]))
    picks = np.array([[0, 1, 2, 3]])
    assert subset_drops(rule, picks, 2).tolist() == [[False, False, True, True]]
    _, Y, _ = subset_versions(V, keys, picks, 2, rule=rule)
    assert Y[0, 0, :, 0].tolist() == [1.0, 2.0]  # crowded: keeps the draw valued like item 1's original
    assert Y[0, 2, :, 0].tolist() == [10.0, 11.0]  # roomy: skips the draw valued like item 3's original
