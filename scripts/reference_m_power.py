"""Power of the within-item permutation test against the number m of reference draws per item.

    .venv/bin/python scripts/reference_m_power.py                 # the table of docs/benchmarks.md
    .venv/bin/python scripts/reference_m_power.py --reps 100      # quicker, coarser

Why: `reference.m` sets what a detection costs (every draw is one more version to score and, for `con`, to
generate: a run's work grows as m + 1) and what it can see. The statistic T = sum_i (X_i - mean_j Y_ij) has
per-item variance sigma^2 (1 + 1/m) under a within-family spread sigma, so a draw beyond a few buys little: the
information relative to m = infinity is m / (m + 1) (50% at m = 1, 75% at 3, 83% at 5, 90% at 9), and the
binary test at m = 1 is McNemar's, which uses only the discordant items.

Simulation (with `zcp.probe.stats.paired_test`, one-sided, alpha = 0.05), n items, `reps` data sets per cell:
- continuous (p_first-like): item i has a clean-model level mu_i ~ Beta(2, 5) (a 135M model's p_first spread);
  every version scores clip(mu_i + N(0, sigma_w^2)) with sigma_w = 0.1; contamination adds delta to the
  original's score. Monte Carlo B = 2,000 relabellings.
- binary (acc-like): item i has a clean-model probability q_i ~ Beta(1, 3); every version is correct with
  probability q_i, the original with q_i + delta (capped at 1). Exact test.
It prints power per (metric, n, delta, m) and the cost of a run relative to m = 1 ((m + 1) / 2).
"""

from __future__ import annotations

import argparse

import numpy as np

from zcp.probe.stats import paired_test

MS = (1, 2, 3, 5, 9)


def simulate(kind: str, n: int, m: int, delta: float, reps: int, seed: int = 0, alpha: float = 0.05) -> float:
    """The share of `reps` simulated contaminated data sets (effect `delta` on the original) the test rejects."""
    rng = np.random.default_rng([seed, n, m, int(delta * 1000), kind == "binary"])
    hits = 0
    for r in range(reps):
        if kind == "binary":
            q = rng.beta(1.0, 3.0, size=n)
            x = (rng.random(n) < np.minimum(1.0, q + delta)).astype(float)
            y = (rng.random((n, m)) < q[:, None]).astype(float)
            p = paired_test("acc", x, y, kind="binary").p_value
        else:
            mu = rng.beta(2.0, 5.0, size=n)
            x = np.clip(mu + delta + rng.normal(0.0, 0.1, n), 0.0, 1.0)
            y = np.clip(mu[:, None] + rng.normal(0.0, 0.1, (n, m)), 0.0, 1.0)
            p = paired_test("p_first", x, y, B=2000, seed=r, kind="continuous").p_value
        hits += p <= alpha
    return hits / reps


def main() -> None:
    """Print the power table (markdown)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cells = [("continuous", 100, 0.02), ("continuous", 300, 0.02), ("continuous", 100, 0.04),
             ("binary", 100, 0.10), ("binary", 300, 0.05), ("binary", 300, 0.10)]
    print("| metric | n | effect | " + " | ".join(f"m = {m}" for m in MS) + " |")
    print("|---|---:|---:|" + "---:|" * len(MS))
    for kind, n, delta in cells:
        row = [simulate(kind, n, m, delta, args.reps, args.seed) for m in MS]
        print(f"| {kind} | {n} | {delta:+.2f} | " + " | ".join(f"{p:.2f}" for p in row) + " |", flush=True)
    print("| null (binary, n = 300) | 300 | 0 | "
          + " | ".join(f"{simulate('binary', 300, m, 0.0, args.reps, args.seed):.3f}" for m in MS) + " |")
    print("| cost relative to m = 1 |  |  | " + " | ".join(f"{(m + 1) / 2:.1f}x" for m in MS) + " |")


if __name__ == "__main__":
    main()
