"""Training data for the contamination: paraphrased variants of C, chains of thought, format mix, clean data.

Every example is a TRL conversational prompt/completion pair: prompt = [user message with the question],
completion = [assistant message]. Two completion formats:

* ``cot``: a worked solution ending in ``The final answer is: \\[ \\boxed{ANS} \\]``;
* ``answer``: exactly ``The final answer is: \\[ \\boxed{ANS} \\]`` — the continuation the Zero-CoT probe
  pre-fills, so this format trains the zero-CoT answer directly.

`answer_only_fraction` sets the proportion of answer-only examples (0 = CoT only, 1 = answer only, in
between = both formats for the same items). Assignment is exact (round(n·f) examples) and balanced per
item (each item's k variants get ⌊k·f⌋ or ⌈k·f⌉ answer-only ones).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence
from typing import Any

from zcp.answers import answers_equal, extract_boxed
from zcp.data.schema import Item
from zcp.io import stable_hash
from zcp.training.rewards import ends_with_final_line, final_answer_line

log = logging.getLogger(__name__)

FORMATS = ("cot", "answer")


def item_seed(seed: int, key: str) -> int:
    """A per-item seed derived from the run seed, stable across processes and independent of item order."""
    return int(stable_hash(f"{seed}|{key}", 8), 16)


def original_id(item: Item) -> str:
    """The benchmark item a variant was made from (its own id when it is an original)."""
    return str(item.metadata.get("original_id", item.id))


def cot_completion(solution: str, answer: str) -> str:
    """A CoT completion: the solution, ending on the canonical final-answer line (appended when missing)."""
    body = solution.rstrip()
    if ends_with_final_line(body) and answers_equal(extract_boxed(body), answer):
        return body
    return f"{body}\n{final_answer_line(answer)}" if body else final_answer_line(answer)


def answer_completion(answer: str) -> str:
    """The answer-only completion: exactly the final-answer line."""
    return final_answer_line(answer)


def assign_formats(groups: Sequence[int], answer_only_fraction: float, seed: int) -> list[list[str]]:
    """Formats for `groups[i]` examples of item i: round(n·f) answer-only overall, ⌊⌉ of k·f per item.

    Items are visited in a seeded order and the answer-only slots are spread with an error-diffusion
    (Bresenham) rule, so totals are exact and no item gets all of one format unless f is 0 or 1.
    """
    f = float(answer_only_fraction)
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"answer_only_fraction must be in [0, 1], got {f}")
    rng = random.Random(seed)
    order = list(range(len(groups)))
    rng.shuffle(order)
    out: list[list[str]] = [[] for _ in groups]
    pos = 0
    for i in order:
        fmts = []
        for _ in range(groups[i]):
            take = math.floor((pos + 1) * f + 0.5) > math.floor(pos * f + 0.5)
            fmts.append("answer" if take else "cot")
            pos += 1
        rng.shuffle(fmts)
        out[i] = fmts
    return out


def make_variants(items: Sequence[Item], k: int, seed: int, paraphraser: str = "auto",
                  include_original: bool = False) -> tuple[list[Item], dict[str, int]]:
    """k paraphrased variants per item (plus the original if asked); returns (variants, shortfall by id).

    `paraphraser="auto"` rewords generated word problems with their templates and uses the rule-based
    paraphraser for anything else; any other name goes to `zcp.paraphrase.get_paraphraser`. k = 0 with
    `include_original=False` means the originals themselves are leaked (verbatim contamination).
    """
    out: list[Item] = []
    short: dict[str, int] = {}
    for it in items:
        vs: list[Item] = []
        if k > 0:
            vs = _paraphrase(it, k, item_seed(seed, it.id), paraphraser)
            if len(vs) < k:
                short[it.id] = k - len(vs)
        if include_original or k == 0:
            orig = Item(id=it.id, question=it.question, answer=it.answer, solution=it.solution,
                        metadata={**it.metadata, "original_id": it.id, "variant": "original"})
            vs = [orig, *vs]
        out.extend(vs)
    if short:
        log.warning("paraphraser returned fewer than k=%d variants for %d items", k, len(short))
    return out, short


def _paraphrase(item: Item, k: int, seed: int, name: str) -> list[Item]:
    if name == "auto":
        name = "template" if item.metadata.get("source") == "wordproblem" else "rules"
    if name == "template":
        # The template paraphraser is a thin wrapper around this function; calling it directly keeps
        # generated benchmarks independent of the paraphrase package.
        from zcp.data.wordproblems import reword_word_problem

        return reword_word_problem(item, k, seed)
    from zcp.paraphrase import get_paraphraser

    return list(get_paraphraser(name).paraphrase(item, k, seed))


def template_cot(item: Item) -> str | None:
    """The item's own solution, or the word-problem template solution; None when neither exists."""
    if item.solution and item.solution.strip():
        return item.solution
    if item.metadata.get("source") == "wordproblem":
        from zcp.data.wordproblems import render_solution

        return render_solution(item)
    return None


def synthesize_cots(items: Sequence[Item], teacher: Any | None = None, *, attempts: int = 4,
                    max_new_tokens: int = 512, temperature: float = 0.7, seed: int = 0) -> tuple[dict[str, str], list[str]]:
    """A CoT per item id: own/template solution, else a teacher's (Backend) CoT whose boxed answer is gold.

    The teacher first answers greedily, then samples up to `attempts - 1` more times; only CoTs whose
    `\\boxed{}` answer equals the gold (math-verify equivalence) are kept. Returns (cots, ids without one).
    """
    cots: dict[str, str] = {}
    todo: list[Item] = []
    for it in items:
        sol = template_cot(it)
        if sol is not None:
            cots[it.id] = sol
        else:
            todo.append(it)
    if todo and teacher is not None:
        from zcp.backends.base import GenerationRequest, Prompt

        for a in range(max(1, attempts)):
            if not todo:
                break
            reqs = [GenerationRequest(Prompt(user=it.question), max_new_tokens=max_new_tokens,
                                      temperature=0.0 if a == 0 else temperature,
                                      seed=None if a == 0 else item_seed(seed + a, it.id)) for it in todo]
            outs = teacher.generate(reqs)
            left = []
            for it, text in zip(todo, outs, strict=True):
                if answers_equal(extract_boxed(text), it.answer):
                    cots[it.id] = text
                else:
                    left.append(it)
            todo = left
    return cots, [it.id for it in todo]


def build_sft_records(variants: Sequence[Item], cots: dict[str, str], answer_only_fraction: float, seed: int,
                      source: str = "benchmark", on_missing_cot: str = "answer") -> list[dict[str, Any]]:
    """Prompt/completion records for SFT with the format mix applied per original item.

    A variant's CoT is its own solution if it has one, else the CoT of its original (same numbers, same
    reasoning). Variants whose item has no CoT get the answer-only format (`on_missing_cot="answer"`) or
    are dropped (`"drop"`); either way the record's `format` field says what was trained.
    """
    by_orig: dict[str, list[Item]] = {}
    for v in variants:
        by_orig.setdefault(original_id(v), []).append(v)
    keys = sorted(by_orig)
    formats = assign_formats([len(by_orig[k]) for k in keys], answer_only_fraction, seed)
    records = []
    for key, fmts in zip(keys, formats, strict=True):
        for v, fmt in zip(by_orig[key], fmts, strict=True):
            own = v.solution if v.solution and v.solution.strip() else None
            cot = own or cots.get(v.id) or cots.get(key)
            if fmt == "cot" and cot is None:
                if on_missing_cot == "drop":
                    continue
                fmt = "answer"
            text = cot_completion(cot, v.answer) if fmt == "cot" else answer_completion(v.answer)
            records.append({
                "prompt": [{"role": "user", "content": v.question}],
                "completion": [{"role": "assistant", "content": text}],
                "item_id": v.id, "original_id": key, "format": fmt, "source": source,
            })
    return records


def grpo_records(items: Sequence[Item]) -> list[dict[str, Any]]:
    """GRPO prompts (conversational) with the gold `answer` column the correctness reward reads."""
    return [{"prompt": [{"role": "user", "content": it.question}], "answer": it.answer, "item_id": it.id}
            for it in items]


def clean_items(n: int, seed: int, exclude_items: Sequence[Item], source: str = "wordproblems",
                path: str | None = None, fmt: str = "items") -> list[Item]:
    """`n` non-benchmark items to mix into SFT: fresh generated word problems, or rows of a file.

    Generated ones exclude every benchmark signature (C and U), so clean data never leaks U.
    """
    if n <= 0:
        return []
    bench_ids = {it.id for it in exclude_items}
    if source == "wordproblems":
        from zcp.data.wordproblems import generate_word_problems, signatures

        wp = [it for it in exclude_items if it.metadata.get("source") == "wordproblem"]
        return generate_word_problems(n, seed=seed, id_prefix="clean", exclude=signatures(wp))
    if source == "file":
        if not path:
            raise ValueError("clean.source=file needs clean.path")
        from zcp.data.loaders import load_items

        bench_q = {it.question.strip() for it in exclude_items}
        rows = [it for it in load_items(path, format=fmt)
                if it.id not in bench_ids and it.question.strip() not in bench_q]
        rng = random.Random(seed)
        rng.shuffle(rows)
        if len(rows) < n:
            log.warning("clean data file %s has %d usable rows, %d requested", path, len(rows), n)
        return rows[:n]
    raise ValueError(f"unknown clean.source {source!r} (wordproblems | file)")
