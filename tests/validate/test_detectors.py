"""Baseline detectors: registry, metrics, decision rules, zcp_item_scores, the job's resume and config."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from configs import compose
from fakes import FakeBackend
from scipy.stats import mannwhitneyu

from zcp.backends.base import ScoreRequest, ScoreResult
from zcp.core.items import Item
from zcp.errors import ConfigError
from zcp.validate.baselines import FileData, JobInputs, baselines, check_config
from zcp.validate.detectors import available_detectors, get_detector, spec_of
from zcp.validate.detectors.base import (
    NO_REFERENCE_RULE,
    Detector,
    DetectorContext,
    DetectorSpec,
    auroc,
    reference_set_decision,
    register_detector,
    tpr_at_fpr,
)
from zcp.validate.detectors.dpcc import dpcc_rule, rmia
from zcp.validate.detectors.likelihood import lowest_k_mean, minkpp_values
from zcp.validate.detectors.reconstruction import split_question
from zcp.validate.detectors.zcp_gap import zcp_item_scores

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------ registry
def test_unknown_detector_lists_the_available_ones():
    with pytest.raises(KeyError) as e:
        get_detector("perplexity_typo")
    for name in ("ppl", "zlib", "mink20", "minkpp5", "ref", "dpcc", "recon", "guided", "zcp_p_all"):
        assert name in str(e.value)
        assert name in available_detectors()


def test_specs_carry_labels_kinds_and_needs():
    assert spec_of("mink30").label == "Min-30% Prob" and get_detector("mink30").k == 30
    assert spec_of("ref").needs == frozenset({"reference_model"})
    assert spec_of("guided").needs == frozenset({"metadata", "generation"})
    assert spec_of("zcp_acc").needs == frozenset({"detection_records"}) and spec_of("zcp_acc").kind == "records"
    assert spec_of("dpcc").kind == "rule" and spec_of("ppl").kind == "score"
    with pytest.raises(ValueError, match="needs"):
        DetectorSpec("x", "X", "score", frozenset({"gpu"}))
    with pytest.raises(ValueError, match="n_rewrites"):
        get_detector("dpcc", n_rewrites=0)
    with pytest.raises(ValueError, match="unexpected keyword"):
        get_detector("ppl", k=3)


@register_detector(DetectorSpec("test_length", "Question length", "score", frozenset(), "test"))
class _Length(Detector):
    """A detector defined in a test: score = minus the question's length."""

    def score_items(self, backend, items: Sequence[Item], ctx: DetectorContext) -> list[dict]:
        return [{"id": it.id, "score": -float(len(it.question))} for it in items]


def test_a_detector_defined_in_a_test_registers_and_runs(tmp_path):
    assert "test_length" in available_detectors()
    short = [Item(f"s{i}", "x" * (5 + i), "1") for i in range(5)]
    long = [Item(f"l{i}", "y" * (50 + i), "1") for i in range(5)]
    inputs = JobInputs({"data": FileData("data", "C", short), "u": FileData("u", "U", long)}, "m", None, None, None, "t")
    s = baselines(FakeBackend({}), [get_detector("test_length")], inputs, tmp_path, DetectorContext(), "fp")
    e = s["detectors"]["test_length"]
    assert e["label"] == "Question length" and e["auroc"] == 1.0 and e["tpr_at_5fpr"] == 1.0
    assert e["files"]["data"]["decision"] is None and e["files"]["data"]["rule"] == NO_REFERENCE_RULE
    assert "Question length" in (tmp_path / "baselines.md").read_text()


# ------------------------------------------------------------------------------------------ metrics
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auroc_is_the_mann_whitney_u_statistic(seed):
    rng = np.random.default_rng(seed)
    pos = np.round(rng.normal(0.5, 1, 40), 1)  # rounding makes ties
    neg = np.round(rng.normal(0, 1, 55), 1)
    u = mannwhitneyu(pos, neg, alternative="greater").statistic
    assert auroc(pos, neg) == pytest.approx(u / (40 * 55))
    assert auroc([1, 1], [1, 1]) == 0.5 and auroc([2], [1]) == 1.0 and auroc([], [1]) is None


def test_tpr_at_5_percent_fpr():
    neg = list(range(20))  # one clean item above any threshold t > 18 (1/20 = 5%)
    pos = [18.5, 19.5, 30, 40, 5]
    # thresholds with FPR <= 0.05: t > 18 -> TPR = 4/5 (18.5, 19.5, 30, 40)
    assert tpr_at_fpr(pos, neg) == pytest.approx(0.8)
    assert tpr_at_fpr(pos, neg, max_fpr=0.0) == pytest.approx(0.6)  # t > 19 only
    assert tpr_at_fpr([0.0], [1.0]) == 0.0 and tpr_at_fpr([], [1]) is None
    rng = np.random.default_rng(3)
    a, b = rng.normal(1, 1, 100), rng.normal(0, 1, 100)
    brute = max(np.mean(a >= t) for t in np.concatenate([a, b]) if np.mean(b >= t) <= 0.05)
    assert tpr_at_fpr(a, b) == pytest.approx(brute)


def test_zlib_ratio_is_mean_log_likelihood_over_compressed_length():
    import zlib

    text = "Ann has 5 pens and 5 more pens."
    res = ScoreResult((-1.0, -2.0, -3.0))
    assert get_detector("zlib")._score(res, text) == pytest.approx(-2.0 / len(zlib.compress(text.encode())))


def test_min_k_and_min_k_plus_plus():
    assert lowest_k_mean([-1, -5, -3, -2, -4, -6, -7, -8, -9, -10], 20) == pytest.approx(-9.5)
    assert lowest_k_mean([-1.0, -2.0], 5) == -2.0  # at least one token
    res = ScoreResult((-1.0, -3.0), token_means=(-2.0, -1.0), token_stds=(0.5, 2.0))
    assert minkpp_values(res).tolist() == pytest.approx([2.0, -1.0])
    with pytest.raises(ValueError, match="distribution stats"):
        minkpp_values(ScoreResult((-1.0,)))


# ------------------------------------------------------------------------------------------ rules
def test_dpcc_rmia_and_rule_on_hand_made_losses():
    assert rmia(2.0, [1.0, 3.0, 4.0]) == pytest.approx(1 / 3)  # the original's loss is larger than 1 of 3
    assert rmia(0.5, [1.0, 3.0, 4.0]) == 0.0  # memorised: lower than all its rewrites
    with pytest.raises(ValueError):
        rmia(1.0, [])
    # 9 of 10 items with RMIA < 0.1: 0.9 > 0.85 -> contaminated; 8 of 10 -> not
    assert dpcc_rule([0.0] * 9 + [0.5]) == {**dpcc_rule([0.0] * 9 + [0.5]), "statistic": 0.9, "decision": True}
    assert dpcc_rule([0.0] * 8 + [0.5, 0.1])["decision"] is False  # RMIA = 0.1 is not below 0.1
    det = get_detector("dpcc")
    recs = [{"id": str(i), "variant": "original", "rmia": r, "score": 1 - r} for i, r in enumerate([0.0] * 9 + [1.0])]
    assert det.benchmark_decision(recs, DetectorContext())["decision"] is True


def test_reference_set_decision_is_the_within_item_test():
    ctx = DetectorContext(bootstrap_samples=2000)
    recs = []
    for i in range(12):
        recs.append({"id": f"i{i}", "original_id": f"i{i}", "variant": "original", "score": 1.0 + 0.01 * i})
        recs += [{"id": f"i{i}r{j}", "original_id": f"i{i}", "variant": "reference", "score": 0.1 * j} for j in range(3)]
    up = reference_set_decision(recs, ctx)
    assert up["decision"] is True and up["p_value"] < 0.01 and up["statistic"] == pytest.approx(0.955, abs=1e-9)
    flipped = [{**r, "score": -r["score"]} for r in recs]
    assert reference_set_decision(flipped, ctx)["decision"] is False
    none = reference_set_decision([r for r in recs if r["variant"] == "original"], ctx)
    assert none["decision"] is None and none["rule"] == NO_REFERENCE_RULE


def test_zcp_item_scores_on_hand_made_records():
    def rec(oid, variant, draw, correct, p_all, split="C", prompt=None):
        return {"split": split, "variant": variant, "original_id": oid, "id": f"{oid}:{variant}{draw}", "draw": draw,
                "correct": correct, "consistent": correct, "p_first": p_all, "p_all": p_all,
                "prompt_hash": prompt or f"{oid}{variant}{draw}", "gold": "1"}

    records = [rec("a", "original", 0, True, 0.9), rec("a", "reference", 0, False, 0.2),
               rec("a", "reference", 1, True, 0.4),
               rec("b", "original", 0, False, 0.1), rec("b", "reference", 0, True, 0.3),
               rec("b", "reference", 1, True, 0.3, prompt="brep"), rec("b", "reference", 2, True, 0.3, prompt="brep"),
               rec("c", "original", 0, True, 0.5),  # no reference draws: left out
               rec("a", "original", 0, False, 0.0, split="C_leaked")]  # a second split: ignored
    acc = zcp_item_scores(records, "acc")
    assert acc == {"a": pytest.approx(0.5), "b": pytest.approx(-1.0)}
    p_all = zcp_item_scores(records, "p_all")
    assert p_all["a"] == pytest.approx(0.6) and p_all["b"] == pytest.approx(-0.2)  # repeated draw counted once
    with pytest.raises(ValueError):
        zcp_item_scores(records, "bleu")

    # a metric the detection run did not probe (con left out of probe.metrics) is skipped, not scored as 0
    from zcp.validate.detectors import get_detector

    no_con = [{k: v for k, v in r.items() if k != "consistent"} for r in records]
    ctx = DetectorContext(detection_records=no_con)
    assert "no con" in get_detector("zcp_con").skip_reason(ctx)
    assert get_detector("zcp_acc").skip_reason(ctx) is None
    assert "no ZCP detection records" in get_detector("zcp_acc").skip_reason(DetectorContext())


def test_likelihood_text_modes_build_the_scoring_requests():
    """Raw modes score the text after the document prefix; chat modes score the completion after the question."""
    seen: list[ScoreRequest] = []

    class Recorder(TextFake):
        def score(self, requests):
            seen.extend(requests)
            return super().score(requests)

    it = Item("a", "Ann has 5 pens. How many?", "5", solution="5 = 5.")
    for text, prompt_user, chat, cont in (("question", "", False, it.question),
                                          ("question_answer", "", False, it.question + "\n5"),
                                          ("chat_answer", it.question, True, "The final answer is: \\[ \\boxed{5} \\]"),
                                          ("chat_solution", it.question, True,
                                           "5 = 5.\nThe final answer is: \\[ \\boxed{5} \\]")):
        seen.clear()
        rec = get_detector("mink20", text=text).score_items(Recorder({}), [it], DetectorContext())
        assert seen[0].distribution_stats and seen[0].continuation == cont, text
        assert (seen[0].prompt.user, seen[0].prompt.chat) == (prompt_user, chat), text
        assert rec[0]["n_tokens"] == len(cont)
    with pytest.raises(ValueError, match="text must be"):
        get_detector("ppl", text="answer")


def test_split_question_keeps_the_text():
    q = "Ann has 5 pens and buys 3 more pens today."
    prefix, rest = split_question(q, 0.4)
    assert prefix + rest == q and prefix == "Ann has 5 pens" and rest.startswith(" and")
    assert split_question("One", 0.4) is None


# ------------------------------------------------------------------------------------------ the job
class TextFake(FakeBackend):
    """Scores raw text: log p 0.9 per character for memorised texts, 0.1 otherwise; vocabulary stats too."""

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        self._tick("score")
        out = []
        for r in requests:
            p = 0.9 if r.continuation in self.memorised else 0.1 + 0.001 * (len(r.continuation) % 7)
            n = len(r.continuation)
            out.append(ScoreResult(tuple(math.log(p) for _ in range(n)), token_means=(-1.0,) * n,
                                   token_stds=(1.0,) * n))
        return out


def _job(n=6):
    c = [Item(f"c{i}", f"Ann has {i + 2} pens and gets {i + 3} more pens.", str(2 * i + 5)) for i in range(n)]
    u = [Item(f"u{i}", f"Bob has {i + 12} cups and breaks {i + 1} of them.", str(11)) for i in range(n)]
    ref = {it.id: [Item(f"{it.id}r{j}", it.question.replace("pens", f"pen{j}s"), "1") for j in range(2)] for it in c}
    inputs = JobInputs({"data": FileData("data", "C", c, ref), "u": FileData("u", "U", u)}, "m", None, None, None, "t")
    return inputs, {it.question: it.answer for it in c}


def test_resume_after_a_kill_keeps_finished_blocks_and_gives_the_same_summary(tmp_path):
    names = ["ppl", "zlib", "mink20", "minkpp20"]
    inputs, memorised = _job()
    full = baselines(TextFake(memorised), [get_detector(n) for n in names], inputs, tmp_path / "full",
                     DetectorContext(bootstrap_samples=500), "fp")
    assert full["detectors"]["ppl"]["auroc"] == 1.0 and full["detectors"]["ppl"]["files"]["data"]["decision"] is True

    out = tmp_path / "killed"
    dets = [get_detector(n) for n in names]
    # the likelihood pass is cached per run: a fresh context per detector makes every block call the backend
    with pytest.raises(KeyboardInterrupt):
        baselines(TextFake(memorised, fail_after=1), dets, inputs, out, DetectorContext(bootstrap_samples=500), "fp")
    rows = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert {(r["detector"], r["file"]) for r in rows} == {("ppl", "data")}  # the block finished before the kill
    with open(out / "records.jsonl", "a") as f:  # a block cut short by the kill: dropped and redone
        f.write(json.dumps({**rows[0], "file": "u"}) + "\n" + '{"detector": "pp')
    again = TextFake(memorised)
    resumed = baselines(again, dets, inputs, out, DetectorContext(bootstrap_samples=500), "fp")
    # one likelihood pass per file for the unfinished blocks (zlib, Min-K% on data; everything on u)
    assert again.calls["score"] == 2
    assert json.dumps(resumed, sort_keys=True) == json.dumps(full, sort_keys=True)
    rows = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * (len(inputs.files["data"].units(True)) + len(inputs.files["u"].units(True)))

    from zcp.errors import RunDirError

    with pytest.raises(RunDirError, match="holds a baselines run of another configuration"):
        baselines(TextFake(memorised), dets, inputs, out, DetectorContext(), "other-fingerprint")
    with pytest.raises(RunDirError, match="other parameters"):
        baselines(TextFake(memorised), [get_detector("ppl", text="question_answer")], inputs, out,
                  DetectorContext(), "fp")


def test_skipped_detectors_are_listed_with_their_reason(tmp_path):
    inputs, memorised = _job(3)
    s = baselines(TextFake(memorised), [get_detector(n) for n in ("ref", "guided", "zcp_acc")], inputs, tmp_path,
                  DetectorContext(), "fp")
    assert "ref_model.path" in s["detectors"]["ref"]["skipped"]
    assert "data.dataset_name" in s["detectors"]["guided"]["skipped"]
    assert "zcp_records" in s["detectors"]["zcp_acc"]["skipped"]
    assert s["detectors"]["ref"]["auroc"] is None and s["detectors"]["ref"]["files"] == {}


# ------------------------------------------------------------------------------------------ config
def test_compose_baselines_config_and_typed_checks():
    cfg = compose("baselines", "data.path=x.jsonl", "detectors=[ppl,mink20,recon]", "+params.mink20.k=25",
                  "params.recon.temperature=0.7")
    job, params = check_config(cfg)
    assert job.detectors == ["ppl", "mink20", "recon"] and params["mink20"] == {"k": 25}
    assert params["recon"]["temperature"] == 0.7 and params["recon"]["n_samples"] == 16
    assert cfg.ref_model.path is None and cfg.data.u_path is None
    for bad in (["detectors_typo=[ppl]"], ["data.u_pth=x"], ["alpha=high"], ["params.recon.temprature=1"]):
        with pytest.raises(Exception, match=r"override|merging|not in struct"):
            compose("baselines", *bad)
    for overrides, key in ((["detectors=[ppl,nope]"], "unknown detector 'nope'"),
                           (["alpha=2"], "alpha=2"),
                           (["detectors=[dpcc]", "params.dpcc.n_rewrites=0"], "params.dpcc"),
                           (["detectors=[ppl]", "+params.nope.k=1"], "params: unknown detector"),
                           (["detectors=[ppl]", "params.recon.n_samples=0"], "params.recon"),
                           (["data.limit=0"], "data.limit")):
        with pytest.raises(ConfigError, match=key.replace("(", r"\(")):
            check_config(compose("baselines", *overrides))


def test_entry_point_reports_bad_config_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "evaluate/run_baselines.py", "detectors=[ppl,nope]", "data.path=x.jsonl",
                        f"output_dir={tmp_path}"], cwd=REPO, capture_output=True, text=True,
                       env={"WANDB_MODE": "disabled", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "unknown detector 'nope'" in lines[0] and "ppl" in lines[0]
    # bad data: one line naming the file, before any model loads (in-process: the same code path)
    from zcp.config import user_errors
    from zcp.validate.baselines import run_baselines

    with pytest.raises(user_errors(), match=r"nonexistent\.jsonl"):
        run_baselines(compose("baselines", "data.path=/nonexistent.jsonl", "detectors=[ppl]",
                              f"output_dir={tmp_path}", "logger=none"))
    assert not (tmp_path / "config.yaml").exists()
    with pytest.raises(ConfigError, match=r"data\.path cannot be used"):
        run_baselines(compose("baselines", "run_dir=outputs/contaminate/x", "data.path=c.jsonl",
                              "logger=none"))


def test_job_from_data_files_with_references(tmp_path):
    """data.path + data.u_path with reference files, through the entry point's function on the shipped model."""
    from zcp.benchmarks.loaders import save_items
    from zcp.benchmarks.references.registry import reference_draws
    from zcp.benchmarks.wordproblems import generate_word_problems
    from zcp.validate.baselines import run_baselines

    items = generate_word_problems(8, seed=5, id_prefix="w")
    c, u = items[:4], items[4:]
    refs = reference_draws(items, 2, seed=0)
    save_items(tmp_path / "c.jsonl", c)
    save_items(tmp_path / "u.jsonl", u)
    save_items(tmp_path / "c_ref.jsonl", [r for it in c for r in refs[it.id]])
    out = tmp_path / "out"
    s = run_baselines(compose("baselines", f"data.path={tmp_path / 'c.jsonl'}",
                              f"data.u_path={tmp_path / 'u.jsonl'}",
                              f"data.reference_path={tmp_path / 'c_ref.jsonl'}", "detectors=[ppl,mink20]",
                              f"output_dir={out}", "logger=none"))
    assert s["files"]["data"]["n"] == 4 and s["files"]["data"]["n_reference_items"] == 8
    assert s["files"]["u"]["n_reference_items"] == 0
    e = s["detectors"]["ppl"]
    assert e["auroc"] is not None and e["files"]["data"]["p_value"] is not None
    assert e["files"]["u"]["decision"] is None  # U has no reference set
    assert {p.name for p in out.iterdir()} >= {"records.jsonl", "summary.json", "baselines.md", "config.yaml",
                                               "run_fingerprint.json"}
    rows = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * ((4 + 8) + 4)
    assert json.loads((out / "summary.json").read_text())["detectors"]["mink20"]["label"] == "Min-20% Prob"
