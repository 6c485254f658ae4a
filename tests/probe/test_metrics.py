"""The probe's metric table (zcp.probe.metrics): the built-in four, and metrics added from outside the package.

A toy metric registered here, in the test file (no zcp/ file touched), runs through a whole detection on the
fake backend: it is validated by the config, probed, tested (Monte Carlo for a continuous metric, exact for a
binary one), written to summary.json and table.md under its label, and gets its zcp_<name> detector.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from fakes import FakeBackend

from zcp.core.items import Item
from zcp.errors import ConfigError
from zcp.probe import stats
from zcp.probe.detect import DetectDataset, DetectSettings, check_backend_metrics, detect
from zcp.probe.metrics import (
    BUILTIN_METRICS,
    ProbeMetric,
    get_metric,
    metric_label,
    metric_names,
    metric_value,
    register_metric,
    unregister_metric,
)
from zcp.probe.probe_config import ProbeGroupConfig
from zcp.probe.prompts import ProbeConfig, answer_score_requests
from zcp.validate.baselines_config import DEFAULT_DETECTORS
from zcp.validate.calibration import kind_of
from zcp.validate.detectors import available_detectors, get_detector, spec_of
from zcp.validate.detectors.base import DetectorContext
from zcp.validate.study_config import AblationConfig, ReportConfig


def p_first_sq(rec: dict) -> float:
    """The toy metric: p_first squared."""
    return rec["p_first"] ** 2


def p_last_pass(backend, items, prompts, recs, cfg, prefill) -> None:
    """A toy metric's own probe pass: the probability of the last scored token (the answer's end)."""
    scores = backend.score(answer_score_requests(prompts, [it.answer for it in items], cfg))
    for rec, sc in zip(recs, scores, strict=True):
        rec["p_last"] = math.exp(sc.token_logprobs[-1])


TOYS = {
    "p_first_sq": ProbeMetric("p_first_sq", "p_first", "continuous", "P_first²", needs_logprobs=True,
                              compute=p_first_sq),
    "cot_right": ProbeMetric("cot_right", "cot_correct", "binary", "CoT acc", needs_full_cot=True),
    "p_last": ProbeMetric("p_last", "p_last", "continuous", "P_last", needs_logprobs=True, probe=p_last_pass),
}


@pytest.fixture
def toys():
    """Register the toy metrics for one test, then remove them from the table again."""
    for m in TOYS.values():
        register_metric(m)
    yield TOYS
    for name in TOYS:
        unregister_metric(name)


def p_of(question: str) -> float:
    """Per-question token probability of the fake backend: originals (0.6-0.7) above their references (0.2-0.4)."""
    k = int(question.split(":")[0][1:])
    return 0.2 + 0.02 * (k % 10) if " ref " in question else 0.6 + 0.01 * (k % 10)


def _dataset(n: int = 12, m: int = 3):
    items = [Item(f"i{k}", f"Q{k}: what is {k}+{k}?", str(2 * k)) for k in range(n)]
    ref = {it.id: [Item(f"{it.id}::ref{j}", f"Q{k}: ref what is {k + j + 1} plus {k}?", str(2 * k + j + 1),
                        metadata={"original_id": it.id}) for j in range(m)] for k, it in enumerate(items)}
    mem = {it.question: it.answer for it in items}
    truth = {it.question: it.answer for it in items}
    return DetectDataset("D", items, ref), mem, truth


def test_toy_metric_from_outside_the_package_appears_in_summary_table_and_tests(toys, tmp_path):
    ds, mem, truth = _dataset()
    probe = ProbeConfig(metrics=("acc", "p_first_sq"))
    s = detect(FakeBackend(mem, truth, p_of=p_of), [ds], probe, tmp_path,
               DetectSettings(bootstrap_samples=500, progress=False))
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["metrics"] == ["acc", "p_first_sq"]
    (res,) = [r for r in on_disk["results"] if r["metric"] == "p_first_sq"]
    recs = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    orig = [r["p_first"] ** 2 for r in recs if r["variant"] == "original"]
    refs = [r["p_first"] ** 2 for r in recs if r["variant"] == "reference"]
    assert res["s"] == pytest.approx(np.mean(orig)) and res["s_ref"] == pytest.approx(np.mean(refs))
    assert res["test"] == "permutation_mc_B500" and res["p_value"] == pytest.approx(1 / 501)  # continuous: Monte Carlo
    assert res["c_cont"] == pytest.approx(stats.c_cont(1 / 501)) and res["n"] == 12 and res["m"] == 3
    assert s["verdicts"][0]["metrics"] == ["acc", "p_first_sq"]
    table = (tmp_path / "table.md").read_text()
    assert "| P_first² S_ref | P_first² S | P_first² C_cont |" in table
    # its zcp_<name> detector, generated from the table: the per-item gap of p_first squared
    assert "zcp_p_first_sq" in available_detectors() and spec_of("zcp_p_first_sq").label == "ZCP gap (P_first²)"
    det = get_detector("zcp_p_first_sq")
    ctx = DetectorContext(detection_records=recs, bootstrap_samples=500)
    assert det.skip_reason(ctx, ds.originals) is None
    scored = {r["id"]: r["score"] for r in det.score_items(None, ds.originals, ctx)}
    x = {r["original_id"]: r["p_first"] ** 2 for r in recs if r["variant"] == "original"}
    y = {oid: np.mean([r["p_first"] ** 2 for r in recs if r["variant"] == "reference" and r["original_id"] == oid])
         for oid in x}
    assert scored == pytest.approx({oid: x[oid] - y[oid] for oid in x})


def test_toy_metrics_are_known_to_the_config_checks_and_the_statistics(toys):
    ProbeGroupConfig(metrics=["p_first_sq"], zero_cot_max_tokens=0, full_cot_max_tokens=0)  # needs no generation
    with pytest.raises(ConfigError, match=r"probe.full_cot_max_tokens=0: must be >= 1 with cot_right in probe"):
        ProbeGroupConfig(metrics=["acc", "cot_right"], full_cot_max_tokens=0)
    with pytest.raises(ConfigError, match=r"probe.metrics=\['bogus'\].*'p_first_sq', 'cot_right', 'p_last'"):
        ProbeGroupConfig(metrics=["bogus"])
    assert ReportConfig(metrics=["p_first_sq"]).metrics == ["p_first_sq"]
    assert AblationConfig(metrics=["acc", "p_first_sq"]).metrics == ["acc", "p_first_sq"]
    with pytest.raises(ConfigError, match=r"ablation\.metrics"):  # the truncated-CoT probe has no full-CoT pass
        AblationConfig(metrics=["cot_right"])
    assert [stats.metric_kind(m) for m in ("p_first_sq", "cot_right")] == ["continuous", "binary"]
    assert [kind_of(m) for m in ("p_first_sq", "cot_right")] == ["continuous", "binary"]

    class API(FakeBackend):
        supports_prefill = False

    with pytest.raises(ConfigError, match=r"\['p_first', 'p_first_sq'\] unavailable.*only acc/con/cot_right"):
        check_backend_metrics(API({}), ProbeConfig(metrics=("acc", "p_first", "p_first_sq")))


def test_binary_toy_metric_gets_the_exact_test_and_its_own_pass_runs(toys, tmp_path):
    ds, mem, truth = _dataset()
    probe = ProbeConfig(metrics=("cot_right", "p_last"))
    fb = FakeBackend(mem, truth, p_of=p_of)
    s = detect(fb, [ds], probe, tmp_path, DetectSettings(bootstrap_samples=300, progress=False))
    by = {r["metric"]: r for r in s["results"]}
    assert by["cot_right"]["test"] == "exact_permutation"  # binary: the exact within-item test
    assert by["cot_right"]["s"] == 1.0 and by["cot_right"]["s_ref"] == 0.0  # the fake's full-CoT knows originals only
    assert fb.calls["generate"] >= 1  # cot_right needs the full-CoT generation
    recs = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    question = {it.id: it.question for _, it in ds.work()}
    assert all(r["p_last"] == pytest.approx(p_of(question[r["id"]])) for r in recs)  # its own pass filled its field
    assert by["p_last"]["test"] == "permutation_mc_B300" and by["p_last"]["s"] > by["p_last"]["s_ref"]
    assert "prediction" not in recs[0]  # no metric needs the zero-CoT answer: that pass did not run


def test_builtin_table():
    assert BUILTIN_METRICS == ("acc", "con", "p_first", "p_all") == metric_names()[:4]
    got = {m: (get_metric(m).field, get_metric(m).kind, metric_label(m)) for m in BUILTIN_METRICS}
    assert got == {"acc": ("correct", "binary", "Acc"), "con": ("consistent", "binary", "Con"),
                   "p_first": ("p_first", "continuous", "P_first"), "p_all": ("p_all", "continuous", "P_all")}
    assert [m for m in BUILTIN_METRICS if get_metric(m).needs_logprobs] == ["p_first", "p_all"]
    assert [m for m in BUILTIN_METRICS if get_metric(m).needs_generation] == ["acc", "con"]
    assert [m for m in BUILTIN_METRICS if get_metric(m).needs_full_cot] == ["con"]
    assert metric_value({"correct": True, "consistent": False}, "acc") == 1.0
    assert metric_value({"correct": True, "consistent": False}, "con") == 0.0
    assert metric_label("combined") == "combined"  # not a metric: shown as it is
    assert stats.metric_kind("rouge_l") == "continuous"  # a detector's score, not a registered metric
    assert [d for d in DEFAULT_DETECTORS if d.startswith("zcp_")] == [f"zcp_{m}" for m in BUILTIN_METRICS]
    assert ProbeConfig().metrics == BUILTIN_METRICS == tuple(ProbeGroupConfig().metrics)


def test_registry_refuses_what_would_be_ambiguous():
    with pytest.raises(ValueError, match="already registered"):
        register_metric(ProbeMetric("acc", "correct", "continuous", "Acc"), replace=True)  # built-ins stay
    with pytest.raises(ValueError, match="built in"):
        unregister_metric("p_all")
    with pytest.raises(ValueError, match="kind must be one of"):
        ProbeMetric("x", "x", "ordinal", "X")
    with pytest.raises(ValueError, match="identifier"):
        ProbeMetric("p first", "p_first", "continuous", "P")
    with pytest.raises(KeyError, match=r"unknown probe metric 'nope'.*acc, con, p_first, p_all"):
        get_metric("nope")
    with pytest.raises(ValueError, match=r"unknown metric\(s\) \['nope'\]"):
        ProbeConfig(metrics=("acc", "nope"))
    toy = ProbeMetric("toy_once", "p_all", "continuous", "Toy")
    try:
        assert register_metric(toy) is toy and register_metric(toy) is toy  # the same spec again: a no-op
        with pytest.raises(ValueError, match="replace=True"):
            register_metric(ProbeMetric("toy_once", "p_first", "continuous", "Toy"))
        register_metric(ProbeMetric("toy_once", "p_first", "continuous", "Toy 2"), replace=True)
        assert get_metric("toy_once").field == "p_first" and spec_of("zcp_toy_once").label == "ZCP gap (Toy 2)"
    finally:
        unregister_metric("toy_once")
    assert "toy_once" not in metric_names()
