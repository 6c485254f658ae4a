"""Calibration of the ZCP tests: type-I error under true nulls, and power.

Why this study exists: the tests the probe used before (an exact sign test on per-item averages of the
reference draws; a paired bootstrap of the mean difference) are not valid with m > 1 reference draws
or at small n. The within-item permutation test (zcp.probe.stats) is valid by construction; this package
measures what each test does on data where H0 holds, so the README can show the numbers.

Three kinds of null, one table shape (rejection rate at alpha with a Clopper-Pearson 95% CI):

(a) **Simulated nulls** over a grid (mean accuracy x m x n). Items are heterogeneous: item i has a
    level q_i ~ Beta(kappa mu, kappa (1 - mu)) around the mean accuracy mu, and under H0 the original
    and its m perturbations are i.i.d. given q_i. Regimes: `binary` (Bernoulli(q_i), like acc/con),
    `symmetric` (sigmoid(logit q_i + sigma eps), noise symmetric on the logit scale), `skewed`
    (Beta(kappa_v q_i, kappa_v (1 - q_i)) with kappa_v = 1: spiky near 0 or 1, like p_all of a weak or
    strong model), and `joint` (acc, con, p_first, p_all of one version driven by one shared latent, to
    measure the combined Bonferroni verdict). Power: the original's score is shifted (binary:
    P(correct) = min(1, q_i + delta); continuous: +delta on the logit scale).
(b) **Real-score nulls** from a detection run's records.jsonl: per item one reference draw, picked at
    random, plays the original and the other m - 1 draws are its references. The label is uniform by
    construction, so H0 holds exactly while the scores are a real model's.
(c) **A real model on a real benchmark**: the uncontaminated base model on random item subsets of
    GSM8K, originals against their references: the false-positive rate a user would meet, which also
    includes any systematic difference the perturbation itself introduces.

Tests compared: the permutation test (exact for binary metrics, Monte Carlo for continuous ones), the
one-sided paired t-test and Wilcoxon signed-rank test on d_i = X_i - mean_j Y_ij (scipy), and the old
tests (exact sign test on d_i; paired bootstrap of the mean). In (a), and in (b) for sources with the
same m for every item, they are re-implemented vectorised over replicates (the library's per-call tests
would take hours over the grid): the exact binary test is checked against `zcp.probe.stats.paired_test` on
every binary cell (`library_check` in summary.json), the unit tests check the Monte Carlo and bootstrap
ones against the library and the Wilcoxon against scipy row by row. In (c), and in (b) for ragged
sources, the library's own `paired_test` runs. Two shortcuts keep the grid to minutes and change no
decision: a replicate stops drawing relabellings once its p must exceed max(alphas)
(`sequential_counts`), and the bootstrap of binary scores draws its exceedance count from the exact
bootstrap law (`_lattice_bootstrap_counts`). A Monte Carlo p = (1 + #{T* >= T_obs}) / (B + 1) is a
valid p-value for any B, so B = 999 in the grid gives the same size as the library's B = 10,000
(slightly less power).

Modules, low to high (none imports a higher one): `tests` (the vectorised tests, rejection rates, table rows),
`simulated` (part (a): null grid, joint, power), `real_null` (parts (b) and (c)), `real_originals` (part (d), the
headline), `report` (table.md, summary.md, summary.json, plots), `run` (`run_calibration`, the job). The names
used elsewhere are re-exported here.
"""

from zcp.validate.calibration.job import (  # registers the job
    CALIBRATION_PARTS,
    CalibrationFlags,
    CalibrationPlots,
)
from zcp.validate.calibration.real_null import (
    BaseModelSettings,
    RealNullSettings,
    expand_paths,
    item_table,
    pseudo_null,
    real_null_study,
    reference_draws,
    run_replicates,
    score_benchmark,
    subset_study,
)
from zcp.validate.calibration.real_originals import (
    POOL_KINDS,
    PoolSpec,
    RealOriginalsSettings,
    average_rates,
    pool_items,
    pool_references,
    rate_cells,
    real_originals_study,
    relabel_order,
    subset_draws,
    subset_rejections,
    subset_versions,
    version_table,
)
from zcp.validate.calibration.report import max_type1, summary_markdown, write_calibration_reports
from zcp.validate.calibration.run import run_calibration
from zcp.validate.calibration.simulated import (
    GridSettings,
    JointSettings,
    PowerSettings,
    SimSpec,
    joint_grid,
    null_grid,
    power_grid,
    simulate,
    simulate_joint,
)
from zcp.validate.calibration.tests import (
    BINARY_METRICS,
    COMBINED,
    JOINT_METRICS,
    REGIMES,
    TEST_LABEL,
    TESTS,
    all_pvalues,
    bonferroni,
    bootstrap_pvalues,
    cell_rng,
    differences,
    exact_binary,
    flag_row,
    kind_of,
    permutation_mc,
    permutation_pvalues,
    rate_ci,
    rate_row,
    rejects,
    sign_pvalues,
    ttest_pvalues,
    wilcoxon_pvalues,
)

__all__ = [
    "BINARY_METRICS",
    "CALIBRATION_PARTS",
    "COMBINED",
    "JOINT_METRICS",
    "POOL_KINDS",
    "REGIMES",
    "TESTS",
    "TEST_LABEL",
    "BaseModelSettings",
    "CalibrationFlags",
    "CalibrationPlots",
    "GridSettings",
    "JointSettings",
    "PoolSpec",
    "PowerSettings",
    "RealNullSettings",
    "RealOriginalsSettings",
    "SimSpec",
    "all_pvalues",
    "average_rates",
    "bonferroni",
    "bootstrap_pvalues",
    "cell_rng",
    "differences",
    "exact_binary",
    "expand_paths",
    "flag_row",
    "item_table",
    "joint_grid",
    "kind_of",
    "max_type1",
    "null_grid",
    "permutation_mc",
    "permutation_pvalues",
    "pool_items",
    "pool_references",
    "power_grid",
    "pseudo_null",
    "rate_cells",
    "rate_ci",
    "rate_row",
    "real_null_study",
    "real_originals_study",
    "reference_draws",
    "rejects",
    "relabel_order",
    "run_calibration",
    "run_replicates",
    "score_benchmark",
    "sign_pvalues",
    "simulate",
    "simulate_joint",
    "subset_draws",
    "subset_rejections",
    "subset_study",
    "subset_versions",
    "summary_markdown",
    "ttest_pvalues",
    "version_table",
    "wilcoxon_pvalues",
    "write_calibration_reports",
]
