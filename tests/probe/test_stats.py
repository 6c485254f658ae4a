"""Statistics against independent references: closed forms, scipy, and simulation of the null."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from zcp.probe.stats import (
    bf10,
    binary_null_law,
    bootstrap_pvalue,
    c_cont,
    combine,
    paired_test,
    permutation_pvalue_mc,
    pooled_mc_pvalue,
    sign_test_pvalue,
)


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
def test_m1_binary_permutation_is_exact_mcnemar(n_pos, n_neg, n_tie):
    a = [1] * n_pos + [0] * n_neg + [1] * n_tie
    b = [0] * n_pos + [1] * n_neg + [1] * n_tie
    res = paired_test("acc", a, b)
    if n_pos + n_neg == 0:
        assert res.p_value == 1.0
    else:
        ref = sps.binomtest(n_pos, n_pos + n_neg, 0.5, alternative="greater").pvalue
        assert res.p_value == pytest.approx(ref, rel=1e-12)
    assert res.discordant == (n_pos, n_neg) and res.test == "exact_mcnemar"


def _brute_force_p(v: list[np.ndarray], k: int = 1) -> float:
    """P(T* >= T_obs) by enumerating every choice of the k 'original' labels per item (independent reference)."""
    def t(choice):
        total = 0.0
        for row, c in zip(v, choice, strict=True):
            mask = np.zeros(row.size, bool)
            mask[list(c)] = True
            total += row[mask].mean() - row[~mask].mean()
        return total
    t_obs = t([tuple(range(k))] * len(v))
    perms = list(itertools.product(*[list(itertools.combinations(range(row.size), k)) for row in v]))
    return sum(t(c) >= t_obs - 1e-12 for c in perms) / len(perms)


@pytest.mark.parametrize("seed", range(6))
def test_binary_exact_law_matches_enumeration(seed):
    rng = np.random.default_rng(seed)
    m = [1, 2, 3, 3, 2, 4][: 5] if seed % 2 else [3] * 5  # varying and constant m
    v = [(rng.random(k + 1) < rng.uniform(0.2, 0.9)).astype(float) for k in m]
    res = paired_test("con", [row[0] for row in v], [row[1:] for row in v])
    assert res.p_value == pytest.approx(_brute_force_p(v), abs=1e-12)


def test_binary_null_law_sums_to_one_and_attainable_size():
    rng = np.random.default_rng(4)
    x = (rng.random(40) < 0.9).astype(float)
    y = (rng.random((40, 3)) < 0.9).astype(float)
    law = binary_null_law(x, y)
    assert law.pmf.sum() == pytest.approx(1.0, abs=1e-12)
    assert 0.0 <= law.attainable_size(0.05) <= 0.05
    assert law.p_value == paired_test("acc", x, y).p_value


def test_binary_tail_is_relatively_accurate_far_out():
    # two classes of ~7,000 one-original items with m = 4 (one or three ones among five versions) convolve
    # 7,001 x 7,001 lattice points. Reference: P(X + Y >= s), X ~ Bin(c1, 1/5), Y ~ Bin(c2, 3/5), summed in
    # log space from scipy's logpmf and logsf. An FFT convolution's absolute error (~1e-16) floored such
    # p-values near 1e-15; the exact law keeps its relative accuracy.
    from scipy.special import logsumexp

    c1, c2, hit1, hit2 = 7000, 7000, 1900, 4700
    a = np.r_[np.ones(hit1), np.zeros(c1 - hit1), np.ones(hit2), np.zeros(c2 - hit2)]
    ref = np.zeros((c1 + c2, 4))
    ref[hit1:c1, 0] = 1.0  # class 1: the single one sits on a reference when the original is 0
    ref[c1:c1 + hit2, :2] = 1.0  # class 2: three ones in all
    ref[c1 + hit2:, :3] = 1.0
    law = binary_null_law(a, ref)
    x = np.arange(c1 + 1)
    s = hit1 + hit2
    logp = logsumexp(sps.binom.logpmf(x, c1, 1 / 5) + sps.binom.logsf(s - x - 1, c2, 3 / 5))
    assert 1e-300 < law.p_value < 1e-20
    assert law.p_value == pytest.approx(math.exp(logp), rel=1e-9)


def test_binary_law_has_the_same_bits_on_every_blas_and_simd_path():
    # the exact test's p-value is part of the run's summary.json, which must not depend on the CPU: OpenBLAS
    # picks its dot kernel at run time (OPENBLAS_CORETYPE forces one) and numpy its SIMD loops
    # (NPY_DISABLE_CPU_FEATURES turns some off); a BLAS-based convolution changed the last bits between them
    import os
    import subprocess
    import sys

    code = (
        "import hashlib\n"
        "import numpy as np\n"
        "from zcp.probe.stats import binary_null_law\n"
        "rng = np.random.default_rng(0)\n"
        "for n, k, m in [(100, 1, 4), (300, 3, 4), (2000, 1, 4), (3000, 5, 5)]:\n"
        "    a = (rng.random((n, k)) < 0.6).astype(float); r = (rng.random((n, m)) < 0.5).astype(float)\n"
        "    law = binary_null_law(a, r)\n"
        "    print(repr(law.p_value), repr(law.attainable_size(0.05)), hashlib.sha256(law.pmf.tobytes()).hexdigest())\n"
    )
    outs = set()
    for extra in ({}, {"OPENBLAS_CORETYPE": "Prescott"}, {"OPENBLAS_CORETYPE": "Sandybridge"},
                  {"NPY_DISABLE_CPU_FEATURES": "AVX2 FMA3 AVX512F AVX512_SKX"}):
        env = {**os.environ, **extra}
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        outs.add(run.stdout)
    assert len(outs) == 1, outs


@pytest.mark.parametrize("seed", range(4))
def test_k_original_side_versions_match_enumeration(seed):
    # k = 2 paraphrases per item against m = 2 or 3 references: a uniformly chosen 2-subset is "original"
    rng = np.random.default_rng(seed)
    v = [(rng.random(2 + m) < 0.5).astype(float) for m in (2, 3, 2, 3)]
    res = paired_test("acc", [row[:2] for row in v], [row[2:] for row in v])
    assert res.k == 2 and res.p_value == pytest.approx(_brute_force_p(v, k=2), abs=1e-12)
    w = [rng.random(2 + m) for m in (2, 3, 2)]
    res = paired_test("p_all", [row[:2] for row in w], [row[2:] for row in w], B=10_000)
    assert res.exact and res.p_value == pytest.approx(_brute_force_p(w, k=2), abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_continuous_enumeration_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    v = [rng.random(k + 1) for k in (2, 2, 1, 3)]
    res = paired_test("p_all", [row[0] for row in v], [row[1:] for row in v], B=10_000)
    assert res.exact and res.p_value == pytest.approx(_brute_force_p(v), abs=1e-12)


def test_m1_continuous_matches_scipy_paired_permutation_test():
    # scipy's paired ("samples") permutation test swaps the two members of each pair: our test at m = 1
    rng = np.random.default_rng(8)
    x, y = rng.beta(2, 5, 12), rng.beta(2, 5, 12)
    ref = sps.permutation_test((x, y), lambda a, b: np.sum(a - b), permutation_type="samples",
                               alternative="greater", n_resamples=10_000).pvalue  # 2^12 < 10^4: exact
    assert paired_test("p_first", x, y, B=10_000).p_value == pytest.approx(ref, abs=1e-12)


def test_monte_carlo_close_to_exact_and_never_zero():
    rng = np.random.default_rng(2)
    x, y = rng.beta(2, 5, 30) + 0.05, rng.beta(2, 5, (30, 3))
    res = paired_test("p_all", x, y, B=20_000, seed=1)
    assert not res.exact and res.n_relabellings == 20_000
    # a much longer independent stream as the reference value
    p_long, *_ = permutation_pvalue_mc(x, y, B=400_000, seed=99)
    assert res.p_value == pytest.approx(p_long, abs=0.006)
    strong = paired_test("p_all", np.full(50, 0.9), rng.uniform(0.0, 0.2, (50, 3)), B=999)
    assert strong.p_value == pytest.approx(1 / 1000) and strong.to_dict()["at_floor"]


def test_small_n_cannot_reject():
    # one item: the original is one of m + 1 equally likely labels, so p >= 1/(m + 1)
    assert paired_test("p_all", [0.6], [0.5]).p_value == 0.5
    assert paired_test("p_all", [0.6], [[0.5, 0.4, 0.3]]).p_value == 0.25
    assert paired_test("acc", [1], [0]).p_value == 0.5
    # two items, both ahead: p = 1/4 at m = 1 (the bootstrap said 1e-4)
    assert paired_test("p_all", [0.6, 0.7], [0.5, 0.1]).p_value == 0.25
    assert paired_test("acc", [1, 1], [[0, 0, 0], [0, 0, 0]]).p_value == pytest.approx(1 / 16)


def test_ties_identical_reference_gives_p_one():
    rng = np.random.default_rng(0)
    x = rng.random(200)
    for ref in (x, np.stack([x, x, x], axis=1)):
        res = paired_test("p_all", x, ref)
        assert res.p_value == 1.0 and res.c_cont == 0.5
    b = (rng.random(200) < 0.7).astype(float)
    assert paired_test("acc", b, np.stack([b, b], axis=1)).p_value == 1.0


def test_nan_and_inf_rejected_naming_items():
    with pytest.raises(ValueError, match="item-7"):
        paired_test("p_all", [0.1, float("nan")], [0.2, 0.3], ids=["item-3", "item-7"])
    with pytest.raises(ValueError, match="item-3"):
        paired_test("p_all", [0.1, 0.2], [[float("inf"), 0.1], [0.3, 0.3]], ids=["item-3", "item-7"])
    with pytest.raises(ValueError, match="NaN"):
        paired_test("p_first", [0.1], [float("nan")], test="bootstrap")
    with pytest.raises(ValueError, match="0 or 1"):
        paired_test("acc", [1, 0], [0.5, 1.0])  # averaged draws are not a binary score
    with pytest.raises(ValueError, match="reference rows"):
        paired_test("acc", [1, 0, 1], [[0], [1]])
    with pytest.raises(ValueError, match="B must be"):
        paired_test("p_all", [0.1, 0.2], [0.3, 0.4], B=0)
    with pytest.raises(ValueError, match=r"stats\.test"):
        paired_test("p_all", [0.1], [0.2], test="sign")


def test_bootstrap_kept_for_fidelity_but_needs_two_items():
    assert paired_test("p_all", [0.6], [0.5], test="bootstrap").p_value == 1.0
    d = np.full(40, 0.3) + np.linspace(-0.01, 0.01, 40)
    assert bootstrap_pvalue(d, B=999, seed=1) == pytest.approx(1 / 1000)


def test_pooled_mc_pvalue_adds_streams():
    rng = np.random.default_rng(5)
    x, y = rng.random(40), rng.random((40, 3))
    runs = [paired_test("p_all", x, y, B=1000, seed=s) for s in range(3)]
    assert pooled_mc_pvalue(runs) == pytest.approx((1 + sum(r.exceed for r in runs)) / 3001)
    exact = [paired_test("acc", (x > 0.5).astype(float), (y > 0.5).astype(float))] * 2
    assert pooled_mc_pvalue(exact) == exact[0].p_value


def test_negative_effect_gives_half():
    rng = np.random.default_rng(0)
    s_ref = rng.uniform(0.4, 0.9, 100)
    s = s_ref - 0.2
    res = paired_test("p_first", s, s_ref, B=2000)
    assert res.p_value > 0.9 and res.c_cont == 0.5


def test_monte_carlo_is_deterministic_in_seed():
    rng = np.random.default_rng(3)
    x, y = rng.random(60), rng.random((60, 2))
    assert paired_test("p_all", x, y, B=500, seed=7).p_value == paired_test("p_all", x, y, B=500, seed=7).p_value


def _mc_reference(x, refs, B, seed):
    """The Monte Carlo count written out plainly: one stream of uniforms, relabelling by relabelling, the picked
    version's term indexed item by item."""
    rng = np.random.default_rng(seed)
    terms = [np.concatenate([[a], r]) * (1 + 1 / len(r)) - (a + r.sum()) / len(r) for a, r in zip(x, refs, strict=True)]
    t_obs = sum(t[0] for t in terms)
    tol = 1e-10 * sum(np.abs(t).max() for t in terms)
    u = rng.random((B, len(terms)))
    exceed = 0
    for b in range(B):
        row = np.array([t[int(u[b, i] * t.size)] for i, t in enumerate(terms)])
        exceed += bool(row.sum() >= t_obs - tol)
    return (1 + exceed) / (B + 1), exceed


@pytest.mark.parametrize("ragged", [False, True])
def test_monte_carlo_count_is_the_plain_count_whatever_the_blocks_and_threads(ragged, monkeypatch):
    from zcp.core import permutation as stats_mod  # the module that runs the Monte Carlo test

    rng = np.random.default_rng(11)
    n, B = 40, 300
    x = rng.random(n)
    refs = [rng.random(int(rng.integers(1, 4)) if ragged else 1) for _ in range(n)]
    want = _mc_reference(x, refs, B, seed=5)
    assert permutation_pvalue_mc(x, refs, B=B, seed=5)[:2] == want
    assert permutation_pvalue_mc(x, refs, B=B, seed=5, chunk=7 * n)[:2] == want  # blocks of 7 relabellings
    monkeypatch.setattr(stats_mod, "MC_THREADED_DRAWS", 0)
    monkeypatch.setattr(stats_mod, "MC_THREADS", 3)
    assert permutation_pvalue_mc(x, refs, B=B, seed=5, chunk=7 * n)[:2] == want  # on 3 threads


def _null_binary(rng, n, m, mean_acc):
    """Heterogeneous items (q_i ~ Beta around mean_acc); the m + 1 versions i.i.d. given q_i (H0)."""
    q = rng.beta(mean_acc * 4, (1 - mean_acc) * 4, n)
    v = (rng.random((n, m + 1)) < q[:, None]).astype(float)
    return v[:, 0], v[:, 1:]


@pytest.mark.parametrize(("n", "mean_acc"), [(50, 0.75), (200, 0.9), (50, 0.9)])
def test_binary_type_one_error_at_m3_high_accuracy(n, mean_acc):
    # the regime where the sign test on averaged draws rejected 18-85% of true nulls
    rng = np.random.default_rng(n)
    sims = 1500
    perm = sign = 0
    for _ in range(sims):
        x, y = _null_binary(rng, n, 3, mean_acc)
        perm += paired_test("acc", x, y).p_value < 0.05
        sign += sign_test_pvalue(x - y.mean(axis=1))[0] < 0.05
    assert perm / sims <= 0.07, perm / sims
    assert sign / sims > 0.12, sign / sims  # the old test, on the same data, is far off: why it was replaced


@pytest.mark.parametrize(("n", "m"), [(2, 1), (10, 3), (25, 9)])
def test_continuous_type_one_error_with_skewed_scores(n, m):
    rng = np.random.default_rng(100 + n)
    sims = 1500
    rej = boot = 0
    for k in range(sims):
        # left-skewed item-level scores (most near 1, a long tail down), versions i.i.d. given the item
        base = rng.beta(8, 1.2, n)
        v = np.clip(base[:, None] - rng.exponential(0.15, (n, m + 1)), 1e-6, 1)
        rej += paired_test("p_all", v[:, 0], v[:, 1:], B=199, seed=k).p_value < 0.05
        boot += paired_test("p_all", v[:, 0], v[:, 1:], B=199, seed=k, test="bootstrap").p_value < 0.05
    assert rej / sims <= 0.07, rej / sims
    if n >= 10:
        assert rej / sims >= 0.03, rej / sims  # not discrete-limited here: close to alpha
    if n == 2:
        assert boot / sims > 0.07, boot / sims  # the bootstrap's known failure at tiny n


def test_permutation_power_on_shifted_case():
    rng = np.random.default_rng(5)
    hits = 0
    for k in range(200):
        base = rng.beta(2, 5, 100)
        x = np.clip(base + 0.08 + rng.normal(0, 0.1, 100), 0, 1)
        y = np.clip(base[:, None] + rng.normal(0, 0.1, (100, 3)), 0, 1)
        hits += paired_test("p_all", x, y, B=500, seed=k).p_value < 0.05
    assert hits / 200 > 0.9


def test_combine_bonferroni():
    out = combine({"acc": 0.04, "p_all": 0.001, "p_first": 0.5})
    assert out["p_value"] == pytest.approx(0.003) and out["driving_metric"] == "p_all" and out["contaminated"]
    assert out["c_cont"] == pytest.approx(c_cont(0.003))
    assert combine({"acc": 0.3, "con": 0.9})["p_value"] == pytest.approx(0.6)
    assert combine({})["c_cont"] == 0.5


def test_combined_verdict_type_one_error_under_dependent_null():
    # four dependent metrics from one latent per version, m = 3, under H0: Bonferroni stays at or below alpha
    rng = np.random.default_rng(21)
    rej, sims, n, m = 0, 600, 60, 3
    for k in range(sims):
        ability = rng.normal(1.0, 1.0, n)[:, None] + rng.normal(0, 0.7, (n, m + 1))  # i.i.d. versions per item
        prob = 1 / (1 + np.exp(-ability))
        metrics = {"acc": (rng.random((n, m + 1)) < prob).astype(float),
                   "con": (rng.random((n, m + 1)) < prob * 0.9).astype(float),
                   "p_first": prob, "p_all": np.sqrt(prob)}
        ps = {name: paired_test(name, v[:, 0], v[:, 1:], B=199, seed=k).p_value for name, v in metrics.items()}
        rej += combine(ps)["contaminated"]
    assert rej / sims <= 0.06


def test_printed_c_cont_never_reads_as_one():
    from zcp.probe.report import c_cont_text

    tiny_p = c_cont(1e-9)  # an exact test on a large effect: C_cont = 1 - 2.3e-8
    assert tiny_p < 1.0 and f"{tiny_p:.3f}" == "1.000"
    assert c_cont_text(tiny_p, 0.0, True) == ">0.999"
    assert c_cont_text(0.9984, 0.001, True) == "0.998 ± 0.001" and c_cont_text(0.5, 0.0, False) == "0.500"
