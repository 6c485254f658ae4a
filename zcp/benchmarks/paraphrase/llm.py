"""An LLM paraphraser: a chat model rewrites the problem, keeping every number and the logic.

Any `Backend` works: a local model (`zcp.backends.registry.build_backend(model_cfg)` gives an `HFBackend`) or an
OpenAI-compatible endpoint wrapped as a backend. The prompt follows the spirit of the ZCP paper's
Appendix D (rewrite the text aggressively, keep all numerical values and the logic, do not solve). Each
variant is sampled with temperature and its own seed; a variant that fails validation (a number changed,
the text unchanged, the solution's numbers changed) is retried with a new seed, up to `max_rounds`.

Run with a real model, e.g.::

    python evaluate/run_build_data.py data=gsm8k paraphrase=llm paraphrase.model.path=Qwen/Qwen2.5-7B-Instruct
"""

from __future__ import annotations

import re
from typing import Any

from zcp.backends.base import Backend, GenerationRequest, Prompt
from zcp.benchmarks.paraphrase.base import Candidate, Paraphraser, register_paraphraser
from zcp.core.io import stable_hash
from zcp.core.items import Item

SYSTEM_PROMPT = "You are an expert editor of math word problems."
PROMPT = """Rewrite the following math problem so that its wording is substantially different while its meaning is exactly the same.

Rules:
- Keep every number exactly as it is: the same values, none added, none dropped, none computed.
- Keep the mathematical logic, every quantity and the question asked, so that the answer stays the same.
- You may change the sentence structure, the vocabulary, the order of clauses, and the names of people and objects.
- Do not solve the problem and do not add hints.

Write only the rewritten problem between <problem> and </problem>.

Problem:
{question}"""
SOLUTION_PROMPT = """

Then rewrite its solution below to match your rewritten problem (same names, same steps, every number and the final answer unchanged) and write it between <solution> and </solution>.

Solution:
{solution}"""

_TAG_RE = {tag: re.compile(rf"<{tag}>\s*(.*?)\s*(?:</{tag}>|\Z)", re.DOTALL | re.IGNORECASE)
           for tag in ("problem", "solution")}


def parse_output(text: str, tag: str = "problem") -> str | None:
    """The content of the first <tag>...</tag> (an unclosed tag runs to the end); None if absent or empty."""
    m = _TAG_RE[tag].search(text)
    if m is None:
        return None
    content = m.group(1)
    if tag == "problem":
        content = re.split(r"<solution>", content, flags=re.IGNORECASE)[0]
    content = content.strip().strip('"').strip()
    return content or None


@register_paraphraser("llm")
class LLMParaphraser(Paraphraser):
    """Paraphrases through a chat model (`backend`), sampling each variant with its own seed."""

    def __init__(self, backend: Backend, temperature: float = 0.8, max_new_tokens: int = 768,
                 max_rounds: int = 3, rewrite_solution: bool = True, prompt: str = PROMPT,
                 solution_prompt: str = SOLUTION_PROMPT, system: str | None = SYSTEM_PROMPT,
                 max_rouge_l: float | None = None, **_: Any) -> None:
        super().__init__(max_rounds=max_rounds, max_rouge_l=max_rouge_l)
        self.backend = backend
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.rewrite_solution = rewrite_solution
        self.prompt, self.solution_prompt, self.system = prompt, solution_prompt, system

    def _user(self, item: Item) -> str:
        text = self.prompt.format(question=item.question)
        if self.rewrite_solution and item.solution:
            text += self.solution_prompt.format(solution=item.solution)
        return text

    def propose(self, item: Item, n: int, seed: int, round_: int) -> list[Candidate]:
        """`n` sampled rewrites in one batch; request i of round r is seeded by (seed, item, r, i)."""
        prompt = Prompt(user=self._user(item), system=self.system)
        reqs = [GenerationRequest(prompt=prompt, max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                  seed=int(stable_hash(f"llm-para|{seed}|{item.id}|{round_}|{i}"), 16) % (2**31))
                for i in range(n)]
        out = []
        for text in self.backend.generate(reqs):
            question = parse_output(text, "problem")
            solution = parse_output(text, "solution") if self.rewrite_solution and item.solution else None
            if question is None:
                out.append(Candidate("", error="unparseable output: no <problem> tag"))
            elif self.rewrite_solution and item.solution and solution is None:
                # the original solution may not match a rewritten problem (names, order): retry instead
                out.append(Candidate(question, error="unparseable output: no <solution> tag"))
            else:
                out.append(Candidate(question, solution, None, note="llm"))
        return out
