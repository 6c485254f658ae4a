"""Paraphrasers: validators (numbers, answer, text), rule-based, template and LLM paraphrasers."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from fractions import Fraction

import pytest

from zcp.backends.base import GenerationRequest, ScoreRequest, ScoreResult
from zcp.benchmarks.paraphrase import Candidate, Paraphraser, check_variant, get_paraphraser, numeric_values
from zcp.benchmarks.paraphrase.llm import parse_output
from zcp.benchmarks.paraphrase.rules import names_in, swap_safe_sentences
from zcp.core.items import Item

JANET = Item(
    id="gsm8k-00000",
    question="Janet’s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for "
             "her friends every day with four. She sells the remainder at the farmers' market daily for $2 per "
             "fresh duck egg. How much in dollars does she make every day at the farmers' market?",
    answer="18",
    solution="Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18 every day "
             "at the farmer’s market.",
)
JAMES = Item(id="gsm8k-00003", answer="540",
             question="James decides to run 3 sprints 3 times a week.  He runs 60 meters each sprint.  How many "
                      "total meters does he run a week?",
             solution="He sprints 3*3=<<3*3=9>>9 times\nSo he runs 9*60=<<9*60=540>>540 meters")


class ScriptedBackend:
    """A deterministic chat model: `reply(request, call_index)` gives each generation; requests are recorded."""

    supports_prefill = True
    supports_logprobs = False

    def __init__(self, reply: Callable[[GenerationRequest, int], str], name: str = "scripted") -> None:
        self.reply, self.name = reply, name
        self.requests: list[GenerationRequest] = []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[str]:
        out = []
        for r in requests:
            out.append(self.reply(r, len(self.requests)))
            self.requests.append(r)
        return out

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:  # pragma: no cover - unused
        raise NotImplementedError


# --------------------------------------------------------------------------------------- validators


def test_numeric_values_reads_digits_words_and_fractions():
    text = "He paid $1,250.50 for 3 boxes, twenty-five pens, two hundred and forty cards, 1/4 of a cake and 25%."
    assert numeric_values(text) == Counter({Fraction("1250.5"): 1, Fraction(3): 1, Fraction(25): 2,
                                            Fraction(240): 1, Fraction(1, 4): 1})
    assert numeric_values("twice as many") == numeric_values("two times as many")


@pytest.mark.parametrize(("variant", "ok", "reason"), [
    ("Ann owns three apples and four pears.", True, None),
    ("Ann owns 3 apples and 5 pears.", False, "numbers changed: missing 4; extra 5"),
    ("Ann owns 3 apples and pears.", False, "numbers changed: missing 4"),
    ("Ann owns 3 apples, 4 pears and 2 plums.", False, "numbers changed: extra 2"),
    ("ann has 3 apples   and 4 pears.", False, "identical to the original"),
    ("", False, "empty variant"),
])
def test_check_variant_rejects_changed_numbers_and_unchanged_text(variant, ok, reason):
    check = check_variant("Ann has 3 apples and 4 pears.", variant)
    assert check.ok is ok and check.reason == reason
    if variant:
        assert 0.0 <= check.rouge_l <= 1.0 and 0.0 <= check.bleu <= 100.0


def test_check_variant_rejects_a_changed_answer_and_reports_similarity():
    assert not check_variant("Ann has 3 apples.", "Ann owns 3 apples.", original_answer="18", answer="19").ok
    assert check_variant("Ann has 3 apples.", "Ann owns 3 apples.", original_answer="18", answer="18.0").ok
    same = check_variant("Ann has 3 apples and 4 pears today.", "Ann has 3 apples and 4 pears now.")
    far = check_variant("Ann has 3 apples and 4 pears today.", "Four pears and 3 apples belong to Ann.")
    assert same.rouge_l > far.rouge_l and same.bleu > far.bleu


# --------------------------------------------------------------------------------------------- rules


def test_rules_paraphraser_gives_k_valid_variants_with_consistent_names():
    para = get_paraphraser("rules")
    variants = para.paraphrase(JANET, k=6, seed=0)
    assert len(variants) == 6
    assert len({v.question for v in variants}) == 6
    for j, v in enumerate(variants):
        assert v.id == f"gsm8k-00000::para{j}"
        assert v.metadata["original_id"] == JANET.id and v.metadata["variant"] == j
        assert v.metadata["paraphraser"] == "rules" and 0 < v.metadata["rougeL"] < 1 and v.metadata["bleu"] > 0
        assert v.answer == JANET.answer and v.question != JANET.question
        assert numeric_values(v.question) == numeric_values(JANET.question)
        assert v.question.rstrip().endswith("?")
        new_names = names_in(v.question)
        if "Janet" not in v.question:  # the name was swapped: the solution follows
            assert new_names and new_names[0] in v.solution and "Janet" not in v.solution
    assert para.paraphrase(JANET, k=6, seed=0) == variants  # deterministic
    assert [v.question for v in para.paraphrase(JANET, k=6, seed=1)] != [v.question for v in variants]


def test_sentence_order_is_only_changed_where_safe():
    import random

    same_actor = "Tom had 5 apples. Tom ate 2 apples. Tom found 4 more. How many apples does Tom have?"
    assert swap_safe_sentences(same_actor, random.Random(0)) is None  # events of one actor do not commute
    facts = "Toulouse has 2 sheep. Charleston has 4 sheep. Paris has 6 sheep. How many sheep are there?"
    out = swap_safe_sentences(facts, random.Random(0))
    assert out is not None and out.endswith("How many sheep are there?") and out != facts
    anaphora = "Ann has 5 pens. She gives 2 to Ben. Ben has 3 pens. How many pens does Ben have now?"
    for seed in range(5):
        out = swap_safe_sentences(anaphora, random.Random(seed))
        assert out is None or out.index("She gives") > out.index("Ann has")


class _NumberChanger(Paraphraser):
    name = "changer"

    def propose(self, item: Item, n: int, seed: int, round_: int) -> list[Candidate]:
        bad = re.sub(r"\d+", lambda m: str(int(m.group(0)) + 1), item.question, count=1)
        return [Candidate("Let us see. " + item.question), Candidate(bad)][:n]


def test_validator_rejects_a_variant_that_changes_a_number_and_reports_the_shortfall():
    para = _NumberChanger(max_rounds=2)
    out = para.paraphrase(JAMES, k=2, seed=0)
    assert [v.question for v in out] == ["Let us see. " + JAMES.question]
    reasons = [r["reason"] for r in para.rejections]
    assert "numbers changed: missing 3; extra 4" in reasons
    assert "duplicate of another variant" in reasons  # round 2 proposes the accepted text again
    assert reasons[-1] == "only 1 of 2 valid variants"
    report = para.report()
    assert report["accepted"] == 1 and report["rejected"] == 2 and report["short"] == 1


def test_unknown_paraphraser_name():
    with pytest.raises(KeyError, match="unknown paraphraser"):
        get_paraphraser("nope")


# ------------------------------------------------------------------------------------------ template


def test_template_paraphraser_uses_the_rewording_templates():
    from zcp.benchmarks.wordproblems import generate_word_problems

    item = generate_word_problems(1, seed=3)[0]
    variants = get_paraphraser("template").paraphrase(item, k=3, seed=0)
    assert len(variants) == 3
    for j, v in enumerate(variants):
        assert v.id == f"{item.id}::para{j}" and v.answer == item.answer
        assert numeric_values(v.question) == numeric_values(item.question) and v.question != item.question


def test_template_paraphraser_validates_what_the_generator_returns(monkeypatch):
    import zcp.benchmarks.wordproblems as wp

    def fake_reword(item: Item, k: int, seed: int) -> list[Item]:
        return [Item(f"{item.id}::para0", "Ann has 3 pens and buys 9 more.", item.answer),  # a number changed
                Item(f"{item.id}::para1", "Ann owns 3 pens and then buys 4 more.", item.answer)][:k]

    monkeypatch.setattr(wp, "reword_word_problem", fake_reword)
    item = Item("wp-1", "Ann has 3 pens and buys 4 more.", "7")
    para = get_paraphraser("template")
    out = para.paraphrase(item, k=2, seed=0)
    assert [v.question for v in out] == ["Ann owns 3 pens and then buys 4 more."]
    assert out[0].id == "wp-1::para0" and out[0].metadata["paraphraser"] == "template"
    assert any(r["reason"] == "numbers changed: missing 4; extra 9" for r in para.rejections)


# ----------------------------------------------------------------------------------------------- LLM


def _llm_reply(req: GenerationRequest, call: int) -> str:
    if call == 0:  # changes a number: rejected
        return "<problem>Some sprinter runs 4 sprints 3 times weekly, 60 meters each. Weekly meters?</problem>" \
               "<solution>3*3=9, 9*60=540</solution>"
    if call == 1:  # no tags at all: rejected as unparseable
        return "Sure! Here is the problem rewritten."
    pace = ["briskly", "steadily", "swiftly", "calmly"][call % 4]
    return (f"<problem>Every week, a runner named Max {pace} does 3 sprints, 3 times, each 60 meters long. "
            "What distance does he cover per week?</problem>\n<solution>He sprints 3*3=<<3*3=9>>9 times\n"
            "So he runs 9*60=<<9*60=540>>540 meters</solution>")


def test_llm_paraphraser_validates_retries_and_seeds_each_request():
    backend = ScriptedBackend(_llm_reply)
    para = get_paraphraser("llm", backend=backend, temperature=0.9, max_rounds=3)
    out = para.paraphrase(JAMES, k=2, seed=5)
    assert len(out) == 2  # two rejected in round 0, resampled in round 1
    reasons = [r["reason"] for r in para.rejections]
    assert reasons[0].startswith("numbers changed") and reasons[1].startswith("unparseable output")
    assert len(backend.requests) == 4
    assert all(r.temperature == 0.9 for r in backend.requests)
    assert len({r.seed for r in backend.requests}) == 4  # every sample has its own seed
    assert "Keep every number exactly" in backend.requests[0].prompt.user
    assert JAMES.question in backend.requests[0].prompt.user and JAMES.solution in backend.requests[0].prompt.user
    for v in out:
        assert v.metadata["paraphraser"] == "llm" and "Max" in v.question and v.answer == "540"
        assert v.solution.startswith("He sprints 3*3")


def test_parse_output_takes_the_tagged_text():
    assert parse_output("x <problem> A b? </problem> y") == "A b?"
    assert parse_output("<problem>Unclosed text") == "Unclosed text"
    assert parse_output("<problem>Q?</problem><solution>S</solution>", "solution") == "S"
    assert parse_output("nothing here") is None
