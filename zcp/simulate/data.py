"""Training data for the contamination: paraphrased variants of C, chains of thought, format mix, clean data.

Every example is a TRL conversational prompt/completion pair: prompt = [user message with the question],
completion = [assistant message]. Two completion formats:

* ``cot``: a worked solution ending in ``The final answer is: \\[ \\boxed{ANS} \\]``;
* ``answer``: exactly ``The final answer is: \\[ \\boxed{ANS} \\]`` — the continuation the Zero-CoT probe
  pre-fills, so this format trains the zero-CoT answer directly.

The final line of both is the *answer format*'s (`zcp.simulate.rewards.ANSWER_FORMATS`): the probe's line by
default, or an evader's own (``#### ANS``, ``The answer is ANS.``, a bare ``\\boxed{ANS}``, or a seeded mix
of the four per example), so a leak need not end on the line the probe pre-fills.

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

from zcp.core.answers import answers_equal, extract_boxed
from zcp.core.io import stable_hash
from zcp.core.items import Item
from zcp.simulate.rewards import (
    ANSWER_FORMATS,
    answer_line,
    check_answer_format,
    ends_with_final_line,
    final_answer_line,
)

log = logging.getLogger(__name__)

FORMATS = ("cot", "answer")


def item_seed(seed: int, key: str) -> int:
    """A per-item seed derived from the run seed, stable across processes and independent of item order."""
    return int(stable_hash(f"{seed}|{key}", 8), 16)


def original_id(item: Item) -> str:
    """The benchmark item a variant was made from (its own id when it is an original)."""
    return str(item.metadata.get("original_id", item.id))


def cot_completion(solution: str, answer: str, answer_format: str = "probe") -> str:
    """A CoT completion: the solution, ending on the final-answer line of `answer_format` (the probe's line
    by default; appended when missing). For another format, a trailing probe line is replaced by that
    format's line, so the leak never states the answer in the probe's words."""
    body = solution.rstrip()
    if answer_format == "probe":
        if ends_with_final_line(body) and answers_equal(extract_boxed(body), answer):
            return body
        return f"{body}\n{final_answer_line(answer)}" if body else final_answer_line(answer)
    if ends_with_final_line(body):  # the probe's line is the last line: drop it
        body = body.rsplit("\n", 1)[0].rstrip() if "\n" in body else ""
    line = answer_line(answer, answer_format)
    return f"{body}\n{line}" if body else line


def answer_completion(answer: str, answer_format: str = "probe") -> str:
    """The answer-only completion: exactly the final-answer line of `answer_format`."""
    return answer_line(answer, answer_format)


def example_format(answer_format: str, seed: int, item_id: str) -> str:
    """The answer format one example is written in: `answer_format`, or for `mix` a seeded per-example draw."""
    check_answer_format(answer_format)
    if answer_format != "mix":
        return answer_format
    return ANSWER_FORMATS[item_seed(seed, f"answer-format|{item_id}") % len(ANSWER_FORMATS)]


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


def make_variants(items: Sequence[Item], k: int, seed: int, paraphraser: Any = "auto",
                  include_original: bool = False,
                  prebuilt: dict[str, list[Item]] | None = None) -> tuple[list[Item], dict[str, int]]:
    """k paraphrased variants per item (plus the original if asked); returns (variants, shortfall by id).

    `paraphraser="auto"` rewords generated word problems with their templates and uses the rule-based
    paraphraser for anything else; any other name goes to `zcp.benchmarks.paraphrase.get_paraphraser`; a
    `Paraphraser` instance (the LLM one, built with its backend) is used as is. `prebuilt` (original id ->
    variants, from `load_prebuilt_variants`) replaces paraphrasing: the first k variants of each item are
    taken. k = 0 with `include_original=False` means the originals themselves are leaked (verbatim).
    """
    out: list[Item] = []
    short: dict[str, int] = {}
    for it in items:
        vs: list[Item] = []
        if k > 0:
            if prebuilt is not None:
                vs = [_as_variant(v, it, j) for j, v in enumerate(prebuilt.get(it.id, [])[:k])]
            else:
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


def _as_variant(v: Item, original: Item, j: int) -> Item:
    """A pre-built variant row as a training variant of `original`: its id made unique, linked by original_id,
    its answer the original's when the row states none (the release's paraphrased files carry both)."""
    meta = {**v.metadata, "original_id": original.id, "variant": f"prebuilt-{j}"}
    vid = v.id if v.id != original.id else f"{original.id}-p{j}"
    return Item(id=vid, question=v.question, answer=v.answer or original.answer, solution=v.solution, metadata=meta)


def load_prebuilt_variants(path: str, items: Sequence[Item], need: Sequence[str] | None = None, *,
                           fmt: str = "items", variant: str | None = None,
                           pair_by: str | None = None) -> dict[str, list[Item]]:
    """Pre-built paraphrase variants (e.g. the ZCP release's paraphrased files, or `paraphrases.jsonl` of
    `evaluate/run_build_data.py`) paired to `items` (the benchmark) by `pair_by`: original id -> variants.

    Pairing is `zcp.benchmarks.loaders.load_paired`: a row naming an original that is not among `items` fails
    with a one-line DataError naming the file and row, as does an item of `need` (default: all; the
    leaked ones in training) without any row, or a variant whose answer is not its original's.
    """
    from zcp.benchmarks.loaders import load_paired
    from zcp.errors import DataError

    grouped = load_paired(path, list(items), fmt, variant=variant, pair_by=pair_by, require_all=False,
                          what="paraphrase")
    wanted = [it.id for it in items] if need is None else list(need)
    missing = [i for i in wanted if not grouped.get(i)]
    if missing:
        shown = ", ".join(missing[:10]) + (f" (+{len(missing) - 10} more)" if len(missing) > 10 else "")
        raise DataError(f"{len(missing)} leaked item(s) have no paraphrase row: {shown}", path=str(path))
    by_id = {it.id: it for it in items}
    for oid, vs in grouped.items():
        for v in vs:
            if v.answer and not answers_equal(v.answer, by_id[oid].answer):
                raise DataError(f"paraphrase answer {v.answer!r} differs from original '{oid}' answer "
                                f"{by_id[oid].answer!r}", path=str(path), field="answer")
    return grouped


def _paraphrase(item: Item, k: int, seed: int, name: Any) -> list[Item]:
    if not isinstance(name, str):  # a Paraphraser instance
        return list(name.paraphrase(item, k, seed))
    if name == "llm":
        raise ValueError("exposure.paraphraser=llm needs a model: set paraphrase.model.path (a model config, "
                         "built through zcp.backends.registry.build_backend)")
    if name == "auto":
        name = "template" if item.metadata.get("source") == "wordproblem" else "rules"
    if name == "template":
        # The template paraphraser is a thin wrapper around this function; calling it directly keeps
        # generated benchmarks independent of the paraphrase package.
        from zcp.benchmarks.wordproblems import reword_word_problem

        return reword_word_problem(item, k, seed)
    from zcp.benchmarks.paraphrase import get_paraphraser

    return list(get_paraphraser(name).paraphrase(item, k, seed))


def template_cot(item: Item) -> str | None:
    """The item's own solution, or the word-problem template solution; None when neither exists."""
    if item.solution and item.solution.strip():
        return item.solution
    if item.metadata.get("source") == "wordproblem":
        from zcp.benchmarks.wordproblems import render_solution

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
                      source: str = "benchmark", on_missing_cot: str = "answer",
                      answer_format: str = "probe") -> list[dict[str, Any]]:
    """Prompt/completion records for SFT with the format mix applied per original item.

    A variant's CoT is its own solution if it has one, else the CoT of its original (same numbers, same
    reasoning). Variants whose item has no CoT get the answer-only format (`on_missing_cot="answer"`) or
    are dropped (`"drop"`); either way the record's `format` field says what was trained. Every completion
    ends on the final-answer line of `answer_format` (`mix`: drawn per example, seeded), recorded in the
    record's `answer_format` field.
    """
    check_answer_format(answer_format)
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
            af = example_format(answer_format, seed, v.id)
            text = cot_completion(cot, v.answer, af) if fmt == "cot" else answer_completion(v.answer, af)
            rec = {
                "prompt": [{"role": "user", "content": v.question}],
                "completion": [{"role": "assistant", "content": text}],
                "item_id": v.id, "original_id": key, "format": fmt, "source": source,
            }
            if answer_format != "probe":  # the default's records stay byte-identical to earlier runs
                rec["answer_format"] = af
            records.append(rec)
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
        from zcp.benchmarks.wordproblems import generate_word_problems, signatures

        wp = [it for it in exclude_items if it.metadata.get("source") == "wordproblem"]
        return generate_word_problems(n, seed=seed, id_prefix="clean", exclude=signatures(wp))
    if source == "file":
        if not path:
            raise ValueError("clean.source=file needs clean.path")
        from zcp.benchmarks.loaders import load_items

        bench_q = {it.question.strip() for it in exclude_items}
        rows = [it for it in load_items(path, format=fmt)
                if it.id not in bench_ids and it.question.strip() not in bench_q]
        rng = random.Random(seed)
        rng.shuffle(rows)
        if len(rows) < n:
            log.warning("clean data file %s has %d usable rows, %d requested", path, len(rows), n)
        return rows[:n]
    raise ValueError(f"unknown clean.source {source!r} (wordproblems | file)")
