"""Multi-convention probing (zcp.probe.multiconv): auto's reading, the run layout, the one full-CoT generation, the
one verdict over every (convention, metric), its level under a null, and the default run left unchanged."""

from __future__ import annotations

import filecmp
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conv_fakes import PROBE_LINE, ConventionBackend, toy_datasets

from zcp.core.io import read_jsonl
from zcp.errors import ConfigError
from zcp.probe.conventions import literal_name
from zcp.probe.detect import DetectSettings
from zcp.probe.multiconv import READ_RECORDS, detect_prefill, neutral_items, read_conventions
from zcp.probe.probe_config import AutoPrefillConfig
from zcp.probe.prompts import ProbeConfig
from zcp.probe.stats import combine, combine_conventions, paired_test

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "conventions"
SETTINGS = DetectSettings(seeds=[0, 1], bootstrap_samples=200, progress=False)
METRICS = ("acc", "con", "p_first", "p_all")


def _hash_leak(style_everywhere: bool = False) -> tuple[list, ConventionBackend]:
    """C memorised after `#### ` only; full-CoT outputs end with `#### N` on C's originals (everywhere when asked),
    with the probe's line elsewhere: the evader of the answer-format study."""
    datasets, memorised, truth = toy_datasets()
    styles = {it.question: "hash" for it in datasets[0].originals}
    backend = ConventionBackend(memorised, leak="#### ", truth=truth, cot_styles=styles,
                                cot_style="hash" if style_everywhere else "probe")
    return datasets, backend


def _verdicts(summary: dict) -> dict[str, dict]:
    return {v["split"]: v for v in summary["verdicts"] if v["variant"] == "original"}


def test_auto_picks_hash_for_a_model_ending_its_outputs_with_hash(tmp_path):
    datasets, fb = _hash_leak()
    s = detect_prefill(fb, datasets, ProbeConfig(metrics=METRICS), tmp_path, SETTINGS, prefill="auto",
                       auto=AutoPrefillConfig(neutral_n=6, always=[]))
    reading = s["auto"]
    assert reading["chosen"] == ["probe", "hash"]
    assert reading["sets"]["C"]["ends"]["hash"] == 12 and reading["sets"]["U"]["ends"]["probe"] == 12
    assert reading["sets"]["neutral"]["read"] == 6 and reading["sets"]["neutral"]["ends"]["probe"] == 6
    assert [c["name"] for c in s["conventions"]] == ["probe", "hash"]
    v = _verdicts(s)
    assert v["C"]["contaminated"] and v["C"]["driving_convention"] == "hash" and not v["U"]["contaminated"]
    probe_rows = [r for r in s["convention_results"] if r["convention"] == "probe" and r["split"] == "C"]
    assert all(r["c_cont"] < 0.65 for r in probe_rows)  # the probe's line alone misses this leak
    rows = list(read_jsonl(tmp_path / READ_RECORDS))
    assert len(rows) == 12 + 12 + 6 and {r["convention"] for r in rows if r["set"] == "C"} == {"hash"}
    table = (tmp_path / "table.md").read_text()
    assert "**auto**" in table and "`#### N`" in table and "contaminated" in table


def test_auto_reads_the_neutral_set_too_and_a_probe_style_model_gets_the_probe_line_alone(tmp_path):
    datasets, memorised, truth = toy_datasets()
    neutral = neutral_items(AutoPrefillConfig(neutral_n=8))
    assert len(neutral) == 8 and neutral == neutral_items(AutoPrefillConfig(neutral_n=8))  # a fixed seed
    fb = ConventionBackend(memorised, leak=PROBE_LINE, truth=truth,
                           cot_styles={it.question: "sentence" for it in neutral})
    reading, _ = read_conventions(fb, datasets, ProbeConfig(), AutoPrefillConfig(neutral_n=8, always=[]), SETTINGS)
    assert reading["chosen"] == ["probe", "sentence"] and "neutral" in reading["why"]["sentence"]
    fb = ConventionBackend(memorised, leak=PROBE_LINE, truth=truth)
    s = detect_prefill(fb, datasets, ProbeConfig(metrics=("acc", "p_all")), tmp_path, SETTINGS, prefill="auto",
                       auto=AutoPrefillConfig(neutral_n=4, min_share=0.5, always=[]))
    assert s["auto"]["chosen"] == ["probe"] and _verdicts(s)["C"]["contaminated"]
    assert (tmp_path / "conv-probe" / "records.jsonl").exists()


def test_auto_always_probes_a_leak_the_models_outputs_never_show(tmp_path):
    """The answer-format study's `#### N` leak on the shipped model: every full-CoT output ends on the probe's line,
    so the reading alone probes the probe's line only and misses it; probe.auto.always (default: hash, sentence,
    boxed) probes the common conventions whatever the reading finds."""
    datasets, memorised, truth = toy_datasets()
    fb = ConventionBackend(memorised, leak="#### ", truth=truth)  # knows C after `#### `, writes the probe's line
    alone = detect_prefill(fb, datasets, ProbeConfig(metrics=("acc", "p_all")), tmp_path / "alone", SETTINGS,
                           prefill="auto", auto=AutoPrefillConfig(neutral_n=4, always=[]))
    assert alone["auto"]["chosen"] == ["probe"] and not _verdicts(alone)["C"]["contaminated"]
    s = detect_prefill(fb, datasets, ProbeConfig(metrics=("acc", "p_all")), tmp_path / "always", SETTINGS,
                       prefill="auto", auto=AutoPrefillConfig(neutral_n=4))
    assert s["auto"]["chosen"] == ["probe", "hash", "sentence", "boxed"]
    assert s["auto"]["why"]["hash"] == "probe.auto.always"
    v = _verdicts(s)
    assert v["C"]["contaminated"] and v["C"]["driving_convention"] == "hash" and not v["U"]["contaminated"]
    lit = AutoPrefillConfig(neutral_n=0, always=["Answer: "])
    reading, _ = read_conventions(fb, datasets, ProbeConfig(metrics=("p_all",)), lit, SETTINGS)
    assert reading["chosen"] == ["probe", literal_name("Answer: ")]


def test_listed_conventions_layout_records_union_and_one_full_cot_generation(tmp_path):
    datasets, fb = _hash_leak()
    s = detect_prefill(fb, datasets, ProbeConfig(metrics=METRICS), tmp_path, SETTINGS,
                       prefill=["probe", "hash", "sentence"])
    units = sum(len(ds.work()) for ds in datasets)
    for name in ("probe", "hash", "sentence"):
        recs = list(read_jsonl(tmp_path / f"conv-{name}" / "records.jsonl"))
        assert len(recs) == units and {r["convention"] for r in recs} == {name}
        assert json.loads((tmp_path / f"conv-{name}" / "summary.json").read_text())["convention"]["name"] == name
    union = list(read_jsonl(tmp_path / "records.jsonl"))
    assert len(union) == 3 * units
    meta = json.loads((tmp_path / "run_meta.json").read_text())  # the run dir reads as a finished detection run:
    assert meta["n_units"] == units == len({(r["split"], r["variant"], r["original_id"], r["draw"]) for r in union})
    assert meta["conventions"] == ["probe", "hash", "sentence"] and (tmp_path / "summary.json").exists()
    # full-CoT outputs: one generation per distinct question, whatever the number of conventions
    questions = {it.question for ds in datasets for _, it in ds.work()}
    assert fb.calls["full_cot"] == len(questions)
    assert s["full_cot_generation"]["reused"] == 2 * units
    # con reads `#### N` full-CoT outputs under every convention (the table's stated answer)
    assert all(not r["cot_malformed"] for r in union)


def test_the_verdict_is_bonferroni_over_every_convention_and_metric(tmp_path):
    datasets, fb = _hash_leak()
    s = detect_prefill(fb, datasets, ProbeConfig(metrics=METRICS), tmp_path, SETTINGS, prefill=["probe", "hash"])
    for v in s["verdicts"]:
        rows = [r for r in s["convention_results"] if (r["split"], r["variant"]) == (v["split"], v["variant"])]
        assert len(rows) == 2 * len(METRICS)
        ps = [r["p_value"] for r in rows if not r.get("void")]  # a VOID row is left out (zcp.probe.void)
        assert v["n_tests"] == len(ps) >= 1
        assert v["p_value"] == pytest.approx(min(1.0, len(ps) * min(ps)))
        per_metric = {r["metric"]: r["p_value"] for r in s["results"]
                      if (r["split"], r["variant"]) == (v["split"], v["variant"]) and not r.get("void")}
        if len(ps) == len(rows):  # no VOID row: the per-metric rows combine to the verdict (K pairs either way)
            assert combine(per_metric)["p_value"] == pytest.approx(v["p_value"])
    one = {"acc": 0.01, "p_all": 0.2}
    assert combine_conventions({"probe": one}) == combine(one)  # one convention: today's verdict exactly


def test_a_single_other_convention_is_a_plain_run_with_its_prefill(tmp_path):
    datasets, fb = _hash_leak()
    s = detect_prefill(fb, datasets, ProbeConfig(metrics=("acc", "p_all")), tmp_path, SETTINGS, prefill="hash")
    assert s["convention"]["prefill"] == "#### " and _verdicts(s)["C"]["contaminated"]
    assert not _verdicts(s)["U"]["contaminated"]
    recs = list(read_jsonl(tmp_path / "records.jsonl"))
    assert {r["convention"] for r in recs} == {"hash"} and not (tmp_path / "conv-hash").exists()
    assert {r["answer_suffix"] for r in recs} == {"\n"}


def test_the_single_default_is_todays_run_byte_for_byte(tmp_path):
    """Against the same run made with the code before multi-convention probing (tests/fixtures/conventions)."""
    sys.path.insert(0, str(FIXTURE))
    try:
        import make_default_run
    finally:
        sys.path.pop(0)
    datasets, memorised, truth = toy_datasets()
    fb = ConventionBackend(memorised, leak=PROBE_LINE, truth=truth, noisy=True)
    detect_prefill(fb, datasets, ProbeConfig(), tmp_path / "a", SETTINGS, prefill="probe")
    make_default_run.default_run(tmp_path / "b")
    for name in ("records.jsonl", "run_meta.json", "table.md"):
        assert filecmp.cmp(tmp_path / "a" / name, FIXTURE / "default_run" / name, shallow=False), name
        assert filecmp.cmp(tmp_path / "b" / name, FIXTURE / "default_run" / name, shallow=False), name
    # summary.json: the same, key for key and in order, but for the cost plan (timings of this run, added since)
    want = json.loads((FIXTURE / "default_run" / "summary.json").read_text())
    for run in ("a", "b"):
        got = json.loads((tmp_path / run / "summary.json").read_text())
        assert got.pop("cost_plan")["units"] == 96
        assert list(got.items()) == list(want.items()), run


def test_the_combined_verdicts_level_under_a_null_of_dependent_conventions():
    """Simulated nulls: per item a latent level shared by every convention (the tests are dependent), original and
    references exchangeable within each item; acc (exact test) and p_all (Monte Carlo) under 4 conventions, 8 tests,
    one verdict each replication. Its rejection rate stays at or below alpha within Monte Carlo error."""
    rng = np.random.default_rng(7)
    reps, n, m, alpha = 300, 20, 3, 0.05
    rejected = 0
    for rep in range(reps):
        level = rng.normal(0.0, 1.5, size=(n, 1))
        table = {}
        for c in range(4):
            shared = level + rng.normal(0.0, 0.3, size=(n, 1))  # the convention's own shift of the item
            z = shared + rng.normal(0.0, 1.0, size=(n, m + 1))
            acc = (rng.random((n, m + 1)) < 1.0 / (1.0 + np.exp(-z))).astype(float)
            p_all = 1.0 / (1.0 + np.exp(-z))
            table[f"c{c}"] = {
                "acc": paired_test("acc", acc[:, :1], acc[:, 1:]).p_value,
                "p_all": paired_test("p_all", p_all[:, :1], p_all[:, 1:], B=199, seed=rep * 10 + c).p_value,
            }
        rejected += combine_conventions(table, alpha)["contaminated"]
    rate = rejected / reps
    assert rate <= alpha + 2.5 * np.sqrt(alpha * (1 - alpha) / reps), rate


@pytest.mark.parametrize("reps", [5, pytest.param(20, marks=pytest.mark.slow)])
def test_the_level_end_to_end_with_a_backend_exchangeable_across_conventions(tmp_path, reps):
    """A fake model that knows nothing: scores and answers i.i.d. per (question, pre-fill), so originals and
    references are exchangeable under every convention; datasets through detect_prefill with three conventions
    (20 of them in the slow run, ~2 min; 5 by default)."""
    rejected = 0
    for rep in range(reps):
        datasets, _, truth = toy_datasets(n=10, m=2)
        fb = ConventionBackend({}, truth=truth, noisy=True, seed=rep)
        s = detect_prefill(fb, datasets[:1], ProbeConfig(metrics=("acc", "p_all")), tmp_path / str(rep),
                           DetectSettings(seeds=[0], bootstrap_samples=99, progress=False),
                           prefill=["probe", "hash", "sentence"])
        rejected += sum(v["contaminated"] for v in s["verdicts"])
    assert rejected <= (4 if reps == 20 else 2)  # P(Bin(20, .05) > 4) < .003, P(Bin(5, .05) > 2) < .002 at level .05


def test_zcp_detectors_read_a_multi_convention_runs_records_per_convention(tmp_path):
    from zcp.validate.detectors import get_detector
    from zcp.validate.detectors.base import DetectorContext
    from zcp.validate.detectors.zcp_gap import zcp_item_scores

    datasets, fb = _hash_leak()
    detect_prefill(fb, datasets, ProbeConfig(metrics=("acc", "p_all")), tmp_path, SETTINGS, prefill=["probe", "hash"])
    union = list(read_jsonl(tmp_path / "records.jsonl"))
    per = {c: zcp_item_scores([r for r in union if r["convention"] == c], "p_all") for c in ("probe", "hash")}
    scores = zcp_item_scores(union, "p_all")
    assert scores == {i: max(per["probe"][i], per["hash"][i]) for i in per["probe"]}  # the largest gap per item
    c_items = datasets[0].originals
    assert all(scores[it.id] == pytest.approx(0.7) for it in c_items)  # 0.9 after `#### ` against 0.2
    det = get_detector("zcp_p_all")
    ctx = DetectorContext(detection_records=union, bootstrap_samples=200)
    rows = det.score_items(fb, c_items, ctx)
    assert {r["convention"] for r in rows} == {"hash"}
    decision = det.benchmark_decision(rows, ctx)
    assert decision["decision"] and decision["convention"] == "hash" and "Bonferroni" in decision["rule"]


def test_the_sample_size_study_refuses_records_of_several_conventions(tmp_path):
    from zcp.validate.ablations import detection_records_problem

    datasets, fb = _hash_leak()
    detect_prefill(fb, datasets, ProbeConfig(metrics=("p_all",)), tmp_path, SETTINGS, prefill=["probe", "hash"])
    problem = detection_records_problem(tmp_path / "records.jsonl")
    assert problem is not None and "2 answer conventions (hash, probe)" in problem and "conv-<name>" in problem
    assert detection_records_problem(tmp_path / "conv-hash" / "records.jsonl") is None


def test_auto_primary_is_read_from_the_neutral_set_only(tmp_path):
    """C's originals end on `#### N` (a leak may change how a model ends benchmark items), the neutral set on
    `The answer is N.`: the primary is `sentence`, whatever the benchmark shows; its own verdict is reported."""
    datasets, memorised, truth = toy_datasets()
    neutral = neutral_items(AutoPrefillConfig(neutral_n=6))
    styles = {**{it.question: "hash" for it in datasets[0].originals}, **{it.question: "sentence" for it in neutral}}
    fb = ConventionBackend(memorised, leak="#### ", truth=truth, cot_styles=styles)
    reading, _ = read_conventions(fb, datasets, ProbeConfig(), AutoPrefillConfig(neutral_n=6, always=[]), SETTINGS)
    assert reading["primary"] == "sentence" and "6 of 6 neutral" in reading["primary_why"]
    assert reading["sets"]["C"]["ends"]["hash"] == 12 and "sentence" in reading["chosen"]
    s = detect_prefill(fb, datasets, ProbeConfig(metrics=("acc", "p_all")), tmp_path, SETTINGS, prefill="auto",
                       auto=AutoPrefillConfig(neutral_n=6, always=[]))
    v = _verdicts(s)["C"]
    assert v["primary"]["convention"] == "sentence" and "p_all" in v["primary"]["metrics"]
    assert "primary `The answer is N.`" in (tmp_path / "table.md").read_text()
    # no neutral set: the probe's line
    reading, _ = read_conventions(fb, datasets, ProbeConfig(), AutoPrefillConfig(neutral_n=0, always=[]), SETTINGS)
    assert reading["primary"] == "probe" and not reading["warnings"]


def test_auto_warns_when_few_outputs_fit_and_names_the_budget_that_fits():
    datasets, memorised, truth = toy_datasets()

    class Counting(ConventionBackend):
        context_length = 600

        def count_tokens(self, prompts, texts=()):  # a token per character of the question
            return [len(p.user) for p in prompts], [len(t) for t in texts]

    fb = Counting(memorised, leak=PROBE_LINE, truth=truth)
    reading, _ = read_conventions(fb, datasets, ProbeConfig(full_cot_max_tokens=590), AutoPrefillConfig(neutral_n=4),
                                  SETTINGS)
    assert reading["sets"]["C"]["read"] == 0 and reading["warnings"]
    longest = max(len(it.question) for it in datasets[0].originals)
    assert f"probe.full_cot_max_tokens={600 - longest}" in reading["warnings"][0]


def test_primary_declared_by_hand_for_a_listed_run(tmp_path):
    datasets, fb = _hash_leak()
    s = detect_prefill(fb, datasets, ProbeConfig(metrics=("acc", "p_all")), tmp_path, SETTINGS,
                       prefill=["probe", "hash"], primary="hash")
    v = _verdicts(s)["C"]
    assert v["primary"]["convention"] == "hash" and v["primary"]["contaminated"] and v["contaminated"]
    assert not _verdicts(s)["U"]["primary"]["contaminated"]
    with pytest.raises(ConfigError, match=r"probe\.primary"):
        detect_prefill(fb, datasets, ProbeConfig(metrics=("acc", "p_all")), tmp_path / "x", SETTINGS,
                       prefill=["probe", "hash"], primary="sentence")


def test_primary_key_is_checked_at_compose_and_its_default_keeps_the_run_directory():
    from configs import compose

    from zcp.config import validate
    from zcp.probe.multiconv import without_default_prefill

    base = ("detect", "data.path=x", "data.reference_path=y")
    assert validate(compose(*base, "probe.prefill=[probe,hash]", "probe.primary=hash"))["probe"].primary == "hash"
    with pytest.raises(ConfigError, match=r"probe\.primary"):
        validate(compose(*base, "probe.prefill=[probe,hash]", "probe.primary=sentence"))
    plain = without_default_prefill(compose(*base))
    assert not {"primary", "answer_space", "prefill", "auto"} & set(plain.probe)
    assert without_default_prefill(compose(*base, "probe.answer_space=both")).probe.answer_space == "both"
