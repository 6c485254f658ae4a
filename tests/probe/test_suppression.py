"""The suppression and contrast signals (zcp.probe.suppression): the lower-tail test is the within-item permutation
test's other tail, checked against brute-force enumeration; the signals fire on a suppressed set and hold their
level on exchangeable nulls."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from zcp.probe.suppression import lower_tail_test, suppression_signal


def _brute_lower(original: list[float], refs: list[list[float]]) -> float:
    """P(T* <= T_obs) over every within-item relabelling (each version of item i equally likely 'original')."""
    def t(choice: tuple[int, ...]) -> float:
        total = 0.0
        for i, j in enumerate(choice):
            versions = [original[i], *refs[i]]
            total += versions[j] - np.mean([v for q, v in enumerate(versions) if q != j])
        return total

    t_obs = t(tuple(0 for _ in original))
    all_t = [t(c) for c in itertools.product(*[range(len(r) + 1) for r in refs])]
    return float(np.mean([x <= t_obs + 1e-12 for x in all_t]))


@pytest.mark.parametrize("case", [
    ("acc", [0, 0, 1, 0], [[1, 1], [1, 0], [1, 1], [0, 1]]),
    ("acc", [1, 0, 1], [[0, 1, 1], [1, 1, 0], [1, 0, 0]]),
    ("p_all", [0.1, 0.5, 0.05, 0.3], [[0.4, 0.9], [0.2, 0.6], [0.3, 0.35], [0.31, 0.2]]),
    ("p_first", [0.9, 0.2, 0.4], [[0.1, 0.5, 0.7], [0.25, 0.6, 0.1], [0.8, 0.4, 0.05]]),
])
def test_lower_tail_p_is_the_brute_force_enumeration(case):
    metric, a, r = case
    res = lower_tail_test(metric, a, r, B=10_000, seed=3)
    assert res.p_value == pytest.approx(_brute_lower([float(x) for x in a], [[float(x) for x in q] for q in r]),
                                        abs=1e-9)
    assert res.s == pytest.approx(np.mean(a)) and res.s_ref == pytest.approx(np.mean([np.mean(q) for q in r]))


def _records(conv_scores: dict[str, tuple[list[int], list[list[int]]]], split: str = "C") -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for conv, (orig, refs) in conv_scores.items():
        rows = []
        for i, (x, ys) in enumerate(zip(orig, refs, strict=True)):
            rows.append({"split": split, "variant": "original", "original_id": f"q{i}", "draw": 0,
                         "correct": bool(x), "prompt_hash": f"o{i}", "gold": "1"})
            for j, y in enumerate(ys):
                rows.append({"split": split, "variant": "reference", "original_id": f"q{i}", "draw": j,
                             "correct": bool(y), "prompt_hash": f"r{i}-{j}", "gold": str(j)})
        out[conv] = rows
    return out


def test_signals_fire_on_a_suppressed_set_and_name_the_conventions():
    n = 20
    below = ([0] * n, [[1, 1, 0]] * n)  # originals never right, references mostly right
    above = ([1] * n, [[0, 0, 1]] * n)
    sig = suppression_signal(_records({"probe": below, "hash": above}), ["acc"], "C")
    assert sig["suppression"]["flagged"] and sig["suppression"]["driving"] == ["probe", "acc"]
    assert sig["contrast"]["flagged"]
    assert (sig["contrast"]["below_under"], sig["contrast"]["above_under"]) == ("probe", "hash")
    one = suppression_signal(_records({"probe": below}), ["acc"], "C")
    assert one["contrast"] is None and one["suppression"]["n_tests"] == 1
    same = suppression_signal(_records({"probe": above, "hash": above}), ["acc"], "C")
    assert not same["suppression"]["flagged"] and not same["contrast"]["flagged"]


def test_signals_hold_their_level_on_exchangeable_nulls():
    rng = np.random.default_rng(0)
    flagged_s = flagged_c = 0
    reps = 150
    for _ in range(reps):
        convs = {}
        for conv in ("probe", "hash"):
            p = rng.uniform(0.05, 0.95, size=15)
            versions = (rng.uniform(size=(15, 4)) < p[:, None]).astype(int)
            convs[conv] = (versions[:, 0].tolist(), versions[:, 1:].tolist())
        sig = suppression_signal(_records(convs), ["acc"], "C")
        flagged_s += sig["suppression"]["flagged"]
        flagged_c += sig["contrast"]["flagged"]
    assert flagged_s / reps <= 0.07 and flagged_c / reps <= 0.07
