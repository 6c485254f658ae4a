"""The GSM8K reference builder (`build_gsm8k_references`), its special-case rules (`special_case_reasons`),
and reading GSM8K rows (`gsm8k_item`, `perturb_gsm8k_file`). Part of `zcp.benchmarks.references.gsm8k`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from zcp.benchmarks.loaders.rows import generated_id
from zcp.benchmarks.references.gsm8k.answer_class import is_special, significant_lead
from zcp.benchmarks.references.gsm8k.pool import (
    DrawPool,
    PerturbResult,
    choose_draws,
    collect_draws,
    perturb_gsm8k,
    top_up,
)
from zcp.benchmarks.references.gsm8k.program import _analyse
from zcp.benchmarks.references.gsm8k.quantities import format_number
from zcp.benchmarks.references.gsm8k.transport import balance_structure, lead_transport
from zcp.core.io import read_jsonl
from zcp.core.items import Item
from zcp.errors import DataError


def special_case_reasons(item: Item, m: int = 9, seed: int = 0, scan: bool = False) -> list[str]:
    """Why a GSM8K item is inherently not exchangeable with any reference: [] for most items.

    Rules (no draws needed): an answer of 0, 1, 10, 100 or 1000 (`is_special`: the answer must change,
    and a clean model gives special values more mass than ordinary ones); equal question numbers that fix
    the answer (they are one variable, and the answer does not change when it does: "12 + 12 = 24
    shared among 12" -> 2, x - x, x / x). With `scan`, also what the item's draws show (`collect_draws`
    with m and seed): no valid draw keeps the answer's form (`keeps_answer_form`), e.g. a round answer
    with no round alternative. The benchmark builder finds these while building, and also leaves out an
    item whose leading digit no draw keeps when the benchmark cannot balance it (`lead_transport`).
    Items whose chain cannot be used at all are not special cases (their rejection names the reason).
    """
    reasons: list[str] = []
    try:
        answer = Fraction(str(item.answer).strip().replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return reasons
    if is_special(answer):
        reasons.append(f"the answer {format_number(answer)} is a special value (0, 1, 10, 100, 1000): "
                       "every reference changes it")
    try:
        an = _analyse(item, strict=False)
    except ValueError:
        return reasons
    perturbable = set(an.free) | set(an.dependent)
    if not an.answer_vars & perturbable:
        equal = [an.variables[vi] for vi in sorted(an.used & perturbable) if len(an.variables[vi].occurrences) > 1]
        if equal:
            v = equal[0]
            reasons.append(f"the equal question numbers {format_number(v.value)} ({len(v.occurrences)} times) fix "
                           f"the answer at {format_number(an.chain.answer)}: no reference changes it")
    if scan and not reasons:
        res = choose_draws(collect_draws(item, m, seed), special_cases="drop", fill=False, structure="require")
        reasons += res.special_case
    return reasons


def build_gsm8k_references(items: Sequence[Item], m: int, seed: int = 0, special_cases: str = "drop",
                           flagged: dict[str, list[str]] | None = None,
                           progress: Callable[[Sequence[Item], str], Any] | None = None
                           ) -> tuple[dict[str, list[Item]], list[dict[str, Any]], dict[str, Any]]:
    """References of a GSM8K benchmark: (draws by original id, rejections, report).

    Every item's draws are collected first (`collect_draws`); the items whose leading digit must change
    (`DrawPool.lead_by_flow`) get their new digits from one `lead_transport` per class (one-digit, round
    two-digit, leading digit fixed by the program), and each item's draws are chosen without filling
    (`choose_draws`, fill=False); an item left with fewer than m draws in its answer's class is topped up with
    draws of other leading digits, in the same transport (`top_up`). `flagged`: ids of items that are special
    cases by rule
    (`special_case_reasons`) and were kept: their draws' metadata names the reasons. Special cases found
    here (no draw keeps the answer's form; a leading digit the transport cannot balance) are dropped (a
    rejection prefixed "special case (reference.special_cases=drop): ") or kept with flagged draws.
    """
    flagged = flagged or {}
    pools: dict[str, DrawPool] = {}
    results: dict[str, PerturbResult] = {}
    flow: dict[str, DrawPool] = {}
    for it in (progress(items, "reference (gsm8k)") if progress else items):
        pool = pools[it.id] = collect_draws(it, m, seed)
        if pool.lead_by_flow:
            flow[it.id] = pool
        else:
            results[it.id] = choose_draws(pool, special_cases=special_cases, fill=False, structure="require")
    counts: dict[str, dict[int, int]] = {}
    left_out: dict[str, str] = {}
    for p in flow.values():
        p.validate_alt()
    ids = [i for i, p in flow.items() if p.lead_capacity(clean=True)]
    # items with fewer than m draws in their class are topped up with draws of other leading digits, balanced
    # in the same transport (`top_up`)
    short = [i for i, r in results.items() if 0 < len(r.picks) < m and not r.special_case]
    for i in short:
        pools[i].validate_alt()
    short = [i for i in short if pools[i].lead_capacity(clean=True)]
    rows = [(significant_lead(pools[i].answer), pools[i].lead_capacity(clean=True)) for i in [*ids, *short]]
    kept = [0] * len(ids) + [len(results[i].picks) for i in short]
    got, flow_report = lead_transport(rows, m, range(1, 10), drop_unbalanced=special_cases == "drop", kept=kept)
    for i, c in zip(short, got[len(ids):], strict=True):
        results[i] = top_up(pools[i], results[i], c or {})
    flow_report["topped_up"] = sum(1 for c in got[len(ids):] if c)
    got, rows = got[:len(ids)], rows[:len(ids)]
    flow_report["by_class"] = dict(sorted(Counter(flow[i].flexible or "leading digit fixed by the program"
                                                  for i in ids).items()))
    for i, (own, _), c in zip(ids, rows, got, strict=True):
        if c is None:
            left_out[i] = (f"no draw keeps the answer's leading digit {own}, and the other references cannot "
                           "balance the leading digits without it")
        else:
            counts[i] = c
    for i, pool in flow.items():
        if i in left_out:
            results[i] = PerturbResult(i, reason=left_out[i], attempts=pool.attempts, special_case=[left_out[i]])
        else:
            results[i] = choose_draws(pool, counts.get(i), special_cases=special_cases, fill=False,
                                      structure="require")
    balance = balance_structure(results, pools)
    refs: dict[str, list[Item]] = {}
    rejections: list[dict[str, Any]] = []
    found = {"kept": 0, "dropped": 0, "leading digit balanced by transport": len(counts),
             "left out by the transport": len(left_out)}
    for it in items:
        res = results[it.id]
        if res.special_case:
            found["dropped" if special_cases == "drop" else "kept"] += 1
        draws = list(res.items)
        if it.id in flagged:
            draws = [Item(id=r.id, question=r.question, answer=r.answer, solution=r.solution,
                          metadata={**r.metadata,
                                    "special_case": [*flagged[it.id], *r.metadata.get("special_case", [])]})
                     for r in draws]
        if draws:
            refs[it.id] = draws
        if res.special_case and special_cases == "drop":
            rejections.append({"id": it.id, "row": it.metadata.get("row"), "kept": 0,
                               "reason": "special case (reference.special_cases=drop): " + "; ".join(res.special_case)})
        elif res.reason:
            rejections.append({"id": it.id, "row": it.metadata.get("row"), "reason": res.reason, "kept": len(draws)})
    return refs, rejections, {"found_by_draws": found, "lead_transport": flow_report, "structure_balance": balance}


def gsm8k_item(row: dict[str, Any], index: int, path: str | None = None) -> Item:
    """The Item of one GSM8K row (0-based index), the convention of `zcp.benchmarks.loaders` (format gsm8k)."""
    q, a = row.get("question"), row.get("answer")
    if not isinstance(q, str) or not q.strip():
        raise DataError("missing or empty", path=path, row=index + 1, field="question")
    if not isinstance(a, str) or "####" not in a:
        raise DataError("no '#### <final answer>' marker", path=path, row=index + 1, field="answer")
    if a.count("####") > 1:  # as the loader (zcp.benchmarks.loaders.rows): the gold answer would be a guess
        raise DataError(f"{a.count('####')} '####' markers (one final answer expected)", path=path, row=index + 1,
                        field="answer")
    solution, _, final = a.rpartition("####")
    final = final.strip().replace(",", "")
    if not final:
        raise DataError("empty final answer after '####'", path=path, row=index + 1, field="answer")
    meta: dict[str, Any] = {"row": index + 1}
    if path:
        meta["source_file"] = Path(path).name
    item_id = row.get("id") or generated_id("gsm8k", Path(path).stem if path else None, index)
    return Item(id=str(item_id), question=q, answer=final, solution=solution.strip(), metadata=meta)


def gsm8k_answer_text(item: Item) -> str:
    """The item's solution in GSM8K's own format, ending with ``#### answer``."""
    return f"{(item.solution or '').rstrip()}\n#### {item.answer}"


def perturb_gsm8k_file(path: str | Path, m: int, seed: int) -> tuple[list[Item], list[dict[str, Any]]]:
    """Perturb every row of a GSM8K JSONL file; returns (reference items, rejections with file/row/reason).

    Row by row with `perturb_gsm8k`'s defaults (special cases kept, short items filled, no benchmark-level
    matching: for that, `build_gsm8k_references`). Every row with fewer than m draws gets a rejection (its
    partial draws are still returned, counted in `kept`), and so does every unreadable row: nothing is
    dropped silently.
    """
    path = str(path)
    refs: list[Item] = []
    rejections: list[dict[str, Any]] = []
    for index, row in enumerate(read_jsonl(path)):
        try:
            item = gsm8k_item(row, index, path)
        except DataError as e:
            rejections.append({"file": path, "row": index + 1, "id": generated_id("gsm8k", Path(path).stem, index),
                               "reason": str(e), "kept": 0})
            continue
        res = perturb_gsm8k(item, m, seed)
        refs.extend(res.items)
        if res.reason is not None:
            rejections.append({"file": path, "row": index + 1, "id": item.id, "reason": res.reason,
                               "kept": len(res.items)})
    return refs, rejections
