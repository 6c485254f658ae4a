"""The calibration study (zcp.validate.calibration): its simulated nulls hold H0, its vectorised tests are the
library's and scipy's, the permutation test keeps its level where the old tests do not, the real-score
null is built right, and the entry point runs end to end on a tiny setting."""

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from fakes import FakeBackend
from scipy import stats as sps

import zcp.backends.registry
import zcp.config
from zcp.probe.stats import binary_null_law, bootstrap_pvalue, paired_test
from zcp.validate import calibration as cal

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("regime", cal.REGIMES)
def test_simulated_null_versions_are_exchangeable(regime):
    """Under H0 the original is distributed like any reference draw (same mean, same law), at an
    extreme accuracy where a wrong simulation (e.g. the original drawn at the mean accuracy instead of
    its item's level) would show."""
    rng = np.random.default_rng(0)
    orig, ref = cal.simulate(rng, regime, 0.9, 3, 200, 100)
    assert orig.shape == (100, 200) and ref.shape == (100, 200, 3)
    assert abs(orig.mean() - ref.mean()) < 0.01
    assert abs(ref.mean() - 0.9) < 0.03
    assert sps.ks_2samp(orig.ravel(), ref[..., 1].ravel()).pvalue > 0.01
    # versions of an item are dependent through its level: the original correlates with its references
    assert np.corrcoef(orig.ravel(), ref.mean(axis=-1).ravel())[0, 1] > 0.2
    if regime == "binary":
        assert set(np.unique(orig)) <= {0.0, 1.0}
    else:
        assert orig.min() > 0 and orig.max() <= 1


def test_joint_simulation_is_exchangeable_and_dependent():
    data = cal.simulate_joint(np.random.default_rng(1), 0.75, 3, 300, 40)
    assert set(data) == set(cal.JOINT_METRICS)
    for orig, ref in data.values():
        assert abs(orig.mean() - ref.mean()) < 0.02
    acc, p_all = data["acc"][0].ravel(), data["p_all"][0].ravel()
    assert np.corrcoef(acc, p_all)[0, 1] > 0.2  # one latent drives all four metrics


def test_effect_favours_the_original():
    rng = np.random.default_rng(2)
    o, r = cal.simulate(rng, "binary", 0.5, 3, 100, 50, effect=0.2)
    assert o.mean() - r.mean() > 0.15
    o, r = cal.simulate(rng, "skewed", 0.5, 3, 100, 50, effect=1.0)
    assert o.mean() > r.mean() + 0.1


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (10, 10), (50, 1000), (1, 800)])
def test_rate_ci_matches_scipy(k, n):
    lo, hi = cal.rate_ci(k, n)
    ref = sps.binomtest(k, n).proportion_ci(0.95, method="exact")
    assert lo == pytest.approx(ref.low, abs=1e-12) and hi == pytest.approx(ref.high, abs=1e-12)


def test_exact_binary_matches_the_library_and_mcnemar():
    rng = np.random.default_rng(3)
    for m in (1, 3):
        orig, ref = cal.simulate(rng, "binary", 0.6, m, 30, 15)
        p, attain = cal.permutation_pvalues("binary", orig, ref, 999, rng)
        for r in range(orig.shape[0]):
            lib = paired_test("acc", orig[r], ref[r])
            assert p[r] == pytest.approx(lib.p_value, abs=1e-10)
            assert attain[0.05][r] == pytest.approx(binary_null_law(orig[r], ref[r]).attainable_size(0.05), abs=1e-10)
        if m == 1:  # McNemar's exact test is the sign test on the discordant pairs
            np.testing.assert_allclose(p, cal.sign_pvalues(cal.differences(orig, ref)), atol=1e-12)


def test_permutation_enumeration_matches_the_library_exactly():
    rng = np.random.default_rng(4)
    orig, ref = cal.simulate(rng, "skewed", 0.4, 1, 8, 6)  # 2^8 = 256 <= B: exact enumeration
    p = cal.permutation_mc(orig, ref, 999, rng)
    for r in range(6):
        assert p[r] == pytest.approx(paired_test("p_all", orig[r], ref[r], B=999).p_value, abs=1e-12)


def test_bootstrap_matches_the_library_in_law():
    """Both resampling paths (gathered indices; multinomial counts for few distinct values) agree with
    zcp.probe.stats.bootstrap_pvalue up to Monte Carlo noise."""
    rng = np.random.default_rng(5)
    for regime, n in (("binary", 400), ("skewed", 30)):
        orig, ref = cal.simulate(rng, regime, 0.5, 3, n, 4, effect=0.05 if regime == "binary" else 0.3)
        d = cal.differences(orig, ref)
        mine = cal.bootstrap_pvalues(d, 4000, rng)
        lib = np.array([bootstrap_pvalue(row, B=4000, seed=i) for i, row in enumerate(d)])
        np.testing.assert_allclose(mine, lib, atol=0.03)


def test_wilcoxon_matches_scipy_row_by_row():
    rng = np.random.default_rng(6)
    for n in (8, 20, 60):
        d = np.vstack([np.round(rng.normal(size=(10, n)) * 1.5) / 3, rng.normal(size=(5, n))])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = np.nan_to_num([sps.wilcoxon(row, alternative="greater").pvalue for row in d], nan=1.0)
        np.testing.assert_allclose(cal.wilcoxon_pvalues(d), ref, atol=1e-12)


def test_permutation_keeps_its_level_where_the_sign_test_fails():
    """High accuracy, m = 3 draws averaged per item: the sign test on d_i rejects most true nulls (an
    item at q = 0.9 is ahead of its mean far more often than behind), the permutation test does not."""
    rng = np.random.default_rng(7)
    for regime in ("binary", "skewed"):
        orig, ref = cal.simulate(rng, regime, 0.9, 3, 100, 300)
        pv, attain = cal.all_pvalues(cal.kind_of(regime), orig, ref, ("permutation", "sign"), 499, rng)
        perm, sign = cal.rejects(pv["permutation"], 0.05).mean(), cal.rejects(pv["sign"], 0.05).mean()
        assert perm <= 0.07, (regime, perm)
        assert sign >= 0.2, (regime, sign)  # four times the nominal level at least
        if attain is not None:  # the exact test's realised rate estimates its attainable size
            assert abs(perm - attain[0.05].mean()) < 0.035


def test_combined_verdict_keeps_its_level():
    rows = cal.joint_grid(cal.JointSettings(accuracy=(0.9,), m=(3,), n=(30,), tests=("permutation",),
                                            replicates=300, B=199),
                          cal.SimSpec(), (0.05,), 0, discrete_below=0.04, progress=False)
    comb = next(r for r in rows if r["metric"] == cal.COMBINED)
    assert comb["rate@0.05"] <= 0.07 and comb["replicates"] == 300


@pytest.mark.parametrize("dependence", ["identical", "shifted", "independent"])
def test_convention_simulation_is_a_joint_null_with_the_stated_dependence(dependence):
    """Under H0 the original is exchangeable with its versions in every convention (same mean), the full-CoT half
    of con is shared, and the conventions' p_all are nearly identical / correlated / independent given the item."""
    from zcp.validate.calibration.simulated import ConventionGridSettings, simulate_conventions

    rng = np.random.default_rng(11)
    data = simulate_conventions(rng, 0.5, 3, 200, 60, 2, dependence, ConventionGridSettings())
    for conv in data:
        for orig, ref in conv.values():
            assert abs(orig.mean() - ref.mean()) < 0.02
    a, b = (np.log(c["p_all"][1]) for c in data)  # references, (R, n, m)
    within = np.corrcoef((a - a.mean(axis=-1, keepdims=True)).ravel(), (b - b.mean(axis=-1, keepdims=True)).ravel())
    corr = within[0, 1]  # version-level dependence across the two conventions (the item level removed)
    assert {"identical": corr > 0.9, "shifted": 0.2 < corr < 0.8, "independent": abs(corr) < 0.05}[dependence]


def test_multi_convention_verdict_keeps_its_level_and_rejects_sometimes():
    """The Bonferroni verdict over C x 4 (convention, metric) tests on a small joint-null grid: its rejection rate
    stays within alpha plus the Monte Carlo error in every cell, and is not zero (a test that never rejects, or a
    grid that never runs a test, would pass the first check alone)."""
    from zcp.validate.calibration.simulated import ConventionGridSettings, convention_grid

    g = ConventionGridSettings(accuracy=(0.5,), m=(3,), n=(40,), conventions=(2, 4),
                               dependence=("identical", "independent"), replicates=400, B=199)
    rows = convention_grid(g, cal.SimSpec(), (0.05,), 0, progress=False)
    multi = [r for r in rows if r["metric"] == "multiconv"]
    assert len(multi) == 4 and {r["n_tests"] for r in multi} == {8, 16}
    mc_error = 3 * (0.05 * 0.95 / 400) ** 0.5
    assert all(r["rate@0.05"] <= 0.05 + mc_error for r in rows)
    assert sum(r["rate@0.05"] * r["replicates"] for r in multi) > 0


def _toy_records(draws_per_item):
    recs = []
    rng = np.random.default_rng(8)
    for i, m in enumerate(draws_per_item):
        oid = f"q{i}"
        base = {"split": "U", "original_id": oid}
        recs.append({**base, "variant": "original", "draw": 0, "correct": True, "consistent": True,
                     "p_first": 0.9, "p_all": 0.8})
        for j in range(m):
            recs.append({**base, "variant": "reference", "draw": j, "correct": bool(rng.random() < 0.5),
                         "consistent": bool(rng.random() < 0.5), "p_first": float(rng.random()),
                         "p_all": float(rng.random())})
    return recs


def test_real_null_construction():
    recs = _toy_records([4, 4, 1, 3])
    groups, metrics = cal.reference_draws(recs, ["acc", "p_all", "con"])
    assert metrics == ["acc", "p_all", "con"]
    items = groups["U"]
    assert {k: a.shape for k, a in items.items()} == {"q0": (4, 3), "q1": (4, 3), "q2": (1, 3), "q3": (3, 3)}
    usable = [items[k] for k in ("q0", "q1", "q3")]
    orig, refs, idx = cal.pseudo_null(usable, np.random.default_rng(0))
    assert orig.shape == (3, 3) and [r.shape[0] for r in refs] == [3, 3, 2]  # m - 1 references
    for o, r, a in zip(orig, refs, usable, strict=True):  # the pseudo-original is one of the item's draws,
        rows = {tuple(x) for x in a}  # and the references are the others
        assert tuple(o) in rows
        assert sorted(map(tuple, r)) == sorted(map(tuple, np.delete(a, [tuple(x) for x in a].index(tuple(o)), 0)))
    _, _, idx = cal.pseudo_null(usable, np.random.default_rng(0), n_items=2)
    assert len(idx) == 2
    with pytest.raises(ValueError, match=">= 2"):
        cal.pseudo_null([items["q2"]], np.random.default_rng(0))
    # a metric absent from the records is left out
    for r in recs:
        r.pop("consistent")
    assert cal.reference_draws(recs, ["acc", "con"])[1] == ["acc"]


def test_item_table_pairs_originals_with_their_draws():
    keys, X, Y = cal.item_table(_toy_records([2, 3]), ["acc", "p_all"])
    assert keys == ["U/q0", "U/q1"] and X.shape == (2, 2) and [y.shape for y in Y] == [(2, 2), (3, 2)]
    assert X[0].tolist() == [1.0, 0.8]


def _items_file(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_entry_point_end_to_end(tmp_path, monkeypatch):
    """hydra.compose of the real config with a tiny grid, (b) on toy records and (c) on 16 items probed
    through the real detection machinery with a fake backend (the HF backend has its own tests): every
    report file is written and (c)'s records are kept for the next run."""
    from configs import compose
    from omegaconf import open_dict

    def p_of(question: str) -> float:  # a fixed, question-dependent probability in (0.05, 0.95)
        return 0.05 + 0.9 * int(hashlib.sha256(question.encode()).hexdigest()[:6], 16) / 16**6

    fake = FakeBackend({}, p_of=p_of)

    records = tmp_path / "run" / "records.jsonl"
    records.parent.mkdir()
    _items_file(records, _toy_records([3] * 12))
    items, refs = [], []
    for i in range(16):
        a, b = 11 + i, 7 + 2 * i
        items.append({"id": f"w{i}", "question": f"Ann has {a} pens and buys {b} more. How many pens?",
                      "answer": str(a + b)})
        for j in range(2):
            a2 = a + 3 + j
            refs.append({"id": f"w{i}::ref{j}", "original_id": f"w{i}",
                         "question": f"Ann has {a2} pens and buys {b} more. How many pens?", "answer": str(a2 + b)})
    _items_file(tmp_path / "items.jsonl", items)
    _items_file(tmp_path / "ref.jsonl", refs)
    fake.memorised = {r["question"]: r["answer"] for r in (items + refs)[::3]}  # acc varies by version
    monkeypatch.setattr(zcp.backends.registry, "build_backend", lambda *a, **k: fake)
    monkeypatch.chdir(tmp_path)
    model_dir = tmp_path / "fake_model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    out = tmp_path / "cal"
    cfg = compose(
        "calibration",
        "logger=none", f"output_dir={out}", "run.progress=false", "data=jsonl", "data.name=toy",
        f"data.path={tmp_path / 'items.jsonl'}", f"data.reference_path={tmp_path / 'ref.jsonl'}",
        "simulation.accuracy=[0.5,0.9]", "simulation.m=[1,3]", "simulation.n=[10,25]",
        "simulation.replicates=60", "simulation.replicates_continuous=40", "simulation.B=99",
        "simulation.library_check=3",
        "joint.accuracy=[0.5]", "joint.m=[3]", "joint.n=[20]", "joint.replicates=40", "joint.B=99",
        "power.accuracy=[0.5]", "power.n=[20]", "power.replicates=30", "power.B=99",
        "power.binary_effects=[0,0.3]", "power.continuous_effects=[0,1]",
        "conventions.accuracy=[0.5]", "conventions.m=[3]", "conventions.n=[20]", "conventions.conventions=[2]",
        "conventions.dependence=[shifted]", "conventions.replicates=40", "conventions.B=99",
        f"real_null.records=[{records.parent}/*.jsonl]", "real_null.replicates=30", "real_null.B=99",
        "base_model.metrics=[acc,p_first,p_all]", "base_model.subsets=10", "base_model.subset_size=8",
        "base_model.B=99", f"base_model.records_root={tmp_path / 'rec'}",
        # (d) on 24 items of the reserved pool, the fake model playing a clean one
        "real_originals.base=null", "real_originals.m=2",
        "real_originals.sizes=[10]", "real_originals.subsets=20", "real_originals.null_pools=5",
        "real_originals.metrics=[acc,p_all]", "real_originals.B=99",
        f"real_originals.records_root={tmp_path / 'rec_d'}",
    )
    with open_dict(cfg):  # replace the study's models and pools (a dict override merges into the file's)
        cfg.real_originals.models = {"fake": str(model_dir)}
        cfg.real_originals.pools = {"wp": {"kind": "wordproblem_pool", "n": 24, "candidates": 4}}
    res = cal.run_calibration(cfg)
    for name in ("table.md", "summary.md", "summary.json", "type1.png", "power.png", "config.yaml"):
        assert (out / name).stat().st_size > 200, name
    parts = {r["part"] for r in res["rows"]}
    assert parts == {"a", "a-joint", "a-conv", "power", "b", "c", "d"}
    d_rows = [r for r in res["rows"] if r["part"] == "d"]
    assert {r["metric"] for r in d_rows} == {"acc", "p_all", "combined"} and all(r["n"] == 10 for r in d_rows)
    assert all(r["subsets"] == 20 and r["null_pools"] == 5 for r in d_rows)
    assert (out / "summary.md").read_text().startswith("## (d) Real originals")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["info"]["simulation"]["library_check_max_abs_diff"] < 1e-9
    assert summary["info"]["real_null"]["sources"][0]["library_check_max_abs_diff"] < 1e-9
    assert summary["info"]["skipped"] == {}
    assert summary["info"]["base_model"]["pool_items"] == 16
    b_rows = [r for r in res["rows"] if r["part"] == "b"]
    assert {r["m"] for r in b_rows} == {"2"} and {r["n"] for r in b_rows} == {12}
    c_rows = [r for r in res["rows"] if r["part"] == "c"]
    assert {r["metric"] for r in c_rows} == {"acc", "p_first", "p_all", "combined"}
    assert all(r["replicates"] == 10 and r["n"] == 8 for r in c_rows)
    assert fake.calls["score"] > 0
    md = (out / "summary.md").read_text()
    assert "Attainable size" in md and "(b) Real-score nulls" in md and "(c) Whole pool" in md
    # the records of (c) are kept for the next run (resumable, shared)
    assert list((tmp_path / "rec").glob("toy__*/records.jsonl"))


def test_multi_convention_part_d_end_to_end(tmp_path, monkeypatch):
    """real_originals.prefills=[probe,hash] through run_calibration on 24 items of the reserved pool with a fake
    clean model: records per convention (the probe line's in today's directory, reused by the default run), the
    full-CoT generation shared by the conventions, auto's reading, multiconv rows, and the probe line's rows equal
    to the default run's (prefills=[probe]) digit for digit."""
    from configs import compose
    from omegaconf import open_dict

    def p_of(question: str) -> float:
        return 0.05 + 0.9 * int(hashlib.sha256(question.encode()).hexdigest()[:6], 16) / 16**6

    fake = FakeBackend({}, p_of=p_of)
    monkeypatch.setattr(zcp.backends.registry, "build_backend", lambda *a, **k: fake)
    monkeypatch.chdir(tmp_path)
    model_dir = tmp_path / "fake_model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")

    def run(name, prefills, parts="[real_originals]", extra=()):
        cfg = compose(
            "calibration",
            "logger=none", f"output_dir={tmp_path / name}", "run.progress=false", f"parts={parts}",
            "real_originals.base=null", "real_originals.m=2", "real_originals.sizes=[10]",
            "real_originals.subsets=20", "real_originals.null_pools=4", "real_originals.metrics=[acc,con,p_all]",
            "real_originals.B=99", f"real_originals.records_root={tmp_path / 'rec'}",
            f"real_originals.prefills={prefills}", "real_originals.auto_read=6", "probe.auto.neutral_n=4",
            "conventions.accuracy=[0.5]", "conventions.m=[3]", "conventions.n=[20]", "conventions.conventions=[2]",
            "conventions.replicates=40", "conventions.B=99", *extra,
        )
        with open_dict(cfg):
            cfg.real_originals.models = {"fake": str(model_dir)}
            cfg.real_originals.pools = {"wp": {"kind": "wordproblem_pool", "n": 24, "candidates": 4}}
        return cal.run_calibration(cfg)

    res = run("multi", "[probe,hash]", "[real_originals,conventions]")
    d_rows = [r for r in res["rows"] if r["part"] == "d"]
    assert {(r["kind"], r.get("convention")) for r in d_rows} == {("zcp", "probe"), ("zcp", "hash"), ("multiconv", None)}
    multi = next(r for r in d_rows if r["kind"] == "multiconv" and r["metric"] == "combined")
    assert multi["n_tests"] == 6 and multi["subsets"] == 20 and multi["null_pools"] == 4
    dirs = sorted(p.name for p in (tmp_path / "rec").iterdir())
    assert len(dirs) == 2 and any("__conv-hash__" in d for d in dirs)
    info = res["info"]["real_originals"]
    assert info["scoring"]["fake/wp/full_cot"]["generated"] > 0  # con's full-CoT: generated once, then served
    assert info["auto_read"]["fake/wp"]["chosen"][0] == "probe" and "average_multiconv" in info
    assert {r["part"] for r in res["rows"]} == {"d", "a-conv"}
    md = (tmp_path / "multi" / "real_originals.md").read_text()
    assert "Multi-convention verdict" in md and "pre-fill `hash`" in md and "auto as read" in md
    assert "Multi-convention verdict on simulated nulls" in (tmp_path / "multi" / "summary.md").read_text()
    scored = fake.calls["score"]
    # the default: the probe line's records reused, its rows unchanged (tested= names the models whose rows run)
    single = run("single", "[probe]", extra=["real_originals.tested=[fake]"])
    assert fake.calls["score"] == scored
    strip = [{k: v for k, v in r.items() if k not in ("kind", "convention")} for r in d_rows
             if r.get("convention") == "probe"]
    assert strip == [{k: v for k, v in r.items() if k != "kind"} for r in single["rows"]]
    assert all("convention" not in r for r in single["rows"])


def test_prefills_are_checked_at_compose():
    from configs import compose

    from zcp.errors import ConfigError

    for key, bad in (("prefills", "[probe,hahs]"), ("prefills", "auto"), ("prefills", "[]"), ("tested", "[nope]")):
        cfg = compose("calibration", f"real_originals.{key}={bad}")
        with pytest.raises(ConfigError, match=rf"real_originals\.{key}"):
            zcp.config.validate(cfg, job="calibration")


def test_quick_preset_composes():
    from configs import compose

    cfg = compose("calibration", "experiment=calibration_quick")
    assert cfg.simulation.replicates == 200 and list(cfg.simulation.m) == [1, 3]
    assert cfg.data.missing_reference == "skip" and cfg.base_model.subset_size == 100
