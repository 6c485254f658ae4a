"""Probe metrics on a fake backend: definitions, malformed handling, API mode, metric selection."""

import math

import pytest
from fakes import FakeBackend

from zcp.core.items import Item
from zcp.probe.prompts import (
    API_INSTRUCTION,
    ZERO_COT_PREFIX,
    ProbeConfig,
    full_cot_prompt,
    probe_items,
    zero_cot_prompt,
)


def _items():
    return [Item("a", "What is 2+3?", "5"), Item("b", "What is 4+4?", "8"), Item("c", "GARBLE 1+1?", "2")]


def test_prompts():
    cfg = ProbeConfig(user_template="Q: {question}", full_cot_suffix="\nThink step by step.")
    z = zero_cot_prompt("1+1?", cfg)
    assert z.user == "Q: 1+1?" and z.assistant_prefix == ZERO_COT_PREFIX == "The final answer is: \\[ \\boxed{"
    api = zero_cot_prompt("1+1?", cfg, prefill=False)
    assert api.assistant_prefix == "" and api.user.endswith(API_INSTRUCTION)
    assert full_cot_prompt("1+1?", cfg).user == "Q: 1+1?\nThink step by step." and full_cot_prompt("1+1?", cfg).assistant_prefix == ""


def test_all_metrics():
    items = _items()
    fb = FakeBackend(memorised={"What is 2+3?": "5", "What is 4+4?": "9"},
                     truth={"What is 2+3?": "5", "What is 4+4?": "8", "GARBLE 1+1?": "2"})
    recs = probe_items(fb, items, ProbeConfig())
    a, b, c = recs
    assert a["correct"] and a["consistent"] and not a["malformed"] and a["prediction"] == "5"
    assert not b["correct"] and not b["consistent"] and b["prediction"] == "9" and b["cot_correct"]
    # the box was never closed: malformed, counted as wrong and inconsistent, no crash
    assert c["malformed"] and not c["correct"] and not c["consistent"] and c["prediction"] is None
    assert a["p_first"] == pytest.approx(0.9) and a["p_all"] == pytest.approx(0.9)
    # the fake scores one token per character: the answer "5" and the brace closing the box
    assert c["p_all"] == pytest.approx(0.1) and a["n_answer_tokens"] == 2 and a["answer_suffix"] == "}"


def test_p_all_is_geometric_mean_and_p_first_first_token():
    from zcp.backends.base import ScoreResult

    class B(FakeBackend):
        def score(self, requests):
            return [ScoreResult((math.log(0.5), math.log(0.2), math.log(0.8))) for _ in requests]

    rec = probe_items(B({}), [Item("x", "q", "123")], ProbeConfig(metrics=("p_first", "p_all")))[0]
    assert rec["p_first"] == pytest.approx(0.5)
    assert rec["p_all"] == pytest.approx((0.5 * 0.2 * 0.8) ** (1 / 3))


def test_metric_selection_skips_generation():
    fb = FakeBackend({})
    probe_items(fb, _items(), ProbeConfig(metrics=("p_first", "p_all")))
    assert fb.calls == {"score": 1, "generate": 0}
    fb = FakeBackend({})
    recs = probe_items(fb, _items(), ProbeConfig(metrics=("acc",)))
    assert fb.calls == {"score": 0, "generate": 1} and "p_all" not in recs[0] and "consistent" not in recs[0]


def test_api_mode_uses_instruction_and_extracts_box():
    fb = FakeBackend({"What is 2+3?": "5"})
    fb.supports_prefill = False
    fb.supports_logprobs = False
    recs = probe_items(fb, _items()[:2], ProbeConfig(metrics=("acc",)))
    assert recs[0]["correct"] and recs[0]["prediction"] == "5" and not recs[1]["correct"]
    with pytest.raises(ValueError, match=r"p_first/p_all(/[a-z_]+)* need"):  # registered metrics (p_first_norm) too
        probe_items(fb, _items()[:1], ProbeConfig(metrics=("p_all",)))


def test_answer_equivalence_in_acc():
    fb = FakeBackend({"What is 2+3?": "5.0", "What is 4+4?": "\\$8"})
    recs = probe_items(fb, _items()[:2], ProbeConfig(metrics=("acc",)))
    assert recs[0]["correct"] and recs[1]["correct"]


def test_bad_config():
    with pytest.raises(ValueError, match="unknown metric"):
        ProbeConfig(metrics=("bleu",))
