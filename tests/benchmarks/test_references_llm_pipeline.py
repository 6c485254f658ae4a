"""LLM reference pipeline (generator + judges) driven by deterministic scripted backends."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from fractions import Fraction

import pytest

from zcp.backends.base import GenerationRequest, ScoreRequest, ScoreResult
from zcp.benchmarks.references.llm_pipeline import LLMReferencePipeline, parse_proposal
from zcp.core.items import Item


class ScriptedBackend:
    """Replies with `reply(request, n)` where n counts the calls that saw the same user prompt."""

    supports_prefill = True
    supports_logprobs = False

    def __init__(self, name: str, reply: Callable[[GenerationRequest, int], str]) -> None:
        self.name, self.reply = name, reply
        self.requests: list[GenerationRequest] = []
        self._seen: dict[str, int] = defaultdict(int)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[str]:
        out = []
        for r in requests:
            out.append(self.reply(r, self._seen[r.prompt.user]))
            self._seen[r.prompt.user] += 1
            self.requests.append(r)
        return out

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:  # pragma: no cover - unused
        raise NotImplementedError


PROPOSALS = {  # original question -> the generator's reply per attempt
    "Compute 12 + 30.": ["<problem>Compute 15 + 31.</problem><answer>46</answer>"],
    "Compute 7 + 8.": [
        "<problem>Compute 6 + 9.</problem><answer>15</answer>",  # same answer as the original: rejected
        "<problem>Compute 5 + 20, tricky.</problem><answer>25</answer>",  # the second judge disagrees
        "<problem>Compute 6 + 20.</problem><answer>\\boxed{26}</answer>",
    ],
    "Find the value of $x$.": ["I cannot do this."],
}


def _generator(req: GenerationRequest, n: int) -> str:
    original = re.search(r"Original problem:\n(.*)\n\nOriginal answer", req.prompt.user).group(1)
    replies = PROPOSALS[original]
    return replies[min(n, len(replies) - 1)]


def _solver(off_by_one_on_tricky: bool) -> Callable[[GenerationRequest, int], str]:
    def reply(req: GenerationRequest, n: int) -> str:
        problem = req.prompt.user.split("\n\nPlease reason")[0]
        total = sum(int(x) for x in re.findall(r"\d+", problem))
        if off_by_one_on_tricky and "tricky" in problem:
            total += 1
        return f"Adding the numbers gives {total}. So the answer is \\boxed{{{total}}}."
    return reply


ITEMS = [Item("a", "Compute 12 + 30.", "42"), Item("b", "Compute 7 + 8.", "15"),
         Item("c", "Find the value of $x$.", "3")]


def _pipeline(**kw) -> tuple[LLMReferencePipeline, ScriptedBackend, list[ScriptedBackend]]:
    gen = ScriptedBackend("gen", _generator)
    judges = [ScriptedBackend("judge1", _solver(False)), ScriptedBackend("judge2", _solver(True))]
    return LLMReferencePipeline(gen, judges, **kw), gen, judges


def test_accepts_only_when_all_judges_agree_and_keeps_every_verdict():
    pipe, gen, judges = _pipeline(n_attempts=3)
    refs, verdicts = pipe.run(ITEMS, m=1, seed=0)
    assert [(r.id, r.question, r.answer) for r in refs] == [("a::ref0", "Compute 15 + 31.", "46"),
                                                            ("b::ref0", "Compute 6 + 20.", "26")]
    for r in refs:
        assert r.metadata["original_id"] == r.id.split("::")[0] and r.metadata["draw"] == 0
        assert r.metadata["judges"] == ["judge1", "judge2"] and r.metadata["generator"] == "gen"
        assert Fraction(r.metadata["judge_answers"][0]) == Fraction(r.answer) and "\\boxed" in r.solution
    by_item = defaultdict(list)
    for v in verdicts:
        by_item[v["original_id"]].append(v)
    assert [v["accepted"] for v in by_item["a"]] == [True]
    b = by_item["b"]
    assert [v["accepted"] for v in b] == [False, False, True]
    assert b[0]["reason"] == "the proposed answer equals the original answer" and b[0]["judges"] == []
    assert b[1]["reason"] == "only 1 of 2 judges agree (need 2)"
    assert [(j["name"], j["answer"], j["agrees"]) for j in b[1]["judges"]] == [("judge1", "25", True),
                                                                              ("judge2", "26", False)]
    c = by_item["c"]
    assert len(c) == 4 and not any(v["accepted"] for v in c)
    assert c[0]["reason"].startswith("unparseable generator output") and c[0]["raw"] == "I cannot do this."
    assert c[-1]["reason"] == "no accepted proposal in 3 attempts"
    # judges solve the proposed problem, not the original, with a full chain of thought
    assert all("Compute 12 + 30." not in r.prompt.user for j in judges for r in j.requests)
    assert all("\\boxed{}" in r.prompt.user and r.temperature == 0.0 for j in judges for r in j.requests)
    assert len(gen.requests) == 1 + 3 + 3 and all(r.temperature > 0 for r in gen.requests)


def test_min_agree_and_determinism():
    pipe, _, _ = _pipeline(n_attempts=3, min_agree=1)
    refs, _ = pipe.run(ITEMS, m=1, seed=0)
    assert [r.question for r in refs] == ["Compute 15 + 31.", "Compute 5 + 20, tricky."]
    again, _ = _pipeline(n_attempts=3, min_agree=1)[0].run(ITEMS, m=1, seed=0)
    assert [r.to_dict() for r in again] == [r.to_dict() for r in refs]
    with pytest.raises(ValueError, match="min_agree"):
        _pipeline(min_agree=3)
    with pytest.raises(ValueError, match="at least one judge"):
        LLMReferencePipeline(ScriptedBackend("g", _generator), [])


def test_m_draws_are_distinct():
    pipe, _, _ = _pipeline(n_attempts=2)
    refs, verdicts = pipe.run(ITEMS[:1], m=2, seed=0)
    # the generator can only propose one problem for item a: the second draw repeats it and is rejected
    assert [r.id for r in refs] == ["a::ref0"]
    assert any(v["reason"] == "the proposed problem repeats an accepted draw" for v in verdicts)


@pytest.mark.parametrize(("question", "answer", "reason"), [
    ("Compute 12 + 30.", "50", "the proposed problem is the original"),
    ("Compute 12 + 30 .", "42.0", "the proposed answer equals the original answer"),
    ("Compute thirty + 12.", "50", "the numbers did not change"),
    ("Compute 12 + 30 + 1.", "43", "the problem has 3 numbers instead of 2 (structure changed)"),
    ("Compute 13 + 30.", "\\frac{", "is not a parseable math answer"),
    ("Compute 13 + 30.", "I am not sure about it", "is not a parseable math answer"),
    ("Compute 13 + 30.", "\\text{Monday}", None),
    ("Compute 13 + 30.", "43", None),
])
def test_proposal_checks(question, answer, reason):
    pipe, _, _ = _pipeline()
    got = pipe.check_proposal(ITEMS[0], (question, answer))
    assert (got is None) if reason is None else (reason in got)


def test_parse_proposal():
    assert parse_proposal("blah <problem> P? </problem>\n<answer> $\\frac{1}{2}$ </answer>") == ("P?", "\\frac{1}{2}")
    assert parse_proposal("<problem>P?</problem>") is None
    assert parse_proposal("<problem></problem><answer>3</answer>") is None
