"""The two-sample permutation test of the control comparison: against brute force, scipy, and the null."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from zcp.probe.stats import two_sample_permutation_test


def _welch(x, y, axis=-1):
    x, y = np.asarray(x), np.asarray(y)
    nx, ny = x.shape[axis], y.shape[axis]
    se = np.sqrt(np.var(x, ddof=1, axis=axis) / nx + np.var(y, ddof=1, axis=axis) / ny)
    return (np.mean(x, axis=axis) - np.mean(y, axis=axis)) / se


def _mean(x, y, axis=-1):
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


STATS = {"welch": _welch, "mean": _mean}


def _brute(a, b, statistic):
    """p = #{T* >= T_obs} / C(n, n_a) over every subset labelled a, by plain loops."""
    pooled = list(a) + list(b)
    n, k = len(pooled), len(a)
    t_obs = STATS[statistic](np.array(a), np.array(b))
    hits = total = 0
    for picked in itertools.combinations(range(n), k):
        xa = np.array([pooled[i] for i in picked])
        xb = np.array([pooled[i] for i in range(n) if i not in picked])
        hits += STATS[statistic](xa, xb) >= t_obs - 1e-9 * max(1.0, abs(t_obs))
        total += 1
    return hits / total, total


@pytest.mark.parametrize("statistic", ["welch", "mean"])
@pytest.mark.parametrize(("na", "nb", "seed"), [(3, 4, 0), (5, 5, 1), (6, 3, 2), (2, 7, 3)])
def test_exact_matches_brute_force(statistic, na, nb, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.normal(0.4, 1.0, na), rng.lognormal(0.0, 0.7, nb) - 1
    r = two_sample_permutation_test(a, b, B=10_000, statistic=statistic)
    p, total = _brute(a, b, statistic)
    assert r.exact and r.n_relabellings == total == math.comb(na + nb, na)
    assert r.p_value == pytest.approx(p, abs=1e-12)
    assert r.p_floor == pytest.approx(1 / total)


def test_exact_with_ties_matches_brute_force():
    # gaps of a binary metric with one reference draw: many ties at 0, values in {-1, 0, 1}
    a, b = [1, 0, 0, 1, 0, -1], [0, 0, -1, 0, 1]
    for statistic in ("welch", "mean"):
        r = two_sample_permutation_test(a, b, statistic=statistic)
        assert r.p_value == pytest.approx(_brute(a, b, statistic)[0], abs=1e-12)


@pytest.mark.parametrize("statistic", ["welch", "mean"])
def test_exact_matches_scipy(statistic):
    rng = np.random.default_rng(7)
    a, b = rng.normal(0.5, 1, 7), rng.normal(0, 2, 6)
    ours = two_sample_permutation_test(a, b, B=10_000, statistic=statistic)
    ref = sps.permutation_test((a, b), STATS[statistic], permutation_type="independent", alternative="greater",
                               n_resamples=np.inf, vectorized=True)
    assert ours.exact and ours.p_value == pytest.approx(ref.pvalue, abs=1e-12)


def test_monte_carlo_agrees_with_scipy_and_is_seeded():
    rng = np.random.default_rng(11)
    a, b = rng.normal(0.25, 1, 60), rng.normal(0, 1, 50)
    ours = two_sample_permutation_test(a, b, B=20_000, seed=3)
    ref = sps.permutation_test((a, b), _welch, permutation_type="independent", alternative="greater",
                               n_resamples=20_000, vectorized=True, random_state=0)
    assert not ours.exact and ours.n_relabellings == 20_000
    se = math.sqrt(ref.pvalue * (1 - ref.pvalue) / 20_000)
    assert abs(ours.p_value - ref.pvalue) < 5 * math.sqrt(2) * se
    assert ours.p_value == two_sample_permutation_test(a, b, B=20_000, seed=3).p_value
    assert ours.p_value == (1 + ours.exceed) / 20_001


def test_monte_carlo_p_is_never_zero_and_reports_means():
    r = two_sample_permutation_test(np.arange(40) + 100.0, np.arange(40), B=999, seed=0)
    assert r.p_value == pytest.approx(1 / 1000) and r.p_value == r.p_floor and r.to_dict()["at_floor"]
    assert r.mean_a == pytest.approx(119.5) and r.mean_b == pytest.approx(19.5) and r.diff == pytest.approx(100)


def test_no_spread_and_equal_values():
    same = two_sample_permutation_test([0.3] * 5, [0.3] * 4)
    assert same.p_value == 1.0 and same.t_obs == 0.0
    # constant within each sample, a above b: Welch's t is +inf, reached only by the observed split
    split = two_sample_permutation_test([1.0] * 4, [0.0] * 4)
    assert split.t_obs == math.inf and split.p_value == pytest.approx(1 / math.comb(8, 4))


def test_bad_input_refused():
    with pytest.raises(ValueError, match="both samples"):
        two_sample_permutation_test([], [1.0])
    with pytest.raises(ValueError, match="NaN"):
        two_sample_permutation_test([np.nan, 1.0], [1.0])
    with pytest.raises(ValueError, match="statistic"):
        two_sample_permutation_test([1.0], [1.0], statistic="median")
    with pytest.raises(ValueError, match="B must"):
        two_sample_permutation_test([1.0], [1.0], B=0)


DISTRIBUTIONS = {
    "normal": lambda rng, n: rng.normal(0, 1, n),
    "lognormal": lambda rng, n: rng.lognormal(0, 1, n),
    "t2": lambda rng, n: rng.standard_t(2, n),
    # the gaps of a binary metric with m = 3 draws: heavy ties at 0, a few +-1/3, +-2/3, +-1
    "binary_gaps": lambda rng, n: (rng.binomial(1, 0.3, n) - rng.binomial(3, 0.3, n) / 3) * (rng.random(n) < 0.4),
}


@pytest.mark.parametrize("dist", sorted(DISTRIBUTIONS))
@pytest.mark.parametrize("n", [20, 100])
def test_null_rejection_rate_is_alpha(dist, n):
    """Two sets drawn from one distribution (unequal sizes): the test rejects about alpha of the time.

    B = 199 makes p <= 0.05 an event of probability 10/200 exactly for a valid test with continuous values (at
    most that with ties); 400 replications give a standard error of 0.011."""
    rng = np.random.default_rng([sorted(DISTRIBUTIONS).index(dist), n])
    draw = DISTRIBUTIONS[dist]
    reps = 400
    hits = sum(two_sample_permutation_test(draw(rng, n), draw(rng, n // 2 + 3), B=199, seed=k).p_value <= 0.05
               for k in range(reps))
    rate = hits / reps
    assert rate <= 0.05 + 3.2 * math.sqrt(0.05 * 0.95 / reps)
    if dist != "binary_gaps":  # ties make the test conservative; continuous values reach alpha
        assert rate >= 0.05 - 3.2 * math.sqrt(0.05 * 0.95 / reps)


def test_welch_keeps_its_level_when_spreads_differ():
    """Equal means, unequal spreads and sizes (the smaller audited set's gaps wider, e.g. fewer reference draws
    per item): the difference of means over-rejects (~0.11 measured), Welch's t stays near alpha. Not exact: at
    n = 20 against 200 with a 6x spread Welch's t rejected 0.12 in a run of 400 (the difference of means 0.29)."""
    rng = np.random.default_rng(5)
    reps, hits = 300, {"welch": 0, "mean": 0}
    for k in range(reps):
        a, b = rng.normal(0, 1.5, 50), rng.normal(0, 1, 200)
        for st in hits:
            hits[st] += two_sample_permutation_test(a, b, B=199, seed=k, statistic=st).p_value <= 0.05
    assert hits["welch"] / reps <= 0.05 + 3.2 * math.sqrt(0.05 * 0.95 / reps)
    assert hits["mean"] / reps > 0.08


def test_power_against_a_shift():
    rng = np.random.default_rng(9)
    hits = sum(two_sample_permutation_test(rng.normal(1.0, 1, 20), rng.normal(0, 1, 20), B=199, seed=k).p_value
               <= 0.05 for k in range(100))
    assert hits >= 80


@pytest.mark.parametrize("n", [20, 100])
def test_a_shared_builder_bias_cancels_against_a_control(n):
    """Per-item scores like p_first (Beta(0.5, 4), m = 3 draws per item) with the originals of BOTH sets scoring
    1.5x their draws' law (a shape the builder missed): the within-item test rejects most of the time (0.86 at n = 100),
    the audited-vs-control comparison of the gaps about alpha of the time."""
    from zcp.probe.control import compare_with_control
    from zcp.probe.stats import paired_test

    rng = np.random.default_rng(n)
    reps, within, against = 200, 0, 0

    def one_set(tag):
        x = np.minimum(1.5 * rng.beta(0.5, 4, n), 1.0)
        y = rng.beta(0.5, 4, (n, 3))
        return x, y, {f"{tag}{i}": float(x[i] - y[i].mean()) for i in range(n)}

    for k in range(reps):
        xa, ya, ga = one_set("a")
        _, _, gc = one_set("c")
        within += paired_test("p_first", xa, ya, B=199, seed=k).p_value <= 0.05
        res = compare_with_control({("D", "original"): {"p_first": ga}}, {"p_first": gc}, ["p_first"], seeds=[k],
                                   B=199, alpha=0.05)
        against += res["verdicts"][0]["contaminated"]
    assert against / reps <= 0.05 + 3.2 * math.sqrt(0.05 * 0.95 / reps)
    assert within / reps > (0.7 if n == 100 else 0.2)
