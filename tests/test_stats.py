"""Statistics against independent references: closed forms, scipy, and simulation of the null."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from zcp.stats import bf10, bootstrap_pvalue, c_cont, combine, paired_test, sign_test_pvalue


def test_calibration_reference_points():
    assert c_cont(1 / math.e) == pytest.approx(0.5)
    assert c_cont(1e-4) == pytest.approx(0.9975, abs=5e-5)
    # closed form at p = 1e-4: BF = 1 / (e * 1e-4 * ln 1e4)
    b = 1 / (math.e * 1e-4 * math.log(1e4))
    assert c_cont(1e-4) == pytest.approx(b / (1 + b), rel=1e-12)
    assert bf10(0.5) == 1.0 and c_cont(0.9) == 0.5 and c_cont(1.0) == 0.5


def test_calibration_is_monotone_and_in_range():
    ps = np.logspace(-300, 0, 400)
    cs = np.array([c_cont(float(p)) for p in ps])
    assert np.all(cs >= 0.5) and np.all(cs < 1.0)
    assert np.all(np.diff(cs) <= 1e-15)  # smaller p, more confidence
    assert c_cont(0.0) < 1.0


def test_bad_p_rejected():
    with pytest.raises(ValueError):
        c_cont(1.5)
    with pytest.raises(ValueError):
        c_cont(float("nan"))


@pytest.mark.parametrize(("n_pos", "n_neg", "n_tie"), [(0, 0, 5), (7, 2, 10), (2, 7, 3), (30, 12, 0), (1, 0, 0), (150, 110, 40)])
def test_sign_test_equals_scipy_exact_binomial(n_pos, n_neg, n_tie):
    a = [1] * n_pos + [0] * n_neg + [1] * n_tie
    b = [0] * n_pos + [1] * n_neg + [1] * n_tie
    res = paired_test("acc", a, b)
    if n_pos + n_neg == 0:
        assert res.p_value == 1.0
    else:
        ref = sps.binomtest(n_pos, n_pos + n_neg, 0.5, alternative="greater").pvalue
        assert res.p_value == pytest.approx(ref, rel=1e-12)
    assert res.discordant == (n_pos, n_neg)


def test_sign_test_with_averaged_draws_counts_signs():
    p, n_pos, n_neg = sign_test_pvalue([1 / 3, -2 / 3, 0.0, 1.0, 0.5])
    assert (n_pos, n_neg) == (3, 1)
    assert p == pytest.approx(sps.binomtest(3, 4, 0.5, alternative="greater").pvalue)


def test_bootstrap_p_never_zero_and_floored():
    d = np.full(40, 0.3) + np.linspace(-0.01, 0.01, 40)
    p = bootstrap_pvalue(d, B=999, seed=1)
    assert p == pytest.approx(1 / 1000)
    res = paired_test("p_all", d + 0.5, np.full(40, 0.5), B=999)
    assert res.p_value == pytest.approx(res.p_floor) and res.to_dict()["at_floor"]


def test_negative_effect_gives_half():
    rng = np.random.default_rng(0)
    s_ref = rng.uniform(0.4, 0.9, 100)
    s = s_ref - 0.2
    res = paired_test("p_first", s, s_ref, B=2000)
    assert res.p_value > 0.9 and res.c_cont == 0.5


def test_bootstrap_is_deterministic_in_seed():
    d = np.random.default_rng(3).normal(0.05, 1, 60)
    assert bootstrap_pvalue(d, B=500, seed=7) == bootstrap_pvalue(d, B=500, seed=7)


def test_bootstrap_close_to_normal_theory_on_large_samples():
    # independent reference: one-sided z-test of the mean for n = 400 (CLT regime)
    d = np.random.default_rng(11).normal(0.08, 1.0, 400)
    z = d.mean() / (d.std(ddof=1) / math.sqrt(d.size))
    p_ref = sps.norm.sf(z)
    assert bootstrap_pvalue(d, B=20_000, seed=2) == pytest.approx(p_ref, abs=0.01)


def _null_rejection_rate(n_sims: int, n: int, B: int, seed: int) -> float:
    """Fraction of null data sets (S and S_ref exchangeable) rejected at alpha = 0.05."""
    rng = np.random.default_rng(seed)
    rejections = 0
    for k in range(n_sims):
        base = rng.beta(2, 5, n)  # item difficulty, shared by the pair
        s = np.clip(base + rng.normal(0, 0.1, n), 0, 1)
        s_ref = np.clip(base + rng.normal(0, 0.1, n), 0, 1)
        rejections += bootstrap_pvalue(s - s_ref, B=B, seed=k) < 0.05
    return rejections / n_sims


def test_bootstrap_type_one_error_under_null():
    rate = _null_rejection_rate(n_sims=2000, n=100, B=500, seed=123)
    assert 0.03 <= rate <= 0.07, rate


def test_bootstrap_power_on_shifted_case():
    rng = np.random.default_rng(5)
    hits = 0
    for k in range(200):
        base = rng.beta(2, 5, 100)
        s = np.clip(base + 0.08 + rng.normal(0, 0.1, 100), 0, 1)
        s_ref = np.clip(base + rng.normal(0, 0.1, 100), 0, 1)
        hits += bootstrap_pvalue(s - s_ref, B=500, seed=k) < 0.05
    assert hits / 200 > 0.9


def test_mcnemar_type_one_error_is_at_most_alpha():
    rng = np.random.default_rng(9)
    rej = 0
    for _ in range(2000):
        p_item = rng.uniform(0.1, 0.9, 80)
        a = rng.random(80) < p_item
        b = rng.random(80) < p_item
        rej += paired_test("acc", a.astype(float), b.astype(float)).p_value < 0.05
    assert rej / 2000 <= 0.06  # exact test: conservative up to simulation noise


def test_combine_bonferroni():
    out = combine({"acc": 0.04, "p_all": 0.001, "p_first": 0.5})
    assert out["p_value"] == pytest.approx(0.003) and out["driving_metric"] == "p_all" and out["contaminated"]
    assert out["c_cont"] == pytest.approx(c_cont(0.003))
    assert combine({"acc": 0.3, "con": 0.9})["p_value"] == pytest.approx(0.6)
    assert combine({})["c_cont"] == 0.5


def test_combined_verdict_type_one_error_under_dependent_null():
    # four strongly dependent metrics under H0: Bonferroni must stay at or below alpha
    rng = np.random.default_rng(21)
    rej = 0
    for k in range(600):
        base = rng.beta(2, 5, 60)
        s = base + rng.normal(0, 0.1, 60)
        r = base + rng.normal(0, 0.1, 60)
        ps = {m: bootstrap_pvalue((s - r) * (1 + 0.1 * j) + rng.normal(0, 0.02, 60), B=200, seed=k)
              for j, m in enumerate(["acc", "con", "p_first", "p_all"])}
        rej += combine(ps)["contaminated"]
    assert rej / 600 <= 0.06


def test_printed_c_cont_never_reads_as_one():
    from zcp.report import c_cont_text

    tiny_p = c_cont(1e-9)  # an exact test on a large effect: C_cont = 1 - 2.3e-8
    assert tiny_p < 1.0 and f"{tiny_p:.3f}" == "1.000"
    assert c_cont_text(tiny_p, 0.0, True) == ">0.999"
    assert c_cont_text(0.9984, 0.001, True) == "0.998 ± 0.001" and c_cont_text(0.5, 0.0, False) == "0.500"
