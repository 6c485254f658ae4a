"""Part (a) of the calibration study: simulated nulls over a grid, the four metrics jointly, and power.

Items are heterogeneous (level q_i ~ Beta around the mean accuracy) and, under H0, an item's original and its m
perturbations are i.i.d. given q_i; regimes `binary`, `symmetric`, `skewed` and `joint` (see the package
docstring). Every grid cell has its own generator (`cell_rng`), so a cell's numbers do not depend on which
other cells run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import special as sps_special

from zcp.validate.calibration.tests import (
    COMBINED,
    EPS,
    REGIMES,
    TESTS,
    all_pvalues,
    bonferroni,
    cell_rng,
    kind_of,
    permutation_pvalues,
    progress_bar,
    rate_row,
)

# --------------------------------------------------------------------------------------------------
# simulation


@dataclass(frozen=True)
class SimSpec:
    """Shape of the simulated scores (see the module docstring)."""

    concentration: float = 5.0  # item levels q_i ~ Beta(kappa mu, kappa (1 - mu)): smaller = more heterogeneous
    logit_noise: float = 0.5  # symmetric regime: version score sigmoid(logit q_i + sigma eps)
    beta_concentration: float = 1.0  # skewed regime: version score ~ Beta(kv q_i, kv (1 - q_i))
    joint_noise: float = 1.0  # joint regime: per-version latent z = logit q_i + sigma eps


def _logit(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, EPS, 1 - EPS)
    return np.log(x) - np.log1p(-x)


def item_levels(rng: np.random.Generator, accuracy: float, shape: tuple[int, ...], concentration: float) -> np.ndarray:
    """Heterogeneous item levels q_i ~ Beta(kappa mu, kappa (1 - mu)) with mean mu = accuracy."""
    if not 0.0 < accuracy < 1.0:
        raise ValueError(f"accuracy must lie in (0, 1), got {accuracy}")
    return np.clip(rng.beta(concentration * accuracy, concentration * (1 - accuracy), size=shape), 0.0, 1.0)


def shift_scores(x: np.ndarray, effect: float) -> np.ndarray:
    """Continuous alternative: a score moved by `effect` on the logit scale (stays in (0, 1))."""
    if effect == 0:
        return x
    return np.clip(sps_special.expit(_logit(x) + effect), EPS, 1.0)


def simulate(rng: np.random.Generator, regime: str, accuracy: float, m: int, n: int, replicates: int,
             effect: float = 0.0, spec: SimSpec = SimSpec()) -> tuple[np.ndarray, np.ndarray]:
    """`replicates` simulated benchmarks: originals (R, n) and references (R, n, m).

    Under H0 (effect = 0) the m + 1 versions of an item are i.i.d. given its level q_i. With effect > 0
    the original is favoured: binary P(correct) = min(1, q_i + effect); continuous +effect on the logit.
    """
    shape = (replicates, n)
    q = item_levels(rng, accuracy, shape, spec.concentration)
    if regime == "binary":
        ref = (rng.random((*shape, m)) < q[..., None]).astype(np.float64)
        orig = (rng.random(shape) < np.minimum(1.0, q + effect)).astype(np.float64)
        return orig, ref
    if regime == "symmetric":
        z = _logit(q)[..., None] + spec.logit_noise * rng.standard_normal((*shape, m + 1))
        versions = sps_special.expit(z)
    elif regime == "skewed":
        qc = np.clip(q, 1e-6, 1 - 1e-6)[..., None]
        kv = spec.beta_concentration
        versions = rng.beta(kv * qc, kv * (1 - qc), size=(*shape, m + 1))
    else:
        raise ValueError(f"unknown regime {regime!r}; use one of {REGIMES}")
    versions = np.clip(versions, EPS, 1.0)  # probabilities in (0, 1]
    return shift_scores(versions[..., 0], effect), versions[..., 1:]


def simulate_joint(rng: np.random.Generator, accuracy: float, m: int, n: int, replicates: int,
                   spec: SimSpec = SimSpec()) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The four metrics of each version, dependent through one latent z = logit q_i + sigma eps.

    p_all = sigmoid(z + 0.3 eta), p_first = sigmoid(z + 1 + 0.5 eta') (the first token is easier),
    acc ~ Bernoulli(sigmoid z), full-CoT correct ~ Bernoulli(sigmoid(z + 1.5)), con = both right, or
    both wrong with the same wrong answer (probability 0.2). Versions are i.i.d. given q_i (H0).
    """
    shape = (replicates, n, m + 1)
    q = item_levels(rng, accuracy, (replicates, n), spec.concentration)
    z = _logit(q)[..., None] + spec.joint_noise * rng.standard_normal(shape)
    p_all = np.clip(sps_special.expit(z + 0.3 * rng.standard_normal(shape)), EPS, 1.0)
    p_first = np.clip(sps_special.expit(z + 1.0 + 0.5 * rng.standard_normal(shape)), EPS, 1.0)
    acc = rng.random(shape) < sps_special.expit(z)
    cot = rng.random(shape) < sps_special.expit(z + 1.5)
    con = (acc & cot) | (~acc & ~cot & (rng.random(shape) < 0.2))
    out = {"acc": acc.astype(np.float64), "con": con.astype(np.float64), "p_first": p_first, "p_all": p_all}
    return {k: (v[..., 0], v[..., 1:]) for k, v in out.items()}


# --------------------------------------------------------------------------------------------------
# (a) simulated nulls, joint verdict, power


@dataclass
class GridSettings:
    """The simulated grid and its Monte Carlo sizes."""

    accuracy: Sequence[float] = (0.05, 0.25, 0.5, 0.75, 0.9, 0.95)
    m: Sequence[int] = (1, 3, 9)
    n: Sequence[int] = (10, 25, 50, 100, 500)
    regimes: Sequence[str] = REGIMES
    tests: Sequence[str] = TESTS
    replicates: int = 1000  # per cell; CI half-width ~0.0135 at a rate of 0.05
    replicates_continuous: int = 800  # continuous cells (Monte Carlo permutation and bootstrap cost B x n each)
    replicates_large: int = 300  # continuous cells with n >= large_n
    large_n: int = 500
    B: int = 999
    library_check: int = 20  # binary cells: replicates re-tested with zcp.probe.stats.paired_test (0 = off)


def _replicates(g: GridSettings, kind: str, n: int) -> int:
    if kind == "binary":
        return g.replicates
    return g.replicates_large if n >= g.large_n else g.replicates_continuous


def _library_check(orig: np.ndarray, ref: np.ndarray, p: np.ndarray, k: int) -> float:
    """Largest |p - p_library| of the exact binary test over the first k replicates."""
    from zcp.probe.stats import paired_test

    worst = 0.0
    for r in range(min(k, orig.shape[0])):
        res = paired_test("acc", orig[r], ref[r], test="permutation")
        worst = max(worst, abs(res.p_value - float(p[r])))
    return worst


def null_grid(g: GridSettings, spec: SimSpec, alphas: Sequence[float], seed: int, *, discrete_below: float,
              progress: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Type-I error of every test in every (regime, accuracy, m, n) cell; returns rows and check info."""
    cells = [(reg, acc, m, n) for reg in g.regimes for acc in g.accuracy for m in g.m for n in g.n]
    rows: list[dict[str, Any]] = []
    worst_lib = 0.0
    bar = progress_bar(len(cells), "null grid", progress)
    for reg, acc, m, n in cells:
        kind = kind_of(reg)
        rng = cell_rng(seed, "null", reg, acc, m, n)
        R = _replicates(g, kind, n)
        orig, ref = simulate(rng, reg, acc, m, n, R, spec=spec)
        pv, attain = all_pvalues(kind, orig, ref, g.tests, g.B, rng, alphas)
        if attain is not None and g.library_check:
            worst_lib = max(worst_lib, _library_check(orig, ref, pv["permutation"], g.library_check))
        limited = bool(attain is not None and attain[alphas[0]].mean() < discrete_below)
        realised = float(np.concatenate([orig[..., None], ref], axis=-1).mean())
        for t, p in pv.items():
            row = rate_row(p, alphas, part="a", regime=reg, metric=kind, test=t, m=m, n=n, accuracy=acc,
                           score_mean=realised, discrete_limited=limited)
            if t == "permutation" and attain is not None:
                for a in alphas:
                    row[f"attainable@{a:g}"] = float(attain[a].mean())
            rows.append(row)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return rows, {"library_check_max_abs_diff": worst_lib if g.library_check and "binary" in g.regimes else None}


@dataclass
class JointSettings:
    """The four metrics simulated jointly: the combined Bonferroni verdict's type-I error."""

    accuracy: Sequence[float] = (0.05, 0.25, 0.5, 0.75, 0.9, 0.95)
    m: Sequence[int] = (1, 3, 9)
    n: Sequence[int] = (25, 100)
    tests: Sequence[str] = TESTS
    replicates: int = 800
    B: int = 999


def joint_grid(j: JointSettings, spec: SimSpec, alphas: Sequence[float], seed: int, *, discrete_below: float,
               progress: bool = True) -> list[dict[str, Any]]:
    """Per metric and combined (Bonferroni over the four metrics, per test) type-I error, jointly simulated.

    The `sign + bootstrap` combination is the old library verdict (sign test on acc/con, bootstrap on
    p_first/p_all).
    """
    cells = [(acc, m, n) for acc in j.accuracy for m in j.m for n in j.n]
    rows: list[dict[str, Any]] = []
    bar = progress_bar(len(cells), "joint", progress)
    for acc, m, n in cells:
        rng = cell_rng(seed, "joint", acc, m, n)
        data = simulate_joint(rng, acc, m, n, j.replicates, spec)
        per_metric: dict[str, dict[str, np.ndarray]] = {}
        limited = False
        for metric, (orig, ref) in data.items():
            kind = kind_of(metric)
            pv, attain = all_pvalues(kind, orig, ref, j.tests, j.B, rng, alphas)
            lim = bool(attain is not None and attain[alphas[0]].mean() < discrete_below)
            limited = limited or lim
            per_metric[metric] = pv
            for t, p in pv.items():
                row = rate_row(p, alphas, part="a-joint", regime="joint", metric=metric, test=t, m=m, n=n,
                               accuracy=acc, score_mean=float(orig.mean()), discrete_limited=lim)
                if t == "permutation" and attain is not None:
                    for a in alphas:
                        row[f"attainable@{a:g}"] = float(attain[a].mean())
                rows.append(row)
        for t in j.tests:
            p = bonferroni([per_metric[mt][t] for mt in data])
            rows.append(rate_row(p, alphas, part="a-joint", regime="joint", metric=COMBINED, test=t, m=m, n=n,
                                 accuracy=acc, discrete_limited=False))
        if "sign" in j.tests and "bootstrap" in j.tests:
            p = bonferroni([per_metric[mt]["sign" if kind_of(mt) == "binary" else "bootstrap"] for mt in data])
            rows.append(rate_row(p, alphas, part="a-joint", regime="joint", metric=COMBINED, test="sign+bootstrap",
                                 m=m, n=n, accuracy=acc, discrete_limited=False))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return rows


@dataclass
class PowerSettings:
    """Power against shifted originals."""

    accuracy: Sequence[float] = (0.5, 0.9)
    m: Sequence[int] = (3,)
    n: Sequence[int] = (25, 100)
    regimes: Sequence[str] = REGIMES
    tests: Sequence[str] = ("permutation", "ttest", "wilcoxon")
    binary_effects: Sequence[float] = (0.0, 0.05, 0.1, 0.2, 0.3)  # P(original correct) = min(1, q_i + delta)
    continuous_effects: Sequence[float] = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0)  # + delta on the logit of the original
    replicates: int = 400
    B: int = 999


def power_grid(pw: PowerSettings, spec: SimSpec, alphas: Sequence[float], seed: int,
               progress: bool = True) -> list[dict[str, Any]]:
    """Rejection rate of each test against each effect size (effect 0 = the null, for reference)."""
    cells = []
    for reg in pw.regimes:
        effects = pw.binary_effects if reg == "binary" else pw.continuous_effects
        cells += [(reg, acc, m, n, e) for acc in pw.accuracy for m in pw.m for n in pw.n for e in effects]
    rows: list[dict[str, Any]] = []
    bar = progress_bar(len(cells), "power", progress)
    for reg, acc, m, n, e in cells:
        rng = cell_rng(seed, "power", reg, acc, m, n, e)
        orig, ref = simulate(rng, reg, acc, m, n, pw.replicates, effect=e, spec=spec)
        pv, _ = all_pvalues(kind_of(reg), orig, ref, pw.tests, pw.B, rng, alphas)
        for t, p in pv.items():
            rows.append(rate_row(p, alphas, part="power", regime=reg, metric=kind_of(reg), test=t, m=m, n=n,
                                 accuracy=acc, effect=e))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return rows


# --------------------------------------------------------------------------------------------------
# (a) over answer conventions: the multi-convention verdict (Bonferroni over every (convention, metric))

CONVENTION_DEPENDENCE = ("identical", "shifted", "independent")
MULTICONV = "multiconv"  # the metric name of the multi-convention verdict's rows


@dataclass
class ConventionGridSettings:
    """conf/calibration.yaml `conventions`: simulated nulls where each item is probed under C answer conventions.

    dependence: `identical` (every convention scores the same latent, per-convention noise `near_noise`: the
    conventions nearly identical), `shifted` (a per-convention logit offset spread over [-shift, shift], a
    per-(item, convention) effect of sd `item_noise`, the version noise shared with correlation `rho`), or
    `independent` (the offsets and item effects, version noise and Bernoulli draws independent across conventions:
    they share the item level only)."""

    accuracy: Sequence[float] = (0.05, 0.25, 0.5, 0.9)
    m: Sequence[int] = (1, 3, 9)
    n: Sequence[int] = (25, 100)
    conventions: Sequence[int] = (2, 4)  # C: conventions per item
    dependence: Sequence[str] = CONVENTION_DEPENDENCE
    replicates: int = 600
    B: int = 999
    shift: float = 1.0  # the offsets' spread on the logit scale (shifted, independent)
    item_noise: float = 0.5  # sd of the per-(item, convention) effect (shifted, independent)
    rho: float = 0.7  # shifted: correlation of a version's noise across conventions
    near_noise: float = 0.05  # identical: sd of the per-convention noise


def simulate_conventions(rng: np.random.Generator, accuracy: float, m: int, n: int, replicates: int, C: int,
                         dependence: str, g: ConventionGridSettings = ConventionGridSettings(),
                         spec: SimSpec = SimSpec()) -> list[dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Per convention the four metrics of `simulate_joint` ({metric: (orig (R, n), ref (R, n, m))}), dependent
    across conventions as `dependence` says (ConventionGridSettings). Version j of item i under convention c has
    the latent z = logit q_i + a_c + u_ic + sigma (rho e_ij + sqrt(1 - rho^2) e_ijc); the full-CoT generation has
    no pre-fill, so its correctness (con's other half) is one draw per version shared by every convention. Under
    H0 the versions of an item are i.i.d. given the item's quantities, jointly over the conventions: relabelling
    the same version as original in every convention leaves the law unchanged (the joint null)."""
    if dependence not in CONVENTION_DEPENDENCE:
        raise ValueError(f"unknown dependence {dependence!r}; use one of {CONVENTION_DEPENDENCE}")
    shape = (replicates, n, m + 1)
    q = item_levels(rng, accuracy, (replicates, n), spec.concentration)
    base = _logit(q)[..., None]
    shared = rng.standard_normal(shape)
    sigma = spec.joint_noise
    cot = rng.random(shape) < sps_special.expit(base + sigma * shared + 1.5)
    u_acc, u_con = rng.random(shape), rng.random(shape)  # shared Bernoulli draws unless independent
    offsets = np.zeros(C) if dependence == "identical" else np.linspace(-g.shift, g.shift, C)
    out = []
    for c in range(C):
        if dependence == "identical":
            z = base + sigma * shared + g.near_noise * rng.standard_normal(shape)
        else:
            rho = g.rho if dependence == "shifted" else 0.0
            own = rng.standard_normal(shape)
            z = (base + offsets[c] + g.item_noise * rng.standard_normal((replicates, n, 1))
                 + sigma * (rho * shared + np.sqrt(1 - rho**2) * own))
        if dependence == "independent":
            u_acc, u_con = rng.random(shape), rng.random(shape)
        p_all = np.clip(sps_special.expit(z + 0.3 * rng.standard_normal(shape)), EPS, 1.0)
        p_first = np.clip(sps_special.expit(z + 1.0 + 0.5 * rng.standard_normal(shape)), EPS, 1.0)
        acc = u_acc < sps_special.expit(z)
        con = (acc & cot) | (~acc & ~cot & (u_con < 0.2))
        metrics = {"acc": acc.astype(np.float64), "con": con.astype(np.float64), "p_first": p_first, "p_all": p_all}
        out.append({k: (v[..., 0], v[..., 1:]) for k, v in metrics.items()})
    return out


def convention_grid(g: ConventionGridSettings, spec: SimSpec, alphas: Sequence[float], seed: int,
                    progress: bool = True) -> list[dict[str, Any]]:
    """Type-I error of the multi-convention verdict over (dependence, C, accuracy, m, n): rows `multiconv`
    (Bonferroni over every (convention, metric) p-value of the library's permutation tests, C x 4 of them, as
    zcp.probe.stats.combine_conventions) and, for reference, `combined` (one convention's verdict, Bonferroni
    over its four metrics). Regime `<dependence>, C=<C>`; part `a-conv`."""
    cells = [(dep, C, acc, m, n) for dep in g.dependence for C in g.conventions for acc in g.accuracy
             for m in g.m for n in g.n]
    rows: list[dict[str, Any]] = []
    bar = progress_bar(len(cells), "conventions", progress)
    for dep, C, acc, m, n in cells:
        rng = cell_rng(seed, "conventions", dep, C, acc, m, n)
        data = simulate_conventions(rng, acc, m, n, g.replicates, C, dep, g, spec)
        per_conv = []
        for conv in data:
            ps = []
            for metric, (orig, ref) in conv.items():
                p, _ = permutation_pvalues(kind_of(metric), orig, ref, g.B, rng, alphas, stop_above=max(alphas))
                ps.append(p)
            per_conv.append(ps)
        regime = f"{dep}, C={C}"
        common = {"part": "a-conv", "regime": regime, "test": "permutation", "m": m, "n": n, "accuracy": acc,
                  "conventions": C, "dependence": dep, "discrete_limited": False}
        rows.append(rate_row(bonferroni([p for ps in per_conv for p in ps]), alphas, metric=MULTICONV,
                             n_tests=C * len(per_conv[0]), **common))
        rows.append(rate_row(bonferroni(per_conv[0]), alphas, metric=COMBINED, n_tests=len(per_conv[0]), **common))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return rows
