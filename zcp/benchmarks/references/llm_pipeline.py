"""Reference items for benchmarks without a program (MATH / Omni-MATH): propose with one model, verify with others.

This is the ZCP paper's pipeline (Appendix B) behind zcp's `Backend` interface:

1. a *generator* model gets the original problem and answer and proposes a perturbed problem (numbers
   changed, same structure and reasoning) with its new answer, in a tagged, parseable format;
2. the proposal is checked mechanically: it parses, the answer is a parseable math answer that differs
   from the original (`answers_equal`), the text differs, the numbers changed, and (by default) the
   problem still has as many numbers as the original;
3. independent *judge* models solve the proposed problem with a full chain of thought and a
   ``\\boxed{}`` answer; the proposal is accepted only when (by default) every judge's answer equals the
   proposed answer;
4. otherwise the item is retried with a new sampling seed, up to `n_attempts` times.

Every attempt leaves a verdict (proposal, each judge's answer and agreement, accept/reject reason), so
the reference set can be audited. The answers are only as good as the judges: use strong models.

Running with real models (local transformers models; any `Backend` works, e.g. an OpenAI-compatible
endpoint wrapped as a backend)::

    python evaluate/run_build_data.py data=omnimath reference=llm \\
        reference.generator.path=Qwen/Qwen2.5-72B-Instruct \\
        'reference.judges=[{path: Qwen/Qwen2.5-Math-72B-Instruct}, {path: deepseek-ai/DeepSeek-R1-Distill-Qwen-32B}]'

or from Python: ``LLMReferencePipeline(generator, [judge1, judge2]).run(items, m=1, seed=0)``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from zcp.backends.base import Backend, GenerationRequest, Prompt
from zcp.benchmarks.paraphrase.validate import numeric_values
from zcp.core.answers import answers_equal, extract_boxed, is_parsable
from zcp.core.io import stable_hash
from zcp.core.items import Item

GENERATOR_SYSTEM = "You are an expert author of competition mathematics problems."
GENERATOR_PROMPT = """Create a new version of the math problem below by changing its numerical values.

Requirements:
- Change the numbers (keep each one in the same order of magnitude), and nothing else: keep exactly the same structure, logic, reasoning steps and difficulty.
- The new problem must be well posed and have a single final answer, different from the original answer.
- Solve the new problem carefully and give its exact final answer.

Original problem:
{question}

Original answer: {answer}

Reply in exactly this format and nothing else:
<problem>the new problem</problem>
<answer>the final answer of the new problem, as a number or a LaTeX expression</answer>"""
JUDGE_PROMPT = "{question}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."

_PROBLEM_RE = re.compile(r"<problem>\s*(.*?)\s*</problem>", re.DOTALL | re.IGNORECASE)
_ANSWER_RE = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL | re.IGNORECASE)


def parse_proposal(text: str) -> tuple[str, str] | None:
    """(problem, answer) from a generator reply in the tagged format; None when either part is missing."""
    p, a = _PROBLEM_RE.search(text), _ANSWER_RE.search(text)
    if p is None or a is None or not p.group(1).strip() or not a.group(1).strip():
        return None
    answer = a.group(1).strip()
    boxed = extract_boxed(answer)
    if boxed:
        answer = boxed
    return p.group(1).strip(), answer.strip().strip("$").strip()


def _looks_like_answer(answer: str) -> bool:
    """A final answer, not prose or a fragment: balanced braces, some digit or letter, at most two plain
    words outside \\text{}, and parseable by math-verify."""
    if answer.count("{") != answer.count("}") or not re.search(r"[A-Za-z0-9]", answer) or len(answer) > 300:
        return False
    plain = re.sub(r"\\(?:text|mathrm|textbf|mbox)\{[^{}]*\}|\\[A-Za-z]+", " ", answer)
    if len(re.findall(r"\b[A-Za-z]{3,}\b", plain)) > 2:
        return False
    return is_parsable(answer)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


@dataclass
class LLMReferencePipeline:
    """Generator + judges; `run(items, m, seed)` returns (reference items, per-attempt verdicts)."""

    generator: Backend
    judges: Sequence[Backend]
    n_attempts: int = 3
    min_agree: int | None = None  # judges that must agree with the proposal; None: all of them
    generator_prompt: str = GENERATOR_PROMPT
    generator_system: str | None = GENERATOR_SYSTEM
    judge_prompt: str = JUDGE_PROMPT
    generator_temperature: float = 0.7
    judge_temperature: float = 0.0
    generator_max_new_tokens: int = 1024
    judge_max_new_tokens: int = 2048
    require_same_number_count: bool = True
    keep_raw_chars: int = 2000
    verdicts: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.judges:
            raise ValueError("the LLM reference pipeline needs at least one judge model")
        need = len(self.judges) if self.min_agree is None else self.min_agree
        if not 1 <= need <= len(self.judges):
            raise ValueError(f"min_agree must be in 1..{len(self.judges)}, got {self.min_agree}")
        self._need = need

    # ---------------------------------------------------------------------------------------- checks

    def check_proposal(self, item: Item, proposal: tuple[str, str] | None,
                       accepted: Sequence[str] = ()) -> str | None:
        """Why a parsed proposal is unusable before any judge runs; None when it may go to the judges."""
        if proposal is None:
            return "unparseable generator output (needs <problem> and <answer>)"
        question, answer = proposal
        if _norm(question) == _norm(item.question):
            return "the proposed problem is the original"
        if any(_norm(question) == _norm(q) for q in accepted):
            return "the proposed problem repeats an accepted draw"
        if not _looks_like_answer(answer):
            return f"the proposed answer {answer!r} is not a parseable math answer"
        if answers_equal(answer, item.answer):
            return "the proposed answer equals the original answer"
        old, new = numeric_values(item.question), numeric_values(question)
        if old and old == new:
            return "the numbers did not change"
        if self.require_same_number_count and sum(old.values()) != sum(new.values()):
            return f"the problem has {sum(new.values())} numbers instead of {sum(old.values())} (structure changed)"
        return None

    # ------------------------------------------------------------------------------------------ run

    def _seed(self, *parts: Any) -> int:
        return int(stable_hash("|".join(map(str, parts))), 16) % (2**31)

    def run(self, items: Sequence[Item], m: int = 1, seed: int = 0) -> tuple[list[Item], list[dict[str, Any]]]:
        """Up to m accepted reference items per original (ids ``{id}::ref{j}``), and all verdicts.

        Work is batched across items: one generator batch per attempt round, then one batch per judge.
        """
        accepted: dict[str, list[Item]] = {it.id: [] for it in items}
        verdicts: list[dict[str, Any]] = []
        pending = [(it, j) for it in items for j in range(m)]
        for attempt in range(self.n_attempts):
            if not pending:
                break
            prompts = [Prompt(user=self.generator_prompt.format(question=it.question, answer=it.answer),
                              system=self.generator_system) for it, _ in pending]
            replies = self.generator.generate([
                GenerationRequest(prompt=p, max_new_tokens=self.generator_max_new_tokens,
                                  temperature=self.generator_temperature, seed=self._seed(seed, it.id, j, attempt))
                for p, (it, j) in zip(prompts, pending, strict=True)])
            rows: list[dict[str, Any]] = []
            to_judge: list[int] = []
            for n, ((it, j), raw) in enumerate(zip(pending, replies, strict=True)):
                proposal = parse_proposal(raw)
                reason = self.check_proposal(it, proposal, [r.question for r in accepted[it.id]])
                rows.append({"original_id": it.id, "draw": j, "attempt": attempt, "generator": self.generator.name,
                             "proposal": None if proposal is None else {"question": proposal[0], "answer": proposal[1]},
                             "raw": raw[: self.keep_raw_chars], "judges": [], "accepted": False, "reason": reason})
                if reason is None:
                    to_judge.append(n)
            for judge in self.judges:
                outs = judge.generate([
                    GenerationRequest(prompt=Prompt(user=self.judge_prompt.format(
                        question=rows[n]["proposal"]["question"])), max_new_tokens=self.judge_max_new_tokens,
                        temperature=self.judge_temperature,
                        seed=self._seed(seed, "judge", judge.name, rows[n]["original_id"], rows[n]["draw"], attempt))
                    for n in to_judge])
                for n, out in zip(to_judge, outs, strict=True):
                    ans = extract_boxed(out)
                    rows[n]["judges"].append({"name": judge.name, "answer": ans,
                                              "agrees": answers_equal(ans, rows[n]["proposal"]["answer"]),
                                              "solution": out[: self.keep_raw_chars]})
            still: list[tuple[Item, int]] = []
            for n, ((it, j), row) in enumerate(zip(pending, rows, strict=True)):
                if n in to_judge:
                    agree = sum(v["agrees"] for v in row["judges"])
                    ok = agree >= self._need
                    dup = any(_norm(row["proposal"]["question"]) == _norm(r.question) for r in accepted[it.id])
                    if ok and not dup:
                        row["accepted"], row["reason"] = True, f"{agree} of {len(self.judges)} judges agree"
                        accepted[it.id].append(self._item(it, len(accepted[it.id]), row))
                    else:
                        row["reason"] = ("the proposal repeats an accepted draw" if ok else
                                         f"only {agree} of {len(self.judges)} judges agree (need {self._need})")
                verdicts.append(row)
                if not row["accepted"]:
                    still.append((it, j))
            pending = still
        for it, j in pending:
            verdicts.append({"original_id": it.id, "draw": j, "attempt": None, "generator": self.generator.name,
                             "proposal": None, "raw": None, "judges": [], "accepted": False,
                             "reason": f"no accepted proposal in {self.n_attempts} attempts"})
        self.verdicts.extend(verdicts)
        refs = [ref for it in items for ref in accepted[it.id]]
        return refs, verdicts

    def _item(self, item: Item, j: int, row: dict[str, Any]) -> Item:
        agreeing = [v for v in row["judges"] if v["agrees"]]
        return Item(
            id=f"{item.id}::ref{j}", question=row["proposal"]["question"], answer=row["proposal"]["answer"],
            solution=agreeing[0]["solution"] if agreeing else None,
            metadata={"original_id": item.id, "draw": j, "method": "llm", "generator": row["generator"],
                      "judges": [v["name"] for v in row["judges"]],
                      "judge_answers": [v["answer"] for v in row["judges"]], "attempt": row["attempt"]},
        )
